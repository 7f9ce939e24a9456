"""Kernels: the hot loops of a Transformer step, behind one switch.

PLACEHOLDER written by the core: plain-numpy versions with the final signatures. The kernels
issue replaces this module with numba kernels and their numpy twins; ops only ever call the
names below, so callers never know which backend ran.
"""
import numpy as np


def matmul(a, b):
    """a @ b with numpy's batch broadcasting; a (..., n, k), b (..., k, m) -> (..., n, m)."""
    return np.matmul(a, b)


def matmul_grad_a(grad, b):
    """dL/da = grad @ bᵀ: grad (..., n, m), b (..., k, m) -> (..., n, k) (batch broadcast)."""
    return np.matmul(grad, np.swapaxes(b, -1, -2))


def matmul_grad_b(a, grad):
    """dL/db = aᵀ @ grad: a (..., n, k), grad (..., n, m) -> (..., k, m) (batch broadcast)."""
    return np.matmul(np.swapaxes(a, -1, -2), grad)


def softmax_forward(x, scale=1.0, mask=None):
    """softmax(scale·x + mask) over the last axis. mask: bool (True = blocked) or additive
    float, broadcastable to x. A fully blocked row gives all zeros, never NaN."""
    z = x * scale if scale != 1.0 else x
    if mask is not None:
        if mask.dtype == np.bool_:
            z = np.where(mask, -np.inf, z)
        else:
            z = z + mask
    m = np.max(z, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(z - m)
    s = e.sum(axis=-1, keepdims=True)
    y = np.divide(e, s, out=np.zeros_like(e), where=s > 0)
    return y.astype(x.dtype, copy=False)


def softmax_backward(y, dy, scale=1.0):
    """dx = scale · y ⊙ (dy − Σ dy ⊙ y); zero for fully masked rows (their y is zero)."""
    dx = y * (dy - (dy * y).sum(axis=-1, keepdims=True))
    return dx * scale if scale != 1.0 else dx


def log_softmax_forward(x):
    """log softmax over the last axis: x − logsumexp(x)."""
    m = np.max(x, axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def log_softmax_backward(y, dy):
    """dx = dy − softmax(x) · Σ dy, with softmax(x) = exp(y)."""
    return dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)


def cross_entropy_forward(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """Per-row loss for logits (N, C) and int targets (N,).

    loss_i = (1 − ε)·(lse_i − x_i[t_i]) + ε·(lse_i − mean_c x_ic); rows whose target is
    ignore_index give 0. Returns (loss (N,), lse (N,)) — lse is saved for backward.
    """
    m = logits.max(axis=-1, keepdims=True)
    lse = (np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)) + m)[:, 0]
    valid = targets != ignore_index
    safe_t = np.where(valid, targets, 0)
    picked = logits[np.arange(logits.shape[0]), safe_t]
    loss = (1.0 - label_smoothing) * (lse - picked)
    if label_smoothing:
        loss = loss + label_smoothing * (lse - logits.mean(axis=-1))
    return np.where(valid, loss, 0.0).astype(logits.dtype), lse


def cross_entropy_backward(logits, targets, lse, grad_rows, ignore_index=-100, label_smoothing=0.0):
    """dL/dlogits = grad_i · (softmax(x_i) − (1 − ε)·onehot(t_i) − ε/C); zero for ignored rows."""
    n, c = logits.shape
    p = np.exp(logits - lse[:, None])
    valid = targets != ignore_index
    safe_t = np.where(valid, targets, 0)
    p[np.arange(n), safe_t] -= (1.0 - label_smoothing)
    if label_smoothing:
        p -= label_smoothing / c
    p *= np.where(valid, grad_rows, 0.0)[:, None]
    return p.astype(logits.dtype, copy=False)


def layer_norm_forward(x, weight, bias, eps):
    """LayerNorm over the last axis of x (N, D): y = (x − μ)/√(σ² + ε) · weight + bias.

    weight and bias may be None. Returns (y, mean (N,), rstd (N,))."""
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


def layer_norm_backward(dy, x, mean, rstd, weight):
    """Gradients of layer_norm_forward: returns (dx (N, D), dweight (D,) | None, dbias (D,))."""
    xhat = (x - mean[:, None]) * rstd[:, None]
    dbias = dy.sum(axis=0)
    dweight = (dy * xhat).sum(axis=0) if weight is not None else None
    g = dy * weight if weight is not None else dy
    d = x.shape[-1]
    dx = rstd[:, None] / d * (d * g - g.sum(axis=-1, keepdims=True)
                              - xhat * (g * xhat).sum(axis=-1, keepdims=True))
    return dx.astype(x.dtype, copy=False), dweight, dbias


_backend = ["numpy"]


def set_backend(name):
    if name not in ("numpy", "numba"):
        raise ValueError(f"set_backend: unknown backend {name!r}; choose 'numba' or 'numpy'")
    _backend[0] = name


def get_backend():
    return _backend[0]
