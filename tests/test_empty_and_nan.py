"""Empty batches, zero-length sequences and NaN logits: the models work on empty inputs as
torch.nn.Transformer does (an empty output of the right shape), decoding an empty batch gives an
empty (0, 0) output, an empty LM prompt is refused with the model and the axis named, and
logits no token can be chosen from raise FloatingPointError instead of silently decoding <pad>."""

import numpy as np
import pytest

import minitensor as mt
from transformer import (
    DecoderOnlyLM,
    EncoderOnly,
    Transformer,
    TransformerConfig,
    beam_search,
    greedy_decode,
    sample,
)

BOS, EOS = 1, 2
SRC_V, TGT_V = 10, 12


def _cfg(**kw):
    return TransformerConfig.tiny(SRC_V, TGT_V, num_encoder_layers=1, num_decoder_layers=2, **kw)


def _ids(rng, batch, length, vocab=SRC_V):
    return rng.integers(3, vocab, (batch, length))


# ---------------------------------------------------------------------------- models
@pytest.mark.parametrize("batch, l_src, l_tgt", [(0, 6, 5), (3, 6, 0), (3, 0, 5), (0, 0, 0)])
def test_transformer_on_empty_axes_matches_torch_shapes(rng, batch, l_src, l_tgt):
    torch = pytest.importorskip("torch")
    model = Transformer(_cfg())
    src, tgt = _ids(rng, batch, l_src), _ids(rng, batch, l_tgt, TGT_V)
    logits = model(
        src,
        tgt,
        src_padding_mask=np.zeros(src.shape, bool),
        tgt_padding_mask=np.zeros(tgt.shape, bool),
    )
    reference = torch.nn.Transformer(
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=2,
        dim_feedforward=32,
        dropout=0.0,
        batch_first=True,
    )
    out = reference(torch.zeros(batch, l_src, 16), torch.zeros(batch, l_tgt, 16))
    assert logits.shape == tuple(out.shape[:2]) + (TGT_V,)
    assert np.isfinite(logits.numpy()).all()


@pytest.mark.parametrize("batch, l_src, l_tgt", [(0, 6, 5), (3, 6, 0), (3, 0, 5)])
def test_transformer_on_empty_axes_runs_backward(rng, batch, l_src, l_tgt):
    model = Transformer(_cfg())
    logits = model(_ids(rng, batch, l_src), _ids(rng, batch, l_tgt, TGT_V))
    logits.sum().backward()  # as torch: gradients of an empty output
    grad = model.generator.weight.grad.numpy()
    assert grad.shape == (TGT_V, 16)
    assert np.isfinite(grad).all() and (grad.any() == (batch > 0 and l_tgt > 0))


def test_decoder_only_and_encoder_only_on_empty_axes(rng):
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, TGT_V, num_decoder_layers=1))
    assert lm(_ids(rng, 0, 4, TGT_V)).shape == (0, 4, TGT_V)
    assert lm(_ids(rng, 2, 0, TGT_V)).shape == (2, 0, TGT_V)
    cache = lm.new_cache()
    assert lm(_ids(rng, 0, 3, TGT_V), cache=cache).shape == (0, 3, TGT_V) and len(cache) == 3
    tagger = EncoderOnly(_cfg())  # a masked-token head: logits per position
    assert tagger(_ids(rng, 0, 5)).shape == (0, 5, SRC_V)
    assert tagger(_ids(rng, 2, 0)).shape == (2, 0, SRC_V)
    classifier = EncoderOnly(_cfg(), num_classes=3)
    assert classifier(_ids(rng, 0, 5)).shape == (0, 3)


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
