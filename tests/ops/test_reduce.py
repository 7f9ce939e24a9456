"""minitensor/ops/reduce.py: reductions forward against numpy and gradients by gradcheck."""

import math

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F

gradcheck = mt.gradcheck


def close(t, expected, tol=1e-10):
    np.testing.assert_allclose(t.numpy(), expected, rtol=tol, atol=tol)


# ============================================================================ reductions


def _axes(axis):
    return (axis,) if isinstance(axis, int) else axis


REDUCTIONS = {
    "sum": (lambda x, **k: x.sum(**k), np.sum),
    "mean": (lambda x, **k: x.mean(**k), np.mean),
    # numpy's max over a tuple of axes (x.max(axis=int) is torch's (values, indices))
    "max": (lambda x, axis, **k: x.max(axis=_axes(axis), **k), np.max),
    "min": (lambda x, axis, **k: x.min(axis=_axes(axis), **k), np.min),
    "var": (lambda x, **k: x.var(**k), lambda a, **k: np.var(a, ddof=1, **k)),
    "var_biased": (lambda x, **k: x.var(unbiased=False, **k), np.var),
    "std": (lambda x, **k: x.std(**k), lambda a, **k: np.std(a, ddof=1, **k)),
    "std_biased": (lambda x, **k: F.std(x, unbiased=False, **k), np.std),
    "logsumexp": (
        lambda x, **k: x.logsumexp(**k),
        lambda a, axis=None, keepdims=False: np.log(
            np.sum(np.exp(a), axis=axis, keepdims=keepdims)
        ),
    ),
}


AXES = [None, 0, -1, 1, (0, 2), (-1, -3), ()]


# (the variance over no axes at all is undefined: those pairs are left out)
REDUCTION_CASES = [
    (name, axis)
    for name in REDUCTIONS
    for axis in AXES
    if not (axis == () and name.startswith(("var", "std")))
]


@pytest.mark.parametrize("name, axis", REDUCTION_CASES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_forward_and_gradcheck(name, axis, keepdims, leaf):
    fn, ref = REDUCTIONS[name]
    x = leaf(2, 3, 4)
    out = fn(x, axis=axis, keepdims=keepdims)
    expected = ref(x.numpy(), axis=axis, keepdims=keepdims)
    assert out.shape == np.shape(expected)
    close(out, expected)
    assert gradcheck(lambda x: fn(x, axis=axis, keepdims=keepdims), x)
    assert gradcheck(lambda x: fn(x.permute(2, 0, 1), axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_split_the_gradient_evenly_between_ties(name):
    x = mt.tensor([[1.0, 3.0, 3.0, 3.0], [2.0, 0.0, 0.0, 2.0]], requires_grad=True)
    out = getattr(x, name)(axis=(1,))  # a tuple: amax's reduction (max(x, 1) is torch's)
    out.backward(mt.tensor([3.0, 2.0]))
    if name == "max":
        np.testing.assert_allclose(x.grad.numpy(), [[0, 1, 1, 1], [1, 0, 0, 1]])
    else:
        np.testing.assert_allclose(x.grad.numpy(), [[3, 0, 0, 0], [0, 1, 1, 0]])


def test_logsumexp_is_stable():
    x = mt.tensor([1000.0, 1000.0, -1000.0], dtype=mt.float64, requires_grad=True)
    out = x.logsumexp()
    np.testing.assert_allclose(out.item(), 1000 + math.log(2))
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.5, 0.5, 0])


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_argmax_argmin(fn, axis, leaf):
    x = leaf(3, 5)
    out = getattr(x, fn)(axis=axis)
    np.testing.assert_array_equal(out.numpy(), getattr(np, fn)(x.numpy(), axis=axis))
    assert out.dtype.kind == "i" and not out.requires_grad
    assert getattr(x, fn)(axis=1, keepdims=True).shape == (3, 1)


def test_reductions_of_a_scalar(leaf):
    x = mt.tensor(2.0, dtype=mt.float64, requires_grad=True)
    for fn in (F.sum, F.mean, F.max, F.logsumexp):
        assert fn(x).shape == ()
        assert gradcheck(fn, x)


def test_std_of_equal_elements_has_zero_gradient_not_nan():
    x = mt.tensor([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]], dtype=mt.float64, requires_grad=True)
    x.std(axis=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0], 0)
    xc = x.numpy()[1] - x.numpy()[1].mean()
    np.testing.assert_allclose(x.grad.numpy()[1], xc / ((3 - 1) * np.std(x.numpy()[1], ddof=1)))
