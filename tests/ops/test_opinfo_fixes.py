"""Cases the OpInfo walk (tests/opinfo_harness.py) found minitensor getting wrong or refusing,
each compared with torch after its fix: pooling with ceil_mode=True, hinge_embedding_loss with
targets other than ±1, margin_ranking_loss's gradient at the hinge, float linspace's rounding,
and scaled_dot_product_attention broadcasting its batch axes."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.nn.functional as F
from minitensor.gradcheck import gradcheck

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
TF = torch.nn.functional


def _both(x):
    return mt.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)


# (length, kernel, stride, padding): the last window hangs past the input (ceil_mode), and
# (7, 2, 3, 1) is torch's drop rule: a window starting in the right padding is left out
CEIL_CASES = [(5, 2, 2, 0), (7, 3, 2, 1), (8, 3, 3, 1), (6, 4, 3, 2), (7, 2, 3, 1), (4, 3, 2, 0)]


@pytest.mark.parametrize("length, kernel, stride, padding", CEIL_CASES)
@pytest.mark.parametrize("n", [1, 2])
def test_max_pool_ceil_mode_matches_torch(length, kernel, stride, padding, n):
    x = np.random.default_rng(0).standard_normal((2, 3, length, length + 1)[: n + 2])
    ours, theirs = _both(x)
    name = f"max_pool{n}d"
    got = getattr(F, name)(ours, kernel, stride, padding, ceil_mode=True)
    want = getattr(TF, name)(theirs, kernel, stride, padding, ceil_mode=True)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy())
    up = np.random.default_rng(1).standard_normal(got.shape)
    got.backward(mt.tensor(up))
    want.backward(torch.tensor(up))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy())
    fn = getattr(F, name)
    assert gradcheck(lambda t: fn(t, kernel, stride, padding, ceil_mode=True), ours)


@pytest.mark.parametrize("length, kernel, stride, padding", CEIL_CASES)
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_ceil_mode_matches_torch(length, kernel, stride, padding, n, count_include_pad):
    x = np.random.default_rng(2).standard_normal((2, 3, length, length + 1)[: n + 2])
    ours, theirs = _both(x)
    name = f"avg_pool{n}d"
    kw = dict(ceil_mode=True, count_include_pad=count_include_pad)
    got = getattr(F, name)(ours, kernel, stride, padding, **kw)
    want = getattr(TF, name)(theirs, kernel, stride, padding, **kw)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy())
    up = np.random.default_rng(3).standard_normal(got.shape)
    got.backward(mt.tensor(up))
    want.backward(torch.tensor(up))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy())
    fn = getattr(F, name)
    assert gradcheck(lambda t: fn(t, kernel, stride, padding, **kw), ours)


def test_hinge_embedding_loss_with_targets_other_than_plus_minus_one():
    x = np.array([0.3, -0.5, 2.0, 0.7, -1.5])
    target = np.array([1.0, -1.0, 0.0, 2.0, 0.5])  # torch: neither ±1 gets both parts
    for reduction in ("none", "sum"):
        got = F.hinge_embedding_loss(mt.tensor(x), mt.tensor(target), reduction=reduction)
        want = TF.hinge_embedding_loss(torch.tensor(x), torch.tensor(target), reduction=reduction)
        np.testing.assert_allclose(got.numpy(), want.numpy())
    ours, _ = _both(x)
    assert gradcheck(lambda t: F.hinge_embedding_loss(t, mt.tensor(target), reduction="sum"), ours)


def test_margin_ranking_loss_gradient_at_the_hinge():
    a, b = np.array([1.0, 2.0, 0.5]), np.array([0.0, 2.0, 1.5])
    target = np.array([1.0, 1.0, -1.0])  # the middle pair sits exactly on the hinge (0)
    (oa, ta), (ob, tb) = _both(a), _both(b)
    F.margin_ranking_loss(oa, ob, mt.tensor(target), reduction="sum").backward()
    TF.margin_ranking_loss(ta, tb, torch.tensor(target), reduction="sum").backward()
    np.testing.assert_array_equal(oa.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(ob.grad.numpy(), tb.grad.numpy())
    assert oa.grad.numpy()[1] == -1.0  # torch's clamp_min passes the gradient at 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("start, end, steps", [(4.3, -3, 11), (0, 7, 9), (4.3, 50, 15), (1, 1, 1)])
def test_float_linspace_rounds_as_torch(dtype, start, end, steps):
    got = mt.linspace(start, end, steps, dtype=dtype)
    want = torch.linspace(start, end, steps, dtype=getattr(torch, dtype))
    assert got.dtype == np.dtype(dtype)
    # within an ulp or two: torch's vectorised loop may fuse a·b + c
    rtol = 3e-16 if dtype == "float64" else 3e-7
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=0)


def test_linspace_refuses_negative_steps_as_torch():
    with pytest.raises(RuntimeError):
        torch.linspace(0, 1, -1)
    with pytest.raises(ValueError):
        mt.linspace(0, 1, -1)


def test_sdpa_broadcasts_batch_axes_as_torch():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal(s) for s in [(3, 4, 5), (2, 3, 6, 5), (1, 3, 6, 7)])
    ours = [mt.tensor(a, requires_grad=True) for a in (q, k, v)]
    got = F.scaled_dot_product_attention(*ours)
    want = TF.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)))
    assert got.shape == tuple(want.shape) == (2, 3, 4, 7)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    assert gradcheck(F.scaled_dot_product_attention, *ours)


@pytest.mark.parametrize("n", [1, 2])
def test_integer_pooling_stays_integer_as_torch(n):
    x = np.random.default_rng(5).integers(-9, 9, (2, 3, 7, 6)[: n + 2])
    for name, kw in [("avg_pool", {}), ("avg_pool", {"count_include_pad": False})]:
        got = getattr(F, f"{name}{n}d")(mt.tensor(x), 3, 2, 1, **kw)
        want = getattr(TF, f"{name}{n}d")(torch.tensor(x), 3, 2, 1, **kw)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())  # truncated toward 0
    # torch's max_pool1d takes integers only when asked for the indices too
    kw = {"return_indices": True} if n == 1 else {}
    got = getattr(F, f"max_pool{n}d")(mt.tensor(x), 3, 2, 1, **kw)
    want = getattr(TF, f"max_pool{n}d")(torch.tensor(x), 3, 2, 1, **kw)
    got, want = (got, want) if n == 1 else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_integer_max_pool1d_refused_without_indices_as_torch():
    x = np.arange(10).reshape(1, 1, 10)
    with pytest.raises(NotImplementedError):
        TF.max_pool1d(torch.tensor(x), 3)
    with pytest.raises(TypeError, match="max_pool1d"):
        F.max_pool1d(mt.tensor(x), 3)


@pytest.mark.parametrize("n", [1, 2])
def test_integer_convolution_as_torch(n):
    rng = np.random.default_rng(6)
    x, w = rng.integers(-5, 5, (2, 3, 6, 5)[: n + 2]), rng.integers(-3, 3, (4, 3, 3, 2)[: n + 2])
    b = rng.integers(-3, 3, 4)
    name = f"conv{n}d"
    got = getattr(F, name)(mt.tensor(x), mt.tensor(w), mt.tensor(b), padding=1)
    want = getattr(TF, name)(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(RuntimeError):  # torch refuses integers mixed with floats; so do we
        getattr(TF, name)(torch.tensor(x), torch.tensor(w), torch.tensor(b, dtype=torch.float64))
    with pytest.raises(TypeError, match=name):
        getattr(F, name)(mt.tensor(x), mt.tensor(w), mt.tensor(b, dtype="float64"))


def test_pool_arguments_of_one_element_and_empty_stride_as_torch():
    x = np.random.default_rng(7).standard_normal((1, 2, 7, 7))
    got = F.avg_pool2d(mt.tensor(x), (3,), stride=(), padding=(1,))
    want = TF.avg_pool2d(torch.tensor(x), (3,), stride=(), padding=(1,))
    np.testing.assert_allclose(got.numpy(), want.numpy())


SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-300])


def _grads_at_special_values(ours_fn, torch_fn):
    """Both gradients of fn(SPECIAL).sum(); each element on its own for torch (its scalar loop:
    torch's vectorised loop gives another answer at NaN for some of these ops)."""
    ours = mt.tensor(SPECIAL, requires_grad=True)
    with np.errstate(all="ignore"):
        ours_fn(ours).sum().backward()
    theirs = [torch.tensor([v], requires_grad=True) for v in SPECIAL]
    for t in theirs:
        torch_fn(t).sum().backward()
    return ours.grad.numpy(), np.array([t.grad.item() for t in theirs])


@pytest.mark.parametrize(
    "name", ["elu", "celu", "selu", "hardtanh", "relu6", "hardshrink", "softshrink"]
)
def test_activation_gradients_at_nan_and_inf_as_torch(name):
    got, want = _grads_at_special_values(getattr(F, name), getattr(TF, name))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("eps", [None, 0.1])
def test_logit_gradient_outside_and_at_the_edges_as_torch(eps):
    got, want = _grads_at_special_values(
        lambda t: mt.logit(t, eps=eps), lambda t: torch.logit(t, eps=eps)
    )
    np.testing.assert_array_equal(got, want)
    x = mt.tensor([0.2, 0.5, 0.7], dtype="float64", requires_grad=True)
    assert gradcheck(lambda t: mt.logit(t, eps=eps), x)


def test_sinc_gradient_at_zero_as_torch():
    got, want = _grads_at_special_values(mt.sinc, torch.sinc)
    np.testing.assert_array_equal(got, want)
    assert gradcheck(mt.sinc, mt.tensor([0.3, -1.2, 2.5], dtype="float64", requires_grad=True))


def test_copysign_and_atan2_gradients_at_zero_and_inf_as_torch():
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    for name in ("copysign", "atan2"):
        oa, ta = _both(a.ravel())
        ob, tb = _both(b.ravel())
        with np.errstate(all="ignore"):
            getattr(mt, name)(oa, ob).sum().backward()
        getattr(torch, name)(ta, tb).sum().backward()
        np.testing.assert_array_equal(oa.grad.numpy(), ta.grad.numpy())
        if name == "atan2":
            np.testing.assert_array_equal(ob.grad.numpy(), tb.grad.numpy())
    x, y = (mt.tensor(v, dtype="float64", requires_grad=True) for v in ([0.3, -1.2], [1.1, -0.7]))
    assert gradcheck(mt.copysign, x, y.detach())
    assert gradcheck(mt.atan2, x, y)


@pytest.mark.parametrize("x", [-3.0, 2.0])
@pytest.mark.parametrize("weight", [[0.25], 0.25])
def test_prelu_of_a_0d_input_stays_0d_as_torch(x, weight):
    ox, tx = _both(np.array(x))
    ow, tw = _both(np.array(weight))
    got, want = F.prelu(ox, ow), TF.prelu(tx, tw)
    assert got.shape == tuple(want.shape) == ()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy())
    got.backward()
    want.backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(ow.grad.numpy(), tw.grad.numpy())
    assert gradcheck(F.prelu, ox, ow)


def test_prelu_refuses_what_torch_refuses():
    for x, w in [(np.array(-3.0), np.array([0.25, 0.5])), (np.ones(3), np.ones((1, 1)))]:
        with pytest.raises(RuntimeError):
            TF.prelu(torch.tensor(x), torch.tensor(w))
        with pytest.raises(ValueError, match="prelu"):
            F.prelu(mt.tensor(x), mt.tensor(w))


@pytest.mark.parametrize("value", [2.0, 0.0, np.nan])
def test_nonzero_of_a_0d_tensor_as_torch(value):
    got, want = mt.nonzero(mt.tensor(value)), torch.nonzero(torch.tensor(value))
    assert got.shape == tuple(want.shape) and got.dtype == np.int64
    (got_t,), (want_t,) = (
        mt.nonzero(mt.tensor(value), as_tuple=True),
        torch.nonzero(torch.tensor(value), as_tuple=True),
    )
    np.testing.assert_array_equal(got_t.numpy(), want_t.numpy())


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_family_of_a_0d_tensor_as_torch(name, axis):
    """torch reads a 0-d tensor as one entry along axis 0 (or -1): softmax 1, log_softmax 0,
    and a zero gradient; any other axis is out of range."""
    ours, theirs = _both(np.float64(1.5))
    got, want = getattr(F, name)(ours, axis), getattr(TF, name)(theirs, axis)
    assert got.shape == () and float(got) == float(want)
    got.backward()
    want.backward()
    assert float(ours.grad) == float(theirs.grad)
    assert gradcheck(
        lambda t: getattr(F, name)(t, axis), mt.tensor(0.3, requires_grad=True, dtype="float64")
    )
    op = "softmax" if name == "softmin" else name  # softmin is softmax(−x): its error says so
    with pytest.raises(IndexError, match=f"{op}: axis 1 is out of range .* shape \\(\\)"):
        getattr(F, name)(ours, 1)
