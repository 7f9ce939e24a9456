"""Autoregressive decoding: greedy, beam search, sampling — with a KV cache.

At inference there is no target to feed: the decoder starts from `<bos>`, predicts the next
token, appends it, and repeats until it emits `<eos>` or reaches max_len. Training is parallel
over the target; generation is not, and that is where a model's latency goes.

The **KV cache**: without it, step t re-runs the decoder over all t tokens so far. With it, step
t feeds only the newest token; each self-attention appends that token's key and value to the
ones it kept, and each cross-attention computes the memory's keys and values once. The cached
and uncached paths give the same tokens (logits agree to ~1e-6).

Conventions of every function here:
- Outputs are ids (B, ≤ max_len) **excluding the leading <bos>**.
- Each sequence stops at its own <eos>, which is **kept**; after it the row is padded with
  cfg.pad_id. The output is as long as the longest row (at most max_len); an empty batch
  (B = 0) gives an empty (0, 0) output.
- src_padding_mask: (B, L_src) bool, True = <pad>.
- The model runs as in eval mode (no dropout) and without a graph, in the calling thread only:
  its `training` flag is never changed, so another thread may train or decode it meanwhile.
- Logits no token can be chosen from (NaN, +inf, or a row that is -inf everywhere) raise
  FloatingPointError naming the function, the step and the rows, never a silent <pad>.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np

from minitensor import Tensor, from_numpy, nn, no_grad
from minitensor.state import state
from minitensor.typing import ArrayLike


# ---------------------------------------------------------------------------- steppers
class _Stepper:
    """Next-token logits of a model given the tokens so far, checked before anyone chooses
    from them. Subclasses implement `_forward(ys)` → logits (B, V) float64."""

    def __init__(self, model, what):
        self.model, self.what, self.step = model, what, 0

    def logits(self, ys):
        """ys (B, t) → logits (B, V) for position t."""
        self.step += 1
        logits = self._forward(ys)
        _check_logits(logits, self.what, self.step)
        return logits


def _check_logits(logits, what, step):
    """Refuse logits that no token can be chosen from: argmax of a NaN row is whichever NaN comes
    first (usually <pad>), and a softmax over NaN, +inf or all -inf is NaN everywhere."""
    nan = np.isnan(logits).any(axis=-1)
    pos_inf = np.isposinf(logits).any(axis=-1)
    all_neg_inf = np.isneginf(logits).all(axis=-1)
    bad = nan | pos_inf | all_neg_inf
    if not bad.any():
        return
    kinds = [
        name
        for name, rows in (("NaN", nan), ("+inf", pos_inf), ("-inf everywhere", all_neg_inf))
        if rows.any()
    ]
    rows = np.flatnonzero(bad)
    shown = ", ".join(str(r) for r in rows[:10]) + (", …" if rows.size > 10 else "")
    raise FloatingPointError(
        f"{what}: the model's next-token logits at step {step} (choosing output token {step}) "
        f"are {' / '.join(kinds)} in batch row(s) {shown} of {logits.shape[0]}, so no token can "
        f"be chosen. Run the call under `with mt.autograd.detect_anomaly():` to find the op "
        f"that first produced a NaN or Inf"
    )


class _Seq2SeqStepper(_Stepper):
    """Next-token logits of an encoder-decoder given the tokens so far (B, t)."""

    def __init__(self, model, src, src_padding_mask, use_cache, what):
        super().__init__(model, what)
        self.src_mask = _mask_array(src_padding_mask)
        self.memory = model.encode(src, self.src_mask)
        self.cache = model.new_cache() if use_cache else None

    def _forward(self, ys):
        if self.cache is not None:
            fed = ys[:, len(self.cache) :]  # only what the cache has not seen
            out = self.model.decode(fed, self.memory, self.src_mask, cache=self.cache)
        else:
            out = self.model.decode(ys, self.memory, self.src_mask)
        return out.numpy()[:, -1].astype(np.float64)

    def reorder(self, index):
        self.memory = from_numpy(self.memory.numpy()[index])
        if self.src_mask is not None:
            self.src_mask = self.src_mask[index]
        if self.cache is not None:
            self.cache.reorder(index)


class _LMStepper(_Stepper):
    """Next-token logits of a decoder-only LM (the prompt is the start of ys)."""

    def __init__(self, model, use_cache, what):
        super().__init__(model, what)
        self.cache = model.new_cache() if use_cache else None

    def _forward(self, ys):
        if self.cache is not None:
            out = self.model(ys[:, len(self.cache) :], cache=self.cache)  # prefill, then 1 token
        else:
            out = self.model(ys)
        return out.numpy()[:, -1].astype(np.float64)

    def reorder(self, index):
        if self.cache is not None:
            self.cache.reorder(index)


class _EvalMode:
    """Run the model as in eval mode (no dropout) and without a graph, in this thread only.

    model.eval() and back would flip a flag every thread shares: a second thread training or
    decoding the same model meanwhile would run with dropout on (or off) at random, and the
    model could be left in eval mode. The per-thread override makes every module read
    `training` as False here while its flag stays as the user set it."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.was_eval = state.eval_mode
        state.eval_mode = True
        self.grad = no_grad()
        self.grad.__enter__()

    def __exit__(self, *exc):
        self.grad.__exit__(*exc)
        state.eval_mode = self.was_eval
        return False


def _pad_id(model):
    return model.cfg.pad_id


def _mask_array(mask):
    if mask is None:
        return None
    return np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask)


def _check_length(model, needed, what):
    max_len = model.cfg.max_len
    if model.cfg.positional in ("sinusoidal", "learned", "rotary") and needed > max_len:
        raise ValueError(
            f"{what}: decoding needs {needed} positions but the model's max_len is {max_len}"
        )


def _vocab_size(model):
    """The output vocabulary, from the config (an LM without tgt_vocab_size uses src's); None
    for a model without one (its logits' width is then checked at the first step)."""
    cfg = getattr(model, "cfg", None)
    return (getattr(cfg, "tgt_vocab_size", 0) or getattr(cfg, "src_vocab_size", 0)) or None


def _check_count(what, name, value, upper=None, upper_name="the vocabulary size"):
    """value must be an integer >= 1 (and <= upper when given)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what}: {name} must be an integer >= 1, got {value!r}")
    if upper is not None and value > upper:
        raise ValueError(
            f"{what}: {name}={value} is larger than {upper_name} ({upper}); there are only "
            f"{upper} tokens to choose from"
        )


def _check_sampling(what, vocab, temperature, top_k, top_p):
    """Refuse sampling arguments that choose nothing, before any decoding work."""
    if temperature is not None and not (isinstance(temperature, Real) and temperature > 0):
        raise ValueError(
            f"{what}: temperature must be a number > 0 (use greedy decoding for 0), "
            f"got {temperature!r}"
        )
    if top_k is not None:
        _check_count(what, "top_k", top_k, vocab)
    if top_p is not None and not (isinstance(top_p, Real) and 0.0 < top_p <= 1.0):
        raise ValueError(
            f"{what}: top_p must be in (0, 1] (the share of probability mass kept), got {top_p!r}"
        )


def _src_batch(src, what):
    arr = src.numpy() if isinstance(src, Tensor) else np.asarray(src)
    if arr.ndim != 2:
        raise ValueError(f"{what}: src must be (batch, length) ids, got shape {arr.shape}")
    return arr


# ---------------------------------------------------------------------------- the loop
def _run(stepper, start, max_len, eos_id, pad_id, choose):
    """The shared loop: ys starts as `start` (B, t0); each step appends choose(logits).

    Finished rows (their <eos> emitted) receive pad_id; the loop ends when every row has
    finished (at once for an empty batch). Returns ys[:, t0:] trimmed to the longest row."""
    ys = start
    t0 = start.shape[1]
    finished = np.zeros(ys.shape[0], dtype=bool)
    for _ in range(max_len):
        if finished.all():
            break
        nxt = choose(stepper.logits(ys))
        nxt = np.where(finished, pad_id, nxt)
        ys = np.concatenate([ys, nxt[:, None].astype(ys.dtype)], axis=1)
        if eos_id is not None:
            finished |= nxt == eos_id
    return ys[:, t0:]


def greedy_decode(
    model: nn.Module,
    src: Tensor | ArrayLike,
    max_len: int,
    bos_id: int,
    eos_id: int,
    src_padding_mask: Any = None,
    use_cache: bool = True,
) -> np.ndarray:
    """Greedy decoding: at each step take the most likely next token.

    src (B, L_src) ids → ids (B, ≤ max_len), without the leading <bos>; each row stops at its
    own <eos> (kept) and is padded with pad_id after it. use_cache=False re-runs the decoder
    over the whole prefix each step (the slow path the KV cache replaces; same tokens).
    """
    src = _src_batch(src, "greedy_decode")
    _check_count("greedy_decode", "max_len", max_len)
    _check_length(model, max_len, "greedy_decode")
    with _EvalMode(model):
        stepper = _Seq2SeqStepper(model, src, src_padding_mask, use_cache, "greedy_decode")
        start = np.full((src.shape[0], 1), bos_id, dtype=np.int64)
        return _run(
            stepper, start, max_len, eos_id, _pad_id(model), lambda logits: logits.argmax(axis=-1)
        )


def _log_softmax(logits):
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _filter_logits(logits, temperature, top_k, top_p):
    """Logits (B, V) float64 → log-probabilities after temperature, top-k and top-p (nucleus)."""
    if temperature is not None:
        if temperature <= 0:
            raise ValueError(
                f"sample: temperature must be > 0 (use greedy_decode for 0), got {temperature}"
            )
        logits = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"sample: top_k must be >= 1, got {top_k}")
        k = min(top_k, logits.shape[-1])
        kth = np.sort(logits, axis=-1)[:, -k][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    logp = _log_softmax(logits)
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"sample: top_p must be in (0, 1], got {top_p}")
        order = np.argsort(-logp, axis=-1, kind="stable")
        probs = np.exp(np.take_along_axis(logp, order, axis=-1))
        before = np.cumsum(probs, axis=-1) - probs  # mass of the tokens ranked above
        drop_sorted = before >= top_p  # keep the smallest set reaching top_p
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=-1)
        logp = _log_softmax(np.where(drop, -np.inf, logp))
    return logp


def _sampler(temperature, top_k, top_p, seed):
    rng = np.random.default_rng(seed)

    def choose(logits):
        probs = np.exp(_filter_logits(logits, temperature, top_k, top_p))
        cdf = np.cumsum(probs, axis=-1)
        u = rng.random((logits.shape[0], 1)) * cdf[:, -1:]
        return np.minimum((cdf < u).sum(axis=-1), logits.shape[-1] - 1)

    return choose


def sample(
    model: nn.Module,
    src: Tensor | ArrayLike,
    max_len: int,
    bos_id: int,
    eos_id: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    src_padding_mask: Any = None,
    use_cache: bool = True,
) -> np.ndarray:
    """Sampling: draw each next token from softmax(logits / temperature), optionally only among
    the top_k most likely tokens and/or the smallest set whose probability reaches top_p.

    The same seed gives the same output. Returns ids (B, ≤ max_len) without the leading <bos>;
    each row stops at its own <eos> (kept) and is padded with pad_id after it.
    """
    src = _src_batch(src, "sample")
    _check_count("sample", "max_len", max_len)
    _check_sampling("sample", _vocab_size(model), temperature, top_k, top_p)
    _check_length(model, max_len, "sample")
    choose = _sampler(temperature, top_k, top_p, seed)
    with _EvalMode(model):
        stepper = _Seq2SeqStepper(model, src, src_padding_mask, use_cache, "sample")
        start = np.full((src.shape[0], 1), bos_id, dtype=np.int64)
        return _run(stepper, start, max_len, eos_id, _pad_id(model), choose)


# ---------------------------------------------------------------------------- beam search
def _length_penalty(length, alpha):
    """GNMT's length penalty ((5 + length) / 6)^α: α = 0 ranks by total log-probability (which
    favours short outputs); larger α favours longer ones."""
    return ((5.0 + length) / 6.0) ** alpha


class _Beams:
    """The state of beam search over B sources with k beams each; row b·k + j of `ys` is beam j
    of source b. `scores` (B, k) are total log-probabilities (-inf for an unused beam);
    `hyps[b]` holds source b's finished hypotheses as (normalised score, tokens)."""

    def __init__(self, batch, k, bos_id, eos_id, pad_id, alpha):
        self.batch, self.k = batch, k
        self.eos_id, self.pad_id, self.alpha = eos_id, pad_id, alpha
        self.ys = np.full((batch * k, 1), bos_id, dtype=np.int64)
        self.scores = np.full((batch, k), -np.inf)
        self.scores[:, 0] = 0.0  # at first all k beams are the same: use one
        self.hyps = [[] for _ in range(batch)]
        self.done = np.zeros(batch, dtype=bool)

    def _finish(self, b, score, tokens):
        self.hyps[b].append((score / _length_penalty(len(tokens), self.alpha), tokens))

    def step(self, logp):
        """Extend every live beam by every token (logp (B·k, V)) and keep the k best of each
        source. Returns the rows the new beams continue (for the stepper to reorder its
        state), or None when every source is done."""
        vocab = logp.shape[-1]
        cand = self.scores[:, :, None] + logp.reshape(self.batch, self.k, vocab)
        cand = cand.reshape(self.batch, self.k * vocab)
        n_top = min(2 * self.k, self.k * vocab)  # k live beams survive even if k end in <eos>
        top = np.argsort(-cand, axis=-1, kind="stable")[:, :n_top]
        rows = np.arange(self.batch * self.k)  # default: keep rows (done sources)
        tokens = np.full(self.batch * self.k, self.pad_id, dtype=np.int64)
        scores = np.full((self.batch, self.k), -np.inf)
        for b in np.flatnonzero(~self.done):
            self._select(b, cand[b], top[b], vocab, rows, tokens, scores)
            self.done[b] = len(self.hyps[b]) >= self.k
        if self.done.all():
            return None
        self.ys = np.concatenate([self.ys[rows], tokens[:, None]], axis=1)
        self.scores = scores
        return rows

    def _select(self, b, cand, top, vocab, rows, tokens, scores):
        """Walk source b's candidates best first: one ending in <eos> becomes a finished
        hypothesis, the others fill the k beam slots (rows/tokens/scores, in place)."""
        k, j = self.k, 0
        for c in top:
            score = cand[c]
            if not np.isfinite(score):
                break
            beam, tok = divmod(int(c), vocab)
            if tok == self.eos_id:
                self._finish(b, score, np.append(self.ys[b * k + beam, 1:], self.eos_id))
                if len(self.hyps[b]) == k:
                    break
                continue
            rows[b * k + j], tokens[b * k + j], scores[b, j] = b * k + beam, tok, score
            j += 1
            if j == k:  # the rest rank below every live beam
                break

    def best(self):
        """(B, width) ids: each source's best hypothesis; at max_len the live beams of an
        unfinished source count as finished."""
        for b in range(self.batch):
            if len(self.hyps[b]) < self.k:
                for j in np.flatnonzero(np.isfinite(self.scores[b])):
                    self._finish(b, self.scores[b, j], self.ys[b * self.k + j, 1:])
        best = [max(h, key=lambda item: item[0])[1] for h in self.hyps]
        out = np.full(
            (self.batch, max((len(t) for t in best), default=0)), self.pad_id, dtype=np.int64
        )
        for b, tokens in enumerate(best):
            out[b, : len(tokens)] = tokens
        return out


def beam_search(
    model: nn.Module,
    src: Tensor | ArrayLike,
    max_len: int,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    src_padding_mask: Any = None,
    use_cache: bool = True,
) -> np.ndarray:
    """Beam search: keep the beam_size most likely prefixes of each source at every step
    ("Attention Is All You Need", §6.1: beam size 4, length penalty α = 0.6).

    Each step extends every live beam by every token and keeps the beam_size best by total
    log-probability; a candidate ending in <eos> leaves the beam as a finished hypothesis.
    A source is done once it has beam_size finished hypotheses (or at max_len, when its live
    beams count as finished); its answer is the hypothesis with the best
    log-probability / length_penalty (GNMT). beam_size = 1 is exactly greedy decoding.

    Returns ids (B, ≤ max_len) without the leading <bos>; each row ends at its own <eos> (kept)
    and is padded with pad_id after it.
    """
    src = _src_batch(src, "beam_search")
    _check_count("beam_search", "max_len", max_len)
    _check_count("beam_search", "beam_size", beam_size, _vocab_size(model))
    _check_length(model, max_len, "beam_search")
    beams = _Beams(src.shape[0], beam_size, bos_id, eos_id, _pad_id(model), length_penalty)
    if src.shape[0] == 0:
        return beams.best()
    rep = np.repeat(np.arange(src.shape[0]), beam_size)  # each source once per beam
    mask = _mask_array(src_padding_mask)
    with _EvalMode(model):
        stepper = _Seq2SeqStepper(
            model, src[rep], None if mask is None else mask[rep], use_cache, "beam_search"
        )
        for _ in range(max_len):
            rows = beams.step(_log_softmax(stepper.logits(beams.ys)))
            if rows is None:
                break
            stepper.reorder(rows)
    return beams.best()


# ---------------------------------------------------------------------------- language models
def generate(
    model: nn.Module,
    prompt: Tensor | ArrayLike,
    max_new_tokens: int,
    eos_id: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_cache: bool = True,
) -> np.ndarray:
    """Continue a decoder-only LM's prompt (B, L_p) ids (no padding): greedy when temperature,
    top_k and top_p are all None, else sampling. Returns only the new tokens (B, ≤
    max_new_tokens); each row stops at its own eos_id (kept), padded with pad_id after it."""
    prompt = _src_batch(prompt, "generate").astype(np.int64)
    _check_count("generate", "max_new_tokens", max_new_tokens)
    _check_sampling("generate", _vocab_size(model), temperature, top_k, top_p)
    if prompt.shape[1] == 0:
        raise ValueError(
            f"generate: {type(model).__name__} got a prompt of shape "
            f"{prompt.shape} whose length axis (1) is empty; a decoder-only LM "
            f"predicts each token from the ones before it, so the prompt needs at "
            f"least one token (e.g. <bos>)"
        )
    _check_length(model, prompt.shape[1] + max_new_tokens - 1, "generate")
    if temperature is None and top_k is None and top_p is None:
        choose = lambda logits: logits.argmax(axis=-1)  # noqa: E731
    else:
        choose = _sampler(temperature, top_k, top_p, seed)
    with _EvalMode(model):
        stepper = _LMStepper(model, use_cache, "generate")
        return _run(stepper, prompt, max_new_tokens, eos_id, _pad_id(model), choose)
