"""Autoregressive decoding (seed 9.2): greedy, beam search, sampling — with a KV cache.

At inference there is no target to feed: the decoder starts from `<bos>`, predicts the next
token, appends it, and repeats until it emits `<eos>` or reaches max_len. Training is parallel
over the target; generation is not, and that is where a model's latency goes (seed 9.2).

The **KV cache**: without it, step t re-runs the decoder over all t tokens so far. With it, step
t feeds only the newest token; each self-attention appends that token's key and value to the
ones it kept, and each cross-attention computes the memory's keys and values once. The cached
and uncached paths give the same tokens (logits agree to ~1e-6).

Conventions of every function here:
- Outputs are ids (B, ≤ max_len) **excluding the leading <bos>**.
- Each sequence stops at its own <eos>, which is **kept**; after it the row is padded with
  cfg.pad_id. The output is as long as the longest row (at most max_len).
- src_padding_mask: (B, L_src) bool, True = <pad>.
- The model runs in eval mode (no dropout) and without a graph; its mode is restored after.
"""
import numpy as np

from minitensor import Tensor, no_grad


# ---------------------------------------------------------------------------- steppers
class _Seq2SeqStepper:
    """Next-token logits of an encoder-decoder given the tokens so far (B, t)."""

    def __init__(self, model, src, src_padding_mask, use_cache):
        self.model = model
        self.src_mask = None if src_padding_mask is None else np.asarray(
            src_padding_mask.data if isinstance(src_padding_mask, Tensor) else src_padding_mask)
        self.memory = model.encode(src, self.src_mask)
        self.cache = model.new_cache() if use_cache else None

    def logits(self, ys):
        """ys (B, t) → logits (B, V) for position t."""
        if self.cache is not None:
            fed = ys[:, len(self.cache):]               # only what the cache has not seen
            out = self.model.decode(fed, self.memory, self.src_mask, cache=self.cache)
        else:
            out = self.model.decode(ys, self.memory, self.src_mask)
        return out.data[:, -1].astype(np.float64)

    def reorder(self, index):
        self.memory = Tensor._make(self.memory.data[index])
        if self.src_mask is not None:
            self.src_mask = self.src_mask[index]
        if self.cache is not None:
            self.cache.reorder(index)


class _LMStepper:
    """Next-token logits of a decoder-only LM (the prompt is the start of ys)."""

    def __init__(self, model, use_cache):
        self.model = model
        self.cache = model.new_cache() if use_cache else None

    def logits(self, ys):
        if self.cache is not None:
            out = self.model(ys[:, len(self.cache):], cache=self.cache)   # prefill, then 1 token
        else:
            out = self.model(ys)
        return out.data[:, -1].astype(np.float64)

    def reorder(self, index):
        if self.cache is not None:
            self.cache.reorder(index)


class _EvalMode:
    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.was_training = self.model.training
        self.model.eval()
        self.grad = no_grad()
        self.grad.__enter__()

    def __exit__(self, *exc):
        self.grad.__exit__(*exc)
        self.model.train(self.was_training)
        return False


def _pad_id(model):
    return model.cfg.pad_id


def _check_length(model, needed, what):
    max_len = model.cfg.max_len
    if model.cfg.positional in ("sinusoidal", "learned", "rotary") and needed > max_len:
        raise ValueError(f"{what}: decoding needs {needed} positions but the model's max_len is "
                         f"{max_len}")


def _src_batch(src):
    arr = src.data if isinstance(src, Tensor) else np.asarray(src)
    if arr.ndim != 2:
        raise ValueError(f"decoding: src must be (batch, length) ids, got shape {arr.shape}")
    return arr


# ---------------------------------------------------------------------------- the loop
def _run(stepper, start, max_len, eos_id, pad_id, choose):
    """The shared loop: ys starts as `start` (B, t0); each step appends choose(logits).

    Finished rows (their <eos> emitted) receive pad_id. Returns ys[:, t0:] trimmed to the
    longest row."""
    ys = start
    t0 = start.shape[1]
    batch = ys.shape[0]
    finished = np.zeros(batch, dtype=bool)
    for _ in range(max_len):
        nxt = choose(stepper.logits(ys))
        nxt = np.where(finished, pad_id, nxt)
        ys = np.concatenate([ys, nxt[:, None].astype(ys.dtype)], axis=1)
        if eos_id is not None:
            finished |= nxt == eos_id
            if finished.all():
                break
    return ys[:, t0:]


def greedy_decode(model, src, max_len, bos_id, eos_id, src_padding_mask=None, use_cache=True):
    """Greedy decoding: at each step take the most likely next token.

    src (B, L_src) ids → ids (B, ≤ max_len), without the leading <bos>; each row stops at its
    own <eos> (kept) and is padded with pad_id after it. use_cache=False re-runs the decoder
    over the whole prefix each step (the slow path the KV cache replaces; same tokens).
    """
    src = _src_batch(src)
    _check_length(model, max_len, "greedy_decode")
    with _EvalMode(model):
        stepper = _Seq2SeqStepper(model, src, src_padding_mask, use_cache)
        start = np.full((src.shape[0], 1), bos_id, dtype=np.int64)
        return _run(stepper, start, max_len, eos_id, _pad_id(model),
                    lambda logits: logits.argmax(axis=-1))


def _filter_logits(logits, temperature, top_k, top_p):
    """Logits (B, V) float64 → log-probabilities after temperature, top-k and top-p (nucleus)."""
    if temperature is not None:
        if temperature <= 0:
            raise ValueError(f"sample: temperature must be > 0 (use greedy_decode for 0), got "
                             f"{temperature}")
        logits = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"sample: top_k must be >= 1, got {top_k}")
        k = min(top_k, logits.shape[-1])
        kth = np.sort(logits, axis=-1)[:, -k][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"sample: top_p must be in (0, 1], got {top_p}")
        order = np.argsort(-logp, axis=-1, kind="stable")
        probs = np.exp(np.take_along_axis(logp, order, axis=-1))
        before = np.cumsum(probs, axis=-1) - probs     # mass of the tokens ranked above
        drop_sorted = before >= top_p                  # keep the smallest set reaching top_p
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=-1)
        logp = np.where(drop, -np.inf, logp)
        z = logp - logp.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return logp


def _sampler(temperature, top_k, top_p, seed):
    rng = np.random.default_rng(seed)

    def choose(logits):
        probs = np.exp(_filter_logits(logits, temperature, top_k, top_p))
        cdf = np.cumsum(probs, axis=-1)
        u = rng.random((logits.shape[0], 1)) * cdf[:, -1:]
        return np.minimum((cdf < u).sum(axis=-1), logits.shape[-1] - 1)
    return choose


def sample(model, src, max_len, bos_id, eos_id, temperature=1.0, top_k=None, top_p=None,
           seed=None, src_padding_mask=None, use_cache=True):
    """Sampling: draw each next token from softmax(logits / temperature), optionally only among
    the top_k most likely tokens and/or the smallest set whose probability reaches top_p.

    The same seed gives the same output. Returns ids (B, ≤ max_len) without the leading <bos>;
    each row stops at its own <eos> (kept) and is padded with pad_id after it.
    """
    src = _src_batch(src)
    _check_length(model, max_len, "sample")
    choose = _sampler(temperature, top_k, top_p, seed)
    with _EvalMode(model):
        stepper = _Seq2SeqStepper(model, src, src_padding_mask, use_cache)
        start = np.full((src.shape[0], 1), bos_id, dtype=np.int64)
        return _run(stepper, start, max_len, eos_id, _pad_id(model), choose)


def _length_penalty(length, alpha):
    """GNMT's length penalty ((5 + length) / 6)^α: α = 0 ranks by total log-probability (which
    favours short outputs); larger α favours longer ones."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src, max_len, bos_id, eos_id, beam_size=4, length_penalty=0.6,
                src_padding_mask=None, use_cache=True):
    """Beam search: keep the beam_size most likely prefixes of each source at every step.

    Each step extends every live beam by every token and keeps the beam_size best by total
    log-probability; a candidate ending in <eos> leaves the beam as a finished hypothesis.
    A source is done once it has beam_size finished hypotheses (or at max_len, when its live
    beams count as finished); its answer is the hypothesis with the best
    log-probability / length_penalty (GNMT). beam_size = 1 is exactly greedy decoding.

    Returns ids (B, ≤ max_len) without the leading <bos>; each row ends at its own <eos> (kept)
    and is padded with pad_id after it.
    """
    src = _src_batch(src)
    _check_length(model, max_len, "beam_search")
    if beam_size < 1:
        raise ValueError(f"beam_search: beam_size must be >= 1, got {beam_size}")
    batch, k = src.shape[0], beam_size
    pad_id = _pad_id(model)
    with _EvalMode(model):
        # every source is repeated k times: row b·k + j is beam j of source b
        rep = np.repeat(np.arange(batch), k)
        mask = None
        if src_padding_mask is not None:
            mask = np.asarray(src_padding_mask.data if isinstance(src_padding_mask, Tensor)
                              else src_padding_mask)[rep]
        stepper = _Seq2SeqStepper(model, src[rep], mask, use_cache)
        ys = np.full((batch * k, 1), bos_id, dtype=np.int64)
        scores = np.full((batch, k), -np.inf)
        scores[:, 0] = 0.0                     # at first all k beams are the same: use one
        hyps = [[] for _ in range(batch)]      # finished: (normalised score, tokens)
        done = np.zeros(batch, dtype=bool)
        for step in range(max_len):
            logits = stepper.logits(ys)                                   # (B·k, V)
            z = logits - logits.max(axis=-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
            vocab = logp.shape[-1]
            cand = (scores[:, :, None] + logp.reshape(batch, k, vocab)).reshape(batch, k * vocab)
            n_top = min(2 * k, k * vocab)
            top = np.argsort(-cand, axis=-1, kind="stable")[:, :n_top]
            new_rows = np.arange(batch * k)                # default: keep rows (done sources)
            new_tok = np.full(batch * k, pad_id, dtype=np.int64)
            new_scores = np.full((batch, k), -np.inf)
            for b in range(batch):
                if done[b]:
                    continue
                j = 0
                for c in top[b]:
                    score = cand[b, c]
                    if not np.isfinite(score):
                        break
                    beam, tok = divmod(int(c), vocab)
                    if tok == eos_id:
                        tokens = np.append(ys[b * k + beam, 1:], eos_id)
                        hyps[b].append((score / _length_penalty(len(tokens), length_penalty),
                                        tokens))
                        if len(hyps[b]) == k:
                            break
                        continue
                    new_rows[b * k + j] = b * k + beam
                    new_tok[b * k + j] = tok
                    new_scores[b, j] = score
                    j += 1
                    if j == k:                 # the rest rank below every live beam
                        break
                if len(hyps[b]) >= k:
                    done[b] = True
            if done.all():
                break
            stepper.reorder(new_rows)
            ys = np.concatenate([ys[new_rows], new_tok[:, None]], axis=1)
            scores = new_scores
        for b in range(batch):                 # unfinished at max_len: live beams count too
            if len(hyps[b]) < k:
                for j in range(k):
                    if np.isfinite(scores[b, j]):
                        tokens = ys[b * k + j, 1:]
                        hyps[b].append((scores[b, j] / _length_penalty(len(tokens),
                                                                       length_penalty), tokens))
    best = [max(h, key=lambda item: item[0])[1] for h in hyps]
    width = max(len(t) for t in best)
    out = np.full((batch, width), pad_id, dtype=np.int64)
    for b, tokens in enumerate(best):
        out[b, :len(tokens)] = tokens
    return out


def generate(model, prompt, max_new_tokens, eos_id=None, temperature=None, top_k=None,
             top_p=None, seed=None, use_cache=True):
    """Continue a decoder-only LM's prompt (B, L_p) ids (no padding): greedy when temperature,
    top_k and top_p are all None, else sampling. Returns only the new tokens (B, ≤
    max_new_tokens); each row stops at its own eos_id (kept), padded with pad_id after it."""
    prompt = _src_batch(prompt).astype(np.int64)
    _check_length(model, prompt.shape[1] + max_new_tokens - 1, "generate")
    if temperature is None and top_k is None and top_p is None:
        choose = lambda logits: logits.argmax(axis=-1)          # noqa: E731
    else:
        choose = _sampler(temperature, top_k, top_p, seed)
    with _EvalMode(model):
        stepper = _LMStepper(model, use_cache)
        return _run(stepper, prompt, max_new_tokens, eos_id, _pad_id(model), choose)
