"""Constructors: mt.tensor, from_numpy, zeros, ones, full, randn, rand, randint, arange, eye,
*_like.

Floating-point results are float32 unless dtype= says otherwise. Random ones draw from the
generator that `mt.manual_seed` seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .ops._axes import shape_arg
from .random import generator as _shared_generator
from .tensor import _DEFAULT_FLOAT, Tensor, check_device
from .typing import ArrayLike, DType, Scalar, Shape


def _float(dtype):
    return np.dtype(dtype) if dtype is not None else _DEFAULT_FLOAT


def tensor(
    data: Tensor | ArrayLike,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    """A new tensor holding a copy of `data` (list, number, numpy array or Tensor).

    Without dtype=, the dtype is torch.tensor's: a numpy array or scalar keeps its own
    (float64 stays float64), a Python float is float32, an int int64, a bool bool; a list
    mixing them takes the widest of its highest kind (bool < integer < float), as torch
    promotes ([np.float64(1), 2.0] is float64, [np.int32(1), 2.5] float32)."""
    check_device(device, "tensor")
    if dtype is None:
        dtype = _inferred_dtype(data)
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, name=name)


_PYTHON_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int64), float: _DEFAULT_FLOAT}


def _inferred_dtype(data):
    """torch.tensor's dtype for `data`, or None to leave it to Tensor's rules (complex and
    other types, which Tensor refuses; an empty list, float32)."""
    found = set()
    _leaf_dtypes(data, found)
    if not found or None in found:
        return None
    top = max("biuf".index(d.kind) if d.kind in "biuf" else 4 for d in found)
    if top == 4:
        return None
    if top == 2:  # unsigned beside signed integers: one kind for the promotion
        top = 1
    same_kind = [d for d in found if "biuf".index(d.kind) in ((1, 2) if top == 1 else (top,))]
    return np.result_type(*same_kind)


def _leaf_dtypes(data, found):
    """Add to `found` the dtype of every leaf of the nested lists `data` (None if unknown)."""
    if isinstance(data, (np.ndarray, np.generic, Tensor)):
        found.add(data.dtype)
    elif isinstance(data, (list, tuple)):
        for item in data:
            _leaf_dtypes(item, found)
    else:
        found.add(_PYTHON_DTYPES.get(type(data)))


def from_numpy(array: np.ndarray, requires_grad: bool = False, name: str | None = None) -> Tensor:
    """A tensor that wraps `array` without copying it and keeps its dtype (numpy's rules,
    not `tensor`'s float32 default): changes to one show in the other. For code above the core
    (models, decoding caches) that builds arrays with numpy and hands them to ops."""
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"from_numpy: expects a numpy array, got {type(array).__name__}; use "
            f"mt.tensor for lists and numbers"
        )
    if array.dtype.kind not in "fiub":
        raise TypeError(
            f"from_numpy: cannot wrap an array of dtype {array.dtype} (shape "
            f"{array.shape}); tensors hold bool, integer or floating data"
        )
    t = Tensor._make(array)
    if requires_grad:
        t.requires_grad_(True)
    t.name = name
    return t


def zeros(
    *shape: int | Sequence[int],
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    check_device(device, "zeros")
    return Tensor(np.zeros(shape_arg(shape)), requires_grad, dtype=_float(dtype), name=name)


def ones(
    *shape: int | Sequence[int],
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    check_device(device, "ones")
    return Tensor(np.ones(shape_arg(shape)), requires_grad, dtype=_float(dtype), name=name)


def full(
    shape: int | Sequence[int],
    value: Scalar,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    """A tensor of `shape` filled with `value` (a float value gives float32 by default)."""
    check_device(device, "full")
    if dtype is None:
        dtype = _DEFAULT_FLOAT if isinstance(value, float) else np.asarray(value).dtype
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return Tensor(np.full(shape, value, dtype), requires_grad, dtype=dtype, name=name)


def randn(
    *shape: int | Sequence[int],
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
    generator: Any = None,
) -> Tensor:
    """Standard normal samples (from `generator`, an mt.Generator, if given)."""
    check_device(device, "randn")
    data = _stream(generator).standard_normal(shape_arg(shape))
    return Tensor(data, requires_grad, dtype=_float(dtype), name=name)


def rand(
    *shape: int | Sequence[int],
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
    generator: Any = None,
) -> Tensor:
    """Uniform samples in [0, 1) (from `generator`, an mt.Generator, if given)."""
    check_device(device, "rand")
    data = _stream(generator).random(shape_arg(shape))
    return Tensor(data, requires_grad, dtype=_float(dtype), name=name)


def randint(
    low: int,
    high: int | Sequence[int] | None = None,
    size: int | Sequence[int] | None = None,
    dtype: DType = np.int64,
    name: str | None = None,
    device: Any = None,
    generator: Any = None,
) -> Tensor:
    """Integers uniform in [low, high): randint(low, high, size), or torch's
    randint(high, size) and randint(high, size=size) with low 0; `generator` (an
    mt.Generator) draws them from its own stream."""
    check_device(device, "randint")
    if size is None:
        if high is None or isinstance(high, int):
            raise TypeError(
                f"randint({low}, {high}): give a size, randint(high, size) or "
                f"randint(low, high, size)"
            )
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    size = (size,) if isinstance(size, int) else tuple(size)
    return Tensor(_stream(generator).integers(low, high, size=size), dtype=dtype, name=name)


def randperm(
    n: int,
    *,
    generator: Any = None,
    dtype: DType = np.int64,
    requires_grad: bool = False,
    device: Any = None,
) -> Tensor:
    """A random permutation of 0, 1, …, n − 1 (torch.randperm), from `generator` (an
    mt.Generator) or the shared stream. The order differs from torch's for one seed."""
    check_device(device, "randperm")
    return Tensor(_stream(generator).permutation(int(n)), requires_grad, dtype=dtype)


def _stream(gen):
    """The numpy Generator to draw from: an mt.Generator's own, or the shared one."""
    if gen is None:
        return _shared_generator()
    if not hasattr(gen, "numpy_rng"):
        raise TypeError(f"generator must be an mt.Generator, got {type(gen).__name__}")
    return gen.numpy_rng


def arange(
    start: Scalar = 0,
    stop: Scalar | None = None,
    step: Scalar = 1,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
    *,
    end: Scalar | None = None,
) -> Tensor:
    """start, start + step, ... up to (not including) stop; integers stay int64, floats are
    float32 unless dtype= says otherwise. end= is torch's name for stop (arange(end=5))."""
    check_device(device, "arange")
    if end is not None:
        if stop is not None:
            raise TypeError("arange: got both stop and end= (two names for one argument)")
        stop = end
    if stop is None:
        start, stop = 0, start
    if dtype is not None and np.dtype(dtype).kind in "iu":
        data = _integer_arange(start, stop, step, np.dtype(dtype))
    else:
        _check_range(start, stop, step)
        data = np.arange(start, stop, step)
    if dtype is None and data.dtype.kind == "f":
        dtype = _DEFAULT_FLOAT
    return Tensor(data, requires_grad, dtype=dtype, name=name)


def _check_range(start, stop, step):
    """torch's refusals, with its exception types (numpy would return an empty range, or
    raise ZeroDivisionError)."""
    if step == 0:
        raise RuntimeError(f"arange: step must be nonzero (start {start}, end {stop})")
    if (step > 0 and stop < start) or (step < 0 and stop > start):
        raise RuntimeError(
            f"arange: end {stop} lies on the other side of start {start} from step {step} "
            f"(upper and lower bound inconsistent with the step's sign)"
        )


def _integer_arange(start, stop, step, dtype):
    """arange with an integer dtype, as torch computes it: the bounds and the step are
    truncated to integers first (arange(3.1, dtype=long) is [0, 1, 2]), and the values are
    start + i·step. int64 counts the elements in integers (so arange(-0.9, 2.1, 2.0) is
    [0]); the narrower integer dtypes count them from the untruncated bounds, ⌈(end −
    start) / step⌉ (arange(3.1, dtype=int32) has 4 elements), as torch does."""
    _check_range(start, stop, step)
    s, e, d = int(start), int(stop), int(step)  # int() truncates toward zero, as C does
    if dtype == np.int64:
        if d == 0:  # a step truncated to 0 (0.5): torch's int64 count refuses it
            raise ValueError(f"arange: step {step} is 0 as an integer (dtype int64)")
        sign = 1 if d > 0 else -1
        span = e - s + d - sign
        count = abs(span) // abs(d) * (1 if (span >= 0) == (d > 0) else -1)  # C's division
    else:
        count = int(np.ceil((float(stop) - float(start)) / float(step)))
    return (s + d * np.arange(max(count, 0), dtype=np.int64)).astype(dtype)


def eye(
    n: int,
    m: int | None = None,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    check_device(device, "eye")
    return Tensor(np.eye(n, m), requires_grad, dtype=_float(dtype), name=name)


def empty(
    *shape: int | Sequence[int],
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    """A tensor of `shape` to be overwritten next (filled with zeros here, so never garbage)."""
    check_device(device, "empty")
    return zeros(*shape, dtype=dtype, requires_grad=requires_grad, name=name)


def linspace(
    start: Scalar,
    end: Scalar,
    steps: int,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    """`steps` evenly spaced values from start to end, both included (1-D, float32 default).
    With an integer dtype, as torch: start and end are truncated to integers first, the
    values computed in float64 and truncated."""
    check_device(device, "linspace")
    dtype = _float(dtype)
    if dtype.kind in "iu":
        return Tensor(_integer_linspace(start, end, steps, dtype), requires_grad, name=name)
    return Tensor(_float_linspace(start, end, steps, dtype), requires_grad, dtype=dtype, name=name)


def _float_linspace(start, end, steps, dtype):
    """torch's linspace for float dtypes, computed in `dtype`: step = (end − start)/(steps − 1);
    the first half of the values is start + i·step, the second end − (steps − 1 − i)·step."""
    if steps < 0:
        raise ValueError(f"linspace: number of steps must be non-negative, got {steps}")
    s, e = dtype.type(start), dtype.type(end)
    if steps <= 1:
        return np.full(steps, s, dtype=dtype)
    step = (e - s) / dtype.type(steps - 1)
    i = np.arange(steps, dtype=dtype)
    return np.where(i < steps // 2, s + step * i, e - step * (dtype.type(steps - 1) - i))


def _integer_linspace(start, end, steps, dtype):
    """torch's linspace for integer dtypes: the first half of the values counts up from start,
    the second half down from end (so both ends are exact), each truncated toward zero."""
    if steps < 0:
        raise ValueError(f"linspace: number of steps must be non-negative, got {steps}")
    s, e = int(start), int(end)
    if steps <= 1:
        return np.full(steps, s, dtype=dtype)
    step = (float(e) - float(s)) / (steps - 1)
    i = np.arange(steps)
    values = np.where(i < steps // 2, s + step * i, e - step * (steps - i - 1))
    return np.trunc(values).astype(dtype)


def LongTensor(data: Tensor | ArrayLike) -> Tensor:
    """torch's legacy constructor: an int64 tensor from data (a list or array)."""
    return Tensor(data, dtype=np.int64)


def FloatTensor(data: Tensor | ArrayLike) -> Tensor:
    """torch's legacy constructor: a float32 tensor from data (a list or array)."""
    return Tensor(data, dtype=np.float32)


# what x.type(LongTensor) and x.type(FloatTensor) convert to (torch's legacy tensor types)
LongTensor.tensor_dtype = np.int64
FloatTensor.tensor_dtype = np.float32


def _like(make, t, dtype, requires_grad, name, device, *args):
    """`make` (zeros, ones, full, …) at t's shape, in t's dtype unless `dtype` is given."""
    dtype = dtype or t.dtype
    return make(t.shape, *args, dtype=dtype, requires_grad=requires_grad, name=name, device=device)


def zeros_like(
    t: Tensor,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    return _like(zeros, t, dtype, requires_grad, name, device)


def ones_like(
    t: Tensor,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    return _like(ones, t, dtype, requires_grad, name, device)


def full_like(
    t: Tensor,
    value: Scalar,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    return _like(full, t, dtype, requires_grad, name, device, value)


def randn_like(
    t: Tensor,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    return _like(randn, t, dtype, requires_grad, name, device)


def rand_like(
    t: Tensor,
    dtype: DType | None = None,
    requires_grad: bool = False,
    name: str | None = None,
    device: Any = None,
) -> Tensor:
    return _like(rand, t, dtype, requires_grad, name, device)


def empty_like_shape(shape: Shape, dtype: DType | None = None) -> np.ndarray:
    """An uninitialised (zero-filled) float array for a parameter that init_ fills next."""
    return np.zeros(shape, dtype=_float(dtype))
