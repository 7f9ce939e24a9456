"""The fast matrix products of the numba backend: a tile kernel for stacks of small matrices
(attention), BLAS's gemm called from numba threads for large products (Linear layers),
np.matmul for the rest.

Every matmul of the framework comes here three times per step — the forward product and the
two backward products grad·Bᵀ and Aᵀ·grad — so all three share one routine, `_product`, and
`route` decides who computes it:

* **"tiles": the tile kernel** (`tiled_matmul`) for stacks — (B·h, L, d) @ (B·h, d, L) and
  the like — of matrices up to 256³ multiply-adds. Each thread takes its own run of
  matrices (on one thread too: np.matmul calls BLAS once per small matrix); each matrix is
  cut into tiles of a few rows × a few SIMD vectors of columns (8 × 1, 4 × 2, 6 × 2 or
  12 × 1: TILE_SHAPES, the fastest on the layout kept), computed by
  the register-tile microkernel of microkernel.py (read that file: it is how every BLAS
  computes). kᵀ arrives as a transposed view; it is packed into rows, 8 × 8 blocks at a time
  transposed in registers, one matrix at a time into a small per-thread panel.
* **"gemm": numba's threads, each calling BLAS** (blas.py) from a prange: one product — a
  Linear layer, (B, L, d) @ (d, e) folded into (B·L, d) @ (d, e) — by blocks of rows, a stack
  of matrices larger than the tiles take by matrix (and a stack of small ones where it was
  timed faster than the tiles: on one machine BLAS won weights·V, the tiles q·kᵀ).
  Transposed views (Wᵀ, Xᵀ) are read in place: BLAS is told the operand is transposed.
  While numba's threads call it, BLAS's own threads are held at one (two thread pools on
  the same cores fight: kernels/jit.py).
* **"numpy": np.matmul** with BLAS on one thread (beside numba's pool, BLAS's own threads
  cost a training step more than they save: `numpy_product`), or at BLAS's own thread count
  where whole training steps were timed faster so (kernels/ownership.py): integer or mixed dtypes,
  products too small to share (under 2¹⁸ multiply-adds in a stack, under 2²⁰ in a single
  product, where starting threads costs more than it saves), and on one thread every product
  but the tiles' stacks.

Which of a candidate and np.matmul is faster depends on the machine (its vector width, its
BLAS, BLAS's thread count): on one machine the tiles beat np.matmul on every attention shape,
on another they lost on most. So neither wins by a rule: the first time a layout would go to
a candidate, every version of it and np.matmul in every configuration the route may take (on
one thread, without the thread cap where BLAS would use one anyway, on BLAS's threads where
their spin is short: `_numpy_configs`) are timed on it and the fastest is kept for
the process (`fastest`); benchmarks/kernels.py prints the comparison on
your machine (--only tiles: each register tile). While a helper process compiles kernels
ahead (jit.timings_would_mislead) nothing is timed: such a layout gets np.matmul until the
helper is done, and is timed then. The numpy twins are np.matmul itself (kernels/matmul.py).
"""

import functools
import math
import statistics
import time

import numpy as np
from numba import prange

from ... import config
from ..backend_switch import are_deterministic_algorithms_enabled
from ..jit import (
    LazyKernel,
    copy_named,
    cores,
    kernel,
    median_times,
    threads,
    timings_would_mislead,
)
from ..matmul import is_transposed
from ..ownership import _owner
from .blas import GEMM, NO_TRANS, TRANS, blas_threads, blas_threads_at_most, gemm
from .microkernel import SOURCE_STAMP, TRANSPOSE_BLOCK, VECTOR_BYTES, tile_kernel, transpose_block

# A stack goes to the tile kernel when each matrix is at most this many multiply-adds (beyond,
# BLAS's cache blocking wins) and the whole stack at least this many (below, np.matmul on one
# thread is faster than starting the threads). Measured, see the module docstring.
_TILES_MAX_MATRIX = 256 * 256 * 256
_TILES_MIN_WORK = 1 << 18
_TILE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# A single product goes to the BLAS-calling threads from this many multiply-adds (2^20, a few
# microseconds of BLAS work on one core): below it, waking a second thread costs more than the
# half of the work it takes, so smaller ones run faster on one thread than shared.
_GEMM_MIN_WORK = 1 << 20
_SMALLEST_CANDIDATE = min(_TILES_MIN_WORK, _GEMM_MIN_WORK)
# OpenBLAS computes a matrix product (gemm) of up to this many multiply-adds on one thread,
# whatever its thread count: its SMP threshold, 65536 × GEMM_MULTITHREAD_THRESHOLD (4).
_BLAS_ONE_THREAD_WORK = 1 << 18


# ---- where the p-th matrices of a stack start --------------------------------------------------


@kernel()
def _offsets(p, batch):
    """Byte offsets of the p-th matrices of A, B and C: p unravelled over the batch shape
    batch[0] (C order), times each array's batch strides batch[1], batch[2] and batch[3]
    (bytes; 0 on an axis A or B broadcasts). `batch` is the (4, batch axes) table of
    _batch_table."""
    a_offset, b_offset, c_offset = 0, 0, 0
    for axis in range(batch.shape[1] - 1, -1, -1):  # last batch axis first
        index = p % batch[0, axis]
        p //= batch[0, axis]
        a_offset += index * batch[1, axis]
        b_offset += index * batch[2, axis]
        c_offset += index * batch[3, axis]
    return a_offset, b_offset, c_offset


# ---- the tile kernels: stacks of small matrices, each thread its own matrices -----------------

# The register tiles tried (rows × SIMD vectors of columns of C, microkernel.py): which is
# fastest depends on the core (its FMA units and registers, its vector width) and on the shape
# (one vector of columns wastes the fewest lanes on short rows, L = 7 or 13; more rows reuse
# each B vector more), so `fastest` times them all on each layout, as ATLAS and TVM tune
# theirs, and keeps the best. Each is compiled once per machine (numba's on-disk cache).
TILE_SHAPES = ((8, 1), (4, 2), (6, 2), (12, 1))
_DEFAULT_TILE = TILE_SHAPES[0]
_BLOCK = TRANSPOSE_BLOCK


# The operands below are addresses (integers, bytes), not arrays: a view of an array per
# matrix (c[p]) makes numba count references to that array, atomically and from both threads
# at once; with addresses the threads share nothing they write.


def _pack_transposed(k, m, b, ld, panel, item, like):
    """panel[p, j] = B[p, j] (the panel is k × m, rows contiguous) for a B stored transposed —
    B[p, j] at b + (j·ld + p)·item, as kᵀ is stored in q·kᵀ — so that the tiles can load rows
    of B as vectors. 8 × 8 blocks are transposed in registers (microkernel.transpose_block)."""
    for j in range(0, m, _BLOCK):
        for p in range(0, k, _BLOCK):
            transpose_block(
                b + (j * ld + p) * item,
                ld,
                panel + (p * m + j) * item,
                m,
                min(_BLOCK, m - j),
                min(_BLOCK, k - p),
                like,
            )


# The two functions below are templates: tile_stack_kernel compiles a copy of them per tile
# shape, with the shape and its microkernel as the copy's globals _TILE_ROWS, _TILE_VECTORS
# and _TILE (constants of the compiled code) under a name of its own (_tiled_stack_8x1, ...),
# which is what numba's on-disk cache is keyed by.


def _tiled_matrix(n, m, k, a, a_row, a_col, b, b_row, b_col, c, c_row, panel, item, like):
    """C = A @ B for one matrix, tile by tile: A (n, k) at a, A[i, p] at
    a + (i·a_row + p·a_col)·item; B (k, m) at b likewise; C (n, m) at c, C[i, j] at
    c + (i·c_row + j)·item (each row contiguous, rows c_row entries apart).
    B must have unit stride along one axis: along its rows (b_col = 1) it is read in place,
    along its columns (b_row = 1: kᵀ) it is packed into the panel at address `panel` (this
    thread's, k·m entries) first. item is the entries' size in bytes, like a scalar of their
    dtype."""
    if b_col != 1:
        _pack_transposed(k, m, b, b_col, panel, item, like)
        b, b_row = panel, m
    cols = _TILE_VECTORS * (VECTOR_BYTES // item)  # noqa: F821 (see _with_globals)
    for j in range(0, m, cols):  # a column strip of B stays in L1 for all rows
        for i in range(0, n, _TILE_ROWS):  # noqa: F821
            _TILE(  # noqa: F821
                k,
                a + i * a_row * item,
                a_row,
                a_col,
                b + j * item,
                b_row,
                c + (i * c_row + j) * item,
                c_row,
                min(_TILE_ROWS, n - i),  # noqa: F821
                min(cols, m - j),
                like,
            )


def _tiled_stack(batch, n, m, k, a, a_row, a_col, b, b_row, b_col, c, c_row, panels, tasks):
    """C[p] = A[p] @ B[p] (n × m each) for every matrix p of the batch. A[p] starts at the
    address a + the offset _offsets gives, with entry strides a_row, a_col; B[p] and C[p]
    likewise (see _tiled_matrix: C's rows c_row entries apart). The stack is cut into `tasks`
    runs of matrices (one per thread), each with its own packing panel: row `task` of
    `panels` (tasks × k·m entries of the dtype; what the kernel computes in)."""
    P = 1
    for size in batch[0]:
        P *= size
    item, like = panels.itemsize, panels.dtype.type(0)
    panel_bytes = panels.shape[1] * item
    for task in prange(tasks):
        panel = panels.ctypes.data + task * panel_bytes
        for p in range(task * P // tasks, (task + 1) * P // tasks):
            a_offset, b_offset, c_offset = _offsets(p, batch)
            _tiled_matrix(
                n,
                m,
                k,
                a + a_offset,
                a_row,
                a_col,
                b + b_offset,
                b_row,
                b_col,
                c + c_offset,
                c_row,
                panel,
                item,
                like,
            )


def _with_globals(py_func, suffix, **names):
    """A copy of py_func named py_func's name + suffix, whose globals are its module's with
    `names` put in (numba reads a function's globals as constants when it compiles it)."""
    return copy_named(py_func, suffix, dict(py_func.__globals__, **names))


@functools.cache
def _pack_kernel():
    """_pack_transposed, compiled under a name carrying microkernel.SOURCE_STAMP."""
    return kernel(lazy=False)(_with_globals(_pack_transposed, f"_{SOURCE_STAMP}"))


def _built(lazy_kernel):
    """A module-level kernel, built: it is still a jit.LazyKernel until something builds it,
    after which the module holds numba's dispatcher in its place."""
    return lazy_kernel.build() if isinstance(lazy_kernel, LazyKernel) else lazy_kernel


@functools.cache
def tile_stack_kernel(rows: int, vectors: int):
    """_tiled_stack with register tiles of `rows` × `vectors` SIMD vectors, compiled (a
    jit.Kernel, parallel and serial builds; loaded from numba's cache after the first time,
    under names carrying microkernel.SOURCE_STAMP)."""
    suffix = f"_{rows}x{vectors}_{SOURCE_STAMP}"
    constants = dict(_TILE=tile_kernel(rows, vectors), _TILE_ROWS=rows, _TILE_VECTORS=vectors)
    matrix = kernel(lazy=False)(
        _with_globals(_tiled_matrix, suffix, _pack_transposed=_pack_kernel(), **constants)
    )
    stack = _with_globals(_tiled_stack, suffix, _offsets=_built(_offsets), _tiled_matrix=matrix)
    built = kernel(parallel=True, lazy=False)(stack)
    built.made_by = ("tile_stack_kernel", (rows, vectors))  # how the compile-ahead helper makes it
    return built


# ---- the BLAS-calling kernels: each thread its own matrices, or its own block of rows ----------


@kernel(parallel=True)
def _gemm_stack(batch, address, trans_a, trans_b, k, a, lda, b, ldb, c):
    """A stack of products, one BLAS call per matrix: c[p] = op(A[p]) @ op(B[p]) for every
    matrix p of the batch; c is the (P, n, m) output. A[p] starts at the address a + the
    offset _offsets gives, B[p] likewise. op(X) is X or Xᵀ, k the inner size (blas.gemm)."""
    P, n, m = c.shape
    one, zero = c.dtype.type(1), c.dtype.type(0)
    for p in prange(P):
        # int64 as in the serial build (a parallel loop's index is unsigned): one compile
        a_offset, b_offset, _ = _offsets(np.int64(p), batch)
        gemm(
            address,
            trans_a,
            trans_b,
            n,
            m,
            k,
            one,
            a + a_offset,
            lda,
            b + b_offset,
            ldb,
            zero,
            c[p].ctypes.data,
            m,
        )


@kernel(parallel=True)
def _gemm_blocks(products, n_tasks, one):
    """Products by blocks of rows, BLAS's gemm once per block: each row of `products` ((P, 14)
    int64) is one product c = op(A) @ op(B) — address, trans_a, trans_b, n, m, k, a, lda, b,
    ldb, c, ldc as blas.gemm takes them (alpha `one`, beta 0), then the bytes from one row of
    op(A) to the next and from one row of c to the next. A product of n rows is cut into
    row_blocks(n) blocks, at places its row count fixes, so one thread or sixteen make the
    same calls and get the same bits. The blocks of all the products, in the order given, are
    dealt into n_tasks runs of about equal work (a block goes to the run its middle falls in),
    one run per thread: a weight's gradient in one block given first runs on one thread while
    the other computes the input's gradient block by block (`gemm_products`)."""
    zero = one - one
    total = 0
    for p in range(products.shape[0]):
        total += products[p, 3] * products[p, 4] * products[p, 5]
    for task in prange(n_tasks):
        low, high = task * total // n_tasks, (task + 1) * total // n_tasks
        before = 0  # the work of the blocks before this one
        for p in range(products.shape[0]):
            address, trans_a, trans_b, n, m, k = products[p, :6]
            a, lda, b, ldb, c, ldc, a_row, c_row = products[p, 6:]
            blocks = row_blocks(n)
            for block in range(blocks):
                first, stop = block * n // blocks, (block + 1) * n // blocks
                work = (stop - first) * m * k
                if low <= before + work // 2 < high:
                    gemm(
                        address,
                        trans_a,
                        trans_b,
                        stop - first,
                        m,
                        k,
                        one,
                        a + first * a_row,
                        lda,
                        b,
                        ldb,
                        zero,
                        c + first * c_row,
                        ldc,
                    )
                before += work


@kernel()
def data_address(x):
    """The address of x's first entry, as numpy's x.ctypes.data — which builds a ctypes object
    in Python, several times the cost of this compiled read."""
    return x.ctypes.data


def _blas_layout(x):
    """How BLAS can read the matrices of x (..., r, c) in place: (x, trans, ld), where trans
    says whether each matrix is stored transposed and ld is its row stride in entries. A
    layout BLAS cannot read (no unit stride, negative or odd strides) is copied first."""
    item = x.itemsize
    row_stride, col_stride = x.strides[-2:]
    r, c = x.shape[-2:]
    if col_stride == item and row_stride % item == 0 and row_stride >= c * item:
        return x, NO_TRANS, row_stride // item
    if row_stride == item and col_stride % item == 0 and col_stride >= r * item:
        return x, TRANS, col_stride // item
    x = np.ascontiguousarray(x)
    return x, NO_TRANS, c


def _batch_shape(a, b):
    """The batch shape of a @ b: a's and b's batch axes, broadcast."""
    if a.shape[:-2] == b.shape[:-2]:
        return a.shape[:-2]
    return np.broadcast_shapes(a.shape[:-2], b.shape[:-2])


def _batch_table(batch, a, b, c=None):
    """The (4, len(batch)) int64 table the stack kernels read (see _offsets): the batch
    shape, then a's, b's and the output c's byte strides along it (0 on an axis the operand
    broadcasts; c's zeros where c is not given: _gemm_stack finds its output's matrices
    itself)."""
    c_strides = c.strides[:-2] if c is not None else (0,) * len(batch)
    return _cached_batch_table(
        batch, a.shape[:-2], a.strides[:-2], b.shape[:-2], b.strides[:-2], c_strides
    )


@functools.lru_cache(maxsize=256)
def _cached_batch_table(batch, a_shape, a_strides, b_shape, b_strides, c_strides):
    """_batch_table's work, remembered: a model multiplies the same few layouts at every step,
    and building the small array took a quarter of a small product's time. The arrays it
    returns are shared, so they are made read-only."""

    def strides(shape, byte_strides):
        pad = len(batch) - len(shape)
        return [0] * pad + [0 if size == 1 else stride for size, stride in zip(shape, byte_strides)]

    table = np.array(
        [batch, strides(a_shape, a_strides), strides(b_shape, b_strides), list(c_strides)],
        dtype=np.int64,
    ).reshape(4, len(batch))
    table.flags.writeable = False
    return table


# A single product is cut into blocks of rows at places that depend on its number of rows only,
# so one thread or sixteen make the same BLAS calls and get the same bits (BLAS may compute a
# block of 8 rows with another kernel than one of 17, which rounds differently).
_ROWS_PER_BLOCK, _MAX_ROW_BLOCKS = 128, 16


@kernel()
def row_blocks(n):
    """How many blocks of rows a single product of n rows is cut into, whatever the thread
    count (the threads share the blocks): the largest power of two that leaves each block at
    least 128 rows, at most 16. Each BLAS call pays a fixed cost and runs short blocks below
    its best speed, so the blocks are as tall as the threads allow (benchmarks/README.md,
    "Taller blocks for the deterministic products"); a power of two shares out evenly among
    2, 4 or 8 threads."""
    most = min(_MAX_ROW_BLOCKS, n // _ROWS_PER_BLOCK)
    blocks = 1
    while blocks * 2 <= most:
        blocks *= 2
    return blocks


def gemm_product(a, b):
    """a @ b (numpy broadcasting, both at least 2-D, one float dtype that blas.GEMM has) by
    the BLAS-calling kernels: a stack split by matrix over the threads; a single product
    (b without batch axes, a's batch axes folded into rows) by blocks of rows."""
    n, k = a.shape[-2:]
    m = b.shape[-1]
    if _rows_of_one_product(a, b):
        (out,) = gemm_products([(a.reshape(-1, k), b)])
        return out.reshape(a.shape[:-1] + (m,))
    batch = _batch_shape(a, b)
    a2, trans_a, lda = _blas_layout(a)
    b2, trans_b, ldb = _blas_layout(b)
    out = np.empty((math.prod(batch), n, m), dtype=a.dtype)
    _gemm_stack(
        _batch_table(batch, a2, b2),
        GEMM[a.dtype],
        trans_a,
        trans_b,
        k,
        data_address(a2),
        lda,
        data_address(b2),
        ldb,
        out,
        work=out.size * k,
    )
    return out.reshape(batch + (n, m))


def gemm_products(pairs):
    """[a @ b for each (a, b) of `pairs`], 2-D matrices of one float dtype that blas.GEMM has,
    in one call of the parallel kernel _gemm_blocks: each product by blocks of rows, and the
    blocks of all of them shared among the threads. A Linear layer's two backward products go
    together so (`linear_grads`): the weight's gradient (64 rows: one block) no longer runs
    alone on one thread while the other waits."""
    rows, outs, operands = [], [], []
    for a, b in pairs:
        n, k = a.shape
        m = b.shape[1]
        out = np.empty((n, m), dtype=a.dtype)
        a, trans_a, lda = _blas_layout(a)  # (a copy where BLAS cannot read a in place:
        b, trans_b, ldb = _blas_layout(b)  # kept in `operands` until the kernel has run)
        a_row = out.itemsize if trans_a == TRANS else lda * out.itemsize
        row = (GEMM[out.dtype], trans_a, trans_b, n, m, k, data_address(a), lda)
        row += (data_address(b), ldb, data_address(out), m, a_row, m * out.itemsize)
        rows.append((n // row_blocks(n) * m * k, row))  # (the work of one block, first)
        outs.append(out)
        operands += [a, b]
    rows.sort(key=lambda pair: -pair[0])  # the largest blocks first: they fill a run alone
    table = np.array([row for _, row in rows], dtype=np.int64)
    work = sum(out.size * a.shape[1] for out, (a, _) in zip(outs, pairs))
    _gemm_blocks(table, threads(), outs[0].dtype.type(1), work=work)
    return outs


def linear_grads(grad, x, wt):
    """(grad @ wtᵀ, Σ xᵀ·grad) like matmul.linear_grads_numpy: a Linear layer's two backward
    products, each one product of all the batch's rows. Where `route` sends both to gemm (a
    Linear layer's sizes), they run together (gemm_products), each by the same blocks of rows
    as alone, so with the same bits; else each goes its own route."""
    k, m = wt.shape
    rows = math.prod(x.shape[:-1])  # not -1: k or m may be 0
    g_rows, x_rows = grad.reshape(rows, m), x.reshape(rows, k)  # (views where the rows merge)
    transposed = is_transposed(wt)
    pairs = [(g_rows, wt.T), (g_rows.T, x_rows) if transposed else (x_rows.T, g_rows)]
    chosen = [_choose(a, b)[1] for a, b in pairs]
    if all(product is gemm_product for product in chosen):
        gx, gw = gemm_products(pairs)
    elif all(product is gemm_one_blas_thread for product in chosen):
        with blas_threads_at_most(1):
            gx, gw = gemm_products(pairs)
    else:
        gx, gw = (_product(a, b) for a, b in pairs)
    return gx.reshape(x.shape), gw.T if transposed else gw


def _tile_layout(x):
    """How the tile kernel can read the matrices of x (..., r, c): (x, row, col) with x's
    entry strides along its last two axes, one of them 1 (a size-1 axis counts as unit
    stride). A layout without a unit stride, or strides that are not whole entries, is
    copied first."""
    item = x.itemsize
    row, col = x.strides[-2:]
    r, c = x.shape[-2:]
    row, col = (item if r == 1 else row), (item if c == 1 else col)
    if (row == item or col == item) and row % item == 0 and col % item == 0:
        return x, row // item, col // item
    return np.ascontiguousarray(x), c, 1


def _check_tile_operands(a, b):
    """tiled_matmul's own checks (matmul's callers check shapes before they come here): the
    tile kernel reads raw memory, so a wrong shape or dtype must stop here, not be read."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"tiled_matmul: a {a.shape} @ b {b.shape}: expected a (..., n, k) and "
            f"b (..., k, m) with the same k"
        )
    if a.dtype != b.dtype or a.dtype not in _TILE_DTYPES:
        raise TypeError(
            f"tiled_matmul: float32 or float64 operands of one dtype, got a "
            f"{a.dtype} {a.shape} and b {b.dtype} {b.shape}"
        )


def tiled_matmul(a, b, tile: tuple = _DEFAULT_TILE, out=None):
    """a @ b for float32 or float64 arrays of one dtype, at least 2-D (numpy broadcasting), by
    the tile kernel whatever `route` says, with register tiles of tile = (rows, vectors) (one
    of TILE_SHAPES; `route` picks the fastest per layout): the stack is cut into one run of
    matrices per thread. Neither a transposed view nor a broadcast batch is copied.

    out: an array of the result's shape and dtype to write into (returned). The kernel writes
    it in place when each of its rows is contiguous — a gradient laid out as attention's
    heads are, (B, h, L, d) over (B, L, h, d) memory, is — and otherwise computes into a
    C-ordered array and copies."""
    _check_tile_operands(a, b)
    if tile not in TILE_SHAPES:
        raise ValueError(f"tiled_matmul: tile {tile} is not one of TILE_SHAPES {TILE_SHAPES}")
    n, k = a.shape[-2:]
    m = b.shape[-1]
    try:
        batch = _batch_shape(a, b)
    except ValueError:
        raise ValueError(
            f"tiled_matmul: the batch axes of a {a.shape} and b {b.shape} do not broadcast"
        ) from None
    if out is not None and (out.shape != batch + (n, m) or out.dtype != a.dtype):
        raise ValueError(
            f"tiled_matmul: out {out.dtype} {out.shape} for a {a.shape} @ b {b.shape} "
            f"({a.dtype} {batch + (n, m)})"
        )
    c = out if out is not None and _rows_writable(out, a, b) else np.empty(batch + (n, m), a.dtype)
    a2, a_row, a_col = _tile_layout(a)
    b2, b_row, b_col = _tile_layout(b)
    matrices = math.prod(batch)
    tasks = max(1, min(threads(), matrices))
    tile_stack_kernel(*tile)(
        _batch_table(batch, a2, b2, c),
        n,
        m,
        k,
        data_address(a2),
        a_row,
        a_col,
        data_address(b2),
        b_row,
        b_col,
        data_address(c),
        c.strides[-2] // c.itemsize if n > 1 else m,
        np.empty((tasks, k * m if b_col != 1 else 0), dtype=a.dtype),
        tasks,
        work=matrices * n * m * k,
    )
    if out is not None and c is not out:
        np.copyto(out, c)
        return out
    return c


def _rows_writable(c, a, b):
    """Whether the tile kernel can write the matrices of c (..., n, m) where they lie: c
    writeable, each row's entries contiguous, no two entries at one address (each axis, by
    increasing stride, steps past everything the smaller ones span), and no memory shared
    with the operands a and b (which the kernel is still reading)."""
    item = c.itemsize
    if not c.flags.writeable or (c.shape[-1] > 1 and c.strides[-1] != item):
        return False
    span = item
    for stride, size in sorted((s, n) for s, n in zip(c.strides, c.shape) if n > 1):
        if stride < span or stride % item:
            return False
        span = stride * size
    return not (np.may_share_memory(c, a) or np.may_share_memory(c, b))


def route(a, b) -> str:
    """Who computes a @ b on the numba backend: "tiles" (the tile kernel: stacks of matrices
    up to 256³ multiply-adds each), "gemm" (the BLAS-calling kernels: larger products, spread
    over numba's threads, or a small stack where BLAS per matrix was faster) or "numpy"
    (np.matmul: products too small to share, integer dtypes, empty products, no OpenBLAS).
    Between a candidate and np.matmul the running machine
    decides: they are timed the first time a layout is seen (`fastest`). Under
    mt.use_deterministic_algorithms(True) the shape alone decides the bits: "gemm" (its
    blocks cut at fixed places) for a single product the default would consider it for, else
    "numpy" (stacks of matrices included), BLAS on one thread for both — or np.matmul on
    BLAS's threads, where BLAS owns the cores and gave the same bits on the layout
    (`same_bits_route`)."""
    return _choose(a, b)[0]


# Every product of a training step asks `_choose` who computes it — three per matmul, a hundred
# or more per step — and on a stack of small matrices working the rule out anew cost a tenth of
# the product itself, enough for the route to lose to a plain np.matmul. So each layout's
# answer is remembered: a warm layout costs building its key and a look-up, and where the
# rule reads more than the layout (most small products it does not), a second, smaller key
# of that state (`_state`: the cores' owner, the thread counts, which change while a program
# runs, and whether BLAS's gemm has the dtype) and its look-up. The answers live in _FASTEST,
# or in _SAME_BITS under deterministic algorithms, beside the timings they come from, under
# keys of their own (_ROUTE first): a fresh _FASTEST or _SAME_BITS remembers no route either.
_ROUTE = "route"


class _ByState(dict):
    """The remembered routes of a layout whose rule reads more than the layout, by `_state`."""


def _choose(a, b):
    """(route, product): route's answer and the function that computes a @ b on it (for the
    tiles, the kernel of the fastest tile shape; for np.matmul, its fastest thread count),
    remembered per layout (see above)."""
    deterministic = are_deterministic_algorithms_enabled()
    memo = _SAME_BITS if deterministic else _FASTEST
    layout = (_ROUTE, a.shape, b.shape, a.strides, b.strides, a.dtype, b.dtype)
    known = memo.get(layout)
    if known is None:
        known = memo[layout] = _route_by_layout(a, b, deterministic) or _ByState()
    if known.__class__ is not _ByState:
        return known
    state = _state(a, deterministic)
    chosen = known.get(state)
    if chosen is None:
        chosen = _route_by_state(a, b, deterministic)
        # a watched winner's entry in _FASTEST changes when its watch ends, and a provisional
        # answer once timings can be trusted: asked again until then; and a thread count that
        # changed while the rule ran may not be the one it read
        settled = not isinstance(chosen, _Provisional) and not isinstance(chosen[1], _Watched)
        if settled and _state(a, deterministic) == state:
            known[state] = chosen
    return chosen


class _Provisional(tuple):
    """A (route, product) answered without timing while timings would mislead
    (jit.timings_would_mislead: a helper compiles ahead): used for the call, never remembered."""


def _state(a, deterministic):
    """What `_route_by_state` reads beside the layout: the cores' owner, whether BLAS's gemm
    has a's dtype, and the thread counts — numba's (`threads`) and BLAS's; under deterministic
    algorithms the cores BLAS may take (`same_bits_route`), none under numba's owner (BLAS runs
    on one thread there: nothing to check)."""
    owner, has_gemm = _owner[0], a.dtype in GEMM
    if not deterministic:
        return owner, has_gemm, threads(), blas_threads()
    if owner == "numba":
        return owner, has_gemm
    return owner, has_gemm, cores(), blas_threads()


def _work(a, b):
    """The multiply-adds of a @ b."""
    if b.ndim == 2 or a.shape[:-2] == b.shape[:-2]:
        return a.size * b.shape[-1]  # (a's rows) · m · k
    return math.prod(_batch_shape(a, b)) * a.shape[-2] * b.shape[-1] * a.shape[-1]


def _route_by_layout(a, b, deterministic):
    """route's rule where the layout alone decides: np.matmul for integer, mixed-dtype and
    empty products and (outside deterministic algorithms) for products too small for the tiles
    and for gemm (most small ops). None elsewhere."""
    if a.dtype != b.dtype or a.dtype not in _TILE_DTYPES or 0 in a.shape or 0 in b.shape:
        return _NUMPY
    if not deterministic and _work(a, b) < _SMALLEST_CANDIDATE:
        n, k = a.shape[-2:]
        return _NUMPY_AS_IS if _blas_one_thread(n, b.shape[-1], k) else _NUMPY
    return None


# (the route `_deterministic_reference` gives a stack of small matrices)
_DETERMINISTIC_TILES = ("tiles", functools.partial(tiled_matmul, tile=_DEFAULT_TILE))


def _deterministic_reference(a, b):
    """The route by shape alone under deterministic algorithms: BLAS's own threads split a
    product by their count, and BLAS may round a block of 9 rows otherwise than one of 17.
    The tile kernel with its default tile for a stack of small matrices (as many multiply-adds
    as `fastest` would time it on): each matrix is one thread's, its sums run in one order
    whatever the thread count, and it has no call per matrix (benchmarks/README.md,
    "Deterministic stacks on the tiles"). gemm (its blocks of rows cut at fixed places, shared
    among numba's threads, BLAS on one thread) for a single product from 2^20 multiply-adds;
    np.matmul on one thread for the rest."""
    if _small_stack(a, b) and _work(a, b) >= _TILES_MIN_WORK:
        return _DETERMINISTIC_TILES
    if a.dtype in GEMM and _work(a, b) >= _GEMM_MIN_WORK and _rows_of_one_product(a, b):
        return "gemm", gemm_one_blas_thread
    return _NUMPY


def _rows_of_one_product(a, b):
    """Whether gemm_product computes a @ b as one product by blocks of rows (b a matrix, a's
    rows evenly spaced), not matrix by matrix."""
    return b.ndim == 2 and (a.ndim == 2 or a.flags.c_contiguous)


def _route_by_state(a, b, deterministic):
    """route's rule for a layout `_route_by_layout` leaves open: under deterministic
    algorithms the route by shape, or BLAS's threads where they were seen to give its bits on
    this layout (`same_bits_route`); else a candidate timed against np.matmul on the layout
    (`fastest`), or np.matmul where no candidate may take it."""
    if deterministic:
        reference = _deterministic_reference(a, b)
        # the tiles are the fast route on a stack of small matrices: BLAS's threads are not
        # asked whether they give its bits
        return reference if reference is _DETERMINISTIC_TILES else same_bits_route(a, b, reference)
    if _small_stack(a, b) and _work(a, b) >= _TILES_MIN_WORK:
        # on one thread too: there np.matmul still calls BLAS once per small matrix
        return fastest(a, b, "tiles")
    if threads() == 1 or _owner[0] == "both":  # gemm shares a product among numba's threads;
        return _NUMPY  # under "both", BLAS's own threads do the Linear layers' products
    if a.dtype in GEMM and _work(a, b) >= _GEMM_MIN_WORK:
        return fastest(a, b, "gemm")
    return _NUMPY


def _forget_routes():
    """Forget every remembered route (tests that replace the functions or tables the rule
    reads call this), keeping the timings."""
    for memo in (_FASTEST, _SAME_BITS):
        for key in [key for key in memo if key[0] == _ROUTE]:
            del memo[key]


def numpy_product(a, b, out=None):
    """np.matmul, with BLAS on one thread while numba's threads own the cores (the default:
    BLAS's own threads beside them win a product timed alone, then lose the step — their idle
    workers spin while numba's kernels want the cores; benchmarks/README.md, "BLAS's threads
    inside the step"), on as many as minitensor may use (jit.cores(), at most BLAS's own
    count) once whole steps were timed faster that way (kernels/ownership.py); on one thread
    always under mt.use_deterministic_algorithms(True).
    The user's own np.matmul keeps BLAS's count."""
    blas_owns = _owner[0] != "numba" and not are_deterministic_algorithms_enabled()
    return _numpy_on(cores() if blas_owns else 1, a, b, out)  # cores(): polite, like numba's


def gemm_one_blas_thread(a, b):
    """gemm_product with BLAS on one thread even where its kernel runs serially (the
    deterministic route: a result that does not depend on BLAS's thread count)."""
    with blas_threads_at_most(1):
        return gemm_product(a, b)


_NUMPY = ("numpy", numpy_product)


def _matmul_as_is(a, b, out=None):
    """np.matmul at BLAS's own thread count, for a matrix product OpenBLAS computes on one
    thread anyway (_BLAS_ONE_THREAD_WORK): numpy_product's thread cap would only cost its two
    calls into BLAS. A product with a vector is BLAS's gemv, which shares out smaller ones: it
    keeps the cap. Never under deterministic algorithms, whose products `_choose` routes
    before."""
    return np.matmul(a, b, out=out)


_NUMPY_AS_IS = ("numpy", _matmul_as_is)


def _blas_one_thread(n, m, k):
    """Whether OpenBLAS computes each (n, k) @ (k, m) matrix product of a call on one thread
    whatever its thread count (a stack of them is one BLAS call per matrix): then the thread
    cap of `numpy_product` only costs its calls into BLAS. Not a product with a vector (gemv,
    which OpenBLAS shares out from smaller sizes)."""
    return n > 1 and m > 1 and n * m * k <= _BLAS_ONE_THREAD_WORK


def numpy_on_cores(a, b, out=None):
    """np.matmul with BLAS on as many threads as minitensor may use now (jit.cores(): polite),
    at most BLAS's own count — a candidate while numba's threads own the cores, where BLAS's
    idle workers sleep soon after a call (config.blas_spin_is_short): then they do not take
    the cores numba's next kernel wants, as in the "both" owner (ownership.py)."""
    return _numpy_on(cores(), a, b, out)


def _numpy_configs(a, b):
    """The np.matmul configurations `fastest` times against a candidate on a @ b: np.matmul
    as minitensor calls it (`numpy_product`); without the thread cap where BLAS computes
    each matrix on one thread anyway; on BLAS's threads beside numba's where their spin is
    short. The route must be as fast as the best of them (benchmarks/kernels.py shows it)."""
    configs = [numpy_product]
    if _blas_one_thread(a.shape[-2], b.shape[-1], a.shape[-1]):
        configs.append(_matmul_as_is)
    elif _owner[0] == "numba" and blas_threads() > 1 and config.blas_spin_is_short():
        configs.append(numpy_on_cores)
    return configs


# Under deterministic algorithms a product's route is fixed by its shape (`reference`: gemm's
# blocks cut at fixed places, or np.matmul, with BLAS on one thread), so its bits do not depend
# on any thread count. BLAS's own threads are faster where they own the cores, and on most
# layouts they give exactly those bits: OpenBLAS shares a product out by blocks of rows and
# columns, and each entry's sum still runs over k in one order. Whether they do on a layout is
# a fact about the running BLAS that one product shows: the first time a layout is seen, both
# compute it from random operands of that layout, and np.matmul on BLAS's threads is used only
# if every bit agreed. A BLAS that splits the sum over k, or rounds a block otherwise, fails
# that check on any random operands and keeps the reference. Whether BLAS's threads are worth
# having is not timed product by product: the owners' trial (ownership.py) timed whole steps
# with them, and BLAS owns the cores only because those were faster.
_SAME_BITS = {}


def same_bits_route(a, b, reference):
    """(route, product) for a @ b under deterministic algorithms: `reference`, or np.matmul on
    the threads BLAS would use outside deterministic mode where that gave `reference`'s bits
    when this layout was first seen. Only where BLAS owns the cores (under numba's, BLAS runs
    on one thread anyway)."""
    count = cores() if _owner[0] != "numba" else 1
    if count == 1 or 0 in a.strides or 0 in b.strides:  # a broadcast operand: not checked
        return reference
    key = (reference[0], a.shape, b.shape, a.dtype.str, a.strides, b.strides, count)
    key += (blas_threads(),)
    if key not in _SAME_BITS:
        threaded = functools.partial(_numpy_on, count)
        same = _gives_same_bits(threaded, reference[1], a, b)
        _SAME_BITS[key] = ("numpy", threaded) if same else reference
    return _SAME_BITS[key]


def _numpy_on(count, a, b, out=None):
    """np.matmul with BLAS on at most `count` threads (into `out`, if given)."""
    if blas_threads() <= count:  # the usual case, without a context manager's cost per call
        return np.matmul(a, b, out=out)
    with blas_threads_at_most(count):
        return np.matmul(a, b, out=out)


def _gives_same_bits(product, reference, a, b):
    """Whether product and reference compute the same bits from random operands laid out as a
    and b (same shapes, dtypes and order of axes in memory; a fixed seed of its own)."""
    x, y = np.empty_like(a), np.empty_like(b)
    if x.strides != a.strides or y.strides != b.strides:  # e.g. a view into a larger array
        return False
    rng = np.random.default_rng(0)
    x[...] = rng.standard_normal(a.shape)
    y[...] = rng.standard_normal(b.shape)
    want, got = reference(x, y), product(x, y)
    return want.dtype == got.dtype and want.shape == got.shape and np.array_equal(want, got)


# Whether a candidate beats np.matmul depends on the machine — its vector width, its BLAS,
# how busy the cores are — so the first time a layout would go to a candidate, every version
# of it (the tile kernel with each tile shape of TILE_SHAPES, or gemm) and np.matmul are timed
# on it, taking turns, and the fastest is kept for the process.
_FASTEST = {}


def fastest(a, b, candidate):
    """(route, product) for a @ b: `candidate` ("tiles" or "gemm") in its fastest version if
    that computed a @ b clearly faster (_CANDIDATE_EDGE) than np.matmul's best configuration
    when this layout (shapes, dtype, transposed or not, thread counts) was first seen — then
    watched where it runs (`_Watched`) — else "numpy" in its best, watched against its other
    configuration where there is one; while timings would mislead, a provisional np.matmul
    (`_Provisional`: not remembered)."""
    key = (
        candidate,
        a.shape,
        b.shape,
        a.dtype.str,
        a.strides[-1] == a.itemsize,
        b.strides[-1] == b.itemsize,
        threads(),
        blas_threads(),
        _owner[0],
    )
    if key not in _FASTEST:
        if timings_would_mislead():  # np.matmul now; timed once the helper is done
            return _Provisional(_NUMPY)
        if candidate == "tiles":
            named = [("tiles", functools.partial(tiled_matmul, tile=t)) for t in TILE_SHAPES]
            if a.dtype in GEMM:  # BLAS once per matrix on numba's threads: it wins some stacks
                named.append(("gemm", gemm_product))
        else:
            named = [("gemm", gemm_product)]
        named += [("numpy", f) for f in _numpy_configs(a, b)]
        times = _timings([f for _, f in named], a, b)
        if times is None:  # the candidates' first runs started the helper
            return _Provisional(_NUMPY)
        numpy_time, numpy_best = min((t, i) for i, t in enumerate(times) if named[i][0] == "numpy")
        best_time, best = min((t, i) for i, t in enumerate(times) if named[i][0] != "numpy")
        clear = best_time < _CANDIDATE_EDGE * numpy_time
        won = clear and _wins_again(named, best, numpy_best, a, b)
        if won is None:  # the second timing found the helper compiling: time it all later
            return _Provisional(_NUMPY)
        if won:
            # watched where it runs, against np.matmul's best, should it lose there
            name, product = named[best]
            product = _Watched(key, name, product, _settled_numpy(named[numpy_best]))
        else:
            name, product = _settled_numpy(named[numpy_best])
            other = _other_numpy(named, times, numpy_best)
            if other is not None and other[1] is not product:
                # np.matmul on another thread count: watched too, should the timing have
                # caught the other at a bad moment
                product = _Watched(key, name, product, other, must_win=False)
        _FASTEST[key] = name, product
    return _FASTEST[key]


def _wins_again(named, best, numpy_best, a, b):
    """Whether the candidate named[best], which `fastest` timed clearly faster than np.matmul's
    best configuration named[numpy_best], is faster again when the two are timed anew. On a
    shared VM a burst of a few milliseconds (the other vCPU taken, then given back) can make
    one of a few rounds' calls run at twice its speed, so one timing can crown a candidate that
    loses (gemm, which lost to np.matmul on a Linear layer's product round after round, won
    one timing in six by almost half its time and kept the layout: benchmarks/README.md, "a
    candidate must win twice"). The second timing must only see it faster, not clearly faster:
    a burst can as well slow the candidate's calls there, and a tile kernel twice as fast as
    np.matmul then lost its layout to a second timing that saw the two level. None while
    timings would mislead (a helper compiles ahead)."""
    times = _timings([named[best][1], named[numpy_best][1]], a, b)
    return None if times is None else times[0] < times[1]


def _other_numpy(named, times, best):
    """The fastest of `named`'s np.matmul configurations other than the one at index `best`,
    settled (`_settled_numpy`); None where there is no other."""
    others = [i for i, (name, _) in enumerate(named) if name == "numpy" and i != best]
    if not others:
        return None
    return _settled_numpy(named[min(others, key=times.__getitem__)])


def _settled_numpy(chosen):
    """np.matmul's winning configuration as it is remembered: numpy_on_cores where BLAS's own
    thread count is already at most the cores minitensor may use is plain np.matmul
    (`_matmul_as_is`), the same call without reading both counts at every product (the
    remembered answer is keyed by both; a change of either asks `fastest` again)."""
    name, product = chosen
    if product is numpy_on_cores and blas_threads() <= cores():
        return name, _matmul_as_is
    return name, product


# How much faster than np.matmul's best a candidate must be timed to take a layout. Timed
# again in the same process, a layout's versions move by a few percent (the other thread pool
# wakes, a neighbour on the VM takes a core), and a candidate that won by as little then lost
# as often as it won (benchmarks/README.md, "a candidate must win clearly"). A tie goes to
# np.matmul.
_CANDIDATE_EDGE = 0.95


# How many calls of a winning candidate, and as many of np.matmul's best, are timed where they
# run before the layout is settled.
_WATCHED_CALLS = 8


class _Watched:
    """A candidate that won `fastest`'s timing, timed again in the program it runs in: its first
    _WATCHED_CALLS calls, then as many of np.matmul's best configuration (`fallback`, which
    computes the same product), each timed. Two runs, not call by call: a call right after one
    on the other thread pool pays for that pool's spinning workers (see _SETTLE_SECONDS).

    Timed alone, back to back, a product on numba's threads can win and then lose in a
    training step: between its calls other kernels run, BLAS's idle threads spin, other
    processes take the cores, and a worker that waits for a core stalls the call. And the
    machine may have changed since: on a shared VM np.matmul on BLAS's threads runs at one of
    two speeds for minutes at a time, and a layout timed in the slow one went to a candidate
    that then lost (benchmarks/README.md, "a candidate must win clearly"). So the watch
    compares the two in the program's own conditions: the candidate keeps the layout only if
    its median call is clearly faster than np.matmul's (_CANDIDATE_EDGE, as in `fastest`);
    either way the watch then ends.

    np.matmul's winning configuration is watched the same way against its other one (one
    thread or BLAS's threads) with must_win=False: it keeps the layout unless the other is
    clearly faster where they run. A timing taken while another pool's workers still held a
    core can make one thread look faster than two on a product twice as fast on two, and the
    decision is kept for the process (benchmarks/README.md, "np.matmul's configurations
    watched too")."""

    def __init__(self, key, name, product, fallback, must_win=True):
        self.key, self.name, self.product, self.fallback = key, name, product, fallback
        self.must_win = must_win
        self.keywords = getattr(product, "keywords", {})  # the tile shape, for tile_shape
        self.times, self.fallback_times = [], []

    def __call__(self, a, b, **kwargs):  # (kwargs: the `out` the tiles may be given)
        if timings_would_mislead():  # not a call of the machine the program runs on
            return self.product(a, b, **kwargs)
        turn_of_fallback = len(self.times) == _WATCHED_CALLS
        product, times = (
            (self.fallback[1], self.fallback_times)
            if turn_of_fallback
            else (self.product, self.times)
        )
        start = time.perf_counter()
        result = product(a, b, **kwargs)
        times.append(time.perf_counter() - start)
        if len(self.fallback_times) == _WATCHED_CALLS:
            mine, other = map(statistics.median, (self.times, self.fallback_times))
            if self.must_win:  # a candidate: clearly faster than np.matmul, or out
                keep = mine < _CANDIDATE_EDGE * other
            else:  # np.matmul's configuration: kept unless the other is clearly faster
                keep = not other < _CANDIDATE_EDGE * mine
            _FASTEST[self.key] = (self.name, self.product) if keep else self.fallback
        return result


# How long each product runs again, untimed, before each of its timed runs (jit.median_times'
# settle): longer than the other thread pool's idle workers spin after the call before it.
_SETTLE_SECONDS = 0.001


def _timings(products, a, b, rounds=5):
    """jit.median_times of each product(a, b), settled (each timed right after a millisecond of
    calls of its own: the products run on numba's threads, BLAS's or one thread); None while
    timings would mislead."""
    calls = [functools.partial(product, a, b) for product in products]
    return median_times(calls, rounds, settle=_SETTLE_SECONDS)


def tile_shape(a, b):
    """The register tile (rows, vectors) that `fastest` chose for a @ b's layout on this
    machine, or None when the layout does not go to the tile kernel."""
    name, product = _choose(a, b)
    return product.keywords["tile"] if name == "tiles" else None


def _product(a, b, out=None):
    """a @ b (numpy broadcasting rules, a and b at least 2-D), by whoever `route` picks.

    A stack of matrices times one matrix — a Linear layer applied to a (B, T, C) batch, or its
    input's gradient — is one product of all the stack's rows when they lie evenly spaced in
    memory (`_as_rows`): (B·T, C) @ (C, m), where np.matmul would compute B separate, smaller
    products (slower, the more so with a transposed weight: benchmarks/README.md, "Teaching
    code as learners write it").

    out: an array to write the result into, in whatever layout it has (ops/linalg.py asks for
    gradients laid out as their inputs: attention's heads). np.matmul and the tile kernel
    write into it where it lies (the tiles wherever each row is contiguous); gemm writes
    C-ordered results only, so on a stack of small matrices np.matmul computes the product
    into out itself when gemm won the layout (copying would cost what gemm saves), and
    elsewhere gemm's products are large enough that it keeps them and its result is copied
    in."""
    if b.ndim == 2 and a.ndim > 2:
        folded = _one_product_of_rows(a, b, out)
        if folded is not None:
            return folded
    name, product = _choose(a, b)
    if out is None:
        return product(a, b)
    if name in ("numpy", "tiles"):
        return product(a, b, out=out)
    if _small_stack(a, b):  # gemm won a stack of small matrices
        return numpy_product(a, b, out=out)
    np.copyto(out, product(a, b))
    return out


def _one_product_of_rows(a, b, out):
    """a @ b for a stack a (…, n, k) and a matrix b (k, m) as the one product
    (rows of a) @ b, reshaped to (…, n, m) — written into `out` if given; None when a's rows
    (or out's) do not merge without a copy."""
    rows = _as_rows(a)
    if rows is None:
        return None
    if out is None:
        return _product(rows, b).reshape(a.shape[:-1] + (b.shape[1],))
    out_rows = _as_rows(out)
    if out_rows is None:
        return None
    _product(rows, b, out_rows)
    return out


def _as_rows(x):
    """x (…, n, k) as one (rows, k) matrix, a view of x: every axis before the last merged.
    None when they do not merge without a copy (a transposed stack, whose rows are not evenly
    spaced in memory)."""
    expected = None  # the stride the next axis must have to continue the merged one
    for size, stride in zip(reversed(x.shape[:-1]), reversed(x.strides[:-1])):
        if size == 1:
            continue
        if expected is not None and stride != expected:
            return None
        expected = stride * size
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def _small_stack(a, b):
    """Whether a @ b is a stack of matrices of at most _TILES_MAX_MATRIX multiply-adds each:
    the ground the tile kernel is timed on (against BLAS per matrix and np.matmul)."""
    return b.ndim > 2 and a.shape[-2] * a.shape[-1] * b.shape[-1] <= _TILES_MAX_MATRIX


def matmul(a, b):
    """a @ b like matmul.matmul_numpy, computed as `route` decides."""
    return _product(a, b)


def matmul_grad_a(grad, b, out=None):
    """grad @ bᵀ like matmul.matmul_grad_a_numpy."""
    return _product(grad, np.swapaxes(b, -1, -2), out)


def matmul_grad_b(a, grad, out=None):
    """aᵀ @ grad like matmul.matmul_grad_b_numpy."""
    return _product(np.swapaxes(a, -1, -2), grad, out)
