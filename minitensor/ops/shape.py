"""Shape ops: they move or select elements; their backward puts the gradient back in place."""
import numpy as np

from ..function import Function, ShapeError, unbroadcast
from ._axes import normalize_axis


class Reshape(Function):
    """A new shape for the same elements: a view when numpy can make one, else a copy."""
    is_view = True

    @staticmethod
    def forward(ctx, x, shape):
        ctx.in_shape = x.shape
        try:
            return x.reshape(shape)
        except ValueError:
            raise ShapeError(f"cannot reshape {x.shape} ({x.size} elements) into "
                             f"{tuple(shape)}") from None

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.in_shape)


class Permute(Function):
    """Reorder the axes (a view): out.shape[i] == x.shape[axes[i]]."""
    is_view = True

    @staticmethod
    def forward(ctx, x, axes):
        norm = tuple(normalize_axis(a, x.ndim, "permute", x.shape) for a in axes)
        if sorted(norm) != list(range(x.ndim)):
            raise ShapeError(f"axes {tuple(axes)} are not a permutation of the {x.ndim} axes "
                             f"of a tensor of shape {x.shape}")
        ctx.axes = norm
        return np.transpose(x, norm)

    @staticmethod
    def backward(ctx, grad):
        return np.transpose(grad, np.argsort(ctx.axes))    # the inverse permutation


class Expand(Function):
    """Broadcast to a larger shape without copying (numpy's broadcast_to)."""
    is_view = True

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


def _is_basic_index(index):
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))
               for i in items)


class GetItem(Function):
    """x[index] for ints, slices, None, Ellipsis, integer arrays and boolean masks.

    Backward scatters the gradient back. Advanced indices may repeat an element
    (x[[0, 0, 1]]): `np.add.at` then adds each copy's gradient, where plain assignment
    would keep only the last one. Basic indexing (ints, slices, None, ...) returns a view, so
    the result shares the input's version counter.
    """
    name = "getitem"
    is_view = True          # only when numpy returned a view: Function.apply checks the memory

    @staticmethod
    def forward(ctx, x, index):
        ctx.in_shape, ctx.in_dtype, ctx.index = x.shape, x.dtype, index
        ctx.basic = _is_basic_index(index)
        # saved so that an index tensor edited in place before backward is caught
        items = index if isinstance(index, tuple) else (index,)
        ctx.save_for_backward(*(i for i in items if isinstance(i, np.ndarray)))
        try:
            return x[index]
        except IndexError as e:
            raise IndexError(f"{e} (indexing a tensor of shape {x.shape})") from None

    @staticmethod
    def backward(ctx, grad):
        g = np.zeros(ctx.in_shape, dtype=grad.dtype)
        if ctx.basic:
            g[ctx.index] = grad
        else:
            np.add.at(g, ctx.index, grad)
        return g


class Where(Function):
    """cond ? a : b elementwise (cond is a bool array, not differentiable)."""

    @staticmethod
    def forward(ctx, cond, a, b):
        if cond.dtype != np.bool_:
            raise TypeError(f"condition must be bool, got {cond.dtype} of shape {cond.shape}")
        try:
            np.broadcast_shapes(cond.shape, np.shape(a), np.shape(b))
        except ValueError:
            raise ShapeError(f"condition {cond.shape}, a {np.shape(a)} and b {np.shape(b)} do "
                             f"not broadcast together") from None
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


class MaskedFill(Function):
    """Positions where `mask` is True (bool, broadcastable to x) take `value`."""
    name = "masked_fill"

    @staticmethod
    def forward(ctx, x, mask, value=0.0):
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be bool (True = fill), got {mask.dtype} of shape "
                            f"{mask.shape}")
        try:
            out = np.where(mask, np.asarray(value, dtype=x.dtype), x)
        except ValueError:
            raise ShapeError(f"mask of shape {mask.shape} does not broadcast to "
                             f"{x.shape}") from None
        if out.shape != x.shape:
            raise ShapeError(f"mask of shape {mask.shape} would grow x of shape {x.shape}")
        ctx.save_for_backward(mask)
        return out

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return np.where(mask, np.zeros((), grad.dtype), grad), None


class _Triangle(Function):
    """Keep one triangle of the last two axes (diagonal k and the side `keep` names)."""
    keep = None      # np.tril or np.triu

    @classmethod
    def forward(cls, ctx, x, k=0):
        if x.ndim < 2:
            raise ShapeError(f"needs at least 2 axes (it works on the last two), got shape "
                             f"{x.shape}")
        ctx.k = k
        return cls.keep(x, k)

    @staticmethod
    def backward(ctx, grad):
        return ctx.fn.keep(grad, ctx.k)


class Tril(_Triangle):
    """Lower triangle of the last two axes (elements above diagonal k become 0)."""
    keep = staticmethod(np.tril)


class Triu(_Triangle):
    """Upper triangle of the last two axes (elements below diagonal k become 0)."""
    keep = staticmethod(np.triu)


def scatter_into(out, dim, index, src):
    """out[…, index[i, j, …], …] = src[i, j, …] along axis `dim`, in place (torch's scatter_):
    index is an integer array with out's number of axes, no larger than out on the other axes;
    src is a number, or an array at least index's size on every axis (its first index.shape
    elements are used). Returns the positions written, for backward."""
    if index.ndim != out.ndim or index.dtype.kind not in "iu":
        raise TypeError(f"index must be an integer tensor with {out.ndim} axes like the "
                        f"input (shape {out.shape}), got {index.dtype} of shape {index.shape}")
    small = all(i <= n for d, (i, n) in enumerate(zip(index.shape, out.shape)) if d != dim)
    if not small or (np.ndim(src) and any(i > n for i, n in zip(index.shape, np.shape(src)))):
        raise ShapeError(f"index of shape {index.shape} must be no larger than the input "
                         f"{out.shape} (but along dim {dim}) and than src {np.shape(src)}")
    if index.size and (index.min() < 0 or index.max() >= out.shape[dim]):
        raise IndexError(f"index {index.max() if index.max() >= 0 else index.min()} is "
                         f"out of range for dim {dim} of size {out.shape[dim]} (input shape "
                         f"{out.shape})")
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
        dsrc = np.zeros(src_shape, grad.dtype)       # src elements beyond index's size: 0
        dsrc[tuple(slice(0, n) for n in index_shape)] = grad[ctx.where]
        return dx, None, dsrc
