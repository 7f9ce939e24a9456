"""Layer normalisation over the last axis of a (N, D) matrix: numba kernels and numpy twins.

Forward keeps each row's mean μ and reciprocal standard deviation rstd = 1/√(σ² + eps) for the
backward pass, which is the classic fused formula (x̂ = (x − μ)·rstd, g = dy ⊙ weight):

    dx = rstd/D · (D·g − Σ g − x̂ · Σ (g ⊙ x̂)),   dweight = Σ_rows dy ⊙ x̂,   dbias = Σ_rows dy.

The mean takes one correction step, μ = m + c with m = Σx/D and c = mean(d), d = x − m: at
large offsets Σx rounds (nine float32 entries of −1e9 sum to a multiple of 1024), so m misses
even a constant row's value, and x − m, divided by √(σ² + eps), turns that rounding into an
output of ±1. d is exact there (x and m are close), so μ lands on the row's value and
x − μ = d − c is 0, as with torch's Welford mean. The variance is then mean(d²) − c², the
corrected two-pass formula (Chan, Golub and LeVeque, "Algorithms for computing the sample
variance", The American Statistician 37, 1983), which needs no third pass over the row. Where
the squares overflow x's dtype (deviations beyond ~1.8e19 in float32), that row's variance is
summed again in float64: its rstd is still a float32 number, and x̂ is right.
"""

import numpy as np

from . import jit
from .jit import kernel, prange, row_parts

# ---- numpy twins -----------------------------------------------------------------------------


def layer_norm_forward_numpy(x, weight, bias, eps):
    """y = (x − μ)/√(σ² + eps) · weight + bias over the last axis of x (N, D); weight and bias
    (D,) may be None. Returns (y (N, D), mean (N,), rstd (N,)), all in x's dtype."""
    m = x.mean(axis=-1)
    d = x - m[:, None]
    c = d.mean(axis=-1)  # the correction step (module docstring)
    mean, xc = m + c, d - c[:, None]
    s = (d * d).mean(axis=-1)
    with np.errstate(invalid="ignore"):
        var = np.maximum(s - c * c, 0)  # ≥ 0 but for rounding
    rstd = 1.0 / np.sqrt(var + eps)
    wide = ~(s < np.inf)  # squares beyond x's dtype (or NaN): in float64
    if wide.any():
        rstd[wide] = _rstd_float64_numpy(d[wide], c[wide], eps)
    y = xc * rstd[:, None]
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype, copy=False), mean, rstd.astype(x.dtype, copy=False)


def _rstd_float64_numpy(d, c, eps):
    """1/√(mean(d²) − c² + eps) over the last axis, in float64."""
    d, c = d.astype(np.float64), c.astype(np.float64)
    return 1.0 / np.sqrt(np.maximum((d * d).mean(axis=-1) - c * c, 0) + eps)


def layer_norm_backward_numpy(dy, x, mean, rstd, weight):
    """Gradients of layer_norm_forward: returns (dx (N, D), dweight (D,) or None, dbias (D,))."""
    xhat = (x - mean[:, None]) * rstd[:, None]
    dbias = dy.sum(axis=0)
    dweight = (dy * xhat).sum(axis=0) if weight is not None else None
    g = dy * weight if weight is not None else dy
    d = x.shape[-1]
    dx = (
        rstd[:, None]
        / d
        * (d * g - g.sum(axis=-1, keepdims=True) - xhat * (g * xhat).sum(axis=-1, keepdims=True))
    )
    return dx.astype(x.dtype, copy=False), dweight, dbias


# ---- numba kernels ---------------------------------------------------------------------------


@kernel()
def _rstd_float64(d, c, eps):
    """1/√(mean(d²) − c² + eps) of one row d, in float64 (a NaN stays NaN)."""
    total = 0.0
    for v in d:
        total += np.float64(v) * np.float64(v)
    var = total / d.size - np.float64(c) * np.float64(c)
    if var < 0:
        var = 0.0
    return 1.0 / np.sqrt(var + np.float64(eps))


@kernel(parallel=True)
def _layer_norm_rows(x, weight, bias, eps, y, mean, rstd):
    """Row i of x (N, D): the mean with its correction step and the corrected two-pass
    variance (module docstring), then y. weight and bias are (D,) arrays (ones / zeros when
    the caller has none). y holds d = x − m until the last pass, for jit.row_sum and
    jit.row_dot to add it up. Each row is taken once as a 1-D view (x_row, y_row): the loops
    then index one axis, and compile to tighter code than x[i, j] does."""
    N, D = x.shape
    f = x.dtype.type
    for i in prange(N):
        x_row, y_row = x[i], y[i]
        m = jit.row_sum(x_row) / f(D)
        for j in range(D):
            y_row[j] = x_row[j] - m
        c = jit.row_sum(y_row) / f(D)
        var = jit.row_dot(y_row, y_row) / f(D)
        if var < np.inf:
            r = f(1) / np.sqrt(max(var - c * c, f(0)) + eps)  # ≥ 0 but for rounding
        else:  # squares beyond x's dtype (or NaN): in float64
            r = f(_rstd_float64(y_row, c, eps))
        mean[i], rstd[i] = m + c, r
        for j in range(D):
            y_row[j] = (y_row[j] - c) * r * weight[j] + bias[j]


@kernel(parallel=True)
def _layer_norm_backward_rows(
    dy, x, mean, rstd, weight, n_chunks, xhat_rows, dx, dweight_parts, dbias_parts
):
    """dx row by row; dweight and dbias summed over rows in `n_chunks` partial sums (each over
    a fixed run of rows, jit.row_parts; added up by the caller) so no two threads write the same
    memory and the thread count does not change the sums. Each task
    keeps x̂ of its current row in its own row of xhat_rows (n_chunks, D), and g = dy ⊙ weight
    in dx until the last pass, for jit.row_sum and jit.row_dot to add them up. One loop per
    array written: LLVM vectorises a loop only after checking at run time that the arrays it
    writes do not overlap those it reads, and gives up on a loop with more pairs to check than
    its limit (one loop writing x̂, dx and both partial sums had too many)."""
    N, D = x.shape
    f = x.dtype.type
    for chunk in prange(n_chunks):
        xhat, dweight, dbias = xhat_rows[chunk], dweight_parts[chunk], dbias_parts[chunk]
        for i in range(chunk * N // n_chunks, (chunk + 1) * N // n_chunks):
            x_row, dy_row, dx_row = x[i], dy[i], dx[i]
            for j in range(D):
                xhat[j] = (x_row[j] - mean[i]) * rstd[i]
            for j in range(D):
                dx_row[j] = dy_row[j] * weight[j]
            for j in range(D):
                dweight[j] += dy_row[j] * xhat[j]
            for j in range(D):
                dbias[j] += dy_row[j]
            g_sum = jit.row_sum(dx_row)
            gx_sum = jit.row_dot(dx_row, xhat)
            for j in range(D):
                dx_row[j] = rstd[i] / f(D) * (f(D) * dx_row[j] - g_sum - xhat[j] * gx_sum)


def _affine(param, d, dtype, fill, name):
    """weight or bias as a contiguous (D,) array of x's dtype (`fill` when None); a wrong
    length is refused (the kernels would read past it)."""
    if param is None:
        return np.full(d, fill, dtype)
    if param.shape != (d,):
        raise ValueError(
            f"layer_norm: {name} of shape {param.shape} does not match the normalised size {d}"
        )
    return np.ascontiguousarray(param, dtype=dtype)


def layer_norm_forward_numba(x, weight, bias, eps):
    """Numba twin of layer_norm_forward_numpy."""
    x = np.ascontiguousarray(x)
    n, d = x.shape
    w, b = _affine(weight, d, x.dtype, 1, "weight"), _affine(bias, d, x.dtype, 0, "bias")
    y = np.empty_like(x)
    mean, rstd = np.empty(n, x.dtype), np.empty(n, x.dtype)
    _layer_norm_rows(x, w, b, x.dtype.type(eps), y, mean, rstd)
    return y, mean, rstd


def layer_norm_backward_numba(dy, x, mean, rstd, weight):
    """Numba twin of layer_norm_backward_numpy."""
    x = np.ascontiguousarray(x)
    n, d = x.shape
    dy = np.ascontiguousarray(dy, dtype=x.dtype)
    if dy.shape != x.shape or np.shape(mean) != (n,) or np.shape(rstd) != (n,):
        raise ValueError(
            f"layer_norm_backward: dy {dy.shape}, mean {np.shape(mean)} and rstd "
            f"{np.shape(rstd)} do not match x {x.shape}"
        )
    w = _affine(weight, d, x.dtype, 1, "weight")
    n_chunks = row_parts(n)
    dx = np.empty_like(x)
    dweight_parts = np.zeros((n_chunks, d), x.dtype)
    dbias_parts = np.zeros((n_chunks, d), x.dtype)
    _layer_norm_backward_rows(
        dy,
        x,
        np.ascontiguousarray(mean, dtype=x.dtype),
        np.ascontiguousarray(rstd, dtype=x.dtype),
        w,
        n_chunks,
        np.empty((n_chunks, d), x.dtype),
        dx,
        dweight_parts,
        dbias_parts,
    )
    dweight = dweight_parts.sum(axis=0) if weight is not None else None
    return dx, dweight, dbias_parts.sum(axis=0)
