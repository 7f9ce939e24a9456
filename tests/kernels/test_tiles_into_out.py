"""The tile kernel writes a product into a given `out` where it lies — attention's gradients
for q, k and v are laid out as the heads are, (B, h, L, d) over (B, L, h, d) memory — instead of
np.matmul computing it there, or the tiles computing it C-ordered and copying
(kernels/fast_matmul/products.py, `tiled_matmul` and `_product`)."""

import numpy as np
import pytest

from minitensor.kernels.fast_matmul import products as P

RNG = np.random.default_rng(0)
B, H, L, D = 3, 4, 7, 16


def _heads(dtype):
    """(B, H, L, D) views of (B, L, H, D) arrays: the layout of attention's q, k and v."""
    return RNG.standard_normal((B, L, H, D)).astype(dtype).transpose(0, 2, 1, 3)


def _scores(dtype):
    return RNG.standard_normal((B, H, L, L)).astype(dtype)


PRODUCTS = {  # the backward's products that ask for an out laid out as the heads
    "dq = g @ k": lambda dt: (_scores(dt), _heads(dt)),
    "dk = gᵀ @ q": lambda dt: (_scores(dt).transpose(0, 1, 3, 2), _heads(dt)),
    "dv = wᵀ @ gy": lambda dt: (_scores(dt).transpose(0, 1, 3, 2), _heads(dt)),
}


@pytest.mark.parametrize("name", list(PRODUCTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tile", P.TILE_SHAPES)
def test_the_tiles_write_into_an_out_laid_out_as_the_heads(name, dtype, tile, monkeypatch):
    a, b = PRODUCTS[name](dtype)
    out = np.empty_like(_heads(dtype))  # (B, H, L, D), rows contiguous, not C-ordered
    assert not out.flags.c_contiguous and P._rows_writable(out, a, b)
    copies = []
    monkeypatch.setattr(P.np, "copyto", lambda *args, **kw: copies.append(args))
    assert P.tiled_matmul(a, b, tile, out=out) is out
    assert copies == []  # written where it lies, not copied in
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=tol, atol=tol)


OUTS = {  # outs the kernel cannot write in place: computed C-ordered, then copied in
    "columns not contiguous": lambda shape: np.empty(shape[:-2] + shape[:-3:-1]).swapaxes(-1, -2),
    "read-only": lambda shape: np.lib.stride_tricks.as_strided(np.empty(shape), writeable=False),
    "overlapping rows": lambda shape: np.lib.stride_tricks.as_strided(
        np.empty(shape), strides=(0,) + np.empty(shape).strides[1:]
    ),
}


@pytest.mark.parametrize("name", list(OUTS))
def test_an_out_the_tiles_cannot_write_in_place_gets_a_copy(name):
    a, b = PRODUCTS["dq = g @ k"](np.float64)
    out = OUTS[name]((B, H, L, D))
    assert not P._rows_writable(out, a, b)
    if not out.flags.writeable:
        with pytest.raises(ValueError):  # numpy refuses to copy into it: nothing written
            P.tiled_matmul(a, b, out=out)
        return
    assert P.tiled_matmul(a, b, out=out) is out
    if name != "overlapping rows":  # (every matrix of that one is the same memory)
        np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-12, atol=1e-12)


def test_an_out_that_is_an_operand_is_not_written_while_it_is_read():
    a = RNG.standard_normal((2, 8, 8))
    b = RNG.standard_normal((2, 8, 8))
    want = np.matmul(a, b)
    assert not P._rows_writable(a, a, b)
    assert P.tiled_matmul(a, b, out=a) is a
    np.testing.assert_allclose(a, want, rtol=1e-12, atol=1e-12)


def test_an_out_of_the_wrong_shape_or_dtype_is_refused_with_both_named():
    a, b = PRODUCTS["dq = g @ k"](np.float32)
    for out in (np.empty((B, H, L, D + 1), np.float32), np.empty((B, H, L, D), np.float64)):
        with pytest.raises(ValueError, match=r"tiled_matmul: out .* for a \(3, 4, 7, 7\)"):
            P.tiled_matmul(a, b, out=out)


def test_a_product_routed_to_the_tiles_is_written_into_out_by_them(monkeypatch):
    """`_product` hands `out` to the tiles where they won the layout (before, np.matmul computed
    every small stack into out: 100 µs against the tiles' 50 on this layout, B 128, on an AMD
    EPYC Zen 3)."""
    a, b = PRODUCTS["dk = gᵀ @ q"](np.float32)
    seen = []

    def tiles(x, y, out=None):
        seen.append(out)
        return P.tiled_matmul(x, y, out=out)

    monkeypatch.setattr(P, "_choose", lambda x, y: ("tiles", tiles))
    out = np.empty_like(_heads(np.float32))
    assert P._product(a, b, out) is out and seen == [out]
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)
