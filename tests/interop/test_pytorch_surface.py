"""torch's names, side by side: each call on the same inputs in minitensor and in torch — values,
gradients, returned types and dtypes. Skipped without torch."""

import math
import sys
import warnings

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as MF
import minitensor.nn.functional as FT  # torch.nn.functional's spelling
from minitensor import nn, optim

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def pair(array, requires_grad=True):
    """The same numbers as a minitensor tensor and a torch tensor (both leaves)."""
    a = np.asarray(array)
    ours = mt.tensor(a, dtype=a.dtype, requires_grad=requires_grad and a.dtype.kind == "f")
    theirs = torch.tensor(a, requires_grad=requires_grad and a.dtype.kind == "f")
    return ours, theirs


def rand(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check(ours, theirs, atol=1e-10, rtol=1e-7):
    """Same shape, dtype and values."""
    assert isinstance(ours, mt.Tensor)
    t = theirs.detach().numpy()
    assert ours.shape == t.shape
    assert ours.dtype == t.dtype, (ours.dtype, t.dtype)
    np.testing.assert_allclose(ours.numpy(), t, atol=atol, rtol=rtol)


def check_backward(out, tout, leaves, atol=1e-10):
    """Backward from a random projection of the outputs; every leaf's gradient agrees."""
    w = rand(*out.shape, seed=7, dtype=out.dtype) if out.ndim else np.asarray(1.3, out.dtype)
    (out * mt.tensor(w, dtype=w.dtype)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    for ours, theirs in leaves:
        np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), atol=atol, rtol=1e-7)


# ----------------------------------------------------------------------------- nn.functional
def test_nn_functional_is_minitensor_functional():
    import minitensor.nn.functional as F

    assert F is mt.functional is nn.functional
    assert sys.modules["minitensor.nn.functional"] is mt.functional


@pytest.mark.parametrize("pads", [(1, 2), (0, 1, 2, 0), (2, 1, 1, 1, 1, 0), (-1, 2), (1, -2, 0, 1)])
def test_pad_constant(pads):
    x, tx = pair(rand(2, 3, 4))
    check(FT.pad(x, pads, value=0.5), TF.pad(tx, pads, value=0.5))
    check_backward(FT.pad(x, pads), TF.pad(tx, pads), [(x, tx)])


def test_pad_refuses_a_mode_torch_lacks():
    # reflect, replicate and circular are torch's (tests/interop/test_everyday_surface.py)
    with pytest.raises(mt.ShapeError, match="'wrap' is not one of"):
        FT.pad(mt.zeros(2, 3), (1, 1), mode="wrap")


@pytest.mark.parametrize("num_classes", [-1, 7])
def test_one_hot(num_classes):
    ids = np.array([[0, 3, 1], [2, 2, 4]])
    ours, theirs = (
        FT.one_hot(mt.tensor(ids), num_classes),
        TF.one_hot(torch.tensor(ids), num_classes),
    )
    check(ours, theirs)
    assert ours.dtype == np.int64


@pytest.mark.parametrize("reduction", ["mean", "sum", "none", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    logp, tlogp = pair(np.log(np.random.default_rng(1).dirichlet(np.ones(5), 4)))
    target = np.random.default_rng(2).dirichlet(np.ones(5), 4)
    target[0, 1] = 0.0  # 0·log 0 counts as 0
    if log_target:
        target = np.log(target + 1e-3)
    tgt, ttgt = pair(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = FT.kl_div(logp, tgt, reduction=reduction, log_target=log_target)
        tout = TF.kl_div(tlogp, ttgt, reduction=reduction, log_target=log_target)
    check(out, tout)
    check_backward(out, tout, [(logp, tlogp), (tgt, ttgt)] if log_target else [(logp, tlogp)])


def test_kl_div_loss_module_sums_as_the_annotated_transformer_uses_it():
    logp, tlogp = pair(np.log(np.random.default_rng(3).dirichlet(np.ones(6), 3)))
    target = np.random.default_rng(4).dirichlet(np.ones(6), 3)
    out = nn.KLDivLoss(reduction="sum")(logp, mt.tensor(target, dtype=np.float64))
    tout = torch.nn.KLDivLoss(reduction="sum")(tlogp, torch.tensor(target))
    check(out, tout)
    check_backward(out, tout, [(logp, tlogp)])


NLL_CASES = [  # (input shape, target shape): classes on axis 1, as torch
    ((5, 4), (5,)),
    ((3, 4, 6), (3, 6)),
    ((2, 4, 3, 2), (2, 3, 2)),
    ((4,), ()),
]


@pytest.mark.parametrize("shape,tshape", NLL_CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(shape, tshape, reduction, weighted):
    c = shape[0] if len(shape) == 1 else shape[1]
    x, tx = pair(rand(*shape))
    t = np.random.default_rng(5).integers(0, c, tshape)
    if t.ndim:
        t.reshape(-1)[0] = -100  # one ignored target
    w = np.linspace(0.5, 2.0, c) if weighted else None
    kw = dict(reduction=reduction)
    out = FT.nll_loss(x, mt.tensor(t), weight=None if w is None else mt.tensor(w), **kw)
    tout = TF.nll_loss(tx, torch.tensor(t), weight=None if w is None else torch.tensor(w), **kw)
    check(out, tout)
    check_backward(out, tout, [(x, tx)])
    mod = nn.NLLLoss(weight=None if w is None else mt.tensor(w), reduction=reduction)
    check(mod(x, mt.tensor(t)), tout)


@pytest.mark.parametrize("shape,tshape", NLL_CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
def test_cross_entropy_torch_layout(shape, tshape, reduction, weighted, smoothing):
    c = shape[0] if len(shape) == 1 else shape[1]
    x, tx = pair(rand(*shape, seed=8))
    t = np.random.default_rng(9).integers(0, c, tshape)
    if t.ndim:
        t.reshape(-1)[-1] = 1  # ignore_index=1 below
    else:
        t = np.array(2)  # unbatched: one target, not ignored (torch: NaN)
    w = np.linspace(0.5, 2.0, c) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing, ignore_index=1)
    out = MF.cross_entropy(x, mt.tensor(t), weight=None if w is None else mt.tensor(w), **kw)
    tout = TF.cross_entropy(
        tx, torch.tensor(t), weight=None if w is None else torch.tensor(w), **kw
    )
    check(out, tout)
    check_backward(out, tout, [(x, tx)])
    mod = nn.CrossEntropyLoss(weight=None if w is None else mt.tensor(w), **kw)
    check(mod(x, mt.tensor(t)), tout)
    assert FT.cross_entropy is MF.cross_entropy  # one implementation


def test_cross_entropy_of_class_ids_is_one_fused_node_in_every_layout():
    """(N, C), (N, C, L) and a transposed (N, L, C) view: the fused op, with no permute node."""
    t = np.array([[0, 3, 1], [2, 2, 4]])
    for transposed in (False, True):
        leaf, tleaf = pair(rand(2, 3, 5, seed=3) if transposed else rand(2, 5, 3, seed=3))
        x, tx = (leaf.transpose(1, 2), tleaf.transpose(1, 2)) if transposed else (leaf, tleaf)
        out = MF.cross_entropy(x, mt.tensor(t), ignore_index=4)
        assert out.grad_fn.name == "cross_entropy"
        assert [n.name for n in out.grad_fn.parents if n is not None] == (
            ["permute"] if transposed else []
        )  # the user's transpose, nothing else
        tout = TF.cross_entropy(tx, torch.tensor(t), ignore_index=4)
        check(out, tout)
        check_backward(out, tout, [(leaf, tleaf)])


def test_cross_entropy_errors_name_the_class_axis():
    with pytest.raises(
        ValueError,
        match=r"cross_entropy.*\(2, 5, 3\).*\(2, 5\).*expected "
        r"target of shape \(2, 3\).*axis 1",
    ):
        MF.cross_entropy(mt.randn(2, 5, 3), mt.tensor(np.zeros((2, 5), np.int64)))
    with pytest.raises(ValueError, match=r"classes last go in as logits.transpose\(1, 2\)"):
        MF.cross_entropy(mt.randn(2, 5, 3), mt.tensor(np.zeros((2, 5), np.int64)))
    with pytest.raises(TypeError, match=r"cross_entropy.*\(2,\).*float32.*integers"):
        MF.cross_entropy(mt.randn(2, 5), mt.tensor([1.0, 2.0]))
    with pytest.raises(
        ValueError,
        match=r"cross_entropy.*probability targets.*\(2, 4\).*"
        r"\(2, 5\)",
    ):
        MF.cross_entropy(mt.randn(2, 5), mt.randn(2, 4))


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_probability_targets(smoothing):
    x, tx = pair(rand(3, 5, 2, seed=10))
    p = np.random.default_rng(11).dirichlet(np.ones(5), (3, 2)).transpose(0, 2, 1)  # (3, 5, 2)
    out = FT.cross_entropy(x, mt.tensor(p, dtype=np.float64), label_smoothing=smoothing)
    tout = TF.cross_entropy(tx, torch.tensor(p), label_smoothing=smoothing)
    check(out, tout)
    check_backward(out, tout, [(x, tx)])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_probability_targets_weighted_with_gradient_to_the_target(reduction):
    x, tx = pair(rand(4, 3, seed=12))
    p, tp = pair(np.random.default_rng(13).dirichlet(np.ones(3), 4))
    w = np.array([0.5, 2.0, 1.0])
    kw = dict(label_smoothing=0.2, reduction=reduction)
    out = MF.cross_entropy(x, p, weight=mt.tensor(w, dtype=np.float64), **kw)
    tout = TF.cross_entropy(tx, tp, weight=torch.tensor(w), **kw)
    check(out, tout)
    check_backward(out, tout, [(x, tx), (p, tp)])


def test_cross_entropy_float32_result_is_float32():
    x, tx = pair(rand(4, 3, dtype=np.float32))
    t = np.array([0, 2, 1, 1])
    out = nn.CrossEntropyLoss()(x, mt.tensor(t))
    tout = torch.nn.CrossEntropyLoss()(tx, torch.tensor(t))
    check(out, tout, atol=1e-6, rtol=1e-5)
    assert out.dtype == np.float32 and out.shape == ()


@pytest.mark.parametrize(
    "shape,wshape,bias",
    [
        ((4, 3), (2, 3), True),
        ((2, 5, 3), (4, 3), False),
        ((3,), (2, 3), True),
        ((2, 3), (3,), False),
    ],
)
def test_linear_matches_torch(shape, wshape, bias):
    x, tx = pair(rand(*shape, seed=12))
    w, tw = pair(rand(*wshape, seed=13))
    b, tb = pair(rand(*wshape[:-1], seed=14)) if bias else (None, None)
    out, tout = MF.linear(x, w, b), TF.linear(tx, tw, tb)
    check(out, tout)
    check_backward(out, tout, [(x, tx), (w, tw)] + ([(b, tb)] if bias else []))
    x32, tx32 = pair(rand(*shape, seed=12, dtype=np.float32))
    check(MF.linear(x32, w.float(), None), TF.linear(tx32, tw.float()), atol=1e-6, rtol=1e-5)


def test_nn_linear_is_f_linear_and_draws_weight_transposed():
    mt.manual_seed(0)
    lin = nn.Linear(3, 2)
    x = mt.randn(4, 3)
    np.testing.assert_array_equal(lin(x).numpy(), MF.linear(x, lin.weight, lin.bias).numpy())
    dot = mt.viz.draw_graph(lin(x).sum(), model=lin).source
    assert "weightᵀ" in dot and "permute" not in dot
    with pytest.raises(
        ValueError,
        match=r"linear: input of shape \(4, 2\) has 2 features.*"
        r"expected 3 \(weight \(2, 3\)",
    ):
        MF.linear(mt.randn(4, 2), lin.weight)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    a, ta = pair(rand(3, 4))
    b, tb = pair(rand(3, 4, seed=3))
    check(FT.mse_loss(a, b, reduction=reduction), TF.mse_loss(ta, tb, reduction=reduction))
    assert FT.mse_loss is MF.mse_loss
    with pytest.warns(DeprecationWarning, match="mse_loss"):  # torch's legacy flags
        check(MF.mse_loss(a, b, False), TF.mse_loss(ta, tb, False))
    out, tout = nn.MSELoss(reduction=reduction)(a, b), torch.nn.MSELoss(reduction=reduction)(ta, tb)
    check(out, tout)
    check_backward(out, tout, [(a, ta), (b, tb)])


# ----------------------------------------------------------------------------- attention
def _qkv(shape_q=(2, 3, 5, 4), shape_k=(2, 3, 6, 4)):
    q, tq = pair(rand(*shape_q, seed=1))
    k, tk = pair(rand(*shape_k, seed=2))
    v, tv = pair(rand(*shape_k, seed=3))
    return (q, k, v), (tq, tk, tv)


@pytest.mark.parametrize("kind", ["none", "bool", "float", "causal", "scale"])
def test_scaled_dot_product_attention_torch_mask_meaning(kind):
    ours, theirs = _qkv()
    kw, tkw = {}, {}
    if kind == "bool":  # True = MAY attend; every query keeps at least one key
        allowed = np.random.default_rng(4).random((5, 6)) > 0.4
        allowed[:, 0] = True
        kw, tkw = dict(attn_mask=mt.tensor(allowed)), dict(attn_mask=torch.tensor(allowed))
    elif kind == "float":
        m = rand(5, 6, seed=5)
        kw, tkw = dict(attn_mask=mt.tensor(m, dtype=np.float64)), dict(attn_mask=torch.tensor(m))
    elif kind == "causal":
        kw = tkw = dict(is_causal=True)
    elif kind == "scale":
        kw = tkw = dict(scale=0.3)
    out = FT.scaled_dot_product_attention(*ours, **kw)
    tout = TF.scaled_dot_product_attention(*theirs, **tkw)
    check(out, tout)
    check_backward(out, tout, list(zip(ours, theirs)))


def test_sdpa_mask_is_the_opposite_of_multihead_attention_mask():
    """The trap: the same bool mask means 'allowed' to sdpa and 'blocked' to MHA."""
    ours, _ = _qkv((1, 1, 3, 4), (1, 1, 3, 4))
    allowed = np.tril(np.ones((3, 3), bool))
    a = FT.scaled_dot_product_attention(*ours, attn_mask=mt.tensor(allowed))
    b = FT.scaled_dot_product_attention(*ours, attn_mask=mt.tensor(~allowed))
    c = FT.scaled_dot_product_attention(*ours, is_causal=True)
    np.testing.assert_allclose(a.numpy(), c.numpy())
    assert not np.allclose(a.numpy(), b.numpy())


def _mha_pair(e=8, h=2, batch_first=False, bias=True, dtype=torch.float64):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(e, h, bias=bias, batch_first=batch_first, dtype=dtype)
    ours = nn.MultiheadAttention(
        e, h, bias=bias, batch_first=batch_first, dtype=str(dtype).replace("torch.", "")
    )
    ours.load_state_dict(theirs.state_dict())  # torch tensors load directly
    return ours, theirs


def test_multihead_attention_parameters_are_torchs():
    ours, theirs = _mha_pair()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for name, value in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[name], value.numpy())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "both"])
@pytest.mark.parametrize("average", [True, False])
def test_multihead_attention_matches_torch(batch_first, masks, average):
    ours, theirs = _mha_pair(batch_first=batch_first)
    l_q, l_k, n = 4, 5, 3
    qshape = (n, l_q, 8) if batch_first else (l_q, n, 8)
    kshape = (n, l_k, 8) if batch_first else (l_k, n, 8)
    q, tq = pair(rand(*qshape, seed=1))
    kv, tkv = pair(rand(*kshape, seed=2))
    kw, tkw = {}, {}
    padding = np.zeros((n, l_k), bool)
    padding[0, -2:] = True  # True = ignore this key (<pad>)
    causal = np.triu(np.ones((l_q, l_k), bool), 1)  # True = not allowed
    if masks in ("bool", "both"):
        kw["key_padding_mask"], tkw["key_padding_mask"] = mt.tensor(padding), torch.tensor(padding)
    if masks == "both":
        kw["attn_mask"], tkw["attn_mask"] = mt.tensor(causal), torch.tensor(causal)
    if masks == "float":
        fm = np.where(causal, -np.inf, 0.0) + rand(l_q, l_k, seed=3) * 0.1
        kw["attn_mask"], tkw["attn_mask"] = mt.tensor(fm, dtype=np.float64), torch.tensor(fm)
    out, w = ours(q, kv, kv, average_attn_weights=average, **kw)
    tout, tw = theirs(tq, tkv, tkv, average_attn_weights=average, **tkw)
    check(out, tout)
    check(w, tw)
    check_backward(
        out,
        tout,
        [
            (q, tq),
            (kv, tkv),
            (ours.in_proj_weight, theirs.in_proj_weight),
            (ours.out_proj.weight, theirs.out_proj.weight),
        ],
    )


def test_multihead_attention_unbatched_and_need_weights_false():
    ours, theirs = _mha_pair()
    x, tx = pair(rand(4, 8))
    out, w = ours(x, x, x, need_weights=False)
    tout, tw = theirs(tx, tx, tx, need_weights=False)
    assert w is None and tw is None
    check(out, tout)
    out, w = ours(x, x, x)
    tout, tw = theirs(tx, tx, tx)
    check(w, tw)


def test_multihead_attention_is_causal_needs_the_mask_as_in_torch():
    ours, _ = _mha_pair()
    x = mt.zeros(3, 1, 8, dtype=np.float64)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        ours(x, x, x, is_causal=True)


# ----------------------------------------------------------------------------- modules
@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.Softmax(dim=-1),
        lambda m: m.Softmax(1),
        lambda m: m.LogSoftmax(dim=0),
        lambda m: m.ReLU(),
        lambda m: m.GELU(),
        lambda m: m.GELU(approximate="tanh"),
        lambda m: m.Identity(54, unused=1),
        lambda m: m.Tanh(),
        lambda m: m.Sigmoid(),
    ],
)
def test_activation_modules(make):
    x, tx = pair(rand(3, 4, 5))
    out, tout = make(nn)(x), make(torch.nn)(tx)
    check(out, tout)
    check_backward(out, tout, [(x, tx)])
    assert repr(make(nn)) == repr(make(torch.nn))


def test_softmax_without_dim_picks_torchs_legacy_axis():
    x, tx = pair(rand(3, 4, 5))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = nn.Softmax()(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(out, torch.nn.Softmax()(tx))


def test_load_state_dict_takes_torch_tensors_numpy_arrays_and_tensors():
    torch.manual_seed(0)
    tlin = torch.nn.Linear(3, 2)
    lin = nn.Linear(3, 2)
    lin.load_state_dict(tlin.state_dict())
    x, tx = pair(rand(4, 3, dtype=np.float32))
    check(lin(x), tlin(tx), atol=1e-6)
    lin.load_state_dict({k: v.numpy() * 2 for k, v in tlin.state_dict().items()})
    np.testing.assert_allclose(lin.weight.numpy(), 2 * tlin.weight.detach().numpy())
    lin.load_state_dict({k: mt.tensor(v.numpy()) for k, v in tlin.state_dict().items()})
    np.testing.assert_allclose(lin.weight.numpy(), tlin.weight.detach().numpy())
    assert lin.weight.dtype == np.float32


def test_load_state_dict_of_torch_checks_shapes_and_changes_nothing():
    lin = nn.Linear(3, 2)
    before = lin.weight.numpy().copy()
    with pytest.raises(nn.StateDictError, match=r"weight: checkpoint \(2, 4\) vs model \(2, 3\)"):
        lin.load_state_dict(torch.nn.Linear(4, 2).state_dict())
    np.testing.assert_array_equal(lin.weight.numpy(), before)


class _Net:
    """One structure built in both libraries: names, order, buffers."""

    @staticmethod
    def build(lib):
        class Block(lib.Module):
            def __init__(self):
                super().__init__()
                self.lin = lib.Linear(4, 4)
                self.norm = lib.LayerNorm(4)
                self.register_buffer("pe", mt.zeros(3, 4) if lib is nn else torch.zeros(3, 4))
                self.register_buffer(
                    "tmp", mt.ones(2) if lib is nn else torch.ones(2), persistent=False
                )

        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.blocks = lib.ModuleList([Block() for _ in range(2)])
                self.head = lib.Sequential(lib.Linear(4, 2), lib.ReLU())
                self.attn = lib.MultiheadAttention(4, 2)

        return Net()


def test_module_traversal_matches_torch():
    ours, theirs = _Net.build(nn), _Net.build(torch.nn)
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [type(c).__name__ for c in ours.children()] == [
        type(c).__name__ for c in theirs.children()
    ]
    assert [n for n, _ in ours.named_modules(prefix="net")] == [
        n for n, _ in theirs.named_modules(prefix="net")
    ]
    ours.load_state_dict(theirs.state_dict())
    seen = []
    assert ours.apply(lambda m: seen.append(type(m).__name__)) is ours
    tseen = []
    theirs.apply(lambda m: tseen.append(type(m).__name__))
    assert seen == [s.replace("NonDynamicallyQuantizableLinear", "Linear") for s in tseen]


def test_module_modes_devices_dtypes_and_grads():
    net = _Net.build(nn)
    assert net.eval() is net and not net.blocks[0].training
    assert net.train() is net and net.blocks[1].lin.training
    assert net.to("cpu") is net and net.cpu() is net
    assert net.to(torch.device("cpu")) is net
    with pytest.raises(RuntimeError, match="CPU only"):
        net.to("cuda")
    net.to(mt.float64)
    assert net.blocks[0].lin.weight.dtype == np.float64 and net.blocks[0].pe.dtype == np.float64
    net.to("cpu", dtype=np.float32)
    assert net.head[0].weight.dtype == np.float32
    out = net.head(mt.ones(1, 4)).sum()
    out.backward()
    net.zero_grad(set_to_none=False)
    assert np.all(net.head[0].weight.grad.numpy() == 0)
    net.zero_grad()
    assert net.head[0].weight.grad is None
    assert net.requires_grad_(False) is net and not net.head[0].weight.requires_grad
    assert all(p is q for p, q in zip(net.parameters(), (p for _, p in net.named_parameters())))
    kept = net.state_dict(keep_vars=True, prefix="m.")
    assert kept["m.head.0.weight"] is net.head[0].weight


# ----------------------------------------------------------------------------- init
def test_calculate_gain_matches_torch():
    for name, param in [
        ("linear", None),
        ("conv3d", None),
        ("sigmoid", None),
        ("tanh", None),
        ("relu", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("selu", None),
    ]:
        assert nn.init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param)
        )


@pytest.mark.parametrize(
    "fn,kw,bound",
    [
        ("xavier_uniform_", dict(gain=2.0), lambda fi, fo: 2.0 * math.sqrt(6 / (fi + fo))),
        ("kaiming_uniform_", dict(a=math.sqrt(5)), lambda fi, fo: 1 / math.sqrt(fi)),
        (
            "kaiming_uniform_",
            dict(mode="fan_out", nonlinearity="relu"),
            lambda fi, fo: math.sqrt(6 / fo),
        ),
        ("uniform_", dict(a=-0.3, b=0.3), lambda fi, fo: 0.3),
    ],
)
def test_uniform_initialisers_use_torchs_fans(fn, kw, bound):
    mt.manual_seed(0)
    w = nn.Parameter(np.zeros((300, 200), np.float32))
    getattr(nn.init, fn)(w, **kw)
    b = bound(200, 300)
    assert np.abs(w.numpy()).max() <= b * (1 + 1e-6)
    assert np.abs(w.numpy()).max() > 0.99 * b  # the whole range is used
    t = torch.empty(300, 200)
    getattr(torch.nn.init, fn)(t, **kw)
    assert np.abs(w.numpy()).std() == pytest.approx(t.abs().std().item(), rel=0.03)


@pytest.mark.parametrize(
    "fn,kw",
    [
        ("xavier_normal_", {}),
        ("kaiming_normal_", dict(nonlinearity="relu")),
        ("kaiming_normal_", dict(mode="fan_out")),
        ("normal_", dict(mean=1.0, std=0.5)),
        ("trunc_normal_", dict(std=0.5, a=-0.6, b=0.4)),
        ("orthogonal_", dict(gain=1.5)),
    ],
)
def test_normal_initialisers_match_torchs_statistics(fn, kw):
    mt.manual_seed(0)
    torch.manual_seed(0)
    w = nn.Parameter(np.zeros((300, 200), np.float32))
    t = torch.empty(300, 200)
    getattr(nn.init, fn)(w, **kw)
    getattr(torch.nn.init, fn)(t, **kw)
    assert w.numpy().mean() == pytest.approx(t.mean().item(), abs=0.01)
    assert w.numpy().std() == pytest.approx(t.std().item(), rel=0.03)
    assert w.numpy().min() >= t.min().item() - 0.5 and w.numpy().max() <= t.max().item() + 0.5
    if fn == "trunc_normal_":
        assert w.numpy().min() >= -0.6 and w.numpy().max() <= 0.4
    if fn == "orthogonal_":
        np.testing.assert_allclose(w.numpy().T @ w.numpy(), 1.5**2 * np.eye(200), atol=1e-4)


def test_constant_initialisers():
    w = nn.Parameter(np.zeros((3, 3), np.float32))
    np.testing.assert_array_equal(nn.init.eye_(w).numpy(), np.eye(3))
    np.testing.assert_array_equal(nn.init.constant_(w, 0.25).numpy(), np.full((3, 3), 0.25))
    np.testing.assert_array_equal(nn.init.ones_(w).numpy(), np.ones((3, 3)))
    np.testing.assert_array_equal(nn.init.zeros_(w).numpy(), np.zeros((3, 3)))
    assert nn.init._calculate_fan_in_and_fan_out(
        mt.zeros(5, 3, 2)
    ) == torch.nn.init._calculate_fan_in_and_fan_out(torch.zeros(5, 3, 2))


# ----------------------------------------------------------------------------- optim
def _train_both(make_opt, make_topt, steps=5, sched=None):
    torch.manual_seed(0)
    tlin = torch.nn.Linear(4, 3).double()
    lin = nn.Linear(4, 3, dtype=np.float64)
    lin.load_state_dict(tlin.state_dict())
    opt, topt = make_opt(lin.parameters()), make_topt(tlin.parameters())
    s = ts = None
    if sched is not None:
        s, ts = sched[0](opt), sched[1](topt)
    x = rand(6, 4)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        topt.zero_grad(set_to_none=True)
        (lin(mt.tensor(x, dtype=np.float64)) ** 2).mean().backward()
        (tlin(torch.tensor(x)) ** 2).mean().backward()
        opt.step()
        topt.step()
        if s is not None:
            s.step()
            ts.step()
            assert opt.param_groups[0]["lr"] == pytest.approx(topt.param_groups[0]["lr"])
    np.testing.assert_allclose(lin.weight.numpy(), tlin.weight.detach().numpy(), atol=1e-12)
    return opt, topt


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=0.5, betas=(0.9, 0.98), eps=1e-9),
        dict(lr=0.01, weight_decay=0.1),
        dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
        dict(lr=0.01, amsgrad=True),
        dict(lr=0.01, foreach=False, maximize=True),
    ],
)
def test_adam_matches_torch(kw):
    opt, topt = _train_both(lambda p: optim.Adam(p, **kw), lambda p: torch.optim.Adam(p, **kw))
    assert {k for k in opt.param_groups[0]} <= set(topt.param_groups[0])


def test_sgd_and_adamw_match_torch_and_take_named_parameters():
    kw = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    _train_both(lambda p: optim.SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw))
    _train_both(lambda p: optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01))
    lin = nn.Linear(2, 2)
    assert optim.Adam(lin.named_parameters()).param_groups[0]["params"][0] is lin.weight


def _noam(step, model_size=16, factor=1.0, warmup=3):
    step = max(step, 1)
    return factor * model_size**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize(
    "name,kw",
    [
        ("LambdaLR", dict(lr_lambda=_noam)),
        ("StepLR", dict(step_size=2, gamma=0.5)),
        ("MultiStepLR", dict(milestones=[2, 4], gamma=0.3)),
        ("ExponentialLR", dict(gamma=0.8)),
        ("LinearLR", dict(start_factor=0.25, total_iters=3)),
        ("CosineAnnealingLR", dict(T_max=4, eta_min=0.01)),
    ],
)
def test_lr_schedulers_match_torch(name, kw):
    ours = getattr(optim.lr_scheduler, name)
    theirs = getattr(torch.optim.lr_scheduler, name)
    _train_both(
        lambda p: optim.Adam(p, lr=0.1, betas=(0.9, 0.98), eps=1e-9),
        lambda p: torch.optim.Adam(p, lr=0.1, betas=(0.9, 0.98), eps=1e-9),
        steps=7,
        sched=(lambda o: ours(o, **kw), lambda o: theirs(o, **kw)),
    )


@pytest.mark.parametrize(
    "first,second",
    [
        (
            ("LambdaLR", dict(lr_lambda=lambda s: min(1.0, (s + 1) / 4))),
            ("StepLR", dict(step_size=2)),
        ),
        (("LinearLR", dict(start_factor=0.25, total_iters=5)), ("ExponentialLR", dict(gamma=0.9))),
        (
            ("LambdaLR", dict(lr_lambda=lambda s: min(1.0, (s + 1) / 4))),
            ("CosineAnnealingLR", dict(T_max=3, eta_min=0.01)),
        ),
        (("ExponentialLR", dict(gamma=0.95)), ("MultiStepLR", dict(milestones=[2, 5], gamma=0.3))),
        (("StepLR", dict(step_size=3, gamma=0.5)), ("LambdaLR", dict(lr_lambda=lambda s: 0.9**s))),
    ],
)
def test_two_schedulers_on_one_optimizer_compose_as_torch(first, second):
    """A warm-up stepped every batch and a decay stepped every epoch: torch's chainable
    schedulers change the lr the other one left."""
    rates = []
    for lib in (mt, torch):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.zeros(2))], lr=0.1)
        per_batch, per_epoch = (
            getattr(lib.optim.lr_scheduler, name)(opt, **kw) for name, kw in (first, second)
        )
        seen = [opt.param_groups[0]["lr"]]
        for _ in range(8):
            for _ in range(3):
                opt.step()
                per_batch.step()
                seen.append(opt.param_groups[0]["lr"])
            per_epoch.step()
            seen.append(per_epoch.get_last_lr()[0])
        rates.append(seen)
    np.testing.assert_allclose(rates[0], rates[1], rtol=1e-12, atol=1e-15)


# ============================================================================ phase 2: tensors
@pytest.mark.parametrize("name", ["exp", "log", "sin", "cos", "sqrt", "tanh", "sigmoid", "relu"])
def test_top_level_elementwise(name):
    a = np.abs(rand(3, 4)) + 0.1
    x, tx = pair(a)
    out, tout = getattr(mt, name)(x), getattr(torch, name)(tx)
    check(out, tout)
    check_backward(out, tout, [(x, tx)])


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_gradcheck(name):
    x = mt.tensor(rand(3, 4), dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(getattr(mt, name), x)


@pytest.mark.parametrize(
    "name", ["sum", "mean", "std", "var", "logsumexp", "softmax", "log_softmax"]
)
@pytest.mark.parametrize("keepdim", [False, True])
def test_dim_and_keepdim_spellings(name, keepdim):
    x, tx = pair(rand(2, 3, 4))
    if name in ("softmax", "log_softmax"):
        out, tout = getattr(MF, name)(x, dim=1), getattr(TF, name)(tx, dim=1)
    else:
        out = getattr(x, name)(dim=-1, keepdim=keepdim)
        tout = getattr(tx, name)(dim=-1, keepdim=keepdim)
        np.testing.assert_allclose(getattr(x, name)(axis=-1, keepdims=keepdim).numpy(), out.numpy())
    check(out, tout)
    check_backward(out, tout, [(x, tx)])


def test_dim_and_axis_together_is_an_error():
    with pytest.raises(TypeError, match="both dim= and axis="):
        mt.randn(2, 3).sum(dim=0, axis=0)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_with_dim_return_values_and_indices(name, keepdim):
    x, tx = pair(rand(3, 5))
    out, tout = getattr(mt, name)(x, dim=1, keepdim=keepdim), getattr(torch, name)(tx, 1, keepdim)
    values, indices = out  # unpacks as torch's (values, indices)
    assert out._fields == ("values", "indices") and tout.values is tout[0]
    check(values, tout.values)
    check(indices, tout.indices)
    check_backward(out.values, tout.values, [(x, tx)])
    check(getattr(x, name)(), getattr(tx, name)())  # no dim: the element
    same = getattr(x, name)(axis=1, keepdims=keepdim)  # numpy's names mean dim=, keepdim=
    check(same.values, tout.values)
    check(same.indices, tout.indices)


def test_max_of_two_tensors_is_elementwise():
    (x, tx), (y, ty) = pair(rand(3)), pair(rand(3, seed=1))
    check(mt.max(x, y), torch.max(tx, ty))


def test_size_dim_numel():
    x, tx = pair(rand(2, 3, 4))
    assert tuple(x.size()) == tuple(tx.size()) and x.size(-1) == tx.size(-1) == 4
    assert x.dim() == tx.dim() == 3 and x.numel() == tx.numel() == 24
    with pytest.raises(IndexError):
        x.size(3)


def test_conversions():
    x, tx = pair(rand(2, 3))
    check(x.type(mt.uint8), tx.type(torch.uint8))
    check(x.bool(), tx.bool())
    check(x.to(mt.float32), tx.to(torch.float32))
    check(x.to("cpu"), tx.to("cpu"))
    check(x.type_as(mt.zeros(1, dtype=mt.float32)), tx.type_as(torch.zeros(1)))
    assert x.type_as(np.zeros(1, np.int64)).dtype == np.int64
    assert x.contiguous() is x and tx.contiguous() is tx
    t = x.transpose(0, 1)
    assert t.contiguous().numpy().flags.c_contiguous
    with pytest.raises(RuntimeError, match="CPU only"):
        x.to("cuda")
    assert not mt.cuda.is_available() and str(x.device) == "cpu"


@pytest.mark.parametrize("dim", [None, 0, 1, -1, 2, (0, 1), (1, 2), (-3, -1)])
def test_squeeze_leaves_an_axis_of_another_size_as_torch(dim):
    x, tx = pair(rand(1, 3, 1))
    out, tout = (x.squeeze(), tx.squeeze()) if dim is None else (x.squeeze(dim), tx.squeeze(dim))
    check(out, tout)
    check_backward(out, tout, [(x, tx)])
    assert mt.squeeze(x, dim=1).shape == torch.squeeze(tx, dim=1).shape == (1, 3, 1)
    assert mt.tensor(2.0).squeeze(0).shape == torch.tensor(2.0).squeeze(0).shape == ()


def test_inplace_fills_and_scatter():
    a = rand(3, 4)
    x, tx = pair(a, requires_grad=False)
    m = a > 0
    check(x.clone().masked_fill_(mt.tensor(m), 7.0), tx.clone().masked_fill_(torch.tensor(m), 7.0))
    idx = np.array([0, 2])
    check(
        x.clone().index_fill_(1, mt.tensor(idx), -1.0),
        tx.clone().index_fill_(1, torch.tensor(idx), -1.0),
    )
    target = np.array([[1], [3], [0]])
    check(
        x.clone().scatter_(1, mt.tensor(target), 0.5),
        tx.clone().scatter_(1, torch.tensor(target), 0.5),
    )
    src = rand(3, 4, seed=2)
    check(
        x.clone().scatter_(1, mt.tensor(target), mt.tensor(src)),
        tx.clone().scatter_(1, torch.tensor(target), torch.tensor(src)),
    )


def test_gather_index_select_repeat_expand_as_t():
    x, tx = pair(rand(3, 4))
    idx = np.array([[0, 3], [1, 1], [2, 0]])
    for out, tout in [
        (x.gather(1, mt.tensor(idx)), tx.gather(1, torch.tensor(idx))),
        (mt.gather(x, 0, mt.tensor(idx % 3)), torch.gather(tx, 0, torch.tensor(idx % 3))),
        (x.index_select(1, mt.tensor([3, 0, 3])), tx.index_select(1, torch.tensor([3, 0, 3]))),
        (x.repeat(2, 1, 2), tx.repeat(2, 1, 2)),
        (x[:1].expand_as(x), tx[:1].expand_as(tx)),
        (x.t(), tx.t()),
    ]:
        check(out, tout)
        check_backward(out, tout, [(x, tx)])
    y = mt.tensor(rand(2, 3), dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda v: v.repeat(2, 2).gather(1, mt.tensor([[0, 5], [4, 1]] * 2)), y)
    check(x.new_zeros(2, 5), tx.new_zeros(2, 5))


def test_top_level_functions():
    x, tx = pair(rand(2, 3, 4))
    y, ty = pair(rand(2, 4, 5, seed=1))
    for out, tout in [
        (mt.matmul(x, y), torch.matmul(tx, ty)),
        (mt.bmm(x, y), torch.bmm(tx, ty)),
        (mt.triu(x, diagonal=1), torch.triu(tx, diagonal=1)),
        (mt.tril(x, -1), torch.tril(tx, -1)),
        (mt.cat([x, x], dim=1), torch.cat([tx, tx], dim=1)),
        (mt.clamp(x, -0.5, 0.5), torch.clamp(tx, -0.5, 0.5)),
        (mt.softmax(x, dim=-1), torch.softmax(tx, dim=-1)),
        (mt.sum(x, dim=1), torch.sum(tx, dim=1)),
        (mt.mean(x, 1, keepdim=True), torch.mean(tx, 1, keepdim=True)),
    ]:
        check(out, tout)
        check_backward(out, tout, [(x, tx)])
    check(mt.argmax(x, dim=-1), torch.argmax(tx, dim=-1))
    z = np.array([[0, 1], [2, 0]])
    check(mt.nonzero(mt.tensor(z)), torch.nonzero(torch.tensor(z)))
    assert mt.allclose(x, x + 1e-9) is torch.allclose(tx, tx + 1e-9) is True


def test_creators_and_dtypes():
    check(mt.empty(2, 3), torch.zeros(2, 3))
    check(mt.linspace(0, 1, 5), torch.linspace(0, 1, 5), atol=1e-7)
    check(mt.LongTensor([1, 2]), torch.LongTensor([1, 2]))
    check(mt.FloatTensor([1.5, 2]), torch.FloatTensor([1.5, 2]))
    for ours, theirs in [
        (mt.uint8, torch.uint8),
        (mt.long, torch.long),
        (mt.bool, torch.bool),
        (mt.float, torch.float),
        (mt.double, torch.double),
    ]:
        check(mt.ones(2, dtype=ours), torch.ones(2, dtype=theirs))


@pytest.mark.parametrize(
    "equation,shapes",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]),
        ("ij->i", [(3, 4)]),
        ("ij,j", [(3, 4), (4,)]),
        ("ij,kl->ijkl", [(2, 3), (2, 2)]),
        # diagonals: a repeated index in one operand
        ("ii->i", [(3, 3)]),
        ("ii", [(4, 4)]),
        ("iji->j", [(2, 3, 2)]),
        ("ii,ij->j", [(3, 3), (3, 2)]),
        # '...', with broadcasting inside it
        ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
        ("b...,b...->b...", [(2, 1, 4), (2, 3, 1)]),
        ("...ii->...i", [(2, 3, 3)]),
        ("i...", [(3, 2, 2)]),
        ("ij,ij->ij", [(1, 3), (5, 3)]),
        # size 0 (a size-1 axis broadcasts to it)
        ("ij,ij->ij", [(0, 3), (1, 3)]),
        ("ij,jk", [(0, 3), (3, 4)]),
    ],
)
def test_einsum_values_and_gradients(equation, shapes):
    pairs = [pair(rand(*s, seed=i)) for i, s in enumerate(shapes)]
    out = mt.einsum(equation, *[p[0] for p in pairs])
    tout = torch.einsum(equation, *[p[1] for p in pairs])
    check(out, tout)
    check_backward(out, tout, pairs)
    assert mt.gradcheck(lambda *xs: mt.einsum(equation, *xs), *[p[0] for p in pairs])


def test_einsum_errors_name_the_equation_and_shapes():
    with pytest.raises(ValueError, match=r"einsum: output subscripts 'ii'.*'ij->ii'"):
        mt.einsum("ij->ii", mt.randn(2, 2))
    with pytest.raises(ValueError, match=r"einsum: subscripts 'ijk' do not fit .*\(2, 3\)"):
        mt.einsum("ijk,k", mt.randn(2, 3), mt.randn(3))


def test_cumsum_sort_argsort_topk():
    a = rand(3, 5)
    a[0, 1] = a[0, 3]  # a tie
    x, tx = pair(a)
    out, tout = mt.cumsum(x, dim=1), torch.cumsum(tx, dim=1)
    check(out, tout)
    check_backward(out, tout, [(x, tx)])
    assert mt.gradcheck(lambda v: v.cumsum(0), mt.tensor(a, dtype=mt.float64, requires_grad=True))
    for descending in (False, True):
        s = mt.sort(x, dim=1, descending=descending)
        ts = torch.sort(tx, dim=1, descending=descending, stable=True)
        check(s.values, ts.values)
        check(s.indices, ts.indices)
        check(
            x.argsort(dim=0, descending=descending),
            tx.argsort(dim=0, descending=descending, stable=True),
        )
    k, tk = x.topk(2, dim=1), tx.topk(2, dim=1)
    values, indices = k
    check(values, tk.values)
    check(indices, tk.indices)
    check_backward(values, tk.values, [(x, tx)])
    check(mt.topk(x, 3, largest=False).values, torch.topk(tx, 3, largest=False).values)


def test_scatter_out_of_place_and_multinomial():
    x, tx = pair(np.zeros((2, 4)), requires_grad=False)
    idx = np.array([[1], [3]])
    check(mt.scatter(x, 1, mt.tensor(idx), 1.0), torch.scatter(tx, 1, torch.tensor(idx), 1.0))
    assert x.numpy().sum() == 0  # the input is unchanged
    mt.manual_seed(0)
    probs = mt.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    draws = mt.multinomial(probs, 2, replacement=True)
    assert draws.dtype == mt.long and draws.shape == (2, 2)
    assert (draws.numpy()[0] == 1).all() and set(draws.numpy()[1]) <= {0, 2}
    no_repeat = mt.multinomial(probs[1], 2)
    assert sorted(no_repeat.tolist()) == [0, 2]
    with pytest.raises(ValueError, match="multinomial"):
        mt.multinomial(probs, 2)  # row 0 has one non-zero weight


@pytest.mark.parametrize(
    "dim,index", [(1, [[0, 2], [1, 3], [3, 0]]), (0, [[2, 0, 1, 1]]), (-1, [[1], [0], [2]])]
)
def test_scatter_gradients_reach_input_and_src_as_torch(dim, index):
    x, tx = pair(rand(3, 4, seed=4))
    idx = np.array(index)
    s, ts = pair(rand(*idx.shape, seed=5))
    out, tout = mt.scatter(x, dim, mt.tensor(idx), s), torch.scatter(tx, dim, torch.tensor(idx), ts)
    check(out, tout)
    check_backward(out, tout, [(x, tx), (s, ts)])
    assert mt.gradcheck(lambda a, b: a.scatter(dim, idx, b), x, s)
    x.grad = None
    tx.grad = None
    out, tout = x.scatter(dim, mt.tensor(idx), 0.5), tx.scatter(dim, torch.tensor(idx), 0.5)
    check(out, tout)
    check_backward(out, tout, [(x, tx)])
    ones = mt.zeros(2, 3, dtype=mt.long).scatter_(1, mt.tensor([[1], [2]]), 1)  # a one-hot
    check(ones, torch.zeros(2, 3, dtype=torch.long).scatter_(1, torch.tensor([[1], [2]]), 1))


def test_scatter_in_place_refuses_a_src_that_requires_grad():
    src = mt.ones(2, 1, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"scatter_: src requires grad.*x.scatter\("):
        mt.zeros(2, 3).scatter_(1, mt.tensor([[1], [2]]), src)
    with mt.no_grad():
        assert mt.zeros(2, 3).scatter_(1, mt.tensor([[1], [2]]), src).sum().item() == 2.0


def test_inplace_index_errors_name_the_op_and_shape():
    x = mt.zeros(2, 3)
    with pytest.raises(ValueError, match="index_fill_.*out of range"):
        x.index_fill_(2, mt.tensor([0]), 1.0)
    with pytest.raises(IndexError, match=r"scatter_.*\(2, 3\)"):
        x.scatter_(1, mt.tensor([[5], [0]]), 1.0)
    assert x.numpy().sum() == 0 and x._version == 0  # a failed call changes nothing


# ----------------------------------------------------------------------------- nanoGPT's idioms
# What tests/ports/gpt_style_model.py (a nanoGPT-style GPT and its train/sample loop) needed.


def test_a_one_element_integer_tensor_is_an_index_as_in_torch():
    data = np.arange(20)
    for ours, theirs in [pair(np.array(3)), pair(np.array([3])), pair(np.array(True))]:
        assert ours.__index__() == theirs.__index__()
    ix, tix = pair(np.array([2, 7]))
    slices = [data[i : i + 3] for i in ix]  # nanoGPT's get_batch
    np.testing.assert_array_equal(slices, [data[i : i + 3] for i in tix])
    t, tt = pair(np.array(4))
    assert list(range(t)) == list(range(tt)) and "abcdef"[t] == "abcdef"[tt] == "e"
    for index in ([3], [[1, 2]], [True] * 20):  # numpy indexed by a tensor
        ours, theirs = pair(np.array(index), requires_grad=False)
        np.testing.assert_array_equal(data[ours], data[theirs])
        assert data[ours].shape == data[theirs].shape
    for bad in (np.array(3.0), np.array([1, 2])):
        ours, theirs = pair(bad, requires_grad=False)
        with pytest.raises(TypeError, match="only integer tensors of a single element"):
            theirs.__index__()
        with pytest.raises(
            TypeError,
            match=r"__index__: only integer tensors of a single "
            r"element.*shape \(.*dtype",
        ):
            ours.__index__()


def test_a_0d_tensor_formats_as_its_number_as_in_torch():
    loss, tloss = pair(np.array(2.718281828, dtype=np.float32))
    for spec in (".4f", "8.2e", "", ">10"):
        assert format(loss, spec) == format(tloss, spec), spec
    assert f"loss {loss:.4f}" == "loss 2.7183"
    ids, tids = pair(np.array(7))
    assert f"{ids:03d}" == f"{tids:03d}" == "007"
    vec, tvec = pair(np.array([1.5, 2.0]))
    assert f"{vec}" == repr(vec)  # no spec: the repr, as torch
    with pytest.raises(TypeError):
        format(tvec, ".2f")
    with pytest.raises(TypeError):
        format(vec, ".2f")


def test_creators_take_device_as_torch():
    cpu, tcpu = mt.device("cpu"), torch.device("cpu")
    for device in ("cpu", "cpu:0", cpu, tcpu):
        check(
            mt.arange(0, 5, dtype=mt.long, device=device),
            torch.arange(0, 5, dtype=torch.long, device="cpu"),
        )
        check(
            mt.tensor([1, 2, 3], dtype=mt.long, device=device),
            torch.tensor([1, 2, 3], dtype=torch.long),
        )
        check(mt.zeros(2, 3, device=device), torch.zeros(2, 3))
        check(mt.ones(2, device=device), torch.ones(2))
        check(mt.full((2, 2), 1.5, device=device), torch.full((2, 2), 1.5))
        check(mt.eye(3, device=device), torch.eye(3))
        check(mt.linspace(0, 1, 5, device=device), torch.linspace(0, 1, 5))
        check(mt.empty(2, 2, device=device).zero_(), torch.empty(2, 2).zero_())
        x = mt.ones(2, 3)
        check(mt.zeros_like(x, device=device), torch.zeros_like(torch.ones(2, 3)))
        check(mt.full_like(x, 2.0, device=device), torch.full_like(torch.ones(2, 3), 2.0))
        assert mt.randn(2, device=device).shape == mt.rand(2, device=device).shape == (2,)
        assert mt.randn_like(x, device=device).shape == mt.rand_like(x, device=device).shape
        assert mt.ones_like(x, device=device).sum().item() == 6
    for make in (
        lambda: mt.arange(3, device="cuda"),
        lambda: mt.zeros(2, device="cuda:0"),
        lambda: mt.tensor([1], device="mps"),
    ):
        with pytest.raises(
            RuntimeError,
            match=r"\w+: device '(cuda|cuda:0|mps)' is not "
            r"available; minitensor runs on the CPU only",
        ):
            make()


def test_randint_takes_torch_high_size_form():
    mt.manual_seed(0)
    ix, tix = mt.randint(10, (1000,)), torch.randint(10, (1000,))  # low 0, as torch
    assert ix.shape == tuple(tix.shape) and ix.dtype == tix.numpy().dtype == np.int64
    assert set(ix.tolist()) == set(tix.tolist()) == set(range(10))
    lo = mt.randint(3, 5, (200,), device="cpu")
    assert lo.shape == (200,) and set(lo.tolist()) == {3, 4}
    assert mt.randint(5, size=(2,)).shape == tuple(torch.randint(5, size=(2,)).shape) == (2,)
    with pytest.raises(TypeError, match=r"randint\(5, 6\): give a size"):
        mt.randint(5, 6)


def test_tensor_to_takes_non_blocking():
    x, tx = pair(rand(2, 2))
    check(x.to("cpu", non_blocking=True), tx.to("cpu", non_blocking=True))
    check(x.to(mt.float32, non_blocking=True), tx.to(torch.float32, non_blocking=True), atol=1e-6)
    with pytest.raises(RuntimeError, match="to: device 'cuda' is not available"):
        x.to("cuda", non_blocking=True)


def test_load_takes_map_location_and_weights_only(tmp_path):
    path = tmp_path / "ckpt.pt"
    ckpt = {"model": {"w": np.arange(3.0)}, "iter_num": 4, "best_val_loss": mt.tensor(1.25)}
    mt.save(ckpt, path)
    for kw in (
        {"map_location": "cpu"},
        {"map_location": mt.device("cpu")},
        {"map_location": torch.device("cpu")},
        {"map_location": {"cuda:0": "cpu"}},
        {"map_location": lambda storage, loc: storage},
        {"weights_only": True},
        {"weights_only": False},
        {},
    ):
        back = mt.load(path, **kw)
        assert back["iter_num"] == 4 and f"{back['best_val_loss']:.2f}" == "1.25", kw
        np.testing.assert_array_equal(back["model"]["w"], [0.0, 1.0, 2.0])
    with pytest.raises(RuntimeError, match="load: device 'cuda' is not available"):
        mt.load(path, map_location="cuda")


class _TiedLM:
    """An embedding tied to the output layer (nanoGPT's wte = lm_head), in either library."""

    @staticmethod
    def build(lib):
        class Tied(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.wte = lib.nn.Embedding(5, 3)
                self.shared = lib.nn.Linear(3, 3)
                self.again = self.shared  # one submodule under two names
                self.lm_head = lib.nn.Linear(3, 5, bias=False)
                self.wte.weight = self.lm_head.weight

        return Tied()


def test_state_dict_names_a_tied_weight_under_each_name_as_torch():
    torch.manual_seed(0)
    theirs, ours = _TiedLM.build(torch), _TiedLM.build(mt)
    assert (
        list(ours.state_dict())
        == list(theirs.state_dict())
        == [
            "wte.weight",
            "shared.weight",
            "shared.bias",
            "again.weight",
            "again.bias",
            "lm_head.weight",
        ]
    )
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict(theirs.state_dict())  # every name, as torch writes them
    assert ours.wte.weight is ours.lm_head.weight
    np.testing.assert_array_equal(ours.lm_head.weight.data, theirs.lm_head.weight.detach())
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})


def test_load_state_dict_of_a_tied_weight_given_once_or_two_ways():
    ours = _TiedLM.build(mt)
    sd = ours.state_dict()
    once = {
        k: v for k, v in sd.items() if k not in ("lm_head.weight", "again.weight", "again.bias")
    }
    once["wte.weight"] = np.full((5, 3), 0.5, np.float32)
    assert ours.load_state_dict(once) == ([], [])  # an older checkpoint: each once
    assert np.all(ours.lm_head.weight.numpy() == 0.5)
    sd["lm_head.weight"] = sd["lm_head.weight"] + 1  # which of the two is meant?
    with pytest.raises(
        mt.nn.module.StateDictError,
        match="wte.weight and lm_head.weight name one tied tensor but hold different values",
    ):
        ours.load_state_dict(sd)
    assert np.all(ours.lm_head.weight.numpy() == 0.5)  # nothing changed
    del once["shared.bias"]
    with pytest.raises(
        mt.nn.module.StateDictError,
        match=r"missing keys \(2\): shared.bias, "
        r"again.bias",
    ):
        ours.load_state_dict(once)


def test_interop_from_torch_loads_a_tied_generator():
    from transformer import interop
    from transformer.config import TransformerConfig
    from transformer.models import Transformer

    cfg = TransformerConfig.tiny(11, 13, tie_embeddings=True)
    twin = interop.to_torch(Transformer(cfg))
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(0.25)
    model = interop.from_torch(Transformer(cfg), twin)
    assert model.generator.weight is model.tgt_embed.token.weight
    np.testing.assert_array_equal(model.generator.weight.numpy(), twin.generator.weight.detach())


def _scaler_run(lib, scaler, steps):
    """A few SGD steps of one Linear under `scaler`; `steps` lists which ones overflow."""
    lib.manual_seed(0)
    model = lib.nn.Linear(3, 2)
    if lib is mt:
        model.load_state_dict(_scaler_run.start)
    else:
        _scaler_run.start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    x = lib.tensor(rand(4, 3, seed=2).astype(np.float32))
    scales = []
    for overflow in steps:
        loss = (model(x) ** 2).mean()
        scaler.scale(loss).backward()
        if overflow:
            model.bias.grad[0] = float("inf")
        scaler.unscale_(opt)
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales.append(scaler.get_scale())
    return model, scales


def test_grad_scaler_on_the_cpu_scales_skips_and_grows_as_torch():
    steps = [False, True, False, False, False]
    kw = dict(init_scale=2.0**10, growth_interval=2)
    theirs, t_scales = _scaler_run(torch, torch.amp.GradScaler("cpu", **kw), steps)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # clipping an inf: no warning
        ours, scales = _scaler_run(mt, mt.amp.GradScaler("cpu", **kw), steps)
    assert scales == t_scales == [1024.0, 512.0, 512.0, 1024.0, 1024.0]  # halve, then grow
    for name, p in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name], p.numpy(), rtol=1e-6, err_msg=name)
    scaler, t_scaler = mt.amp.GradScaler("cpu", **kw), torch.amp.GradScaler("cpu", **kw)
    assert scaler.state_dict() == t_scaler.state_dict()
    opt = mt.optim.SGD([nn.Parameter(np.ones(2, np.float32))], lr=0.1)
    scaler.step(opt)  # unscales first, once
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called"):
        scaler.unscale_(opt)
    scaler.update()
    with pytest.raises(AssertionError, match="no inf checks were recorded"):
        scaler.update()


def test_grad_scaler_for_cuda_is_disabled_with_torch_warning():
    for make in (lambda lib: lib.amp.GradScaler("cuda"), lambda lib: lib.cuda.amp.GradScaler()):
        with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
            scaler = make(mt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_scaler = make(torch)
        assert scaler.is_enabled() is t_scaler.is_enabled() is False
        assert scaler.get_scale() == t_scaler.get_scale() == 1.0
        assert scaler.state_dict() == t_scaler.state_dict() == {}
        loss = mt.tensor(2.0)
        assert scaler.scale(loss) is loss
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # enabled=False: no warning
        assert not mt.amp.GradScaler("cuda", enabled=False).is_enabled()
    with pytest.raises(RuntimeError, match="GradScaler: device 'mps' is not available"):
        mt.amp.GradScaler("mps")


def test_backends_switches_and_dtype_names_gpu_code_sets():
    for lib in (mt, torch):
        lib.backends.cuda.matmul.allow_tf32 = True
        lib.backends.cudnn.allow_tf32 = True
        assert lib.backends.cuda.matmul.allow_tf32 and lib.backends.cudnn.allow_tf32
        assert lib.backends.mps.is_available() is False or lib is torch
    mt.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    assert mt.float16 == mt.half == torch.zeros(1, dtype=torch.float16).numpy().dtype
    check(mt.ones(2, dtype=mt.float16), torch.ones(2, dtype=torch.float16))
    table = {"float32": mt.float32, "bfloat16": mt.bfloat16, "float16": mt.float16}
    assert table["float16"] == np.float16  # nanoGPT's ptdtype table builds
    with pytest.raises(TypeError, match="bfloat16 .not available: numpy has no bfloat16"):
        mt.zeros(2, dtype=mt.bfloat16)


def test_clamp_takes_torchs_min_and_max_keywords():
    data = np.array([-2.0, -0.5, 0.5, 2.0], np.float32)
    cases = [dict(min=-1.0, max=1.0), dict(min=0.0), dict(max=0.25)]
    for kwargs in cases:
        x, tx = mt.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
        y, ty = x.clamp(**kwargs), tx.clamp(**kwargs)
        (y * y).sum().backward()
        (ty * ty).sum().backward()
        np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
        check(mt.clamp(mt.tensor(data), **kwargs), torch.clamp(torch.tensor(data), **kwargs))
    assert mt.clamp(mt.tensor([1, 5, 9]), min=2, max=6).tolist() == [2, 5, 6]
    with pytest.raises(TypeError, match="clip: a bound is given twice"):
        mt.tensor(data).clamp(-1.0, min=-1.0)
