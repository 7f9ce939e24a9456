"""The backward engine: graph shapes (chains, reuse, diamonds), gradient accumulation,
retain_graph, gradient modes, the in-place version check, the step-through, retain_grad."""

import sys

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F


def test_a_chain_of_10000_ops_backwards_without_recursion():
    x = mt.tensor(1.0, dtype=mt.float64, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    assert 10_000 > sys.getrecursionlimit() // 2  # deep enough to break a recursive walk
    y.backward()
    np.testing.assert_allclose(x.grad.item(), 1.0001**10_000, rtol=1e-9)


def test_x_times_x_accumulates_both_uses():
    x = mt.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())


def test_a_leaf_used_many_times_sums_its_shares_without_touching_another_nodes_gradient():
    # a + h sends the one gradient array to both a (a leaf: its first share) and h's node;
    # the leaf's later shares are added to a sum of its own, in place, never to that array
    a = mt.tensor([1.0, 2.0], dtype=mt.float64, requires_grad=True)
    w = mt.tensor([3.0, -1.0], dtype=mt.float64, requires_grad=True)
    h = w * 2.0
    out = (a + h) * 5.0 + a * 7.0 + a * 11.0 + a
    out.retain_grad()
    out.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [24.0, 24.0])
    np.testing.assert_array_equal(w.grad.numpy(), [10.0, 10.0])
    np.testing.assert_array_equal(out.grad.numpy(), [1.0, 1.0])


def test_diamond_graph():
    # x → a, b → c: both paths carry gradient into x
    x = mt.tensor(0.7, dtype=mt.float64, requires_grad=True)
    a = x.exp()
    b = x * 3.0
    c = a * b
    c.backward()
    v = 0.7
    np.testing.assert_allclose(x.grad.item(), np.exp(v) * 3 * v + np.exp(v) * 3)


def test_reused_intermediate():
    x = mt.tensor([0.5, 1.5], dtype=mt.float64, requires_grad=True)
    h = x.tanh()  # used three times below
    out = (h * h + h.exp() * h).sum()
    out.backward()
    t = np.tanh(x.numpy())
    dh = 2 * t + np.exp(t) * t + np.exp(t)
    np.testing.assert_allclose(x.grad.numpy(), dh * (1 - t * t))


def test_unused_branch_gets_no_gradient():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = mt.tensor([3.0, 4.0], requires_grad=True)
    unused = y * 2  # noqa: F841  (not part of the loss)
    (x * 3).sum().backward()
    assert y.grad is None
    np.testing.assert_array_equal(x.grad.numpy(), 3)


def test_backward_without_grad_needs_a_single_element_output():
    x = mt.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"single-element.*shape \(3,\)"):
        (x * 2).backward()
    assert x.grad is None
    (x * 2).backward(mt.ones(3))  # an explicit gradient is fine
    np.testing.assert_array_equal(x.grad.numpy(), 2)
    (x * 2).sum(keepdims=True).reshape(1, 1).backward()  # one element of any shape is fine
    np.testing.assert_array_equal(x.grad.numpy(), 4)


def test_backward_grad_of_the_wrong_shape_is_an_error():
    x = mt.randn(3, requires_grad=True)
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        (x * 2).backward(np.ones(2))


def test_second_backward_through_a_freed_graph_raises():
    x = mt.randn(3, requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    grad = x.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), grad)  # nothing half-updated


def test_retain_graph_allows_a_second_backward_and_grads_accumulate():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * 2 * x.numpy())


def test_grads_accumulate_across_backward_calls_until_zeroed():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    for i in range(3):
        (x * 3).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), 3 * (i + 1))
    x.zero_grad()
    assert x.grad is None
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 3)
    x.grad = None
    (x * 5).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 5)


def test_grad_is_a_tensor_of_the_leaf_dtype_and_shape():
    x = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    (x.sum(axis=0) * 2.0).sum().backward()
    assert isinstance(x.grad, mt.Tensor)
    assert x.grad.shape == (2, 3) and x.grad.dtype == mt.float64
    assert not x.grad.requires_grad


def test_no_grad_builds_no_graph():
    x = mt.randn(3, requires_grad=True)
    with mt.no_grad():
        y = x * 2
        assert not mt.is_grad_enabled()
    assert mt.is_grad_enabled()
    assert y.grad_fn is None and not y.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_no_grad_as_a_decorator_with_and_without_parentheses():
    x = mt.randn(3, requires_grad=True)

    @mt.no_grad()
    def f(t):
        return t * 2

    @mt.no_grad
    def g(t):
        return t * 2

    assert f(x).grad_fn is None and g(x).grad_fn is None
    assert (x * 2).grad_fn is not None  # the decorator restores the mode


def test_enable_grad_inside_no_grad():
    x = mt.randn(3, requires_grad=True)
    with mt.no_grad():
        with mt.enable_grad():
            y = x * 2
        z = x * 2
    assert y.grad_fn is not None and z.grad_fn is None

    @mt.enable_grad()
    def f(t):
        return t * 2

    with mt.no_grad():
        assert f(x).requires_grad


def test_no_grad_restores_the_mode_after_an_exception():
    with pytest.raises(ZeroDivisionError):
        with mt.no_grad():
            _ = 1 / 0
    assert mt.is_grad_enabled()


def test_detach_leaves_the_graph_and_shares_data():
    x = mt.randn(3, requires_grad=True)
    y = (x * 2).detach()
    assert y.grad_fn is None and not y.requires_grad
    z = x * 2
    assert np.shares_memory(z.detach().numpy(), z.numpy())


# ---------------------------------------------------------------------------- in-place safety


def test_modifying_a_saved_input_in_place_is_caught_at_backward():
    w = mt.randn(3, requires_grad=True)
    x = mt.randn(3)
    y = (w * x).sum()  # Mul saved x
    x.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"`mul`.*modified in place.*version 0 -> 1"):
        y.backward()
    assert w.grad is None


def test_modifying_a_saved_output_in_place_is_caught():
    w = mt.randn(3, requires_grad=True)
    e = w.exp()  # Exp saves its output
    out = e.sum()
    with mt.no_grad():
        e.add_(1.0)
    with pytest.raises(RuntimeError, match="its output of `exp`"):
        out.backward()


def test_a_view_shares_the_version_counter():
    w = mt.randn(2, 3, requires_grad=True)
    x = mt.randn(2, 3)
    y = (w * x).sum()  # saves x
    view = x.reshape(6)
    view[0] = 5.0  # writes x's memory through the view
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()

    x2 = mt.randn(2, 3)
    y2 = (w * x2).sum()
    x2.T.mul_(3.0)  # a transpose is a view too
    with pytest.raises(RuntimeError, match="modified in place"):
        y2.backward()

    x3 = mt.randn(2, 3)
    y3 = (w * x3).sum()
    x3[0].zero_()  # basic indexing gives a view
    with pytest.raises(RuntimeError, match="modified in place"):
        y3.backward()


def test_a_copy_does_not_share_the_version_counter():
    w = mt.randn(2, 3, requires_grad=True)
    x = mt.randn(2, 3)
    y = (w * x).sum()
    x[[0, 1]].zero_()  # advanced indexing copies: x is untouched
    x.T.reshape(6).zero_()  # reshaping a transpose copies too
    y.backward()
    np.testing.assert_allclose(w.grad.numpy(), x.numpy())


def test_a_saved_reshaped_input_is_tracked():
    # layer_norm saves a reshaped view of its input; modifying the input is still caught
    x = mt.randn(2, 4)
    w = mt.ones(4, requires_grad=True)
    y = F.layer_norm(x, 4, weight=w).sum()
    x.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()


def test_in_place_change_of_a_tensor_that_requires_grad_is_refused():
    w = mt.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="add_.*requires grad"):
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="__setitem__"):
        w[0] = 1.0
    with mt.no_grad():  # as optimizers do
        w.add_(1.0)
    assert w._version == 1


def test_in_place_ops_update_values():
    x = mt.zeros(3)
    x.add_(mt.ones(3), alpha=2.0).mul_(3.0).sub_(1.0).div_(5.0)
    np.testing.assert_allclose(x.numpy(), 1.0)
    x.fill_(7.0)
    np.testing.assert_array_equal(x.numpy(), 7)
    x.copy_(mt.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.numpy(), [1, 2, 3])
    x.zero_()
    np.testing.assert_array_equal(x.numpy(), 0)
    assert x._version == 7


# ---------------------------------------------------------------------------- integer tensors


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(TypeError, match=r"int64 of shape \(2,\)"):
        mt.tensor([1, 2], requires_grad=True)
    ids = mt.tensor([1, 2])
    with pytest.raises(TypeError, match="floating-point"):
        ids.requires_grad_()
    with pytest.raises(TypeError, match="bool"):
        mt.tensor([True], requires_grad=True)


def test_backward_through_ops_with_integer_operands():
    x = mt.randn(3, requires_grad=True)
    ids = mt.tensor([1, 2, 3])
    (x * ids).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 2, 3])


# ---------------------------------------------------------------------------- step-through


def _model():
    x = mt.randn(4, 3, dtype=mt.float64, requires_grad=True, name="x")
    w = mt.randn(3, 2, dtype=mt.float64, requires_grad=True, name="w")
    b = mt.randn(2, dtype=mt.float64, requires_grad=True, name="b")
    h = F.relu(x @ w + b)
    loss = (h * h).mean() + F.softmax(h).sum() * 0.1
    return loss, (x, w, b)


def test_backward_steps_consumed_fully_equals_backward():
    mt.manual_seed(1)
    loss, leaves = _model()
    loss.backward()
    expected = [t.grad.numpy().copy() for t in leaves]

    mt.manual_seed(1)
    loss, leaves = _model()
    steps = list(loss.backward_steps())
    for t, g in zip(leaves, expected):
        np.testing.assert_array_equal(t.grad.numpy(), g)
    assert [s.index for s in steps] == list(range(len(steps)))
    assert steps[0].op == "add" and steps[0].total == len(steps)
    assert {s.op for s in steps} >= {"matmul", "relu", "softmax", "mean", "mul"}
    for s in steps:
        assert len(s.grad_inputs) == len(s.node.inputs)
        assert s.grad_output.shape == s.node.out_shape


def test_backward_steps_checks_its_arguments_at_once():
    x = mt.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="single-element"):
        (x * 2).backward_steps()  # raises before any step is requested


def test_nodes_record_name_scope_source_and_shapes():
    x = mt.randn(2, 3, requires_grad=True)
    with mt.scope("block"):
        with mt.scope("inner"):
            y = x.exp()  # the line the node points at
    node = y.grad_fn
    assert node.name == "exp"
    assert node.scope == "block.inner"
    assert (
        node.source[0] == __file__
        and node.source_line() == "y = x.exp()  # the line the node points at"
    )
    assert node.out_shape == (2, 3) and node.out_dtype == mt.float32
    assert node.inputs[0] is x
    assert "block.inner" in node.where() and "test_autograd.py" in node.where()
    assert mt.current_scope() == ""


def test_retain_grad_keeps_an_intermediate_gradient():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.numpy())
    np.testing.assert_allclose(x.grad.numpy(), 2 * h.numpy() * 3)


def test_a_failing_backward_leaves_every_grad_as_it_was():
    class Broken(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise ArithmeticError("a bug in backward")

    a = mt.tensor([1.0], requires_grad=True)
    b = mt.tensor([2.0], requires_grad=True)
    a.grad = mt.tensor([10.0])
    loss = (a * 3 + Broken.apply(b)).sum()  # a's gradient arrives before Broken runs
    with pytest.raises(ArithmeticError):
        loss.backward()
    np.testing.assert_array_equal(a.grad.numpy(), [10.0])
    assert b.grad is None


def test_backward_on_a_leaf():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    x.backward(mt.tensor([3.0, 4.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [3, 4])


def test_anomaly_mode_names_the_op():
    x = mt.tensor([-1.0, 1.0], requires_grad=True)
    with mt.detect_anomaly():
        with pytest.raises(FloatingPointError, match="`log`.*NaN"):
            with mt.scope("here"):
                x.log()


def test_backward_frees_saved_arrays_unless_retain_graph():
    x = mt.randn(3, requires_grad=True)
    y = x.exp()
    loss = (y * y).sum()
    loss.backward(retain_graph=True)
    assert len(y.grad_fn.saved_tensors) == 1  # still there
    loss.backward()
    assert y.grad_fn._saved == () and loss.grad_fn.inputs[0].grad_fn._saved == ()
    with pytest.raises(RuntimeError, match="saved tensors were freed"):
        _ = y.grad_fn.saved_tensors


def test_backward_step_done_is_a_snapshot_of_its_moment():
    x = mt.randn(3, requires_grad=True)
    loss = ((x * 2).exp() + x).sum()
    steps = list(loss.backward_steps())
    for k, step in enumerate(steps):
        # each kept step still tells how far the walk had got when it was taken
        assert len(step.done) == k + 1
        assert id(step.node) in step.done
        assert all(id(later.node) not in step.done for later in steps[k + 1 :])


# --------------------------------------------------------------------------- saved constants
def _masked_fill():
    x = mt.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    m = mt.tensor([True, False, False, False])
    return F.masked_fill(x, m, 0.0), m, "input 1", "masked_fill"


def _cross_entropy():
    logits = mt.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, 1.0]], requires_grad=True)
    targets = mt.tensor([0, 2])
    return F.cross_entropy(logits, targets), targets, "input 1", "cross_entropy"


def _embedding():
    table = mt.randn(5, 3, requires_grad=True)
    ids = mt.tensor([[0, 4], [4, 1]])
    return F.embedding(ids, table), ids, "input 0", "embedding"


def _getitem():
    x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    idx = mt.tensor([0, 0, 2])
    return x[idx], idx, "argument `index`", "getitem"


def _getitem_in_tuple():
    x = mt.randn(3, 4, requires_grad=True)
    idx = mt.tensor([1, 3])
    return x[:, idx], idx, r"argument `index`\[1\]", "getitem"


def _where():
    a = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    cond = mt.tensor([True, False, True])
    return mt.where(cond, a, a * 2.0), cond, "input 0", "where"


@pytest.mark.parametrize(
    "build", [_masked_fill, _cross_entropy, _embedding, _getitem, _getitem_in_tuple, _where]
)
def test_editing_a_saved_non_differentiable_input_in_place_is_caught(build):
    with mt.scope("block"):
        y, const, what, op = build()
    const.copy_(const.numpy()[::-1].copy() if const.ndim == 1 else const.numpy()[::-1, ::-1].copy())
    with pytest.raises(
        RuntimeError,
        match=rf"modified by an inplace operation: {what} of "
        rf"`{op}` in block",
    ):
        y.sum().backward()


def test_masked_fill_after_mask_fill_does_not_give_a_silently_wrong_gradient():
    x = mt.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    m = mt.tensor([True, False, False, False])
    y = x.masked_fill(m, 0.0)
    m.fill_(False)
    with pytest.raises(RuntimeError, match="input 1 of `masked_fill`.*bool of shape"):
        y.sum().backward()
    assert x.grad is None


def test_a_constant_edited_after_backward_is_fine():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    m = mt.tensor([True, False])
    x.masked_fill(m, 0.0).sum().backward()
    m.fill_(False)  # the graph is gone: nothing to protect
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0])


def test_bump_version_makes_backward_refuse_a_stale_graph():
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    with mt.no_grad():
        w.numpy()[...] = 0.0  # an update by hand, as an optimizer does
        assert w.bump_version() is w
    with pytest.raises(RuntimeError, match="input 0 of `mul`.*modified in place"):
        loss.backward()


def test_calling_an_op_class_like_a_function_says_to_use_apply():
    class GELUTanh(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return x

    with pytest.raises(TypeError, match=r"GELUTanh\(\.\.\.\) is an op class.*GELUTanh\.apply\(x\)"):
        GELUTanh(mt.randn(3))


def test_backward_visits_the_nodes_newest_first_each_after_every_node_that_uses_it():
    x = mt.randn(3, requires_grad=True)
    a = x * 2
    b = a + 1
    d = (a * b + a).sum()  # a has three users, made after it in three different places
    order = mt.autograd.topological_order(d.grad_fn)
    numbers = [n._seq for n in order]
    assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(order)
    position = {id(n): i for i, n in enumerate(order)}
    for n in order:
        for t in n.inputs:
            if t is not None and t.grad_fn is not None:
                assert position[id(t.grad_fn)] > position[id(n)]  # its users ran before it
    assert [s.node for s in d.backward_steps(retain_graph=True)] == order
    np.testing.assert_allclose(x.grad.numpy(), 8 * x.numpy() + 4, rtol=1e-6)  # d/dx Σ 2x(2x+1) + 2x
    d.backward()  # the same walk: the same gradient again
    np.testing.assert_allclose(x.grad.numpy(), 2 * (8 * x.numpy() + 4), rtol=1e-6)


def test_a_backward_that_fails_half_way_has_written_no_grad_and_run_no_leaf_hook():
    w = mt.randn(3, requires_grad=True)
    seen = []
    w.register_hook(lambda g: seen.append(g))
    h = w * 2
    loss = (h.sin() + w).sum()  # w's share (from the add) arrives before the walk meets sin
    h.mul_(3)  # what sin saved changes
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward_steps()  # the step-through looks at the whole graph first
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()  # backward() finds it when it reaches sin
    assert w.grad is None and seen == []
