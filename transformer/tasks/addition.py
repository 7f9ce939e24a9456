"""The addition task: ``123+456`` → ``579``, a good first Transformer to build:
the answer is exact, so every mistake shows.

Format (fixed width, so no padding is needed and the masks stay simple):

- source: both operands zero-padded to `digits` digits: ``023+456`` (2·digits + 1 tokens);
- target: the sum zero-padded to digits + 1 digits, then ``<eos>``: ``0479<eos>``.

With ``reverse_answer=True`` (the default) the target's digits are written least-significant
first: 23 + 456 = 479 → ``9740<eos>``. That is the order a person adds in: each output digit
depends on two input digits and the carry from the digit just emitted, which the decoder can
read back through its own causal self-attention. In normal order the first digit depends on
every carry to its right, which is harder to learn (it took more steps in our PyTorch
reference: benchmarks/README.md, "Figures behind the source's reasoning"). Everything a
human reads — `describe`, the demo's printout — shows the sum in normal order.

The held-out problems are drawn once from their own seed and are never used for training:
`sample` redraws any pair that belongs to them.
"""

import numpy as np

from ..tokenizer import CharTokenizer


class AdditionTask:
    """Random `digits`-digit addition problems, encoded for an encoder-decoder model.

    `heldout_size` problems (default 1,000, or a tenth of all problems if that is less; drawn
    with `heldout_seed`, independent of the training seed) form a fixed evaluation set;
    `sample` never returns them.
    """

    def __init__(self, digits=3, reverse_answer=True, heldout_size=None, heldout_seed=1234):
        if not 1 <= digits <= 9:
            raise ValueError(f"AdditionTask: digits must be in 1..9, got {digits}")
        self.digits = digits
        self.reverse_answer = reverse_answer
        self.tokenizer = CharTokenizer("0123456789+")
        self.high = 10**digits  # operands are in [0, high)
        self.src_len = 2 * digits + 1  # "123+456"
        self.answer_len = digits + 1  # "0579": the sum has at most digits + 1 digits
        self.tgt_len = self.answer_len + 1  # ... plus <eos>
        n_pairs = self.high * self.high
        if heldout_size is None:  # 1,000 problems, or a tenth of them all if fewer
            heldout_size = min(1000, n_pairs // 10)
        if heldout_size > n_pairs // 2:
            raise ValueError(
                f"AdditionTask: heldout_size {heldout_size} leaves too few of the "
                f"{n_pairs} {digits}-digit problems to train on"
            )
        self._heldout_keys = self._draw_unique_keys(
            heldout_size, np.random.default_rng(heldout_seed)
        )
        self.heldout_a, self.heldout_b = np.divmod(self._heldout_keys, self.high)
        self._id_of_digit = np.array(self.tokenizer.encode("0123456789"), dtype=np.int64)
        (self._plus_id,) = self.tokenizer.encode("+")

    # ------------------------------------------------------------------ problems
    def _draw_unique_keys(self, n, rng):
        """n distinct problems as keys a·high + b, sorted."""
        keys = np.unique(rng.integers(0, self.high * self.high, size=n))
        while keys.size < n:
            keys = np.unique(np.concatenate([keys, rng.integers(0, self.high * self.high, size=n)]))
        return np.sort(rng.permutation(keys)[:n])

    def is_heldout(self, a, b):
        """Bool array: which pairs (a, b) belong to the held-out set."""
        keys = np.asarray(a, dtype=np.int64) * self.high + np.asarray(b, dtype=np.int64)
        if self._heldout_keys.size == 0:
            return np.zeros(keys.shape, dtype=bool)
        pos = np.minimum(np.searchsorted(self._heldout_keys, keys), self._heldout_keys.size - 1)
        return self._heldout_keys[pos] == keys

    def sample(self, n, rng):
        """n training problems (a, b), uniform over all pairs except the held-out ones."""
        a = rng.integers(0, self.high, size=n)
        b = rng.integers(0, self.high, size=n)
        bad = self.is_heldout(a, b)
        while bad.any():  # rare: 1,000 held-out of 1,000,000 pairs at 3 digits
            a[bad] = rng.integers(0, self.high, size=int(bad.sum()))
            b[bad] = rng.integers(0, self.high, size=int(bad.sum()))
            bad = self.is_heldout(a, b)
        return a, b

    # ------------------------------------------------------------------ text
    def problem_text(self, a, b):
        """'023+456'."""
        return f"{int(a):0{self.digits}d}+{int(b):0{self.digits}d}"

    def answer_text(self, total):
        """The target string the model learns: the zero-padded sum, reversed if reverse_answer."""
        s = f"{int(total):0{self.answer_len}d}"
        return s[::-1] if self.reverse_answer else s

    def read_answer(self, text):
        """Model output text → the integer it means, or None if it is not a well-formed answer."""
        if len(text) != self.answer_len or not text.isdigit():
            return None
        return int(text[::-1] if self.reverse_answer else text)

    def describe(self, a, b, predicted_text=None):
        """'23+456=479' (normal order), with the model's answer if given: '… model: 479 ✓'."""
        line = f"{int(a)}+{int(b)}={int(a) + int(b)}"
        if predicted_text is None:
            return line
        value = self.read_answer(predicted_text)
        ok = value == int(a) + int(b)
        shown = str(value) if value is not None else repr(predicted_text)
        order = f" (emitted {predicted_text!r}, reversed)" if self.reverse_answer else ""
        return f"{line:<16} model: {shown:<6} {'ok' if ok else 'WRONG'}{order}"

    # ------------------------------------------------------------------ ids
    def encode(self, a, b):
        """Problems → (src (n, src_len), tgt (n, tgt_len)) int64 ids; tgt ends with <eos>.

        The ids the tokenizer gives `problem_text` and `answer_text` (the tests check it),
        worked out with numpy a digit column at a time: every training step draws a fresh
        batch, and writing out and tokenizing its 2n strings one by one cost as much as a
        layer of the demo's model."""
        a, b = self._operands(a, b)
        plus = np.full((a.size, 1), self._plus_id, dtype=np.int64)
        eos = np.full((a.size, 1), self.tokenizer.eos_id, dtype=np.int64)
        src = np.concatenate(
            [self._digit_ids(a, self.digits), plus, self._digit_ids(b, self.digits)], 1
        )
        answer = self._digit_ids(a + b, self.answer_len)
        if self.reverse_answer:
            answer = answer[:, ::-1]
        return src, np.concatenate([answer, eos], 1)

    def _operands(self, a, b):
        """a, b as 1-D int64 arrays of one length, every entry in [0, high)."""
        a, b = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (a, b))
        if a.shape != b.shape:
            raise ValueError(f"AdditionTask.encode: {a.size} first operands, {b.size} second ones")
        if a.size and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= self.high):
            raise ValueError(
                f"AdditionTask.encode: operands must be in 0..{self.high - 1} "
                f"({self.digits} digits), got {min(a.min(), b.min())}..{max(a.max(), b.max())}"
            )
        return a, b

    def _digit_ids(self, numbers, width):
        """The ids of `numbers` (n,) written with `width` digits, zero-padded, most significant
        first: (n, width)."""
        place_values = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)  # 100, 10, 1
        return self._id_of_digit[numbers[:, None] // place_values % 10]

    def batch(self, n, rng):
        """A fresh training batch of n problems: (src, tgt)."""
        return self.encode(*self.sample(n, rng))

    def heldout(self):
        """The fixed evaluation set: (src, tgt)."""
        return self.encode(self.heldout_a, self.heldout_b)

    def correct(self, pred_ids, a, b):
        """Bool array: which predicted id rows (greedy output, (n, ≤ tgt_len)) are the right sum."""
        texts = self.tokenizer.decode_batch(pred_ids)
        return np.array([self.read_answer(t) == int(x) + int(y) for t, x, y in zip(texts, a, b)])
