"""`TransformerConfig`: every size and switch of a model in one dataclass.

The defaults are the paper's base model ("Attention Is All You Need", Table 3): N = 6 encoder and
6 decoder layers, d_model = 512, h = 8 heads, d_ff = 2048, dropout 0.1, ReLU, Post-Norm, sinusoidal
positions, embeddings scaled by √d_model. `TransformerConfig.small(...)` is the size the addition
task and the tests use.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

ACTIVATIONS = ("relu", "gelu", "silu", "swiglu", "geglu")
POSITIONALS = ("sinusoidal", "learned", "rotary", "none")


@dataclass
class TransformerConfig:
    """Sizes and switches of a Transformer (any of the three shapes).

    src_vocab_size, tgt_vocab_size: vocabulary sizes (an encoder-only or decoder-only model uses
        src_vocab_size and tgt_vocab_size respectively; give both for the encoder-decoder).
    d_model: width of every token vector; n_heads: attention heads, d_k = d_v = d_model / n_heads.
    num_encoder_layers, num_decoder_layers: N of each stack.
    d_ff: hidden width of the position-wise feed-forward network.
    dropout: after the embedding sum, on attention weights, inside the FFN and on each sub-layer
        output before the residual add (as the paper and torch.nn.Transformer do).
    activation: "relu" (paper) | "gelu" | "silu" | "swiglu" / "geglu" (gated FFN: act(x W_gate) ⊙
        x W_1) — or your own: a function on Tensors (``my_gelu(x)``), an `nn.Module` class (one
        instance per FFN) or an `mt.Function` class (its ``apply`` is called). A config with
        your own activation saves its name only (`to_dict`); rebuild it by passing the callable.
    norm_first: False = Post-Norm x = LN(x + F(x)) (paper); True = Pre-Norm x = x + F(LN(x)).
    final_norm: a LayerNorm after the last layer of each stack. torch.nn.Transformer always has
        one (for both norm_first settings), so True is the default and keeps parity with it; the
        paper's Post-Norm has none (each layer already ends in a LayerNorm): set False for that.
        Pre-Norm needs it, or the residual stream reaches the output un-normalised.
    positional: "sinusoidal" (paper) | "learned" | "rotary" (rotates q and k in self-attention)
        | "none" (the ablation: attention alone cannot see order).
    scale_embeddings: multiply token embeddings by √d_model (paper). Token embeddings are then
        initialised N(0, 1/d_model), so that scaled they are N(0, 1), on the scale of the
        positional encoding; without it they are N(0, 1) as in torch (the README's ablation: a
        √d_model scale on N(0, 1) embeddings drowns the positions, and the addition task does
        not learn).
    attention_scale: divide scores by √d_k (paper, §3.2.1); False is the ablation: for unit
        variance q and k a dot product has variance d_k, so unscaled scores grow with d_k and
        saturate the softmax.
    max_len: longest sequence the positional tables cover.
    pad_id: the <pad> id; its embedding row starts at zero and gets no gradient.
    tie_embeddings: share the output projection's weight with the target token embedding.
    layer_norm_eps: ε inside every LayerNorm.
    """

    src_vocab_size: int = 0
    tgt_vocab_size: int = 0
    d_model: int = 512
    n_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    activation: object = "relu"  # a name in ACTIVATIONS, or a callable
    norm_first: bool = False
    positional: str = "sinusoidal"
    scale_embeddings: bool = True
    attention_scale: bool = True
    max_len: int = 512
    pad_id: int = 0
    tie_embeddings: bool = False
    layer_norm_eps: float = 1e-5
    final_norm: bool = True

    def __post_init__(self) -> None:
        if self.d_model <= 0 or self.n_heads <= 0 or self.d_model % self.n_heads:
            raise ValueError(
                f"TransformerConfig: d_model={self.d_model} must be a positive "
                f"multiple of n_heads={self.n_heads} (each head gets "
                f"d_model / n_heads)"
            )
        check_activation(self.activation, "TransformerConfig")
        if self.positional not in POSITIONALS:
            raise ValueError(
                f"TransformerConfig: positional must be one of {POSITIONALS}, "
                f"got {self.positional!r}"
            )
        if self.positional == "rotary" and self.d_k % 2:
            raise ValueError(
                f"TransformerConfig: rotary positions need an even head size, d_k = {self.d_k}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TransformerConfig: dropout must be in [0, 1), got {self.dropout}")
        for name in ("d_ff", "max_len"):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"TransformerConfig: {name} must be positive, got {getattr(self, name)}"
                )

    @property
    def d_k(self) -> int:
        """Size of one head's queries, keys and values: d_model / n_heads."""
        return self.d_model // self.n_heads

    @classmethod
    def paper(cls, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> TransformerConfig:
        """The base model of the paper: N = 6, d_model = 512, h = 8, d_ff = 2048, dropout 0.1."""
        return cls(src_vocab_size, tgt_vocab_size, **overrides)

    @classmethod
    def small(cls, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> TransformerConfig:
        """The addition-task size: d_model 128, 4 heads, 2 + 2 layers, d_ff 512."""
        base = dict(
            d_model=128,
            n_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            d_ff=512,
            dropout=0.1,
            max_len=256,
        )
        return cls(src_vocab_size, tgt_vocab_size, **{**base, **overrides})

    @classmethod
    def tiny(cls, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> TransformerConfig:
        """Small enough for gradchecks and quick tests: d_model 16, 2 heads, 1 + 1 layers."""
        base = dict(
            d_model=16,
            n_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=32,
            dropout=0.0,
            max_len=64,
        )
        return cls(src_vocab_size, tgt_vocab_size, **{**base, **overrides})

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with some fields changed (for ablations: cfg.replace(positional="none"))."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data (for checkpoints); your own activation by its name only:
        ``"custom:my_module.my_gelu"``, which `TransformerConfig(**d)` refuses with a message
        saying to pass the callable again."""
        d = asdict(self)
        if callable(self.activation):
            d["activation"] = CUSTOM_PREFIX + activation_name(self.activation, qualified=True)
        return d


CUSTOM_PREFIX = "custom:"


def activation_name(activation: Any, qualified: bool = False) -> str:
    """'relu', or a callable's name ('my_gelu'; with qualified: 'my_module.my_gelu')."""
    if isinstance(activation, str):
        return activation
    name = getattr(activation, "__qualname__", None) or type(activation).__name__
    module = getattr(activation, "__module__", None)
    return f"{module}.{name}" if qualified and module else name


def check_activation(activation: Any, where: str) -> None:
    """A built-in name or your own callable; a clear error otherwise."""
    if callable(activation) or activation in ACTIVATIONS:
        return
    if isinstance(activation, str) and activation.startswith(CUSTOM_PREFIX):
        raise ValueError(
            f"{where}: this config was saved with your own activation "
            f"{activation[len(CUSTOM_PREFIX) :]}; a checkpoint stores only its "
            f"name: pass it again: "
            f"TransformerConfig(**{{**d, 'activation': my_gelu}})"
        )
    raise ValueError(
        f"{where}: activation must be one of {ACTIVATIONS} or a callable (a "
        f"function on Tensors, an nn.Module class or an mt.Function class), got "
        f"{activation!r}"
    )
