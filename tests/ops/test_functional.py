"""minitensor/ops/nn.py: softmax, layer_norm, dropout, embedding, cross_entropy, mse_loss."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F

gradcheck = mt.gradcheck


def close(t, expected, tol=1e-10):
    np.testing.assert_allclose(t.numpy(), expected, rtol=tol, atol=tol)


# ============================================================================ neural-net functions


def softmax_ref(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(axis, leaf):
    x = leaf(3, 4, 5)
    close(F.softmax(x, axis=axis), softmax_ref(x.numpy(), axis))
    close(x.softmax(axis), softmax_ref(x.numpy(), axis))
    close(F.log_softmax(x, axis=axis), np.log(softmax_ref(x.numpy(), axis)))
    assert gradcheck(lambda x: F.softmax(x, axis=axis), x)
    assert gradcheck(lambda x: F.log_softmax(x, axis=axis), x)
    assert gradcheck(lambda x: F.softmax(x.mT, axis=axis), x)


def test_softmax_with_scale_and_masks(leaf):
    x = leaf(2, 3, 4)
    blocked = np.array([False, True, False, True])  # True = blocked
    y = F.softmax(x, scale=0.5, mask=mt.tensor(blocked))
    expected = softmax_ref(np.where(blocked, -np.inf, 0.5 * x.numpy()))
    close(y, expected)
    additive = np.where(blocked, -np.inf, 0.0)
    close(F.softmax(x, scale=0.5, mask=additive), expected)
    assert gradcheck(lambda x: F.softmax(x, scale=0.5, mask=blocked), x)
    causal = np.triu(np.ones((3, 4), dtype=bool), k=1)
    assert gradcheck(lambda x: F.softmax(x, mask=causal), x)
    assert gradcheck(lambda x: F.softmax(x, axis=1, mask=causal[:, :1]), x)


def test_fully_masked_softmax_row_is_zero_not_nan(leaf):
    x = leaf(2, 3)
    mask = np.array([[True, True, True], [False, True, False]])
    y = F.softmax(x, mask=mask)
    assert np.isfinite(y.numpy()).all()
    np.testing.assert_array_equal(y.numpy()[0], 0)
    (y * mt.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0], 0)


@pytest.mark.parametrize("norm_shape", [(5,), (4, 5)])
def test_layer_norm(norm_shape, leaf):
    x = leaf(2, 4, 5)
    w, b = leaf(*norm_shape), leaf(*norm_shape)
    axes = tuple(range(-len(norm_shape), 0))
    mu = x.numpy().mean(axis=axes, keepdims=True)
    var = x.numpy().var(axis=axes, keepdims=True)
    expected = (x.numpy() - mu) / np.sqrt(var + 1e-5) * w.numpy() + b.numpy()
    close(F.layer_norm(x, norm_shape, w, b), expected, 1e-8)
    close(F.layer_norm(x, norm_shape), (x.numpy() - mu) / np.sqrt(var + 1e-5), 1e-8)
    assert gradcheck(lambda x, w, b: F.layer_norm(x, norm_shape, w, b), x, w, b)
    assert gradcheck(lambda x: F.layer_norm(x, norm_shape), x)
    assert gradcheck(lambda x, w: F.layer_norm(x[:, ::-1], norm_shape, weight=w), x, w)


def test_dropout():
    x = mt.ones(200, 50)
    mt.manual_seed(3)
    y = F.dropout(x, p=0.2)
    kept = y.numpy() != 0
    assert 0.75 < kept.mean() < 0.85  # about 1 − p survive
    np.testing.assert_allclose(y.numpy()[kept], 1 / 0.8)  # inverted scaling
    mt.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, p=0.2).numpy(), y.numpy())  # seeded
    assert not np.array_equal(F.dropout(x, p=0.2).numpy(), y.numpy())  # fresh mask next call
    assert F.dropout(x, p=0.2, training=False) is x
    assert F.dropout(x, p=0.0) is x
    np.testing.assert_array_equal(F.dropout(x, p=1.0).numpy(), 0)


def test_dropout_gradient_uses_the_same_mask():
    x = mt.randn(30, 40, dtype=mt.float64, requires_grad=True)
    y = F.dropout(x, p=0.5)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (y.numpy() != 0) * 2.0)

    def fn(x):  # the same mask on every evaluation, so gradcheck can run
        mt.manual_seed(7)
        return F.dropout(x, p=0.3)

    assert gradcheck(fn, mt.randn(3, 4, dtype=mt.float64, requires_grad=True))


def test_embedding(leaf):
    table = leaf(5, 3)
    ids = mt.tensor([[0, 4, 4], [1, 0, 0]])
    out = F.embedding(ids, table)
    close(out, table.numpy()[ids.numpy()])
    assert out.shape == (2, 3, 3)
    assert gradcheck(lambda t: F.embedding(ids, t), table)
    assert gradcheck(lambda t: F.embedding(ids, t.T), leaf(3, 5))  # a transposed table
    table.grad = None
    F.embedding(ids, table).sum().backward()
    np.testing.assert_array_equal(table.grad.numpy()[:, 0], [3, 1, 0, 0, 2])  # counts of each id
    table.grad = None
    F.embedding(ids, table, padding_idx=0).sum().backward()
    np.testing.assert_array_equal(table.grad.numpy()[0], 0)


def cross_entropy_ref(logits, targets, ignore_index=-100, smoothing=0.0, reduction="mean"):
    c = logits.shape[-1]
    x, t = logits.reshape(-1, c), targets.reshape(-1)
    logp = (
        x
        - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - x.max(-1, keepdims=True)
    )
    valid = t != ignore_index
    nll = -logp[np.arange(len(t)), np.where(valid, t, 0)]
    rows = (1 - smoothing) * nll + smoothing * (-logp.mean(-1))
    rows = np.where(valid, rows, 0.0)
    if reduction == "none":
        return rows.reshape(targets.shape)
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / max(valid.sum(), 1)


@pytest.mark.parametrize("shape", [(6, 4), (2, 4, 3), (2, 4, 3, 2)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(shape, reduction, smoothing, leaf, rng):
    logits = leaf(*shape)  # (N, C, d1, …): the classes on axis 1
    targets = rng.integers(0, shape[1], size=shape[:1] + shape[2:])
    targets.reshape(-1)[1] = -100  # one ignored target
    kw = dict(label_smoothing=smoothing, reduction=reduction)
    out = F.cross_entropy(logits, mt.tensor(targets), **kw)
    want = cross_entropy_ref(
        np.moveaxis(logits.numpy(), 1, -1), targets, -100, smoothing, reduction
    )
    close(out, want, 1e-8)
    assert gradcheck(lambda x: F.cross_entropy(x, targets, **kw), logits)
    reverse = tuple(reversed(range(len(shape))))  # logits as a non-contiguous view
    assert gradcheck(
        lambda x: F.cross_entropy(x.permute(reverse), targets, **kw), leaf(*shape[::-1])
    )


def test_cross_entropy_mean_is_over_non_ignored_targets(leaf):
    logits = leaf(4, 3)
    targets = mt.tensor([0, 2, 1, 1])
    ignored = mt.tensor([0, 7, 1, 7])
    full = F.cross_entropy(logits, targets, reduction="none").numpy()
    loss = F.cross_entropy(logits, ignored, ignore_index=7)
    np.testing.assert_allclose(loss.item(), (full[0] + full[2]) / 2)
    all_ignored = F.cross_entropy(logits, mt.tensor([7, 7, 7, 7]), ignore_index=7)
    assert all_ignored.item() == 0.0


def test_mse_loss(leaf):
    a, b = leaf(3, 4), leaf(3, 4)
    close(F.mse_loss(a, b), np.mean((a.numpy() - b.numpy()) ** 2))
    close(F.mse_loss(a, b, reduction="sum"), np.sum((a.numpy() - b.numpy()) ** 2))
    close(F.mse_loss(a, b, reduction="none"), (a.numpy() - b.numpy()) ** 2)
    assert gradcheck(lambda a, b: F.mse_loss(a, b), a, b)
    assert gradcheck(lambda a: F.mse_loss(a.T, b.numpy().T, reduction="sum"), a)


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
