"""The functions of ``torch.nn.functional`` that `minitensor.functional` lacks, with torch's
signatures and meanings, each a composition of existing ops (so each gradient is already right).

    pad, one_hot, kl_div, nll_loss, cross_entropy (classes on axis 1, as torch),
    mse_loss (torch's argument order), scaled_dot_product_attention (bool True = MAY attend)

Layout: torch puts the classes of a loss on axis 1 — logits (N, C) or (N, C, d1, …) with
targets (N,) or (N, d1, …) — while `minitensor.functional.cross_entropy` takes classes on the
last axis, (…, C). For 2-D logits both agree; from 3-D on, these functions move axis 1 last.

Masks: `scaled_dot_product_attention` keeps torch's meaning, **bool True = this query may
attend to this key**, the opposite of `nn.MultiheadAttention`, `nn.Transformer` and the rest
of minitensor (True = blocked). The two conventions side by side are in docs/pytorch.md.
"""
import builtins
import math
import warnings

import numpy as np

from .. import functional as F
from ..function import op_error
from ..tensor import Tensor

__all__ = ["pad", "one_hot", "kl_div", "nll_loss", "cross_entropy", "mse_loss",
           "scaled_dot_product_attention"]


def _array(x):
    """A numpy view of a Tensor, array or number (targets, masks and weights carry no grad)."""
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _reduction(size_average, reduce, reduction, op):
    """torch's legacy size_average/reduce flags turned into a reduction string (as torch)."""
    if size_average is None and reduce is None:
        if reduction not in ("mean", "sum", "none") and not (op == "kl_div"
                                                              and reduction == "batchmean"):
            raise op_error(op, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}",
                           ValueError)
        return reduction
    warnings.warn(f"{op}: size_average and reduce are deprecated (as in torch); use "
                  f"reduction=", DeprecationWarning, stacklevel=3)
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _classes_last(x):
    """(N, C, d1, …) → (N, d1, …, C); (C,) and (N, C) are returned as they are."""
    if x.ndim <= 2:
        return x
    return F.permute(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _reduce(losses, reduction):
    if reduction == "sum":
        return F.sum(losses)
    if reduction == "mean":
        return F.mean(losses)
    return losses


# ----------------------------------------------------------------------------- losses
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """−input[n, target[n]] (input holds log-probabilities), weighted by weight[target[n]].

    input (C,), (N, C) or (N, C, d1, …); target (), (N,) or (N, d1, …) of class ids.
    'mean' divides by the sum of the weights of the targets that are not ignore_index (torch's
    weighted mean); when every target is ignored it gives 0, as `F.cross_entropy` does
    (torch gives NaN there).
    """
    reduction = _reduction(size_average, reduce, reduction, "nll_loss")
    return _nll(_classes_last(input), _array(target), weight, ignore_index, reduction,
                input.shape)


def _nll(x, t, weight, ignore_index, reduction, shape):
    """nll_loss on log-probabilities x with the classes last, (…, C), and targets t (…)."""
    c = x.shape[-1]
    if t.dtype.kind not in "iu":
        raise op_error("nll_loss", f"target must hold integer class ids, got {t.dtype} "
                                   f"(input {shape}, target {t.shape})", TypeError)
    if x.shape[:-1] != t.shape:
        raise op_error("nll_loss", f"input {shape} and target {t.shape} do not match: "
                                   f"expected target of shape {x.shape[:-1]} (classes on axis "
                                   f"{0 if len(shape) == 1 else 1} of input)")
    valid = t != ignore_index
    if valid.any() and (t[valid].min() < 0 or t[valid].max() >= c):
        bad = t[valid].max() if t[valid].max() >= c else t[valid].min()
        raise op_error("nll_loss", f"target {bad} is out of range for {c} classes "
                                   f"(target shape {t.shape})", IndexError)
    safe = np.where(valid, t, 0).reshape(-1)
    w = np.ones(c, x.dtype) if weight is None else _array(weight).astype(x.dtype)
    w_rows = np.where(valid.reshape(-1), w[safe], 0).astype(x.dtype)
    picked = F.getitem(F.reshape(x, (-1, c)), (np.arange(safe.size), safe))    # (M,)
    losses = -(picked * w_rows)
    if reduction == "none":
        return F.reshape(losses, t.shape)
    total = F.sum(losses)
    if reduction == "sum":
        return total
    return total / _nonzero(float(w_rows.sum()))


def _nonzero(denominator):
    """The divisor of a 'mean' loss: 1 when nothing counts, so the loss is 0, not NaN."""
    return denominator if denominator != 0 else 1.0


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


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise KL divergence target·(log target − input); input holds log-probabilities.

    A target of 0 contributes 0 (0·log 0 = 0). log_target=True: target holds log-probabilities
    too, and the term is exp(target)·(target − input). reduction: 'mean' (over every element,
    torch's default, which torch warns is not the KL divergence), 'batchmean' (sum / N, the
    real KL per example), 'sum' or 'none'.
    """
    reduction = _reduction(size_average, reduce, reduction, "kl_div")
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides by the number of elements, not the "
                      "batch size; 'batchmean' gives the KL divergence (as torch warns)",
                      UserWarning, stacklevel=2)
    tgt = target if isinstance(target, Tensor) else Tensor(_array(target),
                                                           dtype=input.dtype)
    if log_target:
        terms = F.exp(tgt) * (tgt - input)
    else:
        positive = _array(tgt) > 0
        safe = F.where(positive, tgt, 1.0)            # log(1) = 0 where the target is 0
        terms = tgt * (F.log(safe) - input)
    if reduction == "batchmean":
        n = input.shape[0] if input.ndim else 1
        return F.sum(terms) / n
    return _reduce(terms, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """(input − target)², reduced; torch's argument order (reduction is a keyword)."""
    reduction = _reduction(size_average, reduce, reduction, "mse_loss")
    if weight is not None:
        raise op_error("mse_loss", "weight= is not supported (torch added it in 2.6)",
                       NotImplementedError)
    return F.mse_loss(input, target, reduction=reduction)


# ----------------------------------------------------------------------------- tensors
def one_hot(tensor, num_classes=-1):
    """Class ids (any shape, int) → (*shape, num_classes) int64 of 0/1 (no gradient).
    num_classes=-1 takes the largest id + 1."""
    ids = _array(tensor)
    if ids.dtype.kind not in "iu":
        raise op_error("one_hot", f"expects integer class ids, got {ids.dtype} of shape "
                                  f"{ids.shape}", TypeError)
    if num_classes == -1:
        num_classes = int(ids.max()) + 1 if ids.size else 0
    if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
        raise op_error("one_hot", f"class ids must be in [0, {num_classes}), got ids in "
                                  f"[{ids.min()}, {ids.max()}] (shape {ids.shape})",
                       IndexError)
    out = (ids[..., None] == np.arange(num_classes)).astype(np.int64)
    return Tensor._make(out)


def pad(input, pad, mode="constant", value=None):
    """Pad (or, with negative sizes, crop) the last len(pad)/2 axes.

    pad = (left_last, right_last, left_second_last, right_second_last, …): the pairs run from
    the last axis backwards, as torch. Only mode='constant' (value, default 0) is supported.
    """
    if mode != "constant":
        raise op_error("pad", f"mode {mode!r} is not supported (only 'constant'); input "
                              f"{input.shape}", NotImplementedError)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise op_error("pad", f"pad {tuple(pad)} must hold pairs for at most {input.ndim} axes "
                              f"(input {input.shape})")
    x = input
    for i in range(len(pad) // 2):
        axis = input.ndim - 1 - i
        x = _pad_axis(x, axis, int(pad[2 * i]), int(pad[2 * i + 1]), 0 if value is None
                      else value)
    return x


def _pad_axis(x, axis, before, after, value):
    """x with `before`/`after` entries of `value` added (or removed, when negative) on axis."""
    n = x.shape[axis]
    start, stop = builtins.max(0, -before), n - builtins.max(0, -after)
    if stop < start:
        raise op_error("pad", f"cropping {-before} and {-after} leaves no room on axis {axis} "
                              f"of size {n} (input {x.shape})")
    if start or stop != n:
        x = F.getitem(x, (slice(None),) * axis + (slice(start, stop),))
    parts = []
    for size in (builtins.max(0, before), builtins.max(0, after)):
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
        parts.append(Tensor._make(np.full(shape, value, dtype=x.dtype)) if size else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return pieces[0] if len(pieces) == 1 else F.concat(pieces, axis=axis)


# ----------------------------------------------------------------------------- attention
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(query·keyᵀ·scale + mask) · value, torch's function (output only, no weights).

    query (…, L, E), key (…, S, E), value (…, S, Ev) → (…, L, Ev). scale defaults to 1/√E.
    attn_mask, broadcastable to (…, L, S): **bool True = may attend** (torch's meaning here,
    the opposite of nn.MultiheadAttention's), or a float mask added to the scores.
    is_causal: query i attends to keys 0..i (top-left aligned, as torch); not with attn_mask.
    A query row with no key allowed gives zeros (as torch 2.x does here).
    dropout_p: dropout on the weights, always applied when > 0 (torch has no training flag
    here: pass dropout_p=0.0 in evaluation).
    """
    if enable_gqa:
        raise op_error("scaled_dot_product_attention", "enable_gqa is not supported",
                       NotImplementedError)
    if is_causal and attn_mask is not None:
        raise op_error("scaled_dot_product_attention", "give attn_mask or is_causal=True, "
                                                       "not both (as torch)", ValueError)
    l_q, l_k = query.shape[-2], key.shape[-2]
    if is_causal:
        blocked = np.triu(np.ones((l_q, l_k), dtype=bool), k=1)       # j > i is the future
    elif attn_mask is None:
        blocked = None
    else:
        m = _array(attn_mask)
        blocked = ~m if m.dtype == np.bool_ else m.astype(query.dtype)   # ours: True = blocked
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = F.matmul(query, F.swapaxes(key, -1, -2))                 # (…, L, S)
    weights = F.softmax(scores, axis=-1, scale=scale, mask=blocked)
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p, True)
    return F.matmul(weights, value)
