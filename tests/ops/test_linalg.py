"""minitensor/ops/linalg.py: matmul forward and gradients, broadcast and transposed operands."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F

gradcheck = mt.gradcheck


def close(t, expected, tol=1e-10):
    np.testing.assert_allclose(t.numpy(), expected, rtol=tol, atol=tol)


# ============================================================================ matmul

MATMUL_SHAPES = [
    ((3,), (3,)),  # dot product → 0-d
    ((3,), (3, 4)),  # vector @ matrix
    ((2, 3), (3,)),  # matrix @ vector
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),  # batch @ matrix
    ((2, 3), (5, 3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (5, 3, 4)),  # batch axes broadcast
    ((3,), (2, 5, 3, 4)),  # 1-D @ N-D
    ((2, 5, 2, 3), (3,)),  # N-D @ 1-D
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_forward_and_gradcheck(shapes, leaf):
    a, b = leaf(*shapes[0]), leaf(*shapes[1])
    out = a @ b
    expected = np.matmul(a.numpy(), b.numpy())
    assert out.shape == expected.shape
    close(out, expected)
    assert gradcheck(lambda a, b: a @ b, a, b)
    assert gradcheck(lambda a, b: F.matmul(a, b), a, b)


def test_matmul_with_transposed_operands(leaf):
    a, b = leaf(3, 2), leaf(4, 3)
    assert gradcheck(lambda a, b: a.T @ b.T, a, b)
    assert gradcheck(lambda a, b: b @ a[:, ::-1], a, b)
    assert gradcheck(lambda a, b: np.ones(4) @ b, a, b)  # reflected, constant on the left


def _heads(x2, batch, length, heads):
    """(B·L, h·d) → (B, h, L, d) views, as attention splits a projection into heads."""
    return x2.reshape(batch, length, heads, -1).swapaxes(1, 2)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("deterministic", [False, True])
def test_a_stacked_gradient_is_laid_out_as_its_input(rng, backend, deterministic):
    """The gradients of q and kᵀ in q @ kᵀ, heads split from (B·L, h·d) projections, come back
    laid out as q and kᵀ are (heads-last), with the values of the C-ordered product, so that
    the views that made them pass them back without a copy; C-ordered and broadcast inputs
    keep C-ordered gradients."""
    B, L, H, D = 3, 5, 2, 4
    q2, k2 = (rng.standard_normal((B * L, H * D)).astype(np.float32) for _ in range(2))
    dout = rng.standard_normal((B, H, L, L)).astype(np.float32)
    mt.use_deterministic_algorithms(deterministic)
    try:
        with mt.kernels.use_backend(backend):
            q, k = (mt.tensor(x, requires_grad=True) for x in (q2, k2))
            qh, kh = _heads(q, B, L, H), _heads(k, B, L, H)
            qh.retain_grad()
            (qh @ kh.swapaxes(-1, -2)).backward(mt.tensor(dout))
    finally:
        mt.use_deterministic_algorithms(False)
    qn, kn = _heads(q2, B, L, H), _heads(k2, B, L, H)
    want_q = np.matmul(dout, kn)
    want_k = np.matmul(np.swapaxes(dout, -1, -2), qn)
    np.testing.assert_allclose(qh.grad.numpy(), want_q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        k.grad.numpy(), want_k.swapaxes(1, 2).reshape(B * L, -1), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        q.grad.numpy(), want_q.swapaxes(1, 2).reshape(B * L, -1), rtol=1e-5, atol=1e-5
    )
    assert np.argsort(qh.grad.numpy().strides).tolist() == np.argsort(qn.strides).tolist()
    # a C-ordered stack and a broadcast one keep C-ordered gradients
    a = mt.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    w = mt.tensor(rng.standard_normal((1, 4, 5)), requires_grad=True)
    (a @ w).sum().backward()
    assert a.grad.numpy().flags.c_contiguous and w.grad.shape == (1, 4, 5)


@pytest.mark.parametrize(
    "a_shape, w_shape", [((2, 3, 0), (0, 4)), ((2, 3, 4), (4, 0)), ((2, 0, 4), (4, 5))]
)
def test_a_linear_product_with_an_empty_axis_runs_backward(a_shape, w_shape):
    a, w = mt.randn(*a_shape, requires_grad=True), mt.randn(*w_shape, requires_grad=True)
    (a @ w).sum().backward()
    assert a.grad.shape == a_shape and w.grad.shape == w_shape
