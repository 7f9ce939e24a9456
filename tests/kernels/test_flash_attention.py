"""Fused attention (minitensor/kernels/flash_attention.py, ops/attention.py): the numba kernel
against its numpy twin, the twin against the three-step formula, gradcheck in float64, masks
(padding, causal, is_causal, additive, fully masked rows, inf/NaN under a blocked score),
dropout that drops the entries F.dropout drops, and parity with torch (skipped without torch)."""

import math

import numpy as np
import pytest

import minitensor as mt
from minitensor.kernels import flash_attention as KA
from minitensor.kernels.dropout import dropout_numpy
from minitensor.ops.attention import FUSED_MIN_KEYS, FusedAttention, attention

BACKENDS = ("numba", "numpy")


def _qkv(rng, B=2, H=3, Lq=5, Lk=7, d=8, dv=6, dtype=np.float32):
    return (
        rng.standard_normal((B, H, Lq, d)).astype(dtype),
        rng.standard_normal((B, H, Lk, d)).astype(dtype),
        rng.standard_normal((B, H, Lk, dv)).astype(dtype),
    )


def _three_steps(q, k, v, blocked=None, additive=None, scale=None):
    """Attention as the paper writes it, in float64, with an explicit L×L matrix."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if additive is not None:
        s = s + additive
    if blocked is not None:
        s = np.where(blocked, -np.inf, s)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    total = e.sum(-1, keepdims=True)
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return w @ v, w


def _masks(rng, B, Lq, Lk):
    padding = rng.random((B, 1, 1, Lk)) < 0.3
    padding[..., 0] = False
    causal = np.arange(Lk)[None, :] > np.arange(Lq)[:, None] + (Lk - Lq)
    additive = np.where(
        rng.random((1, 1, Lq, Lk)) < 0.2, -np.inf, rng.standard_normal((1, 1, Lq, Lk))
    )
    return {
        "none": (None, None),
        "padding": (padding, None),
        "causal bool": (causal, None),
        "is_causal": (None, Lk - Lq),  # the causal offset: the queries are the last Lq keys
        "padding + is_causal": (padding, Lk - Lq),
        "top-left causal": (padding, 0),
        "additive": (additive, None),
    }


# ---- kernel against twin, twin against the formula ----------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3, 5, 7, 8, 6), (1, 2, 70, 150, 16, 16), (3, 1, 9, 9, 4, 4)])
@pytest.mark.parametrize("p", [0.0, 0.25])
def test_kernel_matches_its_twin_within_float32_rounding(rng, shape, p):
    B, H, Lq, Lk, d, dv = shape
    q, k, v = _qkv(rng, B, H, Lq, Lk, d, dv)
    dout = rng.standard_normal((B, H, Lq, dv)).astype(np.float32)
    for name, (mask, causal) in _masks(rng, B, Lq, Lk).items():
        args = (mask, None, causal, 77, p)
        o1, l1 = KA.fused_attention_forward_numpy(q, k, v, *args)
        o2, l2 = KA.fused_attention_forward_numba(q, k, v, *args)
        assert o2.dtype == np.float32 and o2.shape == (B, H, Lq, dv), name
        np.testing.assert_allclose(o2, o1, rtol=2e-5, atol=2e-6, err_msg=name)
        np.testing.assert_array_equal(np.isneginf(l1), np.isneginf(l2), err_msg=name)
        finite = np.isfinite(l1)
        np.testing.assert_allclose(l2[finite], l1[finite], rtol=2e-6, err_msg=name)
        g1 = KA.fused_attention_backward_numpy(q, k, v, o1, l1, dout, *args)
        g2 = KA.fused_attention_backward_numba(q, k, v, o2, l2, dout, *args)
        for a, b, label in zip(g2, g1, ("dq", "dk", "dv")):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5, err_msg=f"{name} {label}")


@pytest.mark.parametrize("tiles", KA.TILES)
def test_every_tile_size_matches_the_twin(rng, tiles, monkeypatch):
    """Each tile size the kernels may be timed with gives the twin's result, forward and
    backward, for every kind of mask, with dropout, on lengths that leave partial tiles."""
    monkeypatch.setattr(KA, "_CHOSEN", {})
    B, H, Lq, Lk, d, dv = 1, 2, 300, 530, 16, 8
    q, k, v = _qkv(rng, B, H, Lq, Lk, d, dv)
    dout = rng.standard_normal((B, H, Lq, dv)).astype(np.float32)
    for name, (mask, causal) in _masks(rng, B, Lq, Lk).items():
        args = (mask, None, causal, 5, 0.1)
        o1, l1 = KA.fused_attention_forward_numpy(q, k, v, *args)
        o2, l2 = KA.fused_attention_forward_numba(q, k, v, *args, tiles=tiles)
        np.testing.assert_allclose(o2, o1, rtol=2e-5, atol=2e-6, err_msg=f"{tiles} {name}")
        g1 = KA.fused_attention_backward_numpy(q, k, v, o1, l1, dout, *args)
        g2 = KA.fused_attention_backward_numba(q, k, v, o2, l2, dout, *args, tiles=tiles)
        for a, b, label in zip(g2, g1, ("dq", "dk", "dv")):
            np.testing.assert_allclose(
                a, b, rtol=2e-4, atol=2e-5, err_msg=f"{tiles} {name} {label}"
            )
    assert KA._CHOSEN == {}  # tiles given: nothing timed


def test_bad_tiles_get_a_clear_error(rng):
    q, k, v = _qkv(rng)
    for tiles in ((64,), (0, 128), (64.0, 128), "64x128"):
        with pytest.raises(ValueError, match="tiles must be None or"):
            KA.fused_attention_forward_numba(q, k, v, tiles=tiles)


@pytest.fixture
def steady_threads(monkeypatch):
    """The thread count as it is now, for the whole test: it is part of a timing's key, and with
    polite threads it drops to 1 whenever other processes keep the CPUs busy (as the rest of a
    test run may), which would give a test's layouts a second key each."""
    count = KA.jit.threads()
    monkeypatch.setattr(KA.jit, "threads", lambda: count)


def test_tile_sizes_keeps_the_fastest_measured_per_layout(rng, monkeypatch, steady_threads):
    """The first call on a layout times each of TILES (here a fake clock makes the last one
    fastest) and keeps it: the next call on that layout is not timed, another layout is, and
    forward and backward choose apart."""
    monkeypatch.setattr(KA, "_CHOSEN", {})
    timed = []

    def fake_times(calls, rounds):
        timed.append(len(calls))
        return [3.0, 2.0, 1.0][: len(calls)]

    monkeypatch.setattr(KA.jit, "median_times", fake_times)
    q, k, v = _qkv(rng, 1, 2, 40, 40, 8, 8)
    out, lse = KA.fused_attention_forward_numba(q, k, v)
    KA.fused_attention_forward_numba(q, k, v)
    assert timed == [len(KA.TILES)]
    assert list(KA._CHOSEN.values()) == [KA.TILES[-1]]
    KA.fused_attention_backward_numba(q, k, v, out, lse, np.ones_like(out))
    KA.fused_attention_forward_numba(q[:, :, :20], k, v)
    assert len(timed) == 3 and len(KA._CHOSEN) == 3


def test_lengths_share_a_timing_by_power_of_two(rng, monkeypatch, steady_threads):
    """A decoder with a KV cache asks for one query against 1, 2, 3, ... keys: each class of
    key lengths up to a power of two is timed once, not each length."""
    monkeypatch.setattr(KA, "_CHOSEN", {})
    timed = []
    monkeypatch.setattr(KA.jit, "median_times", lambda calls, rounds: timed.append(1) or [1.0] * 3)
    q, k, v = _qkv(rng, 1, 2, 1, 100, 8, 8)
    for length in range(33, 101):
        KA.fused_attention_forward_numba(q, k[:, :, :length], v[:, :, :length])
    assert len(timed) == 2  # 33–64 and 65–128
    assert [KA._length_class(n) for n in (1, 2, 3, 64, 65)] == [1, 2, 4, 64, 128]


def test_deterministic_algorithms_keep_the_default_tiles_untimed(rng, monkeypatch):
    """Under mt.use_deterministic_algorithms(True) nothing is timed: DEFAULT_TILES, whose
    result does not depend on a timing."""
    monkeypatch.setattr(KA, "_CHOSEN", {})

    def no_timing(calls, rounds):
        raise AssertionError("timed under deterministic algorithms")

    monkeypatch.setattr(KA.jit, "median_times", no_timing)
    q, k, v = _qkv(rng, 1, 2, 40, 40, 8, 8)
    mt.use_deterministic_algorithms(True)
    try:
        assert (
            KA.tile_sizes("forward", (q, k, v, KA.additive_mask(None, q, k), False, 0.0), None)
            == KA.DEFAULT_TILES
        )
        KA.fused_attention_forward_numba(q, k, v)
    finally:
        mt.use_deterministic_algorithms(False)
    assert KA._CHOSEN == {}


def test_twin_is_the_three_step_formula(rng):
    q, k, v = _qkv(rng, dtype=np.float64)
    masks = _masks(rng, 2, 5, 7)
    padding, additive = masks["padding"][0], masks["additive"][0]
    out, lse = KA.fused_attention_forward_numpy(q, k, v, padding, 0.3)
    ref, _ = _three_steps(q, k, v, blocked=padding, scale=0.3)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
    s = np.where(padding, -np.inf, q @ np.swapaxes(k, -1, -2) * 0.3)
    np.testing.assert_allclose(lse, np.log(np.exp(s).sum(-1)), rtol=1e-12)
    out, _ = KA.fused_attention_forward_numpy(q, k, v, additive)
    ref, _ = _three_steps(q, k, v, additive=additive)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_drops_the_entries_dropout_of_the_weights_drops(rng, backend):
    q, k, v = _qkv(rng, 2, 2, 6, 9, 4, 4, dtype=np.float64)
    _, w = _three_steps(q, k, v)
    expected = dropout_numpy(w, 1234, 0.4) @ v
    with mt.kernels.use_backend(backend):
        out = FusedAttention.forward(_Ctx(), q, k, v, seed=1234, p=0.4)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)


def _fused_op(q, k, v, mask=None, is_causal=False, dropout=0.0):
    """The fused node as the core calls it (a bottom-right causal offset, Lk − Lq, as these
    tests' references; a dropout seed drawn from minitensor's generator)."""
    causal = k.shape[-2] - q.shape[-2] if is_causal else None
    seed = mt.random.generator().integers(0, 2**64, dtype=np.uint64) if dropout else 0
    return FusedAttention.apply(q, k, v, mask=mask, causal=causal, seed=seed, p=dropout)


class _Ctx:
    def save_for_backward(self, *a):
        pass


# ---- masks: fully masked rows, blocked inf/NaN, empty inputs ------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_rows_give_zero_output_and_zero_gradient(rng, backend):
    q, k, v = (mt.tensor(x, requires_grad=True) for x in _qkv(rng, 2, 2, 4, 5, 8, 8))
    mask = np.zeros((2, 1, 4, 5), dtype=bool)
    mask[0, :, 1] = True  # row 1 of batch 0: every key blocked
    mask[1] = True  # every row of batch 1
    with mt.kernels.use_backend(backend):
        out = _fused_op(q, k, v, mask=mask)
        (out * out).sum().backward()
    assert np.all(np.isfinite(out.numpy())) and np.all(out.numpy()[0, :, 1] == 0)
    assert np.all(out.numpy()[1] == 0) and np.any(out.numpy()[0, :, 0] != 0)
    for t in (q, k, v):
        assert np.all(np.isfinite(t.grad.numpy()))
    assert np.all(q.grad.numpy()[0, :, 1] == 0) and np.all(q.grad.numpy()[1] == 0)
    assert np.all(k.grad.numpy()[1] == 0) and np.all(v.grad.numpy()[1] == 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_blocked_score_is_never_read(rng, backend):
    """An inf in a padded key makes its score inf or NaN; blocked, it must not reach the row."""
    q, k, v = _qkv(rng, 2, 2, 4, 6, 8, 8)
    padding = np.zeros((2, 1, 1, 6), dtype=bool)
    padding[..., 4:] = True
    bad_k = k.copy()
    bad_k[..., 4:, 0] = np.inf
    for mask in (padding, np.where(padding, -np.inf, 0.0).astype(np.float32)):
        with mt.kernels.use_backend(backend):
            clean, _ = _forward(q, k, v, mask)
            dirty, _ = _forward(q, bad_k, v, mask)
        assert np.all(np.isfinite(dirty))
        np.testing.assert_allclose(dirty, clean, rtol=1e-6)


def _forward(q, k, v, mask=None, **kw):
    from minitensor.ops.attention import fused_attention_forward

    return fused_attention_forward(q, k, v, mask, kw.get("scale"), kw.get("causal"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_batch_and_no_keys(rng, backend):
    q, k, v = _qkv(rng, 0, 2, 3, 4, 8, 8)
    with mt.kernels.use_backend(backend):
        out, lse = _forward(q, k, v)
        assert out.shape == (0, 2, 3, 8) and lse.shape == (0, 2, 3)
        q, k, v = _qkv(rng, 1, 2, 3, 0, 8, 8)
        out, lse = _forward(q, k, v)
    assert out.shape == (1, 2, 3, 8) and np.all(out == 0) and np.all(np.isneginf(lse))


def test_bad_inputs_get_clear_errors(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match=r"\(2, 3, 7, 8\)"):
        _forward(q, k, v[:, :, :6])
    with pytest.raises(TypeError, match="bool .True = blocked. or additive float"):
        _forward(q, k, v, np.zeros((2, 1, 1, 7), dtype=np.int64))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 1, 1, 7\)"):
        _forward(q, k, v, np.zeros((3, 1, 1, 7), dtype=bool))
    with pytest.raises(ValueError, match="B, h, Lq, d"):
        FusedAttention.apply(mt.tensor(q[0, 0]), mt.tensor(k[0, 0]), mt.tensor(v[0, 0]))


# ---- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["padding", "is_causal", "additive", "dropout"])
def test_gradcheck_float64(leaf, rng, backend, case):
    q, k, v = leaf(2, 2, 3, 4), leaf(2, 2, 5, 4), leaf(2, 2, 5, 3)
    padding = np.zeros((2, 1, 1, 5), dtype=bool)
    padding[1, ..., 3:] = True
    kw = {
        "padding": dict(mask=padding),
        "is_causal": dict(causal=2, mask=padding),
        "additive": dict(mask=rng.standard_normal((1, 1, 3, 5))),
        "dropout": dict(mask=padding, seed=99, p=0.3),
    }[case]
    with mt.kernels.use_backend(backend):
        assert mt.gradcheck(lambda q, k, v: FusedAttention.apply(q, k, v, **kw), q, k, v)


def test_three_dimensional_inputs_are_one_head_each(rng):
    q, k, v = (mt.tensor(x[:, 0], dtype=mt.float64) for x in _qkv(rng, dtype=np.float64))
    out, _ = attention(q, k, v)
    ref, _ = _three_steps(q.numpy(), k.numpy(), v.numpy())
    assert out.shape == (2, 5, 6)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)


# ---- torch parity ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_torch_scaled_dot_product_attention(rng, backend):
    torch = pytest.importorskip("torch")
    q, k, v = _qkv(rng, 2, 3, 6, 6, 8, 5, dtype=np.float64)
    dout = rng.standard_normal((2, 3, 6, 5))
    padding = np.zeros((2, 1, 1, 6), dtype=bool)
    padding[0, ..., 4:] = True
    for mask, causal in ((padding, False), (None, True), (padding, True)):
        tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
        # torch's bool attn_mask means True = ALLOWED: pass the complement of ours
        # (torch takes is_causal or a mask, not both: then the triangle goes into the mask)
        blocked = mask
        if causal and mask is not None:
            blocked = mask | np.triu(np.ones((6, 6), bool), 1)
        t_mask = None if mask is None else torch.tensor(~blocked)
        t_out = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=t_mask, is_causal=causal and mask is None
        )
        t_out.backward(torch.tensor(dout))
        ours = [mt.tensor(x, dtype=mt.float64, requires_grad=True) for x in (q, k, v)]
        with mt.kernels.use_backend(backend):
            out = _fused_op(*ours, mask=mask, is_causal=causal)
            out.backward(mt.tensor(dout, dtype=mt.float64))
        np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
        for a, t in zip(ours, (tq, tk, tv)):
            np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-11)


# ---- MultiHeadAttention: the fused path and the explicit one -----------------------------------


def _mha_pair(rng, **kw):
    from transformer.attention import MultiHeadAttention

    mha = MultiHeadAttention(12, 3, **kw).to(mt.float64)
    return mha


@pytest.mark.parametrize("backend", BACKENDS)
def test_mha_fused_equals_explicit_and_keeps_the_maps(rng, backend):
    from transformer import masks as M

    mha = _mha_pair(rng)
    L = FUSED_MIN_KEYS + 3
    x = rng.standard_normal((2, L, 12))
    kpm = np.zeros((2, L), dtype=bool)
    kpm[1, 20:] = True
    results = []
    with mt.kernels.use_backend(backend):
        for need in (True, False):
            xt = mt.tensor(x, dtype=mt.float64, requires_grad=True)
            out, w = mha(xt, key_padding_mask=kpm, attn_mask=M.causal_mask(L), need_weights=need)
            assert (mha._record[0] is None) == (not need)  # the fused path keeps no weights
            (out * out).sum().backward()
            results.append(
                (
                    out.numpy(),
                    xt.grad.numpy(),
                    mha.w_q.weight.grad.numpy().copy(),
                    w,
                    mha.last_weights.copy(),
                    mha.score_stats(),
                )
            )
            mha.zero_grad()
    (o1, gx1, gw1, w1, maps1, stats1), (o2, gx2, gw2, w2, maps2, stats2) = results
    assert w1 is not None and w2 is None
    np.testing.assert_allclose(o2, o1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gx2, gx1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw2, gw1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(maps2, maps1, rtol=1e-12, atol=1e-14)
    assert stats2 == pytest.approx(stats1, rel=1e-12)


def test_mha_module_switch_and_model_logits(rng):
    from transformer import Transformer, TransformerConfig
    from transformer.attention import MultiHeadAttention

    model = Transformer(TransformerConfig.tiny(7, 9, num_encoder_layers=2, max_len=64))
    src, tgt = rng.integers(1, 7, (3, 40)), rng.integers(1, 9, (3, 36))
    explicit = model(src, tgt).numpy()
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            m.need_weights = False
    fused_logits = model(src, tgt).numpy()
    np.testing.assert_allclose(fused_logits, explicit, rtol=2e-5, atol=2e-6)
    assert model.attention_maps()["decoder.layers.0.cross_attn"].shape == (3, 2, 36, 40)


def test_mha_two_dimensional_input_names_module_and_shapes(rng):
    from transformer.attention import MultiHeadAttention

    mha = MultiHeadAttention(8, 2)
    with pytest.raises(
        ValueError,
        match=r"MultiHeadAttention.*query must be \(B, L, d_model=8\), "
        r"got shape \(3, 8\)",
    ):
        mha(mt.randn(3, 8))


@pytest.mark.parametrize("need", [True, False])
def test_mha_empty_batch(need):
    from transformer.attention import MultiHeadAttention

    mha = MultiHeadAttention(8, 2)
    x = mt.randn(0, FUSED_MIN_KEYS, 8, requires_grad=True)
    out, _ = mha(x, need_weights=need)
    assert out.shape == (0, FUSED_MIN_KEYS, 8)
    out.sum().backward()
    assert x.grad.shape == (0, FUSED_MIN_KEYS, 8)


def test_short_sequences_keep_the_explicit_path_but_return_no_weights(rng):
    from transformer.attention import MultiHeadAttention

    mha = MultiHeadAttention(8, 2)
    x = mt.tensor(rng.standard_normal((2, FUSED_MIN_KEYS - 1, 8)))
    out, w = mha(x, need_weights=False)
    assert w is None and mha.last_weights is not None
    np.testing.assert_allclose(out.numpy(), mha(x)[0].numpy(), rtol=1e-6)


def test_a_mask_that_blocks_the_future_lets_the_kernel_skip_tiles(rng):
    q, k, _ = _qkv(rng, 2, 1, 6, 6, 4, 4)
    causal = np.triu(np.ones((6, 6), dtype=bool), 1)
    padding = np.zeros((2, 1, 1, 6), dtype=bool)
    padding[1, ..., 4:] = True
    assert KA._implies_causal(KA.additive_mask(causal | padding, q, k), q, k)
    assert not KA._implies_causal(KA.additive_mask(padding, q, k), q, k)
    almost = causal.copy()
    almost[0, 5] = False
    assert not KA._implies_causal(KA.additive_mask(almost, q, k), q, k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_seed_same_dropout_as_the_explicit_path(rng, backend):
    """With one manual_seed, the fused op and matmul → softmax → F.dropout → matmul drop the
    same weights: both draw one seed from minitensor's generator and hash the same positions."""
    q, k, v = (mt.tensor(x, dtype=mt.float64) for x in _qkv(rng, 2, 2, 6, 9, 4, 4, np.float64))
    with mt.kernels.use_backend(backend):
        mt.manual_seed(3)
        explicit, _ = attention(q, k, v, dropout=0.3, need_weights=True)  # the five steps
        mt.manual_seed(3)
        fused = _fused_op(q, k, v, dropout=0.3)
    np.testing.assert_allclose(fused.numpy(), explicit.numpy(), rtol=1e-12, atol=1e-14)


def test_integer_masks_are_refused_by_the_core_rule(rng):
    from transformer.attention import MultiHeadAttention

    q, k, v = (mt.tensor(x) for x in _qkv(rng))
    with pytest.raises(TypeError, match="attention: a mask must be bool"):
        attention(q, k, v, mask=np.zeros((2, 1, 1, 7), dtype=np.int64))
    with pytest.raises(TypeError, match="MultiHeadAttention.*a mask must be bool"):
        MultiHeadAttention(8, 2)(mt.randn(1, 3, 8), mask=np.zeros((1, 1, 3, 3), dtype=np.int64))
