"""`nn.MultiheadAttention` with torch's signature, parameters and mask meanings.

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W_O,
    head_i = softmax(Q W_i^Q (K W_i^K)ᵀ / √d_k) V W_i^V
    ("Attention Is All You Need", §3.2.2)

As in torch, W^Q, W^K and W^V are stacked in one parameter `in_proj_weight` (3E, E) (rows
0:E are W^Q, E:2E W^K, 2E:3E W^V; biases likewise in `in_proj_bias` (3E,)) and W^O is the
Linear `out_proj`: a torch `state_dict()` of an nn.MultiheadAttention loads unchanged. Each
head's softmax(QKᵀ/√d_k + mask)V is `minitensor.ops.attention.attention`, the one attention
core: five graph nodes when something reads the graph (or the weights are asked for), fused
otherwise.

Masks mean what they mean in torch's nn.MultiheadAttention (and nn.Transformer):
**bool True = NOT allowed to attend**, or a float mask added to the scores. This is the
opposite of `F.scaled_dot_product_attention`, where True = may attend (docs/pytorch.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import functional as F
from ..ops import attention as A
from ..tensor import Tensor
from ..typing import ArrayLike, DType
from . import init
from .layers import Linear
from .module import Module, Parameter


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True,
    batch_first=False): self- or cross-attention split into num_heads heads of
    head_dim = embed_dim / num_heads.

    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
            average_attn_weights=True, is_causal=False) → (attn_output, attn_weights)
      query (L, N, E), key and value (S, N, E) — or (N, L, E), (N, S, E) with batch_first,
      or unbatched (L, E), (S, E);
      key_padding_mask (N, S): True (or −inf) marks a key to ignore, e.g. <pad>;
      attn_mask (L, S) or (N·num_heads, L, S): True (or −inf) = not allowed;
      attn_output like query; attn_weights (N, L, S) averaged over the heads, (N, h, L, S)
      with average_attn_weights=False, or None when need_weights=False.
    A query row with every key masked gives zeros here (torch gives NaN).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim={embed_dim} is not a multiple of "
                f"num_heads={num_heads}"
            )
        if (
            add_bias_kv
            or add_zero_attn
            or kdim not in (None, embed_dim)
            or vdim not in (None, embed_dim)
        ):
            raise NotImplementedError(
                "MultiheadAttention: add_bias_kv, add_zero_attn and "
                "kdim/vdim other than embed_dim are not supported"
            )
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout, self.batch_first = dropout, batch_first
        dtype = np.dtype(dtype or np.float32)
        self.in_proj_weight = Parameter(np.zeros((3 * embed_dim, embed_dim), dtype))
        if bias:
            self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        self._reset_parameters()

    def _reset_parameters(self):
        """torch's: Xavier-uniform W^Q, W^K, W^V (as one matrix), zero biases; out_proj
        keeps its Linear initialisation."""
        init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def _project(self, x, i):
        """x (N, L, E) → (N, h, L, head_dim) with rows i·E:(i+1)·E of in_proj (W^Q, W^K, W^V)."""
        e = self.embed_dim
        y = F.matmul(x, F.transpose(self.in_proj_weight[i * e : (i + 1) * e]))
        if self.in_proj_bias is not None:
            y = y + self.in_proj_bias[i * e : (i + 1) * e]
        n, length = x.shape[0], x.shape[1]
        return F.swapaxes(F.reshape(y, (n, length, self.num_heads, self.head_dim)), 1, 2)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | ArrayLike | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | ArrayLike | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint (as torch): "
                "pass the causal mask itself, e.g. "
                "nn.Transformer.generate_square_subsequent_mask(L)"
            )
        self._check_ranks(query, key, value)
        unbatched = query.ndim == 2
        q, k, v = (self._batch_major(t, unbatched) for t in (query, key, value))
        if key_padding_mask is not None and unbatched:
            key_padding_mask = _array(key_padding_mask)[None]
        n, l_q, e = q.shape
        if e != self.embed_dim or k.shape[-1] != e or v.shape[-1] != e or k.shape != v.shape:
            raise ValueError(
                f"{self._where()}: query "
                f"{tuple(query.shape)}, key {tuple(key.shape)} and value "
                f"{tuple(value.shape)} must end in embed_dim={self.embed_dim}, "
                f"key and value alike (batch_first={self.batch_first})"
            )
        mask = self._scores_mask(key_padding_mask, attn_mask, n, l_q, k.shape[1])
        heads = [self._project(t, i) for i, t in enumerate((q, k, v))]  # (N, h, L|S, d)
        p = self.dropout if self.training else 0.0
        out, weights = A.attention(
            *heads, mask, None, p, need_weights=need_weights, op=self._where()
        )
        out = F.reshape(F.swapaxes(out, 1, 2), (n, l_q, e))  # the heads side by side
        out = self._caller_layout(self.out_proj(out), unbatched)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = F.mean(weights, axis=1)
        return out, (weights[0] if unbatched else weights)

    def _where(self):
        return f"MultiheadAttention in {self.path or 'the model'}"

    def _check_ranks(self, query, key, value):
        """torch's shapes only: batched (3-D) or unbatched (2-D) query, key and value alike."""
        ranks = (query.ndim, key.ndim, value.ndim)
        if ranks not in ((2, 2, 2), (3, 3, 3)):
            layout = "(N, L, E)" if self.batch_first else "(L, N, E)"
            raise ValueError(
                f"{self._where()}: query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                f"{tuple(value.shape)} must all be batched {layout} (batch_first="
                f"{self.batch_first}) or all unbatched (L, E), with E = embed_dim = "
                f"{self.embed_dim}"
            )

    def _batch_major(self, x, unbatched):
        """The caller's layout → (N, L, E)."""
        if unbatched:
            return F.unsqueeze(x, 0)
        return x if self.batch_first else F.swapaxes(x, 0, 1)

    def _caller_layout(self, x, unbatched):
        """(N, L, E) → the caller's layout."""
        if unbatched:
            return x[0]
        return x if self.batch_first else F.swapaxes(x, 0, 1)

    def _scores_mask(self, key_padding_mask, attn_mask, n, l_q, l_k):
        """One mask for the scores (N, h, L, S) from torch's key_padding_mask (N, S) and
        attn_mask (L, S) or (N·h, L, S), both True = not allowed (or additive float)."""
        where = self._where()
        mask = A.key_padding_mask(key_padding_mask, n, l_k, where)
        am = A.normalize_mask(attn_mask, where)
        if am is not None:
            if tuple(am.shape) == (n * self.num_heads, l_q, l_k):
                am = am.reshape(n, self.num_heads, l_q, l_k)
            elif tuple(am.shape) != (l_q, l_k):
                raise ValueError(
                    f"{where}: attn_mask of shape {tuple(am.shape)}, expected "
                    f"{(l_q, l_k)} or {(n * self.num_heads, l_q, l_k)}"
                )
        return A.combine(mask, am, where)

    def extra_repr(self) -> str:
        return ""


def _array(x):
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)
