"""minitensor.kernels: every numba kernel against its numpy twin, the edge cases, both backends
through the ops (gradcheck in float64), and the backend switch.

"Agree" means: the same shape and dtype, and max |kernel − twin| ≤ tol · max |twin| with
tol = 1e-5 for float32 and 1e-12 for float64 (relative to the array's scale, so entries that
are ~0 — a softmax weight of 1e-30 — do not demand impossible relative precision).
Kernels compile once per machine (numba's on-disk cache); the tests reuse the same few
signatures, so nothing recompiles per test.
"""

import functools
import os
import subprocess
import sys

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import kernels as K

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 1e-5, np.float64: 1e-12}


def assert_agree(got, ref, dtype):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert got.dtype == ref.dtype == np.dtype(dtype), (got.dtype, ref.dtype)
    assert np.array_equal(np.isnan(got), np.isnan(ref)), "NaN pattern differs"
    scale = max(float(np.max(np.abs(ref), initial=0.0)), np.finfo(dtype).tiny)
    err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)), initial=0.0))
    assert err <= TOL[dtype] * scale, f"max error {err:.3g} vs scale {scale:.3g}"


def both(kernel, *args):
    """(numba result, numpy result) of one public kernel."""
    return kernel.numba(*args), kernel.numpy(*args)


def transposed(rng, shape, dtype):
    """A random array of `shape` that is a non-contiguous view (last two axes swapped)."""
    base = rng.standard_normal(shape[:-2] + (shape[-1], shape[-2])).astype(dtype)
    view = np.swapaxes(base, -1, -2)
    assert not view.flags.c_contiguous
    return view


# ---- softmax ---------------------------------------------------------------------------------

SOFTMAX_CASES = [  # (scores shape, mask shape or None)
    ((7,), None),  # a single row
    ((5, 1), None),  # L = 1
    ((3, 4, 1, 1), (3, 1, 1, 1)),  # Lq = Lk = 1 with a padding mask
    ((2, 3, 5, 9), (2, 1, 1, 9)),  # padding mask broadcast over heads and queries
    ((2, 3, 6, 6), (6, 6)),  # causal mask broadcast over batch and heads
    ((4, 2, 3, 8), (4, 2, 3, 8)),  # a full mask
    ((2, 2, 3, 4, 5), (2, 1, 3, 1, 5)),  # more than four axes
    ((33, 130), (130,)),  # rows longer than the kernel's block stride
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,mask_shape", SOFTMAX_CASES)
@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_softmax_forward_backward_match_twin(shape, mask_shape, mask_kind, dtype, rng):
    x = (3 * rng.standard_normal(shape)).astype(dtype)
    mask = None
    if mask_shape is not None:
        blocked = rng.random(mask_shape) < 0.3
        mask = blocked if mask_kind == "bool" else np.where(blocked, -np.inf, 0.0).astype(dtype)
    y, y_ref = both(K.softmax_forward, x, 0.37, mask)
    assert_agree(y, y_ref, dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    dx, dx_ref = both(K.softmax_backward, y_ref, dy, 0.37)
    assert_agree(dx, dx_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_non_contiguous_inputs(dtype, rng):
    x = transposed(rng, (3, 4, 6, 5), dtype)
    mask = np.swapaxes(rng.random((3, 1, 5, 6)) < 0.3, -1, -2)  # a non-contiguous mask
    y, y_ref = both(K.softmax_forward, x, 0.5, mask)
    assert_agree(y, y_ref, dtype)
    dy = transposed(rng, x.shape, dtype)
    assert_agree(*both(K.softmax_backward, y_ref, dy, 0.5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_fully_masked_rows_are_zero_not_nan(dtype, rng):
    x = rng.standard_normal((2, 2, 4, 6)).astype(dtype)
    mask = np.zeros((2, 1, 4, 6), dtype=bool)
    mask[0, 0, 1, :] = True  # one query row blocked everywhere
    mask[1, 0, :, :] = True  # a whole sequence blocked
    for additive in (False, True):
        m = np.where(mask, -np.inf, 0.0).astype(dtype) if additive else mask
        for kernel in (K.softmax_forward.numba, K.softmax_forward.numpy):
            y = kernel(x, 1.0, m)
            assert not np.isnan(y).any()
            assert np.all(y[0, :, 1] == 0) and np.all(y[1] == 0)
            assert np.allclose(y[0, :, 0].sum(-1), 1)
            dx = K.softmax_backward.numba(y, rng.standard_normal(y.shape).astype(dtype), 1.0)
            assert not np.isnan(dx).any() and np.all(dx[1] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_nan_input_gives_a_nan_row_in_both_backends(dtype, rng):
    """NaN must stay visible (anomaly mode looks for it), not be renormalised away."""
    x = rng.standard_normal((3, 6)).astype(dtype)
    x[1, 2] = np.nan
    for kernel, args in ((K.softmax_forward, (x, 1.0, None)), (K.log_softmax_forward, (x,))):
        out, ref = both(kernel, *args)
        assert np.isnan(out[1]).all() and np.isnan(ref[1]).all()
        assert_agree(out[[0, 2]], ref[[0, 2]], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_extreme_logits(dtype, rng):
    x = rng.choice(np.array([-1e4, 0.0, 1e4, 3.0]), size=(6, 11)).astype(dtype)
    x[0] = -1e4  # all equal and very negative
    y, y_ref = both(K.softmax_forward, x, 1.0, None)
    assert np.isfinite(y).all()
    assert_agree(y, y_ref, dtype)
    assert np.allclose(y.sum(-1), 1)
    z, z_ref = both(K.log_softmax_forward, x)
    assert np.isfinite(z).all()
    assert_agree(z, z_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_scale_is_applied_before_the_mask(dtype, rng):
    x = rng.standard_normal((3, 5)).astype(dtype)
    mask = np.array([0, 0, -np.inf, 0, 0], dtype=dtype)
    expected = K.softmax_forward.numpy(x * dtype(0.125), 1.0, mask)
    assert_agree(K.softmax_forward.numba(x, 0.125, mask), expected, dtype)


def test_float32_exp_is_accurate_over_its_whole_range():
    from numba import njit

    from minitensor.kernels.jit import exp

    @njit
    def apply(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = exp(x[i])
        return out

    x = np.linspace(-86.9, 88.0, 200_001).astype(np.float32)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(apply(x) - ref) / ref) < 1e-6
    special = apply(np.array([-np.inf, -1e4, -88.0, 0.0], dtype=np.float32))
    assert special.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert np.isnan(apply(np.array([np.nan], dtype=np.float32))[0])


# ---- log_softmax, cross_entropy, layer_norm ------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(9,), (4, 1), (3, 5, 17), (2, 300)])
def test_log_softmax_matches_twin(shape, dtype, rng):
    x = (4 * rng.standard_normal(shape)).astype(dtype)
    y, y_ref = both(K.log_softmax_forward, x)
    assert_agree(y, y_ref, dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    assert_agree(*both(K.log_softmax_backward, y_ref, dy), dtype)
    if len(shape) >= 2 and shape[-1] > 1:
        xt = np.swapaxes(x, -1, -2).copy()
        assert_agree(*both(K.log_softmax_forward, np.swapaxes(xt, -1, -2)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("n,c", [(1, 5), (13, 7), (40, 300)])
def test_cross_entropy_matches_twin(n, c, smoothing, dtype, rng):
    logits = (3 * rng.standard_normal((n, c))).astype(dtype)
    logits[0, 0] = 1e4
    if n > 2:
        logits[1, :] = -1e4
    targets = rng.integers(0, c, size=n)
    targets[n // 2] = -1  # an ignored row
    (rows, lse), (rows_ref, lse_ref) = both(K.cross_entropy_forward, logits, targets, -1, smoothing)
    assert rows[n // 2] == 0 and np.isfinite(rows).all()
    assert_agree(rows, rows_ref, dtype)
    assert_agree(lse, lse_ref, dtype)
    g = rng.standard_normal(n).astype(dtype)
    dx, dx_ref = both(K.cross_entropy_backward, logits, targets, lse_ref, g, -1, smoothing)
    assert np.all(dx[n // 2] == 0)
    assert_agree(dx, dx_ref, dtype)
    # non-contiguous logits (a transposed view)
    lt = np.swapaxes(logits.T.copy(), 0, 1)
    assert_agree(K.cross_entropy_forward.numba(lt, targets, -1, smoothing)[0], rows_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("n,d", [(1, 8), (7, 33), (64, 128)])
def test_layer_norm_matches_twin(n, d, affine, dtype, rng):
    x = (2 + 3 * rng.standard_normal((n, d))).astype(dtype)
    w = rng.standard_normal(d).astype(dtype) if affine else None
    b = rng.standard_normal(d).astype(dtype) if affine else None
    out, ref = both(K.layer_norm_forward, x, w, b, 1e-5)
    for got, want in zip(out, ref):
        assert_agree(got, want, dtype)
    dy = rng.standard_normal((n, d)).astype(dtype)
    _, mean, rstd = ref
    grads, grads_ref = both(K.layer_norm_backward, dy, x, mean, rstd, w)
    assert (grads[1] is None) == (grads_ref[1] is None) == (not affine)
    for got, want in zip(grads, grads_ref):
        if want is not None:
            assert_agree(got, want, dtype)
    # a non-contiguous x gives the same result
    xt = np.swapaxes(x.T.copy(), 0, 1)
    assert_agree(K.layer_norm_forward.numba(xt, w, b, 1e-5)[0], ref[0], dtype)


def test_parallel_builds_match_twins(monkeypatch, rng):
    """Large inputs run the parallel build of each kernel when numba has several threads; force
    it on small ones here (on one thread it runs as a single task)."""
    from minitensor.kernels import jit

    monkeypatch.setattr(jit, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(jit, "threads", lambda: 2)
    for dtype in DTYPES:
        x = rng.standard_normal((3, 4, 5, 6)).astype(dtype)
        mask = rng.random((3, 1, 1, 6)) < 0.3
        y, y_ref = both(K.softmax_forward, x, 0.5, mask)
        assert_agree(y, y_ref, dtype)
        assert_agree(*both(K.softmax_backward, y_ref, x, 0.5), dtype)
        assert_agree(*both(K.log_softmax_forward, x), dtype)
        assert_agree(*both(K.log_softmax_backward, x, x), dtype)
        logits, targets = x.reshape(-1, 6), rng.integers(0, 6, 60)
        for got, want in zip(*both(K.cross_entropy_forward, logits, targets, 0, 0.1)):
            assert_agree(got, want, dtype)
        _, lse = K.cross_entropy_forward.numpy(logits, targets, 0, 0.1)
        g = rng.standard_normal(60).astype(dtype)
        assert_agree(*both(K.cross_entropy_backward, logits, targets, lse, g, 0, 0.1), dtype)
        w = rng.standard_normal(6).astype(dtype)
        out, ref = both(K.layer_norm_forward, logits, w, w, 1e-5)
        for got, want in zip(out, ref):
            assert_agree(got, want, dtype)
        for got, want in zip(*both(K.layer_norm_backward, logits, logits, ref[1], ref[2], w)):
            assert_agree(got, want, dtype)


# ---- matmul ------------------------------------------------------------------------------------

MATMUL_CASES = [  # (a shape, b shape)
    ((5, 7), (7, 3)),  # 2-D (BLAS)
    ((2, 3, 8, 16), (16, 24)),  # (B, h, L, d) @ (d, e): folded into one 2-D product
    ((6, 8, 16), (6, 16, 8)),  # attention scores q·kᵀ
    ((4, 1, 9, 9), (1, 3, 9, 5)),  # batch axes broadcast both ways
    ((3, 1, 4), (3, 4, 6)),  # n = 1
    ((2, 70, 70), (2, 70, 70)),  # above the kernel's size limit: BLAS
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape,b_shape", MATMUL_CASES)
def test_matmul_and_its_gradients_match_twin(a_shape, b_shape, dtype, rng):
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    out, out_ref = both(K.matmul, a, b)
    assert_agree(out, out_ref, dtype)
    g = rng.standard_normal(out_ref.shape).astype(dtype)
    assert_agree(*both(K.matmul_grad_a, g, b), dtype)
    assert_agree(*both(K.matmul_grad_b, a, g), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_reads_transposed_views(dtype, rng):
    q = rng.standard_normal((2, 8, 5, 16)).astype(dtype).transpose(0, 2, 1, 3)  # split heads
    k = rng.standard_normal((2, 8, 5, 16)).astype(dtype).transpose(0, 2, 1, 3)
    k_t = np.swapaxes(k, -1, -2)
    assert_agree(*both(K.matmul, q, k_t), dtype)
    g = transposed(rng, (2, 5, 8, 8), dtype)
    assert_agree(*both(K.matmul_grad_a, g, k_t), dtype)
    assert_agree(*both(K.matmul_grad_b, q, g), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [2, 64, 1024])  # np.matmul; the tiles; gemm, deterministic
def test_gradient_products_write_into_a_given_layout(dtype, batch, rng):
    """matmul_grad_a/b(..., out=) write the product into `out`, laid out as attention's heads
    are, on every route (np.matmul into it, the tiles' and gemm's results copied in), and agree
    with the twin given the same out."""
    q = rng.standard_normal((batch, 7, 4, 16)).astype(dtype).swapaxes(1, 2)  # (B, h, L, d)
    k = rng.standard_normal((batch, 7, 4, 16)).astype(dtype).swapaxes(1, 2)
    g = rng.standard_normal((batch, 4, 7, 7)).astype(dtype)
    mt.use_deterministic_algorithms(batch == 1024)  # there the route is gemm's, copied into out
    try:
        _write_into_layouts(dtype, q, k, g)
    finally:
        mt.use_deterministic_algorithms(False)


def _write_into_layouts(dtype, q, k, g):
    for kernel, args, like in (
        (K.matmul_grad_a, (g, np.swapaxes(k, -1, -2)), q),
        (K.matmul_grad_b, (q, g), np.swapaxes(k, -1, -2)),
    ):
        got_out, ref_out = np.empty_like(like), np.empty_like(like)
        got = kernel.numba(*args, out=got_out)
        ref = kernel.numpy(*args, out=ref_out)
        assert got is got_out and ref is ref_out
        assert (
            got.strides == like.strides
            or np.argsort(got.strides).tolist() == np.argsort(like.strides).tolist()
        )
        assert_agree(got, ref, dtype)
        assert_agree(got, kernel.numpy(*args), dtype)  # the same values as C-ordered


from minitensor.kernels.fast_matmul import microkernel  # noqa: E402
from minitensor.kernels.fast_matmul import products as matmul_module  # noqa: E402


@pytest.fixture
def two_threads(monkeypatch):
    """Run the kernels as on a 2-core machine (parallel builds, products shared by threads)
    even where the tests run on one."""
    from minitensor.kernels import jit

    monkeypatch.setattr(jit, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    as_if_it_won = {"tiles": matmul_module.tiled_matmul, "gemm": matmul_module.gemm_product}
    monkeypatch.setattr(matmul_module, "fastest", lambda a, b, c: (c, as_if_it_won[c]))


GEMM_CASES = [  # (a, b) builders: every layout the BLAS-calling kernels read in place or copy
    lambda r, t: (r((4, 3, 5, 6), t), r((4, 3, 6, 7), t)),  # stacks
    lambda r, t: (r((4, 3, 5, 6), t), r((3, 6, 7), t)),  # b broadcast
    lambda r, t: (r((4, 1, 5, 6), t), r((1, 3, 6, 7), t)),  # both broadcast
    lambda r, t: (r((4, 3, 5, 6), t), np.swapaxes(r((4, 3, 7, 6), t), -1, -2)),  # q·kᵀ view
    lambda r, t: (np.swapaxes(r((4, 3, 6, 5), t), -1, -2), r((4, 3, 6, 7), t)),  # aᵀ view
    lambda r, t: (
        r((2, 7, 4, 8), t).transpose(0, 2, 1, 3),  # head-split views
        r((2, 9, 4, 8), t).transpose(0, 2, 3, 1),
    ),
    lambda r, t: (r((4, 3, 10, 6), t)[..., ::2, :], r((4, 3, 6, 2), t)),  # strided rows
    lambda r, t: (r((4, 5, 12), t)[..., ::2], r((6, 3), t)),  # no unit stride: copy
    lambda r, t: (r((2, 9, 6), t), r((6, 4), t)),  # Linear: row blocks
    lambda r, t: (r((2, 9, 6), t), r((4, 6), t).T),  # x·Wᵀ
    lambda r, t: (r((90, 13), t).T, r((90, 17), t)),  # dW = Xᵀ·dY
    lambda r, t: (r((9, 2, 6), t).transpose(1, 0, 2), r((6, 4), t)),  # non-contiguous x
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(GEMM_CASES)))
def test_gemm_product_matches_numpy_on_every_layout(case, dtype, rng, two_threads):
    """The kernels that call BLAS from numba threads (matmul.gemm_product) give np.matmul's
    result for stacks, broadcast batches, transposed and strided views and row blocks."""
    if np.dtype(dtype) not in matmul_module.GEMM:
        pytest.skip("numpy's OpenBLAS was not found: minitensor uses np.matmul instead")
    a, b = GEMM_CASES[case](lambda shape, t: rng.standard_normal(shape).astype(t), dtype)
    assert_agree(matmul_module.gemm_product(a, b), np.matmul(a, b), dtype)


def test_gemm_reads_transposed_views_in_place():
    """kᵀ, a transposed view, goes to BLAS as "transposed" with its own stride: no copy."""
    k = np.zeros((2, 4, 7, 16), dtype=np.float32)
    view, trans, ld = matmul_module._blas_layout(np.swapaxes(k, -1, -2))
    assert view.base is k and trans == matmul_module.TRANS and ld == 16
    strided = np.zeros((5, 12), dtype=np.float32)[:, ::2]
    copy, trans, ld = matmul_module._blas_layout(strided)
    assert copy.flags.c_contiguous and trans == matmul_module.NO_TRANS and ld == 6


def test_matmul_routes(rng, two_threads, monkeypatch):
    """The measured rule of matmul.route: stacks of matrices up to 256³ to the tile kernel,
    bigger products to the BLAS-calling threads, small ones to np.matmul; on one thread and
    under the "both" owner, a Linear layer's product to np.matmul but stacks still to the
    tiles (np.matmul would call BLAS once per small matrix); np.matmul without BLAS, for
    integers and mixed dtypes."""
    route = K.matmul_route
    q, k = (np.zeros((256, 8, 16), np.float32) for _ in range(2))
    k_t = np.swapaxes(k, -1, -2)
    assert route(q, k_t) == "tiles"
    assert route(np.zeros((256, 8, 8), np.float32), q) == "tiles"  # weights·v
    assert route(q[:4], k_t[:4]) == "numpy"  # 4 heads of one sentence
    assert route(np.zeros((4, 300, 300)), np.zeros((4, 300, 300))) == "gemm"  # > 256³
    linear = np.zeros((896, 128), np.float32), np.zeros((128, 512), np.float32)
    assert route(*linear) == "gemm"
    assert route(np.zeros((896, 128), np.int64), np.zeros((128, 512), np.int64)) == "numpy"
    assert route(q, k_t.astype(np.float64)) == "numpy"
    monkeypatch.setattr(matmul_module, "threads", lambda: 1)
    assert route(*linear) == "numpy"
    assert route(q, k_t) == "tiles" and route(q, np.ascontiguousarray(k_t)) == "tiles"
    assert route(q[:4], k_t[:4]) == "numpy"
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "_owner", ["both"])
    assert route(*linear) == "numpy" and route(q, k_t) == "tiles"
    monkeypatch.setattr(matmul_module, "_owner", ["numba"])
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "GEMM", {})
    assert route(*linear) == "numpy"
    assert route(q, k_t) == "tiles"  # the tiles do not need BLAS


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_and_gradients_on_the_threads(dtype, rng, two_threads):
    """The attention and Linear products of a step, through the public kernels, on 2 threads."""
    q = rng.standard_normal((2, 70, 4, 32)).astype(dtype).transpose(0, 2, 1, 3)
    k_t = np.swapaxes(
        rng.standard_normal((2, 70, 4, 32)).astype(dtype).transpose(0, 2, 1, 3), -1, -2
    )
    assert K.matmul_route(q, k_t) == "tiles"
    assert_agree(*both(K.matmul, q, k_t), dtype)
    g = rng.standard_normal((2, 4, 70, 70)).astype(dtype)
    assert_agree(*both(K.matmul_grad_a, g, k_t), dtype)
    assert_agree(*both(K.matmul_grad_b, q, g), dtype)
    x = rng.standard_normal((8, 70, 128)).astype(dtype)
    w = rng.standard_normal((128, 96)).astype(dtype)
    assert_agree(*both(K.matmul, x, w), dtype)
    gy = rng.standard_normal((8, 70, 96)).astype(dtype)
    assert_agree(*both(K.matmul_grad_a, gy, w), dtype)
    assert_agree(*both(K.matmul_grad_b, x.reshape(-1, 128), gy.reshape(-1, 96)), dtype)


TILE_CASES = [  # (a, b) builders: r(shape, dtype) → array
    lambda r, t: (r((6, 8, 16), t), np.swapaxes(r((6, 8, 16), t), -1, -2)),  # q·kᵀ, kᵀ a view
    lambda r, t: (r((6, 8, 8), t), r((6, 8, 16), t)),  # weights·v
    lambda r, t: (r((3, 1, 5, 7), t), r((1, 4, 7, 6), t)),  # batch broadcast
    lambda r, t: (r((2, 1, 7), t), r((2, 7, 5), t)),  # n = 1
    lambda r, t: (r((5, 9, 1), t), r((5, 1, 33), t)),  # k = 1, m = 33
    lambda r, t: (r((4, 37, 19), t), np.swapaxes(r((4, 45, 19), t), -1, -2)),  # ragged tiles
    lambda r, t: (np.swapaxes(r((4, 19, 37), t), -1, -2), r((4, 19, 45), t)),  # Aᵀ (dK, dV)
    lambda r, t: (r((3, 70, 24), t), r((3, 24, 70), t)),  # many tiles
    lambda r, t: (
        r((2, 5, 3, 8), t).transpose(0, 2, 1, 3),  # head-split q,
        np.swapaxes(r((2, 5, 3, 8), t).transpose(0, 2, 1, 3), -1, -2),
    ),  # kᵀ
    lambda r, t: (r((3, 12, 30), t)[:, ::-1, ::3], r((3, 20, 14), t)[:, ::2, 1::2]),  # no unit
    lambda r, t: (r((6, 7, 16), t), np.broadcast_to(r((16, 7), t), (6, 16, 7))),  # stride 0
    lambda r, t: (r((1, 1), t), r((2, 1, 3), t)),  # 2-D a
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(TILE_CASES)))
def test_tiled_matmul_matches_numpy(case, dtype, rng, two_threads):
    """The tile kernel (microkernel.py under matmul.tiled_matmul) gives np.matmul's result on
    every layout it may meet: transposed views read in place, broadcast batches, ragged last
    tiles in rows and columns, 1-sized axes, negative, zero and non-unit strides."""
    a, b = TILE_CASES[case](lambda shape, t: rng.standard_normal(shape).astype(t), dtype)
    assert_agree(K.tiled_matmul(a, b), np.matmul(a, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", matmul_module.TILE_SHAPES)
def test_every_tile_shape_matches_numpy_on_whole_and_ragged_tiles(tile, dtype, rng, two_threads):
    """Each register tile, on whole tiles (plain loads and stores: 32 × 32 results, kᵀ packed
    in whole 8 × 8 blocks) and on ragged ones (masked: 37 × 45, 19 deep), both from a
    transposed view."""
    r = lambda shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    for n, m, k in ((32, 32, 16), (37, 45, 19)):
        a, b_t = r((4, n, k)), np.swapaxes(r((4, m, k)), -1, -2)
        assert_agree(matmul_module.tiled_matmul(a, b_t, tile), np.matmul(a, b_t), dtype)
        b = r((4, k, m))
        assert_agree(matmul_module.tiled_matmul(a, b, tile), np.matmul(a, b), dtype)


def test_tiled_matmul_serial_and_threads_agree_bit_for_bit(rng, two_threads, monkeypatch):
    """Each matrix is computed by one thread, the same way whichever: the serial build gives
    the parallel build's result to the last bit."""
    q = rng.standard_normal((64, 24, 32)).astype(np.float32)
    k_t = np.swapaxes(rng.standard_normal((64, 24, 32)).astype(np.float32), -1, -2)
    on_threads = K.tiled_matmul(q, k_t)
    from minitensor.kernels import jit

    monkeypatch.setattr(jit, "threads", lambda: 1)
    monkeypatch.setattr(matmul_module, "threads", lambda: 1)
    assert np.array_equal(K.tiled_matmul(q, k_t), on_threads)


def test_tile_layout_reads_transposed_views_in_place():
    """kᵀ of a contiguous k is read in place (and packed per matrix inside the kernel); a
    view without a unit stride is copied."""
    k = np.zeros((2, 4, 7, 16), dtype=np.float32)
    view, row, col = matmul_module._tile_layout(np.swapaxes(k, -1, -2))
    assert view.base is k and (row, col) == (1, 16)
    strided = np.zeros((5, 12), dtype=np.float32)[:, ::2]
    copy, row, col = matmul_module._tile_layout(strided)
    assert copy.flags.c_contiguous and (row, col) == (6, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_block_on_every_block_size(dtype):
    """microkernel.transpose_block, the in-register 8 × 8 transpose that packs kᵀ: every
    block size from 1 × 1 to 8 × 8, writing nothing outside the block."""
    from numba import njit

    @njit
    def transpose(src, dst, rows, cols):
        item = src.itemsize
        microkernel.transpose_block(
            src.ctypes.data,
            src.strides[0] // item,
            dst.ctypes.data,
            dst.strides[0] // item,
            rows,
            cols,
            src.dtype.type(0),
        )

    source = np.arange(100, dtype=dtype).reshape(10, 10)
    for rows in range(1, 9):
        for cols in range(1, 9):
            out = np.full((10, 10), -1, dtype)
            transpose(source[:rows, :cols], out, rows, cols)
            expected = np.full((10, 10), -1, dtype)
            expected[:cols, :rows] = source[:rows, :cols].T
            assert np.array_equal(out, expected), (rows, cols)


# ---- dropout -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_kernel_and_twin_drop_the_same_entries(p, dtype, rng, two_threads):
    """The mask is a hash of (seed, position): both backends, serial or on threads, keep
    exactly the same entries and scale them by 1/(1 − p); about 1 − p of them are kept."""
    x = rng.standard_normal((64, 7, 130)).astype(dtype)
    seed = np.uint64(2**63 + 12345)
    got, want = both(K.dropout, x, seed, p)
    np.testing.assert_array_equal(got, want)
    kept = want != 0
    np.testing.assert_array_equal(want[kept], x[kept] * dtype(1 / (1 - p)))
    n = x.size
    assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)  # 5 sigma
    assert not np.array_equal(K.dropout.numpy(x, seed + np.uint64(1), p) != 0, kept)
    view = np.swapaxes(x, 0, 2)  # non-contiguous: positions in C order of x
    np.testing.assert_array_equal(*both(K.dropout, view, seed, p))


def test_dropout_mask_bits_are_uniform():
    """The 24-bit fractions behind the mask are uniform: each of 16 bins holds 1/16 of a
    million draws (chi-square, 15 degrees of freedom, far below the 0.1% critical value 37.7),
    and neighbouring positions are uncorrelated."""
    dropout = sys.modules["minitensor.kernels.dropout"]
    n = 1 << 20
    masks = [dropout.dropout_mask_numpy(n, 7, q / 16) for q in range(17)]
    counts = -np.diff([m.sum() for m in masks])  # draws whose fraction is in bin q
    chi2 = float(((counts - n / 16) ** 2 / (n / 16)).sum())
    assert counts.sum() == n and chi2 < 37.7, chi2
    half = masks[8].astype(np.float64)
    assert abs(np.corrcoef(half[:-1], half[1:])[0, 1]) < 0.01


# ---- Adam ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_adam_update_kernel_equals_twin_bit_for_bit(layout, amsgrad, dtype, rng, two_threads):
    """Three steps of the fused kernel and of the numpy twin from the same state: identical
    parameters and moments (same operations, same order, no fastmath), on threads too, and for
    a transposed parameter (which the numba side hands to the twin)."""
    shape = (300, 130)
    start = [rng.standard_normal(shape).astype(dtype) for _ in range(3)]
    start[2] = np.abs(start[2])  # v ≥ 0
    if layout == "transposed":
        start = [np.ascontiguousarray(a.T).T for a in start]
    grads = [rng.standard_normal(shape).astype(dtype) for _ in range(3)]
    states = {}
    for backend in ("numba", "numpy"):
        param, m, v = (a.copy(order="K") for a in start)
        v_max = v.copy(order="K") if amsgrad else v
        for t, grad in enumerate(grads, start=1):
            getattr(K.adam_update, backend)(
                param,
                grad,
                m,
                v,
                v_max,
                0.9,
                0.98,
                1e-3 / (1 - 0.9**t),
                np.sqrt(1 - 0.98**t),
                1e-9,
                np.empty_like(param),
            )
        states[backend] = (param, m, v, v_max)
    for got, want in zip(states["numba"], states["numpy"]):
        np.testing.assert_array_equal(got, want)


# ---- both backends through the ops (float64 gradcheck) -------------------------------------------


@pytest.fixture(params=["numba", "numpy"])
def backend(request):
    with K.use_backend(request.param):
        yield request.param


def test_softmax_op_gradcheck_with_mask_and_scale(backend, leaf):
    x = leaf(2, 3, 4, 5)
    mask = np.zeros((2, 1, 4, 5), dtype=bool)
    mask[0, 0, :, 3:] = True
    mask[1, 0, 2, :] = True  # a fully masked row
    assert mt.gradcheck(lambda t: F.softmax(t, scale=0.5, mask=mask), x)
    y = F.softmax(x, scale=0.5, mask=mask)
    y.sum().backward()
    assert not np.isnan(x.grad.numpy()).any()


def test_softmax_op_gradcheck_on_a_transposed_view_and_other_axis(backend, leaf):
    x = leaf(4, 6)
    assert mt.gradcheck(
        lambda t: F.softmax(t.transpose(1, 0), mask=np.tril(np.ones((6, 4), bool))), x
    )
    assert mt.gradcheck(lambda t: F.softmax(t, axis=0), x)


def test_log_softmax_and_cross_entropy_op_gradcheck(backend, leaf, rng):
    x = leaf(3, 4, 7)
    assert mt.gradcheck(lambda t: F.log_softmax(t), x)
    targets = rng.integers(0, 4, size=(3, 7))
    targets[0, 1] = -100
    assert mt.gradcheck(lambda t: F.cross_entropy(t, targets, label_smoothing=0.1), x)
    assert mt.gradcheck(lambda t: F.cross_entropy(t, targets, reduction="none"), x)  # (N, C, d1)


def test_layer_norm_op_gradcheck(backend, leaf):
    x, w, b = leaf(2, 3, 8), leaf(8), leaf(8)
    assert mt.gradcheck(lambda t, w, b: F.layer_norm(t, 8, w, b), x, w, b)
    assert mt.gradcheck(lambda t: F.layer_norm(t, (3, 8)), x)


def test_matmul_op_gradcheck_with_broadcasting(backend, leaf):
    a, b, w = leaf(2, 1, 4, 5), leaf(3, 5, 6), leaf(5, 2)
    assert mt.gradcheck(lambda a, b: a @ b, a, b)
    assert mt.gradcheck(lambda a, w: a @ w, a, w)  # Linear-style weight
    assert mt.gradcheck(lambda a, b: a @ b.transpose(-1, -2), a, leaf(3, 6, 5))


def test_backends_give_the_same_attention_step(rng):
    """One scaled dot-product attention forward and backward under each backend."""
    q, k, v = (rng.standard_normal((2, 4, 6, 8)) for _ in range(3))
    mask = np.triu(np.ones((6, 6), dtype=bool), 1)
    results = {}
    for name in K.BACKENDS:
        with K.use_backend(name):
            tq, tk, tv = (mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in (q, k, v))
            weights = F.softmax(tq @ tk.transpose(-1, -2), scale=8**-0.5, mask=mask)
            out = weights @ tv
            (out * out).sum().backward()
            results[name] = [out.numpy(), tq.grad, tk.grad, tv.grad]
    for got, want in zip(results["numba"], results["numpy"]):
        assert_agree(got, want, np.float64)


# ---- the switch --------------------------------------------------------------------------------


def test_set_backend_get_backend_and_context_manager():
    assert mt.set_backend is K.set_backend and mt.get_backend is K.get_backend
    before = mt.get_backend()
    try:
        mt.set_backend("numpy")
        assert mt.get_backend() == "numpy"
        with K.use_backend("numba"):
            assert mt.get_backend() == "numba"
            with pytest.raises(RuntimeError):
                with K.use_backend("numpy"):
                    assert mt.get_backend() == "numpy"
                    raise RuntimeError("boom")
            assert mt.get_backend() == "numba"  # restored after the error
        assert mt.get_backend() == "numpy"
    finally:
        mt.set_backend(before)


def test_dispatch_calls_the_selected_backend():
    calls = []
    kernel = K.dispatch(lambda x: calls.append("numba"), lambda x: calls.append("numpy"))
    with K.use_backend("numpy"):
        kernel(1)
    with K.use_backend("numba"):
        kernel(1)
    assert calls == ["numpy", "numba"]


def test_bad_backend_name_is_a_clear_error():
    with pytest.raises(
        ValueError,
        match=r"set_backend: unknown backend 'torch'; choose one of "
        r"numba, numpy",
    ):
        mt.set_backend("torch")
    with pytest.raises(ValueError, match="unknown backend"):
        with K.use_backend("cuda"):
            pass


def _run(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_environment_variable_selects_the_backend():
    done = _run("import minitensor as mt; print(mt.get_backend())", MINITENSOR_BACKEND="numpy")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "numpy"
    done = _run("import minitensor as mt; print(mt.get_backend())", MINITENSOR_BACKEND="NUMBA")
    assert done.stdout.strip() == "numba"
    bad = _run("import minitensor", MINITENSOR_BACKEND="gpu")
    assert bad.returncode != 0
    assert "environment variable MINITENSOR_BACKEND: unknown backend 'gpu'" in bad.stderr


@pytest.mark.slow
def test_first_use_prints_one_compile_line_and_the_cache_silences_it(tmp_path):
    """A fresh numba cache compiles (one line per kernel family); a second process loads it."""
    code = (
        "import numpy as np, minitensor.kernels as K; x = np.ones((2, 3), np.float32);"
        "K.softmax_forward(x); K.softmax_backward(x, x)"
    )
    first = _run(code, NUMBA_CACHE_DIR=str(tmp_path), MINITENSOR_BACKEND="numba")
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("minitensor: compiling numba kernels for softmax") == 1
    second = _run(code, NUMBA_CACHE_DIR=str(tmp_path), MINITENSOR_BACKEND="numba")
    assert second.returncode == 0 and "compiling" not in second.stderr


FORK_SCRIPT = """
import multiprocessing, numpy as np
import minitensor.kernels as K
x = np.random.default_rng(0).random((512, 64, 64)).astype(np.float32)
a, b = np.ones((896, 128), np.float32), np.ones((128, 512), np.float32)
K.softmax_forward(x, 1.0, None); K.matmul(a, b)       # the parent's pool is running

def work(i):
    return round(float(K.softmax_forward(x, 1.0, None).sum()), 1), float(K.matmul(a, b)[0, 0])

if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print(pool.map(work, range(2)))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_kernels_work_in_a_forked_child(tmp_path):
    """After the parallel kernels ran, a fork()ed child (multiprocessing's default on Linux)
    still computes — serially: GNU OpenMP's pool cannot be used after fork, and numba would
    abort the child (the pool would hang)."""
    script = tmp_path / "fork_after_parallel.py"
    script.write_text(FORK_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([(512.0 * 64, 128.0)] * 2)


def test_blas_kernels_can_be_switched_off():
    """MINITENSOR_NO_BLAS_KERNELS=1: no gemm found, every product goes to np.matmul, and the
    results are the same."""
    code = (
        "import numpy as np, sys; import minitensor.kernels as K; "
        "from minitensor.kernels.fast_matmul import products as m; "
        "a, b = np.ones((896, 128), np.float32), np.ones((128, 512), np.float32); "
        "print(m.GEMM == {}, K.matmul_route(a, b), float(K.matmul(a, b)[0, 0]))"
    )
    env = dict(os.environ, MINITENSOR_NO_BLAS_KERNELS="1")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "numpy", "128.0"]


def test_threads_follow_numba_set_num_threads():
    """jit.threads() reads numba's thread count without numba's lock after the first call;
    it must still see every numba.set_num_threads."""
    import numba

    from minitensor.kernels import jit

    before = numba.get_num_threads()
    jit.threads()
    polite = jit._pool["polite"]
    jit._pool["polite"] = False  # not one thread because the machine is busy
    try:
        jit.threads()
        numba.set_num_threads(1)
        assert jit.threads() == 1
        numba.set_num_threads(before)
        assert jit.threads() == min(before, jit._pool["cpus"]), (jit._forked_child, jit._pool)
    finally:
        numba.set_num_threads(before)
        jit._pool["polite"] = polite


@pytest.mark.parametrize("dtype", DTYPES)
def test_tile_kernel_with_avx2_sized_vectors(dtype, rng, monkeypatch):
    """On a machine without AVX-512 the tiles use 32-byte vectors (8 float32 or 4 float64
    lanes): the same IR with other lane counts and masks. This machine has AVX-512, so build
    a fresh tile with VECTOR_BYTES = 32 and check it on ragged shapes against np.matmul."""
    from numba import njit

    monkeypatch.setattr(microkernel, "VECTOR_BYTES", 32)
    tile = microkernel.tile_kernel(8, 1)

    @njit
    def product(a, b, c, cols):
        n, k = a.shape
        m = b.shape[1]
        item = a.itemsize
        for j in range(0, m, cols):
            for i in range(0, n, 8):
                tile(
                    k,
                    a.ctypes.data + i * k * item,
                    k,
                    1,
                    b.ctypes.data + j * item,
                    m,
                    c.ctypes.data + (i * m + j) * item,
                    m,
                    min(8, n - i),
                    min(cols, m - j),
                    a.dtype.type(0),
                )

    for n, k, m in [(1, 1, 1), (7, 5, 3), (9, 16, 17), (20, 33, 40)]:
        a = rng.standard_normal((n, k)).astype(dtype)
        b = rng.standard_normal((k, m)).astype(dtype)
        c = np.full((n, m), np.nan, dtype)
        product(a, b, c, 32 // np.dtype(dtype).itemsize)
        assert_agree(c, a @ b, dtype)


def test_tiled_matmul_refuses_what_it_cannot_read():
    """K.tiled_matmul reads raw memory: mismatched shapes or dtypes are refused with the op
    and the shapes named, never read."""
    a = np.ones((4, 3, 5), np.float32)
    with pytest.raises(ValueError, match=r"tiled_matmul: a \(4, 3, 5\) @ b \(4, 6, 2\)"):
        K.tiled_matmul(a, np.ones((4, 6, 2), np.float32))
    with pytest.raises(TypeError, match="tiled_matmul: float32 or float64"):
        K.tiled_matmul(a, np.ones((4, 5, 2), np.float64))
    with pytest.raises(TypeError, match="float16"):
        K.tiled_matmul(a.astype(np.float16), np.ones((4, 5, 2), np.float16))
    with pytest.raises(ValueError, match=r"tiled_matmul: the batch axes of a \(4, 3, 5\)"):
        K.tiled_matmul(a, np.ones((3, 5, 2), np.float32))  # batches 4 and 3


# ---- the numpy backend stands alone; erf ------------------------------------------------------

NUMPY_BACKEND_STEP = """
import sys
import numpy as np
import minitensor as mt
import minitensor.functional as F
x = mt.randn(8, 16, requires_grad=True)
w = mt.randn(16, 4, requires_grad=True)
loss = F.cross_entropy(F.softmax(F.gelu(x @ w), -1), mt.tensor(np.arange(8) % 4))
loss.backward()
loaded = ("numba", "llvmlite", "minitensor.kernels.fast_matmul")
print(sorted(m for m in loaded if m in sys.modules))
"""


def run_numpy_backend_step():
    env = dict(os.environ, MINITENSOR_BACKEND="numpy")
    done = subprocess.run(
        [sys.executable, "-c", NUMPY_BACKEND_STEP],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[-2]


def test_numpy_backend_never_loads_the_fast_matmul():
    """matmul's numba products (kernels/fast_matmul: llvmlite's CPU query, the OpenBLAS lookup)
    load on the first numba matmul, not at import and not on the numpy backend."""
    assert "minitensor.kernels.fast_matmul" not in run_numpy_backend_step()


def test_a_training_step_on_the_numpy_backend_never_imports_numba():
    assert run_numpy_backend_step() == "[]"


@pytest.mark.parametrize("dtype", DTYPES)
def test_erf_kernel_and_twin_are_math_erf(dtype):
    import math

    x = np.concatenate([np.linspace(-7, 7, 2002), [0.0, -0.0, 1e-300, np.inf, -np.inf]])
    x = x.astype(dtype)
    expected = np.array([math.erf(v) for v in x.astype(np.float64)]).astype(dtype)
    for erf in (K.erf.numpy, K.erf.numba):
        out = erf(x.reshape(3, -1)[:, ::2])  # a non-contiguous view
        assert out.dtype == dtype and out.shape == (3, 335)
        assert np.array_equal(out, expected.reshape(3, -1)[:, ::2])
    assert np.isnan(K.erf.numpy(np.array([np.nan], dtype))[0])
    assert np.isnan(K.erf.numba(np.array([np.nan], dtype))[0])


LAZY_FAMILY = """
import numpy as np
from minitensor.kernels import jit
from minitensor.kernels.jit import kernel, prange


@kernel(lazy=True)
def _double(v):
    return v * 2.0


@kernel(parallel=True, lazy=True)
def _rows(x, out):
    for i in prange(x.shape[0]):
        out[i] = _double(jit.row_max(x[i])) + jit.exp(x[i, 0])
"""


def test_lazy_kernels_build_on_first_call(tmp_path, monkeypatch):
    """@kernel(lazy=True): nothing is built at import; the first call builds the kernel with
    jit.prange as numba.prange, another lazy kernel as its build, and jit's helpers."""
    (tmp_path / "lazy_family.py").write_text(LAZY_FAMILY)
    monkeypatch.syspath_prepend(str(tmp_path))
    import lazy_family

    from minitensor.kernels import jit

    assert lazy_family._rows.built is None and lazy_family._double.built is None
    x = np.arange(12.0).reshape(4, 3) - 5
    out = np.empty(4)
    lazy_family._rows(x, out, work=1 << 20)  # the parallel build
    assert np.allclose(out, 2 * x.max(axis=1) + np.exp(x[:, 0]))
    assert isinstance(lazy_family._rows.built, jit.Kernel)
    assert lazy_family.prange is not jit.prange  # numba.prange now, in that module


def test_routes_only_where_they_beat_numpy_on_this_machine(monkeypatch):
    """route times a candidate (the tiles, the BLAS-calling gemm) against np.matmul the first
    time a layout would go to it, keeps the answer, and sends the layout to np.matmul where the
    candidate loses."""
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "blas_threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "_FASTEST", {})
    calls = []

    def numpy_wins(products, a, b):
        calls.append(len(products))
        return [1.0 if p in NUMPY_PRODUCTS else 2.0 for p in products]

    monkeypatch.setattr(matmul_module, "_timings", numpy_wins)
    q = np.zeros((256, 16, 16), np.float32)
    k_t = np.swapaxes(q, -1, -2)
    # every tile shape, BLAS per matrix (where there is a gemm) and every configuration of
    # np.matmul, timed together
    configs = len(matmul_module._numpy_configs(q, k_t))
    per_matrix = int(np.dtype(np.float32) in matmul_module.GEMM)
    assert K.matmul_route(q, k_t) == "numpy"
    assert calls == [len(matmul_module.TILE_SHAPES) + per_matrix + configs]
    assert K.matmul_route(q, k_t) == "numpy" and len(calls) == 1  # remembered
    x, w = np.zeros((1024, 256), np.float32), np.zeros((256, 512), np.float32)
    if np.dtype(np.float32) in matmul_module.GEMM:
        configs = len(matmul_module._numpy_configs(x, w))
        assert K.matmul_route(x, w) == "numpy" and calls[1:] == [1 + configs]  # gemm lost too
    monkeypatch.setattr(
        matmul_module,
        "_timings",
        lambda products, a, b: [2.0 if p in NUMPY_PRODUCTS else 1.0 for p in products],
    )
    assert K.matmul_route(q, q) == "tiles"  # another layout: measured again (first winner)
    if np.dtype(np.float32) in matmul_module.GEMM:
        assert K.matmul_route(x, w.T.copy().T) == "gemm"  # wᵀ stored transposed: another layout


NUMPY_PRODUCTS = (
    matmul_module.numpy_product,
    matmul_module._matmul_as_is,
    matmul_module.numpy_on_cores,
)


def test_np_matmul_is_timed_in_every_configuration_a_route_may_take(monkeypatch):
    """A route must be as fast as np.matmul's best configuration on the machine: without the
    thread cap where BLAS computes each matrix on one thread anyway (small matrices), and on
    BLAS's own threads beside numba's where their idle workers sleep soon (a short spin)."""
    monkeypatch.setattr(matmul_module, "blas_threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "_owner", ["numba"])
    small = np.zeros((256, 16, 16), np.float32)
    assert matmul_module._numpy_configs(small, small) == [
        matmul_module.numpy_product,
        matmul_module._matmul_as_is,
    ]
    x, w = np.zeros((1024, 256), np.float32), np.zeros((256, 512), np.float32)
    for short in (True, False):
        monkeypatch.setattr(matmul_module.config, "blas_spin_is_short", lambda s=short: s)
        threaded = [matmul_module.numpy_on_cores] if short else []
        assert matmul_module._numpy_configs(x, w) == [matmul_module.numpy_product, *threaded]
    monkeypatch.setattr(matmul_module, "_owner", ["blas"])  # numpy_product runs on BLAS's
    assert matmul_module._numpy_configs(x, w) == [matmul_module.numpy_product]


def test_a_candidate_takes_a_layout_only_when_clearly_faster_than_np_matmul(monkeypatch):
    """Within _CANDIDATE_EDGE of np.matmul's best (a tie, within the timing's noise), the
    layout stays with np.matmul; clearly faster, the candidate takes it."""
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    x, w = np.zeros((1024, 256), np.float32), np.zeros((256, 512), np.float32)
    if np.dtype(np.float32) not in matmul_module.GEMM:
        pytest.skip("no BLAS gemm for numba's threads to call here")
    edge = matmul_module._CANDIDATE_EDGE
    for gemm_time, want in ((edge * 1.01, "numpy"), (edge * 0.99, "gemm")):
        monkeypatch.setattr(matmul_module, "_FASTEST", {})
        monkeypatch.setattr(
            matmul_module,
            "_timings",
            lambda products, a, b, g=gemm_time: [
                1.0 if p in NUMPY_PRODUCTS else g for p in products
            ],
        )
        assert K.matmul_route(x, w) == want


def test_a_candidate_takes_a_layout_only_when_it_wins_a_second_timing_too(monkeypatch):
    """A burst on a shared machine can make one timing's calls of the candidate run fast: a
    candidate that won clearly is timed again against np.matmul's best, and keeps the layout
    only if it is faster there too (not necessarily clearly: a burst may slow it there)."""
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    x, w = np.zeros((1024, 256), np.float32), np.zeros((256, 512), np.float32)
    if np.dtype(np.float32) not in matmul_module.GEMM:
        pytest.skip("no BLAS gemm for numba's threads to call here")
    for second_gemm_time, want in ((1.0, "numpy"), (0.99, "gemm"), (0.5, "gemm")):
        monkeypatch.setattr(matmul_module, "_FASTEST", {})
        gemm_times = iter([0.5, second_gemm_time])  # the first timing, then the second
        timed = []

        def timings(products, a, b, gemm_times=gemm_times, timed=timed):
            timed.append(products)
            gemm = next(gemm_times)
            return [1.0 if p in NUMPY_PRODUCTS else gemm for p in products]

        monkeypatch.setattr(matmul_module, "_timings", timings)
        assert K.matmul_route(x, w) == want
        assert len(timed) == 2 and timed[1][0] is matmul_module.gemm_product
        assert timed[1][1] in NUMPY_PRODUCTS and len(timed[1]) == 2


def test_np_matmul_on_the_cores_is_remembered_as_plain_np_matmul_where_blas_fits(monkeypatch):
    """numpy_on_cores winning where BLAS's own thread count already fits the cores is the same
    call as np.matmul: the route remembers that (no thread counts read at every product); where
    BLAS has more threads than minitensor may use, the capped configuration stays."""
    if np.dtype(np.float32) not in matmul_module.GEMM:
        pytest.skip("no BLAS gemm here: the layout never reaches the timing")
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "_owner", ["numba"])
    monkeypatch.setattr(matmul_module.config, "blas_spin_is_short", lambda: True)
    x, w = np.zeros((1024, 256), np.float32), np.zeros((256, 512), np.float32)
    monkeypatch.setattr(
        matmul_module,
        "_timings",
        lambda products, a, b: [
            1.0 if p is matmul_module.numpy_on_cores else 2.0 for p in products
        ],
    )
    for blas, cores, want in (
        (2, 2, matmul_module._matmul_as_is),
        (4, 2, matmul_module.numpy_on_cores),
    ):
        monkeypatch.setattr(matmul_module, "_FASTEST", {})
        monkeypatch.setattr(matmul_module, "blas_threads", lambda n=blas: n)
        monkeypatch.setattr(matmul_module, "cores", lambda n=cores: n)
        name, product = matmul_module._choose(x, w)
        # (watched against one thread, the other configuration, before it is remembered)
        assert name == "numpy" and isinstance(product, matmul_module._Watched)
        assert product.product is want and product.fallback[1] is matmul_module.numpy_product


def test_route_takes_the_configuration_of_np_matmul_that_won(monkeypatch):
    """Where np.matmul without the thread cap was timed fastest, the route is that one, and it
    gives np.matmul's result."""
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "_FASTEST", {})
    monkeypatch.setattr(
        matmul_module,
        "_timings",
        lambda products, a, b: [1.0 if p is matmul_module._matmul_as_is else 2.0 for p in products],
    )
    rng = np.random.default_rng(0)
    q = rng.standard_normal((256, 16, 16)).astype(np.float32)
    name, product = matmul_module._choose(q, q)
    assert name == "numpy" and isinstance(product, matmul_module._Watched)
    assert product.product is matmul_module._matmul_as_is  # (watched against the capped one)
    np.testing.assert_array_equal(K.matmul(q, q), np.matmul(q, q))


def test_tile_shape_is_the_fastest_measured_and_kept(rng, monkeypatch):
    """The autotuner: for a layout going to the tiles, every register tile of TILE_SHAPES and
    np.matmul are timed (for real, on this machine), and the product kept is the fastest of
    them, with the tile shape it names; it gives np.matmul's result."""
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "_FASTEST", {})
    measured = []
    timings = matmul_module._timings
    monkeypatch.setattr(
        matmul_module,
        "_timings",
        lambda products, a, b: (
            measured.append((products, timings(products, a, b))) or measured[-1][1]
        ),
    )
    q = rng.standard_normal((256, 24, 16)).astype(np.float32)
    k_t = np.swapaxes(rng.standard_normal((256, 24, 16)).astype(np.float32), -1, -2)
    route = K.matmul_route(q, k_t)
    (products, times), *again = measured
    tiles = [p for p in products if getattr(p, "func", None) is matmul_module.tiled_matmul]
    assert [p.keywords["tile"] for p in tiles] == list(matmul_module.TILE_SHAPES)
    others = [p for p in products if p not in tiles and p not in NUMPY_PRODUCTS]
    gemm = np.dtype(np.float32) in matmul_module.GEMM
    assert others == ([matmul_module.gemm_product] if gemm else [])  # BLAS per matrix
    numpy_time = min(t for p, t in zip(products, times) if p in NUMPY_PRODUCTS)
    best_time = min(t for p, t in zip(products, times) if p not in NUMPY_PRODUCTS)
    numpy_best = products[times.index(numpy_time)]
    best = numpy_best  # np.matmul's fastest configuration, unless a candidate clearly won twice
    if best_time < matmul_module._CANDIDATE_EDGE * numpy_time:
        ((confirming, again_times),) = again  # the winner and np.matmul's best, timed anew
        assert confirming == [products[times.index(best_time)], numpy_best]
        if again_times[0] < again_times[1]:  # faster again (not necessarily clearly)
            best = confirming[0]
    else:
        assert not again
    want = "numpy" if best in NUMPY_PRODUCTS else "gemm" if best in others else "tiles"
    assert route == want
    timed = len(measured)
    kept = matmul_module._choose(q, k_t)[1]
    assert getattr(kept, "product", kept) is best and len(measured) == timed  # kept
    assert matmul_module.tile_shape(q, k_t) == (best.keywords["tile"] if best in tiles else None)
    assert_agree(K.blas_matmul(q, k_t), np.matmul(q, k_t), np.float32)
    for shape in matmul_module.TILE_SHAPES:  # every shape computes the same product
        assert_agree(K.tiled_matmul(q, k_t, shape), np.matmul(q, k_t), np.float32)
    with pytest.raises(ValueError, match=r"tiled_matmul: tile \(3, 3\) is not one of"):
        K.tiled_matmul(q, k_t, (3, 3))


def test_a_winner_slower_in_the_program_itself_goes_back_to_numpy(rng, monkeypatch):
    """A candidate that won the timing is timed again where it runs: its first calls, then as
    many of np.matmul's best, and when its median call is not clearly faster than np.matmul's
    there, the layout goes to np.matmul's best; when it is, the candidate stays, no longer
    watched. Every call gives the product. (A fake clock: each call of the tiles or of
    np.matmul "takes" its cost; no timing here.)"""
    monkeypatch.setattr(matmul_module, "threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "blas_threads", lambda: 2)
    monkeypatch.setattr(matmul_module, "_FASTEST", {})
    clock, cost = [0.0], {"tiles": 5.0, "numpy": 2.0}

    ran = []  # which product each call ran

    def costing(product, kind):
        def call(*args, **kwargs):
            clock[0] += cost[kind]
            ran.append(kind)
            return product(*args, **kwargs)

        return call

    monkeypatch.setattr(matmul_module.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(matmul_module, "tiled_matmul", costing(matmul_module.tiled_matmul, "tiles"))
    for name in ("numpy_product", "_matmul_as_is"):
        monkeypatch.setattr(matmul_module, name, costing(getattr(matmul_module, name), "numpy"))
    numpy_configs = (matmul_module.numpy_product, matmul_module._matmul_as_is)
    monkeypatch.setattr(
        matmul_module,
        "_timings",
        lambda products, a, b: [2.0 if p in numpy_configs else 1.0 for p in products],
    )  # the tiles won the timing
    q = rng.standard_normal((256, 16, 16)).astype(np.float32)
    k_t = np.swapaxes(q, -1, -2)
    assert K.matmul_route(q, k_t) == "tiles"
    for _ in range(2 * matmul_module._WATCHED_CALLS):  # 5 against 2: slower than np.matmul
        assert_agree(matmul_module.matmul(q, k_t), np.matmul(q, k_t), np.float32)
    assert (
        ran == ["tiles"] * matmul_module._WATCHED_CALLS + ["numpy"] * matmul_module._WATCHED_CALLS
    )
    name, product = matmul_module._choose(q, k_t)
    assert name == "numpy" and product in numpy_configs
    cost["tiles"] = 1.0  # clearly faster than np.matmul's 2: the tiles stay
    assert K.matmul_route(q, q) == "tiles"
    for _ in range(2 * matmul_module._WATCHED_CALLS):
        assert_agree(matmul_module.matmul(q, q), np.matmul(q, q), np.float32)
    name, product = matmul_module._choose(q, q)
    assert name == "tiles" and isinstance(product, functools.partial)


def test_dropout_keep_draws_the_twins_mask():
    """dropout.keep, the per-entry hash fused attention drops with, keeps exactly the entries
    the numpy twin's mask keeps."""
    import importlib

    D = importlib.import_module("minitensor.kernels.dropout")  # K.dropout is the kernel
    seed, p = 12345, 0.3
    mask = D.dropout_mask_numpy(500, seed, p)
    kept = [D.keep(np.uint64(seed), np.uint64(i), D.keep_threshold(p)) for i in range(500)]
    assert np.array_equal(np.array(kept), mask) and 0 < mask.sum() < 500


def test_fused_attention_is_a_public_kernel():
    assert K.fused_attention_forward in K.KERNELS and K.fused_attention_backward in K.KERNELS
    assert {"fused_attention_forward", "fused_attention_backward"} <= set(K.__all__)
    assert K.fused_attention_forward.numpy is K.flash_attention.fused_attention_forward_numpy


def test_the_compile_line_goes_to_stdout_in_a_notebook(monkeypatch):
    """A script's diagnostics go to stderr; in Jupyter stderr is a red box, so stdout there."""
    import types

    from minitensor.kernels import numba_helpers

    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert numba_helpers._notice_stream() is sys.stderr
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    assert numba_helpers._notice_stream() is sys.stdout


def test_settled_timings_run_each_call_right_before_it_is_timed(monkeypatch):
    """median_times(settle=seconds), as the products' timing uses it: every timed run of a call
    comes right after untimed runs of the same call for `settle` seconds, at least one (a
    candidate on numba's threads is not timed while BLAS's idle workers, woken by the
    candidate before it, still spin)."""
    from minitensor.kernels import jit

    log = []
    calls = [lambda: log.append("a"), lambda: log.append("b")]
    ticks = iter(range(1000))
    monkeypatch.setattr(jit.time, "perf_counter", lambda: log.append("t") or next(ticks))
    times = jit.median_times(calls, rounds=2, settle=2.5)

    # the warm-up run of each, then per round: settle (untimed calls until 2.5 ticks have
    # passed: the clock is read before the first and after each), start, timed run, stop
    def settled(call):  # three untimed runs (ticks 0→1→2→3), then the timed one
        return f"t{call}t{call}t{call}t" + f"t{call}t"

    assert "".join(log) == "ab" + (settled("a") + settled("b")) * 2
    assert times == [1, 1]
    log.clear()
    jit.median_times(calls, rounds=1, settle=0.0)  # no settling: each timed run alone
    assert "".join(log) == "ab" + "tat" + "tbt"
