"""minitensor/ops/elementwise.py: unary and binary ops, comparisons, logic, dtypes of results."""

import math

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


def test_power_zero_has_zero_gradient_even_at_zero():
    x = mt.tensor([0.0, 2.0], requires_grad=True)
    (x**0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0])  # not NaN (0 · 0⁻¹)


# --------------------------------------------------------------------------- Div, max, min
def test_div_gradient_wrt_a_tiny_divisor_is_accurate_in_float32():
    # b·b = 1e-40 is subnormal in float32; (a/b)/b stays normal all the way
    a = mt.tensor([1e-30], requires_grad=True)
    b = mt.tensor([1e-20], requires_grad=True)
    (a / b).sum().backward()
    exact = -np.float64(a.numpy()[0]) / np.float64(b.numpy()[0]) ** 2
    np.testing.assert_allclose(b.grad.numpy()[0], exact, rtol=1e-6)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_gradient_at_nan_and_ties_matches_torch(op):
    torch = pytest.importorskip("torch")
    a0 = [np.nan, 1.0, 2.0, 3.0, np.nan]
    b0 = [1.0, np.nan, 2.0, 1.0, np.nan]
    a = mt.tensor(a0, requires_grad=True)
    b = mt.tensor(b0, requires_grad=True)
    getattr(F, op)(a, b).sum().backward()
    ta = torch.tensor(a0, requires_grad=True)
    tb = torch.tensor(b0, requires_grad=True)
    getattr(torch, op)(ta, tb).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())


_FLOAT_ONLY = {
    "sigmoid": (F.sigmoid, "sigmoid"),
    "gelu": (F.gelu, "nn.functional.gelu"),
    "silu": (F.silu, "nn.functional.silu"),
    "exp": (F.exp, "exp"),
    "log": (F.log, "log"),
    "sqrt": (F.sqrt, "sqrt"),
    "tanh": (F.tanh, "tanh"),
    "softmax": (F.softmax, "softmax"),
    "log_softmax": (F.log_softmax, "log_softmax"),
}


@pytest.mark.parametrize("name", sorted(_FLOAT_ONLY))
def test_float_only_ops_promote_integers_to_float32_and_compute_float16(name):
    torch = pytest.importorskip("torch")
    fn, torch_name = _FLOAT_ONLY[name]
    tfn = torch
    for part in torch_name.split("."):
        tfn = getattr(tfn, part)
    targs = (-1,) if name in ("softmax", "log_softmax") else ()
    ints = [[1, 2, 3]]
    out = fn(mt.tensor(ints))
    assert out.dtype == np.float32
    expected = tfn(torch.tensor(ints, dtype=torch.float32), *targs).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    half = fn(mt.tensor(ints, dtype=np.float16))
    assert half.dtype == np.float16
    np.testing.assert_allclose(
        half.numpy().astype(np.float32),
        tfn(torch.tensor(ints, dtype=torch.float16), *targs).float().numpy(),
        rtol=2e-3,
    )
