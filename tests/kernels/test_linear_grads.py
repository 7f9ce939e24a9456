"""A Linear layer's two backward products computed together (kernels.linear_grads): the
input's gradient grad·W and the weight's Σ xᵀ·grad go to one parallel kernel call
(fast_matmul/products.py, gemm_products), each by the same blocks of rows as alone. So the
numbers must be those of the two products computed one after the other, bit for bit, on any
thread count and under deterministic algorithms too; and the numpy twin must agree."""

import itertools

import numpy as np
import pytest

import minitensor as mt
import minitensor.kernels as K
from minitensor.kernels import jit
from minitensor.kernels.fast_matmul import products
from minitensor.ops.linalg import _matrix_grad


def _operands(rows, k, m, weight_transposed, lead, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, k)).astype(dtype)
    grad = rng.standard_normal((rows, m)).astype(dtype)
    if weight_transposed:  # weight.T, as a Linear layer multiplies by it
        wt = np.ascontiguousarray(rng.standard_normal((m, k)).astype(dtype)).T
    else:
        wt = rng.standard_normal((k, m)).astype(dtype)
    if lead:
        x, grad = x.reshape(lead, rows // lead, k), grad.reshape(lead, rows // lead, m)
    return grad, x, wt


def _one_after_the_other(grad, x, wt):
    return K.matmul_grad_a(grad, wt).reshape(x.shape), _matrix_grad(x, grad, wt)


@pytest.fixture
def gemm_wins(monkeypatch):
    """Products timed against np.matmul take gemm, as where it won (the rule is the machine's)."""
    monkeypatch.setattr(
        products, "fastest", lambda a, b, candidate: (candidate, products.gemm_product)
    )
    products._forget_routes()
    yield
    products._forget_routes()


CASES = list(
    itertools.product(
        [(896, 64, 64), (640, 64, 256), (896, 256, 64), (1280, 128, 96)],
        [True, False],  # weight transposed (nn.Linear) or a plain matrix
        [None, 128],  # x as rows, or as a (batch, length, features) stack
    )
)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("sizes, weight_transposed, lead", CASES)
def test_together_gives_the_bits_of_one_after_the_other(
    sizes, weight_transposed, lead, deterministic, gemm_wins, monkeypatch
):
    grad, x, wt = _operands(*sizes, weight_transposed, lead, np.float32)
    monkeypatch.setattr(jit, "threads", lambda: 2)
    monkeypatch.setattr(products, "threads", lambda: 2)
    together = []  # (every case is large enough for gemm: both products go together)
    gemm_products = products.gemm_products
    monkeypatch.setattr(products, "gemm_products", lambda p: together.append(p) or gemm_products(p))
    mt.use_deterministic_algorithms(deterministic)
    try:
        want = _one_after_the_other(grad, x, wt)
        got = K.linear_grads(grad, x, wt)
    finally:
        mt.use_deterministic_algorithms(False)
    assert [len(pairs) for pairs in together] == [1, 1, 2]  # alone, alone, together
    for w, g in zip(want, got):
        assert g.shape == w.shape and g.strides == w.strides and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_gemm_products_give_the_same_bits_on_any_thread_count(count, monkeypatch):
    """The blocks of all the products are dealt among `count` runs; every block is the same
    BLAS call whoever runs it."""
    rng = np.random.default_rng(1)
    pairs = [
        (rng.standard_normal((896, 64)).astype(np.float32), rng.standard_normal((64, 64))),
        (rng.standard_normal((64, 896)).astype(np.float32), rng.standard_normal((896, 256))),
        (rng.standard_normal((300, 40)).astype(np.float32), rng.standard_normal((40, 8))),
    ]
    pairs = [(a, b.astype(np.float32)) for a, b in pairs]
    alone = [products.gemm_product(a, b) for a, b in pairs]
    monkeypatch.setattr(products, "threads", lambda: count)
    for got, want in zip(products.gemm_products(pairs), alone):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight_transposed", [True, False])
def test_linear_grads_match_the_numpy_twin(dtype, weight_transposed, gemm_wins):
    grad, x, wt = _operands(512, 48, 80, weight_transposed, 64, dtype)
    for got, want in zip(K.linear_grads.numba(grad, x, wt), K.linear_grads.numpy(grad, x, wt)):
        assert got.shape == want.shape and got.dtype == want.dtype
        tol = 1e-5 if dtype == np.float32 else 1e-12  # (of the largest entry: sums of 512 terms)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_rows_that_do_not_merge_and_small_products_take_their_own_routes(gemm_wins):
    """x as a transposed stack (its rows are not one matrix without a copy) and products too
    small for gemm: each product by its own route, the same numbers as one after the other."""
    grad, x, wt = _operands(256, 32, 24, True, 16, np.float32)
    x_t = np.swapaxes(np.ascontiguousarray(np.swapaxes(x, 0, 1)), 0, 1)  # same values, strided
    for g_in, x_in in ((grad, x_t), (grad[:4], x[:4])):
        for got, want in zip(K.linear_grads(g_in, x_in, wt), _one_after_the_other(g_in, x_in, wt)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bias", [True, False])
def test_a_linear_layer_backward_uses_them_and_keeps_its_gradients(bias, gemm_wins):
    """nn.Linear's backward through linear_grads (with a bias, its one node; without, x @ Wᵀ's
    matmul node): the same gradients as the numpy backend's."""
    rng = np.random.default_rng(3)
    layer = mt.nn.Linear(64, 96, bias=bias)
    x = mt.tensor(rng.standard_normal((8, 112, 64)).astype(np.float32), requires_grad=True)
    grads = {}
    for backend in ("numba", "numpy"):
        layer.zero_grad()
        x.grad = None
        with K.use_backend(backend):
            (layer(x) ** 2).sum().backward()
        grads[backend] = [x.grad.numpy(), layer.weight.grad.numpy()]
        grads[backend] += [layer.bias.grad.numpy()] if bias else []
    for got, want in zip(grads["numba"], grads["numpy"]):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-3)
