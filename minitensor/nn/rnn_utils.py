"""torch.nn.utils.rnn's pad_sequence: sequences of different lengths made one batch.

Importable as torch's: `from minitensor.nn.utils.rnn import pad_sequence` (minitensor/nn
registers this module under that name).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import functional as F
from ..errors import op_error
from ..tensor import Tensor


def pad_sequence(
    sequences: Tensor | Sequence[Tensor],
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:
    """B tensors (L_i, *) → one (L_max, B, *), or (B, L_max, *) with batch_first: each
    sequence padded with padding_value up to the longest, after its end (padding_side='right')
    or before its start ('left'). Differentiable in every sequence.

    >>> pad_sequence([mt.ones(3, 2), mt.ones(1, 2)], batch_first=True).shape
    (2, 3, 2)
    """
    if padding_side not in ("left", "right"):
        raise op_error(
            "pad_sequence",
            f"padding_side must be 'left' or 'right', got {padding_side!r}",
            ValueError,
        )
    sequences = list(sequences)  # a tensor (B, L, *) counts as B sequences, as torch
    if not sequences:
        raise op_error("pad_sequence", "received an empty list of sequences", RuntimeError)
    trailing = {tuple(s.shape[1:]) for s in sequences}
    if len(trailing) > 1 or any(s.ndim == 0 for s in sequences):
        raise op_error(
            "pad_sequence",
            f"every sequence must be (L_i, *) with one trailing shape; got shapes "
            f"{[tuple(s.shape) for s in sequences]}",
        )
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        # F.pad's pairs run from the last axis backwards: (0, 0) for each trailing axis
        ends = (0, missing) if padding_side == "right" else (missing, 0)
        padded.append(F.pad(s, (0, 0) * (s.ndim - 1) + ends, value=padding_value))
    return F.stack(padded, axis=0 if batch_first else 1)
