"""What the engine's per-op bookkeeping must still give after it was made cheaper (issue 23):
the user's source line (kept as a code object and instruction offset, its line number found
and formatted when read), the
in-place check's message (written only when it fails), fresh outputs for ops that are not
views (tested by identity for arrays that own their memory), node hooks, and no node at all
when no gradient is wanted."""

import inspect
import sys

import numpy as np
import pytest

import minitensor as mt


def _line_of(marker):
    """The line number in this file of the line ending with the comment `marker`."""
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i + 1 for i, text in enumerate(lines) if text.endswith(f"# {marker}"))


def test_a_node_reports_the_users_file_line_and_function():
    x = mt.randn(3, requires_grad=True)
    y = x * 2.0  # the line
    assert y.grad_fn.source == (
        __file__,
        _line_of("the line"),
        inspect.currentframe().f_code.co_name,
    )
    assert y.grad_fn.source_line() == "y = x * 2.0  # the line"
    assert "test_per_op_cost.py:" in y.grad_fn.where()
    y.grad_fn.source = ("model.py", 7, "forward")  # a node's source can still be set
    assert y.grad_fn.source == ("model.py", 7, "forward")
    y.grad_fn.source = None
    assert y.grad_fn.source is None and "created at" not in y.grad_fn.where()


def test_line_at_gives_the_line_a_frame_reports():
    from minitensor.source import line_at

    def where_am_i():
        f = sys._getframe(1)
        return line_at(f.f_code, f.f_lasti), f.f_lineno

    first = where_am_i()
    spread = (
        1,
        where_am_i(),  # a call on the second line of a statement
    )[1]
    assert first[0] == first[1] and spread[0] == spread[1] == _line_of(
        "a call on the second line of a statement"
    )


def test_a_custom_ops_node_reports_the_line_that_applied_it():
    class Twice(mt.Function):
        @staticmethod
        def forward(ctx, a):
            return 2 * a

        @staticmethod
        def backward(ctx, grad):
            return 2 * grad

    x = mt.randn(3, requires_grad=True)
    y = Twice.apply(x)  # applied here
    assert y.grad_fn.source[:2] == (__file__, _line_of("applied here"))


@pytest.mark.parametrize("where", ["input", "keyword"])
def test_the_inplace_check_names_the_input_dtype_and_shape(where):
    class Scale(mt.Function):
        @staticmethod
        def forward(ctx, a, *, by):
            ctx.save_for_backward(by)
            return a * by

        @staticmethod
        def backward(ctx, grad):
            (by,) = ctx.saved_tensors
            return grad * by

    class Mul(mt.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(b)
            return a * b

        @staticmethod
        def backward(ctx, grad):
            (b,) = ctx.saved_tensors
            return grad * b, None

    x = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    s = mt.randn(2, 3, dtype=mt.float64)
    y = Scale.apply(x, by=s) if where == "keyword" else Mul.apply(x, s)
    s.add_(1.0)
    what = "argument `by`" if where == "keyword" else "input 1"
    with pytest.raises(RuntimeError, match=rf"{what} of `\w+`.*float64 of shape \(2, 3\)"):
        y.sum().backward()


def test_the_inplace_check_follows_a_saved_view_of_an_input():
    class SumRows(mt.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a.reshape(-1))  # a view of the input, not the input
            return a.sum(axis=1)

        @staticmethod
        def backward(ctx, grad):
            (flat,) = ctx.saved_tensors
            return np.broadcast_to(grad[:, None], (grad.shape[0], flat.size // grad.shape[0]))

    x = mt.randn(2, 3, requires_grad=True)
    h = x * 1.0
    y = SumRows.apply(h)
    with mt.no_grad():
        h.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"input 0 of `sumrows`.*float32 of shape \(2, 3\)"):
        y.sum().backward()


@pytest.mark.parametrize("kind", ["itself", "a view", "the base of a view"])
def test_an_op_that_returns_input_memory_returns_a_copy(kind):
    base = np.arange(6.0)
    given = {"itself": base, "a view": base, "the base of a view": base[1:]}[kind]

    class Leak(mt.Function):
        @staticmethod
        def forward(ctx, a):
            if kind == "itself":
                return a
            if kind == "a view":
                return a[::2]
            return a.base

        @staticmethod
        def backward(ctx, grad):
            return None

    x = mt.tensor(given)
    before = base.copy()
    y = Leak.apply(x)
    y.numpy()[...] = -1.0
    np.testing.assert_array_equal(base, before)


def test_a_hook_on_an_intermediate_still_sees_and_replaces_its_gradient():
    x = mt.randn(4, dtype=mt.float64, requires_grad=True)
    h = x * 3.0
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 10.0)
    (h * h).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * h.numpy())
    np.testing.assert_allclose(x.grad.numpy(), 10.0 * 2 * h.numpy() * 3.0)


@pytest.mark.parametrize("mode", ["no_grad", "no input requires grad"])
def test_no_node_is_recorded_when_no_gradient_is_wanted(mode):
    x = mt.randn(3, requires_grad=mode == "no_grad")
    if mode == "no_grad":
        with mt.no_grad():
            y = x * x + x
    else:
        y = x * x + x
    assert y.grad_fn is None and not y.requires_grad


def test_backward_and_the_step_through_leave_the_same_gradients():
    mt.manual_seed(0)
    x = mt.randn(3, 3, dtype=mt.float64, requires_grad=True)
    w = mt.randn(3, 3, dtype=mt.float64, requires_grad=True)

    def loss():
        return ((x @ w).tanh() * x).sum()

    loss().backward()
    grads = x.grad.numpy().copy(), w.grad.numpy().copy()
    x.grad = w.grad = None
    steps = list(mt.autograd.backward_steps(loss()))
    assert steps and all(s.total == len(steps) for s in steps)
    np.testing.assert_array_equal(x.grad.numpy(), grads[0])
    np.testing.assert_array_equal(w.grad.numpy(), grads[1])


# ---- the short path of two same-dtype tensors (function.apply_binary) -----------------------


def _mul_entries(x, y):
    """x times y through each way a user spells it, each on a line of its own."""
    return {
        "operator": x * y,  # via the operator
        "method": x.mul(y),  # via the method
        "function": mt.mul(x, y),  # via the function
        "add with alpha": mt.add(x, y, alpha=2.0),  # via add's alpha
    }


def test_the_short_path_reports_the_users_line_for_every_spelling():
    x = mt.randn(3, requires_grad=True)
    y = mt.randn(3, requires_grad=True)
    h = x * 2.0  # an intermediate, so both kinds of input are met
    lines = {
        "operator": "via the operator",
        "method": "via the method",
        "function": "via the function",
        "add with alpha": "via add's alpha",
    }
    for operand in (y, h):
        made = _mul_entries(x, operand)
        for how, marker in lines.items():
            src = made[how].grad_fn.source
            assert src[:2] == (__file__, _line_of(marker)) and src[2] == "_mul_entries", how


def test_an_op_called_inside_minitensor_reports_the_users_line():
    # lerp computes through the public ops: the node's line is still the user's call
    x, y = mt.randn(3, requires_grad=True), mt.randn(3, requires_grad=True)
    out = mt.lerp(x, y, mt.full((3,), 0.5))  # lerp here
    assert out.grad_fn.source[:2] == (__file__, _line_of("lerp here"))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("requires", [(True, True), (True, False), (False, True)])
def test_the_short_path_makes_the_node_apply_makes(op, requires):
    from minitensor.ops import elementwise as E

    cls = {"add": E.Add, "sub": E.Sub, "mul": E.Mul, "div": E.Div}[op]
    leaf = mt.randn(2, 3, dtype=mt.float64, requires_grad=requires[0])
    x = leaf * 1.0  # an intermediate when leaf requires grad
    y = mt.randn(3, dtype=mt.float64, requires_grad=requires[1])
    short, general = getattr(mt, op)(x, y), cls.apply(x, y)
    np.testing.assert_array_equal(short.numpy(), general.numpy())
    a, b = short.grad_fn, general.grad_fn
    fields = ("name", "needs_input_grad", "out_shape", "out_dtype", "scope")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert [type(t) for t in a.inputs] == [type(t) for t in b.inputs]
    assert [t.shape for t in a.inputs] == [(2, 3), (3,)]
    assert [e[2] for e in a._saved_versions] == [e[2] for e in b._saved_versions]
    seed = mt.randn(2, 3, dtype=mt.float64)
    leaves = [t for t in (leaf, y) if t.requires_grad]
    grads = []
    for out in (short, general):
        for t in leaves:
            t.grad = None
        (out * seed).sum().backward(retain_graph=True)
        grads.append([t.grad.numpy().copy() for t in leaves])
    for ours, theirs in zip(*grads):
        np.testing.assert_array_equal(ours, theirs)


def test_the_short_path_names_shapes_that_do_not_broadcast():
    with pytest.raises(mt.ShapeError, match=r"mul.*\(2, 3\) and \(4,\) do not broadcast"):
        mt.randn(2, 3) * mt.randn(4)


def test_the_short_path_returns_fresh_memory_for_0d_and_broadcast_results():
    a, b = mt.tensor(2.0), mt.tensor(3.0)
    c = a * b
    assert type(c.numpy()) is np.ndarray and c.shape == () and float(c) == 6.0
    x = mt.zeros(3)
    y = x + mt.zeros(1)
    y.numpy()[...] = 1.0
    np.testing.assert_array_equal(x.numpy(), np.zeros(3))


def test_the_short_path_runs_forward_hooks_and_anomaly_checks():
    seen = []
    handle = mt.autograd.register_forward_hook(
        lambda fn, ctx, arrays, out, recorded: seen.append((fn.op_name(), len(arrays), recorded))
    )
    try:
        x = mt.randn(3, requires_grad=True)
        x * x
        with mt.no_grad():
            x + x
    finally:
        handle.remove()
    assert seen == [("mul", 2, True), ("add", 2, False)]
    with mt.autograd.detect_anomaly(), pytest.raises(FloatingPointError, match="div"):
        mt.tensor([0.0], requires_grad=True) / mt.tensor([0.0])


_VIEWS = {  # op: (the public call, which takes the view path; the class, params for apply)
    "reshape": (lambda t: t.reshape(3, 2), "Reshape", {"shape": (3, 2)}),
    "permute": (lambda t: t.permute(1, 0), "Permute", {"axes": (1, 0)}),
    "transpose": (lambda t: t.T, "Permute", {"axes": (1, 0)}),
    "swapaxes": (lambda t: t.swapaxes(-1, 0), "Permute", {"axes": (1, 0)}),
    "expand": (lambda t: t[:1].expand(4, 3), None, None),
}


@pytest.mark.parametrize("op", ["reshape", "permute", "transpose", "swapaxes"])
@pytest.mark.parametrize("intermediate", [False, True])
def test_the_view_path_makes_the_node_apply_makes(op, intermediate):
    from minitensor.ops import shape as S

    call, cls_name, params = _VIEWS[op]
    leaf = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    x = leaf * 1.0 if intermediate else leaf
    short, general = call(x), getattr(S, cls_name).apply(x, **params)
    np.testing.assert_array_equal(short.numpy(), general.numpy())
    assert short._vc is x._vc and general._vc is x._vc  # views share the version counter
    a, b = short.grad_fn, general.grad_fn
    fields = ("name", "needs_input_grad", "out_shape", "out_dtype", "scope")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert [type(t) for t in a.inputs] == [type(t) for t in b.inputs]
    assert a.source[0] == __file__ and a.source[2] == "<lambda>"  # the user's call, in _VIEWS
    assert a._seq > (x.grad_fn._seq if intermediate else 0)
    seed = mt.randn(*short.shape, dtype=mt.float64)
    grads = []
    for out in (short, general):
        leaf.grad = None
        (out * seed).sum().backward(retain_graph=True)
        grads.append(leaf.grad.numpy().copy())
    np.testing.assert_array_equal(*grads)


def test_the_view_path_records_nothing_without_a_gradient_and_runs_hooks_and_anomaly():
    seen = []
    handle = mt.autograd.register_forward_hook(
        lambda fn, ctx, arrays, out, recorded: seen.append((fn.op_name(), len(arrays), recorded))
    )
    try:
        x = mt.randn(2, 3, requires_grad=True)
        for op, (call, _, _) in _VIEWS.items():
            assert call(x).grad_fn is not None, op
            with mt.no_grad():
                y = call(x)
            assert y.grad_fn is None and not y.requires_grad, op
            assert call(x.detach()).grad_fn is None, op
    finally:
        handle.remove()
    assert seen[:3] == [("reshape", 1, True), ("reshape", 1, False), ("reshape", 1, False)]
    assert len(seen) == 3 * len(_VIEWS) + 3  # (expand's x[:1] is an op of its own)
    with mt.autograd.detect_anomaly(), pytest.raises(FloatingPointError, match="reshape"):
        mt.tensor([np.nan], requires_grad=True).reshape(1, 1)


def test_the_view_path_names_the_op_and_shapes_in_its_errors():
    x = mt.randn(2, 3, requires_grad=True)
    with pytest.raises(mt.ShapeError, match=r"reshape.*cannot reshape \(2, 3\).*\(4, 2\)"):
        x.reshape(4, 2)
    with pytest.raises(mt.ShapeError, match=r"permute.*\(1, 1\) are not a permutation"):
        x.permute(1, 1)
    with pytest.raises(TypeError, match="permute: axis must be an int, got False"):
        x.permute(1, False)  # (True == 1 and False == 0: the axes' cache must not answer)
    with pytest.raises(mt.ShapeError, match=r"cannot broadcast shape \(2, 3\) to \(4, 3\)"):
        x.expand(4, 3)


def test_a_node_input_reads_shape_and_dtype_from_the_node_that_made_it():
    x = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    h = x.sum(0)
    y = h * h
    held = y.grad_fn.inputs[0]
    assert isinstance(held, mt.function.NodeInput) and held.grad_fn is h.grad_fn
    assert (held.shape, held.dtype, held.requires_grad) == ((3,), np.dtype(np.float64), True)
    del h
    assert held.name is None and held.data is not None  # y's node saved it


# ---- nn.Linear / F.linear: x Wᵀ + b in one node after the transposed weight -----------------


def test_linear_with_bias_is_one_node_after_the_transposed_weight():
    lin = mt.nn.Linear(4, 3)
    y = lin(mt.randn(2, 5, 4, requires_grad=True))
    assert y.grad_fn.name == "matmul + bias"
    x_in, wt, b = y.grad_fn.inputs
    assert wt.grad_fn.name == "permute" and wt.grad_fn.inputs[0] is lin.weight
    assert b is lin.bias and x_in.shape == (2, 5, 4)


@pytest.mark.parametrize("x_shape", [(4,), (5, 4), (2, 5, 4), (0, 4)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.torch
def test_linear_values_and_gradients_match_torch(x_shape, bias):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xs, ws, bs = rng.standard_normal(x_shape), rng.standard_normal((3, 4)), rng.standard_normal(3)
    seed = rng.standard_normal(x_shape[:-1] + (3,))
    results = []
    for lib in (mt, torch):
        x = lib.tensor(xs, dtype=lib.float64, requires_grad=True)
        w = lib.tensor(ws, dtype=lib.float64, requires_grad=True)
        b = lib.tensor(bs, dtype=lib.float64, requires_grad=True) if bias else None
        y = lib.nn.functional.linear(x, w, b)
        (y * lib.tensor(seed, dtype=lib.float64)).sum().backward()
        grads = [t.grad.numpy() for t in (x, w, b) if t is not None]
        results.append([y.detach().numpy(), *grads])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_linear_gradcheck_and_float32_matches_the_unfused_composition():
    x = mt.randn(3, 4, dtype=mt.float64, requires_grad=True)
    w = mt.randn(2, 4, dtype=mt.float64, requires_grad=True)
    b = mt.randn(2, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(mt.nn.functional.linear, x, w, b)
    mt.manual_seed(0)
    x, w, b = (mt.randn(*s, requires_grad=True) for s in ((6, 8), (5, 8), (5,)))
    fused = mt.nn.functional.linear(x, w, b)
    unfused = x @ w.T + b
    np.testing.assert_array_equal(fused.numpy(), unfused.numpy())  # the same arithmetic
    grads = []
    for y in (fused, unfused):
        x.grad = w.grad = b.grad = None
        (y * y).sum().backward()
        grads.append([t.grad.numpy().copy() for t in (x, w, b)])
    for ours, composed in zip(*grads):
        np.testing.assert_array_equal(ours, composed)


def test_linear_refuses_a_saved_input_changed_in_place():
    lin = mt.nn.Linear(4, 3)
    x = mt.randn(2, 4)
    y = lin(x)
    x.add_(1.0)
    with pytest.raises(RuntimeError, match=r"input 0 of `matmul \+ bias`.*\(2, 4\)"):
        y.sum().backward()


def test_an_op_with_plain_params_gets_them_as_given_and_records_its_node():
    """plain_params = True: the keyword arguments reach forward untouched (no unwrapping), the
    node is recorded from the positional inputs, and gradients check numerically."""
    seen = []

    class Roll2(mt.Function):
        plain_params = True

        @staticmethod
        def forward(ctx, x, shift):
            seen.append(shift)
            ctx.shift = shift
            return np.roll(x, shift, axis=-1)

        @staticmethod
        def backward(ctx, grad):
            return np.roll(grad, -ctx.shift, axis=-1)

    x = mt.randn(3, 4, dtype=mt.float64, requires_grad=True)
    y = Roll2.apply(x, shift=1)
    assert seen == [1] and y.grad_fn is not None and y.grad_fn.inputs[0] is x
    assert mt.gradcheck(lambda t: Roll2.apply(t, shift=1), x)


def test_a_view_shares_the_version_counter_of_its_input_and_a_copy_does_not():
    """A view op's output shares its input's version counter when numpy made a view (a
    transpose, a reshape of contiguous data), not when it had to copy (a reshape of a
    transposed array)."""
    x = mt.randn(3, 4) * 1.0
    assert x.T._vc is x._vc and x.reshape(12)._vc is x._vc and x.T.T._vc is x._vc
    copied = x.T.reshape(12)  # not expressible as a view of x.T's memory order
    assert copied._vc is not x._vc and not np.shares_memory(copied.numpy(), x.numpy())


# ---- the no-gradient short path: x + y as its arithmetic alone ---------------------------------


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_each_ops_arithmetic_is_what_its_forward_computes(op, dtype):
    from minitensor.function import Context
    from minitensor.ops import elementwise as E

    cls = {"add": E.Add, "sub": E.Sub, "mul": E.Mul, "div": E.Div}[op]
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((4, 1, 3)) * 5).astype(dtype)
    b = (rng.standard_normal((2, 3)) * 5 + 11).astype(dtype)  # broadcasts; never 0
    got, want = cls._arithmetic(a, b), cls.forward(object.__new__(Context), a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_an_op_with_no_gradient_wanted_gives_the_general_paths_tensor():
    from minitensor.ops import elementwise as E

    x, y = mt.randn(2, 3), mt.randn(3)
    x_before, y_before = x.numpy().copy(), y.numpy().copy()
    for short, general in ((x * y, E.Mul.apply(x, y)), (x / y, E.Div.apply(x, y))):
        assert short.grad_fn is None and not short.requires_grad
        assert short.dtype == general.dtype and short.shape == general.shape
        np.testing.assert_array_equal(short.numpy(), general.numpy())
        short.numpy()[...] = 0.0  # its own memory: the inputs do not change
    np.testing.assert_array_equal(x.numpy(), x_before)
    np.testing.assert_array_equal(y.numpy(), y_before)
    z = x + y
    z.add_(1.0)  # a fresh tensor has its own version counter
    assert z._vc is not x._vc and x._vc[0] == 0


def test_anomaly_mode_checks_ops_that_record_nothing_in_every_thread_that_asked():
    import threading

    with mt.autograd.detect_anomaly(), pytest.raises(FloatingPointError, match="div"):
        mt.tensor([0.0]) / mt.tensor([0.0])  # no input requires grad
    from minitensor.state import anomaly_on

    assert anomaly_on[0] == 0  # the block closed: the short path is open again
    errors = []

    def checked():
        with mt.autograd.detect_anomaly():
            try:
                mt.tensor([0.0]) / mt.tensor([0.0])
            except FloatingPointError as e:
                errors.append(e)

    thread = threading.Thread(target=checked)
    thread.start()
    thread.join()
    assert len(errors) == 1 and anomaly_on[0] == 0
    with np.errstate(all="ignore"):  # this thread never asked: no check, a NaN as in numpy
        assert np.isnan((mt.tensor([0.0]) / mt.tensor([0.0])).numpy()).all()


class _FirstOnly(mt.Function):
    """a + b whose backward sends nothing to b: b's node is in the graph and gets no gradient."""

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def test_a_leaf_some_users_send_nothing_gets_the_sum_of_the_rest_once():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    # x has three users: x * 2 and x * 5 send it 2 and 5, x * 3 gets no gradient at all
    _FirstOnly.apply(x * 2 + x * 5, x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 7)
    assert len(seen) == 1  # the hook saw the whole gradient, once
    np.testing.assert_array_equal(seen[0], 7)


def test_the_walk_counts_each_use_of_a_leaf_once_per_input():
    from minitensor.autograd import _reachable, topological_order

    x = mt.randn(3, requires_grad=True)
    c = mt.randn(3)  # a constant: no gradient, not counted
    y = (x * x + c * x).sum()
    order, uses = _reachable((y.grad_fn,))
    assert order == topological_order(y.grad_fn)
    assert uses == {id(x): 3}  # x * x takes it twice, c * x once


def test_parameters_under_no_grad_take_the_arithmetic_alone(monkeypatch):
    """Evaluation under no_grad of tensors that require grad (a model's parameters) makes no
    context and runs no forward — unless anomaly mode wants forward's check."""
    from minitensor.ops.elementwise import Mul

    called = []
    forward = Mul.forward
    monkeypatch.setattr(
        Mul, "forward", staticmethod(lambda ctx, a, b: called.append(1) or forward(ctx, a, b))
    )
    w = mt.randn(4, 4, requires_grad=True)
    with mt.no_grad():
        out = w * w
        assert called == [] and out.grad_fn is None and not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), w.numpy() * w.numpy())
        with mt.autograd.detect_anomaly():
            w * w
    assert called == [1]
