"""Decoding: the KV cache gives the same logits and tokens as full re-decoding; greedy, beam
search and sampling obey the output conventions; beam size 1 is greedy; sampling is
reproducible by seed; beam search beats greedy where greedy is short-sighted."""

import numpy as np
import pytest

import minitensor as mt
from transformer import (
    DecoderOnlyLM,
    Transformer,
    TransformerConfig,
    beam_search,
    greedy_decode,
    sample,
)
from transformer import masks as M

PAD, BOS, EOS = 0, 1, 2


def _model(**kw):
    cfg = TransformerConfig.tiny(10, 12, num_encoder_layers=2, num_decoder_layers=2, **kw)
    return Transformer(cfg)


def _src(rng, batch=3, length=6):
    src = rng.integers(3, 10, (batch, length))
    src[0, 4:] = PAD
    return src, M.padding_mask(src, PAD)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary", "none"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_gives_the_same_logits(rng, positional, norm_first):
    model = _model(positional=positional, norm_first=norm_first).eval()
    src, spm = _src(rng)
    tgt = rng.integers(1, 12, (3, 7))
    tgt[:, 0] = BOS
    with mt.no_grad():
        memory = model.encode(src, spm)
        full = model.decode(tgt, memory, spm).numpy()
        cache = model.new_cache()
        steps = [
            model.decode(tgt[:, t : t + 1], memory, spm, cache=cache).numpy() for t in range(7)
        ]
    assert len(cache) == 7
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-5)
    # the cross-attention keys were computed once and kept
    assert cache.layers[0].cross_attn.k.shape == (3, 2, 6, 8)


def test_cached_decoding_with_target_padding_and_chunks(rng):
    model = _model().eval()
    src, spm = _src(rng)
    tgt = rng.integers(3, 12, (3, 6))
    tgt[2, 4:] = PAD
    tpm = M.padding_mask(tgt, PAD)
    with mt.no_grad():
        memory = model.encode(src, spm)
        full = model.decode(tgt, memory, spm, tpm).numpy()
        cache = model.new_cache()
        a = model.decode(tgt[:, :4], memory, spm, tpm[:, :4], cache=cache).numpy()  # prefix at once
        b = model.decode(tgt[:, 4:], memory, spm, tpm[:, 4:], cache=cache).numpy()
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), full, rtol=1e-5, atol=1e-5)


def test_greedy_cached_equals_uncached_and_follows_the_conventions(rng):
    model = _model()
    model.train()
    src, spm = _src(rng, batch=4)
    cached = greedy_decode(model, src, 8, BOS, EOS, spm)
    uncached = greedy_decode(model, src, 8, BOS, EOS, spm, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    assert model.training  # mode restored
    assert cached.shape[0] == 4 and cached.shape[1] <= 8
    _check_conventions(cached)
    # greedy really takes the argmax of the uncached logits at each step
    with mt.no_grad():
        model.eval()
        ys = np.concatenate([np.full((4, 1), BOS), cached], axis=1)
        logits = model(src, ys[:, :-1], spm).numpy()
    for b in range(4):
        for t in range(cached.shape[1]):
            if t > 0 and (cached[b, t - 1] == EOS or cached[b, t - 1] == PAD):
                assert cached[b, t] == PAD
            else:
                assert cached[b, t] == logits[b, t].argmax()


def _check_conventions(out):
    """No <bos> at the front; after a row's first <eos> only <pad>."""
    for row in out:
        hits = np.flatnonzero(row == EOS)
        if hits.size:
            assert np.all(row[hits[0] + 1 :] == PAD)


def _eos_prone_model(rng):
    """A model whose generator favours <eos> a little, so rows stop at different lengths."""
    model = _model()
    with mt.no_grad():
        model.generator.bias.data = model.generator.bias.numpy().copy()
        model.generator.bias.numpy()[EOS] += 2.0
    return model


def test_rows_stop_at_their_own_eos(rng):
    model = _eos_prone_model(rng)
    src, spm = _src(rng, batch=6)
    out = greedy_decode(model, src, 10, BOS, EOS, spm)
    _check_conventions(out)
    lengths = [np.flatnonzero(r == EOS)[0] + 1 if (r == EOS).any() else len(r) for r in out]
    assert out.shape[1] == max(lengths)


def test_beam_size_one_equals_greedy(rng):
    for model in (_model(), _eos_prone_model(rng)):
        src, spm = _src(rng, batch=4)
        np.testing.assert_array_equal(
            beam_search(model, src, 8, BOS, EOS, beam_size=1, src_padding_mask=spm),
            greedy_decode(model, src, 8, BOS, EOS, spm),
        )


def test_beam_search_output_conventions_and_cache(rng):
    model = _eos_prone_model(rng)
    src, spm = _src(rng, batch=3)
    out = beam_search(model, src, 8, BOS, EOS, beam_size=3, src_padding_mask=spm)
    assert out.shape[0] == 3 and out.shape[1] <= 8
    _check_conventions(out)
    np.testing.assert_array_equal(
        out,
        beam_search(model, src, 8, BOS, EOS, beam_size=3, src_padding_mask=spm, use_cache=False),
    )


class _Chain:
    """A stand-in 'model' with fixed next-token probabilities depending only on the previous
    token: greedy takes A (0.6) then is stuck with 0.3; B (0.4) leads to <eos> with 0.95."""

    A, B = 3, 4

    def __init__(self):
        self.cfg = TransformerConfig.tiny(5, 5)
        self.training = False
        probs = np.full((5, 5), 1e-6)
        probs[BOS, self.A], probs[BOS, self.B] = 0.6, 0.4
        probs[self.A, EOS], probs[self.A, self.A], probs[self.A, self.B] = 0.3, 0.35, 0.35
        probs[self.B, EOS] = 0.95
        probs[self.B, self.A] = 0.05
        probs[EOS, EOS] = probs[PAD, PAD] = 1.0
        self.logp = np.log(probs / probs.sum(axis=1, keepdims=True))

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def encode(self, src, mask=None):
        return mt.zeros(src.shape[0], src.shape[1], 2)

    def new_cache(self):
        return None

    def decode(self, ys, memory, src_mask=None, tgt_padding_mask=None, cache=None):
        return mt.tensor(self.logp[np.asarray(ys)])


def test_beam_search_finds_what_greedy_misses():
    chain, src = _Chain(), np.ones((1, 2), dtype=np.int64)
    greedy = greedy_decode(chain, src, 3, BOS, EOS, use_cache=False)
    beam = beam_search(chain, src, 3, BOS, EOS, beam_size=2, length_penalty=0.0, use_cache=False)
    assert greedy[0, 0] == _Chain.A
    np.testing.assert_array_equal(beam[0], [_Chain.B, EOS, PAD][: beam.shape[1]])


def test_sampling_is_reproducible_by_seed(rng):
    model = _model()
    src, spm = _src(rng, batch=4)
    a = sample(model, src, 8, BOS, EOS, temperature=1.5, seed=7, src_padding_mask=spm)
    b = sample(model, src, 8, BOS, EOS, temperature=1.5, seed=7, src_padding_mask=spm)
    np.testing.assert_array_equal(a, b)
    others = [
        sample(model, src, 8, BOS, EOS, temperature=1.5, seed=s, src_padding_mask=spm)
        for s in range(8, 12)
    ]
    assert any(o.shape != a.shape or np.any(o != a) for o in others)
    _check_conventions(a)


def test_top_k_one_and_tiny_top_p_are_greedy(rng):
    model = _model()
    src, spm = _src(rng, batch=3)
    greedy = greedy_decode(model, src, 6, BOS, EOS, spm)
    np.testing.assert_array_equal(
        sample(model, src, 6, BOS, EOS, top_k=1, seed=0, src_padding_mask=spm), greedy
    )
    np.testing.assert_array_equal(
        sample(model, src, 6, BOS, EOS, top_p=1e-9, seed=0, src_padding_mask=spm), greedy
    )


def test_top_k_restricts_the_choices():
    from transformer.decoding import _filter_logits

    logits = np.array([[0.0, 3.0, 1.0, 2.0]])
    logp = _filter_logits(logits, 1.0, 2, None)
    assert np.isneginf(logp[0, [0, 2]]).all() and np.isfinite(logp[0, [1, 3]]).all()
    logp = _filter_logits(logits, 1.0, None, 0.7)  # top two hold 0.64 + 0.24 of the mass
    assert np.isfinite(logp[0, [1, 3]]).all() and np.isneginf(logp[0, [0, 2]]).all()
    with pytest.raises(ValueError, match="temperature"):
        _filter_logits(logits, 0.0, None, None)


def test_decoding_refuses_lengths_beyond_max_len(rng):
    model = Transformer(TransformerConfig.tiny(10, 12, max_len=5))
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, rng.integers(3, 10, (1, 3)), 6, BOS, EOS)


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
def test_decoder_only_generate_cached_equals_uncached(rng, positional):
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, 11, num_decoder_layers=2, positional=positional))
    prompt = rng.integers(3, 11, (2, 4))
    fast = lm.generate(prompt, 6, eos_id=EOS)
    slow = lm.generate(prompt, 6, eos_id=EOS, use_cache=False)
    np.testing.assert_array_equal(fast, slow)
    assert fast.shape[0] == 2 and fast.shape[1] <= 6
    with mt.no_grad():
        full = lm(np.concatenate([prompt, fast], axis=1)).numpy()
        cache = lm.new_cache()
        parts = [lm(prompt, cache=cache).numpy()] + [
            lm(fast[:, t : t + 1], cache=cache).numpy() for t in range(fast.shape[1])
        ]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), full, rtol=1e-5, atol=1e-5)
    s1 = lm.generate(prompt, 6, eos_id=EOS, temperature=1.0, seed=3)
    np.testing.assert_array_equal(s1, lm.generate(prompt, 6, eos_id=EOS, temperature=1.0, seed=3))


SRC_V, TGT_V = 10, 12


def _cfg(**kw):
    return TransformerConfig.tiny(SRC_V, TGT_V, num_encoder_layers=1, num_decoder_layers=2, **kw)


def _ids(rng, batch, length, vocab=SRC_V):
    return rng.integers(3, vocab, (batch, length))


# ---------------------------------------------------------------------------- decoding
@pytest.mark.parametrize("use_cache", [True, False])
def test_decoding_an_empty_batch_gives_an_empty_output(rng, use_cache):
    model = Transformer(_cfg())
    src = _ids(rng, 0, 6)
    mask = np.zeros(src.shape, bool)
    for out in (
        greedy_decode(model, src, 5, BOS, EOS, mask, use_cache=use_cache),
        beam_search(
            model, src, 5, BOS, EOS, beam_size=3, src_padding_mask=mask, use_cache=use_cache
        ),
        sample(model, src, 5, BOS, EOS, seed=0, src_padding_mask=mask, use_cache=use_cache),
    ):
        assert out.shape == (0, 0) and out.dtype == np.int64
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, TGT_V, num_decoder_layers=1))
    assert lm.generate(_ids(rng, 0, 3, TGT_V), 4, use_cache=use_cache).shape == (0, 0)


def test_decoding_an_empty_source_attends_to_nothing(rng):
    model = Transformer(_cfg())
    out = greedy_decode(model, _ids(rng, 2, 0), 4, BOS, EOS)
    assert out.shape[0] == 2 and 1 <= out.shape[1] <= 4
    np.testing.assert_array_equal(
        beam_search(model, _ids(rng, 2, 0), 4, BOS, EOS, beam_size=1), out
    )


def test_an_empty_prompt_is_refused_with_the_model_and_axis_named(rng):
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, TGT_V, num_decoder_layers=1))
    for use_cache in (True, False):
        with pytest.raises(
            ValueError,
            match=r"generate: DecoderOnlyLM got a prompt of shape "
            r"\(2, 0\) whose length axis \(1\) is empty",
        ):
            lm.generate(np.zeros((2, 0), dtype=np.int64), 4, use_cache=use_cache)


# ---------------------------------------------------------------------------- NaN logits
def _poisoned(token, value=np.nan):
    """A model whose source embedding of `token` is `value`: rows holding it give NaN logits."""
    model = Transformer(_cfg())
    with mt.no_grad():
        table = model.src_embed.token.weight.numpy().copy()
        table[token] = value
        model.src_embed.token.weight.data = table
    return model


DECODERS = {
    "greedy_decode": lambda m, src: greedy_decode(m, src, 5, BOS, EOS),
    "beam_search": lambda m, src: beam_search(m, src, 5, BOS, EOS, beam_size=3),
    "sample": lambda m, src: sample(m, src, 5, BOS, EOS, seed=0),
    "sample top-k top-p": lambda m, src: sample(m, src, 5, BOS, EOS, top_k=3, top_p=0.9, seed=0),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_nan_logits_raise_naming_the_function_step_and_rows(rng, name):
    src = _ids(rng, 4, 5, vocab=9)  # tokens 3..8: none poisoned
    src[1, 2] = src[3, 0] = 9
    function = name.split()[0]
    with pytest.raises(FloatingPointError) as info:
        DECODERS[name](_poisoned(9), src)
    message = str(info.value)
    assert message.startswith(f"{function}: the model's next-token logits at step 1")
    assert "NaN" in message and "detect_anomaly" in message
    rows = "1, 3 of 4" if function != "beam_search" else "3, 4, 5, 9, 10, 11 of 12"
    assert f"batch row(s) {rows}" in message, message  # beam search: 3 beams per source
    clean = src.copy()
    clean[clean == 9] = 3
    assert DECODERS[name](_poisoned(9), clean).shape[0] == 4  # other tokens decode as usual


def test_infinite_logits_raise_and_detect_anomaly_finds_the_op(rng):
    model = Transformer(_cfg())
    with mt.no_grad():
        bias = model.generator.bias.numpy().copy()
        bias[5] = np.inf
        model.generator.bias.data = bias
    with pytest.raises(FloatingPointError, match=r"greedy_decode: .* are \+inf in batch row"):
        greedy_decode(model, _ids(rng, 2, 4), 5, BOS, EOS)
    with mt.no_grad():
        bias[:] = -np.inf
    with pytest.raises(FloatingPointError, match=r"beam_search: .* -inf everywhere"):
        beam_search(model, _ids(rng, 2, 4), 5, BOS, EOS)
    with mt.autograd.detect_anomaly():  # what the error message suggests
        with pytest.raises(FloatingPointError, match="anomaly"):
            greedy_decode(_poisoned(5), np.full((1, 3), 5), 5, BOS, EOS)


def test_nan_logits_in_generate_raise_at_the_step_they_appear(rng):
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, TGT_V, num_decoder_layers=1))
    with mt.no_grad():
        table = lm.tgt_embed.token.weight.numpy().copy()
        table[7] = np.nan
        lm.tgt_embed.token.weight.data = table
        lm.generator.bias.data = np.where(np.arange(TGT_V) == 7, 100.0, -100.0).astype(
            np.float32
        )  # token 7 is always chosen next
    with pytest.raises(FloatingPointError, match=r"generate: .* at step 2 .*NaN"):
        lm.generate(np.full((2, 3), 4), 4)  # step 1 chooses 7; step 2 reads its NaN
