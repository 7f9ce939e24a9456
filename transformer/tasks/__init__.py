"""Small synthetic sequence-to-sequence tasks a Transformer learns in seconds to minutes.

- `AdditionTask`: ``123+456`` → ``579`` (a small first project: the rule is exact, so
  mistakes are easy to see).
- `CopyTask` / `ReverseTask`: ``abcd`` → ``abcd`` / ``dcba``, with variable lengths and padding.

Each task owns a character tokenizer and turns numbers or strings into padded id arrays:
``src`` (B, L_src) and ``tgt`` (B, L_tgt) where every target row ends in ``<eos>``.
`transformer.training.shift_right` makes the decoder input from ``tgt``.
"""

from .addition import AdditionTask
from .copy import CopyTask, ReverseTask

__all__ = ["AdditionTask", "CopyTask", "ReverseTask"]
