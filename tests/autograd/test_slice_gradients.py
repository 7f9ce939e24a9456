"""A view's backward (x[index] for basic indices: split, chunk, unbind, x[:, -1]) returns a
SliceGradient, which the engine adds into the gradient it gathers for x — into that array
itself only when the walk allocated it, never into an array someone else holds."""

import numpy as np
import pytest

import minitensor as mt


def _grads(fn, *shapes, seed=0):
    """The gradients of fn(*leaves) (a scalar) with respect to float64 leaves of `shapes`."""
    rng = np.random.default_rng(seed)
    leaves = [mt.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    fn(*leaves).backward()
    return [t.grad.numpy() for t in leaves], leaves


def test_the_pieces_of_a_split_send_their_gradients_into_one_array():
    def loss(a):
        h = a * 2  # a node, so the pieces' gradients gather at h
        q, k, v = h.split(4, dim=1)
        return (q * 1.0).sum() + (k * 3.0).sum()  # v unused: its part stays zero

    (g,), _ = _grads(loss, (5, 12))
    want = np.zeros((5, 12))
    want[:, :4], want[:, 4:8] = 2.0, 6.0
    np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("slice_first", [True, False])
def test_a_share_passed_on_unchanged_is_not_written_into(slice_first):
    """x + c sends its gradient on as it arrived, to both inputs: the array c's node gathers
    must not change when a slice of x's gradient is added to x's (backward runs the newest
    node first: with the slice made first, the sum's share reaches h first, and the slice
    is added into a copy of it)."""

    def loss(a, b):
        h, c = a * 1.0, b * 1.0
        piece = h[:2] if slice_first else None
        s = h + c  # its backward returns one array, for h and for c
        piece = h[:2] if piece is None else piece
        return s.sum() + (piece * 5.0).sum()

    (ga, gb), _ = _grads(loss, (4, 3), (4, 3))
    np.testing.assert_array_equal(gb, np.ones((4, 3)))
    want = np.ones((4, 3))
    want[:2] += 5.0
    np.testing.assert_array_equal(ga, want)


@pytest.mark.parametrize(
    "index", [np.s_[1], np.s_[:, -1], np.s_[1:3, None, ::2], np.s_[..., 0], np.s_[::-1]]
)
def test_every_kind_of_basic_index_gives_the_dense_gradient(index):
    rng = np.random.default_rng(1)
    x = mt.tensor(rng.standard_normal((4, 5)), requires_grad=True)
    h = x * 1.0
    w = rng.standard_normal(np.empty((4, 5))[index].shape)
    ((h[index] * mt.tensor(w)).sum() + (h[index] * mt.tensor(w)).sum()).backward()
    want = np.zeros((4, 5))
    want[index] += 2 * w
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_a_leaf_sliced_directly_and_the_step_through_and_anomaly_mode_agree():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 6))

    def run(mode):
        w = mt.tensor(data, requires_grad=True)
        h = w * 1.0
        loss = sum((p * float(i + 1)).sum() for i, p in enumerate(h.chunk(3, dim=1)))
        loss = loss + (w[0] * 7.0).sum()  # a leaf's own slice: made whole for its .grad
        if mode == "steps":
            for _ in loss.backward_steps():
                pass
        elif mode == "anomaly":
            with mt.autograd.detect_anomaly():
                loss.backward()
        else:
            loss.backward(retain_graph=True)
            loss.backward()  # a second pass: its arrays start over
        return w.grad.numpy()

    want = np.repeat([1.0, 2.0, 3.0], 2)[None, :].repeat(3, axis=0)
    want[0] += 7.0
    np.testing.assert_array_equal(run("steps"), want)
    np.testing.assert_array_equal(run("anomaly"), want)
    np.testing.assert_array_equal(run("twice"), 2 * want)


def test_gradcheck_through_split_and_unbind():
    x = mt.tensor(np.random.default_rng(3).standard_normal((3, 4)), requires_grad=True)

    def f(t):
        h = t * t
        a, b = h.split(2, dim=1)
        rows = h.unbind(0)
        return (a * b).sum() + rows[1].sum() * rows[2].sum()

    assert mt.gradcheck(f, x)
