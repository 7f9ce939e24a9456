"""The three shapes of Transformer and their stacks ("Attention Is All You Need", §3.1).

- `Transformer`: encoder-decoder, the paper's translation model. The encoder reads the whole
  source once and returns the *memory* (B, L_src, d_model); the decoder reads the target so far
  (causal self-attention), queries the memory (cross-attention), and `generator` maps each
  position to logits over the target vocabulary (§3.4: "learned linear transformation and
  softmax").
- `EncoderOnly`: BERT-style understanding — a classification head or a masked-token head.
- `DecoderOnlyLM`: GPT-style language model — causal self-attention only, optional weight tying.

Masks, everywhere **bool True = blocked**: a padding mask is (B, L) (True = <pad>, build it with
`masks.padding_mask(ids, pad_id)`); None means no position is padding. The causal mask is
added inside the decoder. Each forward builds every mask once, as a numpy constant.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from minitensor import Tensor, from_numpy, nn
from minitensor.typing import ArrayLike

from . import masks as M
from .attention import AttentionCache, MultiHeadAttention
from .config import TransformerConfig
from .embeddings import Embeddings
from .layers import DecoderLayer, EncoderLayer, init_linear_weights


# ---------------------------------------------------------------------------- KV cache
class LayerCache:
    """One decoder layer's cache: `self_attn` grows by one position per step, `cross_attn`
    (the memory's keys and values) is computed once."""

    def __init__(self, cross_attention: bool = True) -> None:
        self.self_attn = AttentionCache(static=False)
        self.cross_attn = AttentionCache(static=True) if cross_attention else None

    def reorder(self, index: ArrayLike) -> None:
        self.self_attn.reorder(index)
        if self.cross_attn is not None:
            self.cross_attn.reorder(index)


class DecoderCache:
    """The KV cache of a whole decoder: a `LayerCache` per layer, plus the target
    padding seen so far. `len(cache)` is the number of positions already decoded, which is also
    the position of the next token (positions are offset by it)."""

    def __init__(self, num_layers: int, cross_attention: bool = True) -> None:
        self.layers = [LayerCache(cross_attention) for _ in range(num_layers)]
        self.key_padding = None  # (B, L so far) bool, True = <pad>, or None

    def __len__(self) -> int:
        return len(self.layers[0].self_attn) if self.layers else 0

    def reorder(self, index: ArrayLike) -> None:
        """Keep batch rows `index` of every cached tensor (beam search reorders beams)."""
        index = np.asarray(index)
        for layer in self.layers:
            layer.reorder(index)
        if self.key_padding is not None:
            self.key_padding = self.key_padding[index]


# ---------------------------------------------------------------------------- stacks
def _final_norm(cfg):
    return nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.final_norm else None


class Encoder(nn.Module):
    """N encoder layers and (cfg.final_norm) a final LayerNorm.

    forward(x (B, L, d_model), mask) → memory (B, L, d_model); mask broadcastable to
    (B, h, L, L), True = blocked (the padding mask as (B, 1, 1, L)).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_encoder_layers))
        self.norm = _final_norm(cfg)

    def forward(self, x: Tensor, mask: Any = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x) if self.norm is not None else x


class Decoder(nn.Module):
    """N decoder layers and (cfg.final_norm) a final LayerNorm.

    forward(x (B, L_t, d), memory (B, L_s, d) or None, self_mask, cross_mask, cache=None)
    → (B, L_t, d). cross_attention=False builds GPT-style layers (no memory).
    """

    def __init__(
        self, cfg: TransformerConfig, cross_attention: bool = True, num_layers: int | None = None
    ) -> None:
        super().__init__()
        n = cfg.num_decoder_layers if num_layers is None else num_layers
        self.layers = nn.ModuleList(DecoderLayer(cfg, cross_attention) for _ in range(n))
        self.norm = _final_norm(cfg)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        self_mask: Any = None,
        cross_mask: Any = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(
                x, memory, self_mask, cross_mask, cache.layers[i] if cache is not None else None
            )
        return self.norm(x) if self.norm is not None else x


# ---------------------------------------------------------------------------- helpers
def _ids(x, what):
    arr = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    if arr.ndim != 2 or arr.dtype.kind not in "iu":
        raise ValueError(
            f"{what}: expected integer ids of shape (batch, length), got "
            f"{arr.dtype} of shape {arr.shape}"
        )
    return arr


def _padding(mask, ids, what):
    """Check a (B, L) padding mask against its ids; returns a bool array or None."""
    if mask is None:
        return None
    m = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
    if m.shape != ids.shape:
        raise ValueError(
            f"{what}: padding mask of shape {m.shape} does not match ids of shape "
            f"{ids.shape} (it must be (batch, length), True = <pad>)"
        )
    if m.dtype != np.bool_:
        raise TypeError(
            f"{what}: a padding mask must be bool (True = <pad>), got {m.dtype}; "
            f"if yours means True = keep, use masks.from_allowed_mask"
        )
    return m


def _key_mask(padding):
    """(B, L_k) True = pad → (B, 1, 1, L_k), broadcast over heads and queries."""
    return None if padding is None else padding[:, None, None, :]


def _self_mask(l_new, offset, key_padding):
    """Causal | padding mask of a decoder's self-attention for l_new queries after `offset`
    cached positions: broadcastable to (B, h, l_new, offset + l_new), True = blocked."""
    causal = M.causal_mask(l_new, offset + l_new) if l_new > 1 else None
    pad = _key_mask(key_padding)
    if causal is None:
        return pad
    if pad is None:
        return causal
    return causal | pad  # (1, 1, L, L) | (B, 1, 1, L) → (B, 1, L, L)


def _project(generator, x):
    """x (B, L, d_model) → logits (B, L, vocab) as one 2-D matmul on (B·L, d_model). The vocab
    size is spelled out, not -1: with B = 0 or L = 0 there are no elements to infer it from."""
    batch, length, d = x.shape
    logits = generator(x.reshape(batch * length, d))
    return logits.reshape(batch, length, generator.out_features)


class _Inspectable:
    """attention_maps() and score_stats() for any model built of MultiHeadAttention."""

    def _attention_modules(self) -> Iterator[tuple[str, MultiHeadAttention]]:
        for name, m in self.named_modules():
            if isinstance(m, MultiHeadAttention):
                yield name, m

    def attention_maps(self) -> dict[str, np.ndarray]:
        """{"encoder.layers.0.self_attn": weights (B, h, L_q, L_k), ...}: numpy copies of the
        attention weights of each attention's most recent forward (for heatmaps)."""
        return {
            name: m.last_weights.copy()
            for name, m in self._attention_modules()
            if m.last_weights is not None
        }

    def score_stats(self) -> dict[str, dict[str, float]]:
        """{"encoder.layers.0.self_attn": {"max_abs_score": …, "mean_abs_score": …,
        "std_score": …, "max_weight_mean": …}, …} for the most recent forward. Scores are those
        the softmax saw (Q Kᵀ/√d_k when attention_scale is on), over allowed positions only."""
        return {
            name: m.score_stats()
            for name, m in self._attention_modules()
            if m.last_weights is not None
        }


# ---------------------------------------------------------------------------- models
class Transformer(nn.Module, _Inspectable):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    Children: src_embed, tgt_embed (`Embeddings`: token table · √d_model + positions, dropout),
    encoder, decoder, generator (Linear d_model → tgt_vocab_size; its weight is the target
    embedding's when cfg.tie_embeddings).

    forward(src (B, L_s), tgt_in (B, L_t), src_padding_mask=None, tgt_padding_mask=None)
        → logits (B, L_t, tgt_vocab_size). Masks (B, L) bool, True = <pad>; the causal mask is
        added inside. Teacher forcing: tgt_in is the target shifted right
        (`<bos> I am a dog`), and logits[:, i] predicts the target's token i (`I am a dog <eos>`).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.src_vocab_size <= 0 or cfg.tgt_vocab_size <= 0:
            raise ValueError(
                f"Transformer: src_vocab_size and tgt_vocab_size must be positive, "
                f"got {cfg.src_vocab_size} and {cfg.tgt_vocab_size}"
            )
        self.cfg = cfg
        emb = dict(
            positional=cfg.positional,
            max_len=cfg.max_len,
            dropout=cfg.dropout,
            scale=cfg.scale_embeddings,
            pad_id=cfg.pad_id,
        )
        self.src_embed = Embeddings(cfg.src_vocab_size, cfg.d_model, **emb)
        self.tgt_embed = Embeddings(cfg.tgt_vocab_size, cfg.d_model, **emb)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        init_linear_weights(self.encoder)
        init_linear_weights(self.decoder)
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size)
        if cfg.tie_embeddings:
            self.generator.weight = self.tgt_embed.token.weight

    def forward(
        self,
        src: Tensor | ArrayLike,
        tgt_in: Tensor | ArrayLike,
        src_padding_mask: Any = None,
        tgt_padding_mask: Any = None,
    ) -> Tensor:
        memory = self.encode(src, src_padding_mask)
        return self.decode(tgt_in, memory, src_padding_mask, tgt_padding_mask)

    def encode(self, src: Tensor | ArrayLike, src_padding_mask: Any = None) -> Tensor:
        """src (B, L_s) ids → memory (B, L_s, d_model)."""
        src = _ids(src, "Transformer.encode")
        pad = _padding(src_padding_mask, src, "Transformer.encode")
        return self.encoder(self.src_embed(src), _key_mask(pad))

    def decode(
        self,
        tgt_in: Tensor | ArrayLike,
        memory: Tensor,
        src_padding_mask: Any = None,
        tgt_padding_mask: Any = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """tgt_in (B, L_t) ids, memory (B, L_s, d_model) → logits (B, L_t, tgt_vocab_size).

        src_padding_mask (B, L_s) blocks <pad> keys of cross-attention; tgt_padding_mask
        (B, L_t) those of self-attention; both True = <pad>.
        cache (from `new_cache()`): decode only the new tokens — tgt_in is then the next
        token(s) (B, 1), placed at positions len(cache)…; self-attention keys and values of
        earlier steps are reused and the memory's are computed at the first step only.
        """
        tgt_in = _ids(tgt_in, "Transformer.decode")
        if memory.ndim != 3 or memory.shape[0] != tgt_in.shape[0]:
            raise ValueError(
                f"Transformer.decode: memory must be (batch, L_src, d_model) with "
                f"the batch of tgt_in {tgt_in.shape}, got {memory.shape}"
            )
        offset = len(cache) if cache is not None else 0
        tgt_pad = _padding(tgt_padding_mask, tgt_in, "Transformer.decode")
        if cache is not None:
            tgt_pad = _grow_padding(cache, tgt_pad, tgt_in.shape)
        src_pad = None
        if src_padding_mask is not None:
            src_pad = (
                src_padding_mask.numpy()
                if isinstance(src_padding_mask, Tensor)
                else np.asarray(src_padding_mask)
            )
            if src_pad.shape != memory.shape[:2]:
                raise ValueError(
                    f"Transformer.decode: src_padding_mask {src_pad.shape} does not "
                    f"match memory {memory.shape[:2]}"
                )
        x = self.tgt_embed(tgt_in, offset)
        x = self.decoder(
            x, memory, _self_mask(tgt_in.shape[1], offset, tgt_pad), _key_mask(src_pad), cache
        )
        return _project(self.generator, x)

    def new_cache(self) -> DecoderCache:
        """An empty KV cache for step-by-step decoding (see `decode`)."""
        return DecoderCache(len(self.decoder.layers))


def _grow_padding(cache, new_pad, shape):
    """Append the new tokens' padding to the cache's; returns the mask for all keys so far."""
    if new_pad is None and cache.key_padding is None:
        return None
    if new_pad is None:
        new_pad = np.zeros(shape, dtype=bool)
    if cache.key_padding is None:
        cache.key_padding = np.zeros((shape[0], len(cache)), dtype=bool)
    cache.key_padding = np.concatenate([cache.key_padding, new_pad], axis=1)
    return cache.key_padding


class EncoderOnly(nn.Module, _Inspectable):
    """BERT-style encoder (encoder-only, for understanding).

    Children: src_embed, encoder, and a head: with num_classes, `classifier` (Linear d_model →
    num_classes) on a pooled vector (pooling "mean" over non-pad tokens, or "first" token);
    without, `output_proj` (Linear d_model → src_vocab_size) predicting every token (masked-token
    training), tied to the embedding when cfg.tie_embeddings.

    forward(ids (B, L), padding_mask=None) → logits (B, num_classes) or (B, L, vocab).
    """

    def __init__(
        self, cfg: TransformerConfig, num_classes: int | None = None, pooling: str = "mean"
    ) -> None:
        super().__init__()
        if pooling not in ("mean", "first"):
            raise ValueError(f"EncoderOnly: pooling must be 'mean' or 'first', got {pooling!r}")
        self.cfg, self.num_classes, self.pooling = cfg, num_classes, pooling
        self.src_embed = Embeddings(
            cfg.src_vocab_size,
            cfg.d_model,
            cfg.positional,
            cfg.max_len,
            cfg.dropout,
            cfg.scale_embeddings,
            cfg.pad_id,
        )
        self.encoder = Encoder(cfg)
        init_linear_weights(self.encoder)
        if num_classes is not None:
            self.classifier = nn.Linear(cfg.d_model, num_classes)
        else:
            self.output_proj = nn.Linear(cfg.d_model, cfg.src_vocab_size)
            if cfg.tie_embeddings:
                self.output_proj.weight = self.src_embed.token.weight

    def encode(self, ids: Tensor | ArrayLike, padding_mask: Any = None) -> Tensor:
        """ids (B, L) → hidden states (B, L, d_model)."""
        ids = _ids(ids, "EncoderOnly")
        pad = _padding(padding_mask, ids, "EncoderOnly")
        return self.encoder(self.src_embed(ids), _key_mask(pad))

    def forward(self, ids: Tensor | ArrayLike, padding_mask: Any = None) -> Tensor:
        h = self.encode(ids, padding_mask)
        if self.num_classes is None:
            return _project(self.output_proj, h)
        if self.pooling == "first":
            pooled = h[:, 0]
        else:  # mean over the non-pad tokens
            keep = (
                np.ones(h.shape[:2], dtype=h.dtype)
                if padding_mask is None
                else (~_padding(padding_mask, _ids(ids, "EncoderOnly"), "EncoderOnly")).astype(
                    h.dtype
                )
            )
            weights = keep / np.maximum(keep.sum(axis=1, keepdims=True), 1.0)
            # a constant Tensor keeps h's dtype (a bare float64 array would become float32)
            pooled = (h * from_numpy(weights[:, :, None])).sum(axis=1)
        return self.classifier(pooled)


class DecoderOnlyLM(nn.Module, _Inspectable):
    """GPT-style language model (decoder-only, autoregressive generation).

    Causal self-attention + FFN blocks (no cross-attention). Children: tgt_embed, decoder,
    generator (Linear d_model → vocab; tied to tgt_embed when cfg.tie_embeddings). The vocabulary
    is cfg.tgt_vocab_size (or src_vocab_size if that is 0); the depth is num_decoder_layers.

    forward(ids (B, L), padding_mask=None, cache=None) → logits (B, L, vocab); logits[:, i]
    predicts token i + 1. `generate` continues a prompt (see `transformer.decoding`).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = cfg.tgt_vocab_size or cfg.src_vocab_size
        if self.vocab_size <= 0:
            raise ValueError("DecoderOnlyLM: set tgt_vocab_size (or src_vocab_size)")
        self.tgt_embed = Embeddings(
            self.vocab_size,
            cfg.d_model,
            cfg.positional,
            cfg.max_len,
            cfg.dropout,
            cfg.scale_embeddings,
            cfg.pad_id,
        )
        self.decoder = Decoder(cfg, cross_attention=False)
        init_linear_weights(self.decoder)
        self.generator = nn.Linear(cfg.d_model, self.vocab_size)
        if cfg.tie_embeddings:
            self.generator.weight = self.tgt_embed.token.weight

    def forward(
        self, ids: Tensor | ArrayLike, padding_mask: Any = None, cache: DecoderCache | None = None
    ) -> Tensor:
        ids = _ids(ids, "DecoderOnlyLM")
        offset = len(cache) if cache is not None else 0
        pad = _padding(padding_mask, ids, "DecoderOnlyLM")
        if cache is not None:
            pad = _grow_padding(cache, pad, ids.shape)
        x = self.tgt_embed(ids, offset)
        x = self.decoder(x, None, _self_mask(ids.shape[1], offset, pad), None, cache)
        return _project(self.generator, x)

    def new_cache(self) -> DecoderCache:
        return DecoderCache(len(self.decoder.layers), cross_attention=False)

    def generate(
        self,
        prompt: Tensor | ArrayLike,
        max_new_tokens: int,
        eos_id: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        use_cache: bool = True,
    ) -> np.ndarray:
        """Continue `prompt` (B, L_p) ids (no padding) by up to max_new_tokens tokens.

        Greedy when temperature, top_k and top_p are all None; otherwise sampling (see
        `decoding.sample`). Returns the new tokens only (B, ≤ max_new_tokens): each row stops
        at its own eos_id (kept) and is padded with cfg.pad_id after it.
        """
        from .decoding import generate

        return generate(
            self,
            prompt,
            max_new_tokens,
            eos_id=eos_id,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            use_cache=use_cache,
        )
