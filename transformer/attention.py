"""Multi-head attention ("Attention Is All You Need", Vaswani et al. 2017, §3.2.2) and its
KV cache.

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W_O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                      (§3.2.2)

Q, K, V all come from one sequence in self-attention; in cross-attention Q comes from the
decoder and K, V from the encoder's memory (§3.2.3), so L_q and L_k may differ. Each head's
Attention is `minitensor.ops.attention.attention`, the one core every attention in the project
calls: its five steps (QKᵀ, ×1/√d_k, + mask, softmax, ·V) are the graph's nodes when you trace,
step through or ask for the weights, and one fused node when nothing looks (that module's
docstring gives the rule).

Masks follow the project's convention, **bool True = blocked** (or additive float); see
`transformer.masks`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import minitensor.functional as F
from minitensor import Tensor, from_numpy, kernels, nn
from minitensor.nn import init
from minitensor.ops import attention as A
from minitensor.typing import ArrayLike

from . import masks as M


class AttentionCache:
    """Keys and values one attention layer keeps between decoding steps (the KV cache).

    Self-attention (static=False): each step appends the new tokens' K and V, so step t costs
    one query against t keys instead of recomputing all t queries. Cross-attention
    (static=True): K and V come from the encoder's memory, which does not change, so they are
    computed at the first step only. k, v: (B, h, L, d_k) tensors, or None before the first step.
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.k = None
        self.v = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def reorder(self, index: ArrayLike) -> None:
        """Keep batch rows `index` (beam search: each surviving beam takes its parent's cache)."""
        if self.k is not None:
            self.k = from_numpy(self.k.numpy()[index])
            self.v = from_numpy(self.v.numpy()[index])


class MultiHeadAttention(nn.Module):
    """Multi-head attention with the paper's projections W_q, W_k, W_v, W_o (§3.2.2).

    d_model is split into n_heads heads of d_k = d_model / n_heads; each head attends in its own
    subspace, the heads are concatenated and mixed by W_o.

    forward(query (B, L_q, d), key (B, L_k, d) = query, value = key, mask=None,
            key_padding_mask=None, attn_mask=None, cache=None, need_weights=None, is_causal=False)
            → (output (B, L_q, d), weights (B, h, L_q, L_k) per head, or None).
    need_weights (None: the module's `need_weights` attribute, True unless set): True returns
    the weights (a Tensor in the graph, from the core's five steps); False returns None in
    their place and lets the core fuse when nothing reads the graph. Layers that use only the
    output should pass False (as torch.nn.TransformerEncoderLayer does).
    Masks, all **True = blocked**: `mask` is any mask broadcastable to (B, h, L_q, L_k) (what
    the models pass, built once per forward); key_padding_mask (B, L_k) and attn_mask (L_q, L_k)
    are torch-style conveniences, combined with `masks.combine_masks`. is_causal blocks the
    future without a mask array; with a KV cache the new queries follow the cached positions
    (the core's causal offset = len(cache)).

    Children: w_q, w_k, w_v, w_o (Linear d → d), dropout (on the weights), and rotary when
    positions are rotary (then it is self-attention, and q, k are rotated before the scores).
    The projections run as 2-D matmuls on (B·L, d). (Concatenating W_q, W_k, W_v into one
    matmul was measured: no faster here, since splitting the result costs what it saves.)

    After each forward, `last_weights` holds the weights (numpy) and `score_stats()` summarises
    the scores the softmax saw (after the 1/√d_k scale when it is on). After a fused forward
    both are computed when first asked for, from the Q and K the forward kept (so they are the
    weights before dropout); asking costs one explicit attention, a training step nothing.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        attention_scale: bool = True,
        rotary: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(
                f"MultiHeadAttention: d_model={d_model} is not a multiple of n_heads={n_heads}"
            )
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d_k) if attention_scale else 1.0
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout_p = dropout
        self.rotary = rotary
        self.need_weights = True
        self._record = None  # what the last forward left for last_weights / score_stats
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights and zero biases, as torch.nn.MultiheadAttention."""
        for lin in (self.w_q, self.w_k, self.w_v, self.w_o):
            init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                init.zeros_(lin.bias)

    # ------------------------------------------------------------------ projections
    def _split_heads(self, x, batch, length):
        """(B·L, d) → (B, h, L, d_k): each head's slice of the features becomes its own axis.
        Every size is given (no -1), so an empty batch (B = 0) splits too."""
        return x.reshape(batch, length, self.n_heads, self.d_k).swapaxes(1, 2)

    def _heads(self, linear, x2, batch, length):
        """Project x2 (B·L, d) with one of W_q, W_k, W_v and split the result into heads
        (B, h, L, d_k). Tokens are independent here, so the matmul runs on (B·L, d): one plain
        2-D BLAS call, and so is its gradient."""
        return self._split_heads(linear(x2), batch, length)

    def _check_inputs(self, query, key, value):
        """A clear error, naming this module and the shapes, unless query, key and value are
        (B, L, d_model) with one batch and key, value of one length."""
        where = f"MultiHeadAttention in {self.path or 'model'}"
        for label, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim != 3:
                raise ValueError(
                    f"{where}: {label} must be (B, L, d_model={self.d_model}), got "
                    f"shape {tuple(x.shape)}"
                )
        d = self.d_model
        if query.shape[-1] != d or key.shape[-1] != d or value.shape[-1] != d:
            raise ValueError(
                f"{where}: query {query.shape}, key {key.shape}, value "
                f"{value.shape} must all end in d_model={self.d_model}"
            )
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(
                f"{where}: key {key.shape} and value {value.shape} need the same "
                f"(batch, length), and the batch of query {query.shape}"
            )

    def _attention(self, q, k, v, mask, need_weights, causal_offset):
        """(output (B, h, L_q, d_k), weights or None) from the core; keeps what last_weights and
        score_stats need (the weights if formed, else Q and K to form them when asked)."""
        p = self.dropout_p if self.training else 0.0
        is_causal = causal_offset is not None
        out, weights = A.attention(
            q, k, v, mask, self.scale, p, is_causal, causal_offset or 0, need_weights, self._where()
        )
        if is_causal:  # the same blocked set, as an array, for the diagnostics
            mask = A.combine(mask, A.causal_mask(q.shape[2], k.shape[2], causal_offset))
        kept = None if weights is None else weights.numpy()
        mask = mask.numpy() if isinstance(mask, Tensor) else mask  # a learned mask's values
        self._record = (kept, (q.numpy(), k.numpy()), self.scale, mask)
        return out, weights

    def _where(self):
        return f"MultiHeadAttention in {self.path or 'model'}"

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Any = None,
        key_padding_mask: Any = None,
        attn_mask: Any = None,
        cache: AttentionCache | None = None,
        need_weights: bool | None = None,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        batch, l_q, d = query.shape
        mask = A.normalize_mask(mask, self._where())
        if key_padding_mask is not None or attn_mask is not None:
            mask = A.combine(mask, M.combine_masks(key_padding_mask, attn_mask, self.n_heads))

        offset = len(cache) if cache is not None and not cache.static else 0
        reuse = cache is not None and cache.static and cache.k is not None

        q2 = query.reshape(batch * l_q, d)
        q = self._heads(self.w_q, q2, batch, l_q)  # Q = X W_q, per head
        if reuse:
            k, v = cache.k, cache.v  # cross-attention: memory's K, V from step 1
        else:
            l_k = key.shape[1]
            k2 = q2 if key is query else key.reshape(batch * l_k, d)
            v2 = k2 if value is key else value.reshape(batch * l_k, d)
            k = self._heads(self.w_k, k2, batch, l_k)  # K = X W_k
            v = self._heads(self.w_v, v2, batch, l_k)  # V = X W_v

        if self.rotary is not None:  # RoPE: rotate q and k by their positions
            q = self.rotary(q, offset)
            if not reuse:
                k = self.rotary(k, offset)
        if cache is not None:
            if cache.static:
                cache.k, cache.v = k, v
            else:  # keep the history, append the new step
                if cache.k is not None:
                    k = F.concat([cache.k, k], axis=2)
                    v = F.concat([cache.v, v], axis=2)
                cache.k, cache.v = k, v

        need_weights = self.need_weights if need_weights is None else need_weights
        # is_causal: the new queries sit after the `offset` cached positions (0 without a cache)
        out, weights = self._attention(q, k, v, mask, need_weights, offset if is_causal else None)
        # concat the heads: (B, h, L_q, d_k) → (B, L_q, h, d_k) → (B·L_q, d), then W_o (a view
        # when the fused op laid its output out heads-last)
        out = out.swapaxes(1, 2).reshape(batch * l_q, d)
        return self.w_o(out).reshape(batch, l_q, d), weights

    # ------------------------------------------------------------------ what the last forward saw
    @property
    def _last_scores(self):
        """(raw scores Q Kᵀ (B, h, L_q, L_k), scale, mask) of the last forward, or None."""
        if self._record is None:
            return None
        _, scores, scale, mask = self._record
        if isinstance(scores, tuple):  # a fused forward kept Q and K only
            q, k = scores
            scores = q @ np.swapaxes(k, -1, -2)
            self._record = self._record[:1] + (scores,) + self._record[2:]
        return scores, scale, mask

    @property
    def last_weights(self) -> np.ndarray | None:
        """The attention weights (B, h, L_q, L_k) of the last forward (numpy), or None."""
        if self._record is None:
            return None
        if self._record[0] is None:  # a fused forward: compute them now
            scores, scale, mask = self._last_scores
            weights = kernels.softmax_forward(scores, scale, mask)
            self._record = (weights,) + self._record[1:]
        return self._record[0]

    # ------------------------------------------------------------------ diagnostics
    def score_stats(self) -> dict[str, float] | None:
        """Statistics of the last forward's scores as the softmax saw them (Q Kᵀ · scale),
        over the positions the mask allows: max_abs_score, mean_abs_score, std_score, and
        max_weight_mean (the mean over rows of the largest weight: near 1 = saturated softmax:
        large scores push the softmax where its gradient vanishes, the reason for the 1/√d_k
        scale in §3.2.1)."""
        if self._last_scores is None:
            return None
        raw, scale, mask = self._last_scores
        s = raw * scale
        allowed = np.ones(s.shape, dtype=bool)
        if mask is not None:
            blocked = mask if mask.dtype == np.bool_ else np.isneginf(mask)
            allowed = ~np.broadcast_to(blocked, s.shape)
        vals = s[allowed]
        if vals.size == 0:
            return {
                "max_abs_score": 0.0,
                "mean_abs_score": 0.0,
                "std_score": 0.0,
                "max_weight_mean": 0.0,
            }
        w = self.last_weights
        return {
            "max_abs_score": float(np.abs(vals).max()),
            "mean_abs_score": float(np.abs(vals).mean()),
            "std_score": float(vals.std()),
            "max_weight_mean": float(w.max(axis=-1).mean()) if w is not None else 0.0,
        }

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_k={self.d_k}, "
            f"scale={self.scale:.4g}, dropout={self.dropout_p}"
        )
