"""``x[index] = value`` joins the graph as torch's in-place write does (CopySlices): a buffer
filled step by step — bentrevett/pytorch-seq2seq's ``outputs = torch.zeros(T, B, V)`` then
``outputs[t] = output`` in the decoding loop — passes gradients to every value written, and
to what x was before. Side by side with torch, and checked numerically in float64."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import minitensor as mt  # noqa: E402

pytestmark = pytest.mark.torch

INDICES = [
    1,  # one row
    (slice(None), 2),  # a column
    (0, [1, 3]),  # an integer beside an index list (torch's reading)
    (slice(1, 3), slice(0, 2)),  # a block, value broadcast from one row
]


def _fill(lib, a, v, w, index):
    """((zeros * 1 + a)[index] = v * w, then a second write) — x a non-leaf, v in the graph."""
    x = lib.zeros(3, 4, dtype=lib.float64) + a
    x[index] = v * w
    x[0, 0] = a[2, 3] * 3  # a second write on top of the first
    return (x * x).sum()


@pytest.mark.parametrize("index", INDICES)
def test_gradients_match_torch(index):
    rng = np.random.RandomState(0)
    value_shape = np.zeros((3, 4))[index].shape
    if index == INDICES[3]:
        value_shape = (value_shape[-1],)  # broadcast over the block's rows
    arrays = rng.randn(3, 4), rng.randn(*value_shape), rng.randn(*value_shape)
    grads = {}
    for lib in (torch, mt):
        a, v, w = (lib.tensor(x, requires_grad=True) for x in arrays)
        loss = _fill(lib, a, v, w, index)
        loss.backward()
        grads[lib] = [loss.item()] + [np.asarray(t.grad.numpy()) for t in (a, v, w)]
    for ours, theirs in zip(grads[mt], grads[torch]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("index", INDICES[:3])
def test_gradients_are_numerically_right(index):
    rng = np.random.RandomState(1)
    value_shape = np.zeros((3, 4))[index].shape
    a, v, w = (
        mt.tensor(x, requires_grad=True)
        for x in (rng.randn(3, 4), rng.randn(*value_shape), rng.randn(*value_shape))
    )
    assert mt.gradcheck(lambda a, v, w: _fill(mt, a, v, w, index), a, v, w)


def test_the_decoder_loop_of_seq2seq():
    """outputs[t] = prediction for t = 1..T-1 into a zeros buffer: each step's prediction
    gets the gradient of its own row, row 0 (never written) none, as in torch."""
    rng = np.random.RandomState(2)
    steps = rng.randn(4, 2, 3)
    grads = {}
    for lib in (torch, mt):
        preds = [lib.tensor(s, requires_grad=True) for s in steps]
        outputs = lib.zeros(5, 2, 3, dtype=lib.float64)
        for t, p in enumerate(preds, start=1):
            outputs[t] = p.tanh()
        assert outputs.requires_grad and outputs.grad_fn is not None
        (outputs[1:] * lib.tensor(np.arange(24.0).reshape(4, 2, 3))).sum().backward()
        grads[lib] = [p.grad.numpy() for p in preds]
    for ours, theirs in zip(grads[mt], grads[torch]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_what_stays_refused():
    leaf = mt.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        leaf[0] = mt.tensor(1.0, requires_grad=True)  # torch refuses a leaf too
    base = mt.zeros(2, 3)
    view = base[0]
    with pytest.raises(RuntimeError, match="operand requires grad"):
        view[1] = mt.tensor(1.0, requires_grad=True)  # base would not learn of the write
    with mt.no_grad():
        buffer = mt.zeros(3)
        buffer[1] = mt.tensor(2.0, requires_grad=True)  # no graph under no_grad: a copy
    assert not buffer.requires_grad and buffer.numpy()[1] == 2.0


def test_a_saved_value_overwritten_is_caught_at_backward():
    x = mt.zeros(3) + mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()  # mul saved x
    x[0] = mt.tensor(5.0, requires_grad=True)
    with pytest.raises(RuntimeError):
        y.backward()
