"""`nn.Transformer` and its layers with torch's signatures, defaults, forward arguments and
parameter names, so a torch `state_dict()` loads here with strict=True and ours into torch.

The encoder-decoder of "Attention Is All You Need" (§3.1): each sub-layer is wrapped as

    Post-Norm (the paper's, norm_first=False):  x = LayerNorm(x + Sublayer(x))
    Pre-Norm  (norm_first=True):                x = x + Sublayer(LayerNorm(x))

and the sub-layers are multi-head attention (nn.MultiheadAttention) and the position-wise
feed-forward network FFN(x) = activation(x W₁ + b₁) W₂ + b₂ (§3.3).

Shapes, as torch: src (S, N, E), tgt (T, N, E) — or (N, S, E), (N, T, E) with
batch_first=True, or unbatched (S, E), (T, E). Masks mean what they mean in torch:
attention masks (L, S) or (N·nhead, L, S), bool True = not allowed or a float added to the
scores; key padding masks (N, S), True (or −inf) = a key to ignore, e.g. <pad>. The *_is_causal
arguments are torch's hints that the mask given is the causal one; the mask is what is
applied. (The `transformer/` package has its own paper-shaped model; this module is torch's.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import functional as F
from ..creation import full
from ..tensor import Tensor
from ..typing import DType
from . import init
from .attention import MultiheadAttention
from .layers import Dropout, LayerNorm, Linear, ModuleList
from .module import Module

Activation = str | Callable[[Tensor], Tensor]


def _activation(activation: Activation) -> Callable[[Tensor], Tensor]:
    """torch's legacy strings 'relu' and 'gelu', or any callable (a function or a Module)."""
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _Sublayers(Module):
    """What both layer kinds share: the feed-forward network's modules (linear1, dropout,
    linear2 and the activation, under torch's names) and the call of an attention sub-layer."""

    def _init_ffn(self, d_model, dim_feedforward, dropout, activation, bias, factory):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.activation = _activation(activation)

    def _attend(self, attn, x, mem, attn_mask, key_padding_mask, is_causal):
        """One attention sub-layer's output: x attends to mem (x itself for self-attention)."""
        return attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=bool(is_causal),
        )[0]


class TransformerEncoderLayer(_Sublayers):
    """torch.nn.TransformerEncoderLayer: self-attention, then the feed-forward network, each
    with a residual connection and LayerNorm (after it, or before with norm_first=True).

    forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False) → like src
      src (S, N, E), or (N, S, E) with batch_first, or (S, E); src_mask (S, S) or
      (N·nhead, S, S); src_key_padding_mask (N, S).
    Parameters: self_attn.{in_proj_weight, in_proj_bias, out_proj.*}, linear1.*, linear2.*,
    norm1.*, norm2.*.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **factory
        )
        self._init_ffn(d_model, dim_feedforward, dropout, activation, bias, factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self._attend(self.self_attn, x, x, attn_mask, key_padding_mask, is_causal)
        return self.dropout1(x)

    def _ff_block(self, x):
        """FFN(x) = activation(x W₁ + b₁) W₂ + b₂ (§3.3), then dropout (§5.4)."""
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerDecoderLayer(_Sublayers):
    """torch.nn.TransformerDecoderLayer: masked self-attention, attention to the encoder's
    output (memory), then the feed-forward network, each with a residual connection and
    LayerNorm (after it, or before with norm_first=True).

    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
            memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)
      tgt (T, N, E), memory (S, N, E) (batch first with batch_first; unbatched (T, E),
      (S, E)) → like tgt; tgt_mask (T, T), memory_mask (T, S); key padding masks (N, T), (N, S).
    Parameters: self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **factory
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **factory
        )
        self._init_ffn(d_model, dim_feedforward, dropout, activation, bias, factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x, m = tgt, memory
        t_masks = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        m_masks = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), *t_masks)
            x = x + self._mha_block(self.norm2(x), m, *m_masks)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, *t_masks))
            x = self.norm2(x + self._mha_block(x, m, *m_masks))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self._attend(self.self_attn, x, x, attn_mask, key_padding_mask, is_causal)
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal=False):
        x = self._attend(self.multihead_attn, x, mem, attn_mask, key_padding_mask, is_causal)
        return self.dropout2(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


def _clones(layer: Module, n: int) -> ModuleList:
    """n independent copies of `layer` (as torch: every copy starts with the same weights)."""
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: num_layers copies of encoder_layer applied in turn
    (parameters layers.0.*, layers.1.*, …), then `norm` if given (norm.*) — the final
    LayerNorm a Pre-Norm stack needs. enable_nested_tensor and mask_check are accepted for
    torch's signature (torch's nested-tensor fast path is a speed-up that does not exist here).

    forward(src, mask=None, src_key_padding_mask=None, is_causal=None) → like src
    """

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(
                x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal
            )
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder: num_layers copies of decoder_layer, each attending to the
    same memory, then `norm` if given.

    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
            memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False)
    """

    def __init__(
        self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None
    ) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=tgt_is_causal,
                memory_is_causal=memory_is_causal,
            )
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """torch.nn.Transformer: the encoder-decoder of "Attention Is All You Need" (§3.1), each
    stack ending in a LayerNorm (encoder.norm, decoder.norm) as torch's does. Every weight
    matrix is re-initialised Xavier-uniform (torch's _reset_parameters).

    forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
            src_key_padding_mask=None, tgt_key_padding_mask=None,
            memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
            memory_is_causal=False) → like tgt
      src (S, N, E), tgt (T, N, E) — (N, S, E), (N, T, E) with batch_first; src_mask (S, S),
      tgt_mask (T, T) (see generate_square_subsequent_mask), memory_mask (T, S); key padding
      masks (N, S), (N, T), (N, S). custom_encoder / custom_decoder replace the stacks.
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps)
        layer_args += (batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **factory),
                num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory),
            )
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **factory),
                num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory),
            )
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        self._check_inputs(src, tgt)
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    def _check_inputs(self, src, tgt):
        """torch's two checks, with the shapes named: one batch size, features = d_model."""
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and (tgt.ndim != 3 or src.shape[batch] != tgt.shape[batch]):
            raise RuntimeError(
                f"Transformer: the batch number of src {tuple(src.shape)} and tgt "
                f"{tuple(tgt.shape)} must be equal (axis {batch}, batch_first={self.batch_first})"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(
                f"Transformer: the feature number of src {tuple(src.shape)} and tgt "
                f"{tuple(tgt.shape)} must be equal to d_model={self.d_model}"
            )

    @staticmethod
    def generate_square_subsequent_mask(
        sz: int, device: Any = None, dtype: DType | None = None
    ) -> Tensor:
        """The causal mask (sz, sz) as torch makes it: float, −inf above the diagonal (position
        i may not attend to j > i), 0 elsewhere."""
        return F.triu(full((sz, sz), float("-inf"), dtype=dtype, device=device), 1)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
