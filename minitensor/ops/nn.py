"""Neural-net ops: softmax, log_softmax, layer_norm, dropout, embedding, cross_entropy, bias +
activation.

Each is one fused op (one node in the graph) whose loops run in `minitensor.kernels`.

After each class comes the public function that checks its arguments and applies it
(`minitensor.functional` re-exports it); functions with no class of their own close the file.
"""

from __future__ import annotations

import builtins  # in this module, sum is minitensor's op
import math
import warnings
from collections.abc import Sequence

import numpy as np

from .. import kernels as K
from .. import random as _random
from ..function import Function, ShapeError, op_error
from ..function import unbroadcast as _unbroadcast
from ..tensor import Tensor
from ..typing import ArrayLike, DType, Scalar
from ._args import _constant, _data
from ._axes import normalize_axis, torch_names
from .elementwise import (
    abs,
    cast,
    clamp_min,
    clone,
    exp,
    log,
    log1p,
    minimum,
    relu,
    sigmoid,
    sqrt,
    sub,
    tanh,
)
from .reduce import mean, norm, sum
from .shape import concat, getitem, index_select, permute, reshape, swapaxes, where


def as_attention_mask(mask: Tensor | ArrayLike | None, op: str = "softmax") -> np.ndarray | None:
    """A mask for attention scores as a numpy array (None stays None), with one rule for
    every consumer (softmax, attention, `transformer.masks`):

    - bool: **True = blocked** (the position gets weight 0);
    - floating: **added** to the scores (0 where allowed, −inf or a large negative number where
      blocked);
    - anything else (integers) is refused: 0/1 integers are ambiguous (added, they would shift
      the scores by 1 instead of blocking). Convert with ``mask != 0`` (1 = blocked) or
      ``mask == 0`` (1 = allowed).
    """
    if mask is None:
        return None
    arr = np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask)
    if arr.dtype != np.bool_ and arr.dtype.kind != "f":
        raise TypeError(
            f"{op}: a mask must be bool (True = blocked) or floating (added to the scores), got "
            f"{arr.dtype} of shape {arr.shape}; convert it with `mask != 0` (1 = blocked) or "
            f"`mask == 0` (1 = allowed)"
        )
    return arr


def _zero_where_blocked(dx, y, blocked):
    """dx with 0 where a bool mask blocks and in fully blocked rows (all-zero weights): those
    positions are selected out of the softmax (as torch's masked_fill selects), so a NaN or ±inf
    gradient elsewhere in their row must not reach them as 0·NaN = NaN."""
    zero = np.zeros((), dx.dtype)
    if blocked is not None:
        dx = np.where(blocked, zero, dx)
    return np.where(y.max(axis=-1, keepdims=True) == 0, zero, dx)


class Softmax(Function):
    """softmax(scale·x + mask) over the last axis.

    mask: optional, broadcastable to x; bool with True = blocked, or additive float (0 / −inf).
    A row whose every position is blocked gives all-zero weights (never NaN) and zero gradient.
    """

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, scale=1.0, mask=None):
        mask = as_attention_mask(mask)
        if mask is not None:
            try:
                shape = np.broadcast_shapes(mask.shape, x.shape)
            except ValueError:
                shape = None
            if shape != x.shape:
                raise ShapeError(
                    f"mask of shape {mask.shape} does not broadcast to the scores' shape {x.shape}"
                )
        y = K.softmax_forward(x, scale, mask)
        ctx.save_for_backward(y)
        ctx.scale = scale
        # a copy: the caller may edit its mask in place before backward
        ctx.blocked = mask.copy() if mask is not None and mask.dtype == np.bool_ else None
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        dx = K.softmax_backward(y, grad, ctx.scale)
        if np.isnan(dx).any():
            dx = _zero_where_blocked(dx, y, ctx.blocked)
        return dx

    @staticmethod
    def anomaly_check(y):
        """Under mt.autograd.detect_anomaly(): report fully masked rows (all-zero weights, which
        a softmax row that saw any allowed key never has)."""
        if y.size == 0:
            return None
        empty = int(np.count_nonzero(y.max(axis=-1) == 0))
        if empty:
            rows = y.size // y.shape[-1]
            return (
                f"{empty} of {rows} rows of shape {y.shape} are fully masked: their "
                f"weights and output are zero (no key to attend to)"
            )
        return None


@torch_names
def softmax(
    x: Tensor,
    axis: int = -1,
    scale: float = 1.0,
    mask: Tensor | ArrayLike | None = None,
    *,
    dtype: DType | None = None,
) -> Tensor:
    """softmax(scale·x + mask) along `axis`; dtype= casts x first (torch's).

    mask (optional, broadcastable to x): bool with **True = blocked**, or an additive float
    mask (0 where allowed, −inf where blocked); integer masks are refused (see
    `as_attention_mask`). Fully blocked rows give zeros, not NaN.
    """
    m = as_attention_mask(mask)
    x = x if dtype is None else cast(x, dtype)
    if x.ndim == 0:  # torch reads a 0-d tensor as one entry along axis 0 (or -1): softmax 1
        normalize_axis(axis, 0, "softmax", x.shape)
        return reshape(softmax(reshape(x, (1,)), -1, scale, m), ())
    axis = normalize_axis(axis, x.ndim, "softmax", x.shape)
    if axis == x.ndim - 1:
        return Softmax.apply(x, scale=scale, mask=m)
    moved = swapaxes(x, axis, -1)
    if m is not None:
        try:
            m = np.swapaxes(np.broadcast_to(m, x.shape), axis, -1)
        except ValueError:
            raise op_error(
                "softmax",
                f"mask of shape {m.shape} does not broadcast to the scores' shape {x.shape}",
            ) from None
    return swapaxes(Softmax.apply(moved, scale=scale, mask=m), axis, -1)


class LogSoftmax(Function):
    name = "log_softmax"
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x):
        y = K.log_softmax_forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return K.log_softmax_backward(y, grad)


@torch_names
def log_softmax(x: Tensor, axis: int = -1, *, dtype: DType | None = None) -> Tensor:
    """log(softmax(x)) along `axis`, computed stably (x − logsumexp(x)); dtype= casts x
    first (torch's)."""
    x = x if dtype is None else cast(x, dtype)
    if x.ndim == 0:  # as softmax: one entry along axis 0 (or -1), log_softmax 0
        normalize_axis(axis, 0, "log_softmax", x.shape)
        return reshape(log_softmax(reshape(x, (1,)), -1), ())
    axis = normalize_axis(axis, x.ndim, "log_softmax", x.shape)
    if axis == x.ndim - 1:
        return LogSoftmax.apply(x)
    return swapaxes(LogSoftmax.apply(swapaxes(x, axis, -1)), axis, -1)


class LayerNorm(Function):
    """LayerNorm over the last `n_axes` axes: (x − μ)/√(σ² + eps)·weight + bias.

    weight and bias (shape = x.shape[-n_axes:]) may be None.
    """

    name = "layer_norm"
    float_inputs = (0, 1, 2)
    plain_params = True  # n_axes and eps, never Tensors

    @staticmethod
    def forward(ctx, x, weight, bias, n_axes=1, eps=1e-5):
        norm_shape = x.shape[x.ndim - n_axes :]
        for label, p in (("weight", weight), ("bias", bias)):
            if p is not None and p.shape != norm_shape:
                raise ShapeError(
                    f"{label} has shape {p.shape} but x of shape {x.shape} is "
                    f"normalised over its last {n_axes} axes {norm_shape}"
                )
        ctx.shapes = (x.shape, norm_shape)
        if x.size == 0:  # an empty batch or normalized shape: nothing to normalise, and the
            return x.copy()  # kernels' 1/d is not defined for d = 0
        d = math.prod(norm_shape)
        x2 = x.reshape(math.prod(x.shape[: x.ndim - n_axes]), d)  # sizes, not -1: axes may be 0
        w = weight.reshape(d) if weight is not None else None
        b = bias.reshape(d) if bias is not None else None
        y, mean, rstd = K.layer_norm_forward(x2, w, b, eps)
        ctx.save_for_backward(x2, mean, rstd, w)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        x_shape, norm_shape = ctx.shapes
        if grad.size == 0:
            zeros = np.zeros(norm_shape, grad.dtype)
            return np.zeros(x_shape, grad.dtype), zeros, zeros
        x2, mean, rstd, w = ctx.saved_tensors
        dx, dw, db = K.layer_norm_backward(grad.reshape(x2.shape), x2, mean, rstd, w)
        dw = dw.reshape(norm_shape) if dw is not None and ctx.needs_input_grad[1] else None
        db = db.reshape(norm_shape) if ctx.needs_input_grad[2] else None
        return dx.reshape(x_shape), dw, db


def layer_norm(
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """LayerNorm over the last len(normalized_shape) axes (the feature axes of each token)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if x.shape[x.ndim - k :] != normalized_shape:
        raise op_error(
            "layer_norm",
            f"input of shape {x.shape} does not end in normalized_shape {normalized_shape}",
        )
    return LayerNorm.apply(x, weight, bias, n_axes=k, eps=eps)


class Dropout(Function):
    """Inverted dropout: x · keep / (1 − p), keep a 0/1 mask drawn from `seed` (expected values
    are unchanged, so evaluation needs no rescaling). The mask is not stored: backward draws
    it again from the seed (kernels/dropout.py) and passes the gradient where x was kept."""

    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, seed, p):
        ctx.seed, ctx.p = seed, p
        return K.dropout(x, seed, p)

    @staticmethod
    def backward(ctx, grad):
        return K.dropout(grad, ctx.seed, ctx.p)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1 − p) (inverted
    dropout). Identity when not training or p == 0. Seeded by mt.manual_seed."""
    if not 0.0 <= p <= 1.0:
        raise op_error(
            "dropout", f"p must be in [0, 1], got {p} (input shape {x.shape})", ValueError
        )
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    # one 64-bit seed from the shared generator; the mask itself is a hash of (seed, position)
    # (kernels/dropout.py), so manual_seed and checkpoints make it reproducible
    seed = _random.generator().integers(0, 2**64, dtype=np.uint64)
    return Dropout.apply(x, seed=seed, p=p)


class Embedding(Function):
    """weight[ids]: ids (any shape, integers) → (*ids.shape, d). Backward adds each row's
    gradient into the table with np.add.at, so a repeated id sums its gradients; the row of
    `padding_idx` (if given) gets none."""

    @staticmethod
    def forward(ctx, ids, weight, padding_idx=None):
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ids must be integers, got {ids.dtype} of shape {ids.shape}")
        if weight.ndim != 2:
            raise ShapeError(f"the table must be 2-D (num_embeddings, dim), got {weight.shape}")
        n = weight.shape[0]
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids.max() if ids.max() >= n else ids.min()
            raise IndexError(
                f"id {bad} is out of range for a table of {n} rows "
                f"(ids shape {ids.shape}, table shape {weight.shape})"
            )
        ctx.save_for_backward(ids)
        ctx.table_shape, ctx.padding_idx = weight.shape, padding_idx
        return weight[ids]

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        g = np.zeros(ctx.table_shape, dtype=grad.dtype)
        flat = ids.reshape(-1)
        if flat.size:
            # the rows of each id summed after one stable sort, by np.add.reduceat (in the
            # order np.add.at would add them): np.add.at runs a generic loop, row by row
            order = np.argsort(flat, kind="stable")
            ordered = flat[order]
            starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
            rows = grad.reshape(flat.size, ctx.table_shape[1])[order]
            g[ordered[starts]] = np.add.reduceat(rows, starts, axis=0)
        if ctx.padding_idx is not None:
            g[ctx.padding_idx] = 0
        return None, g


def embedding(ids: Tensor | ArrayLike, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` (num_embeddings, dim) picked by integer `ids` (any shape) →
    (*ids.shape, dim). The `padding_idx` row receives no gradient."""
    return Embedding.apply(_constant(ids), weight, padding_idx=padding_idx)


class CrossEntropy(Function):
    """Cross-entropy of logits against integer class ids, in torch's layout: logits (C,),
    (N, C) or (N, C, d1, …), the classes on axis 1 (axis 0 of one unbatched row), and targets
    (), (N,) or (N, d1, …). Targets equal to ignore_index contribute nothing; 'mean' averages
    over the others (0 when all are ignored, rather than NaN). label_smoothing ε mixes the
    one-hot target with the uniform distribution: (1 − ε)·onehot + ε/C.

    The kernels read one row of C logits at a time, so the classes are moved last: free for
    (N, C) and for a transposed (N, L, C) array, one copy of the logits for a (N, C, L) array."""

    name = "cross_entropy"
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, logits, targets, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
        if targets.dtype.kind not in "iu":
            raise TypeError(f"targets must be integer class ids, got {targets.dtype}")
        if logits.ndim == 0:
            raise ShapeError("input must hold logits (C,), (N, C) or (N, C, d1, …), got a scalar")
        axis = 1 if logits.ndim >= 2 else 0
        rows = np.moveaxis(logits, axis, -1)  # (N, d1, …, C), a view
        if rows.shape[:-1] != targets.shape:
            hint = (
                "; logits (N, L, C) with the classes last go in as logits.transpose(1, 2)"
                if logits.ndim >= 3 and logits.shape[:-1] == targets.shape
                else ""
            )
            raise ShapeError(
                f"input {logits.shape} and target {targets.shape} do not match: "
                f"expected target of shape {rows.shape[:-1]} (classes are axis "
                f"{axis} of input, as in torch){hint}"
            )
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        c = logits.shape[axis]
        x2, t = rows.reshape(targets.size, c), targets.reshape(-1)  # c may be 0
        valid = t != ignore_index
        if valid.any() and (t[valid].min() < 0 or t[valid].max() >= c):
            bad = t[valid].max() if t[valid].max() >= c else t[valid].min()
            raise IndexError(
                f"target {bad} is out of range for {c} classes (targets shape {targets.shape})"
            )
        # log_total = log Σ exp(x − max x) per row: the log-sum-exp in the max-subtracted
        # frame, where the kernels keep every digit the softmax needs
        loss_rows, log_total = K.cross_entropy_forward(x2, t, ignore_index, label_smoothing)
        ctx.save_for_backward(x2, t, log_total)
        ctx.params = (ignore_index, label_smoothing, reduction, axis, rows.shape)
        ctx.count = int(valid.sum())
        if reduction == "none":
            return loss_rows.reshape(targets.shape)
        total = loss_rows.sum(dtype=logits.dtype)
        if reduction == "sum":
            return total
        return total / max(ctx.count, 1)

    @staticmethod
    def backward(ctx, grad):
        x2, t, log_total = ctx.saved_tensors
        ignore_index, smoothing, reduction, axis, rows_shape = ctx.params
        if reduction == "none":
            g_rows = grad.reshape(-1)
        else:
            scale = grad if reduction == "sum" else grad / max(ctx.count, 1)
            g_rows = np.full(t.shape, scale, dtype=x2.dtype)
        g = K.cross_entropy_backward(x2, t, log_total, g_rows, ignore_index, smoothing)
        return np.moveaxis(g.reshape(rows_shape), -1, axis), None


def cross_entropy(
    input: Tensor,
    target: Tensor | ArrayLike,
    weight: Tensor | ArrayLike | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """torch.nn.functional.cross_entropy: log_softmax over the classes, then the negative
    log-likelihood of the target.

    input: logits (C,), (N, C) or (N, C, d1, …) — the classes on axis 1, as in torch, so a
    sequence model's (B, L, C) logits go in as ``logits.transpose(1, 2)`` (or flattened,
    ``logits.reshape(-1, C)`` with ``target.reshape(-1)``). target: class ids (), (N,) or
    (N, d1, …), or class probabilities of input's shape. weight (C,) rescales each class;
    ignore_index: ids (e.g. <pad>) that add nothing, and 'mean' averages over the rest (0 when
    every target is ignored; torch gives NaN); label_smoothing ε in [0, 1] mixes the target
    with the uniform distribution over the C classes. reduction: 'mean' | 'sum' | 'none'.
    Class ids without a weight run one fused op (one graph node, `ops.nn.CrossEntropy`).
    """
    reduction = legacy_reduction(size_average, reduce, reduction, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise op_error(
            "cross_entropy",
            f"label_smoothing must be in [0, 1], got {label_smoothing} (input shape {input.shape})",
            ValueError,
        )
    t = _data(target)
    if weight is not None and input.ndim:  # classes on axis 1 ((C,) logits: axis 0)
        _check_class_weight(
            "cross_entropy", weight, input.shape[min(input.ndim - 1, 1)], input.shape
        )
    if t.dtype.kind == "f":
        return _cross_entropy_probs(input, target, weight, reduction, label_smoothing)
    if weight is None:
        return CrossEntropy.apply(
            input,
            _constant(target),
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            reduction=reduction,
        )
    return _cross_entropy_weighted(
        _classes_last(input), t, weight, ignore_index, reduction, label_smoothing, input.shape
    )


def _check_class_weight(op, weight, c, shape):
    """A class weight has one entry per class, (C,), as torch requires (a longer one would be
    silently cut, a shorter one fail on a bare numpy IndexError)."""
    if weight is not None and np.shape(_data(weight)) != (c,):
        raise op_error(
            op,
            f"weight of shape {np.shape(_data(weight))} must have one entry per class, "
            f"shape ({c},) (input of shape {tuple(shape)}, classes on axis "
            f"{int(len(shape) >= 2)})",
        )


def _cross_entropy_weighted(x, t, weight, ignore_index, reduction, eps, shape):
    """(1 − ε)·nll + ε/C · smooth, torch's formula for class ids with a class weight; x holds
    the logits with the classes last."""
    logp = log_softmax(x, axis=-1)
    nll = _nll(logp, t, weight, ignore_index, reduction, shape, "cross_entropy")
    if eps == 0.0:
        return nll
    c = x.shape[-1]
    w = _data(weight).astype(x.dtype)
    valid = t != ignore_index
    smooth = where(valid, -sum(logp * w, axis=-1), 0.0)  # (…,); selected, as in _nll
    if reduction == "sum":
        smooth = sum(smooth)
    elif reduction == "mean":
        smooth = sum(smooth) / _nonzero(float(w[np.where(valid, t, 0)][valid].sum()))
    return nll * (1.0 - eps) + smooth * (eps / c)


def _cross_entropy_probs(input, target, weight, reduction, eps):
    """−Σ_c w_c · p_c · log softmax(x)_c with probability targets p of input's shape."""
    p = target if isinstance(target, Tensor) else Tensor(_data(target))
    if tuple(p.shape) != tuple(input.shape):
        ids_shape = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
        if tuple(p.shape) == ids_shape:
            raise op_error(
                "cross_entropy",
                f"target of shape {tuple(p.shape)} holds {p.dtype} "
                f"values: class ids must be integers (input "
                f"{input.shape}, classes on axis "
                f"{1 if input.ndim >= 2 else 0})",
                TypeError,
            )
        raise op_error(
            "cross_entropy",
            f"probability targets of shape {tuple(p.shape)} must match input {input.shape}",
        )
    x, p = _classes_last(input), _classes_last(p)
    if eps:
        p = p * (1.0 - eps) + eps / x.shape[-1]
    terms = log_softmax(x, axis=-1) * p
    if weight is not None:
        terms = terms * _data(weight).astype(x.dtype)
    return _reduce(-sum(terms, axis=-1), reduction)


def _classes_last(x):
    """(N, C, d1, …) → (N, d1, …, C); (C,) and (N, C) are returned as they are."""
    if x.ndim <= 2:
        return x
    return permute(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _reduce(losses, reduction):
    if reduction == "sum":
        return sum(losses)
    if reduction == "mean":
        return mean(losses)
    return losses


class BiasActivation(Function):
    """act(x + bias) over the last axis of x, with bias (x.shape[-1],) or None: a Linear's bias
    and the activation after it as one node (kernels/bias_activation.py). The subclasses
    below fix the activation, so that the graph names the node by what it computes."""

    activation = None
    float_inputs = (0, 1)

    @staticmethod
    def forward(ctx, x, bias):
        act = ctx.fn.activation
        if x.ndim == 0 or (bias is not None and bias.shape != x.shape[-1:]):
            raise ShapeError(
                f"bias of shape {None if bias is None else bias.shape} does not "
                f"match the last axis of x {x.shape}"
            )
        x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # sizes, not -1: axes may be 0
        y, saved = K.bias_activation_forward(x2, bias, act)
        ctx.save_for_backward(*saved)
        ctx.shapes = (x.shape, bias is not None)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        shape, has_bias = ctx.shapes
        saved = ctx.saved_tensors
        dx, db = K.bias_activation_backward(
            grad.reshape(saved[0].shape), saved, ctx.fn.activation, has_bias
        )
        return dx.reshape(shape), (db if ctx.needs_input_grad[1] else None)


class BiasRelu(BiasActivation):
    """relu(x + bias) in one node."""

    name = "bias + relu"
    activation = "relu"


class BiasGelu(BiasActivation):
    """gelu(x + bias) (exact, x·Φ(x)) in one node."""

    name = "bias + gelu"
    activation = "gelu"


_BIAS_ACTIVATIONS = {"relu": BiasRelu, "gelu": BiasGelu}


def bias_activation(x, bias, activation):
    """act(x + bias) as one op, for activation "relu" or "gelu" (exact): what a Linear followed
    by F.relu or F.gelu computes, with one pass over memory instead of two and one node."""
    if activation not in _BIAS_ACTIVATIONS:
        raise ValueError(
            f"bias_activation: activation must be one of "
            f"{', '.join(_BIAS_ACTIVATIONS)}, got {activation!r}"
        )
    return _BIAS_ACTIVATIONS[activation].apply(x, bias)


# --------------- no Function of their own: compositions of the ops above, or no gradient
def mse_loss(
    input: Tensor,
    target: Tensor | ArrayLike,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | ArrayLike | None = None,
) -> Tensor:
    """Mean squared error (torch's signature). input and target must have the same shape:
    broadcasting (N, 1) against (N,) would silently compare every prediction with every
    target."""
    reduction = legacy_reduction(size_average, reduce, reduction, "mse_loss")
    if weight is not None:
        raise op_error(
            "mse_loss", "weight= is not supported (torch added it in 2.6)", NotImplementedError
        )
    if tuple(input.shape) != tuple(np.shape(_data(target))):
        raise op_error(
            "mse_loss",
            f"input of shape {tuple(input.shape)} and target of shape "
            f"{tuple(np.shape(_data(target)))} differ",
        )
    diff = sub(input, target)
    sq = diff * diff
    if reduction == "mean":
        return mean(sq)
    if reduction == "sum":
        return sum(sq)
    return sq


def legacy_reduction(
    size_average: bool | None, reduce: bool | None, reduction: str, op: str
) -> str:
    """The reduction ('mean', 'sum' or 'none'; kl_div also 'batchmean') a loss named `op` runs
    with: from torch's deprecated size_average/reduce flags when either is given (with torch's
    warning), else `reduction` itself, checked. The loss modules of `minitensor.nn` use it."""
    if size_average is None and reduce is None:
        if reduction not in ("mean", "sum", "none") and not (
            op == "kl_div" and reduction == "batchmean"
        ):
            raise op_error(
                op, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}", ValueError
            )
        return reduction
    warnings.warn(
        f"{op}: size_average and reduce are deprecated (as in torch); use reduction=",
        DeprecationWarning,
        stacklevel=3,
    )
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def nll_loss(
    input: Tensor,
    target: Tensor | ArrayLike,
    weight: Tensor | ArrayLike | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """−input[n, target[n]] (input holds log-probabilities), weighted by weight[target[n]].

    input (C,), (N, C) or (N, C, d1, …); target (), (N,) or (N, d1, …) of class ids.
    'mean' divides by the sum of the weights of the targets that are not ignore_index (torch's
    weighted mean); when every target is ignored it gives 0, as `cross_entropy` does
    (torch gives NaN there).
    """
    reduction = legacy_reduction(size_average, reduce, reduction, "nll_loss")
    return _nll(
        _classes_last(input),
        _data(target),
        weight,
        ignore_index,
        reduction,
        input.shape,
        "nll_loss",
    )


def _nll(x, t, weight, ignore_index, reduction, shape, op):
    """nll_loss on log-probabilities x with the classes last, (…, C), and targets t (…);
    `op` names the caller in errors."""
    c = x.shape[-1]
    if t.dtype.kind not in "iu":
        raise op_error(
            op,
            f"target must hold integer class ids, got {t.dtype} (input {shape}, target {t.shape})",
            TypeError,
        )
    if x.shape[:-1] != t.shape:
        raise op_error(
            op,
            f"input {shape} and target {t.shape} do not match: expected target "
            f"of shape {x.shape[:-1]} (classes on axis "
            f"{0 if len(shape) == 1 else 1} of input)",
        )
    valid = t != ignore_index
    if valid.any() and (t[valid].min() < 0 or t[valid].max() >= c):
        bad = t[valid].max() if t[valid].max() >= c else t[valid].min()
        raise op_error(
            op, f"target {bad} is out of range for {c} classes (target shape {t.shape})", IndexError
        )
    _check_class_weight(op, weight, c, shape)
    safe = np.where(valid, t, 0).reshape(-1)
    w = np.ones(c, x.dtype) if weight is None else _data(weight).astype(x.dtype)
    w_rows = np.where(valid.reshape(-1), w[safe], 0).astype(x.dtype)
    picked = getitem(reshape(x, (-1, c)), (np.arange(safe.size), safe))  # (M,)
    # selected, not multiplied by a 0 weight: an ignored row's NaN logit stays out (as torch)
    losses = where(valid.reshape(-1), -(picked * w_rows), 0.0)
    if reduction == "none":
        return reshape(losses, t.shape)
    total = sum(losses)
    if reduction == "sum":
        return total
    return total / _nonzero(float(w_rows.sum()))


def _nonzero(denominator):
    """The divisor of a 'mean' loss: 1 when nothing counts, so the loss is 0, not NaN."""
    return denominator if denominator != 0 else 1.0


def kl_div(
    input: Tensor,
    target: Tensor | ArrayLike,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """Pointwise KL divergence target·(log target − input); input holds log-probabilities.

    A target of 0 contributes 0 (0·log 0 = 0). log_target=True: target holds log-probabilities
    too, and the term is exp(target)·(target − input). reduction: 'mean' (over every element,
    torch's default, which torch warns is not the KL divergence), 'batchmean' (sum / N, the
    real KL per example), 'sum' or 'none'.
    """
    reduction = legacy_reduction(size_average, reduce, reduction, "kl_div")
    if reduction == "mean":
        warnings.warn(
            "kl_div: reduction='mean' divides by the number of elements, not the "
            "batch size; 'batchmean' gives the KL divergence (as torch warns)",
            UserWarning,
            stacklevel=2,
        )
    tgt = target if isinstance(target, Tensor) else Tensor(_data(target), dtype=input.dtype)
    if log_target:
        terms = exp(tgt) * (tgt - input)
    else:
        positive = _data(tgt) > 0
        safe = where(positive, tgt, 1.0)  # log(1) = 0 where the target is 0
        terms = tgt * (log(safe) - input)
    if reduction == "batchmean":
        n = input.shape[0] if input.ndim else 1
        return sum(terms) / n
    return _reduce(terms, reduction)


def one_hot(tensor: Tensor | ArrayLike, num_classes: int = -1) -> Tensor:
    """Class ids (any shape, int) → (*shape, num_classes) int64 of 0/1 (no gradient).
    num_classes=-1 takes the largest id + 1."""
    ids = _data(tensor)
    if ids.dtype.kind not in "iu":
        raise op_error(
            "one_hot", f"expects integer class ids, got {ids.dtype} of shape {ids.shape}", TypeError
        )
    if num_classes == -1:
        num_classes = int(ids.max()) + 1 if ids.size else 0
    if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
        raise op_error(
            "one_hot",
            f"class ids must be in [0, {num_classes}), got ids in "
            f"[{ids.min()}, {ids.max()}] (shape {ids.shape})",
            IndexError,
        )
    out = (ids[..., None] == np.arange(num_classes)).astype(np.int64)
    return Tensor._make(out)


def pad(
    input: Tensor, pad: Sequence[int], mode: str = "constant", value: Scalar | None = None
) -> Tensor:
    """Pad (or, with negative sizes, crop) the last len(pad)/2 axes.

    pad = (left_last, right_last, left_second_last, right_second_last, …): the pairs run from
    the last axis backwards, as torch. mode='constant' fills with `value` (default 0);
    'reflect' mirrors the edge (without repeating it), 'replicate' repeats the edge element,
    'circular' wraps around (these three take input of 1–3 padded axes after a batch and
    optional channel axis, as torch).
    """
    if mode != "constant":
        return _pad_by_index(input, pad, mode)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise op_error(
            "pad",
            f"pad {tuple(pad)} must hold pairs for at most {input.ndim} axes (input {input.shape})",
        )
    x = input
    for i in range(len(pad) // 2):
        axis = input.ndim - 1 - i
        x = _pad_axis(x, axis, int(pad[2 * i]), int(pad[2 * i + 1]), 0 if value is None else value)
    # torch's pad always returns a new tensor: with nothing added (pad (0, 0), or a crop), x
    # is still input or a view of it, and editing the padded batch would edit the source
    return clone(x) if np.may_share_memory(x.numpy(), input.numpy()) else x


def _pad_by_index(x, pad, mode):
    """reflect / replicate / circular padding: each padded axis is read at the positions
    −before … n + after − 1 mapped back into 0 … n − 1, one index_select per axis, so the
    gradient of every read position adds up where it came from."""
    k = len(pad) // 2
    if mode not in ("reflect", "replicate", "circular"):
        raise op_error("pad", f"mode {mode!r} is not one of constant, reflect, replicate, circular")
    if len(pad) % 2 or not 1 <= k <= 3 or x.ndim not in (k + 1, k + 2):
        raise op_error(
            "pad",
            f"mode {mode!r} pads 1 to 3 axes of an input with one or two axes more; got pad "
            f"{tuple(pad)} for input {tuple(x.shape)}",
        )
    for i in range(k):
        axis = x.ndim - 1 - i
        before, after = int(pad[2 * i]), int(pad[2 * i + 1])
        low, n = 0, x.shape[axis]
        if mode == "circular":  # a negative size crops first, then the rest wraps (torch's)
            low, high = builtins.max(-before, 0), n - builtins.max(-after, 0)
            before, after, n = builtins.max(before, 0), builtins.max(after, 0), high - low
        too_far = builtins.max(before, after) >= n + (mode == "circular")
        if n <= 0 or n + before + after <= 0 or (mode != "replicate" and too_far):
            raise op_error(
                "pad",
                f"{mode} padding {tuple(pad[2 * i : 2 * i + 2])} does not fit axis {axis} of "
                f"size {x.shape[axis]} (input {tuple(x.shape)}): reflect needs each size below "
                f"the axis's, circular at most the axis's",
            )
        at = np.arange(-before, n + after)
        if mode == "replicate":
            at = np.clip(at, 0, n - 1)
        elif mode == "circular":
            at = np.mod(at, n)
        else:  # reflect: mirror at both edges, the edge itself once
            at = np.abs(at)
            at = np.where(at > n - 1, 2 * (n - 1) - at, at)
        x = index_select(x, axis, (at + low).astype(np.int64))
    return x


def _pad_axis(x, axis, before, after, value):
    """x with `before`/`after` entries of `value` added (or removed, when negative) on axis."""
    n = x.shape[axis]
    start, stop = builtins.max(0, -before), n - builtins.max(0, -after)
    if stop < start:
        raise op_error(
            "pad",
            f"cropping {-before} and {-after} leaves no room on axis {axis} "
            f"of size {n} (input {x.shape})",
        )
    if start or stop != n:
        x = getitem(x, (slice(None),) * axis + (slice(start, stop),))
    parts = []
    for size in (builtins.max(0, before), builtins.max(0, after)):
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1 :]
        parts.append(Tensor._make(np.full(shape, value, dtype=x.dtype)) if size else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return pieces[0] if len(pieces) == 1 else concat(pieces, axis=axis)


# --------------- more of torch.nn.functional's activations, normalize, binary cross-entropy
def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, negative_slope·x elsewhere (at 0 the gradient is the slope, as torch).
    inplace= is accepted for torch's signature; the result is a new tensor."""
    return where(x > 0, x, x * negative_slope)


def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, alpha·(eˣ − 1) elsewhere."""
    negative = where(x <= 0, x, 0.0)  # exp of the negative side only: no overflow where unused
    return where(x <= 0, (exp(negative) - 1) * alpha, x)  # NaN: x's branch, gradient 1 (torch)


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, alpha·(e^(x/alpha) − 1) elsewhere."""
    negative = where(x <= 0, x, 0.0)
    return where(x <= 0, (exp(negative / alpha) - 1) * alpha, x)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    """scale·elu(x, alpha) with the self-normalising constants of Klambauer et al. (2017)."""
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """ln(1 + e^(βx))/β, and x itself where βx > threshold (as torch: there the two agree to
    rounding and e^(βx) would overflow)."""
    bx = x * beta
    linear = bx > threshold
    return where(linear, x, log1p(exp(where(linear, 0.0, bx))) / beta)


def hardtanh(
    x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """x clamped to [min_val, max_val]; no gradient at or beyond the bounds, as torch."""
    if min_val > max_val:
        raise op_error("hardtanh", f"min_val {min_val} is above max_val {max_val}")
    if x.dtype.kind in "iu":  # integers stay integers (and have no gradient), as torch
        return Tensor._make(np.clip(x.numpy(), min_val, max_val).astype(x.dtype))
    return where(x <= min_val, min_val, where(x >= max_val, max_val, x))


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6): hardtanh(x, 0, 6)."""
    return hardtanh(x, 0.0, 6.0)


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3)/6: 0 below −3, 1 above 3, linear between (gradient 1/6 strictly inside)."""
    outside = where(x <= -3, 0.0, where(x >= 3, 1.0, x.detach()))  # NaN: NaN, no gradient
    return where((x > -3) & (x < 3), x / 6 + 0.5, outside)


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    """x·relu6(x + 3)/6. At ±3 the gradient is torch's: 0 at −3, 1 at 3 (the outer sides')."""
    return where(x <= -3, 0.0, where(x >= 3, x, x * (x + 3) / 6))


def logsigmoid(x: Tensor) -> Tensor:
    """ln σ(x) = −softplus(−x), computed without overflow."""
    return -softplus(-x)


def softsign(x: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    return x / (abs(x) + 1)


def tanhshrink(x: Tensor) -> Tensor:
    """x − tanh x."""
    return x - tanh(x)


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    """x·tanh(softplus(x)) (Misra, 2019)."""
    return x * tanh(softplus(x))


def hardshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """x where |x| > lambd, 0 elsewhere."""
    return where((x >= -lambd) & (x <= lambd), 0.0, x)  # NaN stays NaN, as torch


def softshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """x − lambd above lambd, x + lambd below −lambd, 0 between."""
    # a NaN stays NaN and passes its gradient on, as torch's
    middle = where(np.isnan(_data(x)), x, 0.0)
    return where(x > lambd, x - lambd, where(x < -lambd, x + lambd, middle))


def threshold(x: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, `value` elsewhere."""
    return where(x <= threshold, value, x)  # NaN is not ≤: it stays NaN, as torch


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """a·σ(b), where a and b are the two halves of x along `dim` (its size must be even)."""
    axis = normalize_axis(dim, x.ndim, "glu", x.shape)
    if x.shape[axis] % 2:
        raise op_error("glu", f"axis {axis} of shape {tuple(x.shape)} has an odd size")
    n = x.shape[axis] // 2
    a = getitem(x, (slice(None),) * axis + (slice(0, n),))
    b = getitem(x, (slice(None),) * axis + (slice(n, None),))
    return a * sigmoid(b)


def normalize(
    input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: None = None
) -> Tensor:
    """input / max(‖input‖_p, eps) along `dim`: unit vectors (torch's F.normalize)."""
    return input / clamp_min(norm(input, p, dim, keepdims=True), eps)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """x1·x2 / max(‖x1‖·‖x2‖, eps) along `dim` (x1 and x2 broadcast, first)."""
    from .shape import broadcast_tensors

    x1, x2 = broadcast_tensors(x1, x2)
    dot = sum(x1 * x2, dim)
    return dot / clamp_min(norm(x1, 2, dim) * norm(x2, 2, dim), eps)


class BinaryCrossEntropy(Function):
    """−(t·ln x + (1 − t)·ln(1 − x)) elementwise, each log clamped at −100 (as torch, so that
    x = 0 or 1 gives a large finite loss). d/dx = (x − t) / max(x(1 − x), 1e-12) (torch's);
    d/dt = ln(1 − x) − ln x."""

    float_inputs = (0, 1)

    @staticmethod
    def forward(ctx, x, t):
        if ((x < 0) | (x > 1)).any():
            raise op_error("binary_cross_entropy", "input values must be in [0, 1]")
        with np.errstate(divide="ignore"):
            log_x, log_1mx = np.maximum(np.log(x), -100), np.maximum(np.log1p(-x), -100)
        ctx.save_for_backward(x, t, log_x, log_1mx)
        return -(t * log_x + (1 - t) * log_1mx)

    @staticmethod
    def backward(ctx, grad):
        x, t, log_x, log_1mx = ctx.saved_tensors
        gx = grad * (x - t) / np.maximum(x * (1 - x), 1e-12)
        gt = grad * (log_1mx - log_x) if ctx.needs_input_grad[1] else None
        return gx, gt


def binary_cross_entropy(
    input: Tensor,
    target: Tensor | ArrayLike,
    weight: Tensor | ArrayLike | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Binary cross-entropy of probabilities `input` (in [0, 1]) against targets of the same
    shape; weight (broadcast) rescales each element."""
    reduction = legacy_reduction(size_average, reduce, reduction, "binary_cross_entropy")
    if tuple(input.shape) != tuple(np.shape(_data(target))):
        raise op_error(
            "binary_cross_entropy",
            f"input {tuple(input.shape)} and target {tuple(np.shape(_data(target)))} differ",
        )
    losses = BinaryCrossEntropy.apply(input, target)
    return _reduce(losses if weight is None else losses * weight, reduction)


class BCEWithLogits(Function):
    """(1 − t)·x + (1 + (w⁺ − 1)·t)·softplus(−x), elementwise with broadcasting (w⁺: the
    positive class's weight), computed without overflow. d/dx = (1 − t) − L·σ(−x) with
    L = 1 + (w⁺ − 1)·t (σ(x) − t for w⁺ = 1); d/dt = −x + (w⁺ − 1)·softplus(−x);
    d/dw⁺ = t·softplus(−x)."""

    float_inputs = (0, 1, 2)

    @staticmethod
    def forward(ctx, x, t, pos_weight):
        sp = np.logaddexp(0, -x)  # softplus(−x) = ln(1 + e^(−x))
        scale = 1 + (pos_weight - 1) * t
        ctx.save_for_backward(x, t, pos_weight, sp, scale)
        return (1 - t) * x + scale * sp

    @staticmethod
    def backward(ctx, grad):
        x, t, pw, sp, scale = ctx.saved_tensors
        gx = grad * ((1 - t) - scale * _sigmoid_of(-x))
        gt = grad * (-x + (pw - 1) * sp) if ctx.needs_input_grad[1] else None
        gw = grad * t * sp if ctx.needs_input_grad[2] else None
        return tuple(
            None if g is None else _unbroadcast(g, a.shape) for g, a in ((gx, x), (gt, t), (gw, pw))
        )


def _sigmoid_of(z):
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1 / (1 + e), e / (1 + e))


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor | ArrayLike,
    weight: Tensor | ArrayLike | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | ArrayLike | None = None,
) -> Tensor:
    """Binary cross-entropy of σ(input) against targets of input's shape, computed from the
    logits without overflow; weight rescales each element, pos_weight the positive term."""
    reduction = legacy_reduction(size_average, reduce, reduction, "binary_cross_entropy")
    if tuple(input.shape) != tuple(np.shape(_data(target))):
        raise op_error(
            "binary_cross_entropy_with_logits",
            f"input {tuple(input.shape)} and target {tuple(np.shape(_data(target)))} differ",
        )
    pw = np.ones((), input.dtype) if pos_weight is None else pos_weight
    losses = BCEWithLogits.apply(input, target, pw)
    return _reduce(losses if weight is None else losses * weight, reduction)


# --------------- more of torch.nn.functional's losses and layers (found missing by the OpInfo walk)
def _same_shape(op, input, target):
    if tuple(input.shape) != tuple(np.shape(_data(target))):
        raise op_error(
            op, f"input {tuple(input.shape)} and target {tuple(np.shape(_data(target)))} differ"
        )


def l1_loss(
    input: Tensor,
    target: Tensor | ArrayLike,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Mean (or sum) absolute error |input − target| (shapes must match)."""
    reduction = legacy_reduction(size_average, reduce, reduction, "l1_loss")
    _same_shape("l1_loss", input, target)
    return _reduce(abs(sub(input, target)), reduction)


def smooth_l1_loss(
    input: Tensor,
    target: Tensor | ArrayLike,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """|d| − beta/2 where |d| ≥ beta, d²/(2·beta) below (d = input − target); beta = 0: L1."""
    reduction = legacy_reduction(size_average, reduce, reduction, "smooth_l1_loss")
    _same_shape("smooth_l1_loss", input, target)
    d = sub(input, target)
    if beta == 0:
        return _reduce(abs(d), reduction)
    a = abs(d)
    return _reduce(where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta), reduction)


def huber_loss(
    input: Tensor,
    target: Tensor | ArrayLike,
    reduction: str = "mean",
    delta: float = 1.0,
    weight: Tensor | None = None,
) -> Tensor:
    """d²/2 where |d| ≤ delta, delta·(|d| − delta/2) beyond (d = input − target)."""
    _same_shape("huber_loss", input, target)
    d = sub(input, target)
    a = abs(d)
    losses = where(a <= delta, d * d * 0.5, (a - 0.5 * delta) * delta)
    return _reduce(losses if weight is None else losses * weight, reduction)


def softmin(
    input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DType | None = None
) -> Tensor:
    """softmax(−input) along `dim`."""
    return softmax(-input, -1 if dim is None else dim, dtype=dtype)


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """‖x1 − x2 + eps‖_p over the last axis (torch's: eps keeps the gradient finite at 0)."""
    d = sub(x1, x2) + eps
    return norm(d, p, -1, keepdims=keepdim) if d.ndim else norm(d, p)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """x where x > 0, weight·x elsewhere; weight (1,) or () or (C,) for C on axis 1. The output
    has input's shape (a 0-d input stays 0-d, as torch)."""
    if weight.ndim > 1:
        raise op_error("prelu", f"weight of shape {weight.shape}; expected a scalar or 1-D")
    if input.ndim == 0 and weight.numel() != 1:
        raise op_error("prelu", f"a 0-d input takes one weight, got shape {weight.shape}")
    w = reshape(weight, ()) if weight.numel() == 1 else weight
    if weight.numel() != 1 and input.ndim >= 2:
        w = reshape(weight, (1, -1) + (1,) * (input.ndim - 2))
    return where(input > 0, input, input * w)


def rms_norm(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """x / √(mean(x²) + eps) over the last len(normalized_shape) axes, times weight."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    eps = np.finfo(input.dtype).eps if eps is None else eps
    out = input / sqrt(mean(input * input, axes, keepdims=True) + eps)
    return out if weight is None else out * weight


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(…, C·r², H, W) → (…, C, H·r, W·r): channels rearranged into r×r blocks."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise op_error(
            "pixel_shuffle", f"channels {c} are not divisible by {r}² (input {tuple(input.shape)})"
        )
    n = len(lead)
    x = reshape(input, (*lead, c // (r * r), r, r, h, w))
    x = permute(x, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return reshape(x, (*lead, c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(…, C, H·r, W·r) → (…, C·r², H, W): the inverse of pixel_shuffle."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise op_error("pixel_unshuffle", f"height {h} and width {w} must divide by {r}")
    n = len(lead)
    x = reshape(input, (*lead, c, h // r, r, w // r, r))
    x = permute(x, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return reshape(x, (*lead, c * r * r, h // r, w // r))


def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """max(0, −target·(input1 − input2) + margin); at exactly 0 the gradient passes (torch's
    clamp_min)."""
    reduction = legacy_reduction(size_average, reduce, reduction, "margin_ranking_loss")
    return _reduce(clamp_min(-target * (input1 - input2) + margin, 0.0), reduction)


def hinge_embedding_loss(
    input: Tensor,
    target: Tensor,
    margin: float = 1.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """input where target = 1, max(0, margin − input) where target = −1; as torch, a target
    that is neither gets the sum of both parts."""
    reduction = legacy_reduction(size_average, reduce, reduction, "hinge_embedding_loss")
    t = _data(target)
    margin_part = where(t != 1, clamp_min(margin - input, 0.0), 0.0)
    return _reduce(where(t != -1, input, 0.0) + margin_part, reduction)


def soft_margin_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """ln(1 + e^(−target·input)), computed without overflow."""
    reduction = legacy_reduction(size_average, reduce, reduction, "soft_margin_loss")
    return _reduce(softplus(-target * input), reduction)


def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """1 − cos(x1, x2) where target = 1, max(0, cos(x1, x2) − margin) where target = −1."""
    reduction = legacy_reduction(size_average, reduce, reduction, "cosine_embedding_loss")
    eps = 1e-12  # torch's: added to each squared norm before the square root
    dot = sum(input1 * input2, -1)
    mag = sqrt((sum(input1 * input1, -1) + eps) * (sum(input2 * input2, -1) + eps))
    cos = dot / mag
    t = _data(target)
    losses = where(t == 1, 1 - cos, where(t == -1, relu(cos - margin), 0.0))
    return _reduce(losses, reduction)


def poisson_nll_loss(
    input: Tensor,
    target: Tensor,
    log_input: bool = True,
    full: bool = False,
    size_average: bool | None = None,
    eps: float = 1e-8,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Poisson negative log-likelihood: e^input − target·input (log_input), or
    input − target·ln(input + eps); full adds Stirling's term where target > 1."""
    reduction = legacy_reduction(size_average, reduce, reduction, "poisson_nll_loss")
    losses = exp(input) - target * input if log_input else input - target * log(input + eps)
    if full:  # Stirling's approximation of ln(target!), where target > 1 (a function of it)
        t = target if isinstance(target, Tensor) else Tensor._make(np.asarray(target))
        safe = where(t > 1, t, 2.0)  # ln of the unused branch stays finite
        stirling = safe * log(safe) - safe + log(safe * (2 * math.pi)) * 0.5
        losses = losses + where(t > 1, stirling, 0.0)
    return _reduce(losses, reduction)


def gaussian_nll_loss(
    input: Tensor,
    target: Tensor,
    var: Tensor | float,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> Tensor:
    """½(ln max(var, eps) + (input − target)² / max(var, eps)), + ½ln 2π with full."""
    v = var if isinstance(var, Tensor) else Tensor._make(np.asarray(var, _data(input).dtype))
    if v.ndim == input.ndim - 1 or (
        v.ndim == input.ndim and v.shape[-1] == 1 and input.shape[-1] != 1
    ):
        v = reshape(v, v.shape[: input.ndim - 1] + (1,)) if v.ndim == input.ndim - 1 else v
    if (_data(v) < 0).any():
        raise op_error("gaussian_nll_loss", "var has negative entries")
    # clamped as torch clamps it, under no_grad: the gradient still reaches var unchanged
    v = v + (clamp_min(v, eps) - v).detach()
    d = input - target
    losses = (log(v) + d * d / v) * 0.5
    if full:
        losses = losses + 0.5 * math.log(2 * math.pi)
    return _reduce(losses, reduction)


def multilabel_soft_margin_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Binary cross-entropy of σ(input) against each label, averaged over the C classes."""
    reduction = legacy_reduction(size_average, reduce, reduction, "multilabel_soft_margin_loss")
    losses = target * softplus(-input) + (1 - target) * softplus(input)
    if weight is not None:
        losses = losses * weight
    return _reduce(mean(losses, -1), reduction)


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """max(d(a, p) − d(a, n) + margin, 0), d the pairwise p-distance (swap: the closer of
    d(a, n) and d(p, n))."""
    reduction = legacy_reduction(size_average, reduce, reduction, "triplet_margin_loss")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(relu(d_pos - d_neg + margin), reduction)
