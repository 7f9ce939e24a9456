"""minitensor/nn/module.py: registration, names, scopes, containers, state dicts, dtypes, copies."""

from collections import OrderedDict

import numpy as np
import pytest

import minitensor as mt
from minitensor import nn
from minitensor.autograd import topological_order


class Block(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.self_attn = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        with mt.scope("residual"):  # a scope opened by hand inside a module
            y = x + self.self_attn(x)
        return self.norm(self.drop(y))


class Encoder(nn.Module):
    def __init__(self, vocab=10, d=4, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.layers = nn.ModuleList([Block(d) for _ in range(n_layers)])

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, ids):
        return self.head(self.encoder(ids))


def scopes_of(t):
    return {node.scope for node in topological_order(t.grad_fn)}


# ----------------------------------------------------------------------------- names and scopes


def test_a_module_path_follows_the_tree_after_it_was_read():
    """Module.path is remembered between calls (every call reads it): moving a module to
    another place, or into a new model, or losing the model above it changes what it says."""
    import copy
    import gc

    m = Model()
    layer = m.encoder.layers[1]
    assert layer.path == "encoder.layers.1"
    m.encoder.extra = layer  # placed a second time: its path is its latest place
    assert layer.path == "encoder.extra"
    outer = nn.Sequential(m)
    assert layer.path == "0.encoder.extra" and m.path == "0"
    twin = copy.deepcopy(m)  # a copy is a new root: the original keeps its place
    assert twin.path == "" and twin.encoder.extra.path == "encoder.extra"
    assert layer.path == "0.encoder.extra"
    encoder = m.encoder
    del outer
    gc.collect()
    assert layer.path == "encoder.extra"  # the top is gone: the path starts below it
    del m
    gc.collect()
    assert layer.path == "extra" and encoder.path == ""


def test_parameter_names_are_dotted_paths():
    m = Model()
    names = [n for n, _ in m.named_parameters()]
    assert names[:5] == [
        "encoder.embed.weight",
        "encoder.layers.0.self_attn.weight",
        "encoder.layers.0.self_attn.bias",
        "encoder.layers.0.norm.weight",
        "encoder.layers.0.norm.bias",
    ]
    assert names[-1] == "head.2.bias"
    for name, p in m.named_parameters():
        assert p.name == name  # every Parameter knows its own dotted name
    assert m.encoder.layers[1].self_attn.weight.name == "encoder.layers.1.self_attn.weight"
    assert m.encoder.layers[1].path == "encoder.layers.1"
    assert m.path == ""
    # a parameter outside any module keeps the name it was given
    assert nn.Parameter(np.zeros(2)).name is None
    assert [n for n, _ in m.named_modules()][:4] == [
        "",
        "encoder",
        "encoder.embed",
        "encoder.layers",
    ]


def test_scopes_recorded_in_nested_modules():
    m = Model()
    out = m(mt.tensor([[1, 2, 3]]))
    scopes = scopes_of(out)
    assert {
        "encoder.embed",
        "encoder.layers.0.self_attn",
        "encoder.layers.1.self_attn",
        "encoder.layers.0.residual",
        "encoder.layers.1.norm",
        "head.0",
        "head.1",
        "head.2",
    } <= scopes
    # the matmul inside layer 1's attention projection says where it ran
    matmuls = [n for n in topological_order(out.grad_fn) if n.name == "matmul + bias"]
    assert "encoder.layers.1.self_attn" in {n.scope for n in matmuls}
    # the residual add opened by hand in layer 0 is inside layer 0's scope
    adds = [n for n in topological_order(out.grad_fn) if n.scope == "encoder.layers.0.residual"]
    assert adds and all(n.name == "add" for n in adds)
    assert mt.current_scope() == ""  # scopes closed again


def test_hand_scope_around_a_model_prefixes_it():
    m = Block()
    with mt.scope("outer"):
        y = m(mt.randn(2, 4))
    assert scopes_of(y) == {"outer.residual", "outer.self_attn", "outer.norm"}


def test_a_forward_that_raises_leaves_every_scope_it_entered():
    """Module.__call__ enters and leaves its scope itself (no context manager): an error in a
    nested forward, with or without hooks, closes the scopes of every module it passed."""

    class Failing(nn.Module):
        def forward(self, x):
            raise RuntimeError("inside")

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Failing()

        def forward(self, x):
            return self.inner(x)

    for hooked in (False, True):
        m = Outer()
        if hooked:
            m.inner.register_forward_pre_hook(lambda module, args: None)
        with mt.scope("outer"):
            with pytest.raises(RuntimeError, match="inside"):
                m(mt.randn(2))
            assert mt.current_scope() == "outer"
        assert mt.current_scope() == ""
        assert scopes_of(Block()(mt.randn(2, 4))) == {"residual", "self_attn", "norm"}


def test_unknown_attribute_raises_with_hint():
    m = Model()
    with pytest.raises(AttributeError, match="did you mean 'encoder'"):
        _ = m.encodr
    with pytest.raises(AttributeError, match="encoder.layers.0"):
        _ = m.encoder.layers[0].missing_thing
    assert getattr(m, "nothing", 42) == 42  # getattr with a default still works


def test_tied_weight_counted_once_and_named_by_first_owner():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.out = nn.Linear(3, 5, bias=False)
            self.out.weight = self.embed.weight

    m = Tied()
    assert [n for n, _ in m.named_parameters()] == ["embed.weight"]
    assert m.out.weight.name == "embed.weight"
    assert m.num_parameters() == 15
    assert list(m.state_dict()) == ["embed.weight", "out.weight"]  # every name, as torch


def test_registration_rules():
    m = nn.Module()
    m.w = nn.Parameter(np.ones(3))
    m.child = nn.Linear(2, 2)
    assert list(m._parameters) == ["w"] and list(m._modules) == ["child"]
    m.w = 5  # replacing with a plain value unregisters it
    assert list(m._parameters) == []
    del m.child
    assert list(m._modules) == []
    with pytest.raises(KeyError, match="without '.'"):
        m.add_module("a.b", nn.ReLU())
    d = nn.ModuleDict()
    with pytest.raises(KeyError, match="hide"):
        d["train"] = nn.ReLU()  # would shadow Module.train

    class NoSuper(nn.Module):
        def __init__(self):
            self.x = 1

    with pytest.raises(AttributeError, match="super"):
        NoSuper()


def test_buffers_follow_dtype_and_state_dict():
    class WithBuf(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("table", np.arange(4.0, dtype=np.float32))
            self.register_buffer("scratch", np.zeros(2, np.float32), persistent=False)

    m = WithBuf()
    assert list(m.state_dict()) == ["table", "lin.weight", "lin.bias"]
    assert [n for n, _ in m.named_buffers()] == ["table", "scratch"]
    m.table = mt.tensor([9.0, 9.0, 9.0, 9.0])  # assigning to a buffer's name updates it
    assert "table" in m._buffers and m.state_dict()["table"][0] == 9.0
    m.double()
    assert m.table.dtype == np.float64 and m.lin.weight.dtype == np.float64
    assert m.num_parameters() == 6


def test_repr_tree():
    m = Model()
    text = repr(m)
    assert text.startswith("Model(\n  (encoder): Encoder(\n")
    assert "(0-1): 2 x Block(" in text
    assert "(embed): Embedding(10, 4, padding_idx=0)" in text
    assert "(0): Linear(in_features=4, out_features=8, bias=True)" in text
    assert "(norm): LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)" in text


@pytest.mark.torch
def test_repr_matches_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(
        nn.Linear(3, 4),
        nn.ReLU(),
        nn.LayerNorm(4),
        nn.GELU(),
        nn.ModuleList([nn.Linear(4, 4, bias=False) for _ in range(3)]),
        nn.Embedding(7, 2, padding_idx=1),
        nn.Identity(),
        nn.Tanh(),
    )
    theirs = torch.nn.Sequential(
        torch.nn.Linear(3, 4),
        torch.nn.ReLU(),
        torch.nn.LayerNorm(4),
        torch.nn.GELU(),
        torch.nn.ModuleList([torch.nn.Linear(4, 4, bias=False) for _ in range(3)]),
        torch.nn.Embedding(7, 2, padding_idx=1),
        torch.nn.Identity(),
        torch.nn.Tanh(),
    )
    assert repr(ours) == repr(theirs)
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())


def test_train_eval_apply_zero_grad():
    m = Model()
    assert all(x.training for x in m.modules())
    m.eval()
    assert not any(x.training for x in m.modules())
    m.train()
    assert m.encoder.layers[1].drop.training
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen[-1] == "Model" and seen.count("Linear") == 4
    m(mt.tensor([[1, 2]])).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    assert m.num_parameters(trainable_only=True) == 0


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and isinstance(seq[1], nn.ReLU)
    assert [type(x).__name__ for x in seq[:2]] == ["Linear", "ReLU"]
    with pytest.raises(IndexError, match="out of range"):
        seq[3]
    named = nn.Sequential(OrderedDict([("hidden", nn.Linear(2, 3)), ("act", nn.Tanh())]))
    assert [n for n, _ in named.named_parameters()] == ["hidden.weight", "hidden.bias"]
    assert named(mt.randn(5, 2)).shape == (5, 3)
    ml = nn.ModuleList().append(nn.ReLU()).extend([nn.Tanh()])
    ml[1] = nn.SiLU()
    assert [type(x).__name__ for x in ml] == ["ReLU", "SiLU"]
    md = nn.ModuleDict({"a": nn.Linear(1, 1)})
    assert "a" in md and list(md.keys()) == ["a"]
    assert md["a"].weight.name == "a.weight"
    with pytest.raises(KeyError, match="no key 'b'"):
        md["b"]


def test_get_submodule_and_parameter():
    m = Model()
    assert m.get_submodule("encoder.layers.1") is m.encoder.layers[1]
    assert m.get_parameter("head.0.bias") is m.head[0].bias
    with pytest.raises(AttributeError, match="no submodule 'nope'"):
        m.get_submodule("encoder.nope")


# ----------------------------------------------------------------------------- state dicts


def test_state_dict_round_trip():
    mt.manual_seed(6)
    a = Model()
    mt.manual_seed(7)
    b = Model()
    ids = mt.tensor([[1, 2, 3, 0]])
    assert not np.allclose(a(ids).numpy(), b(ids).numpy())
    state = a.state_dict()
    assert list(state) == [n for n, _ in a.named_parameters()]
    assert all(isinstance(v, np.ndarray) for v in state.values())
    weight_array = b.head[0].weight.numpy()
    result = b.load_state_dict(state)
    assert result.missing_keys == [] and result.unexpected_keys == []
    np.testing.assert_array_equal(a(ids).numpy(), b(ids).numpy())
    assert b.head[0].weight.numpy() is weight_array  # copied into place, not replaced
    a.head[0].weight.numpy()[...] = 0  # the state dict was a copy
    assert not np.all(state["head.0.weight"] == 0)


def test_load_state_dict_reports_everything_at_once_and_changes_nothing():
    m = Model()
    before = {k: v.copy() for k, v in m.state_dict().items()}
    state = m.state_dict()
    del state["head.2.bias"]  # missing
    state["head.9.weight"] = np.zeros(3)  # unexpected
    state["head.0.weight"] = np.zeros((8, 5), np.float32)  # wrong shape
    state["encoder.embed.weight"] = np.zeros((10, 4), np.float32)  # fine, but must not load
    with pytest.raises(RuntimeError) as info:
        m.load_state_dict(state)
    msg = str(info.value)
    assert "missing keys (1): head.2.bias" in msg
    assert "unexpected keys (1): head.9.weight" in msg
    assert "head.0.weight: checkpoint (8, 5) vs model (8, 4)" in msg
    assert "nothing was changed" in msg
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    # non-strict: missing and unexpected are reported, the shape mismatch is still an error
    with pytest.raises(RuntimeError, match="head.0.weight"):
        m.load_state_dict(state, strict=False)
    state["head.0.weight"] = before["head.0.weight"]
    missing, unexpected = m.load_state_dict(state, strict=False)
    assert missing == ["head.2.bias"] and unexpected == ["head.9.weight"]
    assert np.all(m.encoder.embed.weight.numpy() == 0)


def test_load_whole_checkpoint_by_mistake_gives_hint():
    m = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=r"checkpoint\['model'\]"):
        m.load_state_dict({"model": m.state_dict(), "step": 3})


def test_double_and_float():
    m = Model().double()
    assert all(p.dtype == np.float64 for p in m.parameters())
    assert m(mt.tensor([[1, 2]])).dtype == np.float64
    m.float()
    assert all(p.dtype == np.float32 for p in m.parameters())


def test_grad_norms_per_parameter():
    m = Model()
    m(mt.tensor([[1, 2, 3]])).sum().backward()
    norms = nn.utils.grad_norms(m)
    assert list(norms) == [n for n, _ in m.named_parameters()]
    w = m.head[2].weight
    assert (
        abs(norms["head.2.weight"] - np.sqrt((w.grad.numpy().astype(np.float64) ** 2).sum())) < 1e-9
    )
    m.head[2].bias.grad = None
    assert "head.2.bias" not in nn.utils.grad_norms(m)


def test_deepcopy_makes_independent_layers_with_their_own_names():
    import copy

    layer = Block()
    enc = nn.Module()
    enc.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(3)])  # "clones(layer, N)"
    assert enc.layers[2].self_attn.weight.name == "layers.2.self_attn.weight"
    assert layer.self_attn.weight.name == "self_attn.weight"  # original unchanged
    assert enc.layers[1].self_attn.path == "layers.1.self_attn"
    y = enc.layers[1](mt.randn(2, 4))
    assert scopes_of(y) == {"layers.1.self_attn", "layers.1.residual", "layers.1.norm"}
    w0, w1 = enc.layers[0].self_attn.weight, enc.layers[1].self_attn.weight
    assert np.array_equal(w0.numpy(), w1.numpy()) and not np.shares_memory(w0.numpy(), w1.numpy())
    assert enc.num_parameters() == 3 * layer.num_parameters()


@pytest.mark.parametrize(
    "dtype",
    [np.float64, mt.float64, np.dtype("float64")],
    ids=["np.float64-class", "mt.float64", "np.dtype"],
)
def test_module_to_float64_by_class_or_dtype(dtype):
    # the class np.float64 has .dtype and .shape of its own: it must be read as a dtype,
    # not as a tensor-like (which silently left the module in float32)
    from transformer.attention import MultiHeadAttention

    m = MultiHeadAttention(16, 4).to(dtype)
    assert m.w_q.weight.dtype == np.float64
    assert all(p.dtype == np.float64 for p in m.parameters())
    m2 = nn.Linear(3, 2).to("cpu", dtype)
    assert m2.weight.dtype == np.float64


def test_module_to_string_is_a_device_as_in_torch():
    m = nn.Linear(3, 2)
    assert m.to("cpu") is m and m.weight.dtype == np.float32
    with pytest.raises(RuntimeError, match=r"Linear\.to: device 'float64' is not available"):
        m.to("float64")
    assert m.to(device="cpu", dtype=np.float64).weight.dtype == np.float64
