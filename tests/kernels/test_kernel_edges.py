"""Every kernel pair (numba kernel and numpy twin) on edge values: ±inf, NaN, ±1e30, subnormals,
rows of −1e9, huge magnitudes (3e4, 1e6) and fully masked rows, in float32 and float64. Both
must give the same NaN pattern and values within a few ulp; against torch where it is installed.

A small number of examples runs by default; `pytest tests/kernels/test_kernel_edges.py
--hypothesis-profile=kernel-edges-long` runs many more.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minitensor as mt
from minitensor import functional as F

K = mt.kernels
settings.register_profile("kernel-edges-long", max_examples=2000, deadline=None)
FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))

EDGES = [
    np.inf,
    -np.inf,
    np.nan,
    1e30,
    -1e30,
    1e-40,
    -1e-40,
    -1e9,
    3e4,
    3e4 + 1,
    1e6,
    -1e6,
    0.0,
    -0.0,
    1.0,
    -2.5,
]
DTYPES = st.sampled_from([np.float32, np.float64])


def tolerance(dtype):
    return 64 * np.finfo(dtype).eps  # a few ulp of the float32 exp and of the sum order


@st.composite
def matrices(draw, finite=False, min_cols=1):
    """(rows, cols) arrays mixing ordinary values, edge values and rows of one edge value."""
    dtype = draw(DTYPES)
    n, c = draw(st.integers(1, 4)), draw(st.integers(min_cols, 9))
    edges = [e for e in EDGES if np.isfinite(e)] if finite else EDGES
    values = st.one_of(st.floats(-5, 5), st.sampled_from(edges))
    x = np.array(draw(st.lists(values, min_size=n * c, max_size=n * c)), dtype=dtype)
    x = x.reshape(n, c)
    if draw(st.booleans()):  # a whole row of one value (−1e9, 3e4, …)
        x[draw(st.integers(0, n - 1))] = draw(st.sampled_from(edges))
    if draw(st.booleans()) and finite:  # huge magnitude plus small offsets
        x += dtype(draw(st.sampled_from([3e4, 1e6, -1e9])))
    return x


def agree(got, want, dtype, scale=None):
    """Same NaN pattern, same infinities, values within a few ulp (relative to `scale`, the
    size of the terms summed, where a sum may cancel)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want) & np.isfinite(got)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    size = np.abs(want) if scale is None else np.maximum(np.abs(want), scale)
    bad = np.abs(got - want) > tolerance(dtype) * size + np.finfo(dtype).tiny
    assert not (bad & finite).any(), (got, want)


def both(fn, *args):
    """fn's numba kernel and numpy twin on copies of the same arguments."""
    copies = [[a.copy() if isinstance(a, np.ndarray) else a for a in args] for _ in range(2)]
    return fn.numba(*copies[0]), fn.numpy(*copies[1])


@FAST
@given(x=matrices(), data=st.data())
def test_softmax_pair_on_edges(x, data):
    scale = data.draw(st.sampled_from([1.0, 0.125, 3.0]))
    kind = data.draw(st.sampled_from(["none", "bool", "additive", "all-blocked"]))
    mask = None
    if kind != "none":
        blocked = np.array(data.draw(st.lists(st.booleans(), min_size=x.size, max_size=x.size)))
        blocked = blocked.reshape(x.shape) | (kind == "all-blocked")
        mask = blocked if kind != "additive" else np.where(blocked, -np.inf, 0.0).astype(x.dtype)
    y, y_ref = both(K.softmax_forward, x, scale, mask)
    agree(y, y_ref, x.dtype)
    if kind == "all-blocked":
        assert (y == 0).all()
    if kind == "bool":  # a blocked score never reaches its row
        agree(
            y,
            K.softmax_forward.numba(np.where(mask, x.dtype.type(np.nan), x), scale, mask),
            x.dtype,
        )
    dy = np.nan_to_num(x[::-1].copy(), posinf=2.0, neginf=-2.0, nan=0.5)
    dy = np.clip(dy, -10, 10)
    dx, dx_ref = both(K.softmax_backward, y_ref, dy, scale)
    agree(dx, dx_ref, x.dtype, scale=np.abs(dy).max() * scale)


@FAST
@given(x=matrices())
def test_log_softmax_pair_on_edges(x):
    y, y_ref = both(K.log_softmax_forward, x)
    agree(y, y_ref, x.dtype, scale=1.0)
    dy = np.clip(np.nan_to_num(x[:, ::-1].copy(), nan=1.0), -3, 3)
    dx, dx_ref = both(K.log_softmax_backward, y_ref, dy)
    agree(dx, dx_ref, x.dtype, scale=np.abs(dy).sum(axis=-1, keepdims=True))


@FAST
@given(x=matrices(), data=st.data())
def test_cross_entropy_pair_on_edges(x, data):
    n, c = x.shape
    targets = np.array(data.draw(st.lists(st.integers(-1, c - 1), min_size=n, max_size=n)))
    smoothing = data.draw(st.sampled_from([0.0, 0.1]))
    (loss, lt), (loss_ref, lt_ref) = both(K.cross_entropy_forward, x, targets, -1, smoothing)
    agree(lt, lt_ref, x.dtype, scale=1.0)
    agree(loss, loss_ref, x.dtype, scale=1.0)
    g = np.linspace(0.5, 2, n).astype(x.dtype)
    dx, dx_ref = both(K.cross_entropy_backward, x, targets, lt_ref, g, -1, smoothing)
    agree(dx, dx_ref, x.dtype, scale=2.0)
    assert (dx[targets == -1] == 0).all()  # ignored rows: no gradient, whatever their logits


@FAST
@given(x=matrices(finite=True, min_cols=2), affine=st.booleans())
def test_layer_norm_pair_on_edges(x, affine):
    d = x.shape[1]
    w = np.linspace(-1, 2, d).astype(x.dtype) if affine else None
    b = np.linspace(0.5, -0.5, d).astype(x.dtype) if affine else None
    (y, mu, rs), (y_ref, mu_ref, rs_ref) = both(K.layer_norm_forward, x, w, b, 1e-5)
    spread = np.abs(x).max(axis=-1, keepdims=True)
    agree(mu, mu_ref, x.dtype, scale=spread[:, 0])
    if not np.isfinite(mu_ref).all() or (np.abs(x) > 1e15).any():
        return  # squares overflow: compared by NaN pattern above
    agree(rs, rs_ref, x.dtype)
    agree(y, y_ref, x.dtype, scale=np.abs(x - mu_ref[:, None]).max() * rs_ref[:, None] * 2 + 1)
    dy = np.linspace(-1, 1, x.size).reshape(x.shape).astype(x.dtype)
    got, want = both(K.layer_norm_backward, dy, x, mu_ref, rs_ref, w)
    xhat = np.abs((x - mu_ref[:, None]) * rs_ref[:, None])
    agree(
        got[0],
        want[0],
        x.dtype,
        scale=rs_ref[:, None] * (d + xhat * xhat.sum(-1, keepdims=True)) * 2,
    )
    agree(got[2], want[2], x.dtype, scale=x.shape[0])
    if affine:
        agree(got[1], want[1], x.dtype, scale=xhat.sum(axis=0) + 1)


@FAST
@given(x=matrices(), seed=st.integers(0, 2**63 - 1), p=st.sampled_from([0.0, 0.1, 0.5, 0.9]))
def test_dropout_pair_on_edges(x, seed, p):
    got, want = both(K.dropout, x, seed, p)
    np.testing.assert_array_equal(got, want)


@FAST
@given(x=matrices(finite=True), amsgrad=st.booleans())
def test_adam_update_pair_on_edges(x, amsgrad):
    grad = x[::-1].copy()
    states = []
    for fn in (K.adam_update.numba, K.adam_update.numpy):
        param, m, v = np.ones_like(x), np.full_like(x, 0.1), np.full_like(x, 0.01)
        v_max = v.copy() if amsgrad else v
        fn(param, grad, m, v, v_max, 0.9, 0.999, 1e-3, 0.03, 1e-8, np.empty_like(x))
        states.append((param, m, v, v_max))
    for got, want in zip(*states):
        np.testing.assert_array_equal(got, want)  # no fastmath: bit for bit


# ---- the cases of issue 12, each once, through the ops and against torch --------------------


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_issue_12_cases(backend):
    with K.use_backend(backend):
        loss = F.cross_entropy(mt.tensor([[-np.inf, 0.0, 1.0]]), mt.tensor([1]))
        assert np.isclose(loss.item(), 1.3132616)
        y = F.log_softmax(mt.tensor([[-1e9, -1e9, -1e9]])).numpy()
        np.testing.assert_allclose(y, -np.log(3), rtol=1e-6)
        y = F.log_softmax(mt.tensor([[3e4, 3e4 + 1, 3e4 - 2]])).numpy()
        np.testing.assert_allclose(
            y[0], [-1, 0, -3] - np.log(1 + np.exp(-1.0) + np.exp(-3.0)), rtol=1e-6
        )
        loss = F.cross_entropy(mt.tensor([[1000.0, 1001.0, 999.0]]), mt.tensor([1]))
        assert abs(loss.item() - 0.40760596) < 2e-7
        y = F.softmax(mt.tensor([[0.5, 1.0, np.inf]]), mask=np.array([False, False, True]))
        np.testing.assert_allclose(y.numpy(), [[0.37754068, 0.62245935, 0.0]], rtol=1e-6)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_with_minus_inf_logit_matches_torch(backend, smoothing):
    torch = pytest.importorskip("torch")
    x = np.array([[-np.inf, 0.0, 1.0], [1e6, 1e6 + 1, 1e6 - 2]], np.float32)
    t = np.array([1, 0])
    tx = torch.tensor(x, requires_grad=True)
    want = torch.nn.functional.cross_entropy(
        tx, torch.tensor(t), reduction="none", label_smoothing=smoothing
    )
    want.sum().backward()
    with K.use_backend(backend):
        leaf = mt.tensor(x, requires_grad=True)
        got = F.cross_entropy(leaf, mt.tensor(t), reduction="none", label_smoothing=smoothing)
        got.sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(leaf.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
