"""nn.RNN / nn.LSTM / nn.GRU and their cells against torch.nn: the same code run under both
libraries on the same weights (torch's state_dict loaded strictly), float64. Outputs, final
states and the gradient of every weight, of the input and of the initial state agree, for every
combination of num_layers, bias, batch_first and bidirectional, batched and unbatched."""

import itertools
import math

import numpy as np
import pytest

import minitensor as mt

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# (our class name, constructor keywords): RNN twice, once per nonlinearity
KINDS = [
    ("RNN", {"nonlinearity": "tanh"}),
    ("RNN", {"nonlinearity": "relu"}),
    ("LSTM", {}),
    ("GRU", {}),
]
H_IN, H = 3, 4


def _pair(name, seed=0, **kwargs):
    """A torch layer (float64, seeded) and ours with its state_dict loaded strictly."""
    torch.manual_seed(seed)
    theirs = getattr(torch.nn, name)(**kwargs).double()
    ours = getattr(mt.nn, name)(**kwargs, dtype=mt.float64)
    assert ours.load_state_dict(theirs.state_dict(), strict=True) == ([], [])
    assert list(ours.state_dict()) == list(theirs.state_dict())
    return theirs, ours


def _leaf(rng, shape):
    """The same float64 leaf in both libraries."""
    a = rng.standard_normal(shape)
    return torch.tensor(a, requires_grad=True), mt.from_numpy(a.copy(), requires_grad=True)


def _loss(outputs, weights):
    """A weighted sum of every output tensor, so each element's gradient differs."""
    return sum((o * w).sum() for o, w in zip(outputs, weights))


def _flat(result):
    """(output, h_n) or (output, (h_n, c_n)) → [output, h_n(, c_n)]."""
    out, state = result
    return [out, *state] if isinstance(state, tuple) else [out, state]


def _compare(theirs, ours, t_args, m_args, t_leaves, m_leaves, flat=_flat):
    """Run both, compare every output, then the gradients of the leaves and of every weight."""
    t_out, m_out = flat(theirs(*t_args)), flat(ours(*m_args))
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal(tuple(o.shape)) for o in t_out]
    _loss(t_out, [torch.tensor(w) for w in weights]).backward()
    _loss(m_out, [mt.from_numpy(w) for w in weights]).backward()
    for t, m in zip(t_out, m_out):
        assert tuple(t.shape) == m.shape
        np.testing.assert_allclose(m.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)
    for t, m in zip(t_leaves, m_leaves):
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)
    ours_params = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(
            ours_params[name].grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name
        )


FLAGS = list(itertools.product([1, 2], [True, False], [False, True], [False, True]))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[0] + k[1].get("nonlinearity", ""))
@pytest.mark.parametrize("num_layers, bias, batch_first, bidirectional", FLAGS)
def test_layer_matches_torch(kind, num_layers, bias, batch_first, bidirectional):
    name, extra = kind
    kwargs = dict(
        input_size=H_IN,
        hidden_size=H,
        num_layers=num_layers,
        bias=bias,
        batch_first=batch_first,
        bidirectional=bidirectional,
        **extra,
    )
    theirs, ours = _pair(name, **kwargs)
    rng = np.random.default_rng(num_layers + 2 * bias + 4 * batch_first + 8 * bidirectional)
    L, N, D = 5, 2, 2 if bidirectional else 1
    t_x, m_x = _leaf(rng, (N, L, H_IN) if batch_first else (L, N, H_IN))
    # every other combination passes an initial state (and checks its gradient); the rest
    # start from torch's default zeros
    with_state = (num_layers + bias + batch_first + bidirectional) % 2 == 0
    if not with_state:
        _compare(theirs, ours, (t_x,), (m_x,), [t_x], [m_x])
        return
    states = [_leaf(rng, (D * num_layers, N, H)) for _ in range(2 if name == "LSTM" else 1)]
    t_h = tuple(t for t, _ in states)
    m_h = tuple(m for _, m in states)
    t_arg, m_arg = (t_h, m_h) if name == "LSTM" else (t_h[0], m_h[0])
    _compare(theirs, ours, (t_x, t_arg), (m_x, m_arg), [t_x, *t_h], [m_x, *m_h])


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[0] + k[1].get("nonlinearity", ""))
@pytest.mark.parametrize("with_state", [False, True])
def test_unbatched_input_matches_torch(kind, with_state):
    name, extra = kind
    theirs, ours = _pair(name, input_size=H_IN, hidden_size=H, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(3)
    t_x, m_x = _leaf(rng, (6, H_IN))  # (L, H_in): no batch axis
    if not with_state:
        _compare(theirs, ours, (t_x,), (m_x,), [t_x], [m_x])
        return
    states = [_leaf(rng, (4, H)) for _ in range(2 if name == "LSTM" else 1)]
    t_h, m_h = tuple(t for t, _ in states), tuple(m for _, m in states)
    t_arg, m_arg = (t_h, m_h) if name == "LSTM" else (t_h[0], m_h[0])
    _compare(theirs, ours, (t_x, t_arg), (m_x, m_arg), [t_x, *t_h], [m_x, *m_h])


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_dropout_between_layers_matches_torch_in_eval_and_at_p_1(name):
    """Dropout is random, so compare where it is not: in eval mode it is off, and in training
    with p = 1 every input to the second layer is zero in both libraries."""
    for train in (False, True):
        theirs, ours = _pair(name, input_size=H_IN, hidden_size=H, num_layers=2, dropout=1.0)
        theirs.train(train)
        ours.train(train)
        t_x, m_x = _leaf(np.random.default_rng(4), (5, 2, H_IN))
        _compare(theirs, ours, (t_x,), (m_x,), [t_x], [m_x])


def test_dropout_is_applied_between_layers_only_in_training():
    mt.manual_seed(0)
    lstm = mt.nn.LSTM(H_IN, H, num_layers=2, dropout=0.5, dtype=mt.float64)
    x = mt.randn(5, 2, H_IN, dtype=mt.float64)
    first, second = lstm(x)[0].numpy(), lstm(x)[0].numpy()
    assert not np.allclose(first, second)  # two draws of the dropout mask
    lstm.eval()
    np.testing.assert_array_equal(lstm(x)[0].numpy(), lstm(x)[0].numpy())


CELLS = [("RNNCell", {"nonlinearity": "tanh"}), ("RNNCell", {"nonlinearity": "relu"})]
CELLS += [("LSTMCell", {}), ("GRUCell", {})]


@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k[0] + k[1].get("nonlinearity", ""))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_cell_matches_torch(kind, bias, batched, with_state):
    name, extra = kind
    theirs, ours = _pair(name, input_size=H_IN, hidden_size=H, bias=bias, **extra)
    rng = np.random.default_rng(5)
    batch = (3,) if batched else ()
    t_x, m_x = _leaf(rng, (*batch, H_IN))
    t_args, m_args, t_leaves, m_leaves = [t_x], [m_x], [t_x], [m_x]
    if with_state:
        states = [_leaf(rng, (*batch, H)) for _ in range(2 if name == "LSTMCell" else 1)]
        t_h, m_h = tuple(t for t, _ in states), tuple(m for _, m in states)
        t_args.append(t_h if name == "LSTMCell" else t_h[0])
        m_args.append(m_h if name == "LSTMCell" else m_h[0])
        t_leaves, m_leaves = [t_x, *t_h], [m_x, *m_h]
    flat = list if name == "LSTMCell" else lambda h: [h]  # (h', c') or h'
    _compare(theirs, ours, t_args, m_args, t_leaves, m_leaves, flat)


def test_a_cell_run_over_time_is_the_layer():
    """LSTMCell stepped over the sequence with the layer's weights gives the layer's output."""
    mt.manual_seed(0)
    layer = mt.nn.LSTM(H_IN, H, dtype=mt.float64)
    cell = mt.nn.LSTMCell(H_IN, H, dtype=mt.float64)
    for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(cell, kind).numpy()[...] = getattr(layer, kind + "_l0").numpy()
    x = mt.randn(6, 2, H_IN, dtype=mt.float64)
    out, (h_n, c_n) = layer(x)
    state = None
    for t in range(6):
        state = cell(x[t], state)
        np.testing.assert_allclose(state[0].numpy(), out[t].numpy(), rtol=1e-12)
    np.testing.assert_allclose(state[1].numpy(), c_n[0].numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"])
def test_initialisation_is_torchs_uniform(name):
    """Every parameter U(−1/√hidden, 1/√hidden), as torch's reset_parameters, with torch's
    names and shapes."""
    hidden = 64
    kwargs = dict(input_size=5, hidden_size=hidden)
    if not name.endswith("Cell"):
        kwargs |= dict(num_layers=2, bidirectional=True)
    mt.manual_seed(0)
    ours = getattr(mt.nn, name)(**kwargs)
    theirs = getattr(torch.nn, name)(**kwargs)
    shapes = {n: tuple(p.shape) for n, p in theirs.named_parameters()}
    assert {n: p.shape for n, p in ours.named_parameters()} == shapes
    bound = 1 / math.sqrt(hidden)
    for n, p in ours.named_parameters():
        assert p.dtype == np.float32
        assert 0.9 * bound < np.abs(p.numpy()).max() <= bound, n  # the whole interval
    values = np.concatenate([p.numpy().ravel() for p in ours.parameters()])  # ≥ 16,000
    assert abs(values.mean()) < 0.05 * bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.05 * bound  # a uniform's spread


def test_gradcheck_through_time():
    """Finite differences agree with backward through a 2-layer bidirectional GRU and LSTM."""
    mt.manual_seed(0)
    for cls in (mt.nn.GRU, mt.nn.LSTM):
        layer = cls(2, 3, num_layers=2, bidirectional=True, batch_first=True, dtype=mt.float64)
        x = mt.randn(2, 4, 2, dtype=mt.float64, requires_grad=True)
        w = layer.weight_hh_l0_reverse
        # the weight is perturbed in place, so the layer sees each perturbation
        assert mt.gradcheck(lambda x, w, layer=layer: layer(x)[0].tanh().sum(), x, w)


def test_errors_name_the_layer_and_shapes():
    lstm = mt.nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"LSTM.*\(5, 2, 7\).*input_size = 3"):
        lstm(mt.randn(5, 2, 7))
    with pytest.raises(ValueError, match=r"LSTM.*hidden state of shape \(1, 2, 4\).*\(2, 2, 4\)"):
        lstm(mt.randn(5, 2, 3), (mt.zeros(1, 2, 4), mt.zeros(1, 2, 4)))
    with pytest.raises(TypeError, match="LSTM: hx must be a tuple"):
        lstm(mt.randn(5, 2, 3), mt.zeros(2, 2, 4))
    with pytest.raises(NotImplementedError, match="proj_size"):
        mt.nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        mt.nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match=r"GRUCell.*\(2, 5\)"):
        mt.nn.GRUCell(3, 4)(mt.randn(2, 5))


def test_dropout_on_one_layer_warns_as_torch():
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        torch.nn.GRU(3, 4, dropout=0.5)
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        mt.nn.GRU(3, 4, dropout=0.5)


def test_repr_reads_as_torchs():
    for kwargs in (dict(), dict(num_layers=2, batch_first=True, bidirectional=True)):
        assert repr(mt.nn.LSTM(3, 4, **kwargs)) == repr(torch.nn.LSTM(3, 4, **kwargs))
    assert repr(mt.nn.GRUCell(3, 4, bias=False)) == repr(torch.nn.GRUCell(3, 4, bias=False))
