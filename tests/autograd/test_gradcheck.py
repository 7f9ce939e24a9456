"""minitensor/gradcheck.py: gradcheck catches wrong backwards and leaves its inputs as they were."""

import re

import numpy as np
import pytest

import minitensor as mt

gradcheck = mt.gradcheck


# ============================================================================ gradcheck itself


class _WrongSquare(mt.Function):
    """x·y with a deliberately wrong gradient for y at one element."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        gy = grad * x
        gy[1, 2] += 0.5  # the bug
        return grad * y, gy


def test_gradcheck_catches_a_wrong_backward_and_names_input_index_and_values(leaf):
    x, y = leaf(2, 3), leaf(2, 3, name="y")
    with pytest.raises(mt.GradcheckError) as info:
        gradcheck(_WrongSquare.apply, x, y)
    message = str(info.value)
    assert "input 1 (y) of shape (2, 3)" in message
    assert "at index (1, 2)" in message
    analytic, numeric = (
        float(v) for v in re.search(r"analytic (\S+), numeric (\S+) ", message).groups()
    )
    np.testing.assert_allclose(analytic - numeric, 0.5, rtol=1e-4)  # the bug's size
    assert "1 of 6 elements differ" in message


def test_gradcheck_catches_a_missing_chain_rule(leaf):
    class NoChainRule(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, grad):
            return np.full(grad.shape, 3.0)  # forgot to multiply by grad

    with pytest.raises(mt.GradcheckError, match="input 0 of shape"):
        gradcheck(NoChainRule.apply, leaf(4))


def test_gradcheck_restores_inputs_and_their_grads(leaf):
    x = leaf(3, 2)
    before = x.numpy().copy()
    x.grad = mt.tensor(np.ones((3, 2)), dtype=mt.float64)
    assert gradcheck(lambda x: (x.exp(), x.sum(axis=0)), x)  # several outputs are fine
    np.testing.assert_array_equal(x.numpy(), before)
    np.testing.assert_array_equal(x.grad.numpy(), 1)
