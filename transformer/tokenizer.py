"""Text → token ids → text: a vocabulary with the four special tokens, and a character tokenizer.

A model only sees integers. Each symbol gets an id from a
vocabulary, and four special tokens make batches and generation work:

=========  ====  ====================================================================
``<pad>``  0     fills short sequences up to the batch's length; masked out everywhere
``<bos>``  1     "begin of sequence": the first decoder input, it starts generation
``<eos>``  2     "end of sequence": the model emits it to say it is done
``<unk>``  3     stands in for any symbol the vocabulary does not know
=========  ====  ====================================================================

``<pad>`` is id 0 because the masks and the loss (``ignore_index``) look for it, and 0 is the
id every other library uses too.

    >>> tok = CharTokenizer("0123456789+")
    >>> tok.encode("12+3", add_eos=True)
    [5, 6, 14, 7, 2]
    >>> tok.decode([5, 6, 14, 7, 2, 0, 0])
    '12+3'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from minitensor import Tensor

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


class Vocab:
    """A two-way map between tokens (strings) and ids (ints); ids 0–3 are the specials.

    ``Vocab(["a", "b"])`` → ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, "a"=4, "b"=5.
    Repeated tokens are kept once; a token that is one of the specials is not added twice.
    """

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        self.itos = list(SPECIALS)  # id → token
        self.stoi = {s: i for i, s in enumerate(self.itos)}  # token → id
        for t in tokens:
            self.add(t)

    def add(self, token: str) -> int:
        """Add `token` (if new) and return its id."""
        if not isinstance(token, str):
            raise TypeError(f"Vocab.add: tokens are strings, got {type(token).__name__} {token!r}")
        if token not in self.stoi:
            self.stoi[token] = len(self.itos)
            self.itos.append(token)
        return self.stoi[token]

    # the specials' ids, by name, so code reads `vocab.pad_id` instead of a bare 0
    @property
    def pad_id(self) -> int:
        return self.stoi[PAD]

    @property
    def bos_id(self) -> int:
        return self.stoi[BOS]

    @property
    def eos_id(self) -> int:
        return self.stoi[EOS]

    @property
    def unk_id(self) -> int:
        return self.stoi[UNK]

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def token_to_id(self, token: str) -> int:
        """The id of `token`, or ``<unk>``'s id if it is not in the vocabulary."""
        return self.stoi.get(token, self.unk_id)

    def id_to_token(self, i: int) -> str:
        i = int(i)
        if not 0 <= i < len(self.itos):
            raise IndexError(
                f"Vocab: id {i} is out of range for a vocabulary of {len(self)} tokens"
            )
        return self.itos[i]

    def __repr__(self) -> str:
        shown = ", ".join(repr(t) for t in self.itos[:12])
        more = ", …" if len(self) > 12 else ""
        return f"Vocab({len(self)} tokens: {shown}{more})"


class CharTokenizer:
    """A character-level tokenizer: every character is one token.

    The simplest tokenizer there is, and the right one for the addition, copy and reverse
    tasks, whose "words" are single characters. `alphabet` lists the known characters; any
    other character encodes to ``<unk>``.
    """

    def __init__(self, alphabet: Iterable[str]) -> None:
        self.vocab = Vocab(list(dict.fromkeys(alphabet)))

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def pad_id(self) -> int:
        return self.vocab.pad_id

    @property
    def bos_id(self) -> int:
        return self.vocab.bos_id

    @property
    def eos_id(self) -> int:
        return self.vocab.eos_id

    @property
    def unk_id(self) -> int:
        return self.vocab.unk_id

    def tokenize(self, text: str) -> list[str]:
        """Split text into tokens (here: its characters)."""
        return list(text)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """text → list of ids, optionally framed by ``<bos>`` … ``<eos>``."""
        if not isinstance(text, str):
            raise TypeError(f"CharTokenizer.encode: expected a string, got {type(text).__name__}")
        stoi, unk = self.vocab.stoi, self.vocab.unk_id  # Vocab.token_to_id, once per text
        ids = [stoi.get(c, unk) for c in self.tokenize(text)]
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Sequence[int] | np.ndarray | Tensor, stop_at_eos: bool = True) -> str:
        """ids → text. Stops at the first ``<eos>``, drops ``<pad>`` and ``<bos>``.

        ``<unk>`` is shown as the string ``"<unk>"`` so an unknown symbol stays visible.
        """
        ids = np.asarray(ids.numpy() if hasattr(ids, "numpy") else ids).reshape(-1)
        out = []
        for i in ids.tolist():
            if i == self.eos_id and stop_at_eos:
                break
            if i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            out.append(self.vocab.id_to_token(i))
        return "".join(out)

    def decode_batch(
        self, ids: Sequence[Sequence[int]] | np.ndarray | Tensor, stop_at_eos: bool = True
    ) -> list[str]:
        """(B, L) ids → list of B strings."""
        ids = np.asarray(ids.numpy() if hasattr(ids, "numpy") else ids)
        if ids.ndim != 2:
            raise ValueError(
                f"CharTokenizer.decode_batch: expected ids of shape (B, L), got {ids.shape}"
            )
        return [self.decode(row, stop_at_eos) for row in ids]

    def encode_batch(
        self,
        texts: Iterable[str],
        add_bos: bool = False,
        add_eos: bool = False,
        max_len: int | None = None,
    ) -> np.ndarray:
        """A list of B strings → int64 array (B, L) padded with ``<pad>`` on the right.

        L is the longest encoded text, or `max_len` (longer texts raise: truncating a
        training example silently would change its meaning).
        """
        rows = [self.encode(t, add_bos, add_eos) for t in texts]
        return pad_sequences(rows, self.pad_id, max_len)


def pad_sequences(
    rows: Sequence[Sequence[int]], pad_id: int = 0, max_len: int | None = None
) -> np.ndarray:
    """Lists of ids of different lengths → int64 array (B, L), right-padded with `pad_id`."""
    longest = max((len(r) for r in rows), default=0)
    if max_len is None:
        max_len = longest
    elif longest > max_len:
        raise ValueError(
            f"pad_sequences: a sequence has {longest} tokens, more than max_len={max_len}"
        )
    out = np.full((len(rows), max_len), pad_id, dtype=np.int64)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r
    return out
