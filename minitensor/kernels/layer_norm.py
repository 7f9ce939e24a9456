"""Layer normalisation over the last axis of a (N, D) matrix: numba kernels and numpy twins.

Forward keeps each row's mean μ and reciprocal standard deviation rstd = 1/√(σ² + eps) for the
backward pass, which is the classic fused formula (x̂ = (x − μ)·rstd, g = dy ⊙ weight):

    dx = rstd/D · (D·g − Σ g − x̂ · Σ (g ⊙ x̂)),   dweight = Σ_rows dy ⊙ x̂,   dbias = Σ_rows dy.
"""
import numpy as np
from numba import prange

from .jit import kernel, threads


# ---- numpy twins -----------------------------------------------------------------------------

def layer_norm_forward_numpy(x, weight, bias, eps):
    """y = (x − μ)/√(σ² + eps) · weight + bias over the last axis of x (N, D); weight and bias
    (D,) may be None. Returns (y (N, D), mean (N,), rstd (N,)), all in x's dtype."""
    mean = x.mean(axis=-1)
    xc = x - mean[:, None]
    var = (xc * xc).mean(axis=-1)
    rstd = 1.0 / np.sqrt(var + eps)
    y = xc * rstd[:, None]
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype, copy=False), mean, rstd.astype(x.dtype, copy=False)


def layer_norm_backward_numpy(dy, x, mean, rstd, weight):
    """Gradients of layer_norm_forward: returns (dx (N, D), dweight (D,) or None, dbias (D,))."""
    xhat = (x - mean[:, None]) * rstd[:, None]
    dbias = dy.sum(axis=0)
    dweight = (dy * xhat).sum(axis=0) if weight is not None else None
    g = dy * weight if weight is not None else dy
    d = x.shape[-1]
    dx = rstd[:, None] / d * (d * g - g.sum(axis=-1, keepdims=True)
                              - xhat * (g * xhat).sum(axis=-1, keepdims=True))
    return dx.astype(x.dtype, copy=False), dweight, dbias


# ---- numba kernels ---------------------------------------------------------------------------

@kernel(parallel=True)
def _layer_norm_rows(x, weight, bias, eps, y, mean, rstd):
    """Row i of x (N, D): mean, rstd (two passes, so no cancellation), then y. weight and bias
    are (D,) arrays (ones / zeros when the caller has none)."""
    N, D = x.shape
    f = x.dtype.type
    for i in prange(N):
        total = f(0)
        for j in range(D):
            total += x[i, j]
        mu = total / f(D)
        squares = f(0)
        for j in range(D):
            squares += (x[i, j] - mu) * (x[i, j] - mu)
        r = f(1) / np.sqrt(squares / f(D) + eps)
        mean[i], rstd[i] = mu, r
        for j in range(D):
            y[i, j] = (x[i, j] - mu) * r * weight[j] + bias[j]


@kernel(parallel=True)
def _layer_norm_backward_rows(dy, x, mean, rstd, weight, n_chunks, dx, dweight_parts,
                              dbias_parts):
    """dx row by row; dweight and dbias summed over rows in `n_chunks` partial sums (one per
    parallel task, added up by the caller) so no two threads write the same memory."""
    N, D = x.shape
    f = x.dtype.type
    for chunk in prange(n_chunks):
        for i in range(chunk * N // n_chunks, (chunk + 1) * N // n_chunks):
            g_sum = f(0)
            gx_sum = f(0)
            for j in range(D):
                xhat = (x[i, j] - mean[i]) * rstd[i]
                g = dy[i, j] * weight[j]
                g_sum += g
                gx_sum += g * xhat
                dweight_parts[chunk, j] += dy[i, j] * xhat
                dbias_parts[chunk, j] += dy[i, j]
            for j in range(D):
                xhat = (x[i, j] - mean[i]) * rstd[i]
                g = dy[i, j] * weight[j]
                dx[i, j] = rstd[i] / f(D) * (f(D) * g - g_sum - xhat * gx_sum)


def layer_norm_forward_numba(x, weight, bias, eps):
    """Numba twin of layer_norm_forward_numpy."""
    x = np.ascontiguousarray(x)
    n, d = x.shape
    w = np.ones(d, x.dtype) if weight is None else np.ascontiguousarray(weight, dtype=x.dtype)
    b = np.zeros(d, x.dtype) if bias is None else np.ascontiguousarray(bias, dtype=x.dtype)
    y = np.empty_like(x)
    mean, rstd = np.empty(n, x.dtype), np.empty(n, x.dtype)
    _layer_norm_rows(x, w, b, x.dtype.type(eps), y, mean, rstd)
    return y, mean, rstd


def layer_norm_backward_numba(dy, x, mean, rstd, weight):
    """Numba twin of layer_norm_backward_numpy."""
    x = np.ascontiguousarray(x)
    n, d = x.shape
    dy = np.ascontiguousarray(dy, dtype=x.dtype)
    w = np.ones(d, x.dtype) if weight is None else np.ascontiguousarray(weight, dtype=x.dtype)
    n_chunks = max(1, min(threads(), n))
    dx = np.empty_like(x)
    dweight_parts = np.zeros((n_chunks, d), x.dtype)
    dbias_parts = np.zeros((n_chunks, d), x.dtype)
    _layer_norm_backward_rows(dy, x, np.ascontiguousarray(mean, dtype=x.dtype),
                              np.ascontiguousarray(rstd, dtype=x.dtype), w, n_chunks, dx,
                              dweight_parts, dbias_parts)
    dweight = dweight_parts.sum(axis=0) if weight is not None else None
    return dx, dweight, dbias_parts.sum(axis=0)
