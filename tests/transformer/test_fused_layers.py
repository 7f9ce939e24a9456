"""The Transformer layers' fusions: bias + activation after the FFN's first Linear (one node),
and MultiHeadAttention's Q/K/V projections as one product. Each kernel against its numpy
twin on random and edge shapes (size 0, size 1), each op gradchecked in float64 on both
backends, and each layer against its unfused formula."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import kernels as K
from minitensor.autograd import topological_order
from minitensor.ops.nn import bias_activation

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 1e-5, np.float64: 1e-12}
SHAPES = [(5, 7), (37, 130), (0, 4), (3, 0), (1, 1)]


def assert_agree(got, ref, dtype):
    """Same shape and dtype, max |got − ref| ≤ tol · max |ref|, the same NaN pattern."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype == np.dtype(dtype)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    scale = max(float(np.max(np.abs(ref), initial=0.0)), np.finfo(dtype).tiny)
    err = float(np.nanmax(np.abs(got.astype(np.float64) - ref), initial=0.0))
    assert err <= TOL[dtype] * scale, f"max error {err:.3g} vs scale {scale:.3g}"


@pytest.fixture(params=["numba", "numpy"])
def backend(request):
    with K.use_backend(request.param):
        yield request.param


# ---- bias + activation -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_bias_activation_kernel_matches_twin(activation, shape, dtype, with_bias, rng):
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[::5] = 0.0  # ReLU's kink: gradient 0 there
    bias = rng.standard_normal(shape[1]).astype(dtype) if with_bias else None
    (y, saved), (y_ref, saved_ref) = (
        k(x, bias, activation)
        for k in (K.bias_activation_forward.numba, K.bias_activation_forward.numpy)
    )
    assert_agree(y, y_ref, dtype)
    assert len(saved) == len(saved_ref)
    dy = rng.standard_normal(shape).astype(dtype)
    (dx, db), (dx_ref, db_ref) = (
        k(dy, s, activation, with_bias)
        for k, s in (
            (K.bias_activation_backward.numba, saved),
            (K.bias_activation_backward.numpy, saved_ref),
        )
    )
    assert_agree(dx, dx_ref, dtype)
    if with_bias:
        assert_agree(db, db_ref, dtype)
    else:
        assert db is None and db_ref is None


def test_bias_gelu_float32_kernel_is_accurate_in_the_tails():
    """The float32 kernels' Φ (an erfc fit) against the exact Φ in float64 over [−12, 12]:
    Φ(h) = y/h within 3e-7 everywhere, and within 2e-5 relative in the left tail, where the
    exact-erf formula (1 + erf)/2 in float32 rounds to 0; backward's dy·(Φ(h) + h·φ(h)) within
    1e-6 relative."""
    import math

    h = np.linspace(-12, 12, 4801, dtype=np.float32)[None, :]
    h = h[:, h[0] != 0]
    y, saved = K.bias_activation_forward.numba(h, None, "gelu")
    cdf = y[0].astype(np.float64) / h[0]
    exact = np.array([0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in h[0]])
    assert np.abs(cdf - exact).max() < 3e-7
    tail = exact > 1e-30
    assert (np.abs(cdf - exact)[tail] / exact[tail]).max() < 2e-5
    dx, _ = K.bias_activation_backward.numba(np.ones_like(h), saved, "gelu", False)
    h64 = h[0].astype(np.float64)
    slope = exact + h64 * np.exp(-0.5 * h64 * h64) / math.sqrt(2 * math.pi)
    assert np.abs(dx[0] - slope).max() < 1e-6 * np.abs(slope).max()


def test_bias_relu_kernel_runs_its_parallel_build(monkeypatch, rng):
    from minitensor.kernels import jit

    monkeypatch.setattr(jit, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(jit, "threads", lambda: 2)
    x, b = rng.standard_normal((9, 6)).astype(np.float32), np.ones(6, np.float32)
    dy = rng.standard_normal((9, 6)).astype(np.float32)
    for act in ("relu", "gelu"):
        y, saved = K.bias_activation_forward.numba(x, b, act)
        y_ref, saved_ref = K.bias_activation_forward.numpy(x, b, act)
        assert_agree(y, y_ref, np.float32)
        for got, want in zip(
            K.bias_activation_backward.numba(dy, saved, act),
            K.bias_activation_backward.numpy(dy, saved_ref, act),
        ):
            assert_agree(got, want, np.float32)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_bias_activation_op_gradcheck(backend, activation, leaf):
    x, b = leaf(2, 3, 5), leaf(5)
    assert mt.gradcheck(lambda x, b: bias_activation(x, b, activation), x, b)
    assert mt.gradcheck(lambda x: bias_activation(x, None, activation), x)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_bias_activation_is_the_unfused_formula(backend, activation, rng):
    """Values and gradients equal act(x + b) by two ops, including NaN passing through ReLU
    (selected, as F.relu: a NaN input keeps its gradient) and an empty batch."""
    unfused = {"relu": F.relu, "gelu": F.gelu}[activation]
    for shape in [(4, 3, 6), (0, 6), (1, 1)]:
        data = rng.standard_normal(shape)
        if data.size > 2:
            data.flat[1] = np.nan
        results = []
        for fn in (lambda x, b: bias_activation(x, b, activation), lambda x, b: unfused(x + b)):
            x = mt.tensor(data, requires_grad=True)
            b = mt.tensor(np.linspace(-1, 1, shape[-1]), requires_grad=True)
            y = fn(x, b)
            (y * mt.tensor(np.arange(data.size, dtype=np.float32).reshape(shape))).sum().backward()
            results.append((y.numpy(), x.grad.numpy(), b.grad.numpy()))
        for got, want in zip(*results):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bias_activation_errors_name_the_op_and_shapes():
    x = mt.randn(3, 4)
    with pytest.raises(ValueError, match=r"bias \+ relu.*\(5,\).*\(3, 4\)"):
        bias_activation(x, mt.zeros(5), "relu")
    with pytest.raises(ValueError, match="bias_activation.*relu, gelu.*'tanh'"):
        bias_activation(x, None, "tanh")


@pytest.mark.parametrize("shape", [(5, 7), (64, 33), (0, 4), (3, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_bias_kernel_matches_twin_bit_for_bit_in_place(shape, dtype, rng):
    y = rng.standard_normal(shape).astype(dtype)
    y[0:1, :1] = np.inf  # an inf stays inf, as numpy's add keeps it
    b = rng.standard_normal(shape[1]).astype(dtype)
    got, want = y.copy(), y.copy()
    assert K.add_bias.numba(got, b) is got  # in place, the array itself returned
    K.add_bias.numpy(want, b)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, y + b)


@pytest.mark.parametrize("kernel", [K.add_bias.numba, K.add_bias.numpy])
def test_add_bias_refuses_what_it_cannot_add_into(kernel):
    y = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"add_bias: bias float32 of shape \(5,\).*\(3, 4\)"):
        kernel(y, np.zeros(5, np.float32))
    with pytest.raises(ValueError, match=r"add_bias: bias float64.*in y's dtype"):
        kernel(y, np.zeros(4))
    y.flags.writeable = False
    with pytest.raises(ValueError, match="add_bias: y must be a writeable float"):
        kernel(y, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"add_bias: y must be .* shape \(2, 3, 4\)"):
        kernel(np.zeros((2, 3, 4), np.float32), np.zeros(4, np.float32))


def test_linear_adds_its_bias_into_the_product_for_a_batch_of_any_shape(rng):
    """F.linear's one node (matmul + bias) gives x Wᵀ + b for 1-D, 2-D and 3-D inputs, in
    float32 and float64, on both backends."""
    for backend in ("numba", "numpy"):
        for dtype in (np.float32, np.float64):
            w = mt.tensor(rng.standard_normal((6, 5)).astype(dtype))
            b = mt.tensor(rng.standard_normal(6).astype(dtype))
            for shape in [(5,), (4, 5), (2, 3, 5)]:
                x = mt.tensor(rng.standard_normal(shape).astype(dtype))
                with K.use_backend(backend):
                    y = F.linear(x, w, b)
                want = x.data @ w.data.T + b.data
                assert y.dtype == dtype and y.shape == want.shape
                np.testing.assert_allclose(y.data, want, rtol=1e-5)
    # integers, which the product allows: the bias is added by numpy, not the float kernel
    x, w, b = (mt.tensor(np.arange(n).reshape(s)) for n, s in ((8, (2, 4)), (12, (3, 4)), (3, 3)))
    np.testing.assert_array_equal(F.linear(x, w, b).data, x.data @ w.data.T + b.data)


def test_feed_forward_fuses_bias_and_activation_into_one_named_node():
    """FeedForward with relu/gelu: one "bias + relu" node after linear1's matmul (which stays
    in linear1's scope), the same output and gradients as the unfused Linear → activation."""
    from transformer.layers import FeedForward

    for activation in ("relu", "gelu"):
        mt.manual_seed(0)
        ffn = FeedForward(8, 16, activation=activation)
        x = mt.randn(2, 3, 8, requires_grad=True)
        y = ffn(x)
        names = {(n.name, n.scope) for n in topological_order(y.grad_fn)}
        assert (f"bias + {activation}", "") in names
        assert ("matmul", "linear1") in names
        y.sum().backward()
        x2 = x.detach().reshape(6, 8)
        act = {"relu": F.relu, "gelu": F.gelu}[activation]
        ref = ffn.linear2(act(ffn.linear1(x2))).reshape(2, 3, 8)
        np.testing.assert_allclose(y.data, ref.data, rtol=1e-5, atol=1e-6)
        assert ffn.linear1.bias.grad is not None and ffn.linear1.weight.grad is not None


# ---- embedding's backward ----------------------------------------------------------------------


@pytest.mark.parametrize("ids_shape", [(4, 9), (1,), (0, 3)])
def test_embedding_gradient_sums_repeated_ids_as_add_at(ids_shape, rng):
    """The sorted-sum backward gives what np.add.at gives: repeated ids summed, unused rows
    zero, the padding row zero, an empty batch a zero gradient."""
    table = mt.tensor(rng.standard_normal((6, 5)), dtype=mt.float64, requires_grad=True)
    ids = rng.integers(0, 4, ids_shape)  # rows 4 and 5 never used
    out = F.embedding(ids, table, padding_idx=2)
    weights = rng.standard_normal(out.shape)
    (out * mt.tensor(weights, dtype=mt.float64)).sum().backward()
    want = np.zeros((6, 5))
    np.add.at(want, ids.reshape(-1), weights.reshape(-1, 5))
    want[2] = 0
    np.testing.assert_allclose(table.grad.numpy(), want, rtol=1e-12, atol=1e-12)


# ---- fused attention's mask preparation --------------------------------------------------------


def test_attention_mask_is_recognised_as_causal_only_when_it_blocks_the_future():
    """_implies_causal: a causal | padding bool mask is causal (also with fewer queries than
    keys, the queries being the last ones); one allowed key above the diagonal, a padding mask
    or a single query row are not. A bool mask becomes −inf exactly where it is True."""
    from minitensor.kernels.flash_attention import _implies_causal, additive_mask

    for lq, lk in ((6, 6), (3, 5)):
        q, k = np.zeros((2, 1, lq, 4), np.float32), np.zeros((2, 1, lk, 4), np.float32)
        future = np.arange(lk)[None, :] > np.arange(lq)[:, None] + (lk - lq)
        pad = np.zeros((2, 1, 1, lk), bool)
        pad[1, ..., -1] = True
        mask = future | pad
        add = additive_mask(mask, q, k)
        assert add.dtype == np.float32 and np.array_equal(np.isneginf(add), mask)
        assert not add[~mask].any()
        assert _implies_causal(add, q, k)
        leaky = mask.copy()
        leaky[0, 0, 0, -1] = False  # query 0 may see the last key
        assert not _implies_causal(additive_mask(leaky, q, k), q, k)
        assert not _implies_causal(additive_mask(pad, q, k), q, k)
    one = np.zeros((1, 1, 1, 4), np.float32)
    assert not _implies_causal(np.zeros((1, 1, 1, 4), np.float32), one, one)
