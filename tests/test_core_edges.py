"""The core off the ordinary path: in-place edits of saved non-differentiable inputs, mask
dtypes, integer and float16 inputs to float-only ops, division by tiny numbers, NaN in
maximum/minimum, abandoned step-throughs, empty splits."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F


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


# --------------------------------------------------------------------------- backward_steps
def test_closing_a_step_through_half_way_puts_every_grad_back():
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    w.grad = mt.tensor([10.0, 10.0])
    x = mt.tensor([3.0, 4.0], requires_grad=True)
    loss = (w * 2.0).sum() + (x * x).sum()
    steps = loss.backward_steps()
    for _, _ in zip(range(3), steps):  # some leaves have received their gradient by now
        pass
    steps.close()
    np.testing.assert_array_equal(w.grad.numpy(), [10.0, 10.0])
    assert x.grad is None


def test_closing_a_step_through_after_its_last_step_keeps_the_gradients():
    x = mt.tensor([3.0, 4.0], requires_grad=True)
    loss = (x * x).sum()
    steps = loss.backward_steps()
    for _ in range(2):
        next(steps)
    steps.close()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 8.0])


# --------------------------------------------------------------------------- split, chunk
def test_split_and_chunk_of_an_empty_axis_match_torch():
    torch = pytest.importorskip("torch")
    x = mt.zeros(0, 3)
    assert [p.shape for p in F.split(x, 2)] == [tuple(p.shape) for p in torch.zeros(0, 3).split(2)]
    assert [p.shape for p in F.chunk(x, 3)] == [tuple(p.shape) for p in torch.zeros(0, 3).chunk(3)]
    assert [p.shape for p in F.split(mt.zeros(3, 0), 2, axis=1)] == [(3, 0)]


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


# --------------------------------------------------------------------------- mask dtypes
@pytest.mark.parametrize(
    "mask", [np.array([[0, 0, 1]]), np.array([[0, 0, 1]], dtype=np.uint8), mt.tensor([[0, 0, 1]])]
)
def test_an_integer_mask_is_refused_with_how_to_convert_it(mask):
    x = mt.tensor([[0.5, 1.0, 2.0]])
    with pytest.raises(TypeError, match=r"softmax: a mask must be bool.*mask != 0"):
        F.softmax(x, mask=mask)


def test_bool_masks_block_and_float_masks_add_everywhere():
    from transformer.masks import combine_masks

    x = mt.tensor([[0.5, 1.0, 2.0]])
    blocked = F.softmax(x, mask=np.array([[False, False, True]])).numpy()
    added = F.softmax(x, mask=np.array([[0.0, 0.0, -np.inf]], dtype=np.float32)).numpy()
    np.testing.assert_allclose(blocked, added, rtol=1e-6)
    assert blocked[0, 2] == 0.0
    with pytest.raises(TypeError, match="combine_masks: a mask must be bool"):
        combine_masks(np.array([[0, 1]]))
    assert F.as_attention_mask(None) is None


# --------------------------------------------------------------------------- public means
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


def test_bump_version_makes_backward_refuse_a_stale_graph():
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    with mt.no_grad():
        w.numpy()[...] = 0.0  # an update by hand, as an optimizer does
        assert w.bump_version() is w
    with pytest.raises(RuntimeError, match="input 0 of `mul`.*modified in place"):
        loss.backward()


# --------------------------------------------------------------------------- dtypes
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


def test_integer_inputs_of_layer_norm_cross_entropy_and_mean_become_float32():
    ints = mt.tensor([[1, 2, 4]])
    np.testing.assert_allclose(
        F.layer_norm(ints, 3).numpy(), F.layer_norm(ints.float(), 3).numpy(), rtol=1e-6
    )
    ce = F.cross_entropy(ints, mt.tensor([2]))
    assert ce.dtype == np.float32
    np.testing.assert_allclose(ce.item(), F.cross_entropy(ints.float(), mt.tensor([2])).item())
    assert F.mean(mt.tensor([True, False])).dtype == np.float32


def test_an_unsupported_float_dtype_is_refused_with_the_op_named():
    x = mt.tensor([1.0, 2.0], dtype=np.longdouble)
    if x.dtype in (np.float64,):
        pytest.skip("longdouble is float64 on this platform")
    with pytest.raises(TypeError, match=r"softmax.*dtype.*\.float\(\)"):
        F.softmax(x)


def test_float16_gradients_through_kernel_ops_match_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[1.0, 2.0, 4.0], [0.5, -1.0, 3.0]])
    cases = [
        (lambda t: F.softmax(t), lambda t: torch.softmax(t, -1)),
        (lambda t: F.layer_norm(t, 3), lambda t: torch.nn.functional.layer_norm(t, (3,))),
        (
            lambda t: F.cross_entropy(t, mt.tensor([0, 2]), reduction="none"),
            lambda t: torch.nn.functional.cross_entropy(t, torch.tensor([0, 2]), reduction="none"),
        ),
    ]
    for ours, theirs in cases:
        h = mt.tensor(x, dtype=np.float16, requires_grad=True)
        y = ours(h)
        w = np.arange(1, y.numel() + 1, dtype=np.float16).reshape(y.shape)
        (y * mt.tensor(w, dtype=np.float16)).sum().backward()
        th = torch.tensor(x, dtype=torch.float16, requires_grad=True)
        (theirs(th) * torch.from_numpy(w)).sum().backward()
        assert y.dtype == np.float16 and h.grad.dtype == np.float16
        np.testing.assert_allclose(
            h.grad.numpy().astype(np.float32), th.grad.float().numpy(), atol=5e-3, rtol=5e-3
        )
    assert F.dropout(mt.tensor(x, dtype=np.float16), 0.5).dtype == np.float16


def test_calling_an_op_class_like_a_function_says_to_use_apply():
    class GELUTanh(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return x

    with pytest.raises(TypeError, match=r"GELUTanh\(\.\.\.\) is an op class.*GELUTanh\.apply\(x\)"):
        GELUTanh(mt.randn(3))


def test_graph_nodes_keep_their_output_gradient_only_for_a_retained_graph():
    """A plain backward frees each node's output gradient with the graph (the memory of a
    whole step's activations' gradients); backward(retain_graph=True) keeps it for the viewer."""
    x = mt.randn(3, requires_grad=True)
    loss = (x * 2).exp().sum()
    loss.backward()
    assert loss.grad_fn.grad is None and x.grad is not None
    loss = (x * 2).exp().sum()
    loss.backward(retain_graph=True)
    np.testing.assert_array_equal(loss.grad_fn.grad, np.ones((), np.float32))


@pytest.mark.parametrize(
    "a_shape, w_shape", [((2, 3, 0), (0, 4)), ((2, 3, 4), (4, 0)), ((2, 0, 4), (4, 5))]
)
def test_a_linear_product_with_an_empty_axis_runs_backward(a_shape, w_shape):
    a, w = mt.randn(*a_shape, requires_grad=True), mt.randn(*w_shape, requires_grad=True)
    (a @ w).sum().backward()
    assert a.grad.shape == a_shape and w.grad.shape == w_shape


def test_cross_entropy_embedding_and_layer_norm_on_empty_axes():
    empty = F.cross_entropy(mt.randn(0, 5, requires_grad=True), mt.tensor(np.zeros(0, np.int64)))
    assert empty.item() == 0.0
    with pytest.raises(IndexError, match="cross_entropy.*out of range for 0 classes"):
        F.cross_entropy(mt.randn(2, 0), mt.tensor([0, 0]))
    table = mt.randn(4, 0, requires_grad=True)
    F.embedding(mt.tensor([[1, 2]]), table).sum().backward()
    assert table.grad.shape == (4, 0)
    x = mt.randn(0, 4, requires_grad=True)
    F.layer_norm(x, (4,)).sum().backward()
    assert x.grad.shape == (0, 4)
