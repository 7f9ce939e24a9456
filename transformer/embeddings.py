"""Token embeddings and positional encodings
("Attention Is All You Need", Vaswani et al. 2017, §3.4–3.5).

The input to the first layer is (paper, §3.4 and §3.5)

    x = E[token] · √d_model + PE[pos]        then dropout

- `TokenEmbedding`: the trainable table E ∈ R^{|V| × d_model}, optionally scaled by √d_model.
- `SinusoidalPositionalEncoding` (the paper's, default): a fixed table
      PE(pos, 2i)   = sin(pos / 10000^(2i / d_model)),
      PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model)).
  Values stay in [−1, 1]; each pair of dimensions is a rotation at its own frequency, so
  PE(pos + k) is a linear function of PE(pos) — relative offsets are easy to read
  (paper, §3.5).
- `LearnedPositionalEmbedding`: a trainable table P ∈ R^{max_len × d_model} (BERT, GPT-2).
- `RotaryEmbedding` (RoPE): no vector is added to x; instead the queries and keys of each
  self-attention head are rotated by an angle proportional to their position, so q·k depends on
  the *offset* between the two positions. It is applied inside `MultiHeadAttention`.
- positional="none": the ablation — attention alone is blind to order: it is a function of
  the set of tokens, and permuting the inputs permutes the outputs.

Attention itself does not know the order of the tokens (paper, §3.5); these are the only places
where order enters the model.
"""

from __future__ import annotations

import math

import numpy as np

from minitensor import Tensor, from_numpy, nn, no_grad
from minitensor.nn import init


def sinusoidal_table(max_len: int, d_model: int) -> np.ndarray:
    """The paper's PE table (max_len, d_model), float64: sin on even, cos on odd dimensions."""
    pos = np.arange(max_len)[:, None]
    two_i = np.arange(0, d_model, 2)[None, :]
    angle = pos / np.power(10000.0, two_i / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe


class _Table:
    """A constant float64 table, handed out in the dtype asked for (each cast made once).
    `name` labels the rows it hands out (the graph viewer shows "PE[0:7]", not "input")."""

    def __init__(self, array, name):
        self._by_dtype = {np.dtype(np.float64): np.asarray(array, dtype=np.float64)}
        self.name = name

    def get(self, dtype, start=0, stop=None):
        """Rows start:stop as a constant Tensor (no gradient) of `dtype`."""
        dtype = np.dtype(dtype)
        if dtype not in self._by_dtype:
            self._by_dtype[dtype] = self._by_dtype[np.dtype(np.float64)].astype(dtype)
        rows = from_numpy(self._by_dtype[dtype][start:stop])
        rows.name = self.name if stop is None and start == 0 else f"{self.name}[{start}:{stop}]"
        return rows


def _check_length(module, length, offset, max_len):
    if offset + length > max_len:
        raise ValueError(
            f"{type(module).__name__} in {module.path or 'model'}: positions "
            f"{offset}..{offset + length - 1} exceed max_len={max_len}; build the "
            f"model with a larger TransformerConfig.max_len"
        )


class TokenEmbedding(nn.Embedding):
    """ids (B, L) → E[ids] · scale, (B, L, d_model), with scale = √d_model (paper) or 1.

    With scale on, E is initialised N(0, 1/d_model) so that E·√d_model is N(0, 1), the size of
    the positional encoding; otherwise N(0, 1) (torch's default). The <pad> row is zero and
    receives no gradient. The table is `.weight` (vocab_size, d_model).
    """

    def __init__(
        self, vocab_size: int, d_model: int, pad_id: int | None = None, scale: bool = True
    ) -> None:
        super().__init__(vocab_size, d_model, padding_idx=pad_id)
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight, 0.0, 1.0 / getattr(self, "scale", 1.0))
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, ids: Tensor | np.ndarray) -> Tensor:
        x = super().forward(ids)
        return x * self.scale if self.scale != 1.0 else x

    def extra_repr(self) -> str:
        return super().extra_repr() + f", scale={self.scale:.4g}"


class SinusoidalPositionalEncoding(nn.Module):
    """x (B, L, d_model) → x + PE[offset : offset + L]. The table is fixed (no parameters, not
    in the state dict): kept in float64 and used in x's dtype."""

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.max_len = max_len
        self.table = _Table(sinusoidal_table(max_len, d_model), "PE")

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = x.shape[1]
        _check_length(self, length, offset, self.max_len)
        # a constant, not a graph input: the table gets no gradient
        return x + self.table.get(x.dtype, offset, offset + length)


class LearnedPositionalEmbedding(nn.Module):
    """x (B, L, d_model) → x + P[offset : offset + L], P a trainable (max_len, d_model) table."""

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(np.zeros((max_len, d_model), dtype=np.float32))
        init.normal_(self.weight, 0.0, 0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = x.shape[1]
        _check_length(self, length, offset, self.max_len)
        return x + self.weight[offset : offset + length]


class RotaryEmbedding(nn.Module):
    """Rotary positions (RoPE) for q or k of shape (B, h, L, d_k).

    Pair dimension i with i + d_k/2 and rotate each pair by angle pos · θ_i,
    θ_i = 10000^(−2i/d_k):   x ↦ x ⊙ cos + rotate_half(x) ⊙ sin,
    rotate_half(x) = [−x₂, x₁].
    Rotating q at position m and k at position n makes q·k depend only on m − n. rotate_half is
    one matmul with a fixed signed permutation matrix (its gradient is the transpose).
    """

    def __init__(self, d_k: int, max_len: int = 512, base: float = 10000.0) -> None:
        super().__init__()
        if d_k % 2:
            raise ValueError(f"RotaryEmbedding: the head size d_k={d_k} must be even")
        self.d_k, self.max_len = d_k, max_len
        half = d_k // 2
        theta = base ** (-np.arange(half) * 2.0 / d_k)
        angle = np.arange(max_len)[:, None] * theta[None, :]
        angle = np.concatenate([angle, angle], axis=1)  # (max_len, d_k)
        self.cos, self.sin = _Table(np.cos(angle), "cos"), _Table(np.sin(angle), "sin")
        rot = np.zeros((d_k, d_k))
        rot[np.arange(half) + half, np.arange(half)] = -1.0  # out[:, i] = −x[:, i + half]
        rot[np.arange(half), np.arange(half) + half] = 1.0  # out[:, i + half] = x[:, i]
        self.rotate_half = _Table(rot, "rotate_half")

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = x.shape[-2]
        _check_length(self, length, offset, self.max_len)
        cos = self.cos.get(x.dtype, offset, offset + length)
        sin = self.sin.get(x.dtype, offset, offset + length)
        return x * cos + (x @ self.rotate_half.get(x.dtype)) * sin


class Embeddings(nn.Module):
    """The input block of a stack: ids (B, L) → dropout(TokenEmbedding(ids) + positions),
    (B, L, d_model).

    Children: `token` (TokenEmbedding), `position` (sinusoidal or learned; absent for
    "rotary", which acts inside attention, and for "none"), `dropout`. `offset` shifts the
    positions (decoding with a KV cache feeds one token at position `offset`).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        positional: str = "sinusoidal",
        max_len: int = 512,
        dropout: float = 0.0,
        scale: bool = True,
        pad_id: int | None = None,
    ) -> None:
        super().__init__()
        self.token = TokenEmbedding(vocab_size, d_model, pad_id=pad_id, scale=scale)
        self.positional = positional
        if positional == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(d_model, max_len)
        elif positional in ("rotary", "none"):
            self.position = None
        else:
            raise ValueError(f"Embeddings: unknown positional {positional!r}")
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor | np.ndarray, offset: int = 0) -> Tensor:
        ids = ids.numpy() if isinstance(ids, Tensor) else np.asarray(ids)
        if ids.ndim != 2:
            raise ValueError(
                f"Embeddings in {self.path or 'model'}: ids must be (batch, length), "
                f"got shape {ids.shape}"
            )
        x = self.token(ids)
        if self.position is not None:
            x = self.position(x, offset)
        return self.dropout(x)

    def extra_repr(self) -> str:
        return f"positional={self.positional!r}"
