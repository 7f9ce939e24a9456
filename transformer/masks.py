"""Attention masks ("Attention Is All You Need", §3.2.3).
**Convention everywhere in this project: bool True = BLOCKED.**

A mask is added to the attention scores before the softmax (the paper, §3.2.3: "masking out
(setting to −∞) all values in the input of the softmax"): a blocked position gets −∞, so its
weight exp(−∞) = 0. Two masks matter:

- the **padding mask** hides `<pad>` keys, which carry no meaning;
- the **causal mask** hides future positions, so position i sees only j ≤ i (§3.2.3, "to
  preserve the auto-regressive property").

Bool True = blocked is the meaning of `torch.nn.Transformer`'s masks and `key_padding_mask`.
**The PyTorch trap:** `torch.nn.functional.scaled_dot_product_attention` reads a
bool `attn_mask` the other way round, True = *allowed*. Mixing the two conventions silently
inverts the mask. Convert such a mask with `from_allowed_mask` before passing it here.

Float masks are additive: 0 where allowed, −∞ (or a large negative number) where blocked; they
are accepted wherever a bool mask is, and `to_additive` converts a bool mask to one.

Masks are plain numpy arrays: they carry no gradient, and a model builds each one once per
forward (not with many small graph ops) and passes it to attention as a constant. The rules
themselves (one normaliser, one causal alignment with an explicit offset, one way to combine)
live beside the attention core, in `minitensor.ops.attention`; this module gives them the
names and shapes the Transformer's code uses.
"""

from __future__ import annotations

import numpy as np

import minitensor.functional as F
from minitensor import Tensor
from minitensor.ops import attention as A
from minitensor.typing import ArrayLike, DType


def _array(mask, name):
    # one rule for every mask consumer: minitensor's (bool blocks, float adds, others refused)
    return F.as_attention_mask(mask, name)


def padding_mask(ids: Tensor | ArrayLike, pad_id: int = 0) -> np.ndarray:
    """True where `ids` is the <pad> id: (B, L) int ids → (B, L) bool, **True = blocked**.

    Used as a key padding mask: queries never attend to <pad> keys.
    """
    ids = ids.numpy() if isinstance(ids, Tensor) else np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"padding_mask: ids must be (batch, length), got shape {ids.shape}")
    return ids == pad_id


def causal_mask(length: int, key_length: int | None = None) -> np.ndarray:
    """(L, L) bool, **True above the diagonal = blocked**: position i may attend to j ≤ i only.

    With key_length = L_k > L (queries are the last L of L_k positions, as when decoding with a
    KV cache) the mask is (L, L_k) and query i sits at position i + L_k − L. The array is
    cached and read-only.

    >>> causal_mask(3).astype(int)
    array([[0, 1, 1],
           [0, 0, 1],
           [0, 0, 0]])
    """
    key_length = length if key_length is None else key_length
    if length <= 0 or key_length < length:
        raise ValueError(f"causal_mask: need 0 < length <= key_length, got {length}, {key_length}")
    return A.causal_mask(length, key_length, offset=key_length - length)


def from_allowed_mask(allowed: Tensor | ArrayLike) -> np.ndarray:
    """Convert a bool mask in the **True = allowed** convention into ours (True = blocked).

    ⚠ The PyTorch trap: `F.scaled_dot_product_attention`'s bool attn_mask, and masks
    written as `(tgt != pad)` or `torch.tril(ones)` (as in many tutorials' `create_mask`), mean
    True = *may attend*. This project, like `nn.Transformer`, means True = *blocked*. Passing an
    "allowed" mask unconverted blocks exactly what should be seen. This function is `~allowed`.
    """
    allowed = _array(allowed, "from_allowed_mask")
    if allowed.dtype != np.bool_:
        raise TypeError(
            f"from_allowed_mask: expects a bool mask (True = allowed), got "
            f"{allowed.dtype}; a float mask is additive and needs no conversion"
        )
    return ~allowed


def to_additive(mask: Tensor | ArrayLike, dtype: DType = np.float32) -> np.ndarray:
    """A bool mask (True = blocked) as an additive float mask: 0 allowed, −inf blocked."""
    return A.to_additive(_array(mask, "to_additive"), dtype)


def combine_masks(
    key_padding_mask: Tensor | ArrayLike | None = None,
    attn_mask: Tensor | ArrayLike | None = None,
    n_heads: int | None = None,
) -> np.ndarray | None:
    """Combine a key padding mask and a (query, key) mask into one mask for the scores.

    key_padding_mask: (B, L_k) bool or float, **True = blocked** (a <pad> key).
    attn_mask: (L_q, L_k) or (B, L_q, L_k) or (B, h, L_q, L_k), bool (True = blocked) or
        additive float — e.g. `causal_mask(L)`.
    Returns None (nothing blocked) or an array broadcastable to the scores (B, h, L_q, L_k):
    (B, 1, 1, L_k), (1, 1, L_q, L_k) or (B, 1, L_q, L_k) etc. Two bool masks combine with OR
    (blocked if either blocks); if either is float, both become additive and are summed.
    The heads share the mask, so its head axis stays 1 and broadcasting does the rest
    (n_heads, if given, only checks a 4-D attn_mask). `broadcast_mask` materialises the result.
    """
    parts = []
    if key_padding_mask is not None:
        kpm = _array(key_padding_mask, "combine_masks")
        if kpm.ndim != 2:
            raise ValueError(
                f"combine_masks: key_padding_mask must be (batch, key_length), got "
                f"shape {kpm.shape}"
            )
        parts.append(kpm[:, None, None, :])
    if attn_mask is not None:
        am = _array(attn_mask, "combine_masks")
        if am.ndim == 2:
            am = am[None, None]
        elif am.ndim == 3:
            am = am[:, None]
        elif am.ndim != 4:
            raise ValueError(
                f"combine_masks: attn_mask must be (L_q, L_k), (B, L_q, L_k) or "
                f"(B, h, L_q, L_k), got shape {am.shape}"
            )
        if n_heads is not None and am.shape[1] not in (1, n_heads):
            raise ValueError(
                f"combine_masks: attn_mask has {am.shape[1]} heads, the attention has {n_heads}"
            )
        parts.append(am)
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    a, b = parts
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"combine_masks: key_padding_mask {kpm.shape} and attn_mask "
            f"{np.shape(attn_mask)} do not fit together (their key lengths or "
            f"batch sizes differ)"
        ) from None
    return A.combine(a, b, "combine_masks")


def broadcast_mask(
    mask: Tensor | ArrayLike | None, batch: int, n_heads: int, l_q: int, l_k: int
) -> np.ndarray:
    """Materialise a mask as (B, h, L_q, L_k) (for plots and tests; attention itself
    broadcasts lazily)."""
    if mask is None:
        return np.zeros((batch, n_heads, l_q, l_k), dtype=bool)
    return np.broadcast_to(_array(mask, "broadcast_mask"), (batch, n_heads, l_q, l_k))


def fully_masked_rows(mask: Tensor | ArrayLike, l_k: int | None = None) -> np.ndarray:
    """Bool (…, L_q): rows in which every key is blocked. Their attention weights are zero
    (the fused softmax's rule; a naive softmax gives NaN there: exp(−∞ − (−∞)))."""
    mask = _array(mask, "fully_masked_rows")
    blocked = mask if mask.dtype == np.bool_ else np.isneginf(mask)
    return blocked.all(axis=-1)
