"""Property tests (hypothesis): broadcasting gradients of binary ops, reductions over random
axes, and indexing — on shapes and indices that hypothesis picks.

Kept small (few examples, tiny shapes) so the file runs in seconds.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import minitensor as mt
import minitensor.functional as F

FEW = settings(max_examples=30, deadline=None)


def f64(data, requires_grad=True):
    return mt.tensor(data, dtype=mt.float64, requires_grad=requires_grad)


def away_from_zero(rng, shape):
    """Values in ±[0.5, 2): no kinks, poles or ties nearby."""
    return rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)


# ---------------------------------------------------------------------------- broadcasting

BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": F.maximum,
    "minimum": F.minimum,
}


@FEW
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
    op=st.sampled_from(sorted(BINARY)),
    seed=st.integers(0, 2**16),
)
def test_binary_op_gradients_reduce_to_each_input_shape(shapes, op, seed):
    rng = np.random.default_rng(seed)
    (sa, sb), out_shape = shapes.input_shapes, shapes.result_shape
    a, b = f64(away_from_zero(rng, sa)), f64(away_from_zero(rng, sb))
    fn = BINARY[op]
    out = fn(a, b)
    assert out.shape == out_shape
    w = rng.standard_normal(out_shape)
    (out * f64(w, False)).sum().backward()
    assert a.grad.shape == sa and b.grad.shape == sb
    if op == "add":  # the gradient of a broadcast copy is the sum over the copies
        np.testing.assert_allclose(a.grad.numpy().sum(), w.sum())
        np.testing.assert_allclose(b.grad.numpy().sum(), w.sum())
    assert mt.gradcheck(fn, f64(a.numpy()), f64(b.numpy()))


@FEW
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4),
    seed=st.integers(0, 2**16),
)
def test_unbroadcast_is_the_adjoint_of_broadcasting(shapes, seed):
    # <unbroadcast(g), v> == <g, broadcast(v)> for every g and v
    rng = np.random.default_rng(seed)
    small, out_shape = shapes.input_shapes[0], shapes.result_shape
    g = rng.standard_normal(out_shape)
    v = rng.standard_normal(small)
    reduced = mt.unbroadcast(g, small)
    assert reduced.shape == small
    np.testing.assert_allclose(np.sum(reduced * v), np.sum(g * np.broadcast_to(v, out_shape)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(200, 3), (7, 40, 5), (2, 3, 300, 2), (1000, 1)])
def test_unbroadcast_over_many_rows_is_the_sum(shape, dtype):
    """From _ROWS_FOR_A_PRODUCT rows on, the leading axes are summed as a product with a row of
    ones: the same sum as numpy's (to rounding), a fresh array, and in float64 what gradcheck
    sees in a bias added to a batch."""
    rng = np.random.default_rng(0)
    g = rng.standard_normal(shape).astype(dtype)
    small = shape[-1:]
    reduced = mt.unbroadcast(g, small)
    assert reduced.shape == small and reduced.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    want = g.astype(np.float64).sum(axis=tuple(range(g.ndim - 1)))
    np.testing.assert_allclose(reduced, want, rtol=tol, atol=tol * np.sqrt(g.size))
    assert not np.shares_memory(reduced, g)
    assert mt.gradcheck(lambda x, b: x + b, f64(g), f64(rng.standard_normal(small)))


def test_unbroadcast_keeps_numpy_sum_where_a_product_does_not_apply():
    """Integer, float16 and non-contiguous gradients, and few rows, are summed by numpy as
    before: the same bits."""
    rng = np.random.default_rng(1)
    cases = [
        rng.integers(-5, 5, (300, 4)),
        rng.standard_normal((300, 4)).astype(np.float16),
        rng.standard_normal((4, 300)).astype(np.float32).T,
        rng.standard_normal((5, 4)).astype(np.float32),
    ]
    for g in cases:
        np.testing.assert_array_equal(mt.unbroadcast(g, (4,)), g.sum(axis=0))


# ---------------------------------------------------------------------------- reductions


def _as_axes(axis):
    return (axis,) if isinstance(axis, int) else axis


REDUCTIONS = {
    "sum": (F.sum, np.sum),
    "mean": (F.mean, np.mean),
    # a tuple of axes: numpy's max over them (F.max(x, axis=int) is torch's (values, indices))
    "max": (lambda x, axis, **k: F.max(x, axis=_as_axes(axis), **k), np.max),
    "min": (lambda x, axis, **k: F.min(x, axis=_as_axes(axis), **k), np.min),
    "var": (lambda x, **k: F.var(x, unbiased=False, **k), np.var),
    "logsumexp": (
        F.logsumexp,
        lambda a, axis, keepdims: np.log(np.exp(a).sum(axis=axis, keepdims=keepdims)),
    ),
}


@st.composite
def shape_and_axis(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return shape, None
    axes = draw(
        st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True)
    )
    axes = [a - len(shape) if draw(st.booleans()) else a for a in axes]  # some negative
    return shape, (axes[0] if kind == "int" else tuple(axes))


@FEW
@given(
    case=shape_and_axis(),
    keepdims=st.booleans(),
    op=st.sampled_from(sorted(REDUCTIONS)),
    seed=st.integers(0, 2**16),
)
def test_reductions_over_random_axes(case, keepdims, op, seed):
    shape, axis = case
    fn, ref = REDUCTIONS[op]
    x = f64(np.random.default_rng(seed).standard_normal(shape))
    out = fn(x, axis=axis, keepdims=keepdims)
    expected = ref(x.numpy(), axis=axis, keepdims=keepdims)
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)
    assert mt.gradcheck(lambda x: fn(x, axis=axis, keepdims=keepdims), x)


@FEW
@given(case=shape_and_axis(), seed=st.integers(0, 2**16))
def test_max_gradient_sums_to_one_per_reduced_slice_even_with_ties(case, seed):
    shape, axis = case
    # few distinct values, so ties are common
    x = f64(np.random.default_rng(seed).integers(0, 3, size=shape).astype(float))
    # max(x, int) is torch's (values, indices), whose gradient goes to the index: a tuple of
    # axes (amax's meaning) is the reduction that splits ties
    x.max(axis=_as_axes(axis)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy().sum(axis=axis), 1.0)
    assert (x.grad.numpy()[x.numpy() < x.numpy().max(axis=axis, keepdims=True)] == 0).all()


# ---------------------------------------------------------------------------- indexing


@st.composite
def basic_index(draw, shape):
    """A random tuple of ints, slices, None and at most one Ellipsis valid for `shape`."""
    items = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "slice", "full"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            start = draw(st.one_of(st.none(), st.integers(-n, n)))
            stop = draw(st.one_of(st.none(), st.integers(-n, n)))
            step = draw(st.sampled_from([None, 1, 2, -1, -2]))
            items.append(slice(start, stop, step))
        else:
            items.append(slice(None))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    if draw(st.booleans()) and items:  # replace a trailing run of full slices by ...
        cut = draw(st.integers(0, len(items)))
        items = items[:cut] + [Ellipsis]
    return tuple(items)


def scatter_reference(shape, index, w):
    """The gradient of x[index] against weights w, computed without add.at: each element of x
    receives the sum of w over the output positions that read it."""
    positions = np.arange(int(np.prod(shape))).reshape(shape)
    picked = positions[index]
    return np.bincount(
        picked.reshape(-1), weights=np.asarray(w).reshape(-1), minlength=positions.size
    ).reshape(shape)


@st.composite
def shape_and_index(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    kind = draw(st.sampled_from(["basic", "int array", "bool mask", "mixed"]))
    if kind == "basic":
        return shape, draw(basic_index(shape))
    if kind == "int array":  # repeated indices are likely
        ids = draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=6))
        return shape, np.array(ids)
    if kind == "bool mask":
        bits = draw(
            st.lists(st.booleans(), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))
        )
        return shape, np.array(bits).reshape(shape)
    ids = draw(st.lists(st.integers(0, shape[-1] - 1), min_size=1, max_size=5))
    return shape, (Ellipsis, np.array(ids))


@FEW
@given(case=shape_and_index(), seed=st.integers(0, 2**16))
def test_indexing_forward_and_scatter_add_backward(case, seed):
    shape, index = case
    rng = np.random.default_rng(seed)
    x = f64(rng.standard_normal(shape))
    out = x[index]
    expected = x.numpy()[index]
    np.testing.assert_array_equal(out.numpy(), expected)
    w = rng.standard_normal(expected.shape)
    (out * f64(w, False)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), scatter_reference(shape, index, w))


@FEW
@given(case=shape_and_index(), seed=st.integers(0, 2**16))
def test_indexing_a_transposed_view(case, seed):
    shape, index = case
    x = f64(np.random.default_rng(seed).standard_normal(shape[::-1]))  # x.T has `shape`
    np.testing.assert_array_equal(x.T[index].numpy(), x.numpy().T[index])
    assert mt.gradcheck(lambda x: x.T[index], x)


# ---------------------------------------------------------------------------- matmul


@st.composite
def matmul_shapes(draw):
    """Two shapes that numpy's matmul accepts: 1-D to 4-D, batch axes broadcasting."""
    n, k, m = (draw(st.integers(1, 3)) for _ in range(3))
    batch = draw(mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=2))
    ba, bb = batch.input_shapes
    a = (k,) if draw(st.booleans()) and not ba else ba + (n, k)
    b = (k,) if draw(st.booleans()) and not bb else bb + (k, m)
    return a, b


@FEW
@given(shapes=matmul_shapes(), seed=st.integers(0, 2**16))
def test_matmul_on_random_shapes(shapes, seed):
    rng = np.random.default_rng(seed)
    a, b = f64(rng.standard_normal(shapes[0])), f64(rng.standard_normal(shapes[1]))
    expected = np.matmul(a.numpy(), b.numpy())
    out = a @ b
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)
    assert mt.gradcheck(lambda a, b: a @ b, a, b)
