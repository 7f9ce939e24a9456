"""How the public op functions take their arguments: numbers, lists and arrays lifted to
operands, torch's dtype promotion, and constants (masks, ids) kept as they are.

Shared by the ops modules; each public function checks its arguments once, with these.
"""

from __future__ import annotations

import numpy as np

from ..tensor import Tensor


def _operand(x, like=None):
    """Lift a number, list or array `x` to an operand of a binary op whose other operand is
    `like`. Next to a float tensor, numbers and arrays take its dtype (so x * 2.0 and
    x + np.ones(3) stay float32, and a float64 tensor keeps full precision); a Python int next
    to an integer tensor takes its dtype; otherwise the usual rules (floats become float32)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(like, Tensor):
        arr = np.asarray(x)
        if like.dtype.kind == "f" and arr.dtype.kind in "fiub":
            return arr.astype(like.dtype, copy=False)
        if like.dtype.kind in "iu" and isinstance(x, int) and not isinstance(x, bool):
            # astype, not dtype=: the int wraps into the dtype as torch's does (uint8 + -2
            # adds 254), where np.asarray(-2, dtype=uint8) raises OverflowError
            return np.asarray(x).astype(like.dtype)
    return Tensor(x).numpy()


def _keep_float_dtype(*xs):
    """torch's type promotion of operands (tensors or arrays): beside a float, integer and bool
    operands take the widest float dtype among them, as in PyTorch (numpy would turn
    float32 + int64 into float64); they carry no gradient, so they become plain arrays.
    float32 beside float64 stays for numpy to promote (float64)."""
    if len(xs) == 2 and xs[0].dtype is xs[1].dtype:  # the common case: nothing to promote
        return xs
    floats = [x.dtype for x in xs if x.dtype.kind == "f"]
    if not floats:
        return xs
    dtype = np.result_type(*floats)
    return tuple(x if x.dtype.kind == "f" else _data(x).astype(dtype) for x in xs)


def _data(x):
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


def _constant(x):
    """A non-differentiable argument (mask, condition, targets, ids) for `Function.apply`: a
    Tensor stays a Tensor, so that an in-place edit of it before backward is caught; anything
    else becomes an array."""
    return x if isinstance(x, Tensor) else np.asarray(x)
