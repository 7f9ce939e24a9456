"""Axis helpers shared by the reductions and shape ops (with clear errors)."""

import functools

import numpy as np

from ..errors import AxisError, op_error


def shape_arg(args):
    """The shape given either as separate ints or as one tuple/list: f(2, 3) or f((2, 3))."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def normalize_axis(axis, ndim, op, shape):
    """One axis, negative allowed, as a non-negative int; a clear error when out of range.

    A 0-d tensor accepts axis 0 and -1 (as numpy and PyTorch do for reductions).
    """
    if type(axis) is int and -ndim <= axis < ndim:  # the common call, checked in one test
        return axis % ndim
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise op_error(
            op, f"axis must be an int, got {axis!r} (tensor of shape {tuple(shape)})", TypeError
        )
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise op_error(
            op,
            f"axis {axis} is out of range for a tensor of shape {tuple(shape)} (ndim {ndim})",
            AxisError,
        )
    return int(axis) % max(ndim, 1)


def normalize_axes(axis, ndim, op, shape):
    """None -> all axes; int or tuple -> a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        axes = tuple(normalize_axis(a, ndim, op, shape) for a in axis)
        if ndim == 0:
            return ()  # a 0-d tensor has no axes to reduce
        if len(set(axes)) != len(axes):
            raise op_error(
                op, f"repeated axis in {tuple(axis)} for a tensor of shape {tuple(shape)}"
            )
        return tuple(sorted(axes))
    a = normalize_axis(axis, ndim, op, shape)
    return (a,) if ndim else ()


def expand_reduced(grad, shape, axes, keepdims):
    """Broadcast a reduction's gradient back to the input `shape` (the axes it removed come
    back as size-1 axes first, unless keepdims kept them)."""
    if not keepdims and axes:
        grad = np.expand_dims(grad, axes)
    return np.broadcast_to(grad, shape)


# PyTorch's argument names and numpy's, for the same argument.
_TORCH_TO_NUMPY = {
    "dim": "axis",
    "keepdim": "keepdims",
    "start_dim": "start_axis",
    "end_dim": "end_axis",
    "diagonal": "k",
}


def torch_names(fn):
    """Let `fn` (written with numpy's names) also take PyTorch's: dim= for axis=, keepdim= for
    keepdims=, start_dim=/end_dim= for flatten's axes, diagonal= for tril/triu's k=."""

    @functools.wraps(fn)
    def accept_torch_names(*args, **kwargs):
        if not kwargs or kwargs.keys().isdisjoint(_TORCH_TO_NUMPY):  # most calls: one test
            return fn(*args, **kwargs)
        for torch_name, numpy_name in _TORCH_TO_NUMPY.items():
            if torch_name in kwargs:
                if numpy_name in kwargs:
                    raise TypeError(
                        f"{fn.__name__}: got both {torch_name}= and {numpy_name}= "
                        f"(two names for one argument)"
                    )
                kwargs[numpy_name] = kwargs.pop(torch_name)
        return fn(*args, **kwargs)

    return accept_torch_names


def torch_index_steps(index):
    """torch's reading of an index that mixes integers with index arrays, as two numpy
    indexings `x[first][second]`; None when numpy already reads `index` as torch does.

    numpy counts an integer beside an index array as one more advanced index, and puts the
    advanced axes first when a slice separates them: y[0, :, [0, 1, 2]] comes out
    transposed. torch selects with the integers first (a 0-d integer tensor counts as an
    integer) and indexes what is left with the arrays. So `first` applies the integers and
    slices (a view) and `second` the arrays (with slice(None) for every axis kept)."""
    if not isinstance(index, tuple):
        return None
    items = tuple(_int_or_item(i) for i in index)
    if not any(_is_int(i) for i in items) or not any(_is_array(i) for i in items):
        return None
    first, second = [], []
    for item in items:
        if _is_array(item):
            mask_axes = np.ndim(item) if np.asarray(item).dtype == np.bool_ else 1
            first += [slice(None)] * mask_axes  # a bool mask spans its number of axes
            second.append(item)
        elif _is_int(item):
            first.append(item)  # the axis is gone after `first`
        else:  # slice, None (a new axis of size 1) or Ellipsis: applied by `first`
            first.append(item)
            second.append(Ellipsis if item is Ellipsis else slice(None))
    return tuple(first), tuple(second)


def _is_int(item):
    return isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))


def _is_array(item):
    return isinstance(item, (np.ndarray, list))


def _int_or_item(item):
    if isinstance(item, np.ndarray) and item.ndim == 0 and item.dtype.kind in "iu":
        return int(item)
    return item
