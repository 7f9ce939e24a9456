"""minitensor/ops/shape.py: reshapes, views, joins, splits, indexing, where, masks, tril/triu."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F

gradcheck = mt.gradcheck


def close(t, expected, tol=1e-10):
    np.testing.assert_allclose(t.numpy(), expected, rtol=tol, atol=tol)


# ============================================================================ shape ops


def test_reshape_view_flatten(leaf):
    x = leaf(2, 3, 4)
    assert x.reshape(6, 4).shape == (6, 4)
    assert x.reshape((4, -1)).shape == (4, 6)
    assert x.view(-1).shape == (24,)
    assert x.flatten().shape == (24,)
    assert x.flatten(1).shape == (2, 12)
    assert x.flatten(0, -2).shape == (6, 4)
    close(x.reshape(4, 6), x.numpy().reshape(4, 6))
    assert gradcheck(lambda x: x.reshape(4, 6) * mt.arange(6.0, dtype=mt.float64), x)
    assert gradcheck(lambda x: x.T.reshape(-1, 2), x)  # reshape of a transpose copies
    assert gradcheck(lambda x: x.flatten(1, 2), x)


def test_transpose_permute_swapaxes_T_mT(leaf):
    x = leaf(2, 3, 4)
    close(x.T, x.numpy().T)
    close(x.mT, np.swapaxes(x.numpy(), -1, -2))
    close(x.transpose(), x.numpy().T)
    close(x.transpose(0, 2), np.swapaxes(x.numpy(), 0, 2))
    close(x.permute(2, 0, 1), np.transpose(x.numpy(), (2, 0, 1)))
    close(x.permute((1, -1, 0)), np.transpose(x.numpy(), (1, 2, 0)))
    close(x.swapaxes(-1, 0), np.swapaxes(x.numpy(), -1, 0))
    w = mt.tensor(np.arange(24.0).reshape(4, 3, 2), dtype=mt.float64)
    for fn in (
        lambda x: x.T,
        lambda x: x.permute(2, 0, 1),
        lambda x: x.swapaxes(0, -2),
        lambda x: x.transpose(1, 2).permute(1, 0, 2),
    ):
        assert gradcheck(lambda x, fn=fn: fn(x) * fn(w.permute(2, 1, 0)), x)


def test_expand_and_broadcast_to(leaf):
    x = leaf(3, 1)
    e = x.expand(2, 3, 4)
    close(e, np.broadcast_to(x.numpy(), (2, 3, 4)))
    assert x.expand(-1, 5).shape == (3, 5)
    assert x.broadcast_to((4, 3, 2)).shape == (4, 3, 2)
    w = mt.tensor(np.arange(24.0).reshape(2, 3, 4), dtype=mt.float64)
    assert gradcheck(lambda x: x.expand(2, 3, 4) * w, x)
    assert gradcheck(lambda x: F.broadcast_to(x.T, (3, 3)) * w[0, :, :3], x)


def test_squeeze_unsqueeze(leaf):
    x = leaf(1, 3, 1)
    assert x.squeeze().shape == (3,)
    assert x.squeeze(0).shape == (3, 1)
    assert x.squeeze(-1).shape == (1, 3)
    assert x.squeeze((0, 2)).shape == (3,)
    assert x.squeeze(1).shape == (1, 3, 1)  # size 3: stays, as in torch
    assert x.unsqueeze(0).shape == (1, 1, 3, 1)
    assert x.unsqueeze(-1).shape == (1, 3, 1, 1)
    assert x.unsqueeze(2).shape == (1, 3, 1, 1)
    assert gradcheck(lambda x: x.squeeze().unsqueeze(0) * mt.arange(1.0, 4.0, dtype=mt.float64), x)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_and_stack(axis, leaf):
    a, b, c = leaf(2, 3), leaf(2, 3), leaf(2, 3)
    close(
        mt.concat([a, b, c], axis=axis),
        np.concatenate([a.numpy(), b.numpy(), c.numpy()], axis=axis),
    )
    close(mt.stack([a, b, c], axis=axis), np.stack([a.numpy(), b.numpy(), c.numpy()], axis=axis))
    assert mt.cat([a, b], axis=axis).shape == np.concatenate([a.numpy(), b.numpy()], axis).shape
    w = mt.tensor(np.random.default_rng(0).standard_normal((3, 2, 3)), dtype=mt.float64)
    assert gradcheck(lambda a, b, c: mt.concat([a, b.T.T, c], axis=axis) ** 2, a, b, c)
    assert gradcheck(
        lambda a, b, c: (
            mt.stack([a, b, c], axis=axis) * w.reshape(np.stack([a.numpy()] * 3, axis=axis).shape)
        ),
        a,
        b,
        c,
    )


def test_concat_of_different_sizes_and_a_constant(leaf):
    a, b = leaf(2, 1), leaf(2, 3)
    const = mt.ones(2, 2, dtype=mt.float64)
    out = mt.concat([a, const, b], axis=1)
    assert out.shape == (2, 6)
    assert gradcheck(lambda a, b: mt.concat([a, const, b], axis=-1) ** 2, a, b)


def test_split_and_chunk(leaf):
    x = leaf(7, 2)
    parts = x.split(3)
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
    parts = x.split([2, 5])
    assert [p.shape for p in parts] == [(2, 2), (5, 2)]
    parts = mt.split(x, 1, axis=-1)
    assert [p.shape for p in parts] == [(7, 1), (7, 1)]
    chunks = x.chunk(3)
    assert [c.shape for c in chunks] == [(3, 2), (3, 2), (1, 2)]
    close(mt.concat(chunks), x.numpy())
    assert gradcheck(lambda x: tuple(p * (i + 1) for i, p in enumerate(x.split([2, 5]))), x)
    assert gradcheck(lambda x: x.chunk(2, axis=1)[1].exp(), x)
    assert gradcheck(lambda x: mt.chunk(x.T, 2, axis=0)[0], x)


INDICES = {
    "int": 1,
    "negative int": -1,
    "slice": slice(1, None),
    "step slice": (slice(None, None, 2), slice(None, None, -1)),
    "int and slice": (0, slice(1, 3)),
    "None": (None, 1),
    "Ellipsis": (Ellipsis, 0),
    "Ellipsis and None": (0, Ellipsis, None),
    "int array": np.array([2, 0]),
    "repeated ints": np.array([0, 0, 2, 0]),
    "list": [1, 1],
    "int tensor": mt.tensor([3, 0, 3]),
    "two int arrays": (np.array([0, 0, 1]), np.array([2, 2, 1])),
    "array and slice": (slice(None), np.array([[0, 1], [1, 1]])),
    "bool mask": "mask",
    "bool row mask": np.array([True, False, True, True]),
}


@pytest.mark.parametrize("name", list(INDICES))
def test_getitem(name, leaf):
    x = leaf(4, 3)
    index = INDICES[name]
    if isinstance(index, str):
        index = x.numpy() > 0
        index[0, 0] = True  # never empty
    out = x[index]
    np_index = index.numpy() if isinstance(index, mt.Tensor) else index
    close(out, x.numpy()[np_index])
    assert gradcheck(lambda x: x[index], x)
    assert gradcheck(lambda x: x.T.T[index] * 2, x)


def test_getitem_with_repeated_indices_adds_gradients():
    x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[[0, 0, 2, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3, 0, 1])


def test_getitem_of_a_transposed_input(leaf):
    x = leaf(3, 4)
    assert gradcheck(lambda x: x.T[1:, np.array([0, 2, 2])], x)


def test_where(leaf):
    cond = mt.tensor([[True, False, True]])
    a, b = leaf(2, 3), leaf(3)
    close(mt.where(cond, a, b), np.where(cond.numpy(), a.numpy(), b.numpy()))
    assert gradcheck(lambda a, b: mt.where(cond, a, b), a, b)
    assert gradcheck(lambda a: mt.where(a > 0, a, 0.0), a)
    assert gradcheck(lambda a, b: F.where(cond.numpy().T, a.T, b[:, None]), a, b)


def test_masked_fill(leaf):
    x = leaf(2, 3)
    mask = mt.tensor([False, True, False])
    y = x.masked_fill(mask, -1e9)
    close(y, np.where(mask.numpy(), -1e9, x.numpy()))
    assert gradcheck(lambda x: x.masked_fill(mask, 0.0), x)
    assert gradcheck(lambda x: x.T.masked_fill(mask[:, None], 5.0), x)
    x.masked_fill(mask, 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 0, 1], [1, 0, 1]])


@pytest.mark.parametrize("k", [0, 1, -1])
def test_tril_triu(k, leaf):
    x = leaf(2, 4, 4)
    close(x.tril(k), np.tril(x.numpy(), k))
    close(x.triu(k), np.triu(x.numpy(), k))
    assert gradcheck(lambda x: x.tril(k), x)
    assert gradcheck(lambda x: F.triu(x.mT, k), x)


# --------------------------------------------------------------------------- split, chunk
def test_split_and_chunk_of_an_empty_axis_match_torch():
    torch = pytest.importorskip("torch")
    x = mt.zeros(0, 3)
    assert [p.shape for p in F.split(x, 2)] == [tuple(p.shape) for p in torch.zeros(0, 3).split(2)]
    assert [p.shape for p in F.chunk(x, 3)] == [tuple(p.shape) for p in torch.zeros(0, 3).chunk(3)]
    assert [p.shape for p in F.split(mt.zeros(3, 0), 2, axis=1)] == [(3, 0)]
