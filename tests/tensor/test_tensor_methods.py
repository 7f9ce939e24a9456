"""Tensor's op methods are the op functions themselves (minitensor/methods.py binds them), so
each has the function's real signature and docstring; and an op added with ``@export`` in its
ops file appears as F.x, mt.x and Tensor.x with no other edit."""

import inspect
import pathlib
import pydoc
import sys
import textwrap

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import methods
from minitensor.ops import _register


def _generic(fn):
    """A `(self, *args, **kwargs)` forwarder: nothing to read in help() or an editor.
    (``reshape(self, *shape: int | Sequence[int])`` is a real signature: one named, typed
    variadic parameter.)"""
    params = list(inspect.signature(fn).parameters.values())[1:]
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    if not params or any(p.kind not in variadic for p in params):
        return False
    typed = all(p.annotation not in (inspect.Parameter.empty, "Any") for p in params)
    return len(params) > 1 or not typed


def test_at_most_five_public_methods_lack_a_real_signature():
    public = {
        name: v
        for name, v in vars(mt.Tensor).items()
        if not name.startswith("_") and inspect.isfunction(v)
    }
    generic = sorted(name for name, v in public.items() if _generic(v))
    assert len(public) > 200
    assert len(generic) <= 5, generic


def test_help_of_sum_shows_its_parameters():
    text = pydoc.render_doc(mt.Tensor.sum, renderer=pydoc.plaintext)
    assert "keepdim" in text and "dtype" in text
    assert mt.Tensor.sum.__doc__ and mt.Tensor.sum.__doc__ == F.sum.__doc__


@pytest.mark.parametrize("name", ["sum", "exp", "reshape", "max", "masked_fill", "flip"])
def test_a_method_is_the_op_function(name):
    assert getattr(mt.Tensor, name) is getattr(F, name)


@pytest.mark.parametrize(
    ("method", "op"),
    [
        ("__truediv__", "div"),
        ("__matmul__", "matmul"),
        ("__getitem__", "getitem"),
        ("clamp", "clip"),
    ],
)
def test_an_operator_is_the_op_function(method, op):
    assert getattr(mt.Tensor, method) is getattr(F, op)


_OTHERS = {  # what `x <op> other` may be given
    "tensor of x's dtype": lambda: mt.tensor([[1.5, -2.0, 0.25]]),
    "tensor of another dtype": lambda: mt.tensor([1, 2, 3]),
    "float64 tensor": lambda: mt.tensor([1.0, 2.0, 3.0], dtype=mt.float64),
    "bool tensor": lambda: mt.tensor([True, False, True]),
    "number": lambda: 2.5,
    "int": lambda: 3,
    "array": lambda: np.array([1.0, 2.0, 3.0]),
}


@pytest.mark.parametrize(
    ("method", "op"), [("__add__", "add"), ("__sub__", "sub"), ("__mul__", "mul")]
)
@pytest.mark.parametrize("other", list(_OTHERS))
def test_an_operator_with_a_short_path_gives_what_its_function_gives(method, op, other):
    x = mt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    by_operator, by_function = (
        getattr(x, method)(_OTHERS[other]()),
        getattr(F, op)(x, _OTHERS[other]()),
    )
    assert by_operator.dtype == by_function.dtype and by_operator.shape == by_function.shape
    np.testing.assert_array_equal(by_operator.numpy(), by_function.numpy())


@pytest.mark.parametrize(
    ("method", "op"), [("__add__", "add"), ("__sub__", "sub"), ("__mul__", "mul")]
)
def test_an_operator_with_a_short_path_raises_what_its_function_raises(method, op):
    x, y = mt.randn(2, 3), mt.randn(4)
    with pytest.raises(mt.ShapeError) as by_operator:
        getattr(x, method)(y)
    with pytest.raises(mt.ShapeError) as by_function:
        getattr(F, op)(x, y)
    assert str(by_operator.value) == str(by_function.value) and "(2, 3) and (4,)" in str(
        by_operator.value
    )


def test_reflected_operators_swap_the_operands():
    x = mt.tensor([1.0, 2.0, 4.0])
    np.testing.assert_array_equal((10 - x).numpy(), [9.0, 8.0, 6.0])
    np.testing.assert_array_equal((8 / x).numpy(), [8.0, 4.0, 2.0])
    np.testing.assert_array_equal((2**x).numpy(), [2.0, 4.0, 16.0])
    assert (10 - x).grad_fn is None


def test_methods_with_their_own_arguments():
    x = mt.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(x.where(x > 2, -1.0).numpy(), [[-1, -1, -1], [3, 4, 5]])
    assert x.T.shape == (3, 2) and x.mT.shape == (3, 2)
    assert x.reshape_as(mt.zeros(3, 2)).shape == (3, 2)
    assert inspect.signature(mt.Tensor.where).parameters.keys() == {"self", "condition", "other"}


def test_tensor_module_has_no_stand_in_for_the_ops():
    """tensor.py stands below the ops (tests/project/test_layering.py checks its imports): no module
    global F rebound on first use, no lazy import of functional."""
    src = pathlib.Path(mt.__file__).with_name("tensor.py").read_text()
    assert "_FunctionalOnFirstUse" not in src and "import functional" not in src
    assert not hasattr(sys.modules["minitensor.tensor"], "F")


def test_an_exported_op_is_f_mt_and_a_tensor_method(tmp_path, monkeypatch):
    """Adding an op is two edits: the op's file (with @export) and its test."""
    (tmp_path / "mt_demo_op.py").write_text(
        textwrap.dedent(
            '''
            import numpy as np
            from minitensor.function import Function
            from minitensor.ops._register import export


            class Cube(Function):
                @staticmethod
                def forward(ctx, a):
                    ctx.save_for_backward(a)
                    return a**3

                @staticmethod
                def backward(ctx, grad):
                    (a,) = ctx.saved_tensors
                    return grad * 3 * a**2


            @export
            def mt_demo_cube(x):
                """x³, elementwise. x: any shape; returns the same shape."""
                return Cube.apply(x)
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("mt_demo_cube",)
    try:
        import mt_demo_op

        methods.publish(mt)
        fn = mt_demo_op.mt_demo_cube
        assert F.mt_demo_cube is fn and mt.mt_demo_cube is fn and mt.Tensor.mt_demo_cube is fn
        assert "mt_demo_cube" in F.__all__ and "mt_demo_cube" in mt.__all__
        x = mt.randn(4, dtype=mt.float64, requires_grad=True)
        assert mt.gradcheck(lambda t: t.mt_demo_cube(), x)
    finally:
        for name in names:
            for space in (F, mt, mt.Tensor):
                if hasattr(space, name):
                    delattr(space, name)
            for listed in (F.__all__, mt.__all__):
                if name in listed:
                    listed.remove(name)
            _register.PUBLIC.pop(name, None)
            _register.TENSOR_METHODS.pop(name, None)
        sys.modules.pop("mt_demo_op", None)


@pytest.mark.parametrize("field", ["name", "inputs", "scope", "source", "grad", "_released"])
def test_a_custom_ops_ctx_may_not_overwrite_the_nodes_fields(field):
    class Clobber(mt.Function):
        @staticmethod
        def forward(ctx, a):
            setattr(ctx, field, "mine")
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    with pytest.raises(AttributeError, match=rf"clobber \(.*Clobber\): ctx\.{field} is a field"):
        Clobber.apply(mt.randn(3, requires_grad=True))


def test_a_custom_ops_backward_is_guarded_too_and_its_own_fields_work():
    class Scale(mt.Function):
        @staticmethod
        def forward(ctx, a, k):
            ctx.save_for_backward(a)
            ctx.k = k  # the op's own value: allowed
            return a * k

        @staticmethod
        def backward(ctx, grad):
            ctx.scope = "elsewhere"
            return grad * ctx.k, None

    x = mt.randn(4, dtype=mt.float64, requires_grad=True)
    y = Scale.apply(x, 3.0)
    assert type(y.grad_fn) is mt.Context and y.grad_fn.name == "scale"  # plain once recorded
    with pytest.raises(AttributeError, match=r"ctx\.scope is a field"):
        y.sum().backward()


def test_built_in_ops_are_not_wrapped():
    """The guard is for ops written outside minitensor: the built-in ones keep their own
    forward, so the per-op path is unchanged."""
    from minitensor.ops.elementwise import Exp

    assert not hasattr(Exp.forward, "__wrapped__")
