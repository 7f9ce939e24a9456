"""Tensor's op methods and operators: the op functions themselves, bound onto `Tensor`.

A plain function whose first parameter is the tensor becomes a method when it is set on the
class (Python passes the tensor as that first argument), so ``Tensor.sum is F.sum`` and
``x.sum(1)`` is ``F.sum(x, 1)``: one definition, one signature, one docstring, and
``help(mt.Tensor.sum)`` shows them. `tensor.py` therefore knows nothing of the ops (it stands
below them); this module, imported once by ``minitensor/__init__.py`` after the ops load, is
the one wiring between the two.

What is bound, in order:

- every op registered with ``@tensor_method`` in its ops file (``ops/_register.py``), under
  its own name (this is how a new op becomes a method: see docs/extending.md);
- `SAME_NAME`: ops whose method has the function's name (``x.exp()`` is ``F.exp(x)``);
- `ops.elementwise.OPERATORS`: ``x + y``, ``x - y``, ``x * y``, which take a short path
  when both are tensors of one dtype and are ``F.add(x, y)`` (…) otherwise;
- `RENAMED`: a method or operator spelled differently from its function
  (``x / y`` is ``F.div(x, y)``, ``x.clamp`` is ``F.clip``);
- the reflected operators (``2 - x`` is ``F.sub(2, x)``) and the few methods whose arguments
  differ from the function's (``x.where(cond, y)`` is ``F.where(cond, x, y)``), written out
  below.

A method written in `tensor.py` itself (the in-place ones, conversions, autograd) is never
replaced.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from . import autograd
from . import functional as F
from .ops._register import PUBLIC, TENSOR_METHODS
from .ops.elementwise import OPERATORS
from .ops.shape import setitem_recorded
from .tensor import Tensor
from .typing import ArrayLike, Scalar

SAME_NAME = (
    "exp", "log", "sin", "cos", "sqrt", "abs", "tanh", "sigmoid", "relu", "silu", "neg",
    "isnan", "isfinite", "gelu", "clip", "maximum", "minimum", "pow", "sum", "mean", "max",
    "min", "var", "std", "logsumexp", "argmax", "argmin", "any", "all", "reshape", "view",
    "transpose", "permute", "swapaxes", "expand", "broadcast_to", "squeeze", "unsqueeze",
    "flatten", "split", "chunk", "masked_fill", "tril", "triu", "matmul", "softmax",
    "log_softmax", "gather", "index_select", "repeat", "nonzero", "cumsum", "sort", "argsort",
    "topk", "scatter", "clone",
    "add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge", "bmm", "masked_select",
    "norm", "flip", "roll", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
    "atanh", "log2", "log10", "log1p", "expm1", "exp2", "erf", "erfc", "rsqrt", "reciprocal",
    "deg2rad", "rad2deg", "floor", "ceil", "trunc", "round", "sign", "frac", "nan_to_num",
    "square", "positive", "atan2", "remainder", "fmod", "floor_divide", "logaddexp", "hypot",
    "lerp", "addcmul", "addcdiv", "clamp_min", "clamp_max", "isclose", "isinf", "isposinf",
    "isneginf", "equal", "prod", "cumprod", "amax", "amin", "median", "diagonal", "movedim",
    "narrow", "repeat_interleave", "tile", "unbind", "mm", "mv", "dot", "vdot", "inner",
    "outer", "addmm", "addmv", "addr", "baddbmm", "addbmm", "logical_and", "logical_or",
    "logical_xor", "logical_not", "sgn", "true_divide", "xlogy", "logit", "sinc",
    "heaviside", "copysign", "signbit", "fmax", "fmin", "float_power", "logaddexp2", "ravel",
    "fliplr", "flipud", "rot90", "diag", "diag_embed", "diagflat", "trace", "take",
    "take_along_dim", "select", "unflatten", "split_with_sizes", "tensor_split", "hsplit",
    "vsplit", "dsplit", "scatter_add", "index_add", "index_copy", "index_fill", "aminmax",
    "nansum", "nanmean", "count_nonzero", "cummax", "cummin", "logcumsumexp", "kthvalue",
    "msort", "diff", "kron", "cross",
)  # fmt: skip

RENAMED = {
    "clamp": "clip",
    "astype": "cast",
    "__truediv__": "div",
    "__pow__": "pow",
    "__matmul__": "matmul",
    "__mod__": "remainder",
    "__floordiv__": "floor_divide",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__eq__": "eq",
    "__ne__": "ne",
    "__and__": "bitwise_and",
    "__or__": "bitwise_or",
    "__xor__": "bitwise_xor",
    "__neg__": "neg",
    "__abs__": "abs",
    "__invert__": "bitwise_not",
    "__getitem__": "getitem",
}

# `other <op> x` when `other` (a number, an array) does not know Tensor: the op, operands swapped
REFLECTED = {
    "__radd__": "add",
    "__rsub__": "sub",
    "__rmul__": "mul",
    "__rtruediv__": "div",
    "__rpow__": "pow",
    "__rmatmul__": "matmul",
    "__rmod__": "remainder",
    "__rfloordiv__": "floor_divide",
    "__rand__": "bitwise_and",
    "__ror__": "bitwise_or",
    "__rxor__": "bitwise_xor",
}


def _reflected(op: Callable[..., Tensor], name: str) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Tensor | ArrayLike) -> Tensor:
        return op(other, self)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"other {name[3:-2]} self: {op.__module__}.{op.__name__}(other, self)"
    return method


# ------------------------------------------------- methods whose arguments differ from the op's
def where(self: Tensor, condition: Tensor | ArrayLike, other: Tensor | ArrayLike) -> Tensor:
    """self where `condition` holds, `other` elsewhere (torch's x.where(cond, y))."""
    return F.where(condition, self, other)


def reshape_as(self: Tensor, other: Tensor) -> Tensor:
    """self reshaped to other's shape."""
    return F.reshape(self, other.shape)


def view_as(self: Tensor, other: Tensor) -> Tensor:
    """self viewed with other's shape (as reshape: a view where the data allows)."""
    return F.view(self, other.shape)


def scatter_(
    self: Tensor,
    dim: int,
    index: Tensor | ArrayLike,
    src: Tensor | ArrayLike | None = None,
    value: Scalar | None = None,
) -> Tensor:
    """self[..., index[i][j], ...] = src[i][j] along `dim` (torch's scatter_): `src` a tensor
    shaped like `index`, or a number (also as value=). index: int64, same ndim as self."""
    src = value if src is None else src
    if isinstance(src, Tensor) and src.requires_grad and autograd.is_grad_enabled():
        raise RuntimeError(
            f"scatter_: src requires grad, and an in-place op records no "
            f"graph here; write x = x.scatter(dim, index, src) (torch.scatter: "
            f"gradients reach x and src) (shape {self.shape})"
        )
    with autograd.no_grad():
        return self._inplace("scatter_", lambda d: F.scatter(d, dim, index, src)._data)


def _transposed(self: Tensor) -> Tensor:
    """All axes reversed (torch's x.T; a 2-d tensor's transpose)."""
    return F.transpose(self)


def _matrix_transposed(self: Tensor) -> Tensor:
    """The last two axes swapped (torch's x.mT: a batch of matrices, each transposed)."""
    return F.swapaxes(self, -1, -2)


WRITTEN_OUT = {
    "_setitem_recorded": setitem_recorded,  # Tensor.__setitem__ when the write joins the graph
    "where": where,
    "reshape_as": reshape_as,
    "view_as": view_as,
    "scatter_": scatter_,
    "T": property(_transposed),
    "mT": property(_matrix_transposed),
}


def _bind(name: str, method: Any) -> None:
    if name in vars(Tensor):  # a method written in tensor.py keeps its own definition
        return
    if not isinstance(method, (types.FunctionType, property)):
        # a builtin or a callable object would not receive the tensor as its first argument
        raise TypeError(f"methods: Tensor.{name} must be a plain function, got {method!r}")
    setattr(Tensor, name, method)


def bind_tensor_methods() -> None:
    """Set every op method and operator on Tensor (idempotent: bound names are skipped)."""
    for name, fn in TENSOR_METHODS.items():
        _bind(name, fn)
    for name in SAME_NAME:
        _bind(name, getattr(F, name))
    for name, operator in OPERATORS.items():
        _bind(name, operator)
    for name, op in RENAMED.items():
        _bind(name, getattr(F, op))
    for name, op in REFLECTED.items():
        _bind(name, _reflected(getattr(F, op), name))
    for name, method in WRITTEN_OUT.items():
        _bind(name, method)


def publish(*namespaces: types.ModuleType) -> None:
    """Export every ``@export``-ed op: as ``F.<name>`` and ``<namespace>.<name>`` for each
    namespace given (``minitensor`` itself passes its module), each listed in the module's
    ``__all__``; then bind the Tensor methods. A name a module already has is kept."""
    for module in (F, *namespaces):
        listed = getattr(module, "__all__", None)
        for name, fn in PUBLIC.items():
            if not hasattr(module, name):
                setattr(module, name, fn)
            if listed is not None and name not in listed:
                listed.append(name)
    bind_tensor_methods()


publish()
