"""Masks: the helpers' conventions (True = blocked), and the two promises a model makes —
padding never leaks and the causal mask never looks ahead — plus fully masked rows (no NaN)."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor.ops.attention import attention
from transformer import DecoderOnlyLM, EncoderOnly, Transformer, TransformerConfig
from transformer import masks as M
from transformer.attention import MultiHeadAttention

PAD = 0


# ---------------------------------------------------------------------------- helpers
def test_padding_mask_marks_pad_ids_as_blocked():
    ids = np.array([[5, 6, 0, 0], [7, 0, 8, 0]])
    m = M.padding_mask(ids, pad_id=0)
    assert m.dtype == bool and m.shape == (2, 4)
    np.testing.assert_array_equal(m, ids == 0)
    np.testing.assert_array_equal(M.padding_mask(mt.tensor(ids), pad_id=7), ids == 7)
    with pytest.raises(ValueError, match="batch, length"):
        M.padding_mask(np.array([1, 2, 0]))


def _attention(q, k, v, mask=None):
    """The core with its weights: (output, weights)."""
    return attention(q, k, v, mask, need_weights=True)


def test_causal_mask_blocks_strictly_above_the_diagonal():
    m = M.causal_mask(4)
    assert m.shape == (4, 4) and m.dtype == bool
    for i in range(4):
        for j in range(4):
            assert m[i, j] == (j > i)
    with pytest.raises(ValueError):
        m[0, 0] = True  # cached and shared: read-only


def test_causal_mask_with_longer_keys_places_queries_at_the_end():
    m = M.causal_mask(2, key_length=5)  # queries are positions 3 and 4 of 5
    np.testing.assert_array_equal(m, [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(M.causal_mask(5, 5)[3:], m)
    with pytest.raises(ValueError):
        M.causal_mask(3, key_length=2)


def test_from_allowed_mask_inverts_the_pytorch_sdpa_convention():
    allowed = np.tril(np.ones((3, 3), dtype=bool))  # the seed's `torch.tril(ones)`
    np.testing.assert_array_equal(M.from_allowed_mask(allowed), M.causal_mask(3))
    with pytest.raises(TypeError, match="additive"):
        M.from_allowed_mask(np.zeros((3, 3)))


def test_to_additive_and_float_masks_give_the_same_attention(rng):
    blocked = M.causal_mask(4)
    add = M.to_additive(blocked)
    assert add.dtype == np.float32 and np.isneginf(add[0, 1]) and add[1, 0] == 0
    q, k, v = (mt.tensor(rng.standard_normal((2, 4, 3))) for _ in range(3))
    out_b, w_b = _attention(q, k, v, mask=blocked)
    out_f, w_f = _attention(q, k, v, mask=add)
    np.testing.assert_allclose(out_b.numpy(), out_f.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w_b.numpy(), w_f.numpy(), rtol=1e-6)
    assert np.all(w_b.numpy()[:, 0, 1:] == 0)


def test_combine_masks_ors_bools_and_broadcasts_to_scores():
    kpm = np.array([[False, False, True], [False, True, True]])
    both = M.combine_masks(kpm, M.causal_mask(3))
    assert both.shape == (2, 1, 3, 3)
    full = M.broadcast_mask(both, 2, 4, 3, 3)
    assert full.shape == (2, 4, 3, 3)
    for b in range(2):
        for i in range(3):
            for j in range(3):
                assert full[b, 1, i, j] == (kpm[b, j] or j > i)
    assert M.combine_masks() is None
    assert M.combine_masks(kpm).shape == (2, 1, 1, 3)
    mixed = M.combine_masks(kpm, M.to_additive(M.causal_mask(3)))
    assert mixed.dtype.kind == "f"
    np.testing.assert_array_equal(np.isneginf(mixed), both)
    with pytest.raises(ValueError, match="key_padding_mask"):
        M.combine_masks(np.zeros(3, dtype=bool))
    with pytest.raises(TypeError, match="True = blocked"):
        M.combine_masks(np.zeros((2, 3), dtype=np.int64))


def test_fully_masked_rows_are_found():
    m = np.array([[True, True], [False, True]])
    np.testing.assert_array_equal(M.fully_masked_rows(m), [True, False])
    np.testing.assert_array_equal(M.fully_masked_rows(M.to_additive(m)), [True, False])


# ---------------------------------------------------------------------------- models
def _model(**kw):
    cfg = TransformerConfig.tiny(9, 11, num_encoder_layers=2, num_decoder_layers=2, **kw)
    return Transformer(cfg).double().eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_source_padding_never_leaks(rng, norm_first):
    model = _model(norm_first=norm_first)
    src = rng.integers(1, 9, (2, 6))
    src[0, 4:] = PAD
    tgt = rng.integers(1, 11, (2, 4))
    spm = M.padding_mask(src, PAD)
    memory = model.encode(src, spm).numpy()
    logits = model(src, tgt, spm).numpy()
    src2 = src.copy()
    src2[0, 4:] = [3, 7]  # change what sits under the padding mask
    memory2 = model.encode(src2, spm).numpy()
    np.testing.assert_allclose(memory2[0, :4], memory[0, :4], rtol=0, atol=1e-12)
    np.testing.assert_allclose(model(src2, tgt, spm).numpy(), logits, rtol=0, atol=1e-12)
    # and without the mask the padded tokens would leak: the test can fail
    assert not np.allclose(model.encode(src2).numpy()[0, :4], model.encode(src).numpy()[0, :4])


def test_target_padding_never_leaks_into_real_positions(rng):
    model = _model()
    src = rng.integers(1, 9, (2, 5))
    tgt = rng.integers(1, 11, (2, 5))
    tgt[1, 3:] = PAD
    tpm = M.padding_mask(tgt, PAD)
    logits = model(src, tgt, None, tpm).numpy()
    tgt2 = tgt.copy()
    tgt2[1, 3:] = [4, 5]
    logits2 = model(src, tgt2, None, tpm).numpy()
    np.testing.assert_allclose(logits2[1, :3], logits[1, :3], atol=1e-12)
    np.testing.assert_allclose(logits2[0], logits[0], atol=1e-12)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary"])
def test_causal_mask_never_looks_ahead(rng, positional):
    model = _model(positional=positional)
    src = rng.integers(1, 9, (2, 5))
    tgt = rng.integers(1, 11, (2, 6))
    logits = model(src, tgt).numpy()
    for t in range(1, 6):
        tgt2 = tgt.copy()
        tgt2[:, t:] = rng.integers(1, 11, (2, 6 - t))
        logits2 = model(src, tgt2).numpy()
        np.testing.assert_allclose(logits2[:, :t], logits[:, :t], atol=1e-12)
        assert not np.allclose(logits2[:, t:], logits[:, t:])


def test_decoder_only_lm_is_causal(rng):
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, 10, num_decoder_layers=2)).double().eval()
    ids = rng.integers(1, 10, (3, 7))
    out = lm(ids).numpy()
    ids2 = ids.copy()
    ids2[:, 4] = (ids2[:, 4] % 9) + 1
    out2 = lm(ids2).numpy()
    np.testing.assert_allclose(out2[:, :4], out[:, :4], atol=1e-12)
    assert not np.allclose(out2[:, 4:], out[:, 4:])


def test_encoder_only_padding_never_leaks(rng):
    enc = EncoderOnly(TransformerConfig.tiny(9, 0), num_classes=3).double().eval()
    ids = rng.integers(1, 9, (2, 5))
    ids[1, 3:] = PAD
    pm = M.padding_mask(ids, PAD)
    out = enc(ids, pm).numpy()
    ids2 = ids.copy()
    ids2[1, 3:] = 6
    np.testing.assert_allclose(enc(ids2, pm).numpy(), out, atol=1e-12)


# ---------------------------------------------------------------------------- fully masked rows
def test_fully_masked_row_gives_zeros_not_nan_forward_and_backward(rng):
    q = mt.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    k = mt.tensor(rng.standard_normal((2, 5, 4)), requires_grad=True)
    v = mt.tensor(rng.standard_normal((2, 5, 4)), requires_grad=True)
    mask = np.zeros((2, 3, 5), dtype=bool)
    mask[0, 1] = True  # query 1 of batch 0 may see nothing
    with mt.detect_anomaly():  # no NaN anywhere: no FloatingPointError,
        with pytest.warns(mt.autograd.AnomalyWarning, match="1 of 6 rows"):  # but a report
            out, w = _attention(q, k, v, mask=mask)
        (out * out).sum().backward()
    assert np.all(np.isfinite(out.numpy())) and np.all(out.numpy()[0, 1] == 0)
    assert np.all(w.numpy()[0, 1] == 0)
    for t in (q, k, v):
        assert np.all(np.isfinite(t.grad.numpy()))
    assert np.all(q.grad.numpy()[0, 1] == 0)


def test_model_with_an_all_pad_source_has_no_nan(rng):
    model = Transformer(TransformerConfig.tiny(9, 11))
    src = rng.integers(1, 9, (2, 4))
    src[1] = PAD  # every key of source 1 is blocked
    tgt = rng.integers(1, 11, (2, 3))
    logits = model(src, tgt, M.padding_mask(src, PAD))
    loss = F.cross_entropy(logits.transpose(1, 2), rng.integers(1, 11, (2, 3)))
    loss.backward()
    assert np.all(np.isfinite(logits.numpy()))
    for name, p in model.named_parameters():
        assert p.grad is None or np.all(np.isfinite(p.grad.numpy())), name


def test_mha_rejects_an_allowed_style_int_mask():
    mha = MultiHeadAttention(8, 2)
    x = mt.randn(1, 3, 8)
    with pytest.raises(TypeError, match="True = blocked"):
        mha(x, key_padding_mask=np.ones((1, 3), dtype=np.int64))


def test_combine_masks_accepts_lists_and_names_their_shapes_when_they_do_not_fit():
    from transformer.masks import combine_masks

    m = combine_masks([[False, True]], [[False, True], [False, False]])
    assert m.shape == (1, 1, 2, 2) and m.dtype == np.bool_
    with pytest.raises(ValueError, match=r"\(1, 3\).*\(2, 2\)"):
        combine_masks([[False, True, False]], [[False, True], [False, False]])
