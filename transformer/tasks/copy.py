"""Copy and reverse: the smallest sequence-to-sequence tasks (``abca`` → ``abca`` / ``acba``).

Strings have random lengths in [min_len, max_len], so batches are padded with ``<pad>`` and the
padding masks and the loss's ``ignore_index`` get exercised. Copying needs attention to find the
source position that matches the output position; reversing needs it to count from the end.
"""

import numpy as np

from ..tokenizer import CharTokenizer


class CopyTask:
    """Random strings over `alphabet`; the target is the source itself (``transform``)."""

    def __init__(self, alphabet="abcdefgh", min_len=1, max_len=8):
        if not 1 <= min_len <= max_len:
            raise ValueError(
                f"{type(self).__name__}: need 1 <= min_len <= max_len, got {min_len}, {max_len}"
            )
        self.alphabet, self.min_len, self.max_len = alphabet, min_len, max_len
        self.tokenizer = CharTokenizer(alphabet)
        self.src_len = max_len
        self.tgt_len = max_len + 1  # ... plus <eos>

    def transform(self, text):
        return text

    def sample(self, n, rng):
        """n random source strings."""
        lengths = rng.integers(self.min_len, self.max_len + 1, size=n)
        letters = np.array(list(self.alphabet))
        return ["".join(letters[rng.integers(0, len(letters), size=k)]) for k in lengths]

    def encode(self, texts):
        """Strings → (src (n, max_len), tgt (n, max_len + 1)) int64 ids, right-padded."""
        tok = self.tokenizer
        src = tok.encode_batch(texts, max_len=self.src_len)
        tgt = tok.encode_batch(
            [self.transform(t) for t in texts], add_eos=True, max_len=self.tgt_len
        )
        return src, tgt

    def batch(self, n, rng):
        return self.encode(self.sample(n, rng))

    def correct(self, pred_ids, texts):
        """Bool array: which greedy outputs equal the expected target string."""
        return np.array(
            [p == self.transform(t) for p, t in zip(self.tokenizer.decode_batch(pred_ids), texts)]
        )


class ReverseTask(CopyTask):
    """Random strings; the target is the source reversed."""

    def transform(self, text):
        return text[::-1]
