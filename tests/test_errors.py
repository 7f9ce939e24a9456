"""Bad input gets an error that names the op and the shapes involved — and the module scope
when the op runs inside one — and a failing call leaves nothing half-updated."""

import re

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F


def x23():
    return mt.randn(2, 3, requires_grad=True)


# name: (call, exception type, the op's name, fragments the message must contain)
BAD_INPUT = {
    "matmul inner sizes": (
        lambda: mt.randn(8, 5, 64) @ mt.randn(8, 7, 32),
        ValueError,
        "matmul",
        ["(8, 5, 64)", "(8, 7, 32)", "64 and 7 differ"],
    ),
    "matmul 1-D inner sizes": (
        lambda: mt.randn(3) @ mt.randn(4),
        ValueError,
        "matmul",
        ["(3,)", "(4,)", "3 and 4 differ"],
    ),
    "matmul batch shapes": (
        lambda: mt.randn(2, 3, 4) @ mt.randn(5, 4, 2),
        ValueError,
        "matmul",
        ["(2, 3, 4)", "(5, 4, 2)", "batch"],
    ),
    "matmul of a scalar": (
        lambda: mt.randn(3) @ mt.tensor(2.0),
        ValueError,
        "matmul",
        ["(3,)", "()"],
    ),
    "add no broadcast": (
        lambda: x23() + mt.randn(4),
        ValueError,
        "add",
        ["(2, 3)", "(4,)", "broadcast"],
    ),
    "mul no broadcast": (
        lambda: x23() * mt.randn(3, 2),
        ValueError,
        "mul",
        ["(2, 3)", "(3, 2)", "broadcast"],
    ),
    "maximum no broadcast": (
        lambda: F.maximum(x23(), mt.randn(2)),
        ValueError,
        "maximum",
        ["(2, 3)", "(2,)"],
    ),
    "sum axis": (lambda: x23().sum(axis=2), ValueError, "sum", ["axis 2", "(2, 3)"]),
    "mean negative axis": (lambda: x23().mean(axis=-3), ValueError, "mean", ["axis -3", "(2, 3)"]),
    "max axis tuple": (lambda: x23().max(axis=(0, 5)), ValueError, "max", ["axis 5", "(2, 3)"]),
    "repeated axis": (lambda: x23().sum(axis=(1, -1)), ValueError, "sum", ["repeated", "(2, 3)"]),
    "var axis": (lambda: x23().var(axis=4), ValueError, "var", ["axis 4", "(2, 3)"]),
    "logsumexp axis": (lambda: x23().logsumexp(axis=2), ValueError, "logsumexp", ["(2, 3)"]),
    "argmax axis": (lambda: x23().argmax(axis=2), ValueError, "argmax", ["axis 2", "(2, 3)"]),
    "softmax axis": (lambda: F.softmax(x23(), axis=2), ValueError, "softmax", ["axis 2", "(2, 3)"]),
    "softmax of a scalar, axis 1": (
        lambda: F.softmax(mt.tensor(1.0), axis=1),
        IndexError,
        "softmax",
        ["axis 1", "()"],
    ),
    "log_softmax axis": (
        lambda: F.log_softmax(x23(), axis=-3),
        ValueError,
        "log_softmax",
        ["(2, 3)"],
    ),
    "swapaxes axis": (lambda: x23().swapaxes(0, 2), ValueError, "swapaxes", ["axis 2", "(2, 3)"]),
    "transpose axis": (
        lambda: x23().transpose(0, 3),
        ValueError,
        "transpose",
        ["axis 3", "(2, 3)"],
    ),
    "permute not a permutation": (
        lambda: x23().permute(0, 0),
        ValueError,
        "permute",
        ["(0, 0)", "(2, 3)"],
    ),
    "permute axis": (lambda: x23().permute(0, 3), ValueError, "permute", ["axis 3", "(2, 3)"]),
    "unsqueeze axis": (lambda: x23().unsqueeze(4), ValueError, "unsqueeze", ["axis 4", "(2, 3)"]),
    "squeeze axis": (lambda: x23().squeeze(2), ValueError, "squeeze", ["(2, 3)", "2"]),
    "flatten axis": (lambda: x23().flatten(3), ValueError, "flatten", ["axis 3", "(2, 3)"]),
    "concat axis": (
        lambda: mt.concat([x23(), x23()], axis=2),
        ValueError,
        "concat",
        ["axis 2", "(2, 3)"],
    ),
    "concat shapes": (
        lambda: mt.concat([x23(), mt.randn(3, 3)], axis=1),
        ValueError,
        "concat",
        ["(2, 3)", "(3, 3)"],
    ),
    "stack shapes": (
        lambda: mt.stack([x23(), mt.randn(3, 2)]),
        ValueError,
        "stack",
        ["(2, 3)", "(3, 2)"],
    ),
    "split sizes": (lambda: x23().split([1, 1], axis=1), ValueError, "split", ["[1, 1]", "(2, 3)"]),
    "chunk count": (lambda: x23().chunk(0), ValueError, "chunk", ["(2, 3)"]),
    "reshape size": (
        lambda: x23().reshape(4, 2),
        ValueError,
        "reshape",
        ["(2, 3)", "(4, 2)", "6 elements"],
    ),
    "view size": (lambda: x23().view(-1, 4), ValueError, "reshape", ["(2, 3)", "(-1, 4)"]),
    "expand": (lambda: x23().expand(4, 3), ValueError, "expand", ["(2, 3)", "(4, 3)"]),
    "getitem out of range": (lambda: x23()[5], IndexError, "getitem", ["5", "(2, 3)"]),
    "getitem too many indices": (lambda: x23()[0, 0, 0], IndexError, "getitem", ["(2, 3)"]),
    "masked_fill mask shape": (
        lambda: x23().masked_fill(mt.tensor([True, False]), 0.0),
        ValueError,
        "masked_fill",
        ["(2,)", "(2, 3)"],
    ),
    "masked_fill float mask": (
        lambda: x23().masked_fill(mt.zeros(2, 3), 0.0),
        TypeError,
        "masked_fill",
        ["bool", "(2, 3)"],
    ),
    "where shapes": (
        lambda: mt.where(mt.tensor([True, False]), x23(), 0.0),
        ValueError,
        "where",
        ["(2,)", "(2, 3)"],
    ),
    "tril of a vector": (lambda: mt.randn(3).tril(), ValueError, "tril", ["(3,)"]),
    "embedding float ids": (
        lambda: F.embedding(mt.tensor([0.0, 1.0]), mt.randn(5, 4)),
        TypeError,
        "embedding",
        ["integers", "float32", "(2,)"],
    ),
    "embedding id too large": (
        lambda: F.embedding(mt.tensor([[0, 7]]), mt.randn(5, 4)),
        IndexError,
        "embedding",
        ["id 7", "5 rows", "(1, 2)", "(5, 4)"],
    ),
    "embedding negative id": (
        lambda: F.embedding(mt.tensor([-1]), mt.randn(5, 4)),
        IndexError,
        "embedding",
        ["id -1", "(5, 4)"],
    ),
    "cross_entropy shapes": (
        lambda: F.cross_entropy(mt.randn(2, 3, 5), mt.tensor([[1, 2]])),
        ValueError,
        "cross_entropy",
        ["(2, 3, 5)", "(1, 2)"],
    ),
    "cross_entropy target range": (
        lambda: F.cross_entropy(mt.randn(2, 5), mt.tensor([1, 9])),
        IndexError,
        "cross_entropy",
        ["target 9", "5 classes", "(2,)"],
    ),
    "cross_entropy float targets": (
        lambda: F.cross_entropy(mt.randn(2, 5), mt.tensor([1.0, 2.0])),
        TypeError,
        "cross_entropy",
        ["integer", "(2, 5)"],
    ),
    "layer_norm shape": (
        lambda: F.layer_norm(x23(), 4),
        ValueError,
        "layer_norm",
        ["(2, 3)", "(4,)"],
    ),
    "layer_norm weight": (
        lambda: F.layer_norm(x23(), 3, weight=mt.ones(4)),
        ValueError,
        "layer_norm",
        ["(4,)", "(2, 3)"],
    ),
    "softmax mask": (
        lambda: F.softmax(x23(), mask=np.zeros((3, 2), bool)),
        ValueError,
        "softmax",
        ["(3, 2)", "(2, 3)"],
    ),
    "mse_loss shapes": (
        lambda: F.mse_loss(mt.randn(4, 1), mt.randn(4)),
        ValueError,
        "mse_loss",
        ["(4, 1)", "(4,)"],
    ),
}


def _check(info, op, fragments, scope=None):
    message = str(info.value)
    prefix = f"{op} in {scope}:" if scope else f"{op}:"
    assert message.startswith(prefix), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_names_the_op_and_shapes(name):
    call, kind, op, fragments = BAD_INPUT[name]
    with pytest.raises(kind) as info:
        call()
    _check(info, op, fragments)


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_inside_a_scope_names_the_scope(name):
    call, kind, op, fragments = BAD_INPUT[name]
    with pytest.raises(kind) as info:
        with mt.scope("decoder"):
            with mt.scope("layers.0"):
                call()
    _check(info, op, fragments, scope="decoder.layers.0")
    assert mt.current_scope() == ""  # the failing call left the scope stack clean


def test_matmul_error_reads_like_the_design_doc():
    with mt.scope("decoder.layers.0.cross_attn"):
        with pytest.raises(ValueError) as info:
            mt.randn(8, 5, 64) @ mt.randn(8, 7, 32)
    assert str(info.value) == (
        "matmul in decoder.layers.0.cross_attn: (8, 5, 64) @ (8, 7, 32) "
        "— inner sizes 64 and 7 differ"
    )


def test_errors_in_a_user_op_keep_the_original_traceback():
    class Buggy(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return x[10]  # a bug: IndexError inside forward

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(IndexError, match=r"^buggy: .*\(input shapes: \(3,\)\)") as info:
        Buggy.apply(mt.randn(3))
    assert isinstance(info.value.__cause__, IndexError)  # the original error, with its line


# ---------------------------------------------------------------------------- backward errors


def test_backward_on_a_non_scalar_without_grad():
    x = mt.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"backward.*single-element.*\(2, 3\)"):
        (x * 2).backward()


def test_backward_twice_names_the_node_and_its_scope():
    x = mt.randn(3, requires_grad=True)
    with mt.scope("encoder"):
        loss = x.exp().sum()
    loss.backward()
    with pytest.raises(RuntimeError) as info:
        loss.backward()
    message = str(info.value)
    assert "`sum` in encoder" in message and "test_errors.py" in message
    assert "retain_graph=True" in message


def test_backward_on_an_integer_or_constant_tensor():
    with pytest.raises(
        RuntimeError,
        match=r"backward: this tensor \(shape \(3,\)\) does not "
        r"require grad",
    ):
        mt.tensor([1, 2, 3]).backward(mt.ones(3))
    with pytest.raises(TypeError, match=r"requires_grad.*int64 of shape \(3,\)"):
        mt.tensor([1, 2, 3], requires_grad=True)


def test_a_backward_returning_the_wrong_shape_is_named():
    class NoUnbroadcast(mt.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, grad):
            return grad, grad  # forgot mt.unbroadcast for b

    a = mt.randn(2, 3, requires_grad=True)
    b = mt.randn(3, requires_grad=True)
    with pytest.raises(
        RuntimeError,
        match=r"`nounbroadcast`.*\(2, 3\) for input 1 of shape "
        r"\(3,\).*unbroadcast",
    ):
        NoUnbroadcast.apply(a, b).sum().backward()
    assert a.grad is None and b.grad is None  # nothing half-updated


def test_a_backward_returning_too_few_gradients_is_named():
    class OneGrad(mt.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(RuntimeError, match="`onegrad`.*1 gradients for 2 inputs"):
        OneGrad.apply(mt.randn(2, requires_grad=True), mt.randn(2)).sum().backward()


# ---------------------------------------------------------------------------- nothing half-updated


def test_failing_in_place_ops_change_nothing():
    x = mt.tensor([1.0, 2.0, 3.0])
    for bad in (
        lambda: x.add_(mt.ones(2)),
        lambda: x.mul_(np.ones((2, 3))),
        lambda: x.copy_(mt.ones(4)),
        lambda: x.__setitem__(5, 1.0),
    ):
        with pytest.raises((ValueError, IndexError)) as info:
            bad()
        assert "(3,)" in str(info.value)
        np.testing.assert_array_equal(x.numpy(), [1, 2, 3])
        assert x._version == 0


def test_a_freed_graph_error_comes_before_any_gradient_moves():
    # shared part freed by the first backward; the second graph reaches it after a leaf
    a = mt.randn(3, requires_grad=True)
    b = mt.randn(3, requires_grad=True)
    h = a.exp()
    h.sum().backward()
    a_grad = a.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="second time"):
        (h * b).sum().backward()
    assert b.grad is None
    np.testing.assert_array_equal(a.grad.numpy(), a_grad)


def test_the_version_check_comes_before_any_gradient_moves():
    a = mt.randn(3, requires_grad=True)
    b = mt.randn(3, requires_grad=True)
    c = mt.randn(3)
    loss = (a * 2).sum() + (b * c).sum()
    c.add_(1.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()
    assert a.grad is None and b.grad is None


def test_gradcheck_rejects_float32_and_non_contiguous_inputs():
    with pytest.raises(TypeError, match="float64"):
        mt.gradcheck(lambda x: x * 2, mt.randn(3, requires_grad=True))
    with pytest.raises(ValueError, match="no input requires grad"):
        mt.gradcheck(lambda x: x * 2, mt.randn(3, dtype=mt.float64))
    t = mt.Tensor._make(np.asfortranarray(np.ones((2, 3))), requires_grad=True)
    with pytest.raises(ValueError, match="contiguous"):
        mt.gradcheck(lambda x: x * 2, t)
    non_leaf = mt.randn(3, dtype=mt.float64, requires_grad=True) * 2
    with pytest.raises(ValueError, match="input 0 of shape \\(3,\\) was made by `mul`"):
        mt.gradcheck(lambda x: x * 2, non_leaf)


def test_error_message_prefix_is_not_doubled():
    with pytest.raises(ValueError) as info:
        mt.randn(2, 3).sum(axis=7)
    assert len(re.findall(r"\bsum\b", str(info.value))) == 1
