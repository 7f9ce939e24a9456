"""transformer: the original encoder-decoder Transformer, built only from minitensor.

    from transformer import Transformer, TransformerConfig
    cfg = TransformerConfig.small(src_vocab_size=14, tgt_vocab_size=14)
    model = Transformer(cfg)
    logits = model(src, tgt_in, src_padding_mask, tgt_padding_mask)   # (B, L_tgt, V)

Files follow the parts of the model: config, embeddings (token + positions), masks, attention,
layers, models, decoding (greedy, beam, sampling, KV cache), interop (to and from PyTorch).
Masks everywhere: bool True = blocked.
"""

from . import masks
from .attention import AttentionCache, MultiHeadAttention
from .config import TransformerConfig
from .decoding import beam_search, generate, greedy_decode, sample
from .embeddings import (
    Embeddings,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from .layers import DecoderLayer, EncoderLayer, FeedForward
from .masks import causal_mask, combine_masks, from_allowed_mask, padding_mask
from .models import (
    Decoder,
    DecoderCache,
    DecoderOnlyLM,
    Encoder,
    EncoderOnly,
    LayerCache,
    Transformer,
)

__all__ = [
    "Transformer",
    "TransformerConfig",
    "DecoderOnlyLM",
    "EncoderOnly",
    "Encoder",
    "Decoder",
    "EncoderLayer",
    "DecoderLayer",
    "FeedForward",
    "MultiHeadAttention",
    "Embeddings",
    "TokenEmbedding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "sinusoidal_table",
    "masks",
    "padding_mask",
    "causal_mask",
    "combine_masks",
    "from_allowed_mask",
    "AttentionCache",
    "LayerCache",
    "DecoderCache",
    "greedy_decode",
    "beam_search",
    "sample",
    "generate",
]
