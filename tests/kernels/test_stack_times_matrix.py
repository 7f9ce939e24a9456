"""A stack of matrices times one matrix (a Linear layer on a (B, T, C) batch) is computed as one
product of the stack's rows when they merge without a copy (kernels/fast_matmul/products.py,
`_product`); the numbers are np.matmul's, written into `out` when one is given."""

import numpy as np
import pytest

import minitensor as mt
from minitensor.kernels.fast_matmul import products as P

RNG = np.random.default_rng(0)


def _stack(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


STACKS = {
    "contiguous": lambda: _stack((3, 5, 16)),
    "4-D": lambda: _stack((2, 3, 5, 16)),
    "every other row": lambda: _stack((2, 3, 4, 16))[:, :, ::2],
    "one row per matrix": lambda: _stack((4, 1, 16)),
    "empty": lambda: _stack((0, 5, 16)),
    "transposed (no merge)": lambda: _stack((5, 3, 16)).transpose(1, 0, 2),
}


@pytest.mark.parametrize("name", list(STACKS))
@pytest.mark.parametrize("transposed_b", [False, True])
def test_a_stack_times_a_matrix_gives_np_matmul_numbers(name, transposed_b):
    a = STACKS[name]()
    b = _stack((8, 16)).T if transposed_b else _stack((16, 8))
    want = np.matmul(a, b)
    got = P.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for out in (np.empty(want.shape, np.float32), np.empty(want.shape[::-1], np.float32).T):
        assert P._product(a, b, out) is out  # written in place, whatever out's layout
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_merged_rows_are_one_product_and_unmergeable_ones_are_not(monkeypatch):
    seen = []
    choose = P._choose
    monkeypatch.setattr(P, "_choose", lambda a, b: seen.append(a.shape) or choose(a, b))
    b = _stack((16, 8))
    P.matmul(STACKS["4-D"](), b)
    assert seen == [(30, 16)]  # 2 · 3 · 5 rows at once
    seen.clear()
    P.matmul(STACKS["transposed (no merge)"](), b)
    assert seen == [(3, 5, 16)]  # the stack as it is
    assert P._as_rows(STACKS["every other row"]()).strides == (128, 4)  # a view, no copy


def test_a_linear_layer_on_a_batch_of_sequences_trains_as_on_its_rows():
    """F.linear on (B, T, C) and on (B·T, C): the same output and gradients."""
    x = mt.randn(4, 6, 16, requires_grad=True)
    w = mt.randn(8, 16, requires_grad=True)
    b = mt.randn(8, requires_grad=True)
    y = mt.nn.functional.linear(x, w, b)
    (y * y).sum().backward()
    grads = [t.grad.numpy().copy() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    y2 = mt.nn.functional.linear(x.reshape(24, 16), w, b)
    (y2 * y2).sum().backward()
    np.testing.assert_allclose(y.numpy().reshape(24, 8), y2.numpy(), rtol=1e-5, atol=1e-5)
    for got, t in zip(grads, (x, w, b)):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-4, atol=1e-4)
