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


@pytest.mark.parametrize(
    "a_shape, w_shape", [((2, 3, 0), (0, 4)), ((2, 3, 4), (4, 0)), ((2, 0, 4), (4, 5))]
)
def test_a_linear_product_with_an_empty_axis_runs_backward(a_shape, w_shape):
    a, w = mt.randn(*a_shape, requires_grad=True), mt.randn(*w_shape, requires_grad=True)
    (a @ w).sum().backward()
    assert a.grad.shape == a_shape and w.grad.shape == w_shape
