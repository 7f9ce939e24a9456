"""Constructors: mt.tensor, zeros, ones, full, randn, rand, randint, arange, eye, *_like.

Floating-point results are float32 unless dtype= says otherwise. Random ones draw from the
generator that `mt.manual_seed` seeds.
"""
import numpy as np

from .random import generator
from .tensor import Tensor, _DEFAULT_FLOAT


def _shape(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _float(dtype):
    return np.dtype(dtype) if dtype is not None else _DEFAULT_FLOAT


def tensor(data, dtype=None, requires_grad=False, name=None):
    """A new tensor holding a copy of `data` (list, number, numpy array or Tensor)."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, name=name)


def zeros(*shape, dtype=None, requires_grad=False):
    return Tensor(np.zeros(_shape(shape), _float(dtype)), requires_grad, dtype=_float(dtype))


def ones(*shape, dtype=None, requires_grad=False):
    return Tensor(np.ones(_shape(shape), _float(dtype)), requires_grad, dtype=_float(dtype))


def full(shape, value, dtype=None, requires_grad=False):
    if dtype is None:
        dtype = _DEFAULT_FLOAT if isinstance(value, float) else np.asarray(value).dtype
    return Tensor(np.full(tuple(shape) if not isinstance(shape, int) else (shape,), value, dtype),
                  requires_grad, dtype=dtype)


def randn(*shape, dtype=None, requires_grad=False):
    """Standard normal samples."""
    data = generator().standard_normal(_shape(shape))
    return Tensor(data, requires_grad, dtype=_float(dtype))


def rand(*shape, dtype=None, requires_grad=False):
    """Uniform samples in [0, 1)."""
    data = generator().random(_shape(shape))
    return Tensor(data, requires_grad, dtype=_float(dtype))


def randint(low, high, shape, dtype=np.int64):
    """Integers uniform in [low, high)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return Tensor(generator().integers(low, high, size=shape), dtype=dtype)


def arange(start, stop=None, step=1, dtype=None):
    if stop is None:
        start, stop = 0, start
    data = np.arange(start, stop, step)
    if dtype is None and data.dtype.kind == "f":
        dtype = _DEFAULT_FLOAT
    return Tensor(data, dtype=dtype)


def eye(n, m=None, dtype=None):
    return Tensor(np.eye(n, m), dtype=_float(dtype))


def zeros_like(t, dtype=None, requires_grad=False):
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def full_like(t, value, dtype=None, requires_grad=False):
    return full(t.shape, value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def randn_like(t, dtype=None, requires_grad=False):
    return randn(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def rand_like(t, dtype=None, requires_grad=False):
    return rand(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like_shape(shape, dtype=None):
    """An uninitialised (zero-filled) float array for a parameter that init_ fills next."""
    return np.zeros(shape, dtype=_float(dtype))
