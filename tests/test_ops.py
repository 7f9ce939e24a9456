"""Every op: forward against numpy, and gradients against finite differences (mt.gradcheck,
float64) — with broadcasting, keepdims, negative axes and non-contiguous (transposed) inputs.

Non-contiguous inputs are made *inside* the checked function (gradcheck perturbs contiguous
leaves in place), e.g. ``gradcheck(lambda x: op(x.T), x)``.
"""

import math
import re

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F

gradcheck = mt.gradcheck
_erf = np.vectorize(math.erf)


def close(t, expected, tol=1e-10):
    np.testing.assert_allclose(t.numpy(), expected, rtol=tol, atol=tol)


# ============================================================================ elementwise unary

UNARY = {
    # name: (minitensor fn, numpy reference, needs a positive domain)
    "neg": (lambda x: -x, np.negative, False),
    "exp": (lambda x: x.exp(), np.exp, False),
    "log": (lambda x: x.log(), np.log, True),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, True),
    "abs": (lambda x: abs(x), np.abs, False),
    "tanh": (lambda x: x.tanh(), np.tanh, False),
    "sigmoid": (lambda x: x.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), False),
    "relu": (lambda x: x.relu(), lambda a: np.maximum(a, 0), False),
    "gelu": (lambda x: F.gelu(x), lambda a: 0.5 * a * (1 + _erf(a / math.sqrt(2))), False),
    "gelu_tanh": (
        lambda x: F.gelu(x, approximate="tanh"),
        lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))),
        False,
    ),
    "silu": (lambda x: x.silu(), lambda a: a / (1 + np.exp(-a)), False),
    "clip": (lambda x: x.clip(-0.7, 0.9), lambda a: np.clip(a, -0.7, 0.9), False),
    "clip_low_only": (lambda x: F.clip(x, low=0.1), lambda a: np.clip(a, 0.1, None), False),
    "square": (lambda x: x**2, np.square, False),
    "pow_frac": (lambda x: x**1.5, lambda a: a**1.5, True),
    "rpow": (lambda x: 2.0**x, lambda a: 2.0**a, False),
    "rsub": (lambda x: 3.0 - x, lambda a: 3.0 - a, False),
    "rdiv": (lambda x: 3.0 / x, lambda a: 3.0 / a, False),
    "radd_rmul": (lambda x: 2 * x + 1, lambda a: 2 * a + 1, False),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_forward_matches_numpy(name, leaf):
    fn, ref, positive = UNARY[name]
    x = leaf(3, 4, positive=positive)
    close(fn(x), ref(x.numpy()))


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradcheck(name, leaf):
    fn, _, positive = UNARY[name]
    x = leaf(2, 3, 4, positive=positive)
    if name.startswith("clip"):  # keep away from the clip bounds, where the slope jumps
        x.numpy()[np.abs(x.numpy() - 0.9) < 0.05] += 0.1
        x.numpy()[np.abs(x.numpy() + 0.7) < 0.05] -= 0.1
        x.numpy()[np.abs(x.numpy() - 0.1) < 0.05] += 0.1
    assert gradcheck(fn, x)
    assert gradcheck(lambda x: fn(x.T), x)  # non-contiguous input
    assert gradcheck(lambda x: fn(x.swapaxes(0, 1)[:, ::2]), x)


def test_gelu_variants_differ_slightly_and_unknown_variant_fails(leaf):
    x = leaf(50)
    exact, approx = F.gelu(x), F.gelu(x, approximate="tanh")
    assert 0 < np.abs(exact.numpy() - approx.numpy()).max() < 1e-2
    with pytest.raises(ValueError, match="gelu"):
        F.gelu(x, approximate="fast")


def test_sigmoid_is_stable_for_large_inputs():
    x = mt.tensor([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    y = x.sigmoid()
    assert np.isfinite(y.numpy()).all()
    np.testing.assert_allclose(y.numpy(), [0, 1.9287e-22, 0.5, 1, 1], rtol=1e-3)


def test_clip_gradient_is_zero_outside_and_one_inside():
    x = mt.tensor([-2.0, -0.5, 0.0, 0.5, 2.0], requires_grad=True)
    x.clip(-1, 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 1, 1, 1, 0])


# ============================================================================ elementwise binary

BINARY = {
    "add": (lambda a, b: a + b, np.add, False),
    "sub": (lambda a, b: a - b, np.subtract, False),
    "mul": (lambda a, b: a * b, np.multiply, False),
    "div": (lambda a, b: a / b, np.divide, False),
    "pow": (lambda a, b: a**b, np.power, True),
    "maximum": (lambda a, b: F.maximum(a, b), np.maximum, False),
    "minimum": (lambda a, b: a.minimum(b), np.minimum, False),
}

BROADCAST_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((4,), (3, 4)),
    ((2, 1, 4), (3, 1)),
    ((), (2, 3)),
    ((2, 3), (1, 1)),
]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
def test_binary_forward_and_gradcheck_with_broadcasting(name, shapes, leaf):
    fn, ref, positive = BINARY[name]
    a, b = leaf(*shapes[0], positive=positive), leaf(*shapes[1], positive=positive)
    out = fn(a, b)
    assert out.shape == np.broadcast_shapes(*shapes)
    close(out, ref(a.numpy(), b.numpy()))
    assert gradcheck(fn, a, b)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradcheck_on_transposed_inputs(name, leaf):
    fn, _, positive = BINARY[name]
    a, b = leaf(4, 3, positive=positive), leaf(3, 4, positive=positive)
    assert gradcheck(lambda a, b: fn(a.T, b), a, b)
    assert gradcheck(lambda a, b: fn(b, a.T[:, :1]), a, b)  # transposed and broadcast


def test_scalar_and_reflected_operators(leaf):
    x = leaf(3)
    d = x.numpy()
    for got, want in [
        (x + 2, d + 2),
        (2 + x, 2 + d),
        (x - 2, d - 2),
        (2 - x, 2 - d),
        (x * 3, d * 3),
        (3 * x, 3 * d),
        (x / 4, d / 4),
        (4 / x, 4 / d),
        (x**3, d**3),
        (2**x, 2**d),
        (np.float64(2.0) * x, 2 * d),
        (np.ones(3) + x, 1 + d),
    ]:
        assert isinstance(got, mt.Tensor)
        close(got, want)


def test_tensor_exponent_gradient_reaches_both_operands(leaf):
    a, b = leaf(3, positive=True), leaf(3)
    (a**b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.numpy() * a.numpy() ** (b.numpy() - 1))
    np.testing.assert_allclose(b.grad.numpy(), a.numpy() ** b.numpy() * np.log(a.numpy()))


@pytest.mark.parametrize("op", [F.maximum, F.minimum])
def test_maximum_minimum_split_ties_evenly(op):
    a = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = mt.tensor([1.0, 5.0, 0.0], requires_grad=True)
    op(a, b).sum().backward()
    assert a.grad.numpy()[0] == 0.5 and b.grad.numpy()[0] == 0.5
    np.testing.assert_array_equal(a.grad.numpy() + b.grad.numpy(), [1, 1, 1])


# ============================================================================ comparisons, logic


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_comparisons_return_bool_without_grad(op, leaf):
    a, b = leaf(3, 4), leaf(4)
    b.numpy()[0] = a.numpy()[0, 0]  # one tie, so == and != see both answers
    out = eval(f"a {op} b")
    assert out.dtype == np.bool_ and not out.requires_grad and out.grad_fn is None
    np.testing.assert_array_equal(out.numpy(), eval(f"a.numpy() {op} b.numpy()"))
    np.testing.assert_array_equal((a < 0.0).numpy(), a.numpy() < 0)


def test_logical_ops():
    p = mt.tensor([True, True, False, False])
    q = mt.tensor([True, False, True, False])
    np.testing.assert_array_equal((p & q).numpy(), [True, False, False, False])
    np.testing.assert_array_equal((p | q).numpy(), [True, True, True, False])
    np.testing.assert_array_equal((p ^ q).numpy(), [False, True, True, False])
    np.testing.assert_array_equal((~p).numpy(), [False, False, True, True])
    assert (p & q).dtype == np.bool_
    assert bool(F.any(p)) and not bool(F.all(p))


# ============================================================================ float32 defaults


def test_float32_defaults():
    assert mt.tensor(1.5).dtype == mt.float32
    assert mt.tensor([1.0, 2.0]).dtype == mt.float32
    assert mt.tensor(np.zeros(3)).dtype == mt.float64  # a numpy array keeps its dtype (torch's)
    assert mt.Tensor(np.zeros(3)).dtype == mt.float32  # the legacy constructor: float32
    assert mt.tensor(np.zeros(3), dtype=mt.float64).dtype == mt.float64
    assert mt.tensor([1, 2]).dtype == mt.int64
    assert mt.tensor([True]).dtype == mt.bool_
    for make in (mt.zeros, mt.ones, mt.randn, mt.rand):
        assert make(2, 3).dtype == mt.float32
        assert make(2, 3, dtype=mt.float64).dtype == mt.float64
    assert mt.full((2,), 1.5).dtype == mt.float32
    assert mt.arange(0.0, 1.0, 0.25).dtype == mt.float32
    assert mt.eye(3).dtype == mt.float32


def test_float32_is_kept_through_ops():
    x = mt.randn(2, 3)
    ids = mt.tensor([1, 2, 3])
    for y in (
        x * 2.0,
        x * 2,
        2.0 * x,
        x / 3,
        3 / x,
        x**2,
        x + np.float64(1.0),
        x + np.ones(3),
        x * ids,
        ids * x,
        x + (ids > 1),
        x.mean(),
        x.var(),
        x.std(),
        F.softmax(x),
        F.log_softmax(x),
        F.gelu(x),
        x.sigmoid(),
        F.maximum(x, 0.0),
        mt.tensor([1, 2]) / 2,
        x @ mt.randn(3, 2),
    ):
        assert y.dtype == mt.float32, y
    assert (mt.randn(3, dtype=mt.float64) * 2.0).dtype == mt.float64


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


# ============================================================================ shape ops


def test_reshape_view_flatten(leaf):
    x = leaf(2, 3, 4)
    assert x.reshape(6, 4).shape == (6, 4)
    assert x.reshape((4, -1)).shape == (4, 6)
    assert x.view(-1).shape == (24,)
    assert x.flatten().shape == (24,)
    assert x.flatten(1).shape == (2, 12)
    assert x.flatten(0, -2).shape == (6, 4)
    close(x.reshape(4, 6), x.numpy().reshape(4, 6))
    assert gradcheck(lambda x: x.reshape(4, 6) * mt.arange(6.0, dtype=mt.float64), x)
    assert gradcheck(lambda x: x.T.reshape(-1, 2), x)  # reshape of a transpose copies
    assert gradcheck(lambda x: x.flatten(1, 2), x)


def test_transpose_permute_swapaxes_T_mT(leaf):
    x = leaf(2, 3, 4)
    close(x.T, x.numpy().T)
    close(x.mT, np.swapaxes(x.numpy(), -1, -2))
    close(x.transpose(), x.numpy().T)
    close(x.transpose(0, 2), np.swapaxes(x.numpy(), 0, 2))
    close(x.permute(2, 0, 1), np.transpose(x.numpy(), (2, 0, 1)))
    close(x.permute((1, -1, 0)), np.transpose(x.numpy(), (1, 2, 0)))
    close(x.swapaxes(-1, 0), np.swapaxes(x.numpy(), -1, 0))
    w = mt.tensor(np.arange(24.0).reshape(4, 3, 2), dtype=mt.float64)
    for fn in (
        lambda x: x.T,
        lambda x: x.permute(2, 0, 1),
        lambda x: x.swapaxes(0, -2),
        lambda x: x.transpose(1, 2).permute(1, 0, 2),
    ):
        assert gradcheck(lambda x, fn=fn: fn(x) * fn(w.permute(2, 1, 0)), x)


def test_expand_and_broadcast_to(leaf):
    x = leaf(3, 1)
    e = x.expand(2, 3, 4)
    close(e, np.broadcast_to(x.numpy(), (2, 3, 4)))
    assert x.expand(-1, 5).shape == (3, 5)
    assert x.broadcast_to((4, 3, 2)).shape == (4, 3, 2)
    w = mt.tensor(np.arange(24.0).reshape(2, 3, 4), dtype=mt.float64)
    assert gradcheck(lambda x: x.expand(2, 3, 4) * w, x)
    assert gradcheck(lambda x: F.broadcast_to(x.T, (3, 3)) * w[0, :, :3], x)


def test_squeeze_unsqueeze(leaf):
    x = leaf(1, 3, 1)
    assert x.squeeze().shape == (3,)
    assert x.squeeze(0).shape == (3, 1)
    assert x.squeeze(-1).shape == (1, 3)
    assert x.squeeze((0, 2)).shape == (3,)
    assert x.squeeze(1).shape == (1, 3, 1)  # size 3: stays, as in torch
    assert x.unsqueeze(0).shape == (1, 1, 3, 1)
    assert x.unsqueeze(-1).shape == (1, 3, 1, 1)
    assert x.unsqueeze(2).shape == (1, 3, 1, 1)
    assert gradcheck(lambda x: x.squeeze().unsqueeze(0) * mt.arange(1.0, 4.0, dtype=mt.float64), x)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_and_stack(axis, leaf):
    a, b, c = leaf(2, 3), leaf(2, 3), leaf(2, 3)
    close(
        mt.concat([a, b, c], axis=axis),
        np.concatenate([a.numpy(), b.numpy(), c.numpy()], axis=axis),
    )
    close(mt.stack([a, b, c], axis=axis), np.stack([a.numpy(), b.numpy(), c.numpy()], axis=axis))
    assert mt.cat([a, b], axis=axis).shape == np.concatenate([a.numpy(), b.numpy()], axis).shape
    w = mt.tensor(np.random.default_rng(0).standard_normal((3, 2, 3)), dtype=mt.float64)
    assert gradcheck(lambda a, b, c: mt.concat([a, b.T.T, c], axis=axis) ** 2, a, b, c)
    assert gradcheck(
        lambda a, b, c: (
            mt.stack([a, b, c], axis=axis) * w.reshape(np.stack([a.numpy()] * 3, axis=axis).shape)
        ),
        a,
        b,
        c,
    )


def test_concat_of_different_sizes_and_a_constant(leaf):
    a, b = leaf(2, 1), leaf(2, 3)
    const = mt.ones(2, 2, dtype=mt.float64)
    out = mt.concat([a, const, b], axis=1)
    assert out.shape == (2, 6)
    assert gradcheck(lambda a, b: mt.concat([a, const, b], axis=-1) ** 2, a, b)


def test_split_and_chunk(leaf):
    x = leaf(7, 2)
    parts = x.split(3)
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
    parts = x.split([2, 5])
    assert [p.shape for p in parts] == [(2, 2), (5, 2)]
    parts = mt.split(x, 1, axis=-1)
    assert [p.shape for p in parts] == [(7, 1), (7, 1)]
    chunks = x.chunk(3)
    assert [c.shape for c in chunks] == [(3, 2), (3, 2), (1, 2)]
    close(mt.concat(chunks), x.numpy())
    assert gradcheck(lambda x: tuple(p * (i + 1) for i, p in enumerate(x.split([2, 5]))), x)
    assert gradcheck(lambda x: x.chunk(2, axis=1)[1].exp(), x)
    assert gradcheck(lambda x: mt.chunk(x.T, 2, axis=0)[0], x)


INDICES = {
    "int": 1,
    "negative int": -1,
    "slice": slice(1, None),
    "step slice": (slice(None, None, 2), slice(None, None, -1)),
    "int and slice": (0, slice(1, 3)),
    "None": (None, 1),
    "Ellipsis": (Ellipsis, 0),
    "Ellipsis and None": (0, Ellipsis, None),
    "int array": np.array([2, 0]),
    "repeated ints": np.array([0, 0, 2, 0]),
    "list": [1, 1],
    "int tensor": mt.tensor([3, 0, 3]),
    "two int arrays": (np.array([0, 0, 1]), np.array([2, 2, 1])),
    "array and slice": (slice(None), np.array([[0, 1], [1, 1]])),
    "bool mask": "mask",
    "bool row mask": np.array([True, False, True, True]),
}


@pytest.mark.parametrize("name", list(INDICES))
def test_getitem(name, leaf):
    x = leaf(4, 3)
    index = INDICES[name]
    if isinstance(index, str):
        index = x.numpy() > 0
        index[0, 0] = True  # never empty
    out = x[index]
    np_index = index.numpy() if isinstance(index, mt.Tensor) else index
    close(out, x.numpy()[np_index])
    assert gradcheck(lambda x: x[index], x)
    assert gradcheck(lambda x: x.T.T[index] * 2, x)


def test_getitem_with_repeated_indices_adds_gradients():
    x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[[0, 0, 2, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3, 0, 1])


def test_getitem_of_a_transposed_input(leaf):
    x = leaf(3, 4)
    assert gradcheck(lambda x: x.T[1:, np.array([0, 2, 2])], x)


def test_where(leaf):
    cond = mt.tensor([[True, False, True]])
    a, b = leaf(2, 3), leaf(3)
    close(mt.where(cond, a, b), np.where(cond.numpy(), a.numpy(), b.numpy()))
    assert gradcheck(lambda a, b: mt.where(cond, a, b), a, b)
    assert gradcheck(lambda a: mt.where(a > 0, a, 0.0), a)
    assert gradcheck(lambda a, b: F.where(cond.numpy().T, a.T, b[:, None]), a, b)


def test_masked_fill(leaf):
    x = leaf(2, 3)
    mask = mt.tensor([False, True, False])
    y = x.masked_fill(mask, -1e9)
    close(y, np.where(mask.numpy(), -1e9, x.numpy()))
    assert gradcheck(lambda x: x.masked_fill(mask, 0.0), x)
    assert gradcheck(lambda x: x.T.masked_fill(mask[:, None], 5.0), x)
    x.masked_fill(mask, 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 0, 1], [1, 0, 1]])


@pytest.mark.parametrize("k", [0, 1, -1])
def test_tril_triu(k, leaf):
    x = leaf(2, 4, 4)
    close(x.tril(k), np.tril(x.numpy(), k))
    close(x.triu(k), np.triu(x.numpy(), k))
    assert gradcheck(lambda x: x.tril(k), x)
    assert gradcheck(lambda x: F.triu(x.mT, k), x)


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


# ============================================================================ neural-net functions


def softmax_ref(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(axis, leaf):
    x = leaf(3, 4, 5)
    close(F.softmax(x, axis=axis), softmax_ref(x.numpy(), axis))
    close(x.softmax(axis), softmax_ref(x.numpy(), axis))
    close(F.log_softmax(x, axis=axis), np.log(softmax_ref(x.numpy(), axis)))
    assert gradcheck(lambda x: F.softmax(x, axis=axis), x)
    assert gradcheck(lambda x: F.log_softmax(x, axis=axis), x)
    assert gradcheck(lambda x: F.softmax(x.mT, axis=axis), x)


def test_softmax_with_scale_and_masks(leaf):
    x = leaf(2, 3, 4)
    blocked = np.array([False, True, False, True])  # True = blocked
    y = F.softmax(x, scale=0.5, mask=mt.tensor(blocked))
    expected = softmax_ref(np.where(blocked, -np.inf, 0.5 * x.numpy()))
    close(y, expected)
    additive = np.where(blocked, -np.inf, 0.0)
    close(F.softmax(x, scale=0.5, mask=additive), expected)
    assert gradcheck(lambda x: F.softmax(x, scale=0.5, mask=blocked), x)
    causal = np.triu(np.ones((3, 4), dtype=bool), k=1)
    assert gradcheck(lambda x: F.softmax(x, mask=causal), x)
    assert gradcheck(lambda x: F.softmax(x, axis=1, mask=causal[:, :1]), x)


def test_fully_masked_softmax_row_is_zero_not_nan(leaf):
    x = leaf(2, 3)
    mask = np.array([[True, True, True], [False, True, False]])
    y = F.softmax(x, mask=mask)
    assert np.isfinite(y.numpy()).all()
    np.testing.assert_array_equal(y.numpy()[0], 0)
    (y * mt.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0], 0)


@pytest.mark.parametrize("norm_shape", [(5,), (4, 5)])
def test_layer_norm(norm_shape, leaf):
    x = leaf(2, 4, 5)
    w, b = leaf(*norm_shape), leaf(*norm_shape)
    axes = tuple(range(-len(norm_shape), 0))
    mu = x.numpy().mean(axis=axes, keepdims=True)
    var = x.numpy().var(axis=axes, keepdims=True)
    expected = (x.numpy() - mu) / np.sqrt(var + 1e-5) * w.numpy() + b.numpy()
    close(F.layer_norm(x, norm_shape, w, b), expected, 1e-8)
    close(F.layer_norm(x, norm_shape), (x.numpy() - mu) / np.sqrt(var + 1e-5), 1e-8)
    assert gradcheck(lambda x, w, b: F.layer_norm(x, norm_shape, w, b), x, w, b)
    assert gradcheck(lambda x: F.layer_norm(x, norm_shape), x)
    assert gradcheck(lambda x, w: F.layer_norm(x[:, ::-1], norm_shape, weight=w), x, w)


def test_dropout():
    x = mt.ones(200, 50)
    mt.manual_seed(3)
    y = F.dropout(x, p=0.2)
    kept = y.numpy() != 0
    assert 0.75 < kept.mean() < 0.85  # about 1 − p survive
    np.testing.assert_allclose(y.numpy()[kept], 1 / 0.8)  # inverted scaling
    mt.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, p=0.2).numpy(), y.numpy())  # seeded
    assert not np.array_equal(F.dropout(x, p=0.2).numpy(), y.numpy())  # fresh mask next call
    assert F.dropout(x, p=0.2, training=False) is x
    assert F.dropout(x, p=0.0) is x
    np.testing.assert_array_equal(F.dropout(x, p=1.0).numpy(), 0)


def test_dropout_gradient_uses_the_same_mask():
    x = mt.randn(30, 40, dtype=mt.float64, requires_grad=True)
    y = F.dropout(x, p=0.5)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (y.numpy() != 0) * 2.0)

    def fn(x):  # the same mask on every evaluation, so gradcheck can run
        mt.manual_seed(7)
        return F.dropout(x, p=0.3)

    assert gradcheck(fn, mt.randn(3, 4, dtype=mt.float64, requires_grad=True))


def test_embedding(leaf):
    table = leaf(5, 3)
    ids = mt.tensor([[0, 4, 4], [1, 0, 0]])
    out = F.embedding(ids, table)
    close(out, table.numpy()[ids.numpy()])
    assert out.shape == (2, 3, 3)
    assert gradcheck(lambda t: F.embedding(ids, t), table)
    assert gradcheck(lambda t: F.embedding(ids, t.T), leaf(3, 5))  # a transposed table
    table.grad = None
    F.embedding(ids, table).sum().backward()
    np.testing.assert_array_equal(table.grad.numpy()[:, 0], [3, 1, 0, 0, 2])  # counts of each id
    table.grad = None
    F.embedding(ids, table, padding_idx=0).sum().backward()
    np.testing.assert_array_equal(table.grad.numpy()[0], 0)


def cross_entropy_ref(logits, targets, ignore_index=-100, smoothing=0.0, reduction="mean"):
    c = logits.shape[-1]
    x, t = logits.reshape(-1, c), targets.reshape(-1)
    logp = (
        x
        - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - x.max(-1, keepdims=True)
    )
    valid = t != ignore_index
    nll = -logp[np.arange(len(t)), np.where(valid, t, 0)]
    rows = (1 - smoothing) * nll + smoothing * (-logp.mean(-1))
    rows = np.where(valid, rows, 0.0)
    if reduction == "none":
        return rows.reshape(targets.shape)
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / max(valid.sum(), 1)


@pytest.mark.parametrize("shape", [(6, 4), (2, 4, 3), (2, 4, 3, 2)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(shape, reduction, smoothing, leaf, rng):
    logits = leaf(*shape)  # (N, C, d1, …): the classes on axis 1
    targets = rng.integers(0, shape[1], size=shape[:1] + shape[2:])
    targets.reshape(-1)[1] = -100  # one ignored target
    kw = dict(label_smoothing=smoothing, reduction=reduction)
    out = F.cross_entropy(logits, mt.tensor(targets), **kw)
    want = cross_entropy_ref(
        np.moveaxis(logits.numpy(), 1, -1), targets, -100, smoothing, reduction
    )
    close(out, want, 1e-8)
    assert gradcheck(lambda x: F.cross_entropy(x, targets, **kw), logits)
    reverse = tuple(reversed(range(len(shape))))  # logits as a non-contiguous view
    assert gradcheck(
        lambda x: F.cross_entropy(x.permute(reverse), targets, **kw), leaf(*shape[::-1])
    )


def test_cross_entropy_mean_is_over_non_ignored_targets(leaf):
    logits = leaf(4, 3)
    targets = mt.tensor([0, 2, 1, 1])
    ignored = mt.tensor([0, 7, 1, 7])
    full = F.cross_entropy(logits, targets, reduction="none").numpy()
    loss = F.cross_entropy(logits, ignored, ignore_index=7)
    np.testing.assert_allclose(loss.item(), (full[0] + full[2]) / 2)
    all_ignored = F.cross_entropy(logits, mt.tensor([7, 7, 7, 7]), ignore_index=7)
    assert all_ignored.item() == 0.0


def test_mse_loss(leaf):
    a, b = leaf(3, 4), leaf(3, 4)
    close(F.mse_loss(a, b), np.mean((a.numpy() - b.numpy()) ** 2))
    close(F.mse_loss(a, b, reduction="sum"), np.sum((a.numpy() - b.numpy()) ** 2))
    close(F.mse_loss(a, b, reduction="none"), (a.numpy() - b.numpy()) ** 2)
    assert gradcheck(lambda a, b: F.mse_loss(a, b), a, b)
    assert gradcheck(lambda a: F.mse_loss(a.T, b.numpy().T, reduction="sum"), a)


def test_cast_is_differentiable_between_float_types(leaf):
    x = leaf(3)
    y = x.float()
    assert y.dtype == mt.float32
    y.sum().backward()
    assert x.grad.dtype == mt.float64
    np.testing.assert_array_equal(x.grad.numpy(), 1)
    assert not x.long().requires_grad


def test_numbers_and_arrays_take_a_float64_tensors_dtype_without_rounding():
    x = mt.zeros(2, dtype=mt.float64)
    for y in (x + 0.1, x + np.array([0.1, 0.1]), x + [0.1, 0.1], 0.1 + x, np.array([0.1]) + x):
        assert y.dtype == mt.float64
        np.testing.assert_array_equal(y.numpy(), 0.1)  # not float32's 0.10000000149


def test_integer_operands():
    ids = mt.tensor([1, 2], dtype=mt.int32)
    assert (ids + 1).dtype == mt.int32
    assert (ids * 1.5).dtype == mt.float32
    assert (ids / ids).dtype == mt.float32
    assert ids.mean().dtype == mt.float32 and ids.mean().item() == 1.5
    assert ids.var().dtype == mt.float32


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


def test_std_of_equal_elements_has_zero_gradient_not_nan():
    x = mt.tensor([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]], dtype=mt.float64, requires_grad=True)
    x.std(axis=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0], 0)
    xc = x.numpy()[1] - x.numpy()[1].mean()
    np.testing.assert_allclose(x.grad.numpy()[1], xc / ((3 - 1) * np.std(x.numpy()[1], ddof=1)))


def test_power_zero_has_zero_gradient_even_at_zero():
    x = mt.tensor([0.0, 2.0], requires_grad=True)
    (x**0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0])  # not NaN (0 · 0⁻¹)
