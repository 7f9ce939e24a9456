"""Cross-entropy over classes on the last axis, fused with its log-softmax: numba kernels and
numpy twins. One pass computes each row's log-sum-exp and loss; backward rebuilds the softmax
from the saved log-sum-exp instead of keeping an (N, C) probability matrix alive.

Everything is computed in the max-subtracted frame z = x − max x: the log-sum-exp kept for
backward is log_total = log Σ_c exp(z_c) (the usual lse is max x + log_total), and the loss is
log_total − z_t. At full magnitude, lse − x_t would round both terms to the logits' scale first
(|x| = 1e6 in float32: steps of 0.06) and lose the digits the loss is made of.
"""

import numpy as np

from . import jit
from .jit import kernel, prange, threads


def check_targets(targets, n_classes, ignore_index, op):
    """Refuse a target outside [0, C) (other than ignore_index): the kernels would read past
    the row, numpy's indexing would wrap a negative one around."""
    bad = (targets != ignore_index) & ((targets < 0) | (targets >= n_classes))
    if bad.any():
        raise IndexError(
            f"{op}: target {targets[bad][0]} is out of range for {n_classes} "
            f"classes (targets shape {targets.shape})"
        )


# ---- numpy twins -----------------------------------------------------------------------------


def cross_entropy_forward_numpy(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """Per-row loss of logits (N, C) against integer targets (N,).

    z = x − max_c x;  log_total_i = log Σ_c exp(z_ic);
    loss_i = (1 − ε)·(log_total_i − z_i[t_i]) + ε·(log_total_i − mean_c z_ic), the ε term only
    when ε > 0 (so a −inf logit off the target gives a finite loss, as in torch).
    Rows whose target is ignore_index give 0. Returns (loss (N,), log_total (N,)), both in the
    logits' dtype; log_total is what backward needs."""
    check_targets(targets, logits.shape[1], ignore_index, "cross_entropy_forward")
    f = logits.dtype.type
    z = logits - logits.max(axis=-1, keepdims=True, initial=-np.inf)
    log_total = np.log(np.exp(z).sum(axis=-1))
    valid = targets != ignore_index
    picked = z[np.arange(z.shape[0]), np.where(valid, targets, 0)]
    loss = log_total - picked
    if label_smoothing:
        eps = f(label_smoothing)
        loss = (f(1) - eps) * loss + eps * (log_total - z.mean(axis=-1))
    return np.where(valid, loss, f(0)), log_total


def cross_entropy_backward_numpy(
    logits, targets, log_total, grad_rows, ignore_index=-100, label_smoothing=0.0
):
    """dL/dx_ic = g_i · (softmax(x_i)_c − (1 − ε)·[c = t_i] − ε/C), with softmax(x_i) =
    exp(z_i − log_total_i); rows whose target is ignore_index get 0. Returns (N, C)."""
    check_targets(targets, logits.shape[1], ignore_index, "cross_entropy_backward")
    n, c = logits.shape
    f = logits.dtype.type
    eps = f(label_smoothing)
    log_total, grad_rows = log_total.astype(f, copy=False), grad_rows.astype(f, copy=False)
    p = np.exp((logits - logits.max(axis=-1, keepdims=True, initial=-np.inf)) - log_total[:, None])
    valid = targets != ignore_index
    at_target = np.arange(n), np.where(valid, targets, 0)
    # the target's weight (1 − ε) + ε/C comes off in one step: exactly p − 1 = 0 for C = 1
    p_target = p[at_target] - ((f(1) - eps) + eps / f(c))
    if label_smoothing:
        p -= eps / f(c)
    p[at_target] = p_target
    p *= grad_rows[:, None]
    return np.where(valid[:, None], p, f(0)).astype(logits.dtype, copy=False)


# ---- numba kernels ---------------------------------------------------------------------------


@kernel(parallel=True)
def _cross_entropy_rows(x, targets, ignore_index, smoothing, n_chunks, scratch, loss, log_total):
    """For each row i of x (N, C): log_total[i] and loss[i] as in the twin. The rows are split
    into n_chunks runs, one per parallel task, each with its own scratch row (C,) to hold
    exp(z) (or z) while jit.row_sum adds it up."""
    N, C = x.shape
    f = x.dtype.type
    for chunk in prange(n_chunks):
        e = scratch[chunk]
        for i in range(chunk * N // n_chunks, (chunk + 1) * N // n_chunks):
            x_max = jit.row_max(x[i])
            for c in range(C):
                e[c] = jit.exp(x[i, c] - x_max)
            log_total[i] = np.log(jit.row_sum(e))
            t = targets[i]
            if t == ignore_index:
                loss[i] = 0
                continue
            nll = log_total[i] - (x[i, t] - x_max)
            if smoothing == 0:
                loss[i] = nll
                continue
            for c in range(C):
                e[c] = x[i, c] - x_max
            loss[i] = (f(1) - smoothing) * nll + smoothing * (log_total[i] - jit.row_sum(e) / f(C))


@kernel(parallel=True)
def _cross_entropy_backward_rows(x, targets, log_total, grad_rows, ignore_index, smoothing, dx):
    """dx[i, c] = (exp(z_ic − log_total_i) − (1 − ε)·[c = t_i] − ε/C)·g_i; 0 for ignored rows."""
    N, C = x.shape
    f = x.dtype.type
    uniform = smoothing / f(C)
    for i in prange(N):
        t = targets[i]
        if t == ignore_index:
            for c in range(C):
                dx[i, c] = 0
            continue
        x_max = jit.row_max(x[i])
        for c in range(C):
            dx[i, c] = jit.exp((x[i, c] - x_max) - log_total[i])
        p_target = dx[i, t] - ((f(1) - smoothing) + uniform)  # in one step, as the twin
        g = grad_rows[i]
        for c in range(C):
            dx[i, c] = (dx[i, c] - uniform) * g
        dx[i, t] = p_target * g


def cross_entropy_forward_numba(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """Numba twin of cross_entropy_forward_numpy."""
    x = np.ascontiguousarray(logits)
    targets = np.ascontiguousarray(targets, dtype=np.int64)
    check_targets(targets, x.shape[1], ignore_index, "cross_entropy_forward")
    n_chunks = max(1, min(threads(), x.shape[0]))
    loss = np.empty(x.shape[0], dtype=x.dtype)
    log_total = np.empty(x.shape[0], dtype=x.dtype)
    _cross_entropy_rows(
        x,
        targets,
        ignore_index,
        x.dtype.type(label_smoothing),
        n_chunks,
        np.empty((n_chunks, x.shape[1]), x.dtype),
        loss,
        log_total,
    )
    return loss, log_total


def cross_entropy_backward_numba(
    logits, targets, log_total, grad_rows, ignore_index=-100, label_smoothing=0.0
):
    """Numba twin of cross_entropy_backward_numpy."""
    x = np.ascontiguousarray(logits)
    targets = np.ascontiguousarray(targets, dtype=np.int64)
    check_targets(targets, x.shape[1], ignore_index, "cross_entropy_backward")
    dx = np.empty_like(x)
    _cross_entropy_backward_rows(
        x,
        targets,
        np.ascontiguousarray(log_total, dtype=x.dtype),
        np.ascontiguousarray(grad_rows, dtype=x.dtype),
        ignore_index,
        x.dtype.type(label_smoothing),
        dx,
    )
    return dx
