"""Gradients to every tensor argument, ties, kept gradients, clipping and errors, as torch.

Each test runs the same PyTorch-style code under torch and under minitensor (the library is
the argument `lib`) and compares what comes out: values, gradients, or the kind of error (code
that catches torch's IndexError or RuntimeError must catch ours).
"""

import numpy as np
import pytest

import minitensor as mt

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _np(t):
    return None if t is None else t.detach().numpy()


def _both(program):
    """program(lib) under torch and under minitensor: two lists of arrays (or None)."""
    return [_np(t) for t in program(torch)], [_np(t) for t in program(mt)]


def _same(program, tol=0.0):
    theirs, ours = _both(program)
    assert len(theirs) == len(ours)
    for i, (a, b) in enumerate(zip(theirs, ours)):
        if a is None or b is None:
            assert a is None and b is None, f"output {i}: {a} vs {b}"
            continue
        assert a.shape == b.shape, f"output {i}: shape {a.shape} vs {b.shape}"
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol, err_msg=f"output {i}")


def _raises_as_torch(program):
    """program(lib) raises under both; ours is an instance of torch's exception type."""
    with pytest.raises(Exception) as theirs:
        program(torch)
    kind = type(theirs.value)
    with pytest.raises(kind):
        program(mt)


# ---------------------------------------------------------------- 20.6 every tensor argument
def _clamp_program(lib, lo_shape=(7,), hi_shape=(7,), dtype="float64"):
    def program():
        dt = getattr(lib, dtype)
        x = lib.tensor([-2.0, 0.0, 1.0, 2.0, 3.0, 5.0, 1.5], dtype=dt, requires_grad=True)
        lo_vals = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 2.0])
        hi_vals = np.array([3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 1.0])
        lo = lib.tensor(lo_vals[: int(np.prod(lo_shape))].reshape(lo_shape), dtype=dt)
        hi = lib.tensor(hi_vals[: int(np.prod(hi_shape))].reshape(hi_shape), dtype=dt)
        lo.requires_grad_()
        hi.requires_grad_()
        y = lib.clamp(x, lo, hi)
        y.backward(lib.arange(1.0, 1.0 + y.numel(), dtype=dt).reshape(y.shape))
        return [y, x.grad, lo.grad, hi.grad]

    return program()


@pytest.mark.parametrize("lo_shape,hi_shape", [((7,), (7,)), ((1,), (7,)), ((), ())])
def test_clamp_tensor_bounds_get_gradients(lo_shape, hi_shape):
    _same(lambda lib: _clamp_program(lib, lo_shape, hi_shape))


def test_clamp_one_tensor_bound_and_nan():
    def program(lib):
        x = lib.tensor([1.0, 3.0, float("nan"), 2.0], requires_grad=True)
        lo = lib.tensor([1.5, 1.0, 0.0, float("nan")], requires_grad=True)
        hi = lib.tensor(2.5, requires_grad=True)
        a = lib.clamp(x, lo)
        b = x.clamp(max=hi)
        (a.sum() + (b * 2).sum()).backward()
        return [a, b, x.grad, lo.grad, hi.grad]

    _same(program)


def test_clamp_gradcheck_tensor_bounds():
    x = mt.tensor([-2.0, 0.5, 1.0, 2.5, 5.0, 1.5], dtype=mt.float64, requires_grad=True)
    lo = mt.tensor([0.0, 0.0, 0.2, 0.0, 4.0, 2.2], dtype=mt.float64, requires_grad=True)
    hi = mt.tensor([3.0, 3.0, 3.0, 2.0, 3.0, 1.0], dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda a, b, c: mt.clamp(a, b, c), x, lo, hi)


def test_clamp_float32_with_int_bounds_stays_float32():
    def program(lib):
        x = lib.tensor([0.5, 2.5, 9.0])
        return [lib.clamp(x, lib.tensor([1, 1, 1], dtype=lib.int32), lib.tensor(3))]

    theirs, ours = _both(program)
    assert ours[0].dtype == theirs[0].dtype
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_clamp_without_bounds_is_refused():
    _raises_as_torch(lambda lib: lib.clamp(lib.zeros(3)))


def test_masked_fill_tensor_value_gets_gradient():
    def program(lib):
        x = lib.zeros(3, dtype=lib.float64, requires_grad=True)
        v = lib.tensor(2.0, dtype=lib.float64, requires_grad=True)
        mask = lib.tensor([[True, False, True], [False, False, True]])
        y = x.masked_fill(mask, v)  # the mask broadcasts x larger: (3,) → (2, 3)
        y.backward(lib.arange(6.0, dtype=lib.float64).reshape(2, 3))
        return [y, x.grad, v.grad]

    _same(program)


def test_masked_fill_gradcheck_value():
    x = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    v = mt.tensor(0.5, dtype=mt.float64, requires_grad=True)
    mask = mt.tensor([[True, False, True], [False, False, True]])
    assert mt.gradcheck(lambda a, b: a.masked_fill(mask, b), x, v)


def test_masked_fill_int_tensor_keeps_dtype_and_truncates():
    _same(lambda lib: [lib.arange(3).masked_fill(lib.tensor([True, False, False]), 2.7)])


@pytest.mark.parametrize(
    "program",
    [
        # in place, the mask may not grow the tensor
        lambda lib: lib.zeros(3).masked_fill_(lib.tensor([[True], [False]]), 1.0),
        # the mask must broadcast
        lambda lib: lib.zeros(3).masked_fill(lib.tensor([True, False]), 1.0),
        # the value must be 0-d
        lambda lib: lib.zeros(3).masked_fill(lib.tensor([True, False, True]), lib.tensor([1.0])),
    ],
)
def test_masked_fill_refusals(program):
    _raises_as_torch(program)


def test_where_sends_gradients_to_both_branches():
    def program(lib):
        a = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        b = lib.tensor(5.0, dtype=lib.float64, requires_grad=True)
        y = lib.where(lib.tensor([True, False, False]), a, b)
        (y * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum().backward()
        return [y, a.grad, b.grad]

    _same(program)


@pytest.mark.parametrize(
    "write",
    [
        lambda x, v: x.copy_(v.expand(3)),
        lambda x, v: x.fill_(v),
    ],
)
def test_in_place_write_of_a_value_requiring_grad_is_refused_not_dropped(write):
    # torch records such a write and sends a gradient to v; copy_ and fill_ record no graph
    # here, so they must refuse rather than lose v's gradient (x[i] = v and the arithmetic
    # in-place ops are recorded: test_in_place_ops_in_the_graph_as_torch)
    x = mt.zeros(3)
    v = mt.tensor(2.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        write(x, v)
    assert x.numpy().tolist() == [0.0, 0.0, 0.0]
    with mt.no_grad():
        write(x, v)  # outside the graph it is fine, as in torch


INPLACE_IN_THE_GRAPH = {
    "add_ alpha": lambda lib, h, w: h.add_(w, alpha=0.5),
    "sub_": lambda lib, h, w: h.sub_(w),
    "mul_": lambda lib, h, w: h.mul_(w),
    "div_": lambda lib, h, w: h.div_(w),
    "pow_": lambda lib, h, w: h.pow_(2),
    "clamp_": lambda lib, h, w: h.clamp_(-1.0, 1.0),
    "masked_fill_ with a value requiring grad": lambda lib, h, w: h.masked_fill_(
        lib.tensor([True, False, True]), w.sum()
    ),
    "relu_": lambda lib, h, w: h.relu_(),
    "sigmoid_": lambda lib, h, w: h.sigmoid_(),
    "tanh_": lambda lib, h, w: h.tanh_(),
    "exp_": lambda lib, h, w: h.exp_(),
    "neg_ then abs_": lambda lib, h, w: h.neg_().abs_(),
    "a residual: out = h * w; out += x; out.relu_()": None,
}


@pytest.mark.parametrize("name", INPLACE_IN_THE_GRAPH)
def test_in_place_ops_in_the_graph_as_torch(name):
    """An in-place op on a tensor in the graph (a non-leaf, or with an operand requiring
    grad) is recorded as torch records it: the same values and gradients, and the tensor
    keeps its identity."""

    def program(lib):
        x = lib.tensor([[0.5, -1.0, 2.0], [1.5, -0.3, 0.7]], dtype=lib.float64, requires_grad=True)
        w = lib.tensor([0.3, -2.0, 1.1], dtype=lib.float64, requires_grad=True)
        h = x * 2
        before = id(h)
        if INPLACE_IN_THE_GRAPH[name] is None:
            out = h * w
            out += x
            h = out.relu_()
        else:
            assert INPLACE_IN_THE_GRAPH[name](lib, h, w) is h
            assert id(h) == before
        (h * h).sum().backward()
        return [h, x.grad, w.grad if w.grad is not None else lib.zeros(3, dtype=lib.float64)]

    _same(program, tol=1e-12)


def test_in_place_op_after_its_input_was_saved_is_caught_at_backward_as_torch():
    for lib in (torch, mt):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = x * 2
        y = h * h  # saves h
        h.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


# ---------------------------------------------------------------- errors as torch's types
@pytest.mark.parametrize(
    "program",
    [
        lambda lib: lib.zeros(2, 3) @ lib.zeros(2, 3),
        lambda lib: lib.zeros(2, 3) + lib.zeros(2, 4),
        lambda lib: lib.zeros(2, 3).reshape(4),
        lambda lib: lib.zeros(2, 3).sum(5),
        lambda lib: lib.zeros(2, 3).transpose(0, 5),
        lambda lib: lib.zeros(2, 3).softmax(3),
        lambda lib: lib.cat([lib.zeros(2, 3), lib.zeros(2, 4)]),
        lambda lib: lib.stack([lib.zeros(2), lib.zeros(3)]),
        lambda lib: lib.zeros(2, 3).expand(4, 3),
        lambda lib: lib.where(lib.tensor([True, False]), lib.zeros(3), 1.0),
        lambda lib: lib.zeros(3)[5],
        lambda lib: lib.zeros(3).__setitem__(slice(None), lib.zeros(2)),
    ],
)
def test_errors_are_instances_of_torchs_exception_type(program):
    _raises_as_torch(program)


def test_shape_error_is_also_a_value_error():
    # numpy-style code catching ValueError keeps working
    with pytest.raises(ValueError):
        mt.zeros(2, 3) @ mt.zeros(2, 3)
    with pytest.raises(ValueError):
        mt.zeros(2, 3).sum(5)


# ---------------------------------------------------------------- 20.9 ties, kept .grad, clipping
TIES = [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [float("nan"), 1.0, float("nan"), 5.0]]


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_dim_send_the_gradient_to_the_returned_index(op, keepdim, dim):
    def program(lib):
        x = lib.tensor(TIES, dtype=lib.float64, requires_grad=True)
        values, indices = getattr(x, op)(dim, keepdim=keepdim)
        w = lib.arange(1.0, 1.0 + values.numel(), dtype=lib.float64).reshape(values.shape)
        (values * w).sum().backward()
        return [values, indices, x.grad]

    _same(program)


@pytest.mark.parametrize("op", ["max", "min"])
def test_full_max_min_split_the_gradient_among_ties_and_nans(op):
    def program(lib):
        x = lib.tensor(TIES[:2], dtype=lib.float64, requires_grad=True)
        y = lib.tensor(TIES[2], dtype=lib.float64, requires_grad=True)
        getattr(x, op)().backward()
        getattr(y, op)().backward()
        return [x.grad, y.grad]

    _same(program)


def test_max_dim_of_a_0d_tensor():
    def program(lib):
        x = lib.tensor(5.0, dtype=lib.float64, requires_grad=True)
        values, indices = x.max(0)
        values.backward()
        return [values, indices, x.grad]

    _same(program)


def test_max_dim_gradcheck():
    x = mt.randn(3, 4, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda a: a.max(1).values, x)
    assert mt.gradcheck(lambda a: a.min(0, keepdim=True).values, x)


def test_kept_grad_reference_sees_the_next_backward():
    def program(lib):
        x = lib.ones(3, requires_grad=True)
        (x * 2).sum().backward()
        kept = x.grad
        (x * 3).sum().backward()
        assert kept is x.grad
        return [kept]

    _same(program)


def test_failed_backward_leaves_grad_unchanged_in_place():
    x = mt.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    kept = x.grad

    class Broken(mt.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("broken backward")

    loss = (x * 3).sum() + Broken.apply(x).sum()
    with pytest.raises(ValueError, match="broken"):
        loss.backward()
    assert x.grad is kept
    assert kept.numpy().tolist() == [2.0, 2.0, 2.0]


def _grads_of(lib, values):
    ps = []
    for v in values:
        p = lib.zeros(len(v), requires_grad=True)
        p.grad = lib.tensor(v)
        ps.append(p)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize(
    "grads",
    [
        [[3.0, 4.0], [12.0]],  # clipped
        [[0.1, 0.2], [0.3]],  # not clipped
        [[float("nan"), 1.0], [2.0, 3.0]],  # one NaN: every gradient NaN
        [[float("inf"), 1.0], [2.0]],
    ],
)
def test_clip_grad_norm_as_torch(norm_type, grads):
    def program(lib):
        ps = _grads_of(lib, grads)
        total = lib.nn.utils.clip_grad_norm_(ps, 1.0, norm_type=norm_type, foreach=None)
        assert total.shape == () and total.dtype == lib.float32
        return [total] + [p.grad for p in ps]

    _same(program, tol=1e-6)


def test_clip_grad_norm_error_if_nonfinite_and_no_gradients():
    def nonfinite(lib):
        lib.nn.utils.clip_grad_norm_(_grads_of(lib, [[float("nan")]]), 1.0, error_if_nonfinite=True)

    _raises_as_torch(nonfinite)
    _same(lambda lib: [lib.nn.utils.clip_grad_norm_([lib.zeros(2, requires_grad=True)], 1.0)])


# ---------------------------------------------------------------- indices, 0-d tensors, weights
@pytest.mark.parametrize(
    "program",
    [
        lambda lib: lib.arange(6.0).reshape(2, 3).gather(1, lib.tensor([[-1], [0]])),
        lambda lib: lib.arange(6.0).reshape(2, 3).gather(1, lib.tensor([[3], [0]])),
        lambda lib: lib.arange(6.0).reshape(2, 3).gather(1, lib.zeros(3, 1, dtype=lib.int64)),
        lambda lib: lib.arange(6.0).reshape(2, 3).gather(1, lib.zeros(2, 1)),
        lambda lib: lib.arange(6.0).reshape(2, 3).index_select(1, lib.tensor([-1])),
        lambda lib: lib.arange(6.0).reshape(2, 3).index_select(1, lib.tensor([3])),
        lambda lib: lib.arange(6.0).reshape(2, 3).index_select(1, lib.tensor([[0]])),
        lambda lib: lib.arange(6.0).reshape(2, 3).index_select(1, lib.zeros(2)),
        lambda lib: lib.tensor(5.0).index_select(0, lib.tensor([1])),
        lambda lib: lib.tensor(5.0).index_select(0, lib.tensor([0, 0])),
        lambda lib: lib.tensor(5.0).scatter(0, lib.tensor(1), 7.0),
        lambda lib: lib.zeros(2, 3).scatter(1, lib.tensor([[3]]), 7.0),
        lambda lib: lib.zeros(3).masked_fill(lib.tensor([1, 0, 1]), 1.0),
    ],
)
def test_bad_indices_are_refused_as_torch(program):
    _raises_as_torch(program)


@pytest.mark.parametrize(
    "program",
    [
        lambda lib, x: [x.transpose(0, -1), x.transpose(0, 0), x.t()],
        lambda lib, x: [x.gather(0, lib.tensor(0)), x.gather(0, lib.tensor([0, 0]))],
        lambda lib, x: [x.index_select(0, lib.tensor([0])), x.index_select(0, lib.tensor(0))],
        lambda lib, x: [x.scatter(0, lib.tensor(0), lib.tensor(7.0, dtype=lib.float64))],
        lambda lib, x: [x.scatter(0, lib.tensor([0]), 7.0)],
        lambda lib, x: [lib.arange(3.0).gather(0, lib.tensor(1))],
        lambda lib, x: [lib.arange(6.0).reshape(2, 3).index_select(1, lib.tensor(1))],
    ],
)
def test_zero_dim_tensors_as_torch(program):
    def run(lib):
        x = lib.tensor(5.0, dtype=lib.float64, requires_grad=True)
        outs = program(lib, x)
        differentiable = [o.sum() for o in outs if o.requires_grad]
        if differentiable:
            sum(differentiable).backward()
        return outs + [x.grad]

    _same(run)


@pytest.mark.parametrize(
    "program",
    [
        lambda lib, x: [*x.topk(1), *x.topk(1, dim=0), *x.topk(1, dim=-1, largest=False)],
        lambda lib, x: [*x.topk(0)],  # torch's quirk: k = 0 still gives x's element
        lambda lib, x: [*x.sort(), *x.sort(dim=0, descending=True), x.argsort(dim=-1)],
        lambda lib, x: [x.argsort(descending=True), *lib.sort(x, stable=True)],
        lambda lib, x: [*x.kthvalue(1), *x.kthvalue(1, dim=0, keepdim=True)],
    ],
)
def test_sorting_a_0d_tensor_as_torch(program):
    def run(lib):
        x = lib.tensor(5.0, dtype=lib.float64, requires_grad=True)
        outs = program(lib, x)
        sum(o.sum() * (i + 1) for i, o in enumerate(outs) if o.requires_grad).backward()
        return outs + [x.grad]

    _same(run)


@pytest.mark.parametrize(
    "program",
    [
        lambda lib: lib.tensor(5.0).topk(2),
        lambda lib: lib.tensor(5.0).topk(1, dim=1),
        lambda lib: lib.tensor(5.0).sort(dim=1),
        lambda lib: lib.tensor(5.0).kthvalue(2),
        lambda lib: lib.tensor(5.0).kthvalue(0),
    ],
)
def test_sorting_a_0d_tensor_out_of_range_is_refused_as_torch(program):
    _raises_as_torch(program)


def test_gather_index_select_gradients_as_torch():
    def program(lib):
        x = lib.arange(12.0, dtype=lib.float64).reshape(3, 4).requires_grad_()
        a = x.gather(1, lib.tensor([[3, 3], [0, 1], [2, 0]]))
        b = x.index_select(0, lib.tensor([2, 2, 0]))
        (a.sum() * 2 + (b * b).sum()).backward()
        return [a, b, x.grad]

    _same(program)


@pytest.mark.parametrize("n_weights", [2, 4])
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_class_weight_of_the_wrong_length_is_refused(fn, n_weights):
    def program(lib):
        logits = lib.zeros(2, 3)
        return getattr(lib.nn.functional, fn)(
            logits, lib.tensor([0, 1]), weight=lib.ones(n_weights)
        )

    _raises_as_torch(program)
    with pytest.raises(RuntimeError) as info:
        program(mt)
    for part in (fn, f"({n_weights},)", "(3,)", "(2, 3)"):  # the op, the shapes
        assert part in str(info.value)


def test_cross_entropy_weight_of_the_right_length_still_works():
    def program(lib):
        logits = lib.tensor([[1.0, 2.0, 0.5], [0.1, -1.0, 2.0]], requires_grad=True)
        loss = lib.nn.functional.cross_entropy(
            logits, lib.tensor([0, 2]), weight=lib.tensor([1.0, 2.0, 0.5])
        )
        loss.backward()
        return [loss, logits.grad]

    _same(program, tol=1e-6)


# ---------------------------------------------------------------- mt.load: a deflate bomb
def _recompress(src, dst):
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))


def test_load_refuses_a_deflate_bomb_before_allocating(tmp_path):
    saved = tmp_path / "zeros.npz"
    mt.save({"w": np.zeros(1 << 21, np.float32)}, saved)  # 8 MiB of zeros: deflates ~1000x
    bomb = tmp_path / "bomb.npz"
    _recompress(saved, bomb)
    assert bomb.stat().st_size < saved.stat().st_size // 100
    with pytest.raises(mt.CheckpointError, match="bomb"):
        mt.load(bomb)
    assert mt.load(saved)["w"].shape == (1 << 21,)  # stored, as mt.save writes it: fine


def test_load_reads_small_or_ordinary_deflated_members(tmp_path):
    saved = tmp_path / "ok.npz"
    w = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    mt.save({"w": w, "zeros": np.zeros(1000, np.float32)}, saved)
    deflated = tmp_path / "deflated.npz"
    _recompress(saved, deflated)
    back = mt.load(deflated)
    np.testing.assert_array_equal(np.asarray(back["w"]), w)
    assert not np.asarray(back["zeros"]).any()


@pytest.mark.parametrize("op", ["amax", "amin"])
@pytest.mark.parametrize("dim", [None, 1, (0, 1)])
def test_amax_amin_gradient_at_ties_and_nans_as_torch(op, dim):
    def program(lib):
        x = lib.tensor(TIES, dtype=lib.float64, requires_grad=True)
        y = getattr(x, op)() if dim is None else getattr(x, op)(dim)
        y.sum().backward()
        return [y, x.grad]

    theirs, ours = _both(program)
    for a, b in zip(theirs, ours):  # NaN where torch has NaN (its 0/0 at a NaN extremum)
        np.testing.assert_array_equal(np.isnan(b), np.isnan(a))
        np.testing.assert_allclose(b, a)
