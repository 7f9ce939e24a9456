"""Errors that name the op, the module scope and the shapes: `op_error` and `ShapeError`.

They sit below `Function` and `Tensor` (this module imports only the scope), so the axis and
shape helpers that Tensor, the ops and functional share can raise them without importing the
graph machinery.
"""

from __future__ import annotations

from .scope import current_scope

__all__ = [
    "AxisError",
    "DTypeError",
    "IndexRangeError",
    "ShapeError",
    "named_error",
    "op_error",
    "op_in_scope",
]


class ShapeError(ValueError, RuntimeError):
    """Shapes that do not fit, with a message that already names them.

    PyTorch raises RuntimeError where shapes do not fit (a matmul's inner sizes, a broadcast,
    a reshape) and numpy raises ValueError: a ShapeError is both, so code written for either
    library catches it.
    """

    names_shapes = True


class AxisError(ShapeError, IndexError):
    """An axis (dim) out of range for the tensor's number of axes: PyTorch raises IndexError
    there ("Dimension out of range"), so this is an IndexError as well as a ShapeError."""


class IndexRangeError(IndexError, RuntimeError):
    """An index out of range for the axis it picks from (gather, index_select, scatter).
    PyTorch raises RuntimeError for some of these ops and IndexError for others (embedding,
    a 0-d input): this is both, so code written for torch catches it either way."""

    names_shapes = True


class DTypeError(TypeError, RuntimeError):
    """An argument of the wrong dtype (a float index): TypeError for Python, RuntimeError as
    PyTorch raises it."""


def op_error(op: str, message: str, kind: type[Exception] | None = None) -> Exception:
    """An exception whose message starts with the op's name and the current module scope:
    ``op_error("squeeze", "axis 0 of shape (2, 3) has size 2")`` raised inside
    ``mt.scope("block")`` reads ``squeeze in block: axis 0 of shape (2, 3) has size 2``.
    `kind` defaults to ShapeError (a ValueError); the message should name the shapes.
    """
    return named_error(kind or ShapeError, f"{op_in_scope(op)}: {message}")


def op_in_scope(op: str) -> str:
    """'matmul in encoder.layers.0' (just 'matmul' outside any module)."""
    scope = current_scope()
    return f"{op} in {scope}" if scope else op


def named_error(kind: type[Exception], message: str) -> Exception:
    """kind(message), marked as already naming its op (Function.apply passes it on as it is)."""
    try:
        err = kind(message)
    except Exception:  # an exception class with an unusual constructor
        err = RuntimeError(message)
    err.op_named = True  # type: ignore[attr-defined]
    return err
