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
    """torch's type promotion of operands (tensors, or arrays made from numbers): the result
    dtype `result_type` gives, each operand cast to it. Beside a float, integer and bool
    operands take the float's dtype (numpy would turn float32 + int64 into float64); a 0-d
    tensor or a number does not widen a dimensioned tensor of its own kind (float32 (3,) +
    float64 () is float32, uint8 (3,) & int64 () is uint8), as in PyTorch. A cast operand that
    requires grad is cast by a graph node (its gradient comes back in its own dtype)."""
    first = xs[0].dtype
    for x in xs[1:]:
        if x.dtype is not first:
            break
    else:  # the common case, operands of one dtype: nothing to promote
        return xs
    dtype = result_type(*xs)
    return tuple(x if x.dtype == dtype else _cast(x, dtype) for x in xs)


def _cast(x, dtype):
    if isinstance(x, Tensor) and x.requires_grad:
        return x.to(dtype)
    return _data(x).astype(dtype)


def result_type(*xs) -> np.dtype:
    """torch.result_type: operands fall in three groups — dimensioned tensors, 0-d tensors,
    and numbers (0-d arrays here) — each promoted within itself; a later group counts only
    where its kind (bool < integer < float) is higher than the earlier groups' (c10's
    combine_categories)."""
    groups = [None, None, None]
    for x in xs:
        group = 0 if np.ndim(x) else 1 if isinstance(x, Tensor) else 2
        groups[group] = x.dtype if groups[group] is None else _promote(groups[group], x.dtype)
    return _combine(groups[0], _combine(groups[1], groups[2]))


def _promote(a, b):
    """Two dtypes promoted as torch does: a float beats an integer or bool (not numpy's
    int64 + float32 → float64), otherwise the wider (numpy's rules)."""
    if a.kind == "f" and b.kind != "f":
        return a
    if b.kind == "f" and a.kind != "f":
        return b
    return np.promote_types(a, b)


def _combine(higher, lower):
    """c10's combine_categories: `lower` (a group of less priority) changes the dtype only
    when it is of a higher kind (a float beside integers, an integer beside bools)."""
    if higher is None or lower is None:
        return lower if higher is None else higher
    if higher.kind == "f" or (higher.kind in "iu" and lower.kind in "biu"):
        return higher
    return _promote(higher, lower)


def _data(x):
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


def _constant(x):
    """A non-differentiable argument (mask, condition, targets, ids) for `Function.apply`: a
    Tensor stays a Tensor, so that an in-place edit of it before backward is caught; anything
    else becomes an array."""
    return x if isinstance(x, Tensor) else np.asarray(x)
