"""The public op API, imported as ``import minitensor.functional as F``.

Each function checks and converts its arguments, then applies one `Function` from
`minitensor.ops` (or composes a few). Tensor methods and operators call these.
"""
from __future__ import annotations

import builtins  # sum, max, min, abs, any, all and pow are ops in this module
import collections
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import random as _random
from .function import op_error
from .ops import elementwise as E
from .ops import linalg as LA
from .ops import nn as NN
from .ops import reduce as R
from .ops import shape as S
from .ops._axes import normalize_axis, shape_arg, torch_names
from .ops.nn import as_attention_mask  # public: F.as_attention_mask
from .tensor import Tensor
from .typing import ArrayLike, Axis, DType, Scalar


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
            return np.asarray(x, dtype=like.dtype)
    return Tensor(x).data


def _keep_float_dtype(*xs):
    """torch's type promotion of operands (tensors or arrays): beside a float, integer and bool
    operands take the widest float dtype among them, as in PyTorch (numpy would turn
    float32 + int64 into float64); they carry no gradient, so they become plain arrays.
    float32 beside float64 stays for numpy to promote (float64)."""
    floats = [x.dtype for x in xs if x.dtype.kind == "f"]
    if not floats:
        return xs
    dtype = np.result_type(*floats)
    return tuple(x if x.dtype.kind == "f" else _data(x).astype(dtype) for x in xs)


def _binary(fn, a, b):
    """Apply an elementwise binary op with numpy's broadcasting (and a clear error if the
    shapes do not broadcast)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(a)
    a, b = _keep_float_dtype(_operand(a, b), _operand(b, a))
    try:
        return fn.apply(a, b)
    except ValueError:
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise op_error(fn.op_name(), f"shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                                         f"broadcast (numpy's rules: align the trailing axes; "
                                         f"each pair of sizes must be equal or 1)") from None
        raise


def _data(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _constant(x):
    """A non-differentiable argument (mask, condition, targets, ids) for `Function.apply`: a
    Tensor stays a Tensor, so that an in-place edit of it before backward is caught; anything
    else becomes an array."""
    return x if isinstance(x, Tensor) else np.asarray(x)


# --------------------------------------------------------------------------- elementwise
def add(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(E.Add, a, b)


def sub(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(E.Sub, a, b)


def mul(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(E.Mul, a, b)


def div(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a / b; true division, so integers divide into float32 (not numpy's float64)."""
    if _dtype_kind(a) in "iub" and _dtype_kind(b) in "iub":
        a = _data(a).astype(np.float32)
    return _binary(E.Div, a, b)


def _dtype_kind(x):
    return x.dtype.kind if isinstance(x, (Tensor, np.ndarray)) else np.asarray(x).dtype.kind


def pow(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a ** b. As in torch, the Python number 0.5 as exponent computes a square root: its value
    keeps the sign of a zero base and its gradient there is sqrt's, −∞ at −0.0 (a ** 0.5 by
    the power rule would give +∞ at both zeros)."""
    if isinstance(a, Tensor) and isinstance(b, float) and b == 0.5:
        return sqrt(a)
    return _binary(E.Pow, a, b)


def maximum(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(E.Maximum, a, b)


def minimum(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(E.Minimum, a, b)


def neg(x: Tensor) -> Tensor:
    return E.Neg.apply(x)


def exp(x: Tensor) -> Tensor:
    return E.Exp.apply(x)


def sin(x: Tensor) -> Tensor:
    """sin x, elementwise (any shape)."""
    return E.Sin.apply(x)


def cos(x: Tensor) -> Tensor:
    """cos x, elementwise (any shape)."""
    return E.Cos.apply(x)


def log(x: Tensor) -> Tensor:
    return E.Log.apply(x)


def sqrt(x: Tensor) -> Tensor:
    return E.Sqrt.apply(x)


def abs(x: Tensor) -> Tensor:
    return E.Abs.apply(x)


def tanh(x: Tensor) -> Tensor:
    return E.Tanh.apply(x)


def sigmoid(x: Tensor) -> Tensor:
    return E.Sigmoid.apply(x)


def relu(x: Tensor) -> Tensor:
    return E.Relu.apply(x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU; approximate="none" (exact, erf) or "tanh"."""
    return E.Gelu.apply(x, approximate=approximate)


def silu(x: Tensor) -> Tensor:
    return E.Silu.apply(x)


def clip(x: Tensor, low: Scalar | None = None, high: Scalar | None = None) -> Tensor:
    """Clamp into [low, high]; either bound may be None. Integers with a float bound are
    clamped in the default float dtype (float32), as torch promotes them."""
    bounds = (_operand(v, x) for v in (low, high) if v is not None)
    return E.Clip.apply(_keep_float_dtype(x, *bounds)[0], low=low, high=high)


def cast(x: Tensor, dtype: DType) -> Tensor:
    """x as `dtype`: differentiable between float types; an integer result has no gradient."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype.kind != "f" and x.requires_grad:
        return Tensor._make(x.data.astype(dtype))    # integer results carry no gradient
    return E.Cast.apply(x, dtype=dtype)


def clone(x: Tensor) -> Tensor:
    """A copy of x that stays in the graph (its gradient flows back to x)."""
    return E.Clone.apply(x)


# comparisons and logic: bool results, no gradient
def _compare(np_fn, a, b):
    return Tensor._make(np.asarray(np_fn(_data(a), _data(b))))


def lt(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.less, a, b)
def le(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.less_equal, a, b)
def gt(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.greater, a, b)
def ge(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.greater_equal, a, b)
def eq(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.equal, a, b)
def ne(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.not_equal, a, b)
def logical_and(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.logical_and, a, b)
def logical_or(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.logical_or, a, b)
def logical_xor(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _compare(np.logical_xor, a, b)
def logical_not(x: Tensor | ArrayLike) -> Tensor: return Tensor._make(np.logical_not(_data(x)))
def isnan(x: Tensor | ArrayLike) -> Tensor: return Tensor._make(np.isnan(_data(x)))
def isfinite(x: Tensor | ArrayLike) -> Tensor: return Tensor._make(np.isfinite(_data(x)))


@torch_names
def any(x: Tensor | ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return Tensor._make(np.asarray(np.any(_data(x), axis=axis, keepdims=keepdims)))


@torch_names
def all(x: Tensor | ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return Tensor._make(np.asarray(np.all(_data(x), axis=axis, keepdims=keepdims)))


# --------------------------------------------------------------------------- reductions
@torch_names
def sum(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (an int, a tuple, or None for all axes); keepdims keeps them as size 1."""
    return R.Sum.apply(x, axis=axis, keepdims=keepdims)


@torch_names
def mean(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Mean over `axis` (an int, a tuple, or None for all axes)."""
    return R.Mean.apply(x, axis=axis, keepdims=keepdims)


# torch.max(x, dim) and Tensor.max(dim) return this (torch.return_types.max has the same fields).
ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])


def max(x: Tensor, dim: Axis | Tensor | np.ndarray = None, keepdim: bool = False, *,
        axis: Axis = None, keepdims: bool | None = None) -> Tensor | ValuesIndices:
    """Maximum, as torch.max; where several elements tie, the gradient is split evenly.

    max(x) → the largest element (0-d). max(x, dim) → a named tuple (values, indices), each of
    x's shape without `dim` (kept as size 1 with keepdim=True); indices are int64. numpy's
    spelling max(x, axis=…) (an int or a tuple) gives the values only, as numpy does.
    max(a, b) with a tensor b is the elementwise maximum(a, b), as in torch.
    """
    return _extremum(R.Max, np.argmax, maximum, x, dim, keepdim, axis, keepdims)


def min(x: Tensor, dim: Axis | Tensor | np.ndarray = None, keepdim: bool = False, *,
        axis: Axis = None, keepdims: bool | None = None) -> Tensor | ValuesIndices:
    """Minimum, as torch.min: min(x, dim) → (values, indices); see `max`."""
    return _extremum(R.Min, np.argmin, minimum, x, dim, keepdim, axis, keepdims)


def _extremum(reduction, arg_fn, elementwise, x, dim, keepdim, axis, keepdims):
    if isinstance(dim, (Tensor, np.ndarray)):
        return elementwise(x, dim)
    keep = keepdim if keepdims is None else keepdims
    if dim is None or isinstance(dim, (tuple, list)):
        return reduction.apply(x, axis=dim if axis is None else axis, keepdims=keep)
    if axis is not None:
        raise TypeError(f"{reduction.op_name()}: got both dim and axis= (two names for one "
                        f"argument)")
    values = reduction.apply(x, axis=dim, keepdims=keep)
    indices = arg_fn(_data(x), axis=normalize_axis(dim, x.ndim, reduction.op_name(), x.shape),
                     keepdims=keep)
    return ValuesIndices(values, Tensor._make(np.asarray(indices)))


@torch_names
def var(x: Tensor, axis: Axis = None, unbiased: bool = True,
        keepdims: bool = False) -> Tensor:
    """Variance; unbiased=True divides by n − 1 (Bessel's correction, PyTorch's default)."""
    return R.Var.apply(x, axis=axis, unbiased=unbiased, keepdims=keepdims)


@torch_names
def std(x: Tensor, axis: Axis = None, unbiased: bool = True,
        keepdims: bool = False) -> Tensor:
    """Standard deviation: the square root of `var` (same arguments). Where it is 0 (all
    elements equal) the gradient is 0, as in PyTorch, not NaN."""
    return R.Std.apply(x, axis=axis, unbiased=unbiased, keepdims=keepdims)


@torch_names
def logsumexp(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """log Σ exp(x) over `axis`, without overflow; its gradient is softmax(x)."""
    return R.LogSumExp.apply(x, axis=axis, keepdims=keepdims)


@torch_names
def argmax(x: Tensor | ArrayLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the maximum (of the flattened tensor when axis is None); int64, no gradient."""
    d = _data(x)
    axes = range(d.ndim) if axis is None else (normalize_axis(axis, d.ndim, "argmax", d.shape),)
    R.check_nonempty_axes("argmax", d.shape, axes)
    return Tensor._make(np.asarray(np.argmax(d, axis=axis, keepdims=keepdims)))


@torch_names
def argmin(x: Tensor | ArrayLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the minimum (of the flattened tensor when axis is None); int64, no gradient."""
    d = _data(x)
    axes = range(d.ndim) if axis is None else (normalize_axis(axis, d.ndim, "argmin", d.shape),)
    R.check_nonempty_axes("argmin", d.shape, axes)
    return Tensor._make(np.asarray(np.argmin(d, axis=axis, keepdims=keepdims)))


# --------------------------------------------------------------------------- shape
def reshape(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """The same elements in a new shape (one size may be -1): reshape(x, 2, 3) or
    reshape(x, (2, 3)). A view of x when numpy can make one."""
    return S.Reshape.apply(x, shape=shape_arg(shape))


view = reshape


def permute(x: Tensor, *axes: int | Sequence[int]) -> Tensor:
    """Reorder the axes: out.shape[i] == x.shape[axes[i]] (e.g. (B, L, h, d) → (B, h, L, d)
    with permute(x, 0, 2, 1, 3))."""
    return S.Permute.apply(x, axes=shape_arg(axes))


def transpose(x: Tensor, axis0: int | None = None, axis1: int | None = None) -> Tensor:
    """transpose(x) reverses all axes (like .T); transpose(x, a, b) swaps axes a and b."""
    if axis0 is None and axis1 is None:
        return S.Permute.apply(x, axes=tuple(reversed(range(x.ndim))))
    return _swap(x, axis0, axis1, "transpose")


def swapaxes(x: Tensor, axis0: int, axis1: int) -> Tensor:
    """Swap two axes (a view): swapaxes(k, -1, -2) turns keys (…, L, d) into (…, d, L)."""
    return _swap(x, axis0, axis1, "swapaxes")


def _swap(x, axis0, axis1, op):
    a = normalize_axis(axis0, x.ndim, op, x.shape)
    b = normalize_axis(axis1, x.ndim, op, x.shape)
    axes = list(range(x.ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return S.Permute.apply(x, axes=tuple(axes))


def expand(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """Broadcast to `shape` without copying (-1 keeps a size)."""
    shape = shape_arg(shape)
    lead = len(shape) - x.ndim
    full = tuple(x.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
    return S.Expand.apply(x, shape=full)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Broadcast to `shape` without copying (numpy's rules); the gradient sums the copies."""
    return S.Expand.apply(x, shape=tuple(shape))


@torch_names
def squeeze(x: Tensor, axis: Axis = None) -> Tensor:
    """Remove axes of size 1: all of them (axis=None), or those of the given ones that have
    size 1 — an axis of another size stays, as in torch (numpy's squeeze raises there)."""
    if axis is None:
        return reshape(x, tuple(n for n in x.shape if n != 1))
    axes = (axis,) if isinstance(axis, int) else axis
    # a 0-d tensor accepts axis 0 and -1, as torch's does
    axes = {normalize_axis(a, builtins.max(x.ndim, 1), "squeeze", x.shape) for a in axes}
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if not (i in axes and n == 1)))


@torch_names
def unsqueeze(x: Tensor, axis: int) -> Tensor:
    """Insert an axis of size 1 at position `axis` (negative counts from the end of the result)."""
    axis = normalize_axis(axis, x.ndim + 1, "unsqueeze", x.shape)
    shape = list(x.shape)
    shape.insert(axis, 1)
    return reshape(x, tuple(shape))


@torch_names
def flatten(x: Tensor, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    """Merge axes start_axis..end_axis (inclusive) into one: (B, L, d) → (B·L, d) with
    flatten(x, 0, 1)."""
    if x.ndim == 0:
        return reshape(x, (1,))
    s = normalize_axis(start_axis, x.ndim, "flatten", x.shape)
    e = normalize_axis(end_axis, x.ndim, "flatten", x.shape)
    shape = x.shape[:s] + (int(np.prod(x.shape[s:e + 1])),) + x.shape[e + 1:]
    return reshape(x, shape)


@torch_names
def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis; their other sizes must match. Dtypes promote as
    torch's do (integers beside float32 give float32)."""
    return S.Concat.apply(*_keep_float_dtype(*map(_constant, tensors)), axis=axis)


cat = concat


@torch_names
def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis: n tensors (a, b) → (n, a, b) with axis=0.
    Dtypes promote as in `concat`."""
    return S.Stack.apply(*_keep_float_dtype(*map(_constant, tensors)), axis=axis)


@torch_names
def split(x: Tensor, split_size_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split along `axis` into pieces of `split_size` (an int; the last may be smaller) or of
    the given list of sizes. Returns a list of tensors (views of x)."""
    axis = normalize_axis(axis, x.ndim, "split", x.shape)
    n = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0:
            raise op_error("split", f"size must be positive, got {size} (shape {x.shape})",
                           ValueError)
        # an empty axis still splits into one (empty) piece, as in PyTorch
        sizes = [size] * (n // size) + ([n % size] if n % size or n == 0 else [])
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise op_error("split", f"sizes {sizes} do not add up to {n} "
                                    f"(axis {axis} of {x.shape})")
    out, start = [], 0
    for size in sizes:
        index = (slice(None),) * axis + (slice(start, start + size),)
        out.append(getitem(x, index))
        start += size
    return out


@torch_names
def chunk(x: Tensor, chunks: int, axis: int = 0) -> list[Tensor]:
    """Split into `chunks` pieces of equal size (the last may be smaller)."""
    n = x.shape[normalize_axis(axis, x.ndim, "chunk", x.shape)]
    if not isinstance(chunks, int) or chunks <= 0:
        raise op_error("chunk", f"chunks must be a positive int, got {chunks!r} (shape {x.shape})",
                       ValueError)
    if n == 0:                  # PyTorch: `chunks` empty pieces
        return split(x, [0] * chunks, axis=axis)
    return split(x, -(-n // chunks), axis=axis)


def _index_arg(index):
    # Tensors stay Tensors (Function.apply unwraps them and version-checks what GetItem saves)
    if isinstance(index, list):
        return np.asarray(index)
    return index


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index]: ints, slices, None, Ellipsis, integer arrays/lists/tensors and boolean masks,
    as in numpy. Repeated indices receive the sum of their gradients."""
    return S.GetItem.apply(x, index=_index_arg(index))


def where(cond: Tensor | ArrayLike, a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """Elementwise `cond ? a : b`; cond is a bool tensor or array."""
    like = a if isinstance(a, Tensor) else b
    a, b = _keep_float_dtype(_operand(a, like), _operand(b, like))
    return S.Where.apply(_constant(cond), a, b)


def masked_fill(x: Tensor, mask: Tensor | ArrayLike, value: Tensor | ArrayLike) -> Tensor:
    """x with the positions where mask is True (bool, broadcastable) set to value."""
    return S.MaskedFill.apply(x, _constant(mask), value=value)


def gather(x: Tensor, dim: int, index: Tensor | ArrayLike) -> Tensor:
    """torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] for dim=1. `index` (int) has x's
    number of axes; the result has index's shape. Differentiable in x (a gather of getitem)."""
    idx = np.asarray(_data(index))
    if idx.ndim != x.ndim or idx.dtype.kind not in "iu":
        raise op_error("gather", f"index must be an integer tensor with {x.ndim} axes like x "
                                 f"(shape {x.shape}), got {idx.dtype} of shape {idx.shape}",
                       TypeError)
    dim = normalize_axis(dim, x.ndim, "gather", x.shape)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[dim] = idx
    return getitem(x, tuple(grid))


def index_select(x: Tensor, dim: int, index: Tensor | ArrayLike) -> Tensor:
    """The slices of x at positions `index` (1-D int) along `dim`; differentiable in x."""
    dim = normalize_axis(dim, x.ndim, "index_select", x.shape)
    return getitem(x, (slice(None),) * dim + (np.asarray(_data(index)),))


def repeat(x: Tensor, *sizes: int | Sequence[int]) -> Tensor:
    """torch's repeat (numpy's tile): x tiled sizes[i] times along axis i; extra leading sizes
    add axes. (2, 3).repeat(2, 1, 2) → (2, 2, 6). Differentiable (an expand, then a reshape)."""
    sizes = shape_arg(sizes)
    if len(sizes) < x.ndim:
        raise op_error("repeat", f"needs at least {x.ndim} sizes for shape {x.shape}, got "
                                 f"{sizes}")
    x = reshape(x, (1,) * (len(sizes) - x.ndim) + x.shape)
    interleaved = tuple(v for d in x.shape for v in (1, d))              # (1, d0, 1, d1, …)
    tiled = tuple(v for r, d in zip(sizes, x.shape) for v in (r, d))     # (r0, d0, r1, d1, …)
    y = expand(reshape(x, interleaved), tiled)
    return reshape(y, tuple(r * d for r, d in zip(sizes, x.shape)))


@torch_names
def cumsum(x: Tensor, axis: int) -> Tensor:
    """Running sum along `axis` (torch: dim); same shape as x."""
    return R.CumSum.apply(x, axis=axis)


def einsum(equation: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
    """Einstein summation, as torch.einsum('bij,bjk->bik', a, b) (operands also as one list),
    with '...' (broadcast as in torch) and indices repeated inside one operand (diagonals:
    'ii->i', 'ii' the trace). Differentiable in every operand."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return R.Einsum.apply(*operands, equation=equation)


# torch.sort and torch.topk return this (torch.return_types.sort has the same fields).
@torch_names
def sort(x: Tensor, axis: int = -1, descending: bool = False, *,
         stable: bool = False) -> ValuesIndices:
    """(values, indices) sorted along `axis` (torch: dim). Ties keep their order (a stable
    sort). The values are differentiable (a gather)."""
    indices = argsort(x, axis, descending)
    return ValuesIndices(gather(x, axis, indices), indices)


@torch_names
def argsort(x: Tensor | ArrayLike, axis: int = -1, descending: bool = False,
            stable: bool = False) -> Tensor:
    """Positions that sort x along `axis` (int64), stable; descending puts the largest first
    (ties still in their original order)."""
    d = _data(x)
    axis = normalize_axis(axis, d.ndim, "argsort", d.shape)
    order = np.argsort(-d if descending else d, axis=axis, kind="stable") if d.dtype.kind != "b" \
        else np.argsort(~d if descending else d, axis=axis, kind="stable")
    return Tensor._make(order.astype(np.int64))


@torch_names
def topk(x: Tensor, k: int, axis: int = -1, largest: bool = True,
         sorted: bool = True) -> ValuesIndices:
    """(values, indices) of the k largest (smallest with largest=False) along `axis`, largest
    first. Ties: the earlier position first (torch does not promise an order for ties)."""
    d = _data(x)
    axis = normalize_axis(axis, d.ndim, "topk", d.shape)
    if not 0 <= k <= d.shape[axis]:
        raise op_error("topk", f"k={k} is out of range for axis {axis} of shape {d.shape}")
    indices = getitem(argsort(x, axis, descending=largest),
                      (slice(None),) * axis + (slice(0, k),))
    return ValuesIndices(gather(x, axis, indices), indices)


def multinomial(probs: Tensor | ArrayLike, num_samples: int, replacement: bool = False) -> Tensor:
    """Draw `num_samples` category ids from each row of `probs` (1-D (C,) or 2-D (B, C);
    non-negative weights, normalised here), with mt.manual_seed's generator. int64 result of
    shape (num_samples,) or (B, num_samples). Without replacement a category is drawn once."""
    p = np.asarray(_data(probs), dtype=np.float64)
    rows = p.reshape(-1, p.shape[-1])
    if (rows < 0).any() or not np.isfinite(rows).all() or (rows.sum(-1) <= 0).any():
        raise op_error("multinomial", f"probabilities must be finite, non-negative and not all "
                                      f"zero in a row (shape {p.shape})")
    if not replacement and num_samples > (rows > 0).sum(-1).min():
        raise op_error("multinomial", f"cannot draw {num_samples} distinct categories from "
                                      f"rows with fewer non-zero weights (shape {p.shape})")
    rng = _random.generator()
    out = np.stack([rng.choice(len(r), num_samples, replace=replacement, p=r / r.sum())
                    for r in rows]).astype(np.int64)
    return Tensor._make(out.reshape(p.shape[:-1] + (num_samples,)))


def scatter(x: Tensor | ArrayLike, dim: int, index: Tensor | ArrayLike,
            src: Tensor | ArrayLike | None = None,
            value: Scalar | None = None) -> Tensor:
    """torch.scatter: a copy of x with src (a tensor shaped at least like `index`, or a number,
    also as value=) written along `dim` at the positions `index` names. Differentiable in x
    and in src, as torch's."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    dim = normalize_axis(dim, x.ndim, "scatter", x.shape)
    return S.Scatter.apply(x, _constant(index), value if src is None else src, dim=dim)


def nonzero(x: Tensor | ArrayLike, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """Positions of the non-zero elements: an int64 tensor (n, ndim), or with as_tuple=True
    one 1-D tensor of positions per axis (as numpy's nonzero)."""
    where = np.nonzero(_data(x))
    if as_tuple:
        return tuple(Tensor._make(w.astype(np.int64)) for w in where)
    return Tensor._make(np.stack(where, axis=1).astype(np.int64).reshape(-1, _data(x).ndim))


def allclose(a: Tensor | ArrayLike, b: Tensor | ArrayLike, rtol: float = 1e-05,
             atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """True when |a − b| ≤ atol + rtol·|b| everywhere (a Python bool, as torch.allclose)."""
    return bool(np.allclose(_data(a), _data(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


@torch_names
def tril(x: Tensor, k: int = 0) -> Tensor:
    """Keep the lower triangle of the last two axes (j ≤ i + k), zero elsewhere."""
    return S.Tril.apply(x, k=k)


@torch_names
def triu(x: Tensor, k: int = 0) -> Tensor:
    """Keep the upper triangle of the last two axes (j ≥ i + k), zero elsewhere."""
    return S.Triu.apply(x, k=k)


# --------------------------------------------------------------------------- linear algebra
def matmul(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a @ b for 1-D to N-D operands, numpy's rules (batch axes broadcast)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(a)
    return LA.MatMul.apply(*_keep_float_dtype(_operand(a, b), _operand(b, a)))


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched matmul of (B, n, m) and (B, m, p) → (B, n, p) (torch.bmm: 3-D only)."""
    if a.ndim != 3 or b.ndim != 3:
        raise op_error("bmm", f"expects two 3-D tensors, got shapes {a.shape} and {b.shape}")
    return matmul(a, b)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """torch.nn.functional.linear: input Wᵀ + b, with weight (out, in) as torch lays it out (one
    row of weights per output feature) and bias (out,). input (…, in) → (…, out); a 1-D
    weight (in,) gives (…)."""
    if weight.ndim not in (1, 2):
        raise op_error("linear", f"weight must be (out_features, in_features) or (in_features,), "
                                 f"got shape {weight.shape} (input {input.shape})")
    if input.ndim == 0 or input.shape[-1] != weight.shape[-1]:
        raise op_error("linear", f"input of shape {input.shape} has "
                                 f"{input.shape[-1] if input.ndim else 'no'} features on its "
                                 f"last axis, expected {weight.shape[-1]} (weight {weight.shape}: "
                                 f"(out_features, in_features))")
    y = matmul(input, transpose(weight))
    return y if bias is None else y + bias


# --------------------------------------------------------------------------- neural nets
@torch_names
def softmax(x: Tensor, axis: int = -1, scale: float = 1.0,
            mask: Tensor | ArrayLike | None = None) -> Tensor:
    """softmax(scale·x + mask) along `axis`.

    mask (optional, broadcastable to x): bool with **True = blocked**, or an additive float
    mask (0 where allowed, −inf where blocked); integer masks are refused (see
    `as_attention_mask`). Fully blocked rows give zeros, not NaN.
    """
    m = as_attention_mask(mask)
    if x.ndim == 0:
        raise op_error("softmax", "needs at least one axis, got a 0-d tensor (shape ())")
    axis = normalize_axis(axis, x.ndim, "softmax", x.shape)
    if axis == x.ndim - 1:
        return NN.Softmax.apply(x, scale=scale, mask=m)
    moved = swapaxes(x, axis, -1)
    if m is not None:
        try:
            m = np.swapaxes(np.broadcast_to(m, x.shape), axis, -1)
        except ValueError:
            raise op_error("softmax", f"mask of shape {m.shape} does not broadcast to the "
                                      f"scores' shape {x.shape}") from None
    return swapaxes(NN.Softmax.apply(moved, scale=scale, mask=m), axis, -1)


@torch_names
def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """log(softmax(x)) along `axis`, computed stably (x − logsumexp(x))."""
    if x.ndim == 0:
        raise op_error("log_softmax", "needs at least one axis, got a 0-d tensor (shape ())")
    axis = normalize_axis(axis, x.ndim, "log_softmax", x.shape)
    if axis == x.ndim - 1:
        return NN.LogSoftmax.apply(x)
    return swapaxes(NN.LogSoftmax.apply(swapaxes(x, axis, -1)), axis, -1)


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last len(normalized_shape) axes (the feature axes of each token)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if x.shape[x.ndim - k:] != normalized_shape:
        raise op_error("layer_norm", f"input of shape {x.shape} does not end in "
                                     f"normalized_shape {normalized_shape}")
    return NN.LayerNorm.apply(x, weight, bias, n_axes=k, eps=eps)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1 − p) (inverted
    dropout). Identity when not training or p == 0. Seeded by mt.manual_seed."""
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout", f"p must be in [0, 1], got {p} (input shape {x.shape})",
                       ValueError)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    # one 64-bit seed from the shared generator; the mask itself is a hash of (seed, position)
    # (kernels/dropout.py), so manual_seed and checkpoints make it reproducible
    seed = _random.generator().integers(0, 2**64, dtype=np.uint64)
    return NN.Dropout.apply(x, seed=seed, p=p)


def embedding(ids: Tensor | ArrayLike, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` (num_embeddings, dim) picked by integer `ids` (any shape) →
    (*ids.shape, dim). The `padding_idx` row receives no gradient."""
    return NN.Embedding.apply(_constant(ids), weight, padding_idx=padding_idx)


def cross_entropy(input: Tensor, target: Tensor | ArrayLike,
                  weight: Tensor | ArrayLike | None = None,
                  size_average: bool | None = None, ignore_index: int = -100,
                  reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy: log_softmax over the classes, then the negative
    log-likelihood of the target.

    input: logits (C,), (N, C) or (N, C, d1, …) — the classes on axis 1, as in torch, so a
    sequence model's (B, L, C) logits go in as ``logits.transpose(1, 2)`` (or flattened,
    ``logits.reshape(-1, C)`` with ``target.reshape(-1)``). target: class ids (), (N,) or
    (N, d1, …), or class probabilities of input's shape. weight (C,) rescales each class;
    ignore_index: ids (e.g. <pad>) that add nothing, and 'mean' averages over the rest (0 when
    every target is ignored; torch gives NaN); label_smoothing ε in [0, 1] mixes the target
    with the uniform distribution over the C classes. reduction: 'mean' | 'sum' | 'none'.
    Class ids without a weight run one fused op (one graph node, `ops.nn.CrossEntropy`).
    """
    reduction = legacy_reduction(size_average, reduce, reduction, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise op_error("cross_entropy", f"label_smoothing must be in [0, 1], got "
                                        f"{label_smoothing} (input shape {input.shape})",
                       ValueError)
    t = _data(target)
    if t.dtype.kind == "f":
        return _cross_entropy_probs(input, target, weight, reduction, label_smoothing)
    if weight is None:
        return NN.CrossEntropy.apply(input, _constant(target), ignore_index=ignore_index,
                                     label_smoothing=label_smoothing, reduction=reduction)
    return _cross_entropy_weighted(_classes_last(input), t, weight, ignore_index, reduction,
                                   label_smoothing, input.shape)


def _cross_entropy_weighted(x, t, weight, ignore_index, reduction, eps, shape):
    """(1 − ε)·nll + ε/C · smooth, torch's formula for class ids with a class weight; x holds
    the logits with the classes last."""
    logp = log_softmax(x, axis=-1)
    nll = _nll(logp, t, weight, ignore_index, reduction, shape, "cross_entropy")
    if eps == 0.0:
        return nll
    c = x.shape[-1]
    w = _data(weight).astype(x.dtype)
    valid = t != ignore_index
    smooth = where(valid, -sum(logp * w, axis=-1), 0.0)      # (…,); selected, as in _nll
    if reduction == "sum":
        smooth = sum(smooth)
    elif reduction == "mean":
        smooth = sum(smooth) / _nonzero(float(w[np.where(valid, t, 0)][valid].sum()))
    return nll * (1.0 - eps) + smooth * (eps / c)


def _cross_entropy_probs(input, target, weight, reduction, eps):
    """−Σ_c w_c · p_c · log softmax(x)_c with probability targets p of input's shape."""
    p = target if isinstance(target, Tensor) else Tensor(_data(target))
    if tuple(p.shape) != tuple(input.shape):
        ids_shape = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
        if tuple(p.shape) == ids_shape:
            raise op_error("cross_entropy", f"target of shape {tuple(p.shape)} holds {p.dtype} "
                                            f"values: class ids must be integers (input "
                                            f"{input.shape}, classes on axis "
                                            f"{1 if input.ndim >= 2 else 0})", TypeError)
        raise op_error("cross_entropy", f"probability targets of shape {tuple(p.shape)} must "
                                        f"match input {input.shape}")
    x, p = _classes_last(input), _classes_last(p)
    if eps:
        p = p * (1.0 - eps) + eps / x.shape[-1]
    terms = log_softmax(x, axis=-1) * p
    if weight is not None:
        terms = terms * _data(weight).astype(x.dtype)
    return _reduce(-sum(terms, axis=-1), reduction)


def mse_loss(input: Tensor, target: Tensor | ArrayLike, size_average: bool | None = None,
             reduce: bool | None = None, reduction: str = "mean",
             weight: Tensor | ArrayLike | None = None) -> Tensor:
    """Mean squared error (torch's signature). input and target must have the same shape:
    broadcasting (N, 1) against (N,) would silently compare every prediction with every
    target."""
    reduction = legacy_reduction(size_average, reduce, reduction, "mse_loss")
    if weight is not None:
        raise op_error("mse_loss", "weight= is not supported (torch added it in 2.6)",
                       NotImplementedError)
    if tuple(input.shape) != tuple(np.shape(_data(target))):
        raise op_error("mse_loss", f"input of shape {tuple(input.shape)} and target of shape "
                                   f"{tuple(np.shape(_data(target)))} differ")
    diff = sub(input, target)
    sq = diff * diff
    if reduction == "mean":
        return mean(sq)
    if reduction == "sum":
        return sum(sq)
    return sq


# ------------------------------------------------- torch.nn.functional: losses, one_hot, pad
def legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str,
                     op: str) -> str:
    """The reduction ('mean', 'sum' or 'none'; kl_div also 'batchmean') a loss named `op` runs
    with: from torch's deprecated size_average/reduce flags when either is given (with torch's
    warning), else `reduction` itself, checked. The loss modules of `minitensor.nn` use it."""
    if size_average is None and reduce is None:
        if reduction not in ("mean", "sum", "none") and not (op == "kl_div"
                                                              and reduction == "batchmean"):
            raise op_error(op, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}",
                           ValueError)
        return reduction
    warnings.warn(f"{op}: size_average and reduce are deprecated (as in torch); use "
                  f"reduction=", DeprecationWarning, stacklevel=3)
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _classes_last(x):
    """(N, C, d1, …) → (N, d1, …, C); (C,) and (N, C) are returned as they are."""
    if x.ndim <= 2:
        return x
    return permute(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _reduce(losses, reduction):
    if reduction == "sum":
        return sum(losses)
    if reduction == "mean":
        return mean(losses)
    return losses


def nll_loss(input: Tensor, target: Tensor | ArrayLike,
             weight: Tensor | ArrayLike | None = None,
             size_average: bool | None = None, ignore_index: int = -100,
             reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """−input[n, target[n]] (input holds log-probabilities), weighted by weight[target[n]].

    input (C,), (N, C) or (N, C, d1, …); target (), (N,) or (N, d1, …) of class ids.
    'mean' divides by the sum of the weights of the targets that are not ignore_index (torch's
    weighted mean); when every target is ignored it gives 0, as `cross_entropy` does
    (torch gives NaN there).
    """
    reduction = legacy_reduction(size_average, reduce, reduction, "nll_loss")
    return _nll(_classes_last(input), _data(target), weight, ignore_index, reduction,
                input.shape, "nll_loss")


def _nll(x, t, weight, ignore_index, reduction, shape, op):
    """nll_loss on log-probabilities x with the classes last, (…, C), and targets t (…);
    `op` names the caller in errors."""
    c = x.shape[-1]
    if t.dtype.kind not in "iu":
        raise op_error(op, f"target must hold integer class ids, got {t.dtype} "
                           f"(input {shape}, target {t.shape})", TypeError)
    if x.shape[:-1] != t.shape:
        raise op_error(op, f"input {shape} and target {t.shape} do not match: expected target "
                           f"of shape {x.shape[:-1]} (classes on axis "
                           f"{0 if len(shape) == 1 else 1} of input)")
    valid = t != ignore_index
    if valid.any() and (t[valid].min() < 0 or t[valid].max() >= c):
        bad = t[valid].max() if t[valid].max() >= c else t[valid].min()
        raise op_error(op, f"target {bad} is out of range for {c} classes "
                           f"(target shape {t.shape})", IndexError)
    safe = np.where(valid, t, 0).reshape(-1)
    w = np.ones(c, x.dtype) if weight is None else _data(weight).astype(x.dtype)
    w_rows = np.where(valid.reshape(-1), w[safe], 0).astype(x.dtype)
    picked = getitem(reshape(x, (-1, c)), (np.arange(safe.size), safe))    # (M,)
    # selected, not multiplied by a 0 weight: an ignored row's NaN logit stays out (as torch)
    losses = where(valid.reshape(-1), -(picked * w_rows), 0.0)
    if reduction == "none":
        return reshape(losses, t.shape)
    total = sum(losses)
    if reduction == "sum":
        return total
    return total / _nonzero(float(w_rows.sum()))


def _nonzero(denominator):
    """The divisor of a 'mean' loss: 1 when nothing counts, so the loss is 0, not NaN."""
    return denominator if denominator != 0 else 1.0


def kl_div(input: Tensor, target: Tensor | ArrayLike, size_average: bool | None = None,
           reduce: bool | None = None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """Pointwise KL divergence target·(log target − input); input holds log-probabilities.

    A target of 0 contributes 0 (0·log 0 = 0). log_target=True: target holds log-probabilities
    too, and the term is exp(target)·(target − input). reduction: 'mean' (over every element,
    torch's default, which torch warns is not the KL divergence), 'batchmean' (sum / N, the
    real KL per example), 'sum' or 'none'.
    """
    reduction = legacy_reduction(size_average, reduce, reduction, "kl_div")
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides by the number of elements, not the "
                      "batch size; 'batchmean' gives the KL divergence (as torch warns)",
                      UserWarning, stacklevel=2)
    tgt = target if isinstance(target, Tensor) else Tensor(_data(target),
                                                           dtype=input.dtype)
    if log_target:
        terms = exp(tgt) * (tgt - input)
    else:
        positive = _data(tgt) > 0
        safe = where(positive, tgt, 1.0)            # log(1) = 0 where the target is 0
        terms = tgt * (log(safe) - input)
    if reduction == "batchmean":
        n = input.shape[0] if input.ndim else 1
        return sum(terms) / n
    return _reduce(terms, reduction)


def one_hot(tensor: Tensor | ArrayLike, num_classes: int = -1) -> Tensor:
    """Class ids (any shape, int) → (*shape, num_classes) int64 of 0/1 (no gradient).
    num_classes=-1 takes the largest id + 1."""
    ids = _data(tensor)
    if ids.dtype.kind not in "iu":
        raise op_error("one_hot", f"expects integer class ids, got {ids.dtype} of shape "
                                  f"{ids.shape}", TypeError)
    if num_classes == -1:
        num_classes = int(ids.max()) + 1 if ids.size else 0
    if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
        raise op_error("one_hot", f"class ids must be in [0, {num_classes}), got ids in "
                                  f"[{ids.min()}, {ids.max()}] (shape {ids.shape})",
                       IndexError)
    out = (ids[..., None] == np.arange(num_classes)).astype(np.int64)
    return Tensor._make(out)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant",
        value: Scalar | None = None) -> Tensor:
    """Pad (or, with negative sizes, crop) the last len(pad)/2 axes.

    pad = (left_last, right_last, left_second_last, right_second_last, …): the pairs run from
    the last axis backwards, as torch. Only mode='constant' (value, default 0) is supported.
    """
    if mode != "constant":
        raise op_error("pad", f"mode {mode!r} is not supported (only 'constant'); input "
                              f"{input.shape}", NotImplementedError)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise op_error("pad", f"pad {tuple(pad)} must hold pairs for at most {input.ndim} axes "
                              f"(input {input.shape})")
    x = input
    for i in range(len(pad) // 2):
        axis = input.ndim - 1 - i
        x = _pad_axis(x, axis, int(pad[2 * i]), int(pad[2 * i + 1]), 0 if value is None
                      else value)
    return x


def _pad_axis(x, axis, before, after, value):
    """x with `before`/`after` entries of `value` added (or removed, when negative) on axis."""
    n = x.shape[axis]
    start, stop = builtins.max(0, -before), n - builtins.max(0, -after)
    if stop < start:
        raise op_error("pad", f"cropping {-before} and {-after} leaves no room on axis {axis} "
                              f"of size {n} (input {x.shape})")
    if start or stop != n:
        x = getitem(x, (slice(None),) * axis + (slice(start, stop),))
    parts = []
    for size in (builtins.max(0, before), builtins.max(0, after)):
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
        parts.append(Tensor._make(np.full(shape, value, dtype=x.dtype)) if size else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return pieces[0] if len(pieces) == 1 else concat(pieces, axis=axis)


# ------------------------------------------- attention with torch's mask (True = may attend)
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | ArrayLike | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """softmax(query·keyᵀ·scale + mask) · value, torch's function (output only, no weights).

    query (…, L, E), key (…, S, E), value (…, S, Ev) → (…, L, Ev). scale defaults to 1/√E.
    attn_mask, broadcastable to (…, L, S): **bool True = may attend** (torch's meaning here,
    the opposite of nn.MultiheadAttention's), or a float mask added to the scores.
    is_causal: query i attends to keys 0..i (top-left aligned, as torch); not with attn_mask.
    A query row with no key allowed gives zeros (as torch 2.x does here).
    dropout_p: dropout on the weights, always applied when > 0 (torch has no training flag
    here: pass dropout_p=0.0 in evaluation).
    """
    if enable_gqa:
        raise op_error("scaled_dot_product_attention", "enable_gqa is not supported",
                       NotImplementedError)
    if is_causal and attn_mask is not None:
        raise op_error("scaled_dot_product_attention", "give attn_mask or is_causal=True, "
                                                       "not both (as torch)", ValueError)
    l_q, l_k = query.shape[-2], key.shape[-2]
    if is_causal:
        blocked = np.triu(np.ones((l_q, l_k), dtype=bool), k=1)       # j > i is the future
    elif attn_mask is None:
        blocked = None
    else:
        m = _data(attn_mask)
        if m.dtype != np.bool_ and m.dtype.kind != "f":     # 0/1 integers are ambiguous
            raise op_error("scaled_dot_product_attention", f"attn_mask must be bool (True = may "
                           f"attend, torch's meaning) or floating (added to the scores), got "
                           f"{m.dtype} of shape {m.shape}; convert it with `mask != 0` "
                           f"(1 = may attend)", TypeError)
        blocked = ~m if m.dtype == np.bool_ else m.astype(query.dtype)   # ours: True = blocked
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = matmul(query, swapaxes(key, -1, -2))                 # (…, L, S)
    weights = softmax(scores, axis=-1, scale=scale, mask=blocked)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True)
    return matmul(weights, value)
