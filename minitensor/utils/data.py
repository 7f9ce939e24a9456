"""torch.utils.data: datasets, samplers and the DataLoader that turns a dataset into batches.

    dataset[i]  → one sample (anything: a tuple of tensors, a dict, a number)
    sampler     → the order of the indices (SequentialSampler, or RandomSampler to shuffle)
    BatchSampler→ groups the indices into lists of batch_size (drop_last drops a short tail)
    collate_fn  → a list of samples → one batch (default_collate stacks tensors along a new
                  axis 0, recursing into tuples, lists and dicts as torch does)

    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True,
                        generator=mt.Generator().manual_seed(0))
    for xb, yb in loader: ...       # xb (32, *x.shape[1:]), yb (32, *y.shape[1:])

Shuffles draw from `generator=` (an mt.Generator) or, without one, from the shared generator
that mt.manual_seed seeds: the same seed gives the same order every run (numpy's PCG64, so
the order differs from torch's for the same seed). Batches are loaded in the main process:
num_workers must be 0.
"""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .. import random as _random
from ..creation import from_numpy, randint, randperm
from ..ops.shape import stack
from ..tensor import Tensor

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "ConcatDataset",
    "Subset",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "BatchSampler",
    "DataLoader",
    "random_split",
    "default_collate",
    "default_convert",
]


# ------------------------------------------------------------------------------- datasets
class Dataset:
    """A map-style dataset: subclasses define __getitem__(index) → sample and __len__.
    `a + b` concatenates two datasets."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A stream of samples: subclasses define __iter__. The DataLoader reads it in order and
    batches it; it cannot be shuffled or sampled (it has no indices)."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class TensorDataset(Dataset):
    """Sample i is (t[i] for each tensor): tensors (n, …) that share their first size n."""

    def __init__(self, *tensors: Tensor) -> None:
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) > 1:
            raise ValueError(
                f"TensorDataset: size mismatch between tensors: shapes "
                f"{[tuple(t.shape) for t in tensors]} must share their first size"
            )
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after another: index len(a) is b[0]."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            if -index > len(self):
                raise ValueError("ConcatDataset: absolute value of index should not exceed length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(
    dataset: Dataset,
    lengths: Sequence[int | float],
    generator: _random.Generator | None = None,
) -> list[Subset]:
    """Split `dataset` at random into non-overlapping Subsets of the given lengths, or of
    fractions of len(dataset) summing to 1 (floor of each, the remainder handed out one by
    one from the first split on, as torch does)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= n:
        lengths = _fraction_lengths(lengths, n)
    if sum(lengths) != n:
        raise ValueError(
            f"random_split: sum of input lengths {list(lengths)} does not equal the length "
            f"of the input dataset ({n})"
        )
    order = randperm(n, generator=generator).tolist()
    ends = itertools.accumulate(lengths)
    return [Subset(dataset, order[end - k : end]) for end, k in zip(ends, lengths)]


def _fraction_lengths(fractions, n):
    lengths = []
    for i, frac in enumerate(fractions):
        if not 0 <= frac <= 1:
            raise ValueError(f"random_split: fraction at index {i} ({frac}) is not in [0, 1]")
        lengths.append(math.floor(n * frac))
    for i in range(n - sum(lengths)):
        lengths[i % len(lengths)] += 1
    for i, k in enumerate(lengths):
        if k == 0:
            warnings.warn(
                f"random_split: length of split at index {i} is 0; this might result in "
                f"an empty dataset",
                stacklevel=3,
            )
    return lengths


# ------------------------------------------------------------------------------- samplers
class Sampler:
    """An iterable of dataset indices (or, for a batch sampler, of lists of them)."""

    def __init__(self, data_source: Any = None) -> None:
        pass

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """0, 1, …, len(data_source) − 1."""

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A fresh random order of the indices at every iteration (every epoch): a permutation,
    or num_samples draws with replacement=True. Without `generator`, the shared generator
    that mt.manual_seed seeds."""

    def __init__(
        self,
        data_source: Any,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: _random.Generator | None = None,
    ) -> None:
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                f"RandomSampler: num_samples should be a positive integer value, "
                f"but got num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, g = len(self.data_source), self.generator
        if self.replacement:
            return iter(randint(n, (self.num_samples,), generator=g).tolist())
        # num_samples beyond n: whole permutations one after another, as torch
        whole, rest = divmod(self.num_samples, n)
        order = [randperm(n, generator=g).tolist() for _ in range(whole)]
        return itertools.chain(*order, randperm(n, generator=g).tolist()[:rest])

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a fresh random order at every iteration."""

    def __init__(self, indices: Sequence[int], generator: _random.Generator | None = None):
        self.indices, self.generator = indices, generator

    def __iter__(self) -> Iterator[int]:
        order = randperm(len(self.indices), generator=self.generator).tolist()
        return (self.indices[i] for i in order)

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """The sampler's indices in lists of batch_size; the last list is shorter unless
    drop_last=True drops it."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(
                f"BatchSampler: batch_size should be a positive integer value, "
                f"but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(
                f"BatchSampler: drop_last should be a boolean value, but got drop_last={drop_last}"
            )
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self) -> int:
        whole, rest = divmod(len(self.sampler), self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)


# ------------------------------------------------------------------------------ collation
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


# ----------------------------------------------------------------------------- DataLoader
class DataLoader:
    """Batches of a dataset, as torch.utils.data.DataLoader.

    For a map-style dataset: the indices come from `sampler` (SequentialSampler, or a
    RandomSampler drawing from `generator` when shuffle=True), are grouped by a BatchSampler
    of batch_size (or come in lists from `batch_sampler`), and each list of samples is turned
    into a batch by collate_fn (default_collate). batch_size=None gives the samples one by one
    (through default_convert). An IterableDataset is read in order and cut into batches.
    len(loader) is the number of batches. pin_memory, timeout, worker_init_fn, prefetch_factor
    and the other worker options are accepted for torch's signature; num_workers must be 0.
    """

    def __init__(
        self,
        dataset: Dataset | Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable[int] | None = None,
        batch_sampler: Sampler | Iterable[list[int]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: _random.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        _check_workers(num_workers)
        self._iterable = isinstance(dataset, IterableDataset)
        _check_options(self._iterable, batch_size, shuffle, sampler, batch_sampler, drop_last)
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        elif sampler is None and not self._iterable:
            sampler = (
                RandomSampler(dataset, generator=generator)
                if shuffle
                else SequentialSampler(dataset)
            )
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.worker_init_fn, self.prefetch_factor = worker_init_fn, prefetch_factor
        self.persistent_workers = persistent_workers
        batched = batch_size is not None or batch_sampler is not None
        self.collate_fn = collate_fn or (default_collate if batched else default_convert)

    def __iter__(self) -> Iterator[Any]:
        if self._iterable:
            return self._iterate_stream()
        if self.batch_sampler is None:  # batch_size=None: one sample at a time
            return (self.collate_fn(self.dataset[i]) for i in self.sampler)
        return (self.collate_fn([self.dataset[i] for i in ix]) for ix in self.batch_sampler)

    def _iterate_stream(self):
        """An IterableDataset's samples in order, in batches of batch_size."""
        if self.batch_size is None:
            yield from (self.collate_fn(sample) for sample in self.dataset)
            return
        it = iter(self.dataset)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # a TypeError if the stream has no length, as in torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)


def _check_workers(num_workers):
    if num_workers < 0:
        raise ValueError(
            "DataLoader: num_workers option should be non-negative; "
            "use num_workers=0 to disable multiprocessing"
        )
    if num_workers > 0:
        raise NotImplementedError(
            f"DataLoader: num_workers={num_workers} is not supported; minitensor loads "
            f"batches in the main process, so use num_workers=0 (the default; the result "
            f"is the same, only loading is not done in parallel)"
        )


def _check_options(iterable, batch_size, shuffle, sampler, batch_sampler, drop_last):
    """torch's refusals of option combinations that contradict each other."""
    if iterable:
        for name, value in (("shuffle", shuffle), ("sampler", sampler)):
            if value not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified {name} "
                    f"option, but got {name}={value}"
                )
        if batch_sampler is not None:
            raise ValueError(
                f"DataLoader with IterableDataset: expected unspecified batch_sampler "
                f"option, but got batch_sampler={batch_sampler}"
            )
    if sampler is not None and shuffle:
        raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler or drop_last):
        raise ValueError(
            "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
            "shuffle, sampler, and drop_last"
        )
    if batch_size is None and drop_last:
        raise ValueError(
            "DataLoader: batch_size=None option disables auto-batching and is mutually "
            "exclusive with drop_last"
        )
