"""Bias + activation, the step after the feed-forward network's first matrix product:
y = act(x + b) over x (N, D) and b (D,), for act ReLU or GELU, in one pass: numba kernels and
numpy twins.

Unfused, a Linear's bias add and the activation are two ops: the sum x + b is written to
memory and read back, and backward passes the gradient through two nodes. Fused, each entry is
read once and written once. What backward needs is the activation's own:

    ReLU:  y = max(h, 0) with h = x + b;  dh = dy where y > 0, else 0 (selected, as torch does:
           a NaN input passes its gradient on);  keeps y
    GELU:  y = h·Φ(h), Φ(h) = (1 + erf(h/√2))/2 (exact, as F.gelu's default; the float32
           kernels compute Φ from a fit of erfc with relative error below 1.2e-7,
           numba_helpers.normal_cdf);  dh = dy·(Φ(h) + h·φ(h)), φ the standard normal
           density;  keeps the input x (and b) and Φ(h)

and in both dx = dh, db = Σ_rows dh.

GELU keeps its input rather than h: backward adds the bias again (one addition per entry), and
forward writes two arrays (y and Φ) instead of three. It keeps Φ(h), which costs the erfc fit
and an exponential per entry — several times a pass over memory.

Without an activation, a Linear's bias is added in place into the product's own output
(`add_bias`): numpy's broadcast add runs its inner loop once per row, and a row of a few dozen
features costs as much in that call as in its arithmetic; the kernel's loop runs the rows
itself.
"""

import math

import numpy as np

from . import jit
from .erf import erf_numpy
from .jit import kernel, prange, row_parts

ACTIVATIONS = ("relu", "gelu")
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _check(x, bias, activation, where):
    """A clear error unless x is (N, D) of floats, bias None or (D,), activation known."""
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"{where}: activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}"
        )
    if x.ndim != 2 or x.dtype.kind != "f":
        raise ValueError(
            f"{where}: x must be a float (N, D) matrix, got {x.dtype} of shape {x.shape}"
        )
    if bias is not None and bias.shape != (x.shape[1],):
        raise ValueError(
            f"{where}: bias of shape {bias.shape} does not match x {x.shape} "
            f"(it is added to every row)"
        )


# ---- numpy twins -----------------------------------------------------------------------------


def bias_activation_forward_numpy(x, bias, activation):
    """(y, saved): y = act(x + bias) for x (N, D), bias (D,) or None, activation "relu" or
    "gelu"; saved is the tuple backward reads — (y,) for ReLU, (x, bias, Φ(h)) for GELU."""
    _check(x, bias, activation, "bias_activation_forward")
    h = _biased(x, bias)
    if activation == "relu":
        y = np.maximum(h, x.dtype.type(0))
        return y, (y,)
    cdf = _normal_cdf_numpy(h)
    return h * cdf, (x, bias, cdf)


def _biased(x, bias):
    """h = x + bias in x's dtype (x itself without a bias)."""
    return x + bias.astype(x.dtype, copy=False) if bias is not None else x


def _normal_cdf_numpy(h):
    """Φ(h) = (1 + erf(h/√2))/2 in h's dtype, erf exact (kernels/erf.py)."""
    f = h.dtype.type
    return (f(0.5) * (f(1) + erf_numpy(h * f(_INV_SQRT2)))).astype(h.dtype, copy=False)


def add_bias_numpy(y, bias):
    """y += bias on every row of y (N, D), in place, and y returned; bias (D,) of y's dtype."""
    _check_bias_add(y, bias)
    np.add(y, bias, out=y)
    return y


def _check_bias_add(y, bias):
    """A clear error unless y is a writeable float (N, D) matrix and bias (D,) of its dtype."""
    if y.ndim != 2 or y.dtype.kind != "f" or not y.flags.writeable:
        raise ValueError(
            f"add_bias: y must be a writeable float (N, D) matrix, got {y.dtype} of shape {y.shape}"
        )
    if bias.shape != (y.shape[1],) or bias.dtype != y.dtype:
        raise ValueError(
            f"add_bias: bias {bias.dtype} of shape {bias.shape} does not match y {y.dtype} "
            f"{y.shape} (it is added to every row, in y's dtype)"
        )


def bias_activation_backward_numpy(dy, saved, activation, has_bias=True):
    """(dx (N, D), dbias (D,) or None without a bias) from dy = dLoss/dy and forward's saved."""
    if activation == "relu":
        (y,) = saved
        dx = np.where(y <= 0, y.dtype.type(0), dy.astype(y.dtype, copy=False))
    else:
        x, bias, cdf = saved
        h = _biased(x, bias)
        f = h.dtype.type
        pdf = np.exp(f(-0.5) * h * h) * f(_INV_SQRT_2PI)
        dx = (dy * (cdf + h * pdf)).astype(h.dtype, copy=False)
    return dx, (dx.sum(axis=0) if has_bias else None)


# ---- numba kernels ---------------------------------------------------------------------------


@kernel(parallel=True)
def _bias_relu_rows(x, bias, y):
    """y[i] = max(x[i] + bias, 0) row by row (a NaN stays NaN, as np.maximum keeps it)."""
    N, D = x.shape
    f = x.dtype.type
    for i in prange(N):
        for j in range(D):
            h = x[i, j] + bias[j]
            y[i, j] = f(0) if h <= f(0) else h


@kernel(parallel=True)
def _bias_gelu_rows(x, bias, y, cdf):
    """y[i] = h·Φ(h), h = x[i] + bias (Φ: jit.normal_cdf); keeps Φ(h) in cdf."""
    N, D = x.shape
    for i in prange(N):
        for j in range(D):
            h = x[i, j] + bias[j]
            c = jit.normal_cdf(h)
            cdf[i, j] = c
            y[i, j] = h * c


@kernel(parallel=True)
def _relu_grad_rows(dy, y, n_chunks, dx, dbias_parts):
    """dx = dy where y > 0 (else 0), and Σ_rows dx in `n_chunks` partial sums (each over a fixed
    run of rows, jit.row_parts; added up by the caller), so that no two threads write the same
    memory and the thread count does not change the sum."""
    N, D = dy.shape
    f = dy.dtype.type
    for chunk in prange(n_chunks):
        for i in range(chunk * N // n_chunks, (chunk + 1) * N // n_chunks):
            for j in range(D):
                g = f(0) if y[i, j] <= f(0) else dy[i, j]
                dx[i, j] = g
                dbias_parts[chunk, j] += g


@kernel(parallel=True)
def _gelu_grad_rows(dy, x, bias, cdf, n_chunks, dx, dbias_parts):
    """dx = dy·(Φ(h) + h·φ(h)), h = x[i] + bias, Φ(h) from cdf, and Σ_rows dx in partial sums,
    as _relu_grad_rows."""
    N, D = dy.shape
    f = dy.dtype.type
    for chunk in prange(n_chunks):
        for i in range(chunk * N // n_chunks, (chunk + 1) * N // n_chunks):
            for j in range(D):
                h = x[i, j] + bias[j]
                pdf = jit.exp(f(-0.5) * h * h) * f(_INV_SQRT_2PI)
                g = dy[i, j] * (cdf[i, j] + h * pdf)
                dx[i, j] = g
                dbias_parts[chunk, j] += g


@kernel()
def _add_bias_rows(y, bias):
    """y[i] += bias, row by row (serial: one pass over memory, which one core keeps up with)."""
    N, D = y.shape
    for i in range(N):
        y_row = y[i]
        for j in range(D):
            y_row[j] += bias[j]


def add_bias_numba(y, bias):
    """Numba twin of add_bias_numpy."""
    _check_bias_add(y, bias)
    _add_bias_rows(y, np.ascontiguousarray(bias))
    return y


def bias_activation_forward_numba(x, bias, activation):
    """Numba twin of bias_activation_forward_numpy."""
    _check(x, bias, activation, "bias_activation_forward")
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    if activation == "relu":
        _bias_relu_rows(x, _bias_row(x, bias), y)
        return y, (y,)
    cdf = np.empty_like(x)
    _bias_gelu_rows(x, _bias_row(x, bias), y, cdf)
    return y, (x, bias, cdf)


def _bias_row(x, bias):
    """The bias as a contiguous row of x's dtype, zeros without one (the kernels add it)."""
    if bias is None:
        return np.zeros(x.shape[1], x.dtype)
    return np.ascontiguousarray(bias, dtype=x.dtype)


def bias_activation_backward_numba(dy, saved, activation, has_bias=True):
    """Numba twin of bias_activation_backward_numpy."""
    first = saved[0]
    dy = np.ascontiguousarray(dy, dtype=first.dtype)
    if dy.shape != first.shape:
        raise ValueError(
            f"bias_activation_backward: dy {dy.shape} does not match the forward's "
            f"output {first.shape}"
        )
    n, d = dy.shape
    n_chunks = row_parts(n)
    dx = np.empty_like(dy)
    parts = np.zeros((n_chunks, d), dy.dtype)
    if activation == "relu":
        _relu_grad_rows(dy, np.ascontiguousarray(first), n_chunks, dx, parts)
    else:
        x, bias, cdf = (np.ascontiguousarray(a) if a is not None else None for a in saved)
        _gelu_grad_rows(dy, x, _bias_row(x, bias), cdf, n_chunks, dx, parts)
    return dx, (parts.sum(axis=0) if has_bias else None)
