"""`.data` as torch's: a tensor sharing memory, not requiring grad, outside the graph, with the
in-place methods; `.numpy()` is the array. The same PyTorch code runs under both libraries
(`lib`), and a write through `.data` to a value the graph saved is refused at backward."""

import numpy as np
import pytest

import minitensor as mt

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _np(t):
    return t.detach().numpy()


def _both(program):
    return [_np(t) for t in program(torch)], [_np(t) for t in program(mt)]


def _same(program, tol=0.0):
    theirs, ours = _both(program)
    for i, (a, b) in enumerate(zip(theirs, ours)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"output {i}"
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol, err_msg=f"output {i}")


def test_data_is_a_tensor_sharing_memory_outside_the_graph():
    def program(lib):
        w = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        d = w.data
        assert isinstance(d, lib.Tensor) and not d.requires_grad and d.grad_fn is None
        assert d.is_leaf and d.shape == w.shape and d.dtype == w.dtype
        d[0, 0] = 10.0  # shares the memory
        y = (w.data * 2).sum()  # no graph: nothing requires grad
        assert not y.requires_grad
        return [w, d, y]

    _same(program)


def test_data_in_place_methods_edit_the_parameter():
    def program(lib):
        p = lib.tensor([1.0, -2.0, 3.0, -4.0], requires_grad=True)
        p.data.mul_(2).add_(1)
        p.data.clamp_(-3.0, 5.0)
        kept = p.data.clone()  # a copy: later edits do not reach it
        p.data.sub_(lib.ones(4), alpha=0.5)
        q = lib.zeros(4, requires_grad=True)
        q.data.fill_(7.0)
        r = lib.ones(3, requires_grad=True)
        r.data.zero_()
        return [p, kept, q, r]

    _same(program)


def test_random_in_place_initialisation_through_data():
    mt.manual_seed(0)
    p = mt.nn.Parameter(np.zeros((50, 40), np.float32))
    p.data.uniform_(-0.1, 0.1)
    a = p.numpy().copy()
    assert a.min() >= -0.1 and a.max() <= 0.1 and a.std() > 0.05
    p.data.normal_(0.0, 0.02)
    assert abs(p.numpy().std() - 0.02) < 0.005 and p.requires_grad
    mt.nn.init.xavier_uniform_(p.data)  # torch tutorials initialise this way
    bound = np.sqrt(6.0 / (50 + 40))
    assert np.abs(p.numpy()).max() <= bound and p.numpy().std() > bound / 3
    lin = mt.nn.Linear(4, 3)
    mt.nn.init.xavier_uniform_(lin.weight.data)
    mt.nn.init.zeros_(lin.bias.data)
    assert not lin.bias.numpy().any()


def test_annotated_transformer_style_uses():
    def program(lib):
        x = lib.log_softmax(lib.tensor([[1.0, 2.0, 0.5], [0.0, 0.1, 0.2]], requires_grad=True), -1)
        target = lib.tensor([2, 0])
        true_dist = x.data.clone()
        true_dist.fill_(0.1 / 2)
        true_dist.scatter_(1, target.data.unsqueeze(1), 0.9)
        mask = lib.nonzero(target.data == 0)
        true_dist.index_fill_(0, mask.squeeze(), 0.0)
        return [true_dist, mask]

    _same(program)


def test_assigning_data():
    def program(lib):
        p = lib.zeros(3, requires_grad=True)
        new = lib.tensor([1.0, 2.0, 3.0, 4.0])
        p.data = new  # p now holds new's memory (and its shape), as torch
        new[0] = 9.0
        assert p.requires_grad and p.shape == (4,)
        (p * p).sum().backward()
        return [p, p.grad]

    _same(program)
    p = mt.zeros(2, requires_grad=True)
    p.data = np.array([1.0, 2.0], np.float32)  # a numpy array works too
    assert p.numpy().tolist() == [1.0, 2.0]


def test_numpy_is_the_array():
    x = mt.tensor([1.0, 2.0])
    assert isinstance(x.numpy(), np.ndarray) and isinstance(x.data.numpy(), np.ndarray)
    assert np.shares_memory(x.numpy(), x.data.numpy())


def test_write_through_data_to_a_saved_value_is_refused_at_backward():
    # torch would use the edited values silently (its .data does not share the version counter)
    w = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (w * w).sum()  # saves w for backward
    w.data.mul_(10)
    with pytest.raises(RuntimeError, match="in place|modified|version"):
        loss.backward()
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = (x + 3).sum()  # an add saves no values
    x.data.zero_()
    y.backward()  # nothing saved was changed: fine
    assert x.grad.numpy().tolist() == [1.0, 1.0]


def test_data_in_place_is_not_refused_as_an_in_place_op_on_a_leaf():
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        w.mul_(2)  # on the leaf itself, outside no_grad: refused as before
    w.data.mul_(2)
    assert w.numpy().tolist() == [2.0, 4.0]


def test_optimizer_step_keeps_working_and_bumps_the_version():
    w = mt.nn.Parameter(np.ones(3, np.float32))
    opt = mt.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    before = w._version
    opt.step()
    assert w._version > before and w.numpy().tolist() == [0.0, 0.0, 0.0]


def test_function_api_still_gets_numpy_arrays():
    seen = []

    class Double(mt.Function):
        @staticmethod
        def forward(ctx, a):
            seen.append(type(a))
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            seen.append(type(grad))
            return grad * 2

    x = mt.tensor([1.0], requires_grad=True)
    Double.apply(x).sum().backward()
    assert seen == [np.ndarray, np.ndarray]
