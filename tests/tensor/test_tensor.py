"""mt.Tensor: attributes, constructors, dtype rules, conversions, repr, seeding."""

import numpy as np
import pytest

import minitensor as mt


def test_attributes():
    x = mt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True, name="x")
    assert isinstance(x.numpy(), np.ndarray)
    assert (
        x.shape == (2, 3)
        and x.ndim == 2
        and x.size() == (2, 3)
        and x.size(-1) == 3
        and x.numel() == 6
    )
    assert x.dtype == mt.float32
    assert x.requires_grad and x.grad is None and x.grad_fn is None and x.is_leaf
    assert x.name == "x"
    assert len(x) == 2
    y = x * 2
    assert y.grad_fn is not None and y.grad_fn.name == "mul" and not y.is_leaf
    assert y.name is None


def test_tensor_copies_its_data():
    a = np.ones(3, dtype=np.float32)
    t = mt.tensor(a)
    a[0] = 5
    assert t.numpy()[0] == 1
    assert mt.tensor(t).numpy() is not t.numpy()
    t64 = mt.tensor([1.0], dtype=mt.float64)
    assert mt.tensor(t64).dtype == mt.float64  # a Tensor keeps its dtype
    assert mt.tensor(t64, dtype=mt.float32).dtype == mt.float32


def test_numpy_item_tolist_float_int():
    x = mt.tensor([[1.5]])
    assert x.numpy() is x.numpy()
    assert x.item() == 1.5 and float(x) == 1.5 and int(mt.tensor(3)) == 3
    assert mt.tensor([1, 2]).tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"one-element.*\(2,\)"):
        mt.tensor([1.0, 2.0]).item()


def test_bool_of_a_tensor():
    assert bool(mt.tensor([True]))
    assert not bool(mt.tensor(0.0))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(mt.tensor([1.0, 2.0]))


def test_iteration_and_len():
    x = mt.tensor([[1.0, 2.0], [3.0, 4.0]])
    rows = list(x)
    assert len(rows) == 2 and rows[1].tolist() == [3.0, 4.0]
    with pytest.raises(TypeError, match="0-d"):
        len(mt.tensor(1.0))


def test_detach_and_requires_grad_():
    x = mt.randn(3)
    assert x.requires_grad_() is x and x.requires_grad
    y = (x * 2).detach()
    assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(RuntimeError, match="detach"):
        (x * 2).requires_grad_(False)
    x.requires_grad_(False)
    assert not x.requires_grad


def test_astype_and_conversions():
    x = mt.tensor([1.7, -2.2])
    assert x.double().dtype == mt.float64
    assert x.long().tolist() == [1, -2]
    assert x.astype(mt.float32) is x  # no-op
    assert x.to(mt.float64).dtype == mt.float64
    c = x.clone()
    assert c.numpy() is not x.numpy() and c.tolist() == x.tolist()


def test_repr():
    x = mt.tensor([1.0, 2.0], requires_grad=True, name="w")
    r = repr(x)
    assert r.startswith("tensor([1., 2.]") and "requires_grad=True" in r and "name='w'" in r
    assert "grad_fn=<mul>" in repr(x * 2)
    assert "dtype=float64" in repr(mt.tensor([1.0], dtype=mt.float64))
    assert "dtype" not in repr(mt.tensor([1]))
    big = repr(mt.zeros(1000))
    assert "..." in big and len(big) < 200


# ---------------------------------------------------------------------------- constructors


def test_zeros_ones_full_eye_arange():
    assert mt.zeros(2, 3).tolist() == [[0, 0, 0], [0, 0, 0]]
    assert mt.zeros((2, 3)).shape == (2, 3)
    assert mt.ones(4).tolist() == [1, 1, 1, 1]
    assert mt.full((2, 2), 7.0).tolist() == [[7, 7], [7, 7]]
    assert mt.full(3, 2).dtype == mt.int64
    assert mt.full((2,), True).dtype == mt.bool_
    np.testing.assert_array_equal(mt.eye(3).numpy(), np.eye(3))
    assert mt.eye(2, 3).shape == (2, 3)
    assert mt.arange(4).tolist() == [0, 1, 2, 3] and mt.arange(4).dtype == mt.int64
    assert mt.arange(1, 7, 2).tolist() == [1, 3, 5]
    assert mt.arange(3, dtype=mt.float64).dtype == mt.float64


def test_like_constructors():
    t = mt.randn(2, 3, dtype=mt.float64)
    for make in (mt.zeros_like, mt.ones_like, mt.randn_like, mt.rand_like):
        out = make(t)
        assert out.shape == (2, 3) and out.dtype == mt.float64
    assert mt.full_like(t, 2.5).tolist() == [[2.5] * 3] * 2
    assert mt.zeros_like(mt.arange(3)).dtype == mt.int64
    assert mt.ones_like(t, dtype=mt.float32).dtype == mt.float32


def test_constructors_take_requires_grad_and_name():
    for t in (
        mt.zeros(2, requires_grad=True, name="a"),
        mt.ones(2, requires_grad=True, name="a"),
        mt.randn(2, requires_grad=True, name="a"),
        mt.rand(2, requires_grad=True, name="a"),
        mt.full((2,), 1.0, requires_grad=True, name="a"),
        mt.tensor([1.0], requires_grad=True, name="a"),
    ):
        assert t.requires_grad and t.name == "a"
    assert mt.randint(0, 5, (3,), name="ids").name == "ids"


def test_random_ranges():
    r = mt.rand(1000)
    assert 0 <= r.numpy().min() and r.numpy().max() < 1
    ids = mt.randint(2, 5, (10, 10))
    assert ids.dtype == mt.int64 and ids.numpy().min() >= 2 and ids.numpy().max() < 5
    n = mt.randn(10_000)
    assert abs(n.numpy().mean()) < 0.05 and abs(n.numpy().std() - 1) < 0.05


def test_manual_seed_makes_every_random_op_reproducible():
    import minitensor.functional as F

    def draw():
        return (
            mt.randn(3).tolist(),
            mt.rand(2).tolist(),
            mt.randint(0, 100, 4).tolist(),
            F.dropout(mt.ones(8), 0.5).tolist(),
        )

    mt.manual_seed(42)
    first = draw()
    mt.manual_seed(42)
    assert draw() == first
    mt.manual_seed(43)
    assert draw() != first


def test_rng_state_round_trip():
    mt.manual_seed(5)
    state = mt.get_rng_state()
    a = mt.randn(4).tolist()
    mt.set_rng_state(state)
    assert mt.randn(4).tolist() == a
    with pytest.raises(ValueError, match="PCG64"):
        mt.set_rng_state({"bit_generator": "MT19937"})


def test_unsupported_data_is_refused():
    with pytest.raises(TypeError, match="dtype"):
        mt.tensor(["a", "b"])
    with pytest.raises(TypeError, match="dtype"):
        mt.tensor([1 + 2j])


def test_numpy_ints_keep_their_dtype_python_ints_become_int64():
    assert mt.tensor(np.array([1, 2], dtype=np.int32)).dtype == mt.int32
    assert mt.tensor([1, 2]).dtype == mt.int64
    assert mt.tensor(np.array([1, 2], dtype=np.int32), dtype=mt.int64).dtype == mt.int64


def test_numpy_functions_see_the_data():
    x = mt.tensor([[1.0, 2.0]])
    np.testing.assert_array_equal(np.asarray(x), [[1.0, 2.0]])
    assert np.asarray(x, dtype=np.float64).dtype == np.float64


def test_numpy_ufuncs_refuse_tensors_instead_of_leaving_the_graph():
    t = mt.randn(3, requires_grad=True)
    with pytest.raises(TypeError):
        np.exp(t)  # would silently drop out of autograd otherwise
    a = np.ones(3, dtype=np.float32)
    y = a + t  # numpy defers to Tensor.__radd__: still in the graph
    assert isinstance(y, mt.Tensor) and y.grad_fn is not None
    assert np.asarray(t).shape == (3,)  # explicit conversion still works


def test_from_numpy_wraps_without_copying_and_keeps_the_dtype():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = mt.from_numpy(a)
    assert t.numpy() is a and t.dtype == np.float64 and not t.requires_grad
    a[0, 0] = 7.0
    assert t.numpy()[0, 0] == 7.0
    with pytest.raises(TypeError, match="from_numpy: expects a numpy array"):
        mt.from_numpy([1.0, 2.0])
    with pytest.raises(TypeError, match="only floating-point tensors can require"):
        mt.from_numpy(np.arange(3), requires_grad=True)
