"""Issue 20's silent differences from torch: each case is one piece of PyTorch code, run with
`torch` bound to the real torch and to minitensor, and the results compared (values, dtypes,
gradients). Each case gave other numbers, without any error, before its fix."""

import math

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as mt_F

torch = pytest.importorskip("torch")
torch_F = torch.nn.functional

pytestmark = pytest.mark.torch


def _numpy(x):
    """A result of either library as numpy (tuples and lists element by element)."""
    if isinstance(x, (tuple, list)):
        return [_numpy(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, mt.Tensor):
        return x.numpy()
    return np.asarray(x)


def _assert_same(got, want, rtol):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w, rtol)
        return
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)  # NaN matches NaN


def both(case, rtol=0.0):
    """Run case(torch, F) and case(minitensor, F) and assert the same results: dtypes, shapes
    and values (equal, or within `rtol` where the two round differently)."""
    want = _numpy(case(torch, torch_F))
    got = _numpy(case(mt, mt_F))
    _assert_same(got, want, rtol)


# ---------------------------------------------------------------- 1. results that alias an input
def test_repeat_result_is_a_fresh_writable_copy():
    def case(torch, F):
        x = torch.tensor([[1.0, 2.0]])
        y = x.repeat(3, 1)
        x[0, 0] = 5.0  # must not reach y
        y[0, 1] = 7.0  # must not raise, nor reach x
        return x, y

    both(case)


def test_repeat_gradient_sums_the_copies():
    def case(torch, F):
        x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64, requires_grad=True)
        w = torch.arange(24.0, dtype=torch.float64).reshape(2, 2, 6)
        (x.repeat(2, 2, 2) * w).sum().backward()
        return x.grad

    both(case)


def test_repeat_gradcheck():
    x = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda a: a.repeat(2, 1, 3), x)


@pytest.mark.parametrize("pad", [(0, 0), (0, 0, 0, 0), (-1, 0)])
def test_pad_that_adds_nothing_returns_a_copy(pad):
    def case(torch, F):
        x = torch.arange(6.0).reshape(2, 3)
        y = F.pad(x, pad)
        y[0, 0] = 9.0  # editing the padded batch leaves the source alone
        return x, y

    both(case)


def test_einsum_identity_does_not_alias_its_operand():
    # torch's einsum('ij->ij') happens to return a view; minitensor's einsum is not a view op,
    # and returns fresh memory: writing to the result leaves the operand alone
    x = mt.arange(4.0).reshape(2, 2)
    y = mt.einsum("ij->ij", x)
    y[0, 0] = 9.0
    assert x[0, 0].item() == 0.0


# ---------------------------------------------------------------- 3. & | ^ ~ are bitwise
def test_and_of_integer_tensors_combines_bits():
    both(lambda torch, F: torch.tensor([6, 12, -1]) & torch.tensor([3, 10, 5]))


def test_or_and_xor_of_integer_tensors_and_python_ints():
    both(lambda torch, F: [torch.tensor([6]) | 3, 6 ^ torch.tensor([3]), 5 & torch.tensor([7])])


def test_invert_of_integer_tensors_flips_bits():
    def case(torch, F):
        return [~torch.tensor([5, 0, -1]), ~torch.tensor([5, 0, 255], dtype=torch.uint8)]

    both(case)


def test_bitwise_keeps_an_integer_dtype():
    both(lambda torch, F: torch.tensor([6], dtype=torch.int32) & 3)


def test_bool_tensors_stay_logical():
    def case(torch, F):
        a, b = torch.tensor([True, True, False]), torch.tensor([True, False, False])
        return [a & b, a | b, a ^ b, ~a, a & True]

    both(case)


def test_bitwise_of_a_float_tensor_is_refused():
    with pytest.raises(NotImplementedError):  # torch's "not implemented for 'Float'"
        torch.tensor([1.0]) & torch.tensor([1.0])
    with pytest.raises(TypeError, match=r"bitwise_and.*float32 of shape \(1,\)"):
        mt.tensor([1.0]) & mt.tensor([1.0])


# ---------------------------------------------------------------- 4. an alias means what dim= means
def test_max_with_axis_returns_values_and_indices():
    def case(torch, F):
        x = torch.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
        return [x.max(axis=1)[0], x.max(axis=1)[1], x.min(axis=0).values, x.min(axis=0).indices]

    both(case)


def test_max_with_axis_and_keepdims_is_max_with_dim_and_keepdim():
    def case(torch, F):
        x = torch.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
        return list(torch.max(x, axis=-1, keepdims=True)) + list(x.max(1, keepdims=True))

    both(case)


def test_max_with_axis_sends_the_gradient_to_the_index():
    def case(torch, F):
        x = torch.tensor(
            [[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], dtype=torch.float64, requires_grad=True
        )
        values, _ = x.max(axis=1)
        (values * torch.tensor([2.0, 3.0], dtype=torch.float64)).sum().backward()
        return x.grad

    both(case)


@pytest.mark.parametrize("name", ["sum", "mean", "argmax", "argmin", "logsumexp", "std", "var"])
def test_reductions_read_axis_and_keepdims_as_dim_and_keepdim(name):
    def case(torch, F):
        x = torch.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], dtype=torch.float64)
        return [getattr(x, name)(axis=1, keepdims=True), getattr(x, name)(dim=0, keepdim=False)]

    both(case, rtol=1e-15)


# ---------------------------------------------------------------- 5. descending sorts, NaN largest
def test_topk_of_uint8_does_not_wrap():
    both(lambda torch, F: list(torch.tensor([0, 1, 2, 200], dtype=torch.uint8).topk(2)))


def test_descending_sort_of_uint8():
    def case(torch, F):
        x = torch.tensor([[0, 255, 1, 255], [128, 127, 0, 0]], dtype=torch.uint8)
        ties = torch.tensor([1, 3, 1, 200, 3, 2, 3], dtype=torch.uint8)  # stable: in order
        return [
            *x.sort(descending=True, stable=True),
            x.argsort(dim=0, descending=True, stable=True),
            *ties.sort(descending=True, stable=True),
        ]

    both(case)


def test_descending_sort_of_int64_extremes():
    def case(torch, F):
        lo, hi = -(2**63), 2**63 - 1  # int64 extremes
        x = torch.tensor([lo, 0, hi, 5, lo])
        return list(x.sort(descending=True)) + list(x.topk(2)) + list(x.topk(2, largest=False))

    both(case)


def test_nan_is_the_largest_in_topk():
    def case(torch, F):
        x = torch.tensor([1.0, float("nan"), 3.0, 2.0])
        return list(x.topk(1)) + list(x.topk(2, largest=False)) + [x.max()]

    both(case)


def test_nan_comes_first_in_a_descending_sort_and_last_in_an_ascending_one():
    def case(torch, F):
        x = torch.tensor([[1.0, float("nan"), 3.0, 2.0], [float("nan"), 0.0, float("-inf"), 5.0]])
        return list(x.sort(descending=True)) + list(x.sort()) + [x.argsort(descending=True)]

    both(case)


# ---------------------------------------------------------------- 7. creation with integer dtypes
@pytest.mark.parametrize(
    "args",
    [(3.1,), (-0.9, 2.1, 2.0), (0.5, 5.5, 1.5), (10.7, 0.2, -2.5), (0, 7, 2.9)],
    ids=str,
)
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_arange_with_an_integer_dtype_truncates_as_torch(args, dtype):
    both(lambda torch, F: torch.arange(*args, dtype=getattr(torch, dtype)))


def test_arange_of_int32_with_a_step_truncated_to_zero():
    both(lambda torch, F: torch.arange(0, 3, 0.5, dtype=torch.int32))  # torch: six zeros


@pytest.mark.parametrize("args", [(4.3, -3, 50), (0, 10, 4), (-7.9, 7.9, 6), (3.7, 9, 1)], ids=str)
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_linspace_with_an_integer_dtype_as_torch(args, dtype):
    both(lambda torch, F: torch.linspace(*args, dtype=getattr(torch, dtype)))


def test_linspace_of_uint8_counts_down_from_both_ends():
    both(lambda torch, F: torch.linspace(200.5, 3, 5, dtype=torch.uint8))


@pytest.mark.parametrize("args", [(0, 3, 0.5), (0, 3, 0), (5, 0, 1), (-3.5,), (-0.5,)], ids=str)
@pytest.mark.parametrize("dtype", ["long", "int32", "float32"])
def test_arange_refuses_a_zero_step_or_a_step_of_the_wrong_sign(args, dtype):
    def error(torch):
        try:
            torch.arange(*args, dtype=getattr(torch, dtype))
        except (ValueError, RuntimeError) as e:
            return type(e)
        return None

    assert error(mt) is error(torch)


# ---------------------------------------------------------------- 8. dtypes
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int32", "int16", "uint8"])
def test_tensor_of_a_numpy_array_keeps_its_dtype(dtype):
    both(lambda torch, F: torch.tensor(np.arange(6).reshape(2, 3).astype(dtype)))


def test_tensor_of_numpy_scalars_keeps_their_dtype():
    both(lambda torch, F: [torch.tensor(np.float64(1.5)), torch.tensor(np.int16(3))])


@pytest.mark.parametrize(
    "data",
    [
        [1.0, 2.5],
        [1.0, np.float64(2.0)],
        [np.float32(1.0), 2.0],
        [np.int32(1), 2],
        [np.int32(1), 2.5],
        [[1.0], [np.float64(2.0)]],
        [np.float16(1.0), 1],
        [True, 2],
        [np.zeros(2), np.ones(2)],
    ],
    ids=repr,
)
@pytest.mark.filterwarnings("ignore:Creating a tensor from a list of numpy.ndarrays")
def test_tensor_of_a_list_promotes_its_elements_as_torch(data):
    both(lambda torch, F: torch.tensor(data))


def test_clamp_of_float32_with_integer_tensor_bounds_stays_float32():
    def case(torch, F):
        x = torch.tensor([-2.0, 0.5, 3.0])
        lo, hi = torch.tensor(0, dtype=torch.int32), torch.tensor(2, dtype=torch.int32)
        return [x.clamp(lo, hi), torch.clamp(x, 0, 2), torch.tensor([-1, 5]).clamp(0.5, 2)]

    both(case)


# ---------------------------------------------------------------- 2. integers beside index tensors
INDEXES = {
    "int, slice, tensor": lambda torch: (0, slice(None), torch.tensor([0, 1, 2])),
    "0-d tensor, slice, tensor": lambda torch: (torch.tensor(1), slice(None), torch.tensor([2, 0])),
    "int, None, slice, tensor": lambda torch: (1, None, slice(None), torch.tensor([0, 2])),
    "int, slice, list": lambda torch: (1, slice(0, 2), [0, 2, 2]),
    "int, slice, mask": lambda torch: (0, slice(None), torch.tensor([True, False, True])),
    "slice, int, tensor": lambda torch: (slice(None), 1, torch.tensor([[0], [2]])),
    "tensor, int, tensor": lambda torch: (torch.tensor([[0], [1]]), 0, torch.tensor([0, 2, 1])),
    "tensor, slice, int": lambda torch: (torch.tensor([1, 0]), slice(1, None), 1),
    "ellipsis, int, tensor": lambda torch: (Ellipsis, 0, torch.tensor([2, 2, 0])),
}


@pytest.mark.parametrize("index", INDEXES.values(), ids=INDEXES.keys())
def test_mixed_integer_slice_tensor_index_values_and_gradient(index):
    def case(torch, F):
        y = torch.arange(18.0, dtype=torch.float64).reshape(2, 3, 3).requires_grad_()
        out = y[index(torch)]
        weights = torch.arange(1.0, out.numel() + 1.0, dtype=torch.float64).reshape(out.shape)
        (out * weights).sum().backward()
        return [out, y.grad]

    both(case)


@pytest.mark.parametrize("index", INDEXES.values(), ids=INDEXES.keys())
def test_mixed_integer_slice_tensor_index_assignment(index):
    def case(torch, F):
        y = torch.zeros(2, 3, 3)
        shape = y[index(torch)].shape
        y[index(torch)] = torch.arange(1.0, 1.0 + math.prod(shape)).reshape(shape)
        return y

    both(case)


def test_mixed_index_gradcheck():
    y = mt.randn(2, 3, 4, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda t: t[1, :, mt.tensor([0, 3, 3])], y)


def test_python_int_beside_a_uint8_tensor_wraps_as_torch():
    # found by the fuzzer's integer extremes: minitensor raised OverflowError
    def case(torch, F):
        x = torch.tensor([0, 1, 200], dtype=torch.uint8)
        return [x + -2, x - 3, x * 300, torch.tensor([5], dtype=torch.int32) + (2**31 + 1)]

    both(case)
