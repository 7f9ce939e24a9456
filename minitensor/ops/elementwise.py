"""Elementwise ops. Binary ops broadcast with numpy's rules; `unbroadcast` sums each input's
gradient back to its own shape."""
import math

import numpy as np

from .. import kernels as K
from ..function import Function, unbroadcast


class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (np.shape(a), np.shape(b))
        return a + b

    @staticmethod
    def backward(ctx, grad):
        sa, sb = ctx.shapes
        return unbroadcast(grad, sa), unbroadcast(grad, sb)


class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (np.shape(a), np.shape(b))
        return a - b

    @staticmethod
    def backward(ctx, grad):
        sa, sb = ctx.shapes
        return unbroadcast(grad, sa), unbroadcast(-grad, sb)


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


class Pow(Function):
    """a ** b, with torch's gradients, computed in the result's dtype (a float64 exponent of a
    float32 base gets a float64 gradient, and b − 1 of a float32 exponent of a float64 base
    keeps every digit). d/da = b·a^(b−1), selected to 0 where b = 0 (even at a = 0, where it
    would be 0·∞, and even for a NaN gradient). d/db = a^b·ln a: 0 where a = 0 and b ≥ 0 (the
    limit of a^b·ln a there), NaN where a < 0 (a^b has no real derivative in b there: (−2)^b
    is real only at integers)."""

    @staticmethod
    def forward(ctx, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):   # 0 ** −1 = ∞, (−1) ** 0.5 = NaN
            out = a ** b
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
                gb = unbroadcast(grad * np.where((a == 0) & (b >= 0), zero, out * np.log(a)),
                                 shapes[1])
        return ga, gb


class Neg(Function):
    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, grad):
        return -grad


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
        with np.errstate(divide="ignore"):      # ±∞ at ±0, as torch
            return grad / (2 * out)


class Abs(Function):
    """|x|; the gradient at 0 is taken as 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.abs(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * np.nan_to_num(np.sign(x))     # sign(NaN) counts as 0, as in torch


class _Pick(Function):
    """Elementwise max or min of two tensors: each output element is picked from a or from b,
    and its gradient goes to the one picked. Where a == b it is split evenly (half to each).

    As in PyTorch, a side loses its gradient only where the other side wins outright, so a
    NaN (which compares false with everything) passes the whole gradient to both sides.
    """
    pick = None      # np.maximum or np.minimum
    loses = None     # np.less for maximum (a < b: a loses), np.greater for minimum

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
        return (unbroadcast(np.where(ctx.fn.loses(a, b), zero, g), np.shape(a)),
                unbroadcast(np.where(ctx.fn.loses(b, a), zero, g), np.shape(b)))


class Maximum(_Pick):
    pick = staticmethod(np.maximum)
    loses = staticmethod(np.less)


class Minimum(_Pick):
    pick = staticmethod(np.minimum)
    loses = staticmethod(np.greater)


class Clip(Function):
    """Clamp to [low, high] (either may be None); gradient 1 inside the range (ends included),
    0 outside it and at a NaN input, as torch."""

    @staticmethod
    def forward(ctx, x, low=None, high=None):
        ctx.save_for_backward(x)
        ctx.low, ctx.high = low, high
        return np.clip(x, low, high)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        inside = np.ones(x.shape, dtype=bool)
        if ctx.low is not None:
            inside &= x >= ctx.low
        if ctx.high is not None:
            inside &= x <= ctx.high
        return np.where(inside, grad, np.zeros((), grad.dtype))    # selected: NaN·0 is NaN


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
            t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))
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
        x, cdf = ctx.saved_tensors      # d/dx x·Φ(x) = Φ(x) + x·φ(x)
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return grad * (cdf + x * pdf)


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


class Cast(Function):
    """Change dtype; the gradient is cast back to the input's dtype."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.in_dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.in_dtype)


class Clone(Function):
    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return grad
