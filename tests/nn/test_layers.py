"""minitensor/nn/layers.py: Linear, LayerNorm, Embedding, Dropout, and small models that learn."""

import math

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn

# ----------------------------------------------------------------------------- layers


def test_linear_shapes_init_and_error():
    mt.manual_seed(0)
    lin = nn.Linear(16, 5)
    bound = 1 / math.sqrt(16)
    assert np.abs(lin.weight.numpy()).max() <= bound and np.abs(lin.bias.numpy()).max() <= bound
    assert np.abs(lin.weight.numpy()).max() > 0.8 * bound  # U(±1/√in), not something smaller
    assert lin(mt.randn(2, 7, 16)).shape == (2, 7, 5)
    assert nn.Linear(3, 2, bias=False).bias is None
    with pytest.raises(ValueError, match=r"^linear: .*\(2, 3\).*expected 16.*\(5, 16\)"):
        lin(mt.randn(2, 3))
    with pytest.raises(ValueError, match=r"^linear in 0: .*\(2, 3\).*expected 16"):
        nn.Sequential(lin)(mt.randn(2, 3))  # inside a model: the module's path
    y = lin(mt.randn(3, 16))
    np.testing.assert_allclose(y.data, y.data)  # runs; values checked against torch below


@pytest.mark.torch
def test_linear_matches_torch():
    torch = pytest.importorskip("torch")
    lin = nn.Linear(6, 4).double()
    ref = torch.nn.Linear(6, 4).double()
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(lin.weight.numpy()))
        ref.bias.copy_(torch.from_numpy(lin.bias.numpy()))
    x = np.random.default_rng(1).standard_normal((3, 6))
    np.testing.assert_allclose(
        lin(mt.tensor(x, dtype=mt.float64)).numpy(),
        ref(torch.from_numpy(x)).detach().numpy(),
        rtol=1e-12,
    )


def test_gradcheck_linear_through_module():
    mt.manual_seed(1)
    lin = nn.Linear(4, 3).double()
    x = mt.randn(2, 5, 4, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda x, w, b: lin(x), x, lin.weight, lin.bias)


def test_gradcheck_layernorm_through_module():
    mt.manual_seed(2)
    ln = nn.LayerNorm(6).double()
    with mt.no_grad():
        ln.weight.copy_(np.random.default_rng(0).standard_normal(6))
        ln.bias.copy_(np.random.default_rng(1).standard_normal(6))
    x = mt.randn(3, 6, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda x, w, b: ln(x), x, ln.weight, ln.bias)
    no_affine = nn.LayerNorm(6, elementwise_affine=False).double()
    assert no_affine.weight is None and no_affine.num_parameters() == 0
    assert mt.gradcheck(lambda x: no_affine(x), x)


def test_gradcheck_embedding_through_module():
    mt.manual_seed(3)
    emb = nn.Embedding(6, 3).double()
    ids = mt.tensor([[0, 2, 2], [5, 1, 0]])
    assert mt.gradcheck(lambda w: emb(ids), emb.weight)


def test_embedding_padding_idx_gets_no_gradient():
    mt.manual_seed(4)
    emb = nn.Embedding(5, 3, padding_idx=0)
    assert np.all(emb.weight.numpy()[0] == 0)
    ids = mt.tensor([[0, 1, 0], [2, 0, 4]])
    (emb(ids) * mt.randn(2, 3, 3)).sum().backward()
    g = emb.weight.grad.numpy()
    assert np.all(g[0] == 0)
    assert np.all(g[1] != 0) and np.all(g[3] == 0)  # 3 unused; 1 used → nonzero
    opt = mt.optim.Adam(emb.parameters(), lr=0.1)
    opt.step()
    assert np.all(emb.weight.numpy()[0] == 0)  # so the pad row stays zero
    assert nn.Embedding(5, 3, padding_idx=-1).padding_idx == 4
    with pytest.raises(ValueError, match="padding_idx 7"):
        nn.Embedding(5, 3, padding_idx=7)


def test_dropout_train_and_eval():
    mt.manual_seed(5)
    d = nn.Dropout(0.5)
    x = mt.ones(1000)
    y = d(x).numpy()
    assert set(np.unique(y)) == {0.0, 2.0} and 0.4 < (y == 0).mean() < 0.6
    d.eval()
    assert np.array_equal(d(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match="p must be in"):
        nn.Dropout(1.5)


# ----------------------------------------------------------------------------- learning


def test_mlp_learns_xor():
    mt.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    x = mt.tensor([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=mt.float32)
    y = mt.tensor([[0], [1], [1], [0]], dtype=mt.float32)
    opt = mt.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    assert loss.item() < 1e-3
    pred = model(x).numpy() > 0.5
    assert np.array_equal(pred, y.numpy() > 0.5)


def test_regression_reaches_a_set_loss():
    mt.manual_seed(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 3))
    y = np.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]  # a smooth nonlinear target
    X, Y = mt.tensor(x), mt.tensor(y)
    model = nn.Sequential(
        nn.Linear(3, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 1)
    )
    opt = mt.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
    start = F.mse_loss(model(X), Y).item()
    for _ in range(200):
        opt.zero_grad()
        loss = F.mse_loss(model(X), Y)
        loss.backward()
        opt.step()
    assert loss.item() < 2e-3 < 0.1 < start  # reaches it in ~120 steps with this seed
