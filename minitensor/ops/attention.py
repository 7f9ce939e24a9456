"""Fused scaled dot-product attention: one op (one node in the graph) for
softmax(Q·Kᵀ·scale + mask)·V, whose kernel never holds the Lq × Lk weights (FlashAttention's
algorithm; minitensor/kernels/attention.py, docs/kernels.md "Fused attention").

The explicit version — a matmul, the fused softmax, dropout, a matmul — is four nodes and keeps
the weights for backward; use it when you want to look at the weights (transformer/attention.py
does, for attention maps and the step-through).
"""

import math

import numpy as np

from .. import random as _random
from ..function import Function, ShapeError
from ..kernels.attention import fused_attention_backward, fused_attention_forward
from .nn import as_attention_mask


class ScaledDotProductAttention(Function):
    """out = dropout(softmax(q·kᵀ·scale + mask))·v over the last two axes.

    q (B, h, Lq, d), k (B, h, Lk, d), v (B, h, Lk, dv) → out (B, h, Lq, dv). mask (optional,
    broadcastable to (B, h, Lq, Lk)): bool True = blocked, or additive float (−inf = blocked).
    is_causal blocks key j for query i when j > i + Lk − Lq, without a mask array. A query row
    with no allowed key gives 0 and zero gradient. Saved for backward: q, k, v, out and one
    log-sum-exp per query row — not the weights."""

    name = "scaled_dot_product_attention"
    float_inputs = (0, 1, 2)

    @staticmethod
    def forward(ctx, q, k, v, mask=None, scale=None, is_causal=False, seed=0, p=0.0):
        mask = as_attention_mask(mask, "scaled_dot_product_attention")
        for label, x in (("query", q), ("key", k), ("value", v)):
            if x.ndim != 4:
                raise ShapeError(
                    f"{label} must be (B, h, L, d), got shape {x.shape} (query "
                    f"{q.shape}, key {k.shape}, value {v.shape})"
                )
        out, lse = fused_attention_forward(q, k, v, mask, scale, is_causal, seed, p)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.params = (mask, scale, is_causal, seed, p)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        return fused_attention_backward(q, k, v, out, lse, grad, *ctx.params)


def scaled_dot_product_attention(
    query, key, value, mask=None, dropout=0.0, scale=None, is_causal=False, training=True
):
    """The fused attention op on Tensors: query (B, h, Lq, d), key (B, h, Lk, d), value
    (B, h, Lk, dv) → (B, h, Lq, dv); (N, L, d) inputs are taken as one head each. mask: bool
    True = blocked, or additive float; scale: default 1/√d; dropout on the weights when
    training (its seed drawn from minitensor's generator, as F.dropout's)."""
    if not 0.0 <= dropout < 1.0:
        raise ValueError(
            f"scaled_dot_product_attention: dropout must be in [0, 1), got "
            f"{dropout} (query shape {query.shape})"
        )
    three = query.ndim == 3
    if three:
        query, key, value = (x.unsqueeze(1) for x in (query, key, value))
        if mask is not None and np.ndim(mask) == 3:
            mask = np.expand_dims(mask, 1)
    p = float(dropout) if training else 0.0
    seed = _random.generator().integers(0, 2**64, dtype=np.uint64) if p else 0
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    out = ScaledDotProductAttention.apply(
        query, key, value, mask=mask, scale=scale, is_causal=is_causal, seed=seed, p=p
    )
    return out.squeeze(1) if three else out
