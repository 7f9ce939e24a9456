"""torch.nn.functional's cross_entropy and mse_loss with torch's signatures, beside
`minitensor.functional`'s own (which keep minitensor's: classes on the last axis).

Layout: torch puts the classes of a loss on axis 1 — logits (N, C) or (N, C, d1, …) with
targets (N,) or (N, d1, …) — while `minitensor.functional.cross_entropy` takes classes on the
last axis, (…, C). For 2-D logits both agree; from 3-D on, cross_entropy here moves axis 1 last.
This is what `nn.CrossEntropyLoss` and `nn.MSELoss` call.

pad, one_hot, kl_div, nll_loss and scaled_dot_product_attention (bool True = MAY attend) live in
`minitensor.functional` (= `minitensor.nn.functional`) and are re-exported here.
"""
import numpy as np

from .. import functional as F
from ..function import op_error
from ..functional import (_classes_last, _nll, _nonzero, _reduce, _reduction,  # noqa: F401
                          kl_div, nll_loss, one_hot, pad, scaled_dot_product_attention)
from ..tensor import Tensor

__all__ = ["pad", "one_hot", "kl_div", "nll_loss", "cross_entropy", "mse_loss",
           "scaled_dot_product_attention"]


def _array(x):
    """A numpy view of a Tensor, array or number (targets, masks and weights carry no grad)."""
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy: log_softmax over axis 1 (the classes), then nll.

    input (C,), (N, C) or (N, C, d1, …) logits; target: class ids (), (N,) or (N, d1, …), or
    class probabilities of input's shape. weight (C,) rescales each class; label_smoothing ε
    mixes the target with the uniform distribution over the C classes.
    Without weight and with class ids this runs minitensor's fused op (one graph node).
    """
    reduction = _reduction(size_average, reduce, reduction, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise op_error("cross_entropy", f"label_smoothing must be in [0, 1], got "
                                        f"{label_smoothing} (input {input.shape})", ValueError)
    x = _classes_last(input)
    t = _array(target)
    if t.dtype.kind == "f":
        return _cross_entropy_probs(x, _classes_last(target) if isinstance(target, Tensor)
                                    else Tensor(t, dtype=t.dtype), weight, reduction,
                                    label_smoothing, input.shape)
    if weight is None and label_smoothing < 1.0:
        if x.ndim == 1:          # unbatched: one row of logits, one target
            out = F.cross_entropy(F.reshape(x, (1, -1)), t.reshape(1), ignore_index,
                                  label_smoothing, reduction)
            return F.reshape(out, ()) if reduction == "none" else out
        return F.cross_entropy(x, t, ignore_index, label_smoothing, reduction)
    return _cross_entropy_weighted(x, t, weight, ignore_index, reduction, label_smoothing)


def _cross_entropy_weighted(x, t, weight, ignore_index, reduction, eps):
    """(1 − ε)·nll + ε/C · smooth, torch's formula for class ids with a class weight."""
    logp = F.log_softmax(x, axis=-1)
    nll = _nll(logp, t, weight, ignore_index, reduction, x.shape)
    if eps == 0.0:
        return nll
    c = x.shape[-1]
    w = np.ones(c, x.dtype) if weight is None else _array(weight).astype(x.dtype)
    valid = t != ignore_index
    smooth = -F.sum(logp * w, axis=-1) * valid.astype(x.dtype)        # (…,)
    if reduction == "none":
        smooth_r = smooth
    elif reduction == "sum":
        smooth_r = F.sum(smooth)
    else:
        denom = float(w[np.where(valid, t, 0)][valid].sum()) if weight is not None \
            else float(valid.sum())
        smooth_r = F.sum(smooth) / _nonzero(denom)
    return nll * (1.0 - eps) + smooth_r * (eps / c)


def _cross_entropy_probs(x, p, weight, reduction, eps, shape):
    """−Σ_c w_c · p_c · log softmax(x)_c with probability targets p (classes last)."""
    if tuple(p.shape) != tuple(x.shape):
        raise op_error("cross_entropy", f"probability targets of shape {tuple(p.shape)} must "
                                        f"match input {shape}")
    c = x.shape[-1]
    if eps:
        p = p * (1.0 - eps) + eps / c
    logp = F.log_softmax(x, axis=-1)
    terms = logp * p
    if weight is not None:
        terms = terms * _array(weight).astype(x.dtype)
    losses = -F.sum(terms, axis=-1)
    return _reduce(losses, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """(input − target)², reduced; torch's argument order (reduction is a keyword)."""
    reduction = _reduction(size_average, reduce, reduction, "mse_loss")
    if weight is not None:
        raise op_error("mse_loss", "weight= is not supported (torch added it in 2.6)",
                       NotImplementedError)
    return F.mse_loss(input, target, reduction=reduction)
