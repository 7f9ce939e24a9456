"""Axis helpers shared by the reductions and shape ops (with clear errors)."""
from ..function import ShapeError


def normalize_axis(axis, ndim, op, shape):
    """One axis, negative allowed, as a non-negative int; a clear error when out of range."""
    if not isinstance(axis, (int,)) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"axis {axis} is out of range for a tensor of shape {tuple(shape)} "
                         f"(ndim {ndim})")
    return axis % max(ndim, 1)


def normalize_axes(axis, ndim, op, shape):
    """None -> all axes; int or tuple -> a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        axes = tuple(normalize_axis(a, ndim, op, shape) for a in axis)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"repeated axis in {axis} for a tensor of shape {tuple(shape)}")
        return tuple(sorted(axes))
    return (normalize_axis(axis, ndim, op, shape),)


def expand_reduced(grad, shape, axes, keepdims):
    """Broadcast a reduction's gradient back to the input `shape`."""
    import numpy as np
    if not keepdims:
        grad = np.expand_dims(grad, axes) if axes else grad
    return np.broadcast_to(grad, shape)
