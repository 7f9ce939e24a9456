"""Differential fuzzer: random programs of 8–16 ops, with edge values (±inf, NaN, ±1e30,
subnormals, rows of −1e9, 3e4 and 1e6 magnitudes), size-0/size-1/0-d shapes, float32/float64 and
integer inputs, on both backends, compared op by op with torch 2.13 — values, NaN/±inf positions,
dtypes, errors and every gradient — plus an in-place edit of a saved input between forward and
backward, which must make backward raise where torch's does. The programs and the comparison
are in tests/fuzz_programs.py.

    python -m pytest tests/interop/test_fuzz.py                      # the small CI sample
    MINITENSOR_FUZZ=thorough python -m pytest -m fuzz tests/interop/test_fuzz.py --hypothesis-seed=1
                                                             # thousands of programs

KNOWN_BUGS below lists the mismatches that are real bugs not fixed yet (issue 12): the fuzzer
does not fail on a mismatch that one of them explains, and each has its minimal reproducer as a
strict xfail test, so that the fix shows up as an XPASS: then delete the entry.
"""

import json
import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fuzz_programs as fp  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import minitensor as mt  # noqa: E402
import minitensor.functional as F  # noqa: E402

# (name, the bug, a regular expression that the text of its mismatches matches); empty while
# the fuzzer finds no bug that is not fixed
KNOWN_BUGS = []


def known(name):
    """Mark the minimal reproducer of KNOWN_BUGS entry `name` as a strict xfail."""
    reason = next(r for n, r, _ in KNOWN_BUGS if n == name)
    return pytest.mark.xfail(strict=True, reason=f"{name}: {reason}")


def known_bug(m):
    """The KNOWN_BUGS entry that explains mismatch m, or None."""
    for name, _, pattern in KNOWN_BUGS:
        if re.search(pattern, str(m)):
            return name
    return None


@st.composite
def programs(draw, dtype):
    return fp.draw_program(draw, dtype)


def _log(prog, dtype, mismatches):
    """One line per program (MINITENSOR_FUZZ_LOG): its dtype, the backends it ran on, whether
    it had an in-place edit, a hash of its source (to count distinct programs) and its
    mismatches, each with the KNOWN_BUGS entry that explains it."""
    path = os.environ.get("MINITENSOR_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "dtype": np.dtype(dtype).name,
                        "backends": list(fp.BACKENDS),
                        "edit": bool(prog.edit),
                        "steps": len(prog.steps),
                        "hash": hash(prog.source()),
                        "mismatches": [[str(m), known_bug(m)] for m in mismatches],
                    }
                )
                + "\n"
            )


@pytest.mark.fuzz
@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")  # inf/NaN on purpose
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@given(data=st.data())
def test_random_programs_agree_with_torch(dtype, data):
    prog = data.draw(programs(dtype))
    mismatches = fp.fuzz_check(prog)
    _log(prog, dtype, mismatches)
    unknown = [m for m in mismatches if known_bug(m) is None]
    assert not unknown, (
        "minitensor and torch disagree:\n"
        + "\n".join(map(str, unknown))
        + "\n\nprogram:\n"
        + prog.source()
    )


# ------------------------------------------------------------------ the known bugs, one case each
# fixed bugs that the fuzzer found: their reproducers stay as regression tests
def test_sigmoid_of_integers_is_float32():
    assert F.sigmoid(mt.tensor([1, 2])).dtype == mt.float32


def test_abs_and_relu_gradient_at_nan_as_torch():
    x = mt.tensor([np.nan, 1.0], requires_grad=True)
    (F.abs(x) + F.relu(x)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0])  # torch: 0 + 1, 1 + 1


def test_unbiased_var_of_one_element_is_nan():
    assert np.isnan(F.var(mt.tensor([3.0])).item())


def test_embedding_of_width_zero_has_a_gradient():
    w = mt.tensor(np.zeros((3, 0), np.float32), requires_grad=True)
    F.embedding(mt.tensor([0, 0, 1]), w).sum().backward()
    assert w.grad.shape == (3, 0)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_of_a_constant_row_is_zero(backend, dtype):
    # the float32 sum of nine −1e9 rounds; the mean's correction step lands on −1e9 again
    with mt.kernels.use_backend(backend):
        y = F.layer_norm(mt.tensor(np.full((2, 9), [[-1e9], [0.1]], dtype)), (9,), eps=1e-12)
    np.testing.assert_array_equal(y.numpy(), np.zeros((2, 9), dtype))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_layer_norm_of_a_row_whose_squares_overflow_float32(backend):
    # Σ(x − m)² is inf in float32 (torch's float32 kernel gives NaN or 0 here): the row's
    # variance is summed again in float64, so x̂ is the float64 result rounded
    x = np.array([[0.21, 1e30, 0.0, 0.0], [1.0, -1e30, 2.0, 1e30]], np.float32)
    x64 = x.astype(np.float64)
    expected = (x64 - x64.mean(-1, keepdims=True)) / x64.std(-1, keepdims=True)
    with mt.kernels.use_backend(backend):
        xm = mt.tensor(x, requires_grad=True)
        y = F.layer_norm(xm, (4,))
        y.sum().backward()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert np.isfinite(xm.grad.numpy()).all()


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_cross_entropy_gradient_of_one_class_is_exactly_zero(backend):
    # one class: the loss is constant, its gradient p − ((1 − ε) + ε/C) = 1 − 1 exactly, so an
    # infinite upstream gradient (log of the zero loss) gives NaN as torch, not ±inf
    with mt.kernels.use_backend(backend):
        x = mt.tensor(np.array([[-1.5], [1.5]]), dtype=mt.float64, requires_grad=True)
        F.cross_entropy(x, mt.tensor([0, 0]), label_smoothing=0.1, reduction="sum").backward(
            mt.tensor(np.inf, dtype=mt.float64)
        )
    assert np.isnan(x.grad.numpy()).all()


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_log_softmax_over_a_size_0_axis(backend):
    with mt.kernels.use_backend(backend):
        assert F.log_softmax(mt.tensor(np.zeros((4, 0), np.float32))).shape == (4, 0)


def test_pow_exponent_gradient_in_float64():
    b = mt.tensor(np.array([-0.1]), dtype=mt.float64, requires_grad=True)
    F.pow(mt.tensor(np.array([3e4], np.float32)), b).sum().backward()
    assert b.grad.dtype == mt.float64
    np.testing.assert_allclose(b.grad.numpy(), 3e4**-0.1 * np.log(3e4), rtol=1e-12)


def test_clip_cat_stack_where_of_integers_promote_as_torch():
    ints, f32 = mt.tensor([1, 2]), mt.tensor([0.5, 1.5])
    assert F.clip(mt.tensor([1, 2, 3]), -1.0, 1.0).dtype == mt.float32  # the default float
    assert F.clip(mt.tensor([1, 2, 3]), -1, 1).dtype == mt.int64
    assert F.cat([ints, mt.tensor([0.5])]).dtype == mt.float32  # the float's dtype
    assert F.stack([ints, f32]).dtype == mt.float32
    assert F.where(mt.tensor([True, False]), ints, f32).dtype == mt.float32
    assert F.cat([f32, mt.tensor([0.5], dtype=mt.float64)]).dtype == mt.float64
    assert F.cat([mt.tensor([True]), ints]).dtype == mt.int64


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 0), (2, 0, 1, 3, 4)])
def test_softmax_of_an_empty_5d_tensor(shape):
    x = mt.tensor(np.zeros(shape, np.float32), requires_grad=True)
    with mt.kernels.use_backend("numba"):
        y = F.softmax(x, mask=np.zeros(shape[-1], bool))
        y.sum().backward()
    assert y.shape == shape and x.grad.shape == shape


def test_softmax_backward_over_a_size_0_axis():
    x = mt.tensor(np.zeros((3, 0), np.float32), requires_grad=True)
    with mt.kernels.use_backend("numba"):
        F.softmax(x).sum().backward()
    assert x.grad.shape == (3, 0)


def test_pow_base_gradient_in_float64_for_a_float32_exponent():
    a = mt.tensor(np.array(0.48849350533001956), dtype=mt.float64, requires_grad=True)
    b = np.float32(-0.14959238)
    F.pow(a, mt.tensor(np.array(b))).backward()
    b64 = np.float64(b)  # b − 1 rounded to float32 loses ~1e-8
    np.testing.assert_allclose(a.grad.numpy(), b64 * 0.48849350533001956 ** (b64 - 1), rtol=1e-14)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_softmax_gradient_at_blocked_positions_is_zero_even_beside_nan(backend):
    # a blocked position is selected out (torch's masked_fill): a NaN gradient in its row does
    # not reach it as 0·NaN; a fully blocked row has zero gradient (documented)
    with mt.kernels.use_backend(backend):
        x = mt.tensor([1.0, 1.0, 2.0, -1.0, -2.0], requires_grad=True)
        m = np.array([False, True, False, False, True])
        F.softmax(x, mask=m, scale=0.125).backward(mt.tensor([0.5, np.nan, 1, 2, np.nan]))
        row = mt.tensor([[0.0, 0.86]], requires_grad=True)
        F.softmax(row, mask=np.array([True])).backward(mt.tensor([[np.nan, 1.0]]))
    np.testing.assert_array_equal(np.isnan(x.grad.numpy()), ~m)  # as torch
    np.testing.assert_array_equal(x.grad.numpy()[m], [0.0, 0.0])
    np.testing.assert_array_equal(row.grad.numpy(), [[0.0, 0.0]])


def test_pow_half_at_negative_zero_matches_sqrt():
    x = mt.tensor([-0.0], requires_grad=True)
    F.pow(x, 0.5).sum().backward()
    y = mt.tensor([-0.0], requires_grad=True)
    F.sqrt(y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.grad.numpy())


def test_var_of_no_elements_is_nan():
    assert np.isnan(F.var(mt.tensor(np.zeros(0, np.float32))).item())


@pytest.mark.parametrize("reduce", [F.max, F.min, F.argmax, F.argmin])
def test_extrema_over_size_0_axes_as_torch(reduce):
    x = mt.tensor(np.zeros((0, 3), np.float32), requires_grad=reduce in (F.max, F.min))
    out = reduce(x, 1)
    assert (out[0] if isinstance(out, tuple) else out).shape == (0,)  # other axes: empty
    if x.requires_grad:
        values = reduce(x, axis=1, keepdims=True)  # axis= is dim=: (values, indices)
        values[0].sum().backward()
        assert x.grad.shape == (0, 3)
    for axis in (0, None):  # a size-0 axis: no identity, refused
        with pytest.raises(ValueError, match=rf"{reduce.__name__}: axis 0 .*\(0, 3\) has size 0"):
            reduce(x, axis)


def test_backward_selects_where_torch_selects_at_nan():
    """NaN gradients reaching the losing side of maximum/minimum/clip, or the base-0 slope of
    pow, stay there (torch selects; a product with a 0/1 mask would give NaN·0 = NaN)."""
    x = mt.tensor([1.0, 3.0, 0.0], dtype=mt.float64, requires_grad=True)
    nan_grad = mt.tensor([np.nan, np.nan, np.nan], dtype=mt.float64)
    other = mt.tensor([2.0, 2.0, 2.0], dtype=mt.float64, requires_grad=True)
    F.maximum(x, other).backward(nan_grad)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, np.nan, 0.0])
    np.testing.assert_array_equal(other.grad.numpy(), [np.nan, 0.0, np.nan])
    x.grad = None
    F.clip(x, 0.5, 2.0).backward(nan_grad)
    np.testing.assert_array_equal(x.grad.numpy(), [np.nan, 0.0, 0.0])
    x.grad = None
    e = mt.tensor([0.0, 1.0, 0.0], dtype=mt.float64)
    F.pow(x, e).backward(nan_grad)  # d/dx x**0 = 0 everywhere, as torch
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, np.nan, 0.0])


def test_pow_exponent_gradient_as_torch_at_zero_and_negative_bases():
    a = mt.tensor([0.0, 0.0, -2.0, 2.0], dtype=mt.float64)
    b = mt.tensor([2.0, -1.0, 2.0, 3.0], dtype=mt.float64, requires_grad=True)
    F.pow(a, b).sum().backward()
    # 0 where a = 0 and b ≥ 0 (the limit), −∞ = ∞·ln 0 for b < 0, NaN for a < 0 (no real
    # derivative): torch's values
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, -np.inf, np.nan, 8 * np.log(2.0)])


@pytest.mark.torch
@pytest.mark.parametrize(
    "program",
    [
        lambda lib: lib.tensor(np.array([128], np.uint8)) & lib.tensor(0),
        lambda lib: lib.zeros(3) + lib.tensor(np.float64(1.0)),
        lambda lib: lib.clamp(lib.zeros(3), lib.tensor(np.float64(1.0))),
        lambda lib: lib.tensor([1, 2]) + 2.5,
        lambda lib: lib.tensor(np.array([1], np.uint8)) + lib.tensor(5.0),
        lambda lib: lib.tensor(np.array(1, np.uint8)) + lib.tensor(5),
        lambda lib: lib.tensor([True]) + lib.tensor(5),
        lambda lib: lib.where(lib.tensor([True]), lib.zeros(1), lib.tensor(np.float64(1.0))),
    ],
)
def test_a_0d_operand_does_not_widen_the_result_dtype(program):
    torch = pytest.importorskip("torch")
    assert str(program(mt).dtype) == str(program(torch).dtype).removeprefix("torch.")


def _tensor_argument_program(op, args_of, params):
    """x (3, 4), a (4,) and a 0-d leaf requiring grad, a bool mask, then `op`."""
    rng = np.random.default_rng(3)
    leaves = [
        rng.normal(size=(3, 4)),
        rng.normal(size=(4,)),
        np.array(0.25),
        rng.random((3, 4)) > 0.5,
    ]
    steps = [fp.Step("input", (), {"array": a, "requires_grad": a.dtype != bool}) for a in leaves]
    return fp.Program(steps + [fp.Step(op, args_of, params)], weight_seed=1)


TENSOR_ARGUMENTS = [
    ("F.clamp(tensors)", (0, 1, 2), {"which": "both"}),
    ("F.clamp(tensors)", (0, 2), {"which": "max"}),
    ("F.masked_fill(tensor)", (0, 3, 2), {}),
]


@pytest.mark.torch
@pytest.mark.parametrize("op, args_of, params", TENSOR_ARGUMENTS)
def test_tensor_arguments_requiring_grad_are_compared(op, args_of, params, monkeypatch):
    # the fuzzer's draws of tensor bounds and fill values agree with torch, gradients included…
    prog = _tensor_argument_program(op, args_of, params)
    assert fp.fuzz_check(prog) == []
    # …and it would see a dropped gradient: the same op with its tensor arguments detached
    real = fp.OPS[op]
    dropped = fp.Op(
        lambda x, *rest, **kw: real.mt(x, *(a.detach() for a in rest), **kw),
        real.torch,
        real.gen,
        real.bound,
    )
    monkeypatch.setitem(fp.OPS, op, dropped)
    assert any(m.what in ("grad", "requires_grad") for m in fp.fuzz_check(prog))
