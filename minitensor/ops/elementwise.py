"""Elementwise ops. Binary ops broadcast with numpy's rules; `unbroadcast` sums each input's
gradient back to its own shape.

After each class comes the public function that checks its arguments and applies it
(`minitensor.functional` re-exports it); functions with no class of their own close the file.
"""

from __future__ import annotations

import math

import numpy as np

from .. import kernels as K
from ..function import Function, op_error, unbroadcast
from ..tensor import Tensor
from ..typing import ArrayLike, Axis, DType, Scalar
from ._args import _data, _keep_float_dtype, _operand
from ._axes import torch_names


class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (np.shape(a), np.shape(b))
        return a + b

    @staticmethod
    def backward(ctx, grad):
        sa, sb = ctx.shapes
        return unbroadcast(grad, sa), unbroadcast(grad, sb)


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
            raise op_error(
                fn.op_name(),
                f"shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                f"broadcast (numpy's rules: align the trailing axes; "
                f"each pair of sizes must be equal or 1)",
            ) from None
        raise


def add(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(Add, a, b)


class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (np.shape(a), np.shape(b))
        return a - b

    @staticmethod
    def backward(ctx, grad):
        sa, sb = ctx.shapes
        return unbroadcast(grad, sa), unbroadcast(-grad, sb)


def sub(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(Sub, a, b)


class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ga = unbroadcast(grad * b, a.shape) if ctx.needs_input_grad[0] else None
        gb = unbroadcast(grad * a, b.shape) if ctx.needs_input_grad[1] else None
        return ga, gb


def mul(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    return _binary(Mul, a, b)


class Div(Function):
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


def div(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a / b; true division, so integers divide into float32 (not numpy's float64)."""
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

    approximate="none" uses Φ(x) = (1 + erf(x/√2))/2 exactly; "tanh" is the fast approximation
    0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
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
        cdf = (0.5 * (1 + K.erf(x / math.sqrt(2)))).astype(x.dtype, copy=False)
        ctx.save_for_backward(x, cdf)
        return x * cdf

    @staticmethod
    def backward(ctx, grad):
        if ctx.approximate == "tanh":
            x, t = ctx.saved_tensors
            d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner)
        x, cdf = ctx.saved_tensors  # d/dx x·Φ(x) = Φ(x) + x·φ(x)
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return grad * (cdf + x * pdf)


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
        return Tensor._make(x.data.astype(dtype))  # integer results carry no gradient
    return Cast.apply(x, dtype=dtype)


class Clone(Function):
    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return grad


def clone(x: Tensor) -> Tensor:
    """A copy of x that stays in the graph (its gradient flows back to x)."""
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
    arrays = [_data(_operand(x, like)) if like is not None else _data(x) for x in xs]
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
