"""The one attention core (minitensor/ops/attention.py) and everything that calls it, against
torch on the same inputs: F.scaled_dot_product_attention, nn.MultiheadAttention,
transformer.MultiHeadAttention, the fused node and the KV-cache step, in every mask form, values
and gradients (to q, k, v and a float mask); the rule between the five steps and the fused
path; the five steps in mt.viz.trace with their value ranges."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn
from minitensor.ops import attention as A
from transformer.attention import AttentionCache, MultiHeadAttention

# torch warns when one mask is bool and the other float (it still combines them, as we do)
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:Support for mismatched")]

SHORT, LONG = (3, 5), (A.FUSED_MIN_KEYS + 4, A.FUSED_MIN_KEYS + 1)  # (L_q, L_k); long is fused


def _torch():
    return pytest.importorskip("torch")


def _pair(x, grad=True):
    """The same float64 values as a minitensor and a torch tensor, both requiring grad."""
    torch = _torch()
    return (
        mt.tensor(x, dtype=mt.float64, requires_grad=grad),
        torch.tensor(x, dtype=torch.float64, requires_grad=grad),
    )


def _close(ours, theirs, what):
    np.testing.assert_allclose(
        ours.numpy() if isinstance(ours, mt.Tensor) else ours,
        theirs.detach().numpy(),
        rtol=1e-9,
        atol=1e-11,
        err_msg=what,
    )


def _sdpa_mask(rng, form, n, h, lq, lk):
    """(attn_mask in torch's meaning: bool True = may attend, or float, is_causal)."""
    allowed = rng.random((n, h, lq, lk)) > 0.3
    allowed[..., 0] = True  # every row sees a key (torch gives NaN for a row that sees none)
    return {
        "none": (None, False),
        "bool 2-D": (allowed[0, 0], False),
        "bool 3-D": (allowed[:, 0], False) if h == 1 else (allowed[0], False),
        "bool 4-D": (allowed[:, :1], False),
        "float": (rng.standard_normal((1, h, lq, lk)), False),
        "is_causal": (None, True),
    }[form]


SDPA_FORMS = ["none", "bool 2-D", "bool 3-D", "bool 4-D", "float", "is_causal"]


# ---- F.scaled_dot_product_attention ----------------------------------------------------------


@pytest.mark.parametrize("lengths", [SHORT, SHORT[::-1], LONG, LONG[::-1]])
@pytest.mark.parametrize("form", SDPA_FORMS)
def test_sdpa_matches_torch_in_every_mask_form(rng, lengths, form):
    torch = _torch()
    lq, lk = lengths  # L_q < L_k and L_q > L_k: torch's top-left causal alignment
    n, h, d = 2, 3, 8
    (q, tq), (k, tk), (v, tv) = (
        _pair(rng.standard_normal(s)) for s in ((n, h, lq, d), (n, h, lk, d), (n, h, lk, 5))
    )
    mask, causal = _sdpa_mask(rng, form, n, h, lq, lk)
    t_mask = None if mask is None else torch.tensor(mask)
    t_out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=t_mask, is_causal=causal, scale=0.3
    )
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=0.3)
    _close(out, t_out, "output")
    grad = rng.standard_normal(t_out.shape)
    t_out.backward(torch.tensor(grad))
    out.backward(mt.tensor(grad, dtype=mt.float64))
    for ours, theirs, name in ((q, tq, "dq"), (k, tk, "dk"), (v, tv, "dv")):
        _close(ours.grad, theirs.grad, name)
    if lk >= A.FUSED_MIN_KEYS:  # nothing reads this graph: one fused node
        assert out.grad_fn.name == "fused_attention"


@pytest.mark.parametrize("lengths", [SHORT, LONG])
def test_sdpa_three_dimensional_inputs_are_one_head_each(rng, lengths):
    torch = _torch()
    lq, lk = lengths
    (q, tq), (k, tk), (v, tv) = (_pair(rng.standard_normal((2, n, 4))) for n in (lq, lk, lk))
    allowed = rng.random((2, lq, lk)) > 0.3
    allowed[..., 0] = True
    t_out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=torch.tensor(allowed)
    )
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    _close(out, t_out, "output")
    t_out.sum().backward()
    out.sum().backward()
    _close(q.grad, tq.grad, "dq")
    if lk >= A.FUSED_MIN_KEYS:
        assert "fused_attention" in _op_names(out)


@pytest.mark.parametrize("lengths", [SHORT, LONG])
@pytest.mark.parametrize("qkv_grad", [True, False])
def test_sdpa_float_mask_that_requires_grad_is_differentiated(rng, lengths, qkv_grad):
    """A learned attention bias trains (issue 20 #6), also when q, k, v need no gradient."""
    torch = _torch()
    lq, lk = lengths
    qkv = [_pair(rng.standard_normal((2, 2, n, 4)), qkv_grad) for n in (lq, lk, lk)]
    bias, t_bias = _pair(rng.standard_normal((2, 1, lq, lk)))
    t_out = torch.nn.functional.scaled_dot_product_attention(*(t for _, t in qkv), attn_mask=t_bias)
    out = F.scaled_dot_product_attention(*(m for m, _ in qkv), attn_mask=bias)
    _close(out, t_out, "output")
    (t_out**2).sum().backward()
    (out**2).sum().backward()
    _close(bias.grad, t_bias.grad, "d attn_mask")
    if qkv_grad:
        for (ours, theirs), name in zip(qkv, ("dq", "dk", "dv")):
            _close(ours.grad, theirs.grad, name)


def test_sdpa_bool_mask_means_may_attend_and_gqa_shares_heads(rng):
    torch = _torch()
    (q, tq), (k, tk), (v, tv) = (
        _pair(rng.standard_normal(s)) for s in ((1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4))
    )
    allowed = np.tril(np.ones((3, 5), bool))
    t_out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=torch.tensor(allowed), enable_gqa=True
    )
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    _close(out, t_out, "output")
    t_out.sum().backward()
    out.sum().backward()
    _close(k.grad, tk.grad, "dk")


def test_sdpa_dropout_keeps_the_expected_value(rng):
    q, k, v = (mt.tensor(rng.standard_normal((2, 1, 4, 3))) for _ in range(3))
    base = F.scaled_dot_product_attention(q, k, v)
    mt.manual_seed(1)
    dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not np.allclose(dropped.numpy(), base.numpy())
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: dropout must be"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)


def test_mask_errors_name_the_op_and_the_shapes(rng):
    q, k, v = (mt.tensor(rng.standard_normal((2, 1, 4, 3))) for _ in range(3))
    with pytest.raises(TypeError, match=r"scaled_dot_product_attention.*may attend.*int64"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 4), np.int64))
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: mask of shape \(3, 4\)"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((3, 4), bool))
    with pytest.raises(ValueError, match=r"not both"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 4), bool), is_causal=True)


# ---- nn.MultiheadAttention -------------------------------------------------------------------


def _mha_pair(e=8, h=2, batch_first=True):
    torch = _torch()
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=batch_first).double()
    ours = nn.MultiheadAttention(e, h, batch_first=batch_first, dtype=mt.float64)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _mha_masks(rng, form, n, h, lq, lk):
    """(key_padding_mask, attn_mask) in nn.MultiheadAttention's meaning: True = not allowed."""
    kpm = np.zeros((n, lk), bool)
    kpm[1, lk - 2 :] = True
    causal = np.triu(np.ones((lq, lk), bool), 1)
    per_head = rng.random((n * h, lq, lk)) < 0.3
    per_head[..., 0] = False
    return {
        "none": (None, None),
        "key_padding_mask": (kpm, None),
        "bool 2-D": (None, causal),
        "bool 3-D": (None, per_head),
        "float": (None, rng.standard_normal((lq, lk))),
        "both": (kpm, causal),
        "both, float padding": (np.where(kpm, -np.inf, 0.0), causal),
    }[form]


MHA_FORMS = [
    "none",
    "key_padding_mask",
    "bool 2-D",
    "bool 3-D",
    "float",
    "both",
    "both, float padding",
]


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("lengths", [SHORT, LONG])
@pytest.mark.parametrize("form", MHA_FORMS)
def test_nn_multihead_attention_matches_torch(rng, form, lengths, need_weights):
    torch = _torch()
    lq, lk = lengths
    ours, theirs = _mha_pair()
    (q, tq), (k, tk), (v, tv) = (_pair(rng.standard_normal((2, n, 8))) for n in (lq, lk, lk))
    kpm, am = _mha_masks(rng, form, 2, 2, lq, lk)
    tkw = {
        "key_padding_mask": None if kpm is None else torch.tensor(kpm),
        "attn_mask": None if am is None else torch.tensor(am),
    }
    t_out, t_w = theirs(tq, tk, tv, need_weights=need_weights, **tkw)
    out, w = ours(q, k, v, key_padding_mask=kpm, attn_mask=am, need_weights=need_weights)
    _close(out, t_out, "output")
    assert (w is None) == (t_w is None)
    if w is not None:
        _close(w, t_w, "weights")
    t_out.sum().backward()
    out.sum().backward()
    for ours_t, theirs_t, name in ((q, tq, "dquery"), (k, tk, "dkey"), (v, tv, "dvalue")):
        _close(ours_t.grad, theirs_t.grad, name)
    _close(ours.in_proj_weight.grad, theirs.in_proj_weight.grad, "d in_proj_weight")


def test_nn_multihead_attention_learns_a_float_attn_mask_with_key_padding(rng):
    torch = _torch()
    ours, theirs = _mha_pair()
    (x, tx), (bias, t_bias) = _pair(rng.standard_normal((2, 4, 8))), _pair(rng.random((4, 4)))
    kpm = np.array([[False] * 4, [False, False, False, True]])
    t_out, _ = theirs(tx, tx, tx, key_padding_mask=torch.tensor(kpm), attn_mask=t_bias)
    out, _ = ours(x, x, x, key_padding_mask=kpm, attn_mask=bias)
    _close(out, t_out, "output")
    (t_out**2).sum().backward()
    (out**2).sum().backward()
    _close(bias.grad, t_bias.grad, "d attn_mask")


def test_nn_multihead_attention_with_a_4d_query_says_what_it_expects():
    mha = nn.MultiheadAttention(8, 2)
    with pytest.raises(ValueError, match=r"MultiheadAttention.*\(2, 3, 4, 8\).*\(L, N, E\)"):
        mha(mt.randn(2, 3, 4, 8), mt.randn(2, 3, 4, 8), mt.randn(2, 3, 4, 8))


# ---- transformer.MultiHeadAttention, its KV-cache step ---------------------------------------


def _transformer_pair(d=8, h=2):
    """transformer.MultiHeadAttention and torch's module with the same weights."""
    torch = _torch()
    ours = MultiHeadAttention(d, h).to(mt.float64)
    theirs = torch.nn.MultiheadAttention(d, h, batch_first=True).double()
    stacked = np.concatenate([lin.weight.numpy() for lin in (ours.w_q, ours.w_k, ours.w_v)])
    biases = np.concatenate([lin.bias.numpy() for lin in (ours.w_q, ours.w_k, ours.w_v)])
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.tensor(stacked))
        theirs.in_proj_bias.copy_(torch.tensor(biases))
        theirs.out_proj.weight.copy_(torch.tensor(ours.w_o.weight.numpy()))
        theirs.out_proj.bias.copy_(torch.tensor(ours.w_o.bias.numpy()))
    return ours, theirs


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("lengths", [SHORT, LONG])
@pytest.mark.parametrize("form", ["none", "key_padding_mask", "bool 2-D", "float", "both"])
def test_transformer_multi_head_attention_matches_torch(rng, form, lengths, need_weights):
    torch = _torch()
    lq, lk = lengths
    ours, theirs = _transformer_pair()
    (x, tx), (m, tm) = (
        _pair(rng.standard_normal((2, lq, 8))),
        _pair(rng.standard_normal((2, lk, 8))),
    )
    kpm, am = _mha_masks(rng, form, 2, 2, lq, lk)
    t_out, t_w = theirs(
        tx,
        tm,
        tm,
        key_padding_mask=None if kpm is None else torch.tensor(kpm),
        attn_mask=None if am is None else torch.tensor(am),
        average_attn_weights=False,
    )
    out, w = ours(x, m, m, key_padding_mask=kpm, attn_mask=am, need_weights=need_weights)
    _close(out, t_out, "output")
    _close(ours.last_weights, t_w, "last_weights")
    t_out.sum().backward()
    out.sum().backward()
    _close(x.grad, tx.grad, "dquery")
    _close(m.grad, tm.grad, "dmemory")


@pytest.mark.parametrize("n_cached, n_new", [(0, 3), (3, 1), (3, 2), (A.FUSED_MIN_KEYS, 3)])
def test_kv_cache_step_is_causal_with_an_explicit_offset(rng, n_cached, n_new):
    """The cache step (queries after n_cached positions) equals torch's attention over the whole
    sequence with a causal mask, on its last n_new rows."""
    torch = _torch()
    ours, theirs = _transformer_pair()
    ours.eval()
    total = n_cached + n_new
    x = rng.standard_normal((2, total, 8))
    causal = torch.tensor(np.triu(np.ones((total, total), bool), 1))
    expected, _ = theirs(*(torch.tensor(x),) * 3, attn_mask=causal)
    cache = AttentionCache()
    if n_cached:
        ours(mt.tensor(x[:, :n_cached], dtype=mt.float64), cache=cache, is_causal=True)
    with mt.no_grad():
        step, _ = ours(
            mt.tensor(x[:, n_cached:], dtype=mt.float64),
            cache=cache,
            is_causal=True,
            need_weights=False,
        )
    _close(step, expected[:, n_cached:], "cached step")
    assert len(cache) == total


def test_the_cache_offset_is_the_transformer_mask_alignment():
    """transformer.masks.causal_mask(L, L_k) is the core's causal mask at offset L_k − L."""
    from transformer import masks as M

    np.testing.assert_array_equal(M.causal_mask(2, 5), A.causal_mask(2, 5, offset=3))
    np.testing.assert_array_equal(A.causal_mask(2, 3), np.triu(np.ones((2, 3), bool), 1))


# ---- the rule between the paths, and the five steps in the trace ------------------------------


def _op_names(t):
    """The op names of t's graph."""
    return [node.name for node in mt.autograd.topological_order(t.grad_fn)]


FIVE_STEPS = ["matmul", "mul", "masked_fill", "softmax", "matmul"]


def test_the_rule_five_steps_when_something_reads_the_graph_fused_otherwise(rng):
    n = A.FUSED_MIN_KEYS + 8  # enough keys for the fused path
    q, k, v = (mt.tensor(rng.standard_normal((1, 2, n, 4)), requires_grad=True) for _ in "qkv")
    mask = np.zeros((n, n), bool)
    mask[:, -1] = True
    assert _op_names(A.attention(q, k, v, mask)[0]) == ["fused_attention"]
    with mt.autograd.keep_intermediates():  # the step-through keeps every node
        names = _op_names(A.attention(q, k, v, mask)[0])
    assert {"mul", "masked_fill", "softmax"} <= set(names) and "fused_attention" not in names
    out, weights = A.attention(q, k, v, mask, need_weights=True)
    assert weights.grad_fn.name == "softmax" and "fused_attention" not in _op_names(out)
    short = [mt.tensor(rng.standard_normal((1, 2, 5, 4))) for _ in "qkv"]
    with mt.no_grad():
        assert A.attention(*short)[0].shape == (1, 2, 5, 4)


def test_trace_of_a_model_shows_the_five_steps_with_their_ranges(rng):
    from transformer import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.tiny(7, 9, num_encoder_layers=1, num_decoder_layers=1))
    src, tgt = rng.integers(1, 7, (2, 5)), rng.integers(1, 9, (2, 4))
    with mt.viz.trace(scope="decoder.layers.0.self_attn", quiet=True) as t:
        model(src, tgt)
    ops = [r.op for r in t.records]
    start = next(i for i in range(len(ops)) if ops[i : i + 5] == FIVE_STEPS)
    steps = t.records[start : start + 5]
    assert all(r.stats is not None for r in steps)  # each step's min / max / mean
    assert steps[2].marks == []  # the causal mask's −∞ is by design: no ⚠
    scores, scaled = steps[0], steps[1]
    scale = 1 / np.sqrt(model.cfg.d_model // model.cfg.n_heads)
    np.testing.assert_allclose(
        np.array(scaled.stats[:2]), np.array(scores.stats[:2]) * scale, rtol=1e-5
    )
    assert "max" in steps[3].line() and steps[3].stats[1] <= 1.0
    untraced = _op_names(model(src, tgt))  # nothing reads it: scale and mask in the softmax
    assert "masked_fill" not in untraced and untraced.count("softmax") == 3


@pytest.mark.parametrize("mask", [np.array([[0, 0, 1]]), mt.tensor([[0, 0, 1]])])
def test_scaled_dot_product_attention_refuses_integer_masks(mask):
    # one mask rule everywhere: an integer mask would be added to the scores, so it is refused
    q = mt.randn(1, 1, 3, 4)
    with pytest.raises(TypeError, match=r"scaled_dot_product_attention.*int64.*mask != 0"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
