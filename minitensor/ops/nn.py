"""Neural-net ops: softmax, log_softmax, layer_norm, dropout, embedding, cross_entropy, bias +
activation.

Each is one fused op (one node in the graph) whose loops run in `minitensor.kernels`.
"""
import math

import numpy as np

from .. import kernels as K
from ..function import Function, ShapeError
from ..tensor import Tensor


def as_attention_mask(mask, op="softmax"):
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
    arr = np.asarray(mask.data if isinstance(mask, Tensor) else mask)
    if arr.dtype != np.bool_ and arr.dtype.kind != "f":
        raise TypeError(
            f"{op}: a mask must be bool (True = blocked) or floating (added to the scores), got "
            f"{arr.dtype} of shape {arr.shape}; convert it with `mask != 0` (1 = blocked) or "
            f"`mask == 0` (1 = allowed)")
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
                raise ShapeError(f"mask of shape {mask.shape} does not broadcast to the "
                                 f"scores' shape {x.shape}")
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
            return (f"{empty} of {rows} rows of shape {y.shape} are fully masked: their "
                    f"weights and output are zero (no key to attend to)")
        return None


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


class LayerNorm(Function):
    """LayerNorm over the last `n_axes` axes: (x − μ)/√(σ² + eps)·weight + bias.

    weight and bias (shape = x.shape[-n_axes:]) may be None.
    """
    name = "layer_norm"
    float_inputs = (0, 1, 2)

    @staticmethod
    def forward(ctx, x, weight, bias, n_axes=1, eps=1e-5):
        norm_shape = x.shape[x.ndim - n_axes:]
        for label, p in (("weight", weight), ("bias", bias)):
            if p is not None and p.shape != norm_shape:
                raise ShapeError(f"{label} has shape {p.shape} but x of shape {x.shape} is "
                                 f"normalised over its last {n_axes} axes {norm_shape}")
        ctx.shapes = (x.shape, norm_shape)
        if x.size == 0:     # an empty batch or normalized shape: nothing to normalise, and the
            return x.copy()     # kernels' 1/d is not defined for d = 0
        d = math.prod(norm_shape)
        x2 = x.reshape(math.prod(x.shape[:x.ndim - n_axes]), d)   # sizes, not -1: axes may be 0
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
            raise IndexError(f"id {bad} is out of range for a table of {n} rows "
                             f"(ids shape {ids.shape}, table shape {weight.shape})")
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
            raise ShapeError("input must hold logits (C,), (N, C) or (N, C, d1, …), got a "
                             "scalar")
        axis = 1 if logits.ndim >= 2 else 0
        rows = np.moveaxis(logits, axis, -1)               # (N, d1, …, C), a view
        if rows.shape[:-1] != targets.shape:
            hint = ("; logits (N, L, C) with the classes last go in as logits.transpose(1, 2)"
                    if logits.ndim >= 3 and logits.shape[:-1] == targets.shape else "")
            raise ShapeError(f"input {logits.shape} and target {targets.shape} do not match: "
                             f"expected target of shape {rows.shape[:-1]} (classes are axis "
                             f"{axis} of input, as in torch){hint}")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        c = logits.shape[axis]
        x2, t = rows.reshape(targets.size, c), targets.reshape(-1)   # c may be 0
        valid = t != ignore_index
        if valid.any() and (t[valid].min() < 0 or t[valid].max() >= c):
            bad = t[valid].max() if t[valid].max() >= c else t[valid].min()
            raise IndexError(f"target {bad} is out of range for {c} classes "
                             f"(targets shape {targets.shape})")
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
            raise ShapeError(f"bias of shape {None if bias is None else bias.shape} does not "
                             f"match the last axis of x {x.shape}")
        x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])   # sizes, not -1: axes may be 0
        y, saved = K.bias_activation_forward(x2, bias, act)
        ctx.save_for_backward(*saved)
        ctx.shapes = (x.shape, bias is not None)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        shape, has_bias = ctx.shapes
        saved = ctx.saved_tensors
        dx, db = K.bias_activation_backward(grad.reshape(saved[0].shape), saved,
                                            ctx.fn.activation, has_bias)
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
        raise ValueError(f"bias_activation: activation must be one of "
                         f"{', '.join(_BIAS_ACTIVATIONS)}, got {activation!r}")
    return _BIAS_ACTIVATIONS[activation].apply(x, bias)
