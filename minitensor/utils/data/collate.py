"""Collation: a list of samples → one batch (default_collate), or one sample's numpy arrays
→ tensors (default_convert, for batch_size=None)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...creation import from_numpy
from ...ops.shape import stack
from ...tensor import Tensor


def default_collate(batch: Sequence[Any]) -> Any:
    """A list of samples → one batch, as torch: tensors stacked along a new axis 0 ((B, …));
    numpy arrays likewise, keeping their dtype; Python floats → float64 (B,), ints → int64,
    bools → bool; strings stay a list; dicts collate key by key, tuples and lists position by
    position (a tuple gives a list, a namedtuple the namedtuple)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(batch, 0)
    if isinstance(elem, (np.ndarray, np.generic)) and elem.dtype.kind not in "OSUV":
        return from_numpy(np.stack(batch))
    if isinstance(elem, (bool, int, float)):
        dtype = bool if isinstance(elem, bool) else np.int64 if isinstance(elem, int) else None
        return from_numpy(np.array(batch, dtype=dtype or np.float64))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, Mapping):
        return _same_type(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a namedtuple
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, Sequence):
        if len({len(sample) for sample in batch}) > 1:
            raise RuntimeError(
                f"default_collate: each element in list of batch should be of equal size; "
                f"got sizes {[len(sample) for sample in batch]}"
            )
        columns = [default_collate(s) for s in zip(*batch)]
        return columns if isinstance(elem, tuple) else _same_type(elem, columns)
    raise TypeError(
        f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
        f"lists; found {type(elem)}"
    )


def _same_type(elem, collated):
    """The collated dict or list as elem's own type where it can be built from one."""
    try:
        return type(elem)(collated)
    except TypeError:
        return collated


def default_convert(data: Any) -> Any:
    """What the DataLoader applies without batching (batch_size=None): numpy arrays become
    tensors, inside tuples (which become lists, as torch), lists and dicts too; everything
    else is left as it is."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "OSUV":
        return from_numpy(data)
    if isinstance(data, Mapping):
        return _same_type(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):  # a list, as torch's (its "backwards compatibility")
        return [default_convert(d) for d in data]
    if isinstance(data, list):
        return _same_type(data, [default_convert(d) for d in data])
    return data
