"""Reductions over one axis, several, or all (axis=None), with or without keepdims.

After each class comes the public function that checks its arguments and applies it
(`minitensor.functional` re-exports it); functions with no class of their own close the file.
"""

from __future__ import annotations

import builtins  # in this module, max, min and sum are minitensor's ops
import collections
import math
import string
from collections.abc import Sequence

import numpy as np

from ..function import Function, op_error, unbroadcast
from ..kernels.backend_switch import are_deterministic_algorithms_enabled
from ..tensor import Tensor
from ..typing import ArrayLike, Axis, DType
from ._args import _data
from ._axes import expand_reduced, normalize_axes, normalize_axis, torch_names
from .elementwise import abs, cast, maximum, minimum, nan_to_num, sign


class Sum(Function):
    plain_params = True  # axis and keepdims, never Tensors

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes = normalize_axes(axis, x.ndim, "sum", x.shape)
        ctx.shape, ctx.keepdims = x.shape, keepdims
        return x.sum(axis=ctx.axes, keepdims=keepdims)  # the method: np.sum's dispatch costs more

    @staticmethod
    def backward(ctx, grad):
        return expand_reduced(grad, ctx.shape, ctx.axes, ctx.keepdims)


@torch_names
def sum(
    x: Tensor, axis: Axis = None, keepdims: bool = False, *, dtype: DType | None = None
) -> Tensor:
    """Sum over `axis` (an int, a tuple, or None for all axes); keepdims keeps them as size 1.
    dtype= casts x first (torch's: sum a float16 or int8 tensor in a wider dtype)."""
    return Sum.apply(_in_dtype(x, dtype), axis=axis, keepdims=keepdims)


class Mean(Function):
    plain_params = True  # axis and keepdims, never Tensors
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes = normalize_axes(axis, x.ndim, "mean", x.shape)
        ctx.shape, ctx.keepdims = x.shape, keepdims
        ctx.count = math.prod(x.shape[a] for a in ctx.axes)
        if not ctx.count:  # numpy's answer (nan) and its warning for an empty mean
            return x.mean(axis=ctx.axes, keepdims=keepdims)
        # what np.mean computes — the sum, then divided by the count — without the Python
        # layers of np.mean around it, which cost more than a small tensor's arithmetic
        return x.sum(axis=ctx.axes, keepdims=keepdims) / ctx.count

    @staticmethod
    def backward(ctx, grad):
        return expand_reduced(grad / ctx.count, ctx.shape, ctx.axes, ctx.keepdims)


@torch_names
def mean(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Mean over `axis` (an int, a tuple, or None for all axes)."""
    return Mean.apply(x, axis=axis, keepdims=keepdims)


def check_nonempty_axes(op, shape, axes):
    """max, min, argmax and argmin have no identity (a sum's is 0): over a size-0 axis they have
    no value, and are refused, as torch refuses them. The other axes of an empty tensor reduce
    to an empty result (max over axis 1 of a (0, 3) tensor has shape (0,))."""
    empty = [a for a in axes if a < len(shape) and shape[a] == 0]
    if empty:
        raise op_error(
            op,
            f"axis {empty[0]} of a tensor of shape {tuple(shape)} has size 0, "
            f"and the {op} of no elements is undefined; reduce over a non-empty "
            f"axis (dim=...), or skip empty tensors",
        )


class _Extremum(Function):
    """max/min. When several elements tie for the extremum, the gradient is split evenly
    between them (so the gradient still sums to the incoming one)."""

    reduce = None

    @classmethod
    def forward(cls, ctx, x, axis=None, keepdims=False, nan_share=False):
        ctx.axes = normalize_axes(axis, x.ndim, cls.op_name(), x.shape)
        check_nonempty_axes(cls.op_name(), x.shape, ctx.axes)
        ctx.keepdims, ctx.nan_share = keepdims, nan_share
        out = cls.reduce(x, axis=ctx.axes, keepdims=True)
        ctx.save_for_backward(x, out)
        return out if keepdims else np.squeeze(out, axis=ctx.axes)

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        hit = x == out
        if ctx.nan_share and x.dtype.kind == "f":
            # torch.max(x) (all elements): a NaN maximum's gradient is shared by the NaNs;
            # torch.amax gives NaN there (NaN == NaN is false: 0/0), and so does this op
            hit |= np.isnan(x) & np.isnan(out)
        count = hit.sum(axis=ctx.axes, keepdims=True)
        g = grad if ctx.keepdims else np.expand_dims(grad, ctx.axes)
        return hit * (g / count)


class Max(_Extremum):
    reduce = staticmethod(np.max)


class _ExtremumAt(Function):
    """max(x, dim) / min(x, dim): the elements at `index` (the argmax/argmin along `axis`,
    kept as a size-1 axis). As in torch, the whole gradient goes to the returned index, even
    where several elements tie (the full reduction max(x) splits it among them instead)."""

    @staticmethod
    def forward(ctx, x, index, axis, keepdims):
        ctx.save_for_backward(index)
        ctx.x_shape, ctx.axis, ctx.keepdims = x.shape, axis, keepdims
        out = np.take_along_axis(x, index, axis)
        return out if keepdims else np.squeeze(out, axis)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        g = np.zeros(ctx.x_shape, grad.dtype)
        at = grad if ctx.keepdims else np.expand_dims(grad, ctx.axis)
        np.put_along_axis(g, index, at, ctx.axis)
        return g, None


class MaxAt(_ExtremumAt):
    name = "max"


class MinAt(_ExtremumAt):
    name = "min"


# torch.max(x, dim) and Tensor.max(dim) return this (torch.return_types.max has the same fields).
ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])


def max(
    x: Tensor,
    dim: Axis | Tensor | np.ndarray = None,
    keepdim: bool = False,
    *,
    axis: Axis = None,
    keepdims: bool | None = None,
) -> Tensor | ValuesIndices:
    """Maximum, as torch.max. Where several elements tie, max(x) splits the gradient evenly
    among them and max(x, dim) sends it all to the returned index, as torch does.

    max(x) → the largest element (0-d). max(x, dim) → a named tuple (values, indices), each of
    x's shape without `dim` (kept as size 1 with keepdim=True); indices are int64. axis= and
    keepdims= are other names for dim= and keepdim= (as in torch: max(x, axis=1) is
    (values, indices) too); a tuple of axes gives the values only (torch.amax's meaning).
    max(a, b) with a tensor b is the elementwise maximum(a, b), as in torch.
    """
    return _extremum(Max, np.argmax, maximum, x, dim, keepdim, axis, keepdims)


class Min(_Extremum):
    reduce = staticmethod(np.min)


def min(
    x: Tensor,
    dim: Axis | Tensor | np.ndarray = None,
    keepdim: bool = False,
    *,
    axis: Axis = None,
    keepdims: bool | None = None,
) -> Tensor | ValuesIndices:
    """Minimum, as torch.min: min(x, dim) → (values, indices); see `max`."""
    return _extremum(Min, np.argmin, minimum, x, dim, keepdim, axis, keepdims)


def _extremum(reduction, arg_fn, elementwise, x, dim, keepdim, axis, keepdims):
    if isinstance(dim, (Tensor, np.ndarray)):
        return elementwise(x, dim)
    keep = keepdim if keepdims is None else keepdims
    if axis is not None and dim is None:  # numpy's name for dim=: it means just what dim= does
        dim, axis = axis, None
    if dim is None or (isinstance(dim, (tuple, list)) and axis is None):
        return reduction.apply(x, axis=dim, keepdims=keep, nan_share=dim is None)
    if axis is not None:
        raise TypeError(
            f"{reduction.op_name()}: got both dim and axis= (two names for one argument)"
        )
    return _values_indices(reduction, arg_fn, x, dim, keep)


def _values_indices(reduction, arg_fn, x, dim, keep):
    """max(x, dim) / min(x, dim): (values, indices), the gradient to the index (torch's)."""
    op = reduction.op_name()
    axis = normalize_axis(dim, x.ndim, op, x.shape)
    if x.ndim == 0:  # one element: its own max, at index 0
        return ValuesIndices(reduction.apply(x), Tensor._make(np.zeros((), np.int64)))
    check_nonempty_axes(op, x.shape, (axis,))
    index = arg_fn(_data(x), axis=axis, keepdims=True)
    at = MaxAt if reduction is Max else MinAt
    values = at.apply(x, index, axis=axis, keepdims=keep)
    indices = index if keep else np.squeeze(index, axis)
    return ValuesIndices(values, Tensor._make(indices.astype(np.int64, copy=False)))


def _centered(ctx, x, axis, unbiased, keepdims, op):
    """x minus its mean over `axis`; sets ctx.axes, ctx.keepdims and ctx.denom (n, or n − 1
    when unbiased). One element has n − 1 = 0 degrees of freedom: its unbiased variance is
    0/0 = NaN, as in torch — there is no spread to estimate from a single sample."""
    ctx.axes = normalize_axes(axis, x.ndim, op, x.shape)
    n = int(np.prod([x.shape[a] for a in ctx.axes]))
    # unbiased: True, False or a number; no elements: 0/0 = NaN too
    ctx.denom = float(builtins.max(n - float(unbiased), 0))
    ctx.keepdims = keepdims
    return x - x.mean(axis=ctx.axes, keepdims=True)


def _twice_over(denom):
    """2 / denom as a Python float (so float32 stays float32); inf for 0 degrees of freedom."""
    return 2.0 / denom if denom else math.inf


class Var(Function):
    """Variance; unbiased=True divides by n − 1 (Bessel's correction, PyTorch's default).

    The gradient is 2·(x − mean)/denominator (the mean's own dependence on x cancels, since
    the deviations sum to zero).
    """

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, axis=None, unbiased=True, keepdims=False):
        xc = _centered(ctx, x, axis, unbiased, keepdims, "var")
        ctx.save_for_backward(xc)
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 above: NaN on purpose
            return np.sum(xc * xc, axis=ctx.axes, keepdims=keepdims) / ctx.denom

    @staticmethod
    def backward(ctx, grad):
        (xc,) = ctx.saved_tensors
        g = grad if ctx.keepdims else np.expand_dims(grad, ctx.axes)
        with np.errstate(divide="ignore", invalid="ignore"):
            return g * _twice_over(ctx.denom) * xc


@torch_names
def var(
    x: Tensor,
    axis: Axis = None,
    unbiased: bool = True,
    keepdims: bool = False,
    *,
    correction: float | None = None,
) -> Tensor:
    """Variance; unbiased=True divides by n − 1 (Bessel's correction, PyTorch's default).
    correction=c divides by n − c (torch's newer spelling: 0 is unbiased=False); var(x, True)
    with a bool second argument is torch's var(input, unbiased)."""
    axis, unbiased = _correction("var", axis, unbiased, correction)
    return Var.apply(x, axis=axis, unbiased=unbiased, keepdims=keepdims)


def _correction(op, axis, unbiased, correction):
    """(axis, the number subtracted from n) from torch's two spellings of var and std."""
    if isinstance(axis, bool):  # torch.var(x, unbiased): a bool where the axis would be
        axis, unbiased = None, axis
    if correction is not None:
        if unbiased is not True:
            raise op_error(op, "give unbiased= or correction=, not both", TypeError)
        unbiased = correction
    return axis, unbiased


class Std(Function):
    """Standard deviation √var (same arguments as Var).

    d std = d var / (2·std). Where std is 0 (all elements equal) that is 0/0; the gradient is
    taken as 0 there, as PyTorch does, rather than NaN.
    """

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, axis=None, unbiased=True, keepdims=False):
        xc = _centered(ctx, x, axis, unbiased, keepdims, "std")
        with np.errstate(divide="ignore", invalid="ignore"):  # one element: NaN
            out = np.sqrt(np.sum(xc * xc, axis=ctx.axes, keepdims=keepdims) / ctx.denom)
        ctx.save_for_backward(xc, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        xc, out = ctx.saved_tensors
        g_var = np.divide(grad, 2 * out, out=np.zeros(np.shape(out), dtype=xc.dtype), where=out > 0)
        if not ctx.keepdims:
            g_var = np.expand_dims(g_var, ctx.axes)
        with np.errstate(invalid="ignore"):
            return g_var * _twice_over(ctx.denom) * xc


@torch_names
def std(
    x: Tensor,
    axis: Axis = None,
    unbiased: bool = True,
    keepdims: bool = False,
    *,
    correction: float | None = None,
) -> Tensor:
    """Standard deviation: the square root of `var` (same arguments, correction= too). Where
    it is 0 (all elements equal) the gradient is 0, as in PyTorch, not NaN."""
    axis, unbiased = _correction("std", axis, unbiased, correction)
    return Std.apply(x, axis=axis, unbiased=unbiased, keepdims=keepdims)


class LogSumExp(Function):
    """log Σ exp(x), computed stably as m + log Σ exp(x − m) with m the max."""

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes = normalize_axes(axis, x.ndim, "logsumexp", x.shape)
        ctx.keepdims = keepdims
        m = np.max(x, axis=ctx.axes, keepdims=True, initial=-np.inf)  # initial: axes may be empty
        m = np.where(np.isfinite(m), m, 0)
        with np.errstate(divide="ignore"):  # log Σ over nothing = log 0 = −inf, as in torch
            out = np.log(np.sum(np.exp(x - m), axis=ctx.axes, keepdims=True)) + m
        ctx.save_for_backward(x, out)
        return out if keepdims else np.squeeze(out, axis=ctx.axes)

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        g = grad if ctx.keepdims else np.expand_dims(grad, ctx.axes)
        return g * np.exp(x - out)


@torch_names
def logsumexp(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """log Σ exp(x) over `axis`, without overflow; its gradient is softmax(x)."""
    return LogSumExp.apply(x, axis=axis, keepdims=keepdims)


def _einsum_subscripts(equation, shapes):
    """'ij,jk->ik' → (['ij', 'jk'], 'ik'), one letter per axis of each operand (shapes). '...'
    becomes letters the equation does not use, aligned from the right as in broadcasting;
    without '->' the output is the ellipsis's axes, then the letters seen once, sorted (numpy's
    and torch's implicit mode)."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(shapes):
        raise ValueError(f"equation {equation!r} names {len(inputs)} operands, got {len(shapes)}")
    explicit = [len(s.replace("...", "")) for s in inputs]
    n_ell = builtins.max(
        (len(shape) - n for s, shape, n in zip(inputs, shapes, explicit) if "..." in s), default=0
    )
    ell = "".join([c for c in string.ascii_letters if c not in equation][: builtins.max(n_ell, 0)])
    inputs = [
        s.replace("...", ell[len(ell) - (len(shape) - n) :] if len(shape) > n else "")
        for s, shape, n in zip(inputs, shapes, explicit)
    ]
    out = (
        out.replace("...", ell)
        if arrow
        else ell + "".join(sorted(c for c in set(lhs) - {",", "."} if lhs.count(c) == 1))
    )
    for s, shape in zip(inputs, shapes):
        if len(s) != len(shape) or not all(c.isalpha() for c in s):
            raise ValueError(
                f"subscripts {s!r} do not fit an operand of shape "
                f"{tuple(shape)} (equation {equation!r})"
            )
    if len(set(out)) != len(out) or not set(out) <= set("".join(inputs)):
        raise ValueError(
            f"output subscripts {out!r} must be distinct letters of the "
            f"operands (equation {equation!r})"
        )
    return inputs, out


class Einsum(Function):
    """np.einsum with gradients: an einsum is a sum of products, so the gradient for one
    operand is the einsum of the output gradient with the other operands, written with that
    operand's indices. Its indices found nowhere else (summed out alone, as j in 'ij->i') come
    back by broadcasting; an index repeated inside it (a diagonal, as in 'ii->i') receives the
    gradient on that diagonal and zero elsewhere; an axis of size 1 that broadcast against a
    larger one sums its gradient back."""

    @staticmethod
    def forward(ctx, *operands, equation):
        ctx.subscripts, ctx.out_subscripts = _einsum_subscripts(
            equation, [x.shape for x in operands]
        )
        ctx.save_for_backward(*operands)
        return _contract(",".join(ctx.subscripts) + "->" + ctx.out_subscripts, *operands)

    @staticmethod
    def backward(ctx, grad):
        operands = ctx.saved_tensors
        sizes = {}
        for s, x in zip(ctx.subscripts, operands):
            for c, n in zip(s, x.shape):
                if sizes.get(c, 1) == 1:  # a size-1 axis broadcasts (even to 0)
                    sizes[c] = n
        return tuple(
            _einsum_grad(grad, i, ctx.subscripts, ctx.out_subscripts, operands, sizes)
            for i in range(len(operands))
        )


def einsum(equation: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
    """Einstein summation, as torch.einsum('bij,bjk->bik', a, b) (operands also as one list),
    with '...' (broadcast as in torch) and indices repeated inside one operand (diagonals:
    'ii->i', 'ii' the trace). Differentiable in every operand."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return Einsum.apply(*operands, equation=equation)


def _contract(equation, *operands):
    """np.einsum(equation, *operands) in the order numpy picks, its products handed to BLAS
    (tensordot); with BLAS on one thread under mt.use_deterministic_algorithms(True): BLAS
    shares a product out among its threads, and its bits change with their count."""
    if not are_deterministic_algorithms_enabled():
        return np.einsum(equation, *operands, optimize=True)
    from ..kernels.fast_matmul.blas import blas_threads_at_most  # (imports numba: on first use)

    with blas_threads_at_most(1):
        return np.einsum(equation, *operands, optimize=True)


def _einsum_grad(grad, i, subscripts, out, operands, sizes):
    """The gradient of operand i of einsum(subscripts -> out), sizes[letter] its full size."""
    s, x = subscripts[i], operands[i]
    others = [t for j, t in enumerate(subscripts) if j != i]
    known = set(out).union(*others)
    letters = "".join(dict.fromkeys(s))  # each index once, in order
    g = _contract(
        ",".join([out] + others) + "->" + "".join(c for c in letters if c in known),
        grad,
        *(o for j, o in enumerate(operands) if j != i),
    )
    g = np.broadcast_to(
        np.expand_dims(g, [k for k, c in enumerate(letters) if c not in known]),
        tuple(sizes[c] for c in letters),
    )
    if len(letters) < len(s):  # a repeated index: write g onto the diagonal
        dx = np.zeros(tuple(sizes[c] for c in s), dtype=np.result_type(g, x))
        grid = np.indices(g.shape, sparse=True)
        dx[tuple(grid[letters.index(c)] for c in s)] = g
        g = dx
    return unbroadcast(g, x.shape).astype(x.dtype)


class CumSum(Function):
    """Running sum along one axis; the gradient is the running sum of the gradient taken
    from the other end."""

    @staticmethod
    def forward(ctx, x, axis):
        ctx.axis = normalize_axis(axis, x.ndim, "cumsum", x.shape) if x.ndim else None
        return np.cumsum(x, axis=ctx.axis).reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        if ctx.axis is None:
            return grad
        return np.flip(np.cumsum(np.flip(grad, ctx.axis), axis=ctx.axis), ctx.axis)


@torch_names
def cumsum(x: Tensor, axis: int, *, dtype: DType | None = None) -> Tensor:
    """Running sum along `axis` (torch: dim); same shape as x. dtype= casts x first."""
    return CumSum.apply(_in_dtype(x, dtype), axis=axis)


# --------------- no Function of their own: compositions of the ops above, or no gradient
@torch_names
def argmax(x: Tensor | ArrayLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the maximum (of the flattened tensor when axis is None); int64, no gradient."""
    d = _data(x)
    axes = range(d.ndim) if axis is None else (normalize_axis(axis, d.ndim, "argmax", d.shape),)
    check_nonempty_axes("argmax", d.shape, axes)
    return Tensor._make(np.asarray(np.argmax(d, axis=axis, keepdims=keepdims)))


@torch_names
def argmin(x: Tensor | ArrayLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the minimum (of the flattened tensor when axis is None); int64, no gradient."""
    d = _data(x)
    axes = range(d.ndim) if axis is None else (normalize_axis(axis, d.ndim, "argmin", d.shape),)
    check_nonempty_axes("argmin", d.shape, axes)
    return Tensor._make(np.asarray(np.argmin(d, axis=axis, keepdims=keepdims)))


def _in_dtype(x, dtype):
    """x cast to `dtype` first (torch's dtype= of sum, cumsum, prod, softmax), or x."""
    return x if dtype is None else cast(x, dtype)


# --------------- products, extremes over several axes, the median, norms
def _exclusive_products(x, axis):
    """For each element, the product of every other element along `axis` (exact where x has
    zeros, unlike prod/x): the running product from the left times the one from the right."""
    ones = np.ones_like(np.take(x, [0], axis=axis))
    left = np.cumprod(np.concatenate([ones, x], axis=axis), axis=axis)
    right = np.flip(np.cumprod(np.flip(np.concatenate([x, ones], axis=axis), axis), axis), axis)
    n = x.shape[axis]
    return np.take(left, range(n), axis=axis) * np.take(right, range(1, n + 1), axis=axis)


class Prod(Function):
    """Product over one axis or all; d/dx_i = the product of the other elements (computed
    without dividing, so zeros in x are exact)."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axis, ctx.keepdims, ctx.shape = axis, keepdims, x.shape
        ctx.save_for_backward(x)
        return np.asarray(np.prod(x, axis=axis, keepdims=keepdims))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if x.size == 0:  # no element: no gradient to give
            return np.zeros(x.shape, grad.dtype)
        if ctx.axis is None:
            others = _exclusive_products(x.reshape(-1), 0).reshape(x.shape)
            return grad * others
        g = grad if ctx.keepdims else np.expand_dims(grad, ctx.axis)
        return g * _exclusive_products(x, ctx.axis)


@torch_names
def prod(
    x: Tensor, axis: int | None = None, keepdims: bool = False, *, dtype: DType | None = None
) -> Tensor:
    """Product of all elements, or along one `axis` (torch: dim); integers and bools give
    int64, as torch."""
    x = _in_dtype(x, dtype)
    if x.dtype.kind in "biu" and dtype is None:
        x = cast(x, np.int64)
    if axis is not None:
        axis = normalize_axis(axis, x.ndim, "prod", x.shape) if x.ndim else None
    return Prod.apply(x, axis=axis, keepdims=keepdims and axis is not None)


class CumProd(Function):
    """Running product along one axis. d out_k / d x_i = the product of x_j for j ≤ k, j ≠ i;
    without zeros that is out_k / x_i, and the gradient is the reversed running sum of
    grad·out, divided by x. A slice with a zero takes the exact route: each x_i set to 1 in
    turn, an (…, n, n) running product, O(n²)."""

    @staticmethod
    def forward(ctx, x, axis):
        ctx.axis = normalize_axis(axis, x.ndim, "cumprod", x.shape) if x.ndim else None
        out = np.cumprod(x, axis=ctx.axis).reshape(x.shape)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        if ctx.axis is None or x.size == 0:
            return grad
        if np.all(x != 0):
            s = np.flip(np.cumsum(np.flip(grad * out, ctx.axis), axis=ctx.axis), ctx.axis)
            return s / x
        xl, gl = np.moveaxis(x, ctx.axis, -1), np.moveaxis(grad, ctx.axis, -1)
        n = xl.shape[-1]
        rows = np.repeat(xl[..., None, :], n, axis=-2)  # row i: x with x_i set to 1
        rows[..., np.arange(n), np.arange(n)] = 1
        partial = np.cumprod(rows, axis=-1)  # [..., i, k] = Π_{j≤k, j≠i} x_j
        upper = np.triu(np.ones((n, n), dtype=bool))  # k ≥ i
        g = np.sum(np.where(upper, partial * gl[..., None, :], 0), axis=-1)
        return np.moveaxis(g, -1, ctx.axis)


@torch_names
def cumprod(x: Tensor, axis: int, *, dtype: DType | None = None) -> Tensor:
    """Running product along `axis` (torch: dim); same shape as x."""
    x = _in_dtype(x, dtype)
    if x.dtype.kind in "biu" and dtype is None:
        x = cast(x, np.int64)
    return CumProd.apply(x, axis=axis)


@torch_names
def amax(x: Tensor, axis: Axis = (), keepdims: bool = False) -> Tensor:
    """Maximum over `axis` (an int or a tuple; () or None: all). Ties share the gradient
    evenly, as torch.amax."""
    return Max.apply(x, axis=None if axis == () else axis, keepdims=keepdims)


@torch_names
def amin(x: Tensor, axis: Axis = (), keepdims: bool = False) -> Tensor:
    """Minimum over `axis` (an int or a tuple; () or None: all); ties share the gradient."""
    return Min.apply(x, axis=None if axis == () else axis, keepdims=keepdims)


class MedianAt(_ExtremumAt):
    """The elements at `index` along `axis` (the median's, kept as a size-1 axis); the
    gradient goes to those elements, as max(x, dim)'s does."""

    name = "median"


def _median_index(d, axis):
    """The index of the lower median along `axis` (a NaN's, where the slice has one, as
    torch: the median of a slice with a NaN is NaN)."""
    order = np.argsort(d, axis=axis, kind="stable")
    n = d.shape[axis]
    index = np.take(order, [(n - 1) // 2], axis=axis)
    if d.dtype.kind == "f":
        has_nan = np.isnan(d).any(axis=axis, keepdims=True)
        first_nan = np.argmax(np.isnan(d), axis=axis, keepdims=True)
        index = np.where(has_nan, first_nan, index)
    return index


@torch_names
def median(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor | ValuesIndices:
    """The lower median (for an even count, the smaller of the two middle values, as torch).
    median(x) → a 0-d tensor; median(x, dim) → (values, indices). The gradient goes to the
    median's element."""
    if axis is None:
        flat = x.reshape(-1)
        check_nonempty_axes("median", flat.shape, (0,))
        return MedianAt.apply(flat, _median_index(flat.numpy(), 0), axis=0, keepdims=False)
    if x.ndim == 0:
        return ValuesIndices(x * 1, Tensor._make(np.zeros((), np.int64)))
    axis = normalize_axis(axis, x.ndim, "median", x.shape)
    check_nonempty_axes("median", x.shape, (axis,))
    index = _median_index(x.numpy(), axis)
    values = MedianAt.apply(x, index, axis=axis, keepdims=keepdims)
    indices = index if keepdims else np.squeeze(index, axis)
    return ValuesIndices(values, Tensor._make(indices.astype(np.int64, copy=False)))


class PNorm(Function):
    """(Σ |x|^p)^(1/p) over `axes`, for a finite p > 0. d/dx = x·|x|^(p−2) / norm^(p−1): for
    p = 2, x / norm. Where the norm is 0 (or x is 0 and p < 2) the gradient is 0, as torch's."""

    @staticmethod
    def forward(ctx, x, p, axes, keepdims):
        ctx.p, ctx.axes, ctx.keepdims = p, axes, keepdims
        a = np.abs(x)
        out = np.sqrt(np.sum(a * a, axis=axes, keepdims=True)) if p == 2 else (
            np.sum(a**p, axis=axes, keepdims=True) ** (1.0 / p)
        )  # fmt: skip
        ctx.save_for_backward(x, out)
        return out if keepdims else np.squeeze(out, axis=axes)

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        g = grad if ctx.keepdims else np.expand_dims(grad, ctx.axes)
        p = ctx.p
        with np.errstate(all="ignore"):
            scale = x / out if p == 2 else x * np.abs(x) ** (p - 2) / out ** (p - 1)
        return np.where((out == 0) | (x == 0), np.zeros((), x.dtype), g * scale)


@torch_names
def vector_norm(x: Tensor, ord: float = 2, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """The vector p-norm over `axis` (None: all elements), torch.linalg.vector_norm:
    (Σ |x|^ord)^(1/ord); ord=inf is max |x|, -inf min |x|, 0 the count of non-zeros."""
    if x.dtype.kind != "f":
        raise op_error(
            "norm", f"input has dtype {x.dtype} (shape {tuple(x.shape)}): give a float tensor",
            TypeError,
        )  # fmt: skip
    axes = normalize_axes(axis, x.ndim, "norm", x.shape)
    if ord in (math.inf, -math.inf):
        return (amax if ord > 0 else amin)(abs(x), axes or None, keepdims)
    if ord == 0:  # the count of non-zeros: its gradient is 0 (NaN and ±∞ count as non-zero)
        return sum(sign(abs(nan_to_num(x, nan=1.0))), axes, keepdims)
    if ord < 0:
        return sum(abs(x) ** ord, axes, keepdims) ** (1.0 / ord)
    return PNorm.apply(x, p=float(ord), axes=axes, keepdims=keepdims)


@torch_names
def norm(
    x: Tensor, p: float | str = "fro", axis: Axis = None, keepdims: bool = False,
    dtype: DType | None = None,
) -> Tensor:  # fmt: skip
    """torch.norm: the 2-norm ('fro', the default) or any vector p-norm over `axis` (torch:
    dim; None: every element). 'nuc' (a matrix norm) is not provided."""
    if p == "nuc":
        raise op_error("norm", "p='nuc' (the nuclear norm) is not provided", NotImplementedError)
    return vector_norm(_in_dtype(x, dtype), 2 if p == "fro" else p, axis, keepdims)


# --------------- more reductions and scans (found missing by the OpInfo walk)
@torch_names
def var_mean(
    x: Tensor,
    axis: Axis = None,
    unbiased: bool = True,
    keepdims: bool = False,
    *,
    correction: float | None = None,
) -> tuple[Tensor, Tensor]:
    """(var, mean) over `axis`, var as `var` (correction= too)."""
    axis, unbiased = _correction("var_mean", axis, unbiased, correction)
    return var(x, axis, unbiased, keepdims), mean(x, axis, keepdims)


@torch_names
def std_mean(
    x: Tensor,
    axis: Axis = None,
    unbiased: bool = True,
    keepdims: bool = False,
    *,
    correction: float | None = None,
) -> tuple[Tensor, Tensor]:
    """(std, mean) over `axis`, std as `std` (correction= too)."""
    axis, unbiased = _correction("std_mean", axis, unbiased, correction)
    return std(x, axis, unbiased, keepdims), mean(x, axis, keepdims)


MinMax = collections.namedtuple("MinMax", ["min", "max"])


@torch_names
def aminmax(x: Tensor, *, axis: int | None = None, keepdims: bool = False) -> MinMax:
    """(min, max) over `axis` (None: all), as torch.aminmax; ties share the gradient."""
    return MinMax(amin(x, axis, keepdims), amax(x, axis, keepdims))


@torch_names
def nansum(
    x: Tensor, axis: Axis = None, keepdims: bool = False, *, dtype: DType | None = None
) -> Tensor:
    """Sum with NaNs counted as 0 (they get no gradient)."""
    from .shape import where

    x = _in_dtype(x, dtype)
    clean = where(np.isnan(_data(x)), 0.0, x) if x.dtype.kind == "f" else x
    return sum(clean, axis, keepdims)


@torch_names
def nanmean(
    x: Tensor, axis: Axis = None, keepdims: bool = False, *, dtype: DType | None = None
) -> Tensor:
    """Mean of the non-NaN elements (NaN where there are none)."""
    x = _in_dtype(x, dtype)
    count = np.sum(
        ~np.isnan(_data(x)),
        axis=normalize_axes(axis, x.ndim, "nanmean", x.shape),
        keepdims=keepdims,
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return nansum(x, axis, keepdims) / count.astype(x.dtype)


@torch_names
def count_nonzero(x: Tensor | ArrayLike, axis: Axis = None) -> Tensor:
    """How many elements are not 0 over `axis` (int64, no gradient)."""
    d = _data(x)
    axes = normalize_axes(axis, d.ndim, "count_nonzero", d.shape)
    return Tensor._make(np.asarray(np.count_nonzero(d, axis=axes)).astype(np.int64))


def _cum_index(x, values, axis, reached):
    """Where each running extremum was reached: the latest index among ties, and every NaN
    (a NaN, once met, is the extremum from there on), as torch."""
    at = np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    hit = reached(x, values)
    if x.dtype.kind == "f":
        hit |= np.isnan(x)
    return np.maximum.accumulate(np.where(hit, at, 0), axis=axis)


class _CumExtremum(Function):
    """cummax / cummin along `axis` (NaN propagates); the gradient of each output goes to
    the element it was read from."""

    accumulate = None
    reached = None

    @classmethod
    def forward(cls, ctx, x, index, axis):
        ctx.index, ctx.shape, ctx.axis = index, x.shape, axis
        return cls.accumulate(x, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        g = np.zeros(ctx.shape, grad.dtype)
        where = list(np.indices(ctx.shape, sparse=True))
        where[ctx.axis] = ctx.index
        np.add.at(g, tuple(where), grad)
        return g, None


class CumMax(_CumExtremum):
    name = "cummax"
    accumulate = staticmethod(np.maximum.accumulate)
    reached = staticmethod(np.greater_equal)


class CumMin(_CumExtremum):
    name = "cummin"
    accumulate = staticmethod(np.minimum.accumulate)
    reached = staticmethod(np.less_equal)


def _cum_extremum(cls, x, dim):
    if x.ndim == 0:
        return ValuesIndices(x * 1, Tensor._make(np.zeros((), np.int64)))
    axis = normalize_axis(dim, x.ndim, cls.name, x.shape)
    d = _data(x)
    index = _cum_index(d, cls.accumulate(d, axis=axis), axis, cls.reached)
    values = cls.apply(x, index, axis=axis)
    return ValuesIndices(values, Tensor._make(index.astype(np.int64)))


def cummax(x: Tensor, dim: int) -> ValuesIndices:
    """(values, indices): the running maximum along `dim` and where it was reached."""
    return _cum_extremum(CumMax, x, dim)


def cummin(x: Tensor, dim: int) -> ValuesIndices:
    """(values, indices): the running minimum along `dim` and where it was reached."""
    return _cum_extremum(CumMin, x, dim)


class LogCumSumExp(Function):
    """ln Σ_{j ≤ i} e^(x_j) along `axis`, without overflow (np.logaddexp.accumulate). The
    gradient: Σ_{k ≥ i} g_k·e^(x_i − out_k), a reversed running sum, taken in log space."""

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, axis):
        out = np.logaddexp.accumulate(x, axis=axis) if x.ndim else x.copy()
        ctx.save_for_backward(x, out)
        ctx.axis = axis
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        if x.ndim == 0:
            return grad
        a = ctx.axis

        def part(g):  # e^x · Σ_{k ≥ i} g_k e^(−out_k), for g ≥ 0, summed in log space
            with np.errstate(divide="ignore", invalid="ignore"):
                logs = np.flip(np.logaddexp.accumulate(np.flip(np.log(g) - out, a), axis=a), a)
                return np.where(np.isneginf(logs), 0.0, np.exp(x + logs))

        # the positive and the negative upstream gradients apart: each sum is then one of
        # exponentials (a logcumsumexp of its own), which stays in range where e^x would not
        return (part(np.maximum(grad, 0)) - part(np.maximum(-grad, 0))).astype(grad.dtype)


def logcumsumexp(x: Tensor, dim: int) -> Tensor:
    """ln of the running sum of e^x along `dim` (a running logsumexp)."""
    axis = normalize_axis(dim, x.ndim, "logcumsumexp", x.shape) if x.ndim else 0
    return LogCumSumExp.apply(x, axis=axis)


class KthValueAt(MedianAt):
    name = "kthvalue"


def kthvalue(x: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """(values, indices) of the k-th smallest element along `dim` (k from 1)."""
    if x.ndim == 0:
        if k != 1:
            raise op_error("kthvalue", f"k {k} is out of range for a 0-d tensor")
        return ValuesIndices(x * 1, Tensor._make(np.zeros((), np.int64)))
    axis = normalize_axis(dim, x.ndim, "kthvalue", x.shape)
    if not 1 <= k <= x.shape[axis]:
        raise op_error("kthvalue", f"k {k} is out of range for axis {axis} of size {x.shape[axis]}")
    d = _data(x)
    index = np.take(np.argsort(d, axis=axis, kind="stable"), [k - 1], axis=axis)
    values = KthValueAt.apply(x, index, axis=axis, keepdims=keepdim)
    indices = index if keepdim else np.squeeze(index, axis)
    return ValuesIndices(values, Tensor._make(indices.astype(np.int64, copy=False)))


def msort(x: Tensor) -> Tensor:
    """x sorted along axis 0 (the values of sort(x, 0))."""
    from .shape import sort

    return sort(x, 0).values


def diff(
    x: Tensor,
    n: int = 1,
    dim: int = -1,
    prepend: Tensor | None = None,
    append: Tensor | None = None,
) -> Tensor:
    """The n-th forward difference along `dim` (prepend/append joined first)."""
    from .shape import concat, getitem

    axis = normalize_axis(dim, x.ndim, "diff", x.shape)
    if n == 0:  # torch: x itself, prepend and append not joined
        return x
    parts = [p for p in (prepend, x, append) if p is not None]
    x = concat(parts, axis) if len(parts) > 1 else x
    for _ in range(n):
        if x.shape[axis] == 0:
            break
        lo = getitem(x, (slice(None),) * axis + (slice(0, -1),))
        hi = getitem(x, (slice(None),) * axis + (slice(1, None),))
        x = (hi != lo) if x.dtype.kind == "b" else hi - lo
    return x
