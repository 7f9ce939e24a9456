"""Scaled dot-product and multi-head attention: the formula, masks, gradchecks, diagnostics,
rotary positions; parity with torch.nn.MultiheadAttention (skipped without torch)."""

import math

import numpy as np
import pytest

import minitensor as mt
from minitensor.ops.attention import attention
from transformer import masks as M
from transformer.attention import AttentionCache, MultiHeadAttention
from transformer.embeddings import RotaryEmbedding


def _attention(q, k, v, mask=None):
    """The core with its weights: (output, weights)."""
    return attention(q, k, v, mask, need_weights=True)


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def test_sdpa_matches_the_formula(rng):
    q = rng.standard_normal((2, 3, 4, 8))
    k = rng.standard_normal((2, 3, 6, 8))
    v = rng.standard_normal((2, 3, 6, 5))
    mask = rng.random((2, 1, 4, 6)) < 0.3
    mask[..., 0] = False
    out, w = _attention(
        mt.tensor(q, dtype=mt.float64),
        mt.tensor(k, dtype=mt.float64),
        mt.tensor(v, dtype=mt.float64),
        mask=mask,
    )
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(8) + np.where(mask, -np.inf, 0.0)
    ref_w = _softmax(scores)
    assert out.shape == (2, 3, 4, 5) and w.shape == (2, 3, 4, 6)
    np.testing.assert_allclose(w.numpy(), ref_w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out.numpy(), ref_w @ v, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-12)


def test_sdpa_shape_errors_name_the_shapes():
    q, k = mt.randn(2, 4, 8), mt.randn(2, 6, 7)
    with pytest.raises(ValueError, match=r"\(2, 6, 7\)"):
        _attention(q, k, k)


def test_sdpa_gradcheck_with_mask(leaf):
    q, k, v = leaf(2, 3, 4), leaf(2, 5, 4), leaf(2, 5, 3)
    mask = np.zeros((2, 3, 5), dtype=bool)
    mask[0, :, 3:] = True
    mask[1, 2] = True  # one fully masked row too
    assert mt.gradcheck(lambda q, k, v: _attention(q, k, v, mask=mask)[0], q, k, v)


def _mha64(**kw):
    mha = MultiHeadAttention(4, 2, **kw)
    return mha.double()


def test_mha_gradcheck_self_attention_inputs_and_weights(leaf):
    mha = _mha64()
    x = leaf(2, 3, 4)
    kpm = np.array([[False, False, True], [False, False, False]])
    params = [mha.w_q.weight, mha.w_k.bias, mha.w_v.weight, mha.w_o.weight, mha.w_o.bias]
    assert mt.gradcheck(lambda x, *ps: mha(x, key_padding_mask=kpm)[0], x, *params)


def test_mha_gradcheck_cross_attention(leaf):
    mha = _mha64()
    x, memory = leaf(2, 3, 4), leaf(2, 4, 4)
    params = [mha.w_q.weight, mha.w_k.weight, mha.w_v.bias]
    assert mt.gradcheck(lambda x, m, *ps: mha(x, m, m)[0], x, memory, *params)


def test_mha_gradcheck_rotary(leaf):
    mha = MultiHeadAttention(4, 2, rotary=RotaryEmbedding(2, 8)).double()
    x = leaf(1, 4, 4)
    assert mt.gradcheck(lambda x, w: mha(x, attn_mask=M.causal_mask(4))[0], x, mha.w_k.weight)


def test_mha_returns_per_head_weights_and_records_them(rng):
    mha = MultiHeadAttention(12, 3)
    x = mt.tensor(rng.standard_normal((2, 5, 12)))
    mem = mt.tensor(rng.standard_normal((2, 7, 12)))
    out, w = mha(x, mem)
    assert out.shape == (2, 5, 12) and w.shape == (2, 3, 5, 7)  # cross: (L_q, L_k)
    np.testing.assert_array_equal(mha.last_weights, w.numpy())
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-5)


def test_self_attention_equals_attention_to_a_copy(rng):
    mha = MultiHeadAttention(8, 2).double()
    x = mt.tensor(rng.standard_normal((2, 3, 8)), dtype=mt.float64)
    fused, _ = mha(x)  # key is query: projections share x2
    separate, _ = mha(
        x, mt.tensor(x.numpy(), dtype=mt.float64), mt.tensor(x.numpy(), dtype=mt.float64)
    )
    np.testing.assert_allclose(fused.numpy(), separate.numpy(), rtol=1e-12)


def test_score_stats_see_the_scale(rng):
    x = mt.tensor(rng.standard_normal((2, 4, 16)))
    scaled = MultiHeadAttention(16, 2)
    unscaled = MultiHeadAttention(16, 2, attention_scale=False)
    unscaled.load_state_dict(scaled.state_dict())
    scaled(x)
    unscaled(x)
    s, u = scaled.score_stats(), unscaled.score_stats()
    assert set(s) >= {"max_abs_score", "mean_abs_score", "std_score", "max_weight_mean"}
    np.testing.assert_allclose(u["max_abs_score"], s["max_abs_score"] * math.sqrt(8), rtol=1e-5)
    assert u["max_weight_mean"] >= s["max_weight_mean"]


def test_score_stats_ignore_blocked_positions(rng):
    mha = MultiHeadAttention(8, 2)
    x = mt.tensor(rng.standard_normal((1, 4, 8)))
    mha(x, attn_mask=M.causal_mask(4))
    raw, scale, _ = mha._last_scores
    allowed = ~np.broadcast_to(M.causal_mask(4), raw.shape)
    assert mha.score_stats()["max_abs_score"] == pytest.approx(
        float(np.abs(raw * scale)[allowed].max())
    )


def test_rotary_scores_depend_only_on_the_offset(rng):
    rope = RotaryEmbedding(8, 32).double()
    q = rng.standard_normal(8)
    k = rng.standard_normal(8)

    def score(m, n):
        qm = rope(mt.tensor(np.tile(q, (1, 1, m + 1, 1)), dtype=mt.float64)).numpy()[0, 0, m]
        kn = rope(mt.tensor(np.tile(k, (1, 1, n + 1, 1)), dtype=mt.float64)).numpy()[0, 0, n]
        return qm @ kn

    assert score(5, 2) == pytest.approx(score(13, 10), rel=1e-10)
    assert score(5, 2) != pytest.approx(score(5, 4), rel=1e-3)
    # rotation keeps lengths
    x = rng.standard_normal((1, 1, 6, 8))
    y = rope(mt.tensor(x, dtype=mt.float64)).numpy()
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)


def test_self_attention_cache_matches_full_attention(rng):
    mha = MultiHeadAttention(8, 2, rotary=RotaryEmbedding(4, 16)).double().eval()
    x = mt.tensor(rng.standard_normal((2, 5, 8)), dtype=mt.float64)
    full, _ = mha(x, attn_mask=M.causal_mask(5))
    cache = AttentionCache()
    steps = [
        mha(mt.tensor(x.numpy()[:, t : t + 1], dtype=mt.float64), cache=cache)[0].numpy()
        for t in range(5)
    ]
    assert len(cache) == 5
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full.numpy(), rtol=1e-10, atol=1e-12)


def test_mha_input_errors():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="d_model=8"):
        mha(mt.randn(1, 3, 6))
    with pytest.raises(ValueError, match="multiple"):
        MultiHeadAttention(10, 3)


# ---------------------------------------------------------------------------- torch parity
@pytest.mark.torch
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-9)])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_mha_matches_torch_multihead_attention(rng, dtype, tol, kind):
    torch = pytest.importorskip("torch")
    from transformer.interop import mha_from_torch, mha_to_torch

    ours = MultiHeadAttention(16, 4).to(dtype)
    twin = mha_to_torch(ours)
    # and back: a fresh module loaded from torch's weights must equal the original
    again = mha_from_torch(MultiHeadAttention(16, 4).to(dtype), twin)
    for (n, a), (_, b) in zip(ours.named_parameters(), again.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=n)

    x = rng.standard_normal((3, 5, 16)).astype(dtype)
    mem = rng.standard_normal((3, 6, 16)).astype(dtype) if kind == "cross" else x
    l_k = mem.shape[1]
    kpm = np.zeros((3, l_k), dtype=bool)
    kpm[0, -2:] = True
    attn = M.causal_mask(5) if kind == "self" else None

    xt = mt.tensor(x, dtype=dtype, requires_grad=True)
    mt_mem = xt if kind == "self" else mt.tensor(mem, dtype=dtype, requires_grad=True)
    out, w = ours(xt, mt_mem, mt_mem, key_padding_mask=kpm, attn_mask=attn)
    (out * out).sum().backward()

    tx = torch.tensor(x, requires_grad=True)
    tmem = tx if kind == "self" else torch.tensor(mem, requires_grad=True)
    tout, tw = twin(
        tx,
        tmem,
        tmem,
        key_padding_mask=torch.tensor(kpm),
        attn_mask=None if attn is None else torch.tensor(attn),
        need_weights=True,
        average_attn_weights=False,
    )
    (tout * tout).sum().backward()

    def close(a, b, what):
        scale = np.abs(b).max()
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, err_msg=what)

    close(out.numpy(), tout.detach().numpy(), "output")
    close(w.numpy(), tw.detach().numpy(), "weights")
    close(xt.grad.numpy(), tx.grad.numpy(), "input grad")
    if kind == "cross":
        close(mt_mem.grad.numpy(), tmem.grad.numpy(), "memory grad")
    d = 16
    tgrad = {
        "w_q.weight": twin.in_proj_weight.grad[:d],
        "w_k.weight": twin.in_proj_weight.grad[d : 2 * d],
        "w_v.weight": twin.in_proj_weight.grad[2 * d :],
        "w_q.bias": twin.in_proj_bias.grad[:d],
        "w_v.bias": twin.in_proj_bias.grad[2 * d :],
        "w_o.weight": twin.out_proj.weight.grad,
        "w_o.bias": twin.out_proj.bias.grad,
    }
    params = dict(ours.named_parameters())
    for name, g in tgrad.items():
        close(params[name].grad.numpy(), g.numpy(), name)
    # the key bias gets no gradient in exact arithmetic (softmax ignores a per-row constant)
    assert (
        np.abs(params["w_k.bias"].grad.numpy()).max()
        < 1e3 * tol * np.abs(tgrad["w_q.weight"].numpy()).max()
    )
