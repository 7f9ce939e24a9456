"""Softmax and log-softmax over the last axis: numba kernels and their numpy twins.

softmax_forward(x, scale, mask) is the kernel under scaled dot-product attention: it computes
softmax(scale·x + mask) in one kernel, without temporaries as large as the scores: the mask's
broadcasting is done by index arithmetic instead of materialising a mask of the scores' size.
"""

import math

import numpy as np

from . import jit
from .jit import FASTMATH, kernel, prange

# ---- numpy twins (the reference a learner reads first) ----------------------------------------


def softmax_forward_numpy(x, scale=1.0, mask=None):
    """softmax(scale·x + mask) over the last axis; x (..., N) → y of the same shape and dtype.

    mask: None, bool (True = blocked) or additive float (0 / −inf), broadcastable to x. A
    blocked position's score is never read: an inf or NaN there changes nothing. Numerically
    stable: yᵢ = exp(zᵢ − max z) / Σⱼ exp(zⱼ − max z). A row whose every entry is blocked
    (max z = −inf) gives all zeros, never NaN; a row holding a NaN or +inf gives NaN, as in
    torch."""
    z = x * x.dtype.type(scale) if scale != 1.0 else x
    if mask is not None:
        z = np.where(mask, -np.inf, z) if mask.dtype == np.bool_ else z + mask.astype(x.dtype)
    z_max = np.max(z, axis=-1, keepdims=True, initial=-np.inf)  # rows may be empty
    z_max = np.where(z_max == -np.inf, 0.0, z_max)
    e = np.exp(z - z_max)
    total = e.sum(axis=-1, keepdims=True)
    y = np.divide(e, total, out=np.zeros_like(e), where=total != 0)
    return y.astype(x.dtype, copy=False)


def softmax_backward_numpy(y, dy, scale=1.0):
    """dx = scale · y ⊙ (dy − Σⱼ dyⱼ·yⱼ) over the last axis; zero where y is zero (a fully
    masked row). y, dy (..., N) → dx (..., N)."""
    dx = y * (dy - (dy * y).sum(axis=-1, keepdims=True))
    return dx * y.dtype.type(scale) if scale != 1.0 else dx


def log_softmax_forward_numpy(x):
    """log softmax over the last axis, in the max-subtracted frame z = x − max x:
    y = z − log Σ exp(z); x (..., N). Subtracting max x first keeps the digits of z when |x| is
    large (a row of −1e9 gives −log N, not 0)."""
    z = x - np.max(x, axis=-1, keepdims=True, initial=-np.inf)  # rows may be empty
    with np.errstate(divide="ignore"):  # an empty row: log 0 = −inf, never read
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def log_softmax_backward_numpy(y, dy):
    """dx = dy − exp(y) · Σ dy over the last axis (exp(y) is the softmax)."""
    return dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)


# ---- numba kernels ------------------------------------------------------------------------------


@kernel(flags=FASTMATH | {"nnan"})
def _masked_row_max(x_row, mask_row, scale):
    """max(max_j z_j, lowest) with z_j = jit.masked_score(x_row[j], mask_row[j], scale) and
    lowest the most negative finite float: the true maximum, except that a row with no allowed
    finite score gives `lowest` instead of −inf (its exp(z − lowest) is still 0 everywhere).
    Each z_j is raised to `lowest` first because LLVM folds maximum(m, −inf) into a select
    that keeps the loop from vectorising (with a bool mask); compiled with "nnan" so that LLVM
    may reorder the running maximum into packed vmaxps (a clearly faster softmax on short rows:
    benchmarks/README.md, "Figures behind the source's reasoning").
    `maximum` ignores a NaN operand either way, and the caller's exp lets a NaN reach the
    output."""
    f = x_row.dtype.type
    lowest = f(-np.finfo(x_row.dtype).max)
    z_max = lowest
    for j in range(x_row.shape[0]):
        z = jit.masked_score(x_row[j], mask_row[j], scale)
        z_max = jit.maximum(z_max, jit.maximum(z, lowest))
    return z_max


# _softmax_blocks takes exp of this many scores at a time (or one row, if longer): a run that
# stays in the core's L1 cache between the passes
_EXP_RUN = 4096


@kernel()
def _softmax_blocks(x, mask, scale, y, first, stop):
    """y[a, b, c, :] = softmax(z) with z = jit.masked_score(x[a, b, c, :], mask[a', b', c', :]),
    for the blocks ab = a·B + b in [first, stop) (C rows of N each), one after the other.

    x, y: (A, B, C, N) C-contiguous. mask: bool (True = blocked) or additive float,
    (MA, MB, MC, N) with each of MA, MB, MC either 1 (broadcast) or equal to A, B, C — so a
    (B, 1, 1, Lk) padding mask or an (Lq, Lk) causal mask is read in place, never expanded to
    the scores' size. A serial kernel: _softmax_rows hands each thread one range of blocks.

    The exponentials are taken in one flat loop over a run of rows, not row by row: attention
    over a few keys has rows of 5 or 7 scores, shorter than one vector register, and a loop
    per row would take exp of one score at a time. A run of rows is contiguous in y, and one
    loop over all of it fills the registers."""
    A, B, C, N = x.shape
    MA, MB, MC, _ = mask.shape
    f = x.dtype.type  # float32 or float64: keep all arithmetic in it
    rows_per_run = max(1, _EXP_RUN // max(N, 1))
    for ab in range(first, stop):
        a, b = ab // B, ab % B
        ma, mb = a if MA > 1 else 0, b if MB > 1 else 0
        for c0 in range(0, C, rows_per_run):
            c1 = min(C, c0 + rows_per_run)
            # y = z − max z, row by row: the row maximum keeps exp from overflowing
            # (every position blocked: z_max is finite, exp(−inf − z_max) = 0 everywhere, and
            # the row stays zero below, not NaN)
            for c in range(c0, c1):
                mc = c if MC > 1 else 0
                z_max = _masked_row_max(x[a, b, c], mask[ma, mb, mc], scale)
                for j in range(N):
                    y[a, b, c, j] = (
                        jit.masked_score(x[a, b, c, j], mask[ma, mb, mc, j], scale) - z_max
                    )
            run = y[a, b, c0:c1].reshape(-1)  # e = exp(z − max z), the run at once
            for i in range(run.shape[0]):
                run[i] = jit.exp(run[i])
            for c in range(c0, c1):  # divided by the row's sum
                total = jit.row_sum(y[a, b, c])
                inv_total = f(1) / total if total != 0 else f(0)  # NaN stays NaN
                for j in range(N):
                    y[a, b, c, j] *= inv_total


def _softmax_in_one_run(x, mask, scale, y, n_tasks):
    """_softmax_rows on one thread: every block of x in one call of _softmax_blocks (the rows
    are independent, so any split into tasks gives this y). Called in place of the serial
    build, which is then never compiled (see jit.Kernel)."""
    _softmax_blocks(x, mask, scale, y, 0, x.shape[0] * x.shape[1])


@kernel(parallel=True, one_thread=_softmax_in_one_run)
def _softmax_rows(x, mask, scale, y, n_tasks):
    """_softmax_blocks over all A·B blocks of x (A, B, C, N), split into n_tasks runs of
    consecutive blocks, one parallel task each (rows are independent: any split gives the same
    y). Why the loop body is a kernel of its own: this kernel is built twice, parallel and
    serial (jit.Kernel), and numba types, lowers and optimises a parallel loop's body all over
    again for its parallel build. With the body in _softmax_blocks, compiled once, the parallel
    build is a loop of n_tasks calls (a third faster to compile on a cold cache:
    benchmarks/README.md, "the demo's cold start"), and one thread calls _softmax_blocks
    itself (`_softmax_in_one_run`). One call per task, not per block, so the calls cost
    nothing measurable."""
    blocks = x.shape[0] * x.shape[1]
    for task in prange(n_tasks):
        first, stop = task * blocks // n_tasks, (task + 1) * blocks // n_tasks
        _softmax_blocks(x, mask, scale, y, first, stop)


@kernel(parallel=True)
def _softmax_backward_rows(y, dy, scale, dx):
    """dx[r, :] = y[r, :] ⊙ (dy[r, :] − Σⱼ dy[r, j]·y[r, j]) · scale; y, dy, dx (R, N)."""
    R, N = y.shape
    for r in prange(R):
        dot = jit.row_dot(dy[r], y[r])
        for j in range(N):
            dx[r, j] = y[r, j] * (dy[r, j] - dot) * scale


@kernel(parallel=True)
def _log_softmax_rows(x, y):
    """y[r, :] = z − log Σⱼ exp(zⱼ) with z = x[r, :] − max; x, y (R, N). exp(z) is stored in
    y first, to be summed by jit.row_sum."""
    R, N = x.shape
    for r in prange(R):
        x_max = jit.row_max(x[r])
        for j in range(N):
            y[r, j] = jit.exp(x[r, j] - x_max)
        log_total = np.log(jit.row_sum(y[r]))
        for j in range(N):
            y[r, j] = (x[r, j] - x_max) - log_total


@kernel(parallel=True)
def _log_softmax_backward_rows(y, dy, dx):
    """dx[r, :] = dy[r, :] − exp(y[r, :]) · Σⱼ dy[r, j]; y, dy, dx (R, N)."""
    R, N = y.shape
    for r in prange(R):
        dy_sum = jit.row_sum(dy[r])
        for j in range(N):
            dx[r, j] = dy[r, j] - jit.exp(y[r, j]) * dy_sum


# ---- the numba side's wrappers: shapes in, contiguous arrays to the kernels -------------------


def _rows(a, dtype=None):
    """a as a C-contiguous (R, N) array (a copy only if a is a non-contiguous view)."""
    return np.ascontiguousarray(a, dtype=dtype).reshape(math.prod(a.shape[:-1]), a.shape[-1])


def _as_4d(x, mask):
    """x as contiguous (A, B, C, N); mask as bool or additive float (MA, MB, MC, N), broadcast
    axes kept at size 1. More than four axes of x are merged (then a mask is expanded to x's
    size). A mask that does not broadcast to x is refused (the kernel would read past it)."""
    n = x.shape[-1]
    x = np.ascontiguousarray(x)
    if mask is None:
        mask = np.zeros((1, 1, 1, n), dtype=np.bool_)
    else:
        if mask.ndim > x.ndim or np.broadcast_shapes(mask.shape, x.shape) != x.shape:
            raise ValueError(
                f"softmax_forward: mask of shape {mask.shape} does not broadcast "
                f"to the scores' shape {x.shape}"
            )
        if mask.dtype != np.bool_:
            mask = mask.astype(x.dtype, copy=False)
        mask = mask.reshape((1,) * (x.ndim - mask.ndim) + mask.shape)
    if x.ndim > 4:  # the leading axes as one (its size, not −1: x may be empty)
        lead = int(np.prod(x.shape[:-3]))
        mask = np.broadcast_to(mask, x.shape).reshape(lead, *x.shape[-3:])
        x = x.reshape(lead, *x.shape[-3:])
    x = x.reshape((1,) * (4 - x.ndim) + x.shape)
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    if mask.shape[3] != n:  # one entry for every key (np.broadcast_to costs µs: only if needed)
        mask = np.broadcast_to(mask, mask.shape[:3] + (n,))
    mask = np.ascontiguousarray(mask).view()
    mask.flags.writeable = False  # always read-only, as a broadcast one is: one type to compile
    if x.shape[:2] == (1, 1):  # 1-D or 2-D x: rows on axis B, where the parallel loop runs
        x, mask = x.reshape(1, x.shape[2], 1, n), mask.reshape(1, mask.shape[2], 1, n)
    return x, mask


def softmax_forward_numba(x, scale=1.0, mask=None):
    """Numba twin of softmax_forward_numpy (same arguments, same result)."""
    x4, mask4 = _as_4d(x, mask)
    y = np.empty_like(x4)
    _softmax_rows(x4, mask4, x.dtype.type(scale), y, jit.threads())
    return y.reshape(x.shape)


def softmax_backward_numba(y, dy, scale=1.0):
    """Numba twin of softmax_backward_numpy."""
    y2, dy2 = _rows(y), _rows(dy, y.dtype)
    dx = np.empty_like(y2)
    _softmax_backward_rows(y2, dy2, y.dtype.type(scale), dx)
    return dx.reshape(y.shape)


def log_softmax_forward_numba(x):
    """Numba twin of log_softmax_forward_numpy."""
    x2 = _rows(x)
    y = np.empty_like(x2)
    _log_softmax_rows(x2, y)
    return y.reshape(x.shape)


def log_softmax_backward_numba(y, dy):
    """Numba twin of log_softmax_backward_numpy."""
    y2, dy2 = _rows(y), _rows(dy, y.dtype)
    dx = np.empty_like(y2)
    _log_softmax_backward_rows(y2, dy2, dx)
    return dx.reshape(y.shape)
