"""Cross-entropy over classes on the last axis, fused with its log-softmax: numba kernels and
numpy twins. One pass computes each row's log-sum-exp and loss; backward rebuilds the softmax
from the saved log-sum-exp instead of keeping an (N, C) probability matrix alive."""
import numpy as np
from numba import prange

from .jit import exp, kernel, row_max


# ---- numpy twins -----------------------------------------------------------------------------

def cross_entropy_forward_numpy(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """Per-row loss of logits (N, C) against integer targets (N,).

    lse_i = log Σ_c exp(x_ic);  loss_i = (1 − ε)·(lse_i − x_i[t_i]) + ε·(lse_i − mean_c x_ic).
    Rows whose target is ignore_index give 0. Returns (loss (N,), lse (N,)), both in the
    logits' dtype; lse is what backward needs."""
    x_max = logits.max(axis=-1, keepdims=True)
    lse = (np.log(np.exp(logits - x_max).sum(axis=-1, keepdims=True)) + x_max)[:, 0]
    valid = targets != ignore_index
    safe_t = np.where(valid, targets, 0)
    picked = logits[np.arange(logits.shape[0]), safe_t]
    loss = (1.0 - label_smoothing) * (lse - picked)
    if label_smoothing:
        loss = loss + label_smoothing * (lse - logits.mean(axis=-1))
    return np.where(valid, loss, 0.0).astype(logits.dtype), lse.astype(logits.dtype)


def cross_entropy_backward_numpy(logits, targets, lse, grad_rows, ignore_index=-100,
                                 label_smoothing=0.0):
    """dL/dx_ic = g_i · (softmax(x_i)_c − (1 − ε)·[c = t_i] − ε/C), with softmax(x_i) =
    exp(x_i − lse_i); rows whose target is ignore_index get 0. Returns (N, C)."""
    n, c = logits.shape
    p = np.exp(logits - lse[:, None])
    valid = targets != ignore_index
    safe_t = np.where(valid, targets, 0)
    p[np.arange(n), safe_t] -= (1.0 - label_smoothing)
    if label_smoothing:
        p -= label_smoothing / c
    p *= np.where(valid, grad_rows, 0.0)[:, None]
    return p.astype(logits.dtype, copy=False)


# ---- numba kernels ---------------------------------------------------------------------------

@kernel(parallel=True)
def _cross_entropy_rows(x, targets, ignore_index, smoothing, loss, lse):
    """For each row i of x (N, C): lse[i] = log Σ exp(x_i) and loss[i] as in the twin."""
    N, C = x.shape
    f = x.dtype.type
    for i in prange(N):
        x_max = row_max(x[i])
        x_sum = f(0)
        for c in range(C):
            x_sum += x[i, c]
        total = f(0)
        for c in range(C):
            total += exp(x[i, c] - x_max)
        lse[i] = np.log(total) + x_max
        t = targets[i]
        if t == ignore_index:
            loss[i] = 0
        else:
            loss[i] = ((f(1) - smoothing) * (lse[i] - x[i, t])
                       + smoothing * (lse[i] - x_sum / f(C)))


@kernel(parallel=True)
def _cross_entropy_backward_rows(x, targets, lse, grad_rows, ignore_index, smoothing, dx):
    """dx[i, c] = g_i·(exp(x_ic − lse_i) − (1 − ε)·[c = t_i] − ε/C); 0 for ignored rows."""
    N, C = x.shape
    f = x.dtype.type
    for i in prange(N):
        t = targets[i]
        if t == ignore_index:
            for c in range(C):
                dx[i, c] = 0
            continue
        g = grad_rows[i]
        uniform = smoothing / f(C)
        for c in range(C):
            dx[i, c] = g * (exp(x[i, c] - lse[i]) - uniform)
        dx[i, t] -= g * (f(1) - smoothing)


def cross_entropy_forward_numba(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """Numba twin of cross_entropy_forward_numpy."""
    x = np.ascontiguousarray(logits)
    f = x.dtype.type
    loss = np.empty(x.shape[0], dtype=x.dtype)
    lse = np.empty(x.shape[0], dtype=x.dtype)
    _cross_entropy_rows(x, np.ascontiguousarray(targets, dtype=np.int64), ignore_index,
                        f(label_smoothing), loss, lse)
    return loss, lse


def cross_entropy_backward_numba(logits, targets, lse, grad_rows, ignore_index=-100,
                                 label_smoothing=0.0):
    """Numba twin of cross_entropy_backward_numpy."""
    x = np.ascontiguousarray(logits)
    f = x.dtype.type
    dx = np.empty_like(x)
    _cross_entropy_backward_rows(x, np.ascontiguousarray(targets, dtype=np.int64),
                                 np.ascontiguousarray(lse, dtype=x.dtype),
                                 np.ascontiguousarray(grad_rows, dtype=x.dtype), ignore_index,
                                 f(label_smoothing), dx)
    return dx
