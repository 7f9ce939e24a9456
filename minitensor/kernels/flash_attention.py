"""FlashAttention: softmax(Q·Kᵀ·scale + mask)·V without the L×L matrix (FlashAttention's
algorithm, Dao et al. 2022), a numba kernel and its plain numpy twin.

The twin is attention as every text writes it, in three steps: the scores S = Q·Kᵀ·scale + mask
(Lq × Lk per head), the weights P = softmax(S) row by row, the output O = P·V. It keeps S and P
whole. The kernel computes the same O one tile of keys at a time: for a block of queries it
walks over blocks of keys, keeps for each query row the running maximum m of its scores, the
running sum ℓ of their exponentials and the running output, and rescales the last two by
exp(m_old − m_new) whenever a new tile raises the maximum (the "online softmax"). Only one
tile of scores exists at a time; what it keeps for backward is O and one number per query row,
the log-sum-exp lse = m + log ℓ. Backward recomputes each tile of P = exp(S − lse) from Q, K and
lse instead of reading a stored P. docs/kernels.md ("Fused attention") explains the algorithm.

    fused_attention_forward(q, k, v, mask, scale, causal, seed, p) → (out, lse)
    fused_attention_backward(q, k, v, out, lse, dout, mask, scale, causal, seed, p)
        → (dq, dk, dv)

q (B, h, Lq, d), k (B, h, Lk, d), v (B, h, Lk, dv) → out (B, h, Lq, dv), lse (B, h, Lq).
mask: None, bool (True = blocked) or additive float (−inf = blocked), broadcastable to
(B, h, Lq, Lk) — a (B, 1, 1, Lk) padding mask or a (1, 1, Lq, Lk) causal mask is read in place.
causal: None, or the causal offset: block key j for query i when j > i + causal, without any
mask array (0 is torch's top-left alignment; Lk − Lq puts the queries at the last Lq of the Lk
positions, as a KV-cache step does). A blocked position's score is never
read (an inf or NaN there does not reach the row); a row with no allowed key gives output 0,
lse −inf and zero gradient. Dropout (probability p, from `seed`) drops entry (b, h, i, j) of the
weights exactly when dropout(weights, seed, p) of kernels/dropout.py would, in both backends.
"""

import functools
import math

import numpy as np

from . import jit
from .backend_switch import are_deterministic_algorithms_enabled
from .dropout import dropout_numpy, keep, keep_threshold
from .jit import kernel, prange

# BLAS's gemm (fast_matmul/blas.py), bound by _blas() on the first numba call: importing it
# looks for numpy's OpenBLAS, which the numpy backend never needs.
blas = None


def _blas():
    """The module fast_matmul.blas (GEMM, gemm, NO_TRANS, TRANS), imported on first use."""
    global blas
    if blas is None:
        from .fast_matmul import blas
    return blas


# Tile sizes (block_q, block_k): a block of block_q queries is one parallel task of the forward;
# keys come block_k at a time, so that a task's working set (a tile of scores, the running
# outputs) stays in the L1/L2 cache. Which size is fastest depends on the shapes and on the
# machine: large tiles make fewer, larger BLAS calls (OpenBLAS's cost per call is most of a
# 64 × 128 × 32 product), small tiles skip more of a causal mask's blocked tiles. So the first
# time a layout is seen, each of TILES is timed on it and the fastest kept (`tile_sizes`);
# under mt.use_deterministic_algorithms(True), DEFAULT_TILES always.
TILES = ((64, 128), (128, 256), (256, 512))
DEFAULT_TILES = TILES[0]


# ---- shared by both backends: checks and the mask's two parts ----------------------------------


def _check(q, k, v):
    """Raise a clear error unless q (B, h, Lq, d), k (B, h, Lk, d), v (B, h, Lk, dv) fit."""
    fits = (
        q.ndim == 4
        and k.ndim == 4
        and v.ndim == 4
        and q.shape[:2] == k.shape[:2] == v.shape[:2]
        and q.shape[3] == k.shape[3]
        and k.shape[2] == v.shape[2]
    )
    if not fits:
        raise ValueError(
            f"fused attention: query {q.shape}, key {k.shape} and value {v.shape} "
            f"do not fit: need query (B, h, Lq, d), key (B, h, Lk, d), value "
            f"(B, h, Lk, dv)"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype.kind != "f":
        raise TypeError(
            f"fused attention: query, key and value must share one float dtype, "
            f"got {q.dtype}, {k.dtype}, {v.dtype} (shapes {q.shape}, {k.shape}, "
            f"{v.shape})"
        )


def additive_mask(mask, q, k):
    """The mask as an additive float array of q's dtype, −inf where blocked, with the shape
    (MB, MH, MQ, Lk) — each of MB, MH, MQ 1 (broadcast) or the full size — so that a padding or
    causal mask stays small. None gives zeros (1, 1, 1, Lk)."""
    (B, H, Lq, _), Lk = q.shape, k.shape[2]
    if mask is None:
        return np.zeros((1, 1, 1, Lk), dtype=q.dtype)
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ and mask.dtype.kind != "f":
        raise TypeError(
            f"fused attention: a mask must be bool (True = blocked) or additive "
            f"float, got dtype {mask.dtype} of shape {mask.shape}"
        )
    try:
        fits = mask.ndim <= 4 and np.broadcast_shapes(mask.shape, (B, H, Lq, Lk)) == (B, H, Lq, Lk)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"fused attention: mask of shape {mask.shape} does not broadcast to "
            f"the scores' shape {(B, H, Lq, Lk)}"
        )
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    if mask.dtype == np.bool_:
        # −inf copied in where blocked (np.where, which branches on every entry, is slower)
        blocked, mask = mask, np.zeros(mask.shape, q.dtype)
        np.copyto(mask, q.dtype.type(-np.inf), where=blocked)
    mask = np.broadcast_to(mask.astype(q.dtype, copy=False), mask.shape[:3] + (Lk,))
    return np.ascontiguousarray(mask)


def _blocked_and_bias(mask, causal, q, k):
    """The twin's view of the mask: (blocked bool, bias float), both broadcastable to the
    scores. A float mask's −inf entries are blocked, its other entries are added."""
    add = additive_mask(mask, q, k)
    blocked = np.isneginf(add)
    if causal is not None:
        Lq, Lk = q.shape[2], k.shape[2]
        above = np.arange(Lk)[None, :] > np.arange(Lq)[:, None] + causal
        blocked = blocked | above
    return blocked, np.where(np.isneginf(add), 0, add).astype(q.dtype)


def _implies_causal(additive, q, k):
    """True when the mask blocks every key after the causal diagonal (j > i + Lk − Lq) — as a
    decoder's causal-and-padding mask does. The kernels then also skip those key tiles whole
    (causal = Lk − Lq), which changes no result. (The numba side's: a loop that stops at the first
    allowed key above the diagonal, instead of gathering all of them.)"""
    Lq, Lk = q.shape[2], k.shape[2]
    if Lq < 2 or additive.shape[2] != Lq:  # one query row, or one mask row shared by all
        return False
    return bool(_blocks_the_future(additive, Lk - Lq))


def _causal_plan(causal, additive, q, k):
    """(causal?, offset) for the numba kernels: the given offset, or Lk − Lq when the mask
    itself blocks the future (_implies_causal), or no causal skipping at all."""
    if causal is not None:
        return True, int(causal)
    if _implies_causal(additive, q, k):
        return True, k.shape[2] - q.shape[2]
    return False, 0


def _check_causal(causal):
    """Refuse a bool: causal is an offset (0 = torch's top-left), and True would read as 1."""
    if isinstance(causal, (bool, np.bool_)) or not (causal is None or float(causal).is_integer()):
        raise TypeError(
            f"fused attention: causal must be None or an integer offset (key j blocked for "
            f"query i when j > i + causal; 0 = torch's top-left alignment), got {causal!r}"
        )


def _scale(scale, q):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


# ---- numpy twins (the three steps, with the L×L matrix) ---------------------------------------


def _weights_numpy(q, k, mask, scale, causal):
    """(blocked, scores S = Q·Kᵀ·scale + bias with −inf where blocked): (B, h, Lq, Lk).
    np.where picks −inf without reading a blocked score, so an inf or NaN there stays out."""
    blocked, bias = _blocked_and_bias(mask, causal, q, k)
    s = (q @ np.swapaxes(k, -1, -2)) * q.dtype.type(scale) + bias
    return blocked, np.where(blocked, q.dtype.type(-np.inf), s)


def fused_attention_forward_numpy(q, k, v, mask=None, scale=None, causal=None, seed=0, p=0.0):
    """out = dropout(softmax(Q·Kᵀ·scale + mask))·V and lse = log Σⱼ exp(Sᵢⱼ) per query row.
    q (B, h, Lq, d), k (B, h, Lk, d), v (B, h, Lk, dv) → out (B, h, Lq, dv), lse (B, h, Lq)."""
    _check(q, k, v)
    _check_causal(causal)
    if k.shape[2] == 0:  # no keys at all
        return (
            np.zeros(q.shape[:3] + v.shape[3:], q.dtype),
            np.full(q.shape[:3], -np.inf, q.dtype),
        )
    scale = _scale(scale, q)
    _, s = _weights_numpy(q, k, mask, scale, causal)  # step 1: scores
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)  # a row with no key
    e = np.exp(s - m)  # step 2: softmax
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total != 0)
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, m + np.log(total), -np.inf)[..., 0].astype(q.dtype)
    if p:
        weights = dropout_numpy(weights, seed, p)
    return (weights @ v).astype(q.dtype, copy=False), lse  # step 3: weights · V


def fused_attention_backward_numpy(
    q, k, v, out, lse, dout, mask=None, scale=None, causal=None, seed=0, p=0.0
):
    """Gradients of out with respect to q, k, v, given dout = dLoss/dout (B, h, Lq, dv).
    P = exp(S − lse) is recomputed; dP = dout·Vᵀ; dS = P ⊙ (dP − rowsum(dout ⊙ out)), zero
    where P is (a blocked position); dQ = dS·K·scale, dK = dSᵀ·Q·scale, dV = Pᵀ·dout."""
    scale = _scale(scale, q)
    _, s = _weights_numpy(q, k, mask, scale, causal)
    finite = np.isfinite(lse)[..., None]
    weights = np.where(finite, np.exp(s - np.where(finite, lse[..., None], 0)), 0)
    dweights = dout @ np.swapaxes(v, -1, -2)
    dropped = weights
    if p:
        dropped, dweights = dropout_numpy(weights, seed, p), dropout_numpy(dweights, seed, p)
    dv = np.swapaxes(dropped, -1, -2) @ dout
    delta = (dout * out).sum(axis=-1, keepdims=True)
    ds = np.where(weights == 0, 0, weights * (dweights - delta)) * q.dtype.type(scale)
    dq, dk = ds @ k, np.swapaxes(ds, -1, -2) @ q
    return tuple(g.astype(q.dtype, copy=False) for g in (dq, dk, dv))


# ---- numba kernels ------------------------------------------------------------------------------
# Each tile product (scores = Q_block·K_tileᵀ, output += P·V_tile and the five of backward) is
# one call of BLAS's gemm (fast_matmul/blas.py) from inside the parallel loop: gemm reads q, k,
# v in place, whatever their row stride (ld), so the heads need not be copied out of the
# (B, L, h, d) layout the projections leave them in. The per-row work between the products —
# mask, online softmax, dropout — is the loops below, each running from 0 so that numba
# vectorises them.


@kernel()
def _blocks_the_future(mask, offset):
    """True when mask (MB, MH, Lq, Lk), additive, is −inf at every key j > i + offset of every
    query row i; False at the first allowed one."""
    MB, MH, Lq, Lk = mask.shape
    for b in range(MB):
        for h in range(MH):
            for i in range(Lq):
                for j in range(max(i + offset + 1, 0), Lk):
                    if mask[b, h, i, j] != -np.inf:
                        return False
    return True


@kernel()
def _row_address(x, b, h, i):
    """The address of x[b, h, i, 0] (x 4-D, any strides)."""
    return x.ctypes.data + b * x.strides[0] + h * x.strides[1] + i * x.strides[2]


@kernel()
def _apply_mask(s, mask_row, cols, causal_limit):
    """s[jj] ← s[jj] + mask_row[jj], or −inf where the mask is −inf or jj > causal_limit (the
    blocked score is replaced, never added to, so an inf or NaN there is not read)."""
    f = s.dtype.type
    for jj in range(cols):
        blocked = mask_row[jj] == -np.inf or jj > causal_limit
        s[jj] = f(-np.inf) if blocked else s[jj] + mask_row[jj]


@kernel()
def _mask_scores(s, mask_row, cols, causal_limit):
    """_apply_mask, then the largest result (jit.row_max: a separate pass, so that both loops
    vectorise). The forward's online softmax needs it; the backward, which has each row's
    log-sum-exp already, masks with _apply_mask alone."""
    _apply_mask(s, mask_row, cols, causal_limit)
    return jit.row_max(s[:cols])


@kernel()
def _exp_shifted(s, cols, shift):
    """s[jj] ← exp(s[jj] − shift) in place (exactly 0 where s is −inf); returns their sum. The
    sum is a second pass (jit.row_sum, which vectorises): summing inside the exp loop stops numba
    from vectorising the exp."""
    for jj in range(cols):
        s[jj] = jit.exp(s[jj] - shift)
    return jit.row_sum(s[:cols])


@kernel()
def _online_softmax_row(s, mask_row, cols, limit, m, ell, ii, acc_row):
    """One query row meets one tile of scores s (in place): mask them, raise the running
    maximum m[ii] if the tile holds a larger score, rescale the running sum ell[ii] and the
    running output acc_row by exp(m_old − m_new), add the tile's exponentials to ell[ii], and
    leave in s the unnormalised weights exp(s − m_new) that the tile adds to the output."""
    f = s.dtype.type
    m_new = jit.maximum(m[ii], _mask_scores(s, mask_row, cols, limit))
    if m_new == -np.inf:  # no allowed key for this row yet: add nothing
        for jj in range(cols):
            s[jj] = f(0)
        return
    alpha = jit.exp(m[ii] - m_new)  # 0 on the first allowed tile (m_old = −inf)
    ell[ii] = ell[ii] * alpha + _exp_shifted(s, cols, m_new)
    m[ii] = m_new
    for e in range(acc_row.shape[0]):
        acc_row[e] *= alpha


@kernel()
def _drop_row(row, cols, seed, start, threshold, keep_scale):
    """row[jj] ← row[jj]·keep_scale or 0 for jj < cols, as dropout() treats the entry at
    position start + jj of the (B, h, Lq, Lk) weights (dropout.keep), so the same are dropped."""
    for jj in range(cols):
        kept = keep(seed, np.uint64(start + jj), threshold)
        row[jj] = row[jj] * keep_scale if kept else row.dtype.type(0)


# fmt: off
# (the BLAS calls below keep one line per operand pair, aligned with their comments;
# the formatter would give each of their 13 arguments a line of its own)
@kernel(parallel=True, prepare=_blas)  # binds `blas`, which its code reads
def _forward_tasks(gemm_at, q, k, v, lds, mask, scale, causal, offset, drop, seed, threshold,
                   keep_scale, block_q, block_k, out, lse):
    """out[b, h, i] and lse[b, h, i] for every query; one parallel task per (b, h, block of
    block_q queries), keys block_k at a time. Shapes as fused_attention_forward; lds = the row
    strides of q, k, v, out in entries; mask additive (MB, MH, MQ, Lk); causal: block
    j > i + offset."""
    B, H, Lq, d = q.shape
    Lk, dv = k.shape[2], v.shape[3]
    MB, MH, MQ, _ = mask.shape
    f = q.dtype.type
    n_blocks = (Lq + block_q - 1) // block_q
    for task in prange(B * H * n_blocks):
        bh, i0 = task // n_blocks, (task % n_blocks) * block_q
        b, h = bh // H, bh % H
        rows = min(block_q, Lq - i0)
        s, acc = np.empty((block_q, block_k), q.dtype), np.zeros((block_q, dv), q.dtype)
        m, ell = np.full(block_q, -np.inf, q.dtype), np.zeros(block_q, q.dtype)
        for j0 in range(0, Lk, block_k):
            if causal and j0 > i0 + rows - 1 + offset:
                break                                    # every later key is in the future
            cols = min(block_k, Lk - j0)
            # S = scale · Q_block · K_tileᵀ   (rows × cols)
            blas.gemm(gemm_at, blas.NO_TRANS, blas.TRANS, rows, cols, d, scale,
                      _row_address(q, b, h, i0), lds[0], _row_address(k, b, h, j0), lds[1], f(0),
                      s.ctypes.data, block_k)
            for ii in range(rows):
                i = i0 + ii
                mask_row = mask[b if MB > 1 else 0, h if MH > 1 else 0, i if MQ > 1 else 0]
                limit = i + offset - j0 if causal else cols
                _online_softmax_row(s[ii], mask_row[j0:j0 + cols], cols, limit, m, ell, ii,
                                    acc[ii])
                if drop:
                    _drop_row(s[ii], cols, seed, ((b * H + h) * Lq + i) * Lk + j0, threshold,
                              keep_scale)
            # acc += P_tile · V_tile   (rows × dv)
            blas.gemm(gemm_at, blas.NO_TRANS, blas.NO_TRANS, rows, dv, cols, f(1), s.ctypes.data,
                      block_k, _row_address(v, b, h, j0), lds[2], f(1), acc.ctypes.data, dv)
        for ii in range(rows):
            inv = f(1) / ell[ii] if ell[ii] > 0 else f(0)
            for e in range(dv):
                out[b, h, i0 + ii, e] = acc[ii, e] * inv
            lse[b, h, i0 + ii] = m[ii] + np.log(ell[ii]) if ell[ii] > 0 else f(-np.inf)
# fmt: on


@kernel()
def _weight_gradients(
    s,
    dp,
    rows,
    cols,
    lse,
    delta,
    i0,
    mask_rows,
    limit0,
    scale,
    drop,
    seed,
    first_position,
    row_positions,
    threshold,
    keep_scale,
):
    """For one (query block, key tile): s holds the scores S·scale and dp holds dP̃ = dO·Vᵀ.
    Leaves in s the weights P̃ = drop(exp(S − lse)) and in dp dS = P ⊙ (drop(dP̃) − δ)·scale,
    0 wherever P is (a blocked key, a row with no allowed key)."""
    f = s.dtype.type
    for ii in range(rows):
        i = i0 + ii
        row, grad = s[ii], dp[ii]
        if lse[i] == -np.inf:
            for jj in range(cols):
                row[jj], grad[jj] = f(0), f(0)
            continue
        _apply_mask(row, mask_rows[i if mask_rows.shape[0] > 1 else 0], cols, limit0 + ii)
        for jj in range(cols):
            row[jj] = jit.exp(row[jj] - lse[i])  # P, exactly 0 where blocked
        start = first_position + ii * row_positions
        if drop:
            _drop_row(grad, cols, seed, start, threshold, keep_scale)
        for jj in range(cols):
            p = row[jj]
            grad[jj] = f(0) if p == 0 else p * (grad[jj] - delta[i]) * scale
        if drop:
            _drop_row(row, cols, seed, start, threshold, keep_scale)


# fmt: off
# (aligned BLAS calls, as in _forward_tasks)
@kernel(parallel=True, prepare=_blas)
def _backward_tasks(gemm_at, q, k, v, dout, lds, lse, delta, mask, scale, causal, offset, drop,
                    seed, threshold, keep_scale, block_q, block_k, dq, dk, dv):
    """Adds into dq, dk, dv (zeros on entry) for every (b, h); one parallel task per (b, h):
    it owns its slices of the three gradients, so no two threads add into one. For each tile of
    keys it walks over the blocks of queries that can see it, recomputing the tile's P."""
    B, H, Lq, d = q.shape
    Lk, dvn = k.shape[2], v.shape[3]
    MB, MH, _, _ = mask.shape
    f = q.dtype.type
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        mask_rows = mask[b if MB > 1 else 0, h if MH > 1 else 0]
        s, dp = np.empty((block_q, block_k), q.dtype), np.empty((block_q, block_k), q.dtype)
        for j0 in range(0, Lk, block_k):
            cols = min(block_k, Lk - j0)
            first = max(0, j0 - offset) if causal else 0   # earlier queries see none of it
            k_at, v_at = _row_address(k, b, h, j0), _row_address(v, b, h, j0)
            dk_at, dv_at = _row_address(dk, b, h, j0), _row_address(dv, b, h, j0)
            for i0 in range(first, Lq, block_q):
                rows = min(block_q, Lq - i0)
                q_at, do_at = _row_address(q, b, h, i0), _row_address(dout, b, h, i0)
                blas.gemm(gemm_at, blas.NO_TRANS, blas.TRANS, rows, cols, d, scale, q_at, lds[0],
                          k_at, lds[1], f(0), s.ctypes.data, block_k)             # S·scale
                blas.gemm(gemm_at, blas.NO_TRANS, blas.TRANS, rows, cols, dvn, f(1), do_at,
                          lds[3], v_at, lds[2], f(0), dp.ctypes.data, block_k)    # dP̃ = dO · Vᵀ
                limit0 = i0 + offset - j0 if causal else cols
                _weight_gradients(s, dp, rows, cols, lse[b, h], delta[b, h], i0,
                                  mask_rows[:, j0:j0 + cols], limit0,
                                  scale, drop, seed, ((b * H + h) * Lq + i0) * Lk + j0, Lk,
                                  threshold, keep_scale)
                blas.gemm(gemm_at, blas.TRANS, blas.NO_TRANS, cols, dvn, rows, f(1),
                          s.ctypes.data, block_k, do_at, lds[3], f(1), dv_at, lds[6])  # dV+=P̃ᵀdO
                blas.gemm(gemm_at, blas.TRANS, blas.NO_TRANS, cols, d, rows, f(1),
                          dp.ctypes.data, block_k, q_at, lds[0], f(1), dk_at, lds[5])  # dK += dSᵀ·Q
                blas.gemm(gemm_at, blas.NO_TRANS, blas.NO_TRANS, rows, d, cols, f(1),
                          dp.ctypes.data, block_k, k_at, lds[1], f(1),
                          _row_address(dq, b, h, i0), lds[4])                  # dQ += dS · K
# fmt: on


# ---- the numba side's wrappers -------------------------------------------------------------------


# (direction, layout) → the (block_q, block_k) kept for it; see TILES
_CHOSEN = {}


def _check_tiles(tiles):
    """Refuse tile sizes the kernels cannot use: None, or two positive integers."""
    if tiles is None:
        return
    ok = isinstance(tiles, (tuple, list)) and len(tiles) == 2
    ok = ok and all(isinstance(t, (int, np.integer)) and t > 0 for t in tiles)
    if not ok:
        raise ValueError(
            f"fused attention: tiles must be None or (block_q, block_k), two positive "
            f"integers such as {DEFAULT_TILES}, got {tiles!r}"
        )


def _length_class(n):
    """n rounded up to a power of two: the lengths that share one timing of the tile sizes
    (a decoder with a KV cache sees a new key length every step; it is timed once per class)."""
    return 1 << max(0, n - 1).bit_length()


def tile_sizes(direction, operands, run):
    """The tile sizes (block_q, block_k) for the "forward" or "backward" kernel on this layout:
    `operands` (q, k, v, the additive mask, causal?, dropout p) make the key — batch, heads,
    widths and dtype exactly, the two lengths by _length_class, which axes the mask varies
    along — with the thread count. The first time a key is seen, run(tiles) is timed for each
    of TILES (jit.median_times) and the fastest kept for the process; DEFAULT_TILES under
    deterministic algorithms (the tiles' order of additions must not depend on a timing), and
    while a helper compiles ahead (jit.timings_would_mislead: nothing is kept then)."""
    if are_deterministic_algorithms_enabled():
        return DEFAULT_TILES
    q, k, v, mask, causal, p = operands
    (B, H, Lq, d), Lk, dv = q.shape, k.shape[2], v.shape[3]
    lengths = _length_class(Lq), _length_class(Lk)
    mask_varies = tuple(n > 1 for n in mask.shape[:3])
    key = (direction, B, H, lengths, d, dv, q.dtype.str, mask_varies, causal, p > 0)
    key += (jit.threads(),)
    if key not in _CHOSEN:
        times = jit.median_times([functools.partial(run, tiles) for tiles in TILES], rounds=3)
        if times is None:  # timed once the helper is done
            return DEFAULT_TILES
        _CHOSEN[key] = TILES[times.index(min(times))]
    return _CHOSEN[key]


def _heads_last_zeros(batch, heads, length, width, dtype):
    """A zero (B, h, L, n) array whose memory is laid out (B, L, h, n): merging the heads
    afterwards (swapaxes(1, 2) then reshape to (B·L, h·n)) is then a view, not a copy."""
    return np.zeros((batch, length, heads, width), dtype).swapaxes(1, 2)


def _gemm_readable(x):
    """(x, ld): x as gemm can read each x[b, h] in place — unit stride along the last axis, a
    row stride of at least one row — copied only when it cannot; ld its row stride in entries."""
    item = x.itemsize
    rows, width = x.shape[2], x.shape[3]
    if rows <= 1:
        ok = x.strides[3] == item or width <= 1
        return (x, max(width, 1)) if ok else (np.ascontiguousarray(x), max(width, 1))
    if (
        (x.strides[3] == item or width <= 1)
        and x.strides[2] % item == 0
        and x.strides[2] >= width * item
        and min(x.strides) >= 0
    ):
        return x, x.strides[2] // item
    return np.ascontiguousarray(x), max(width, 1)


def _dropout_args(seed, p, dtype):
    """(drop?, seed, threshold, 1/(1 − p)) as the kernels take them."""
    if not p:
        return False, np.uint64(0), np.uint64(0), dtype.type(1)
    return True, np.uint64(seed), keep_threshold(p), dtype.type(1.0 / (1.0 - p))


def fused_attention_forward_numba(
    q, k, v, mask=None, scale=None, causal=None, seed=0, p=0.0, tiles=None
):
    """Numba twin of fused_attention_forward_numpy (same arguments, same result). The output
    is (B, h, Lq, dv) laid out as (B, Lq, h, dv) in memory (see _heads_last_zeros). tiles:
    (block_q, block_k), or None for the fastest of TILES on this layout (`tile_sizes`).
    Without an OpenBLAS gemm to call (fast_matmul/blas.py), the numpy twin runs instead."""
    _check(q, k, v)
    _check_causal(causal)
    _check_tiles(tiles)
    if q.dtype not in _blas().GEMM:
        return fused_attention_forward_numpy(q, k, v, mask, scale, causal, seed, p)
    add = additive_mask(mask, q, k)
    (B, H, Lq, _), Lk, dv = q.shape, k.shape[2], v.shape[3]
    out = _heads_last_zeros(B, H, Lq, dv, q.dtype)
    lse = np.full((B, H, Lq), -np.inf, q.dtype)
    if out.size == 0 or Lk == 0:
        return out, lse
    (q, ldq), (k, ldk), (v, ldv) = _gemm_readable(q), _gemm_readable(k), _gemm_readable(v)
    lds = np.array([ldq, ldk, ldv], dtype=np.int64)
    causal, offset = _causal_plan(causal, add, q, k)

    def run(tiles):
        _forward_tasks(
            blas.GEMM[q.dtype],
            q,
            k,
            v,
            lds,
            add,
            q.dtype.type(_scale(scale, q)),
            causal,
            offset,
            *_dropout_args(seed, p, q.dtype),
            *tiles,
            out,
            lse,
            work=B * H * Lq * Lk,
        )

    run(tiles or tile_sizes("forward", (q, k, v, add, causal, p), run))
    return out, lse


def fused_attention_backward_numba(
    q, k, v, out, lse, dout, mask=None, scale=None, causal=None, seed=0, p=0.0, tiles=None
):
    """Numba twin of fused_attention_backward_numpy. dq, dk, dv are laid out heads-last in
    memory like the forward's output. tiles as for the forward (chosen apart from it)."""
    _check_tiles(tiles)
    if q.dtype not in _blas().GEMM:
        return fused_attention_backward_numpy(q, k, v, out, lse, dout, mask, scale, causal, seed, p)
    add = additive_mask(mask, q, k)
    (B, H, Lq, d), Lk, dvn = q.shape, k.shape[2], v.shape[3]
    dq, dk, dv = (_heads_last_zeros(B, H, n, w, q.dtype) for n, w in ((Lq, d), (Lk, d), (Lk, dvn)))
    if dq.size == 0 or dk.size == 0 or dv.size == 0:
        return dq, dk, dv
    dout = dout.astype(q.dtype, copy=False)
    delta = np.einsum("bhid,bhid->bhi", dout, out)  # δᵢ = dOᵢ · Oᵢ
    readable = [_gemm_readable(x) for x in (q, k, v, dout, dq, dk, dv)]
    (q, k, v, dout), lds = [x for x, _ in readable[:4]], np.array([ld for _, ld in readable])
    causal, offset = _causal_plan(causal, add, q, k)

    def run(tiles):
        for g in (dq, dk, dv):  # the kernel adds into them (a timed run of tile_sizes, too)
            g.fill(0)
        _backward_tasks(
            blas.GEMM[q.dtype],
            q,
            k,
            v,
            dout,
            lds,
            lse,
            delta,
            add,
            q.dtype.type(_scale(scale, q)),
            causal,
            offset,
            *_dropout_args(seed, p, q.dtype),
            *tiles,
            dq,
            dk,
            dv,
            work=B * H * Lq * Lk,
        )

    run(tiles or tile_sizes("backward", (q, k, v, add, causal, p), run))
    return dq, dk, dv
