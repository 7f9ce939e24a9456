"""Shape ops: they move or select elements; their backward puts the gradient back in place.

After each class comes the public function that checks its arguments and applies it
(`minitensor.functional` re-exports it); functions with no class of their own close the file.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import random as _random
from ..autograd import SliceGradient
from ..errors import DTypeError, IndexRangeError
from ..function import Function, ShapeError, apply_view, op_error, unbroadcast
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor
from ..typing import ArrayLike, Axis, Scalar
from ._args import _constant, _data, _keep_float_dtype, _operand
from ._axes import normalize_axis, shape_arg, torch_index_steps, torch_names
from .reduce import ValuesIndices


def _view(cls, x, **params):
    """The view op `cls` applied to x: by `apply_view` for a Tensor (most calls), by `apply`
    for anything else it accepts (an array, a list)."""
    if isinstance(x, Tensor):
        return apply_view(cls, x, 2, **params)  # (frames: this one, the op's function)
    return cls.apply(x, **params)


class Reshape(Function):
    """A new shape for the same elements: a view when numpy can make one, else a copy."""

    is_view = True
    plain_params = True  # a shape or axes, never Tensors

    @staticmethod
    def forward(ctx, x, shape):
        ctx.in_shape = x.shape
        try:
            return x.reshape(shape)
        except ValueError:
            raise ShapeError(
                f"cannot reshape {x.shape} ({x.size} elements) into {tuple(shape)}"
            ) from None

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.in_shape)


def reshape(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """The same elements in a new shape (one size may be -1): reshape(x, 2, 3) or
    reshape(x, (2, 3)). A view of x when numpy can make one."""
    return _view(Reshape, x, shape=shape_arg(shape))


view = reshape


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
    shape = x.shape[:s] + (int(np.prod(x.shape[s : e + 1])),) + x.shape[e + 1 :]
    return reshape(x, shape)


class Permute(Function):
    """Reorder the axes (a view): out.shape[i] == x.shape[axes[i]]."""

    is_view = True
    plain_params = True  # a shape or axes, never Tensors

    @staticmethod
    def forward(ctx, x, axes):
        norm = _PERMUTATIONS.get((axes, x.ndim))
        if norm is None or bool in map(type, axes):  # (True == 1: a bool must not hit the cache)
            norm = tuple(normalize_axis(a, x.ndim, "permute", x.shape) for a in axes)
            if sorted(norm) != list(range(x.ndim)):
                raise ShapeError(
                    f"axes {tuple(axes)} are not a permutation of the {x.ndim} axes "
                    f"of a tensor of shape {x.shape}"
                )
            if len(_PERMUTATIONS) < 4096:  # (a model uses a handful: bounded anyway)
                _PERMUTATIONS[axes, x.ndim] = norm
        ctx.axes = norm
        return x.transpose(norm)

    @staticmethod
    def backward(ctx, grad):
        axes = ctx.axes  # the inverse permutation: x's axis axes[i] is the output's axis i
        return grad.transpose(sorted(range(len(axes)), key=axes.__getitem__))


# {(axes as given, number of axes): the axes checked and made non-negative}: a model permutes
# with the same few axes at every step (a weight's transpose, attention's head split)
_PERMUTATIONS: dict = {}


def permute(x: Tensor, *axes: int | Sequence[int]) -> Tensor:
    """Reorder the axes: out.shape[i] == x.shape[axes[i]] (e.g. (B, L, h, d) → (B, h, L, d)
    with permute(x, 0, 2, 1, 3))."""
    return _view(Permute, x, axes=shape_arg(axes))


def transpose(x: Tensor, axis0: int | None = None, axis1: int | None = None) -> Tensor:
    """transpose(x) reverses all axes (like .T); transpose(x, a, b) swaps axes a and b."""
    if axis0 is None and axis1 is None:
        return _view(Permute, x, axes=tuple(reversed(range(x.ndim))))
    return _swap(x, axis0, axis1, "transpose")


def swapaxes(x: Tensor, axis0: int, axis1: int) -> Tensor:
    """Swap two axes (a view): swapaxes(k, -1, -2) turns keys (…, L, d) into (…, d, L)."""
    return _swap(x, axis0, axis1, "swapaxes")


def _swap(x, axis0, axis1, op):
    a = normalize_axis(axis0, x.ndim, op, x.shape)
    b = normalize_axis(axis1, x.ndim, op, x.shape)
    if x.ndim == 0:  # torch: dims 0 and -1 of a 0-d tensor name the tensor itself
        return _view(Permute, x, axes=())
    axes = list(range(x.ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return _view(Permute, x, axes=tuple(axes))


class Expand(Function):
    """Broadcast to a larger shape without copying (numpy's broadcast_to)."""

    is_view = True
    plain_params = True  # a shape or axes, never Tensors

    @staticmethod
    def forward(ctx, x, shape):
        ctx.in_shape = x.shape
        try:
            return np.broadcast_to(x, shape)
        except ValueError:
            raise ShapeError(f"cannot broadcast shape {x.shape} to {tuple(shape)}") from None

    @staticmethod
    def backward(ctx, grad):
        return unbroadcast(grad, ctx.in_shape)


def expand(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """Broadcast to `shape` without copying (-1 keeps a size)."""
    shape = shape_arg(shape)
    lead = len(shape) - x.ndim
    full = tuple(x.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
    return _view(Expand, x, shape=full)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Broadcast to `shape` without copying (numpy's rules); the gradient sums the copies."""
    return _view(Expand, x, shape=tuple(shape))


class Concat(Function):
    @staticmethod
    def forward(ctx, *xs, axis=0):
        if not xs:
            raise ValueError("needs at least one tensor")
        axis = normalize_axis(axis, xs[0].ndim, "concat", xs[0].shape)
        try:
            out = np.concatenate(xs, axis=axis)
        except ValueError:
            shapes = ", ".join(str(x.shape) for x in xs)
            raise ShapeError(f"shapes {shapes} differ outside axis {axis}") from None
        ctx.axis, ctx.bounds = axis, np.cumsum([x.shape[axis] for x in xs])[:-1]
        return out

    @staticmethod
    def backward(ctx, grad):
        return tuple(np.split(grad, ctx.bounds, axis=ctx.axis))


@torch_names
def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis; their other sizes must match. Dtypes promote as
    torch's do (integers beside float32 give float32)."""
    return Concat.apply(*_keep_float_dtype(*map(_constant, tensors)), axis=axis)


cat = concat


class Stack(Function):
    @staticmethod
    def forward(ctx, *xs, axis=0):
        if not xs:
            raise ValueError("needs at least one tensor")
        if any(x.shape != xs[0].shape for x in xs):
            shapes = ", ".join(str(x.shape) for x in xs)
            raise ShapeError(f"all tensors must have the same shape, got {shapes}")
        ctx.axis = normalize_axis(axis, xs[0].ndim + 1, "stack", xs[0].shape)
        return np.stack(xs, axis=ctx.axis)

    @staticmethod
    def backward(ctx, grad):
        return tuple(np.moveaxis(grad, ctx.axis, 0))


@torch_names
def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis: n tensors (a, b) → (n, a, b) with axis=0.
    Dtypes promote as in `concat`."""
    return Stack.apply(*_keep_float_dtype(*map(_constant, tensors)), axis=axis)


def _is_basic_index(index):
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice)) for i in items)


class GetItem(Function):
    """x[index] for ints, slices, None, Ellipsis, integer arrays and boolean masks.

    Backward scatters the gradient back. Advanced indices may repeat an element
    (x[[0, 0, 1]]): `np.add.at` then adds each copy's gradient, where plain assignment
    would keep only the last one. Basic indexing (ints, slices, None, ...) returns a view, so
    the result shares the input's version counter.
    """

    name = "getitem"
    is_view = True  # only when numpy returned a view: Function.apply checks the memory

    @staticmethod
    def forward(ctx, x, index):
        ctx.in_shape, ctx.in_dtype, ctx.index = x.shape, x.dtype, index
        ctx.basic = _is_basic_index(index)
        # saved so that an index tensor edited in place before backward is caught
        items = index if isinstance(index, tuple) else (index,)
        ctx.save_for_backward(*(i for i in items if isinstance(i, np.ndarray)))
        ctx.steps = torch_index_steps(index)  # integers beside arrays: torch's reading
        try:
            return x[ctx.steps[0]][ctx.steps[1]] if ctx.steps else x[index]
        except IndexError as e:
            raise IndexError(f"{e} (indexing a tensor of shape {x.shape})") from None

    @staticmethod
    def backward(ctx, grad):
        if ctx.basic:  # a view: the engine adds grad into x's gradient where the view lies
            return SliceGradient(ctx.index, grad, ctx.in_shape)
        g = np.zeros(ctx.in_shape, dtype=grad.dtype)
        if ctx.steps:
            np.add.at(g[ctx.steps[0]], ctx.steps[1], grad)  # g[first] is a view into g
        else:
            np.add.at(g, ctx.index, grad)
        return g


def _index_arg(index):
    # Tensors stay Tensors (Function.apply unwraps them and version-checks what GetItem saves)
    if isinstance(index, list):
        return np.asarray(index)
    return index


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index]: ints, slices, None, Ellipsis, integer arrays/lists/tensors and boolean masks,
    as in torch (integers select first, so y[0, :, idx] is y[0][:, idx]; otherwise numpy's
    rules, which are torch's). Repeated indices receive the sum of their gradients."""
    return GetItem.apply(x, index=_index_arg(index))


@torch_names
def split(x: Tensor, split_size_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split along `axis` into pieces of `split_size` (an int; the last may be smaller) or of
    the given list of sizes. Returns a list of tensors (views of x)."""
    axis = normalize_axis(axis, x.ndim, "split", x.shape)
    n = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0:
            raise op_error(
                "split", f"size must be positive, got {size} (shape {x.shape})", ValueError
            )
        # an empty axis still splits into one (empty) piece, as in PyTorch
        sizes = [size] * (n // size) + ([n % size] if n % size or n == 0 else [])
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise op_error(
                "split", f"sizes {sizes} do not add up to {n} (axis {axis} of {x.shape})"
            )
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
        raise op_error(
            "chunk", f"chunks must be a positive int, got {chunks!r} (shape {x.shape})", ValueError
        )
    if n == 0:  # PyTorch: `chunks` empty pieces
        return split(x, [0] * chunks, axis=axis)
    return split(x, -(-n // chunks), axis=axis)


def gather(x: Tensor, dim: int, index: Tensor | ArrayLike) -> Tensor:
    """torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] for dim=1. `index` (int) has x's
    number of axes (a 0-d tensor counts as 1-d, as in torch), no more than x's size on the
    other axes; every index in [0, x.shape[dim]). The result has index's shape.
    Differentiable in x (a gather of getitem)."""
    idx = _index_array("gather", x, index)
    if max(idx.ndim, 1) != max(x.ndim, 1):
        raise op_error(
            "gather",
            f"index must have x's number of axes (x of shape {x.shape}), got shape {idx.shape}",
        )
    dim = normalize_axis(dim, x.ndim, "gather", x.shape)
    x1, idx1 = (x if x.ndim else reshape(x, (1,))), idx.reshape(idx.shape or (1,))
    if any(i > n for d, (i, n) in enumerate(zip(idx1.shape, x1.shape)) if d != dim):
        raise op_error(
            "gather",
            f"index of shape {idx.shape} is larger than x of shape {x.shape} on an "
            f"axis other than dim {dim}",
        )
    _check_index_range("gather", idx1, x1.shape[dim], dim, x.shape)
    grid = list(np.indices(idx1.shape, sparse=True))
    grid[dim] = idx1
    out = getitem(x1, tuple(grid))
    return out if idx.ndim else reshape(out, ())


def _index_array(op, x, index):
    idx = np.asarray(_data(index))
    if idx.dtype.kind not in "iu":
        raise op_error(
            op,
            f"index must be an integer tensor, got {idx.dtype} of shape {idx.shape} "
            f"(x of shape {x.shape})",
            DTypeError,
        )
    return idx


def _check_index_range(op, idx, n, dim, shape):
    """torch refuses an index outside [0, n) (numpy would wrap −1 to the last element)."""
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx.min() if idx.min() < 0 else idx.max()
        raise op_error(
            op,
            f"index {bad} is out of range for dim {dim} of size {n} (x of shape {shape})",
            IndexRangeError,
        )


def index_select(x: Tensor, dim: int, index: Tensor | ArrayLike) -> Tensor:
    """The slices of x at positions `index` (1-D int, or 0-d: one position, its axis kept, as
    in torch) along `dim`; every index in [0, x.shape[dim]). Differentiable in x."""
    idx = _index_array("index_select", x, index)
    if idx.ndim > 1:
        raise op_error(
            "index_select",
            f"index must be 1-D (or 0-d), got shape {idx.shape} (x of shape {x.shape})",
            IndexError,
        )
    dim = normalize_axis(dim, x.ndim, "index_select", x.shape)
    idx = idx.reshape(-1)
    _check_index_range("index_select", idx, x.shape[dim] if x.ndim else 1, dim, x.shape)
    if x.ndim == 0:  # torch: a 0-d tensor has one position, and the result is 0-d
        if idx.size != 1:
            raise op_error("index_select", f"index to a 0-d tensor must have one value, got {idx}")
        return reshape(getitem(reshape(x, (1,)), idx), ())
    return getitem(x, (slice(None),) * dim + (idx,))


class Where(Function):
    """cond ? a : b elementwise (cond is a bool array, not differentiable)."""

    @staticmethod
    def forward(ctx, cond, a, b):
        if cond.dtype != np.bool_:
            raise TypeError(f"condition must be bool, got {cond.dtype} of shape {cond.shape}")
        try:
            np.broadcast_shapes(cond.shape, np.shape(a), np.shape(b))
        except ValueError:
            raise ShapeError(
                f"condition {cond.shape}, a {np.shape(a)} and b {np.shape(b)} do "
                f"not broadcast together"
            ) from None
        ctx.save_for_backward(cond)
        ctx.shapes = (np.shape(a), np.shape(b))
        return np.where(cond, a, b)

    @staticmethod
    def backward(ctx, grad):
        (cond,) = ctx.saved_tensors
        zero = np.zeros((), dtype=grad.dtype)
        ga = unbroadcast(np.where(cond, grad, zero), ctx.shapes[0])
        gb = unbroadcast(np.where(cond, zero, grad), ctx.shapes[1])
        return None, ga, gb


def where(cond: Tensor | ArrayLike, a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """Elementwise `cond ? a : b`; cond is a bool tensor or array."""
    like = a if isinstance(a, Tensor) else b
    a, b = _keep_float_dtype(_operand(a, like), _operand(b, like))
    return Where.apply(_constant(cond), a, b)


class MaskedFill(Function):
    """Positions where `mask` is True take `value` (a number, or a 0-d tensor that receives
    the sum of the gradient at those positions, as in torch). x and the bool mask broadcast
    together, as torch's out-of-place masked_fill: the output has their broadcast shape."""

    name = "masked_fill"

    @staticmethod
    def forward(ctx, x, mask, value):
        if mask.dtype != np.bool_:
            raise DTypeError(
                f"mask must be bool (True = fill), got {mask.dtype} of shape {mask.shape}"
            )
        if np.ndim(value) != 0:
            raise ShapeError(
                f"value must be a number or a 0-d tensor, got shape {np.shape(value)} "
                f"(x of shape {x.shape})"
            )
        try:
            out = np.where(mask, np.asarray(value).astype(x.dtype), x)
        except ValueError:
            raise ShapeError(
                f"mask of shape {mask.shape} and x of shape {x.shape} do not broadcast"
            ) from None
        ctx.save_for_backward(mask)
        ctx.shapes = (x.shape, np.shape(value), np.asarray(value).dtype)
        return out

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        x_shape, _, value_dtype = ctx.shapes
        zero = np.zeros((), grad.dtype)
        gx = unbroadcast(np.where(mask, zero, grad), x_shape)
        if not ctx.needs_input_grad[2]:
            return gx, None, None
        g_value = np.where(mask, grad, zero).sum()
        return gx, None, np.asarray(g_value, dtype=value_dtype)


def masked_fill(x: Tensor, mask: Tensor | ArrayLike, value: Tensor | ArrayLike) -> Tensor:
    """x with the positions where mask is True (bool, broadcasting with x) set to value (a
    number, or a 0-d tensor, differentiable as torch's)."""
    if not isinstance(value, Tensor):
        value = np.asarray(value)
    return MaskedFill.apply(x, _constant(mask), value)


class _Triangle(Function):
    """Keep one triangle of the last two axes (diagonal k and the side `keep` names)."""

    keep = None  # np.tril or np.triu

    @classmethod
    def forward(cls, ctx, x, k=0):
        if x.ndim < 2:
            raise ShapeError(
                f"needs at least 2 axes (it works on the last two), got shape {x.shape}"
            )
        ctx.k = k
        return cls.keep(x, k)

    @staticmethod
    def backward(ctx, grad):
        return ctx.fn.keep(grad, ctx.k)


class Tril(_Triangle):
    """Lower triangle of the last two axes (elements above diagonal k become 0)."""

    keep = staticmethod(np.tril)


@torch_names
def tril(x: Tensor, k: int = 0) -> Tensor:
    """Keep the lower triangle of the last two axes (j ≤ i + k), zero elsewhere."""
    return Tril.apply(x, k=k)


class Triu(_Triangle):
    """Upper triangle of the last two axes (elements below diagonal k become 0)."""

    keep = staticmethod(np.triu)


@torch_names
def triu(x: Tensor, k: int = 0) -> Tensor:
    """Keep the upper triangle of the last two axes (j ≥ i + k), zero elsewhere."""
    return Triu.apply(x, k=k)


def scatter_into(out, dim, index, src):
    """out[…, index[i, j, …], …] = src[i, j, …] along axis `dim`, in place (torch's scatter_):
    index is an integer array with out's number of axes, no larger than out on the other axes;
    src is a number, or an array at least index's size on every axis (its first index.shape
    elements are used). Returns the positions written, for backward."""
    if index.ndim != out.ndim or index.dtype.kind not in "iu":
        raise DTypeError(
            f"index must be an integer tensor with {out.ndim} axes like the "
            f"input (shape {out.shape}), got {index.dtype} of shape {index.shape}"
        )
    small = all(i <= n for d, (i, n) in enumerate(zip(index.shape, out.shape)) if d != dim)
    if not small or (np.ndim(src) and any(i > n for i, n in zip(index.shape, np.shape(src)))):
        raise ShapeError(
            f"index of shape {index.shape} must be no larger than the input "
            f"{out.shape} (but along dim {dim}) and than src {np.shape(src)}"
        )
    if index.size and (index.min() < 0 or index.max() >= out.shape[dim]):
        raise IndexRangeError(
            f"index {index.max() if index.max() >= 0 else index.min()} is "
            f"out of range for dim {dim} of size {out.shape[dim]} (input shape "
            f"{out.shape})"
        )
    where = list(np.indices(index.shape, sparse=True))
    where[dim] = index
    where = tuple(where)
    out[where] = src if np.ndim(src) == 0 else src[tuple(slice(0, n) for n in index.shape)]
    return where


class Scatter(Function):
    """torch.scatter out of place: a copy of x with src (a tensor, or a number) written at the
    positions `index` names along `dim`. Gradients: x's is the output's with the overwritten
    positions zeroed; src's is the output's read back at those positions (torch's gather)."""

    @staticmethod
    def forward(ctx, x, index, src, dim):
        out = x.copy()
        ctx.where = scatter_into(out, dim, index, src)
        ctx.shapes = (index.shape, np.shape(src))
        return out

    @staticmethod
    def backward(ctx, grad):
        dx = grad.copy()
        dx[ctx.where] = 0
        if not ctx.needs_input_grad[2]:
            return dx, None, None
        index_shape, src_shape = ctx.shapes
        dsrc = np.zeros(src_shape, grad.dtype)  # src elements beyond index's size: 0
        dsrc[tuple(slice(0, n) for n in index_shape)] = grad[ctx.where]
        return dx, None, dsrc


def scatter(
    x: Tensor | ArrayLike,
    dim: int,
    index: Tensor | ArrayLike,
    src: Tensor | ArrayLike | None = None,
    value: Scalar | None = None,
    *,
    reduce: str | None = None,
) -> Tensor:
    """torch.scatter: a copy of x with src (a tensor shaped at least like `index`, or a number,
    also as value=) written along `dim` at the positions `index` names. Differentiable in x
    and in src, as torch's. reduce='add' or 'multiply' combines src with what is there
    instead of overwriting it (no gradient, as torch's)."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    dim = normalize_axis(dim, x.ndim, "scatter", x.shape)
    src = value if src is None else src
    if reduce is not None:
        return _scatter_reduced(x, dim, index, src, reduce)
    if x.ndim == 0 or np.ndim(_data(index)) == 0:  # torch: a 0-d tensor counts as 1-d
        x1, index1, src1 = (_at_least_1d(v) for v in (x, index, src))
        return reshape(Scatter.apply(x1, _constant(index1), src1, dim=dim), x.shape)
    return Scatter.apply(x, _constant(index), src, dim=dim)


def _scatter_reduced(x, dim, index, src, reduce):
    """scatter(reduce='add' | 'multiply'): src added to (multiplied into) a copy of x at
    `index` along dim, repeated positions combining every src element (np.add.at)."""
    ufunc = {"add": np.add, "multiply": np.multiply}.get(reduce)
    if ufunc is None:
        raise op_error("scatter", f"reduce must be 'add' or 'multiply', got {reduce!r}")
    needs = [t for t in (x, src) if isinstance(t, Tensor) and t.requires_grad]
    if needs and is_grad_enabled():
        raise op_error(
            "scatter",
            "reduce= has no gradient (as torch's): call it under no_grad, or on tensors "
            "that do not require grad",
            NotImplementedError,
        )
    out = x.numpy().copy()
    index = _data(index)
    if out.ndim == 0 or index.ndim == 0:  # torch: a 0-d tensor counts as 1-d
        src = src if np.ndim(_data(src)) else np.reshape(_data(src), (1,))
        flat = _scatter_reduced(reshape(x, (1,)), 0, index.reshape(1), src, reduce)
        return reshape(flat, x.shape)
    positions = scatter_into(np.zeros(out.shape, bool), dim, index, True)
    values = _data(src)
    values = values if values.ndim == 0 else values[tuple(slice(0, n) for n in index.shape)]
    ufunc.at(out, positions, np.broadcast_to(values, index.shape).astype(out.dtype))
    return Tensor._make(out)


def _at_least_1d(v):
    if isinstance(v, Tensor):
        return reshape(v, (1,)) if v.ndim == 0 else v
    return np.reshape(v, (1,)) if isinstance(v, (np.ndarray, list)) and np.ndim(v) == 0 else v


class Repeat(Function):
    """torch's repeat (numpy's tile): x tiled sizes[i] times along axis i, always a fresh
    array (a broadcast view would be read-only and would change when x does). Backward sums
    the gradient of every copy: grad seen as (r0, d0, r1, d1, …), summed over the r axes."""

    @staticmethod
    def forward(ctx, x, sizes):
        if len(sizes) < x.ndim:
            raise op_error(
                "repeat", f"needs at least {x.ndim} sizes for shape {x.shape}, got {sizes}"
            )
        ctx.x_shape, ctx.sizes = x.shape, sizes
        ctx.in_shape = (1,) * (len(sizes) - x.ndim) + x.shape
        return np.tile(x.reshape(ctx.in_shape), sizes)

    @staticmethod
    def backward(ctx, grad):
        tiled = tuple(v for r, d in zip(ctx.sizes, ctx.in_shape) for v in (r, d))
        g = grad.reshape(tiled).sum(axis=tuple(range(0, len(tiled), 2)))
        return g.reshape(ctx.x_shape)


def repeat(x: Tensor, *sizes: int | Sequence[int]) -> Tensor:
    """torch's repeat (numpy's tile): x tiled sizes[i] times along axis i; extra leading sizes
    add axes. (2, 3).repeat(2, 1, 2) → (2, 2, 6). A copy, never a view, as in torch."""
    return Repeat.apply(x, sizes=tuple(int(n) for n in shape_arg(sizes)))


# --------------- no Function of their own: compositions of the ops above, or no gradient
# sort and topk return (values, indices) as max does: a ValuesIndices (ops/reduce.py)
@torch_names
def sort(
    x: Tensor, axis: int = -1, descending: bool = False, *, stable: bool = False
) -> ValuesIndices:
    """(values, indices) sorted along `axis` (torch: dim). Ties keep their order (a stable
    sort). The values are differentiable (a gather)."""
    indices = argsort(x, axis, descending)
    return ValuesIndices(gather(x, axis, indices), indices)


@torch_names
def argsort(
    x: Tensor | ArrayLike, axis: int = -1, descending: bool = False, stable: bool = False
) -> Tensor:
    """Positions that sort x along `axis` (int64), stable; descending puts the largest first
    (ties still in their original order)."""
    d = _data(x)
    axis = normalize_axis(axis, d.ndim, "argsort", d.shape)
    if d.ndim == 0:  # torch: a 0-d tensor sorts to itself, index 0 (numpy's argsort gives [0])
        return Tensor._make(np.zeros((), np.int64))
    if not descending:  # numpy sorts NaN last, as the largest value: torch's order
        return Tensor._make(np.argsort(d, axis=axis, kind="stable").astype(np.int64))
    # Descending without negating (-x wraps for unsigned ints and int64's minimum, and would
    # put NaN last): sort x reversed along the axis, ascending and stable, and read the result
    # backwards. Equal elements then keep their original order, and NaN comes first.
    n = d.shape[axis] if d.ndim else 1
    order = np.flip(np.argsort(np.flip(d, axis) if d.ndim else d, axis=axis, kind="stable"), axis)
    return Tensor._make((n - 1 - order).astype(np.int64))


@torch_names
def topk(
    x: Tensor, k: int, axis: int = -1, largest: bool = True, sorted: bool = True
) -> ValuesIndices:
    """(values, indices) of the k largest (smallest with largest=False) along `axis`, largest
    first. Ties: the earlier position first (torch does not promise an order for ties)."""
    d = _data(x)
    axis = normalize_axis(axis, d.ndim, "topk", d.shape)
    if not 0 <= k <= (d.shape[axis] if d.ndim else 1):
        raise op_error("topk", f"k={k} is out of range for axis {axis} of shape {d.shape}")
    if d.ndim == 0:  # torch: x's one element for k = 1 and (its quirk) for k = 0 too
        indices = Tensor._make(np.zeros((), np.int64))
        return ValuesIndices(gather(x, 0, indices), indices)
    indices = getitem(argsort(x, axis, descending=largest), (slice(None),) * axis + (slice(0, k),))
    return ValuesIndices(gather(x, axis, indices), indices)


def multinomial(
    probs: Tensor | ArrayLike,
    num_samples: int,
    replacement: bool = False,
    *,
    generator: Any = None,
) -> Tensor:
    """Draw `num_samples` category ids from each row of `probs` (1-D (C,) or 2-D (B, C);
    non-negative weights, normalised here), with mt.manual_seed's generator (or `generator`,
    an mt.Generator). int64 result of shape (num_samples,) or (B, num_samples). Without
    replacement a category is drawn once."""
    p = np.asarray(_data(probs), dtype=np.float64)
    if p.ndim not in (1, 2):
        raise op_error("multinomial", f"probs must be 1-D or 2-D, got shape {p.shape}")
    rows = p.reshape(-1, p.shape[-1])
    if (rows < 0).any() or not np.isfinite(rows).all() or (rows.sum(-1) <= 0).any():
        raise op_error(
            "multinomial",
            f"probabilities must be finite, non-negative and not all "
            f"zero in a row (shape {p.shape})",
        )
    if not replacement and num_samples > (rows > 0).sum(-1).min():
        raise op_error(
            "multinomial",
            f"cannot draw {num_samples} distinct categories from "
            f"rows with fewer non-zero weights (shape {p.shape})",
        )
    rng = _random.generator() if generator is None else generator.numpy_rng
    out = np.stack(
        [rng.choice(len(r), num_samples, replace=replacement, p=r / r.sum()) for r in rows]
    ).astype(np.int64)
    return Tensor._make(out.reshape(p.shape[:-1] + (num_samples,)))


def nonzero(x: Tensor | ArrayLike, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """Positions of the non-zero elements: an int64 tensor (n, ndim), or with as_tuple=True
    one 1-D tensor of positions per axis (as numpy's nonzero)."""
    d = _data(x)
    if d.ndim == 0:  # as torch: (1, 0) or (0, 0) positions, or as_tuple one 1-D of [0] or []
        if as_tuple:
            return (Tensor._make(np.zeros(int(d != 0), np.int64)),)
        return Tensor._make(np.zeros((int(d != 0), 0), np.int64))
    where = np.nonzero(d)
    if as_tuple:
        return tuple(Tensor._make(w.astype(np.int64)) for w in where)
    return Tensor._make(np.stack(where, axis=1).astype(np.int64).reshape(-1, _data(x).ndim))


# --------------- flips, rolls, diagonals, repeats, slices and selections (issue 22's list)
class Flip(Function):
    """x reversed along `axes` (a copy, as torch's flip); the gradient is flipped back."""

    @staticmethod
    def forward(ctx, x, axes):
        ctx.axes = axes
        return np.flip(x, axes).copy()

    @staticmethod
    def backward(ctx, grad):
        return np.flip(grad, ctx.axes)


def flip(x: Tensor, *dims: int | Sequence[int], **kwargs: Sequence[int]) -> Tensor:
    """x with the order of elements reversed along each of `dims` (x.flip(0), flip(x, (0, 1)),
    flip(x, dims=(0,)))."""
    dims = shape_arg(dims) if not kwargs else tuple(kwargs.pop("dims"))
    if kwargs:
        raise TypeError(f"flip() got an unexpected keyword argument {next(iter(kwargs))!r}")
    axes = tuple(normalize_axis(d, x.ndim, "flip", x.shape) for d in dims) if x.ndim else ()
    if len(set(axes)) != len(axes):
        raise op_error("flip", f"dims {dims} repeat an axis (tensor of shape {tuple(x.shape)})")
    return Flip.apply(x, axes=axes)


class Roll(Function):
    """x shifted cyclically by `shifts` along `axes` (None: the flattened tensor); the
    gradient is rolled back by −shifts."""

    @staticmethod
    def forward(ctx, x, shifts, axes):
        ctx.shifts, ctx.axes = shifts, axes
        return np.roll(x, shifts, axes)

    @staticmethod
    def backward(ctx, grad):
        back = tuple(-s for s in ctx.shifts) if isinstance(ctx.shifts, tuple) else -ctx.shifts
        return np.roll(grad, back, ctx.axes)


def roll(x: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """x shifted cyclically by `shifts` along `dims` (elements pushed off one end come back at
    the other); without dims, over the flattened tensor, its shape kept."""
    if dims is None:
        if not isinstance(shifts, int):
            if len(shifts) != 1:
                raise op_error("roll", f"shifts {tuple(shifts)} without dims: give one shift")
            shifts = shifts[0]
        return Roll.apply(x, shifts=int(shifts), axes=None)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise op_error("roll", f"shifts {shifts} and dims {dims} differ in length")
    axes = tuple(normalize_axis(d, x.ndim, "roll", x.shape) for d in dims)
    return Roll.apply(x, shifts=tuple(int(s) for s in shifts), axes=axes)


class Diagonal(Function):
    """The diagonal with `offset` of the (axis1, axis2) planes, as a new last axis (torch's
    diagonal); backward writes the gradient onto that diagonal of zeros."""

    is_view = True  # as torch's: writing to the diagonal writes to x

    @staticmethod
    def forward(ctx, x, offset, axis1, axis2):
        ctx.shape, ctx.args = x.shape, (offset, axis1, axis2)
        # np.diagonal's view is read-only; the same elements as a strided view of x, which is
        # writable when x is: start at x[…, max(-offset, 0), max(offset, 0)] and step one row
        # and one column at a time (the two strides added)
        planes = np.moveaxis(x, (axis1, axis2), (-2, -1))
        start = planes[..., builtins.max(-offset, 0) :, builtins.max(offset, 0) :]
        n = builtins.min(start.shape[-2:])
        strides = start.strides[:-2] + (start.strides[-2] + start.strides[-1],)
        return np.lib.stride_tricks.as_strided(start, start.shape[:-2] + (n,), strides)

    @staticmethod
    def backward(ctx, grad):
        offset, axis1, axis2 = ctx.args
        g = np.zeros(ctx.shape, grad.dtype)
        planes = np.moveaxis(g, (axis1, axis2), (-2, -1))  # a view of g: writes land in g
        i = np.arange(grad.shape[-1])
        planes[..., i + builtins.max(-offset, 0), i + builtins.max(offset, 0)] = grad
        return g


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The elements x[…, i, …, i + offset, …] of the (dim1, dim2) planes, along a new last
    axis (offset > 0: above the main diagonal)."""
    a1 = normalize_axis(dim1, x.ndim, "diagonal", x.shape)
    a2 = normalize_axis(dim2, x.ndim, "diagonal", x.shape)
    if a1 == a2:
        raise op_error("diagonal", f"dim1 and dim2 are the same axis {a1} (shape {x.shape})")
    return Diagonal.apply(x, offset=int(offset), axis1=a1, axis2=a2)


class RepeatInterleave(Function):
    """Each element repeated `repeats` times along `axis` (np.repeat); backward sums each
    run of copies (np.add.reduceat over the run starts)."""

    @staticmethod
    def forward(ctx, x, repeats, axis):
        ctx.repeats, ctx.axis, ctx.n = repeats, axis, x.shape[axis]
        return np.repeat(x, repeats, axis)

    @staticmethod
    def backward(ctx, grad):
        counts = np.broadcast_to(np.asarray(ctx.repeats), (ctx.n,))
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        shape = list(grad.shape)
        shape[ctx.axis] = ctx.n
        g = np.zeros(shape, grad.dtype)
        keep = counts > 0  # reduceat of an empty run would give the next element, not 0
        if keep.any():
            sums = np.add.reduceat(grad, starts[keep], axis=ctx.axis)
            index = [slice(None)] * grad.ndim
            index[ctx.axis] = np.flatnonzero(keep)
            g[tuple(index)] = sums
        return g


def repeat_interleave(
    x: Tensor | int, repeats: int | Tensor | ArrayLike | None = None, dim: int | None = None,
    *, output_size: int | None = None,
) -> Tensor:  # fmt: skip
    """Each element repeated `repeats` times (an int, or one count per element along dim)
    along `dim` (None: the flattened tensor). repeat_interleave(counts) alone gives
    0, 0, …, 1, 1, … (index i `counts[i]` times)."""
    if repeats is None:
        counts = _data(x)
        return Tensor._make(np.repeat(np.arange(counts.size, dtype=np.int64), counts.reshape(-1)))
    if dim is None:
        x, dim = x.reshape(-1), 0
    axis = normalize_axis(dim, x.ndim, "repeat_interleave", x.shape)
    r = _data(repeats)
    if r.ndim == 1 and r.size == 1:
        r = r.reshape(())
    if r.ndim > 1 or (r.ndim == 1 and r.size != x.shape[axis]) or (r < 0).any():
        raise op_error(
            "repeat_interleave",
            f"repeats {r.shape} must be one count ≥ 0 or one per element of axis {axis} "
            f"(tensor of shape {tuple(x.shape)})",
        )
    return RepeatInterleave.apply(x, repeats=r.astype(np.int64), axis=axis)


def tile(x: Tensor, dims: Sequence[int]) -> Tensor:
    """x repeated dims[i] times along axis i; fewer dims than axes count from the right
    (torch's tile: repeat with leading 1s)."""
    dims = tuple(dims)
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


def narrow(x: Tensor, dim: int, start: int | Tensor, length: int) -> Tensor:
    """The `length` elements of `dim` from `start` on (a negative start counts from the end)."""
    axis = normalize_axis(dim, x.ndim, "narrow", x.shape)
    n = x.shape[axis]
    start = int(start)
    start = start + n if start < 0 else start
    if not (0 <= start <= n and 0 <= length and start + length <= n):
        raise op_error(
            "narrow", f"start {start} and length {length} do not fit axis {axis} of size {n}"
        )
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, start + length)
    return getitem(x, tuple(index))


def unbind(x: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices of x along `dim`, as a tuple (each without that axis)."""
    axis = normalize_axis(dim, x.ndim, "unbind", x.shape)
    return tuple(getitem(x, (slice(None),) * axis + (i,)) for i in range(x.shape[axis]))


def masked_select(x: Tensor, mask: Tensor | ArrayLike) -> Tensor:
    """The elements of x where `mask` (broadcast with x) is True, as a 1-D tensor."""
    m = _data(mask)
    if m.dtype != np.bool_:
        raise op_error("masked_select", f"mask has dtype {m.dtype}: give a bool mask", TypeError)
    shape = np.broadcast_shapes(x.shape, m.shape)
    return getitem(expand(x, shape) if x.shape != shape else x, np.broadcast_to(m, shape))


def movedim(x: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """x with axes `source` moved to `destination` (the others keep their order)."""
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    src = [normalize_axis(a, x.ndim, "movedim", x.shape) for a in src]
    dst = [normalize_axis(a, x.ndim, "movedim", x.shape) for a in dst]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise op_error(
            "movedim", f"source {source} and destination {destination} must be as many "
            "distinct axes",
        )  # fmt: skip
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(x, order) if x.ndim else x


# --------------- stacking, splitting, diagonals and indices (found missing by the OpInfo walk)
def ravel(x: Tensor) -> Tensor:
    """x flattened to 1-D."""
    return reshape(x, (-1,))


def atleast_1d(*tensors: Tensor) -> Tensor | tuple[Tensor, ...]:
    """Each tensor with at least one axis (a 0-d one becomes (1,))."""
    return _each(tensors, lambda t: reshape(t, (1,)) if t.ndim == 0 else t)


def atleast_2d(*tensors: Tensor) -> Tensor | tuple[Tensor, ...]:
    """Each tensor with at least two axes: (n,) becomes (1, n)."""
    return _each(tensors, lambda t: reshape(t, (1,) * (2 - t.ndim) + t.shape) if t.ndim < 2 else t)


def atleast_3d(*tensors: Tensor) -> Tensor | tuple[Tensor, ...]:
    """Each tensor with at least three axes: (n,) becomes (1, n, 1), (m, n) becomes (m, n, 1)."""
    shapes = {0: lambda s: (1, 1, 1), 1: lambda s: (1, s[0], 1), 2: lambda s: s + (1,)}
    return _each(tensors, lambda t: reshape(t, shapes[t.ndim](t.shape)) if t.ndim < 3 else t)


def _each(tensors, fn):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(fn(t) for t in tensors[0])
    out = tuple(fn(t) for t in tensors)
    return out[0] if len(out) == 1 else out


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenated along axis 1 (axis 0 for 1-D tensors)."""
    tensors = atleast_1d(tuple(tensors))
    return concat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenated along axis 0, 1-D tensors first made rows (1, n)."""
    return concat(atleast_2d(tuple(tensors)), 0)


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenated along axis 2, after atleast_3d."""
    return concat(atleast_3d(tuple(tensors)), 2)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    """1-D and 0-d tensors as columns (n, 1), then hstack."""
    cols = [reshape(t, (t.numel(), 1)) if t.ndim < 2 else t for t in tensors]
    return concat(cols, 1)


def fliplr(x: Tensor) -> Tensor:
    """x with its columns (axis 1) reversed; needs at least 2 axes."""
    if x.ndim < 2:
        raise op_error("fliplr", f"needs a tensor of at least 2 axes, got shape {tuple(x.shape)}")
    return flip(x, 1)


def flipud(x: Tensor) -> Tensor:
    """x with its rows (axis 0) reversed; needs at least 1 axis."""
    if x.ndim < 1:
        raise op_error("flipud", "needs a tensor of at least 1 axis, got a 0-d tensor")
    return flip(x, 0)


def rot90(x: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """x rotated by 90° k times in the plane of `dims`, from the first axis toward the second."""
    if len(dims) != 2 or x.ndim < 2:
        raise op_error("rot90", f"needs 2 dims and a tensor of ≥ 2 axes (shape {tuple(x.shape)})")
    a, b = (normalize_axis(d, x.ndim, "rot90", x.shape) for d in dims)
    if a == b:
        raise op_error("rot90", f"dims {tuple(dims)} name the same axis")
    k %= 4
    if k == 0:
        return flip(x, ())  # a copy, as torch's
    if k == 2:
        return flip(x, (a, b))
    return transpose(flip(x, b), a, b) if k == 1 else flip(transpose(x, a, b), b)


def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    """1-D x: a square matrix with x on its `diagonal`; 2-D x: that diagonal, as a 1-D tensor."""
    if x.ndim == 2:  # a copy, as torch's diag (diagonal is the view); `diagonal` is the offset
        from .elementwise import clone

        return clone(globals()["diagonal"](x, diagonal))
    if x.ndim != 1:
        raise op_error("diag", f"needs a 1-D or 2-D tensor, got shape {tuple(x.shape)}")
    return diag_embed(x, diagonal)


def diag_embed(x: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """The last axis of x written onto the `offset` diagonal of new (dim1, dim2) planes."""
    n = x.shape[-1] + builtins.abs(offset)
    eye = np.zeros((x.shape[-1], n, n), x.dtype)
    i = np.arange(x.shape[-1])
    eye[i, i + builtins.max(-offset, 0), i + builtins.max(offset, 0)] = 1
    out = einsum_of("...k,kij->...ij", x, eye)
    nd = out.ndim
    a1, a2 = dim1 % nd, dim2 % nd
    if (a1, a2) == (nd - 2, nd - 1):
        return out
    rest = [d for d in range(nd - 2)]
    order = [None] * nd
    for d, src in zip(sorted((a1, a2)), ((nd - 2, nd - 1) if a1 < a2 else (nd - 1, nd - 2))):
        order[d] = src
    it = iter(rest)
    order = [next(it) if o is None else o for o in order]
    return permute(out, order)


def einsum_of(eq, a, b):
    from .reduce import einsum

    if a.dtype.kind != "f":  # integers: no gradient to keep, exact integer arithmetic
        return Tensor._make(np.einsum(eq, _data(a), b).astype(a.dtype))
    return einsum(eq, a, Tensor._make(b))


def diagflat(x: Tensor, offset: int = 0) -> Tensor:
    """x flattened, then written onto the `offset` diagonal of a square matrix."""
    return diag_embed(reshape(x, (-1,)), offset)


def trace(x: Tensor) -> Tensor:
    """The sum of the main diagonal of a 2-D tensor."""
    if x.ndim != 2:
        raise op_error("trace", f"needs a 2-D tensor, got shape {tuple(x.shape)}")
    from .reduce import sum as _sum

    d = diagonal(x)
    return _sum(d) if d.dtype.kind == "f" else Tensor._make(np.asarray(np.sum(_data(d))))


def _indices(op, row, col, offset, keep):
    r, c = np.indices((row, col)).reshape(2, -1)
    mask = keep(c - r, offset)
    return Tensor._make(np.stack([r[mask], c[mask]]).astype(np.int64))


def tril_indices(
    row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None
) -> Tensor:
    """(2, N): the row and column of each element on or below the `offset` diagonal."""
    return _indices("tril_indices", row, col, offset, lambda d, k: d <= k)


def triu_indices(
    row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None
) -> Tensor:
    """(2, N): the row and column of each element on or above the `offset` diagonal."""
    return _indices("triu_indices", row, col, offset, lambda d, k: d >= k)


def take(x: Tensor, index: Tensor | ArrayLike) -> Tensor:
    """x flattened, read at `index` (any shape; the result has index's shape)."""
    idx = _data(index)
    n = x.numel()
    if idx.size and (idx.max() >= n or idx.min() < -n):
        raise op_error("take", f"index out of range for a tensor of {n} elements")
    return getitem(reshape(x, (-1,)), idx)


def take_along_dim(x: Tensor, indices: Tensor | ArrayLike, dim: int | None = None) -> Tensor:
    """x read at `indices` along `dim` (indices broadcast against x on the other axes); dim
    None: x flattened, read at indices flattened."""
    idx = _data(indices)
    if dim is None:
        return take(x, idx.reshape(-1))
    axis = normalize_axis(dim, x.ndim, "take_along_dim", x.shape)
    shape = list(
        np.broadcast_shapes(
            *(tuple(s if d != axis else 1 for d, s in enumerate(t)) for t in (x.shape, idx.shape))
        )
    )
    xs, ids = list(shape), list(shape)
    xs[axis], ids[axis] = x.shape[axis], idx.shape[axis]
    return gather(expand(x, xs) if tuple(xs) != x.shape else x, axis, np.broadcast_to(idx, ids))


def select(x: Tensor, dim: int, index: int) -> Tensor:
    """The slice x[…, index, …] at `index` of axis `dim`, that axis removed."""
    axis = normalize_axis(dim, x.ndim, "select", x.shape)
    return getitem(x, (slice(None),) * axis + (int(index),))


def unflatten(x: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """Axis `dim` split into `sizes` (one may be −1)."""
    axis = normalize_axis(dim, x.ndim, "unflatten", x.shape)
    return reshape(x, x.shape[:axis] + tuple(sizes) + x.shape[axis + 1 :])


def split_with_sizes(x: Tensor, split_sizes: Sequence[int], dim: int = 0) -> list[Tensor]:
    """Pieces of `split_sizes` along `dim` (they must add up to its size)."""
    return split(x, list(split_sizes), dim)


def tensor_split(
    x: Tensor, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0
) -> tuple[Tensor, ...]:
    """x cut along `dim` into n nearly equal pieces (the first n mod size one longer), or at
    the given indices."""
    axis = normalize_axis(dim, x.ndim, "tensor_split", x.shape)
    size, cuts = x.shape[axis], _data(indices_or_sections)
    if cuts.ndim == 0:
        n = int(cuts)
        if n <= 0:
            raise op_error("tensor_split", f"sections must be ≥ 1, got {n}")
        lengths = [size // n + (1 if i < size % n else 0) for i in range(n)]
        cuts = np.cumsum(lengths)[:-1]
    bounds = [0, *(builtins.min(builtins.max(int(c), 0), size) for c in cuts), size]
    return tuple(
        getitem(x, (slice(None),) * axis + (slice(lo, builtins.max(lo, hi)),))
        for lo, hi in zip(bounds[:-1], bounds[1:])
    )


def _split_axis(op, axis, min_ndim):
    def split_(x: Tensor, sections: int | Sequence[int]) -> tuple[Tensor, ...]:
        if x.ndim < min_ndim:
            raise op_error(op, f"needs a tensor of at least {min_ndim} axes, got {tuple(x.shape)}")
        a = axis if x.ndim > 1 or op != "hsplit" else 0
        if isinstance(sections, int) and x.shape[a] % sections:
            raise op_error(op, f"axis {a} of size {x.shape[a]} does not split into {sections}")
        return tensor_split(x, sections, a)

    split_.__name__ = op
    return split_


hsplit = _split_axis("hsplit", 1, 1)
vsplit = _split_axis("vsplit", 0, 2)
dsplit = _split_axis("dsplit", 2, 3)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape the given shapes broadcast to (numpy's rules, which are torch's)."""
    return tuple(np.broadcast_shapes(*((s,) if isinstance(s, int) else tuple(s) for s in shapes)))


def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Each tensor expanded to the shape they all broadcast to."""
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(expand(t, shape) if t.shape != shape else t for t in tensors)


def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D tensors: 'ij' (matrix) or 'xy' (Cartesian) indexing."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise op_error("meshgrid", f"indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = [reshape(t, (-1,)) for t in tensors]
    shape = tuple(t.shape[0] for t in ts)
    grids = [
        expand(reshape(t, (1,) * i + (-1,) + (1,) * (len(ts) - i - 1)), shape)
        for i, t in enumerate(ts)
    ]
    if indexing == "xy" and len(ts) >= 2:  # Cartesian: the first two axes swapped (numpy's)
        grids = [swapaxes(g, 0, 1) for g in grids]
    return tuple(grids)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    """Every combination of one element of each 1-D tensor, as rows (N, k); k = 1: (N,)."""
    for t in tensors:
        if np.ndim(_data(t)) != 1:
            raise op_error("cartesian_prod", f"needs 1-D tensors, got shape {np.shape(_data(t))}")
    if len(tensors) == 1 and isinstance(tensors[0], Tensor):
        return tensors[0]  # torch returns its one input itself (writes to either are shared)
    grids = meshgrid(*tensors, indexing="ij")
    out = stack([reshape(g, (-1,)) for g in grids], 1)
    return reshape(out, (-1,)) if len(tensors) == 1 else out


def block_diag(*tensors: Tensor) -> Tensor:
    """The tensors (0-d, 1-D as rows, or 2-D) as blocks along the diagonal of one matrix."""
    blocks = [reshape(t, (1, -1)) if t.ndim < 2 else t for t in tensors]
    if not blocks:
        return Tensor._make(np.zeros((0, 0), np.float32))
    cols = builtins.sum(b.shape[1] for b in blocks)
    dtype = np.result_type(*(b.dtype for b in blocks))
    rows, left = [], 0
    for b in blocks:
        right = cols - left - b.shape[1]
        parts = [Tensor._make(np.zeros((b.shape[0], n), dtype)) for n in (left, right)]
        rows.append(concat([parts[0], b if b.dtype == dtype else b.astype(dtype), parts[1]], 1))
        left += b.shape[1]
    return concat(rows, 0)


class ScatterAdd(Function):
    """A copy of x with src added at `index` along `dim` (repeated positions add up). The
    gradient of x is the output's; src's is the output's read at the positions."""

    @staticmethod
    def forward(ctx, x, index, src, dim):
        out = x.copy()
        where = scatter_into(np.zeros(x.shape, bool), dim, index, True)
        ctx.where, ctx.src_shape = where, np.shape(src)
        part = src[tuple(slice(0, n) for n in index.shape)] if np.ndim(src) else src
        np.add.at(out, where, np.broadcast_to(part, index.shape).astype(out.dtype))
        return out

    @staticmethod
    def backward(ctx, grad):
        dsrc = None
        if ctx.needs_input_grad[2]:
            dsrc = np.zeros(ctx.src_shape, grad.dtype)  # src beyond index's size: 0
            index_shape = np.broadcast(*ctx.where).shape
            dsrc[tuple(slice(0, n) for n in index_shape)] = grad[ctx.where]
        return grad, None, dsrc


def scatter_add(x: Tensor, dim: int, index: Tensor | ArrayLike, src: Tensor) -> Tensor:
    """A copy of x with each src element added at the position `index` names along `dim`
    (torch.scatter_add: repeated positions accumulate). Differentiable in x and src."""
    dim = normalize_axis(dim, x.ndim, "scatter_add", x.shape)
    if x.ndim == 0 or np.ndim(_data(index)) == 0:
        x1, index1, src1 = (_at_least_1d(v) for v in (x, index, src))
        return reshape(ScatterAdd.apply(x1, _constant(index1), src1, dim=dim), x.shape)
    return ScatterAdd.apply(x, _constant(index), src, dim=dim)


class IndexAdd(Function):
    """x + alpha·source placed at `index` along `axis` (repeats add up); gradients: x's is
    the output's, source's the output's rows at `index`, times alpha."""

    @staticmethod
    def forward(ctx, x, index, source, axis, alpha):
        ctx.index, ctx.axis, ctx.alpha = index, axis, alpha
        out = np.moveaxis(x.copy(), axis, 0)
        np.add.at(out, index, np.moveaxis(source, axis, 0) * alpha)
        return np.moveaxis(out, 0, axis)

    @staticmethod
    def backward(ctx, grad):
        g = np.take(grad, ctx.index, axis=ctx.axis) * ctx.alpha
        return grad, None, g if ctx.needs_input_grad[2] else None


def index_add(
    x: Tensor, dim: int, index: Tensor | ArrayLike, source: Tensor, *, alpha: Scalar = 1
) -> Tensor:
    """A copy of x with alpha·source[i] added to x[index[i]] along `dim` (repeats add up)."""
    axis = normalize_axis(dim, x.ndim, "index_add", x.shape) if x.ndim else 0
    idx = _data(index).reshape(-1)
    x1 = reshape(x, (1,)) if x.ndim == 0 else x
    src = reshape(source, (1,)) if source.ndim == 0 else source
    if src.shape[axis] != idx.size:
        raise op_error(
            "index_add", f"source {tuple(source.shape)} has not {idx.size} slices on axis {axis}"
        )
    out = IndexAdd.apply(x1, _constant(idx), src, axis=axis, alpha=alpha)
    return reshape(out, x.shape) if x.ndim == 0 else out


class SetItem(Function):
    """x with x[index] = value, as a new array: the graph node of ``x[index] = value`` when
    the write joins the graph (see `setitem_recorded`). Gradients: x's is the output's with
    the written elements zeroed, value's the output's there, summed down to value's shape."""

    @staticmethod
    def forward(ctx, x, value, index):
        ctx.index, ctx.steps, ctx.value_shape = index, torch_index_steps(index), np.shape(value)
        out = x.copy()
        target, where = (out[ctx.steps[0]], ctx.steps[1]) if ctx.steps else (out, index)
        target[where] = value
        return out

    @staticmethod
    def backward(ctx, grad):
        gx = gv = None
        if ctx.needs_input_grad[0]:
            gx = grad.copy()
            target, where = (gx[ctx.steps[0]], ctx.steps[1]) if ctx.steps else (gx, ctx.index)
            target[where] = 0
        if ctx.needs_input_grad[1]:
            g = grad[ctx.steps[0]][ctx.steps[1]] if ctx.steps else grad[ctx.index]
            gv = unbroadcast(np.asarray(g), ctx.value_shape)
        return gx, gv


def setitem_recorded(x: Tensor, index: Any, value: Tensor | ArrayLike) -> None:
    """``x[index] = value`` recorded in the graph, as torch's in-place write: x keeps its
    identity and memory (its views see the write), and from now on x is the output of a
    SetItem node whose inputs are x as it was and `value`. So a buffer filled step by step
    (``outputs = torch.zeros(T, B, V); outputs[t] = prediction``) passes gradients to every
    prediction. Tensor.__setitem__ calls this when value, or x, is in the graph."""
    if isinstance(index, list):
        index = np.asarray(index)
    elif isinstance(index, tuple):
        index = tuple(_data(i) if isinstance(i, Tensor) else i for i in index)
    index = _data(index) if isinstance(index, Tensor) else index
    # the one mechanism of in-place ops in the graph (Tensor._inplace_recorded)
    x._inplace_recorded("__setitem__", lambda before: SetItem.apply(before, value, index=index))


class IndexCopy(Function):
    """x with the slices at `index` along `axis` replaced by source's; gradients: x's is the
    output's with those slices zeroed, source's the output's at them."""

    @staticmethod
    def forward(ctx, x, index, source, axis):
        ctx.index, ctx.axis = index, axis
        out = np.moveaxis(x.copy(), axis, 0)
        out[index] = np.moveaxis(source, axis, 0)
        return np.moveaxis(out, 0, axis)

    @staticmethod
    def backward(ctx, grad):
        gx = np.moveaxis(grad.copy(), ctx.axis, 0)
        gx[ctx.index] = 0
        gs = np.take(grad, ctx.index, axis=ctx.axis) if ctx.needs_input_grad[2] else None
        return np.moveaxis(gx, 0, ctx.axis), None, gs


def index_copy(x: Tensor, dim: int, index: Tensor | ArrayLike, source: Tensor) -> Tensor:
    """A copy of x whose slices index[i] along `dim` are source's slices i."""
    axis = normalize_axis(dim, x.ndim, "index_copy", x.shape) if x.ndim else 0
    idx = _data(index).reshape(-1)
    x1 = reshape(x, (1,)) if x.ndim == 0 else x
    src = reshape(source, (1,)) if source.ndim == 0 else source
    out = IndexCopy.apply(x1, _constant(idx), src, axis=axis)
    return reshape(out, x.shape) if x.ndim == 0 else out


def index_fill(x: Tensor, dim: int, index: Tensor | ArrayLike, value: Scalar | Tensor) -> Tensor:
    """A copy of x with the slices at `index` along `dim` set to `value`."""
    axis = normalize_axis(dim, x.ndim, "index_fill", x.shape) if x.ndim else 0
    mask = np.zeros(x.shape[axis] if x.ndim else 1, bool)
    mask[_data(index).reshape(-1)] = True
    shape = [1] * builtins.max(x.ndim, 1)
    shape[axis] = mask.size
    return masked_fill(x, mask.reshape(shape) if x.ndim else mask.reshape(()), value)
