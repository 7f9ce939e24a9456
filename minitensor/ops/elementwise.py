"""Elementwise ops. Binary ops broadcast with numpy's rules; `unbroadcast` sums each input's
gradient back to its own shape.

After each class comes the public function that checks its arguments and applies it
(`minitensor.functional` re-exports it); functions with no class of their own close the file.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .. import kernels as K
from ..function import Function, apply_binary, op_error, shapes_of, unbroadcast
from ..tensor import Tensor
from ..typing import ArrayLike, Axis, DType, Scalar
from ._args import _data, _keep_float_dtype, _operand
from ._axes import torch_names


class Add(Function):
    _arithmetic = operator.add  # what forward returns (see Function)

    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = shapes_of(a, b)
        return a + b

    @staticmethod
    def backward(ctx, grad):
        sa, sb = ctx.shapes
        if sa == sb:  # nothing was broadcast (most additions): each input's gradient is grad
            return grad, grad
        return unbroadcast(grad, sa), unbroadcast(grad, sb)


def _binary(fn, a, b):
    """Apply an elementwise binary op with numpy's broadcasting (and a clear error if the
    shapes do not broadcast)."""
    if (
        isinstance(a, Tensor)
        and isinstance(b, Tensor)
        and a._data.dtype is b._data.dtype
        and not fn.float_inputs
    ):
        try:  # two tensors of one dtype (most calls): the short path
            return apply_binary(fn, a, b, 2)  # (frames: this one, the op's function)
        except ValueError:
            pass  # explained below
    elif not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(a)
    a, b = _keep_float_dtype(_operand(a, b), _operand(b, a))
    try:
        return fn.apply(a, b)
    except ValueError:
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise op_error(
                fn.op_name(),
                f"shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                f"broadcast (numpy's rules: align the trailing axes; "
                f"each pair of sizes must be equal or 1)",
            ) from None
        raise


def _operator(fn, function, name):
    """Tensor's operator `name` for the op `fn` (``x * y``, `Mul`): the short path of `_binary`
    when the other operand is a tensor of the same dtype, called from here (an operator is
    the commonest op call there is, and each call between it and the op costs), else
    `function` (``mul``), which handles every other operand and every error."""

    def operator(self: Tensor, other: Tensor | ArrayLike) -> Tensor:
        if isinstance(other, Tensor) and self._data.dtype is other._data.dtype:
            try:
                return apply_binary(fn, self, other, 1)  # (frames: this one)
            except ValueError:
                pass  # `function` says what is wrong
        return function(self, other)

    operator.__name__ = operator.__qualname__ = name
    operator.__doc__ = f"self {name[2:-2]} other: {function.__name__}(self, other)"
    return operator


def add(a: Tensor | ArrayLike, b: Tensor | ArrayLike, *, alpha: Scalar = 1) -> Tensor:
    """a + alpha·b, elementwise with broadcasting (alpha is torch.add's scale of b)."""
    return _binary(Add, a, b if alpha == 1 else mul(b, alpha))


class Sub(Function):
    _arithmetic = operator.sub  # what forward returns (see Function)

    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = shapes_of(a, b)
        return a - b

    @staticmethod
    def backward(ctx, grad):
        sa, sb = ctx.shapes
        return unbroadcast(grad, sa), unbroadcast(-grad, sb)


def sub(a: Tensor | ArrayLike, b: Tensor | ArrayLike, *, alpha: Scalar = 1) -> Tensor:
    """a − alpha·b, elementwise with broadcasting (alpha is torch.sub's scale of b)."""
    return _binary(Sub, a, b if alpha == 1 else mul(b, alpha))


class Mul(Function):
    _arithmetic = operator.mul  # what forward returns (see Function)

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        if a.shape == b.shape:  # nothing was broadcast (most products): nothing to sum back
            return grad * b if need_a else None, grad * a if need_b else None
        ga = unbroadcast(grad * b, a.shape) if need_a else None
        gb = unbroadcast(grad * a, b.shape) if need_b else None
        return ga, gb


def mul(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(Mul, a, b)


# x + y, x - y and x * y (x / y follows div)
OPERATORS = {
    "__add__": _operator(Add, add, "__add__"),
    "__sub__": _operator(Sub, sub, "__sub__"),
    "__mul__": _operator(Mul, mul, "__mul__"),
}


class Div(Function):
    _arithmetic = operator.truediv  # what forward returns (see Function)

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a / b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ga = unbroadcast(grad / b, a.shape) if ctx.needs_input_grad[0] else None
        # d(a/b)/db = −a/b², computed as (a/b)/b: b·b underflows to a subnormal (or 0) in
        # float32 long before a/b/b does, and loses digits there
        gb = unbroadcast(-(grad * ((a / b) / b)), b.shape) if ctx.needs_input_grad[1] else None
        return ga, gb


def div(
    a: Tensor | ArrayLike, b: Tensor | ArrayLike, *, rounding_mode: str | None = None
) -> Tensor:
    """a / b; true division, so integers divide into float32 (not numpy's float64).
    rounding_mode="floor" or "trunc" rounds the quotient down or toward 0 (torch's; integers
    then stay integers, computed exactly, and the gradient is 0)."""
    if rounding_mode is not None:
        return _rounded_div(a, b, rounding_mode)
    if _dtype_kind(a) in "iub" and _dtype_kind(b) in "iub":
        a = _data(a).astype(np.float32)
    return _binary(Div, a, b)


def _dtype_kind(x):
    return x.dtype.kind if isinstance(x, (Tensor, np.ndarray)) else np.asarray(x).dtype.kind


class Pow(Function):
    """a ** b, with torch's gradients, computed in the result's dtype (a float64 exponent of a
    float32 base gets a float64 gradient, and b − 1 of a float32 exponent of a float64 base
    keeps every digit). d/da = b·a^(b−1), selected to 0 where b = 0 (even at a = 0, where it
    would be 0·∞, and even for a NaN gradient). d/db = a^b·ln a: 0 where a = 0 and b ≥ 0 (the
    limit of a^b·ln a there), NaN where a < 0 (a^b has no real derivative in b there: (−2)^b
    is real only at integers)."""

    @staticmethod
    def forward(ctx, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):  # 0 ** −1 = ∞, (−1) ** 0.5 = NaN
            out = a**b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        shapes = a.shape, b.shape
        a, b = a.astype(out.dtype, copy=False), b.astype(out.dtype, copy=False)
        ga = gb = None
        zero = np.zeros((), grad.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            if ctx.needs_input_grad[0]:
                ga = unbroadcast(np.where(b == 0, zero, grad * (b * a ** (b - 1))), shapes[0])
            if ctx.needs_input_grad[1]:
                gb = unbroadcast(
                    grad * np.where((a == 0) & (b >= 0), zero, out * np.log(a)), shapes[1]
                )
        return ga, gb


def pow(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a ** b. As in torch, the Python number 0.5 as exponent computes a square root: its value
    keeps the sign of a zero base and its gradient there is sqrt's, −∞ at −0.0 (a ** 0.5 by
    the power rule would give +∞ at both zeros)."""
    if isinstance(a, Tensor) and isinstance(b, float) and b == 0.5:
        return sqrt(a)
    return _binary(Pow, a, b)


class Neg(Function):
    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, grad):
        return -grad


def neg(x: Tensor) -> Tensor:
    return Neg.apply(x)


class Sin(Function):
    """sin x; d sin x = cos x."""

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * np.cos(x)


def sin(x: Tensor) -> Tensor:
    """sin x, elementwise (any shape)."""
    return Sin.apply(x)


class Cos(Function):
    """cos x; d cos x = −sin x."""

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.cos(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * np.sin(x)


def cos(x: Tensor) -> Tensor:
    """cos x, elementwise (any shape)."""
    return Cos.apply(x)


class Exp(Function):
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        out = np.exp(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out


def exp(x: Tensor) -> Tensor:
    return Exp.apply(x)


class Log(Function):
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x


def log(x: Tensor) -> Tensor:
    return Log.apply(x)


class Sqrt(Function):
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        with np.errstate(invalid="ignore"):
            out = np.sqrt(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        with np.errstate(divide="ignore"):  # ±∞ at ±0, as torch
            return grad / (2 * out)


def sqrt(x: Tensor) -> Tensor:
    return Sqrt.apply(x)


class Abs(Function):
    """|x|; the gradient at 0 is taken as 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.abs(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * np.nan_to_num(np.sign(x))  # sign(NaN) counts as 0, as in torch


def abs(x: Tensor) -> Tensor:
    return Abs.apply(x)


class _Pick(Function):
    """Elementwise max or min of two tensors: each output element is picked from a or from b,
    and its gradient goes to the one picked. Where a == b it is split evenly (half to each).

    As in PyTorch, a side loses its gradient only where the other side wins outright, so a
    NaN (which compares false with everything) passes the whole gradient to both sides.
    """

    pick = None  # np.maximum or np.minimum
    loses = None  # np.less for maximum (a < b: a loses), np.greater for minimum

    @classmethod
    def forward(cls, ctx, a, b):
        ctx.save_for_backward(a, b)
        return cls.pick(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        # selected, not multiplied by a 0/1 share (as torch): a NaN gradient reaching the side
        # that lost stays there instead of becoming NaN·0
        g = np.where(a == b, grad / 2, grad)
        zero = np.zeros((), grad.dtype)
        return (
            unbroadcast(np.where(ctx.fn.loses(a, b), zero, g), np.shape(a)),
            unbroadcast(np.where(ctx.fn.loses(b, a), zero, g), np.shape(b)),
        )


class Maximum(_Pick):
    pick = staticmethod(np.maximum)
    loses = staticmethod(np.less)


def maximum(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(Maximum, a, b)


class Minimum(_Pick):
    pick = staticmethod(np.minimum)
    loses = staticmethod(np.greater)


def minimum(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(Minimum, a, b)


class Clip(Function):
    """Clamp to [low, high] (either may be None, a number or an array broadcasting with x):
    min(max(x, low), high), as torch.clamp. Gradients as torch's: x gets 1 inside the range
    (ends included), 0 outside it and at a NaN; a tensor `low` gets the gradient where
    x < low (when low < high), a tensor `high` where x > high or high < low (where the bounds
    cross, the result is high)."""

    @staticmethod
    def forward(ctx, x, low=None, high=None):
        ctx.save_for_backward(x, low, high)
        return np.clip(x, low, high)

    @staticmethod
    def backward(ctx, grad):
        x, low, high = ctx.saved_tensors
        inside = np.ones(np.shape(grad), dtype=bool)
        if low is not None:
            inside &= x >= low
        if high is not None:
            inside &= x <= high
        zero = np.zeros((), grad.dtype)  # np.where selects: a NaN gradient outside stays 0
        gx = unbroadcast(np.where(inside, grad, zero), x.shape)
        g_low = g_high = None
        if ctx.needs_input_grad[1]:
            takes_low = (x < low) & (low < high) if high is not None else x < low
            g_low = unbroadcast(np.where(takes_low, grad, zero), np.shape(low))
        if ctx.needs_input_grad[2]:
            takes_high = (x > high) | (high < low) if low is not None else x > high
            g_high = unbroadcast(np.where(takes_high, grad, zero), np.shape(high))
        return gx, g_low, g_high


def clip(
    x: Tensor,
    low: Tensor | Scalar | None = None,
    high: Tensor | Scalar | None = None,
    *,
    min: Tensor | Scalar | None = None,
    max: Tensor | Scalar | None = None,
) -> Tensor:
    """Clamp into [low, high]; either bound may be None, a number or a tensor broadcasting
    with x (tensor bounds receive gradients, as in torch). ``min=``/``max=`` are torch.clamp's
    names for the two bounds. Integers with a float bound are clamped in the default float
    dtype (float32), as torch promotes them."""
    if (min is not None and low is not None) or (max is not None and high is not None):
        raise op_error("clip", "a bound is given twice (by position and as min=/max=)", TypeError)
    low, high = (min if low is None else low), (max if high is None else high)
    if low is None and high is None:
        raise op_error("clip", f"at least one of min and max must be given (shape {x.shape})")
    given = [i for i, v in enumerate((low, high)) if v is not None]
    operands = _keep_float_dtype(x, *(_operand(v, x) for v in (low, high) if v is not None))
    bounds = [None, None]
    for i, v in zip(given, operands[1:]):
        bounds[i] = v
    return Clip.apply(operands[0], *bounds)


class Tanh(Function):
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        out = np.tanh(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)


def tanh(x: Tensor) -> Tensor:
    return Tanh.apply(x)


def _sigmoid(x):
    # exp of a non-positive number never overflows: use the form that is stable for each sign
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


class Sigmoid(Function):
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        out = _sigmoid(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)


def sigmoid(x: Tensor) -> Tensor:
    return Sigmoid.apply(x)


class Relu(Function):
    @staticmethod
    def forward(ctx, x):
        out = np.maximum(x, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        # selected, not multiplied (as torch): a NaN input passes its gradient on, and a NaN
        # gradient arriving at a blocked entry stays there instead of becoming NaN·0
        return np.where(out <= 0, np.zeros((), grad.dtype), grad)


def relu(x: Tensor) -> Tensor:
    return Relu.apply(x)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class Gelu(Function):
    """GELU(x) = x·Φ(x), with Φ the standard normal CDF.

    approximate="none" uses Φ(x) = (1 + erf(x/√2))/2 (exact in float64; in float32 from a fit
    of erfc with relative error below 1.2e-7, kernels/bias_activation.py); "tanh" is the
    approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    """

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, approximate="none"):
        ctx.approximate = approximate
        if approximate == "tanh":
            t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3))
            ctx.save_for_backward(x, t)
            return 0.5 * x * (1 + t)
        if approximate != "none":
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        # x·Φ(x) and Φ(x) in one pass over memory: the kernel of a Linear's bias + GELU
        # (kernels/bias_activation.py), without a bias; it keeps (x, Φ(x)) for backward
        rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]) if x.ndim else x.reshape(1, 1)
        y, saved = K.bias_activation_forward(rows, None, "gelu")
        ctx.save_for_backward(*saved)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        if ctx.approximate == "tanh":
            x, t = ctx.saved_tensors
            d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner)
        saved = ctx.saved_tensors  # d/dx x·Φ(x) = Φ(x) + x·φ(x), in one pass
        dx, _ = K.bias_activation_backward(grad.reshape(saved[0].shape), saved, "gelu", False)
        return dx.reshape(grad.shape)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU; approximate="none" (exact, erf) or "tanh"."""
    return Gelu.apply(x, approximate=approximate)


class Silu(Function):
    """SiLU(x) = x·σ(x) (also called swish)."""

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        s = _sigmoid(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * (s * (1 + x * (1 - s)))


def silu(x: Tensor) -> Tensor:
    return Silu.apply(x)


class Cast(Function):
    """Change dtype; the gradient is cast back to the input's dtype."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.in_dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.in_dtype)


def cast(x: Tensor, dtype: DType) -> Tensor:
    """x as `dtype`: differentiable between float types; an integer result has no gradient."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype.kind != "f" and x.requires_grad:
        return Tensor._make(x.numpy().astype(dtype))  # integer results carry no gradient
    return Cast.apply(x, dtype=dtype)


class Clone(Function):
    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return grad


def clone(x: Tensor, *, memory_format: Any = None) -> Tensor:
    """A copy of x that stays in the graph (its gradient flows back to x). memory_format= is
    accepted for torch's signature: the copy is row-major (C-ordered), as numpy's."""
    return Clone.apply(x)


# --------------- no Function of their own: compositions of the ops above, or no gradient
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


def logical_not(x: Tensor | ArrayLike) -> Tensor:
    return Tensor._make(np.logical_not(_data(x)))


# bitwise ops (the operators & | ^ ~): integer tensors combine their bits, bool tensors are
# logical, floats are refused (as in torch, where ~tensor([5]) is -6, not False)
def _bitwise(np_fn, op, *xs):
    like = next((x for x in xs if isinstance(x, Tensor)), None)
    operands = [_operand(x, like) if like is not None else np.asarray(x) for x in xs]
    arrays = [_data(x) for x in _keep_float_dtype(*operands)]  # torch's result dtype
    if [a for a in arrays if a.dtype.kind not in "iub"]:  # (any is this module's op)
        dtypes = ", ".join(f"{a.dtype} of shape {a.shape}" for a in arrays)
        raise op_error(op, f"is defined on integer and bool tensors only, got {dtypes}", TypeError)
    try:
        return Tensor._make(np.asarray(np_fn(*arrays)))
    except ValueError:
        shapes = " and ".join(str(a.shape) for a in arrays)
        raise op_error(op, f"shapes {shapes} do not broadcast") from None


def bitwise_and(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a & b: the bits set in both (integers); logical and (bools)."""
    return _bitwise(np.bitwise_and, "bitwise_and", a, b)


def bitwise_or(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a | b: the bits set in either (integers); logical or (bools)."""
    return _bitwise(np.bitwise_or, "bitwise_or", a, b)


def bitwise_xor(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a ^ b: the bits set in exactly one (integers); logical xor (bools)."""
    return _bitwise(np.bitwise_xor, "bitwise_xor", a, b)


def bitwise_not(x: Tensor | ArrayLike) -> Tensor:
    """~x: every bit flipped (integers: ~5 is -6, as two's complement); logical not (bools)."""
    return _bitwise(np.invert, "bitwise_not", x)


def isnan(x: Tensor | ArrayLike) -> Tensor:
    return Tensor._make(np.isnan(_data(x)))


def isfinite(x: Tensor | ArrayLike) -> Tensor:
    return Tensor._make(np.isfinite(_data(x)))


@torch_names
def any(x: Tensor | ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return Tensor._make(np.asarray(np.any(_data(x), axis=axis, keepdims=keepdims)))


@torch_names
def all(x: Tensor | ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return Tensor._make(np.asarray(np.all(_data(x), axis=axis, keepdims=keepdims)))


def allclose(
    a: Tensor | ArrayLike,
    b: Tensor | ArrayLike,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> bool:
    """True when |a − b| ≤ atol + rtol·|b| everywhere (a Python bool, as torch.allclose)."""
    return bool(np.allclose(_data(a), _data(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


# --------------- unary functions of one real variable: y = f(x), dy/dx from x and y
class _Unary(Function):
    """y = f(x) elementwise, for an f defined on the reals: `f(x)` gives y, `df(x, y)` the
    derivative dy/dx (from whichever of x and y is cheaper). Integers become float32, as in
    torch. Values outside f's domain give NaN (asin 2) or ±∞ (log2 0), as torch: no error."""

    float_inputs = (0,)
    f = None
    df = None

    @classmethod
    def forward(cls, ctx, x):
        with np.errstate(all="ignore"):
            out = np.asarray(cls.f(x)).astype(x.dtype, copy=False)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        with np.errstate(all="ignore"):
            return (grad * ctx.fn.df(x, out)).astype(grad.dtype, copy=False)


def _unary(name, f, df, doc):
    """A `_Unary` subclass named `name` (its op name in graphs and errors)."""
    cls = type(name.capitalize(), (_Unary,), {"f": staticmethod(f), "df": staticmethod(df)})
    cls.name, cls.__doc__ = name, doc
    return cls


_LN2, _LN10 = math.log(2.0), math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
Tan = _unary("tan", np.tan, lambda x, y: 1 + y * y, "tan x; d/dx = 1 + tan² x.")
Asin = _unary("asin", np.arcsin, lambda x, y: 1 / np.sqrt(1 - x * x), "asin; 1/√(1 − x²).")
Acos = _unary("acos", np.arccos, lambda x, y: -1 / np.sqrt(1 - x * x), "acos; −1/√(1 − x²).")
Atan = _unary("atan", np.arctan, lambda x, y: 1 / (1 + x * x), "atan; 1/(1 + x²).")
Sinh = _unary("sinh", np.sinh, lambda x, y: np.cosh(x), "sinh; d/dx = cosh.")
Cosh = _unary("cosh", np.cosh, lambda x, y: np.sinh(x), "cosh; d/dx = sinh.")
Asinh = _unary("asinh", np.arcsinh, lambda x, y: 1 / np.sqrt(x * x + 1), "asinh; 1/√(x² + 1).")
Acosh = _unary("acosh", np.arccosh, lambda x, y: 1 / np.sqrt(x * x - 1), "acosh; 1/√(x² − 1).")
Atanh = _unary("atanh", np.arctanh, lambda x, y: 1 / (1 - x * x), "atanh; 1/(1 − x²).")
Log2 = _unary("log2", np.log2, lambda x, y: 1 / (x * _LN2), "log₂ x; 1/(x ln 2).")
Log10 = _unary("log10", np.log10, lambda x, y: 1 / (x * _LN10), "log₁₀ x; 1/(x ln 10).")
Log1p = _unary("log1p", np.log1p, lambda x, y: 1 / (1 + x), "ln(1 + x), exact near 0; 1/(1 + x).")
Expm1 = _unary("expm1", np.expm1, lambda x, y: y + 1, "eˣ − 1, exact near 0; d/dx = eˣ.")
Exp2 = _unary("exp2", np.exp2, lambda x, y: y * _LN2, "2ˣ; d/dx = 2ˣ ln 2.")
Erf = _unary(
    "erf", lambda x: K.erf(x), lambda x, y: _TWO_OVER_SQRT_PI * np.exp(-x * x), "erf; 2/√π e^(−x²)."
)
Erfc = _unary(
    "erfc", lambda x: 1 - K.erf(x), lambda x, y: -_TWO_OVER_SQRT_PI * np.exp(-x * x), "1 − erf x."
)
Rsqrt = _unary("rsqrt", lambda x: 1 / np.sqrt(x), lambda x, y: -0.5 * y * y * y, "1/√x; −y³/2.")
Reciprocal = _unary("reciprocal", lambda x: 1 / x, lambda x, y: -y * y, "1/x; d/dx = −1/x².")
Deg2rad = _unary("deg2rad", np.deg2rad, lambda x, y: math.pi / 180, "degrees to radians.")
Rad2deg = _unary("rad2deg", np.rad2deg, lambda x, y: 180 / math.pi, "radians to degrees.")


def tan(x: Tensor) -> Tensor:
    """tan x, elementwise (any shape)."""
    return Tan.apply(x)


def asin(x: Tensor) -> Tensor:
    """arcsin x, elementwise; NaN outside [−1, 1]."""
    return Asin.apply(x)


def acos(x: Tensor) -> Tensor:
    """arccos x, elementwise; NaN outside [−1, 1]."""
    return Acos.apply(x)


def atan(x: Tensor) -> Tensor:
    """arctan x, elementwise."""
    return Atan.apply(x)


def sinh(x: Tensor) -> Tensor:
    """sinh x, elementwise."""
    return Sinh.apply(x)


def cosh(x: Tensor) -> Tensor:
    """cosh x, elementwise."""
    return Cosh.apply(x)


def asinh(x: Tensor) -> Tensor:
    """arsinh x, elementwise."""
    return Asinh.apply(x)


def acosh(x: Tensor) -> Tensor:
    """arcosh x, elementwise; NaN below 1."""
    return Acosh.apply(x)


def atanh(x: Tensor) -> Tensor:
    """artanh x, elementwise; ±∞ at ±1, NaN outside [−1, 1]."""
    return Atanh.apply(x)


def log2(x: Tensor) -> Tensor:
    """log₂ x, elementwise."""
    return Log2.apply(x)


def log10(x: Tensor) -> Tensor:
    """log₁₀ x, elementwise."""
    return Log10.apply(x)


def log1p(x: Tensor) -> Tensor:
    """ln(1 + x), elementwise, without the rounding of 1 + x for small x."""
    return Log1p.apply(x)


def expm1(x: Tensor) -> Tensor:
    """eˣ − 1, elementwise, without the cancellation for small x."""
    return Expm1.apply(x)


def exp2(x: Tensor) -> Tensor:
    """2ˣ, elementwise."""
    return Exp2.apply(x)


def erf(x: Tensor) -> Tensor:
    """The error function erf x = 2/√π ∫₀ˣ e^(−t²) dt, elementwise."""
    return Erf.apply(x)


def erfc(x: Tensor) -> Tensor:
    """1 − erf x, elementwise."""
    return Erfc.apply(x)


def rsqrt(x: Tensor) -> Tensor:
    """1/√x, elementwise."""
    return Rsqrt.apply(x)


def reciprocal(x: Tensor) -> Tensor:
    """1/x, elementwise (integers give float32, as torch)."""
    return Reciprocal.apply(x)


def deg2rad(x: Tensor) -> Tensor:
    """x·π/180, elementwise."""
    return Deg2rad.apply(x)


def rad2deg(x: Tensor) -> Tensor:
    """x·180/π, elementwise."""
    return Rad2deg.apply(x)


class _Rounding(Function):
    """floor, ceil, trunc, round and sign: piecewise constant, so the gradient is 0 (as
    torch). Integers are already whole numbers and come back unchanged, in their dtype."""

    f = None

    @classmethod
    def forward(cls, ctx, x, **kwargs):
        if x.dtype.kind in "iub" and cls is not Sign:
            return x.copy()
        return np.asarray(cls.f(x, **kwargs)).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        return np.zeros_like(grad)


class Floor(_Rounding):
    f = staticmethod(np.floor)


class Ceil(_Rounding):
    f = staticmethod(np.ceil)


class Trunc(_Rounding):
    f = staticmethod(np.trunc)


class Round(_Rounding):
    f = staticmethod(np.round)  # halves to even, as torch


class Sign(_Rounding):
    @staticmethod
    def f(x):  # torch's sign of NaN is 0 (numpy's is NaN); of −0.0, 0
        return x if x.dtype == np.bool_ else np.nan_to_num(np.sign(x), nan=0.0)


def floor(x: Tensor) -> Tensor:
    """The largest whole number ≤ x, elementwise (gradient 0)."""
    return Floor.apply(x)


def ceil(x: Tensor) -> Tensor:
    """The smallest whole number ≥ x, elementwise (gradient 0)."""
    return Ceil.apply(x)


def trunc(x: Tensor) -> Tensor:
    """x rounded toward 0, elementwise (gradient 0)."""
    return Trunc.apply(x)


def round(x: Tensor, *, decimals: int = 0) -> Tensor:
    """x rounded to `decimals` digits, halves to even (as torch and numpy; gradient 0)."""
    return Round.apply(x, decimals=decimals) if decimals else Round.apply(x)


def sign(x: Tensor) -> Tensor:
    """−1, 0 or 1 by the sign of x, elementwise (0 for NaN, as torch; gradient 0)."""
    return Sign.apply(x)


def frac(x: Tensor) -> Tensor:
    """x − trunc(x), elementwise: the fractional part, with x's sign (gradient 1)."""
    return sub(x, trunc(x))


class NanToNum(Function):
    """NaN, +∞ and −∞ replaced by finite numbers; the gradient passes where x was finite and
    is 0 where a value was replaced (the output does not depend on x there)."""

    @staticmethod
    def forward(ctx, x, nan=0.0, posinf=None, neginf=None):
        ctx.save_for_backward(x)
        return np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return np.where(np.isfinite(x), grad, np.zeros((), grad.dtype))


def nan_to_num(
    x: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
) -> Tensor:
    """NaN → `nan`, +∞ → `posinf` and −∞ → `neginf` (default: the dtype's largest and
    smallest finite numbers), elementwise; other values unchanged."""
    if x.dtype.kind != "f":
        return clone(x)
    return NanToNum.apply(x, nan=nan, posinf=posinf, neginf=neginf)


def square(x: Tensor) -> Tensor:
    """x², elementwise (integers stay integers, as torch)."""
    return mul(x, x)


def positive(x: Tensor) -> Tensor:
    """x itself (unary +)."""
    return x


# --------------- binary functions of two real variables
class Atan2(Function):
    """atan2(a, b): the angle of the point (b, a); d/da = b/(a² + b²), d/db = −a/(a² + b²)."""

    float_inputs = (0, 1)

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return np.arctan2(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        with np.errstate(all="ignore"):
            r2 = a * a + b * b
            recip = np.where(r2 == 0, 0, 1 / r2)  # at the origin 0, as torch
            return unbroadcast(grad * b * recip, a.shape), unbroadcast(-grad * a * recip, b.shape)


def atan2(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """atan2(a, b), elementwise with broadcasting: the angle in (−π, π] of the point (b, a)."""
    return _binary(Atan2, a, b)


class _Modulo(Function):
    """a − q·b with q = floor(a/b) (remainder: the sign of b, as Python's %) or trunc(a/b)
    (fmod: the sign of a, as C's fmod). d/da = 1, d/db = −q (q is piecewise constant)."""

    mod = None
    quotient = None

    @classmethod
    def forward(cls, ctx, a, b):
        if a.dtype.kind in "iu" and np.dtype(np.result_type(a, b)).kind in "iu" and (b == 0).any():
            raise ZeroDivisionError(f"{cls.op_name()}: integer division by zero")
        ctx.save_for_backward(a, b)
        with np.errstate(all="ignore"):
            return cls.mod(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        with np.errstate(all="ignore"):
            q = ctx.fn.quotient(a / b)
        return unbroadcast(grad, a.shape), unbroadcast(-grad * q, b.shape)


class Remainder(_Modulo):
    mod = staticmethod(np.remainder)
    quotient = staticmethod(np.floor)

    @staticmethod
    def backward(ctx, grad):  # q = a // b as Python and torch round it, not floor(a / b)
        a, b = ctx.saved_tensors
        with np.errstate(all="ignore"):
            q = np.floor_divide(a, b)
        return unbroadcast(grad, a.shape), unbroadcast(-grad * q, b.shape)


class Fmod(_Modulo):
    mod = staticmethod(np.fmod)
    quotient = staticmethod(np.trunc)


def remainder(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a mod b with the sign of b (Python's %), elementwise with broadcasting."""
    return _binary(Remainder, a, b)


def fmod(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a mod b with the sign of a (C's fmod), elementwise with broadcasting."""
    return _binary(Fmod, a, b)


def floor_divide(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """floor(a / b), elementwise (Python's //); no gradient (piecewise constant)."""
    return div(a, b, rounding_mode="floor")


def _rounded_div(a, b, rounding_mode):
    if rounding_mode not in ("floor", "trunc"):
        raise op_error(
            "div", f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}"
        )
    if _dtype_kind(a) in "iub" and _dtype_kind(b) in "iub":
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            a = Tensor(a)
        a, b = _operand(a, b), _operand(b, a)
        q = _integer_quotient(np.asarray(_data(a)), np.asarray(_data(b)), rounding_mode)
        return Tensor._make(np.asarray(q))
    a = a if isinstance(a, Tensor) else Tensor(a)
    a, b = _keep_float_dtype(_operand(a, b), _operand(b, a))
    return RoundedDiv.apply(a, b, mode=rounding_mode)


class RoundedDiv(Function):
    """a / b rounded down ("floor": Python's //, np.floor_divide, exact where floor(a / b)
    is not) or toward 0 ("trunc"); piecewise constant, so both gradients are 0 (as torch)."""

    @staticmethod
    def forward(ctx, a, b, mode):
        ctx.shapes = shapes_of(a, b)
        with np.errstate(all="ignore"):
            return np.floor_divide(a, b) if mode == "floor" else np.trunc(a / b)

    @staticmethod
    def backward(ctx, grad):
        sa, sb = ctx.shapes
        return np.zeros(sa, grad.dtype), np.zeros(sb, grad.dtype)


def _integer_quotient(a, b, rounding_mode):
    """a / b of integers rounded down ("floor") or toward 0 ("trunc"), exactly (no float)."""
    if (b == 0).any():
        raise ZeroDivisionError(f"div: integer division by zero (rounding_mode={rounding_mode!r})")
    q = np.floor_divide(a, b)
    if rounding_mode == "trunc":  # floor is one below trunc where a/b is negative and inexact
        q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))
    return q


class LogAddExp(Function):
    """ln(eᵃ + eᵇ) without overflow; d/da = e^(a − out), d/db = e^(b − out)."""

    float_inputs = (0, 1)

    @staticmethod
    def forward(ctx, a, b):
        out = np.logaddexp(a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        with np.errstate(all="ignore"):  # 1/(1 + e^(b − a)), not e^(a − out): a = b = 1e30
            return (  # gives out = a exactly, and e^(a − out) would be 1 instead of ½
                unbroadcast(grad / (1 + np.exp(b - a)), a.shape),
                unbroadcast(grad / (1 + np.exp(a - b)), b.shape),
            )


def logaddexp(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """ln(eᵃ + eᵇ), elementwise with broadcasting, computed without overflow."""
    return _binary(LogAddExp, a, b)


class Hypot(Function):
    """√(a² + b²); d/da = a/out, d/db = b/out."""

    float_inputs = (0, 1)

    @staticmethod
    def forward(ctx, a, b):
        out = np.hypot(a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        with np.errstate(all="ignore"):
            return unbroadcast(grad * a / out, a.shape), unbroadcast(grad * b / out, b.shape)


def hypot(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """√(a² + b²), elementwise with broadcasting, without overflow."""
    return _binary(Hypot, a, b)


def rsub(a: Tensor, b: Tensor | ArrayLike, alpha: Scalar = 1) -> Tensor:
    """b − alpha·a (torch.rsub: sub with its operands swapped)."""
    return sub(b, a, alpha=alpha)


def lerp(start: Tensor, end: Tensor | ArrayLike, weight: Tensor | ArrayLike) -> Tensor:
    """start + weight·(end − start), elementwise with broadcasting."""
    return add(start, mul(weight, sub(end, start)))


def addcmul(
    x: Tensor, tensor1: Tensor | ArrayLike, tensor2: Tensor | ArrayLike, *, value: Scalar = 1
) -> Tensor:
    """x + value·tensor1·tensor2, elementwise with broadcasting."""
    return add(x, mul(tensor1, tensor2), alpha=value)


def addcdiv(
    x: Tensor, tensor1: Tensor | ArrayLike, tensor2: Tensor | ArrayLike, *, value: Scalar = 1
) -> Tensor:
    """x + value·tensor1/tensor2, elementwise with broadcasting."""
    return add(x, div(tensor1, tensor2), alpha=value)


def clamp_min(x: Tensor, min: Scalar) -> Tensor:
    """max(x, min), elementwise (clamp with a lower bound only)."""
    return clip(x, min=min)


def clamp_max(x: Tensor, max: Scalar) -> Tensor:
    """min(x, max), elementwise (clamp with an upper bound only)."""
    return clip(x, max=max)


def isclose(
    a: Tensor | ArrayLike,
    b: Tensor | ArrayLike,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> Tensor:
    """Where |a − b| ≤ atol + rtol·|b|, elementwise (a bool tensor; allclose is its all())."""
    if rtol < 0 or atol < 0:
        raise op_error("isclose", f"rtol and atol must be ≥ 0, got rtol={rtol}, atol={atol}")
    return Tensor._make(np.isclose(_data(a), _data(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def isinf(x: Tensor | ArrayLike) -> Tensor:
    return Tensor._make(np.isinf(_data(x)))


def isposinf(x: Tensor | ArrayLike) -> Tensor:
    return Tensor._make(np.isposinf(_data(x)))


def isneginf(x: Tensor | ArrayLike) -> Tensor:
    return Tensor._make(np.isneginf(_data(x)))


def equal(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> bool:
    """True when a and b have the same shape and the same values (a Python bool, as
    torch.equal; NaN is never equal to itself)."""
    a, b = _data(a), _data(b)
    return bool(a.shape == b.shape and np.array_equal(a, b))


# --------------- more of torch's elementwise functions (found missing by the OpInfo walk)
def sgn(x: Tensor) -> Tensor:
    """sign(x) (torch's name that also covers complex numbers)."""
    return sign(x)


def true_divide(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a / b (torch's older name for div)."""
    return div(a, b)


class Xlogy(Function):
    """x·ln y, 0 where x = 0 (unless y is NaN). Gradients as torch's: d/dx = ln y (0 where
    x = 0 and y ≤ 0, where ln y is −∞ or NaN), d/dy = x / y."""

    float_inputs = (0, 1)

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        with np.errstate(all="ignore"):
            return np.where((x == 0) & ~np.isnan(y), np.zeros((), x.dtype), x * np.log(y))

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        with np.errstate(all="ignore"):
            gx = np.where((x == 0) & (y <= 0), 0, grad * np.log(y)).astype(grad.dtype)
            return unbroadcast(gx, x.shape), unbroadcast(grad * x / y, y.shape)


def xlogy(x: Tensor | ArrayLike, y: Tensor | ArrayLike) -> Tensor:
    """x·ln y, and 0 where x = 0 (unless y is NaN), as torch and scipy."""
    return _binary(Xlogy, x, y)


class Logit(Function):
    """ln(z / (1 − z)), z = x or, with eps, x clamped to [eps, 1 − eps]. d/dx = 1/(x(1 − x))
    inside; outside, as torch: 0 with eps, else NaN beyond [0, 1] and ∞ at 0 and 1."""

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, eps=None):
        ctx.save_for_backward(x)
        ctx.eps = eps
        z = x if eps is None else np.clip(x, eps, 1 - eps)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(z) - np.log1p(-z)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        eps = ctx.eps
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = grad / (x * (1 - x))
            if eps is not None:
                return np.where((x < eps) | (x > 1 - eps), 0, inside).astype(grad.dtype)
            edge = np.where((x == 0) | (x == 1), grad * np.inf, inside)
            return np.where((x < 0) | (x > 1), np.nan, edge).astype(grad.dtype)


def logit(x: Tensor, eps: float | None = None) -> Tensor:
    """ln(x / (1 − x)); with eps, x is first clamped to [eps, 1 − eps] (no gradient outside)."""
    return Logit.apply(x, eps=eps)


def sinc(x: Tensor) -> Tensor:
    """sin(πx)/(πx), and 1 at 0 (the normalised sinc)."""
    zero = eq(x, 0)
    px = mul(_where(zero, 1.0, x), math.pi)  # no 0/0 at 0, where the gradient is 0 (as torch)
    return _where(zero, 1.0, div(sin(px), px))


def heaviside(x: Tensor, values: Tensor | ArrayLike) -> Tensor:
    """0 where x < 0, 1 where x > 0, `values` where x = 0 (no gradient)."""
    d, v = _data(x), _data(values)
    out = np.where(d == 0, v, d > 0)  # NaN is not > 0: 0, as torch (np.heaviside gives NaN)
    return Tensor._make(np.asarray(out).astype(np.result_type(d, v)))


def copysign(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """|a| with the sign of b, elementwise (the gradient flows to a only, as torch)."""
    if _dtype_kind(a) in "iub":
        a = cast(a if isinstance(a, Tensor) else Tensor(a), np.float32)
    if not isinstance(a, Tensor):
        a = Tensor(a)
    return _binary(Copysign, a, b)


class Copysign(Function):
    """|a| with the sign of b. As torch, d/da = result / a (NaN at ±∞), 0 where a = 0; none
    for b."""

    @staticmethod
    def forward(ctx, a, b):
        out = np.copysign(a, b).astype(a.dtype, copy=False)
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved_tensors
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(a == 0, 0, out / a)
        return unbroadcast((grad * ratio).astype(grad.dtype), a.shape), None


def signbit(x: Tensor | ArrayLike) -> Tensor:
    """Where the sign bit is set (x < 0, and −0.0), elementwise."""
    return Tensor._make(np.signbit(_data(x)))


class _NanPick(Function):
    """fmax/fmin: the larger (smaller) of a and b, the other where one is NaN. The gradient
    goes wholly to the one picked, to a on ties, as torch."""

    pick = None
    a_wins = None

    @classmethod
    def forward(cls, ctx, a, b):
        ctx.save_for_backward(a, b)
        return cls.pick(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        take_a = ctx.fn.a_wins(a, b) | np.isnan(b)
        zero = np.zeros((), grad.dtype)
        return (
            unbroadcast(np.where(take_a, grad, zero), np.shape(a)),
            unbroadcast(np.where(take_a, zero, grad), np.shape(b)),
        )


class Fmax(_NanPick):
    pick = staticmethod(np.fmax)
    a_wins = staticmethod(np.greater_equal)


class Fmin(_NanPick):
    pick = staticmethod(np.fmin)
    a_wins = staticmethod(np.less_equal)


def fmax(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """max(a, b) elementwise, ignoring a NaN on one side (NaN only where both are)."""
    return _binary(Fmax, a, b)


def fmin(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """min(a, b) elementwise, ignoring a NaN on one side (NaN only where both are)."""
    return _binary(Fmin, a, b)


def float_power(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a ** b computed in float64 (torch's float_power), whatever the inputs' dtypes."""
    a = cast(a, np.float64) if isinstance(a, Tensor) else np.asarray(a, np.float64)
    b = cast(b, np.float64) if isinstance(b, Tensor) else np.asarray(b, np.float64)
    return pow(a if isinstance(a, Tensor) else Tensor._make(a), b)


class LogAddExp2(Function):
    """log₂(2ᵃ + 2ᵇ) without overflow; d/da = 2^(a − out), d/db = 2^(b − out)."""

    float_inputs = (0, 1)

    @staticmethod
    def forward(ctx, a, b):
        out = np.logaddexp2(a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        with np.errstate(all="ignore"):  # as LogAddExp: 1/(1 + 2^(b − a)) stays exact
            return (
                unbroadcast(grad / (1 + np.exp2(b - a)), a.shape),
                unbroadcast(grad / (1 + np.exp2(a - b)), b.shape),
            )


def logaddexp2(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """log₂(2ᵃ + 2ᵇ), elementwise with broadcasting, computed without overflow."""
    return _binary(LogAddExp2, a, b)


def isin(
    elements: Tensor | ArrayLike,
    test_elements: Tensor | ArrayLike,
    *,
    assume_unique: bool = False,
    invert: bool = False,
) -> Tensor:
    """Whether each element of `elements` is among `test_elements` (a bool tensor)."""
    found = np.isin(_data(elements), _data(test_elements), assume_unique=assume_unique)
    return Tensor._make(np.asarray(np.logical_not(found) if invert else found))


def _where(cond, a, b):
    from .shape import where  # shape.py imports this module

    return where(cond, a, b)
