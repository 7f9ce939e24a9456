"""The position-wise feed-forward network and the encoder and decoder layers
("Attention Is All You Need", Vaswani et al. 2017, §3.1 and §3.3).

Every sub-layer F (attention or FFN) is wrapped in a residual connection and a LayerNorm
(§3.1, "Add & Norm"), in one of two orders:

    Post-Norm (the paper, norm_first=False):  x = LayerNorm(x + Dropout(F(x)))
    Pre-Norm  (norm_first=True):              x = x + Dropout(F(LayerNorm(x)))

Pre-Norm leaves an un-normalised path from the input to the output, which keeps gradients
healthy in deep stacks (Xiong et al. 2020, "On Layer Normalization in the
Transformer Architecture"); read which one a model uses before reading its numbers.
Names follow torch.nn.TransformerEncoderLayer / DecoderLayer, so weights map one to one
(see `transformer.interop`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import minitensor.functional as F
from minitensor import Function, Tensor, nn
from minitensor.nn import init
from minitensor.ops.nn import bias_activation
from minitensor.scope import module_scope

from .attention import MultiHeadAttention
from .config import TransformerConfig, activation_name, check_activation
from .embeddings import RotaryEmbedding

if TYPE_CHECKING:  # annotations only: models.py (where LayerCache is) imports this module
    from .models import LayerCache

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "swiglu": F.silu, "geglu": F.gelu}
# activations whose bias add runs fused with them after linear1 (one node, "bias + relu")
_FUSED_WITH_BIAS = ("relu", "gelu")


class FeedForward(nn.Module):
    """Position-wise FFN (the paper's §3.3): the same two-layer MLP applied to every token alone.

        FFN(x) = act(x W_1 + b_1) W_2 + b_2                     d_model → d_ff → d_model
        gated (swiglu / geglu): (act(x W_gate + b_gate) ⊙ (x W_1 + b_1)) W_2 + b_2

    x (B, L, d_model) → (B, L, d_model). activation: "relu" (paper) | "gelu" | "silu" |
    "swiglu" | "geglu", or your own (see `make_activation`). Children: linear1 (W_1),
    linear_gate (gated only), act (when the activation is an nn.Module class), dropout (after
    the activation, as torch does), linear2 (W_2).

    With "relu" or "gelu", linear1's bias add and the activation run as one op, "bias + relu"
    (`minitensor.ops.nn.bias_activation`): the same numbers, one pass over the (B·L, d_ff)
    hidden activations instead of two (docs/kernels.md, "Bias + activation").
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, activation: Any = "relu"
    ) -> None:
        super().__init__()
        check_activation(activation, "FeedForward")
        self.activation = activation
        self.gated = activation in ("swiglu", "geglu")
        self.linear1 = nn.Linear(d_model, d_ff)
        if self.gated:
            self.linear_gate = nn.Linear(d_model, d_ff)
        act = make_activation(activation)
        if isinstance(act, nn.Module):
            self.act, self._act_fn = act, None  # a child: its scope shows in graphs and traces
        else:
            self._act_fn = act
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])  # tokens are independent: one 2-D matmul
        if self.activation in _FUSED_WITH_BIAS and type(self.linear1) is nn.Linear:
            h = self._linear1_activated(x2)
        else:
            act = self._act_fn or self.act
            h = self.linear1(x2)
            h = act(self.linear_gate(x2)) * h if self.gated else act(h)
        return self.linear2(self.dropout(h)).reshape(shape)

    def _linear1_activated(self, x2: Tensor) -> Tensor:
        """act(x2 W_1ᵀ + b_1): linear1's product in linear1's scope (where the graph shows
        it), then its bias and the activation as one op. (A linear1 replaced by another
        module keeps its own forward: the caller checks that it is a plain nn.Linear.)"""
        lin = self.linear1
        if x2.shape[-1] != lin.in_features:
            return lin(x2)  # linear1 raises its own clear error
        with module_scope(lin.path):
            h = x2 @ lin.weight.T
        return bias_activation(h, lin.bias, self.activation)

    def extra_repr(self) -> str:
        return f"activation={activation_name(self.activation)!r}"


def make_activation(activation: Any) -> Callable[[Tensor], Tensor] | nn.Module:
    """The function FeedForward applies: a built-in by name; your function as is; an nn.Module
    class instantiated (one per FFN); an mt.Function class's ``apply``."""
    if isinstance(activation, str):
        return _ACTIVATIONS[activation]
    if isinstance(activation, type) and issubclass(activation, Function):
        return activation.apply
    if isinstance(activation, type) and issubclass(activation, nn.Module):
        return activation()
    return activation


def _rotary(cfg):
    return RotaryEmbedding(cfg.d_k, cfg.max_len) if cfg.positional == "rotary" else None


def _mha(cfg, rotary=False):
    return MultiHeadAttention(
        cfg.d_model,
        cfg.n_heads,
        cfg.dropout,
        attention_scale=cfg.attention_scale,
        rotary=_rotary(cfg) if rotary else None,
    )


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each with residual + LayerNorm (paper, §3.1).

    forward(x (B, L, d_model), mask) → (B, L, d_model). mask: broadcastable to
    (B, h, L, L), **True = blocked** (the source padding mask as (B, 1, 1, L)).
    Children: self_attn, norm1, dropout1, ffn, norm2, dropout2.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = _mha(cfg, rotary=True)
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout2 = nn.Dropout(cfg.dropout)

    def _attend(self, x: Tensor, mask: Any) -> Tensor:
        # only the output is used: need_weights=False lets long sequences take the fused op
        # (as torch.nn.TransformerEncoderLayer); last_weights / attention_maps() recompute the
        # weights from the kept Q and K when asked for
        return self.self_attn(x, mask=mask, need_weights=False)[0]

    def forward(self, x: Tensor, mask: Any = None) -> Tensor:
        if self.norm_first:  # Pre-Norm: x + F(LN(x))
            x = x + self.dropout1(self._attend(self.norm1(x), mask))
            return x + self.dropout2(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self._attend(x, mask)))  # Post-Norm
        return self.norm2(x + self.dropout2(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the memory, FFN; each with Add & Norm
    (paper, §3.1).

    forward(x (B, L_t, d), memory (B, L_s, d), self_mask, cross_mask, cache=None) → (B, L_t, d).
    self_mask: broadcastable to (B, h, L_t, L_t) — causal | target padding, **True = blocked**;
    cross_mask: broadcastable to (B, h, L_t, L_s) — the source padding mask.
    The queries of cross-attention come from the decoder, its keys and values from the memory
    (paper, §3.2.3), so its weights are (L_t, L_s).
    cache: a `LayerCache` (transformer.models) for step-by-step decoding (transformer.decoding).

    With cross_attention=False (a GPT-style decoder-only block) there is no cross_attn and the
    children are self_attn, norm1, dropout1, ffn, norm2, dropout2; otherwise self_attn, norm1,
    dropout1, cross_attn, norm2, dropout2, ffn, norm3, dropout3 (torch's names).
    """

    def __init__(self, cfg: TransformerConfig, cross_attention: bool = True) -> None:
        super().__init__()
        self.norm_first = cfg.norm_first
        self.has_cross = cross_attention
        eps = cfg.layer_norm_eps
        self.self_attn = _mha(cfg, rotary=True)
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=eps)
        self.dropout1 = nn.Dropout(cfg.dropout)
        if cross_attention:
            self.cross_attn = _mha(cfg)
            self.norm2 = nn.LayerNorm(cfg.d_model, eps=eps)
            self.dropout2 = nn.Dropout(cfg.dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        if cross_attention:
            self.norm3 = nn.LayerNorm(cfg.d_model, eps=eps)
            self.dropout3 = nn.Dropout(cfg.dropout)
        else:
            self.norm2 = nn.LayerNorm(cfg.d_model, eps=eps)
            self.dropout2 = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        self_mask: Any = None,
        cross_mask: Any = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        if self.has_cross and memory is None:
            raise ValueError(
                f"DecoderLayer in {self.path or 'model'}: cross-attention needs "
                f"the encoder's memory"
            )
        # the FFN's Add & Norm is the third sub-layer's (norm3), or the second's without
        # cross-attention: torch's names, so that weights map one to one
        norm_ff, drop_ff = (
            (self.norm3, self.dropout3) if self.has_cross else (self.norm2, self.dropout2)
        )
        if self.norm_first:  # Pre-Norm: x + F(LN(x))
            x = x + self.dropout1(self._self_attend(self.norm1(x), self_mask, cache))
            if self.has_cross:
                x = x + self.dropout2(self._cross_attend(self.norm2(x), memory, cross_mask, cache))
            return x + drop_ff(self.ffn(norm_ff(x)))
        x = self.norm1(x + self.dropout1(self._self_attend(x, self_mask, cache)))  # Post-Norm
        if self.has_cross:
            x = self.norm2(x + self.dropout2(self._cross_attend(x, memory, cross_mask, cache)))
        return norm_ff(x + drop_ff(self.ffn(x)))

    # only the outputs are used: need_weights=False (see EncoderLayer._attend)
    def _self_attend(self, h: Tensor, mask: Any, cache: LayerCache | None) -> Tensor:
        self_cache = cache.self_attn if cache is not None else None
        return self.self_attn(h, mask=mask, cache=self_cache, need_weights=False)[0]

    def _cross_attend(
        self, h: Tensor, memory: Tensor, mask: Any, cache: LayerCache | None
    ) -> Tensor:
        # queries from the decoder, keys and values from the encoder's memory (§3.2.3)
        cross_cache = cache.cross_attn if cache is not None else None
        return self.cross_attn(h, memory, mask=mask, cache=cross_cache, need_weights=False)[0]


def init_linear_weights(module: nn.Module) -> None:
    """Xavier-uniform every Linear weight below `module` (torch.nn.Transformer's
    _reset_parameters does the same to all its matrices); biases keep their init."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            init.xavier_uniform_(m.weight)
