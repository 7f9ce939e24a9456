"""Matrix products: BLAS's gemm, called from numba kernels so that every core computes a
share; a numba loop kernel for the tiny q·kᵀ stacks where it measured faster.

Every matmul of the framework comes here three times per step — the forward product and the
two backward products grad·Bᵀ and Aᵀ·grad — so all three share one routine, `_product`, and
`route` decides who computes it. The rules were measured with benchmarks/kernels.py on the
2-core machine this project runs on (tables in benchmarks/README.md):

* **"gemm": numba's threads, each calling BLAS.** numpy's OpenBLAS multiplies matrices at
  close to the machine's peak on one core (an assembly microkernel; no numba loop we wrote
  came within 3× of it). np.matmul calls it one matrix at a time on one thread, and
  OpenBLAS's own threads stall on a shared machine (see minitensor/__init__.py). So the numba
  kernels below call OpenBLAS's gemm themselves (blas.py) from a prange: a stack of attention
  matrices is split by matrix, one product — a Linear layer, (B, L, d) @ (d, e) folded into
  (B·L, d) @ (d, e) — by blocks of rows. Transposed views (kᵀ, Wᵀ, Xᵀ) are read in place:
  BLAS is told the operand is transposed, with its own stride. On 2 cores this runs the Linear
  shapes and 512³ ~1.9× faster than np.matmul, and stacks with L ≥ 32 1.6–2.2× faster.
* **"numpy": np.matmul on one thread** for what is too small to share: stacks of matrices
  under 16·16·32 multiply-adds each (a BLAS call's fixed cost dominates, and two threads
  making those calls measured slower than one), products under ~1M multiply-adds, integer
  dtypes, or no OpenBLAS found in numpy (then everything goes here).
* **"kernel": `batched_matmul_kernel`**, a numba loop kernel that reads q and kᵀ along their
  contiguous axis and runs the whole stack in one parallel loop. route gives it contiguous
  q·kᵀ stacks with d_k ≤ 16 and L ≤ 16, where OpenBLAS is oddly slow (k = 16) and the loop
  measured 1.1–1.7× np.matmul. On larger matrices it loses to BLAS: LLVM vectorises only the
  innermost loop, too short here to fill a vector body, and numba offers no way to keep a
  tile of accumulators in registers the way BLAS does (benchmarks/kernels.py --only
  bmm-kernel).

The numpy twins are np.matmul itself.
"""
import math

import numpy as np
from numba import prange

from .blas import GEMM, NO_TRANS, TRANS, gemm
from .jit import kernel, threads

# The numba loop kernel takes contiguous q·kᵀ stacks with k ≤ _KERNEL_MAX_K and
# n·m ≤ _KERNEL_MAX_NM (measured, see the module docstring).
_KERNEL_MAX_K = 16
_KERNEL_MAX_NM = 16 * 16
# A stack of products goes to the threads when each matrix is at least this many multiply-adds
# (16·16·32): smaller ones are dominated by each BLAS call's fixed cost, and two threads making
# that many calls measured slower than np.matmul on one.
_GEMM_MIN_MATRIX = 16 * 16 * 32
# ... and a product at all from this many multiply-adds (~10 µs of BLAS work on one core).
_GEMM_MIN_WORK = 1 << 20


# ---- numpy twins ------------------------------------------------------------------------------

def matmul_numpy(a, b):
    """a @ b with numpy's batch broadcasting: a (..., n, k), b (..., k, m) → (..., n, m)."""
    return np.matmul(a, b)


def matmul_grad_a_numpy(grad, b):
    """dL/da = grad @ bᵀ: grad (..., n, m), b (..., k, m) → (..., n, k) (batch broadcast; the
    caller sums broadcast axes back)."""
    return np.matmul(grad, np.swapaxes(b, -1, -2))


def matmul_grad_b_numpy(a, grad):
    """dL/db = aᵀ @ grad: a (..., n, k), grad (..., n, m) → (..., k, m) (batch broadcast)."""
    return np.matmul(np.swapaxes(a, -1, -2), grad)


# ---- the numba kernel -------------------------------------------------------------------------

@kernel(parallel=True)
def _batched_dot_product(a, b_t, out):
    """out[p, i, j] = Σ_kk a[p, i, kk] · b_t[p, j, kk] — that is out[p] = a[p] @ b_t[p]ᵀ.

    a (P, n, k), b_t (P, m, k), out (P, n, m), all C-contiguous. Both operands are read along
    k, their contiguous axis, so the inner loop is a vectorised dot product; four columns j are
    computed together so each load of a[p, i, :] is used four times."""
    P, n, k = a.shape
    m = b_t.shape[1]
    f = out.dtype.type
    for task in prange(P * n):                      # one task per output row
        p, i = task // n, task % n
        for jb in range(m // 4):
            j = 4 * jb
            s0, s1, s2, s3 = f(0), f(0), f(0), f(0)
            for kk in range(k):
                x = a[p, i, kk]
                s0 += x * b_t[p, j, kk]
                s1 += x * b_t[p, j + 1, kk]
                s2 += x * b_t[p, j + 2, kk]
                s3 += x * b_t[p, j + 3, kk]
            out[p, i, j], out[p, i, j + 1], out[p, i, j + 2], out[p, i, j + 3] = s0, s1, s2, s3
        for j in range(m - m % 4, m):               # the last m mod 4 columns
            s = f(0)
            for kk in range(k):
                s += a[p, i, kk] * b_t[p, j, kk]
            out[p, i, j] = s


# ---- the BLAS-calling kernels: each thread its own matrices, or its own block of rows ----------

@kernel()
def _offsets(p, batch_shape, a_strides, b_strides):
    """Byte offsets of the p-th matrices of A and B: p unravelled over batch_shape (C order),
    times each operand's batch strides."""
    a_offset, b_offset = 0, 0
    for axis in range(batch_shape.shape[0] - 1, -1, -1):      # last batch axis first
        index = p % batch_shape[axis]
        p //= batch_shape[axis]
        a_offset += index * a_strides[axis]
        b_offset += index * b_strides[axis]
    return a_offset, b_offset


@kernel(parallel=True)
def _gemm_stack(batch_shape, a_strides, b_strides, address, trans_a, trans_b, k, a, lda, b,
                ldb, c):
    """A stack of products, one BLAS call per matrix: c[p] = op(A[p]) @ op(B[p]) for every
    index p of the batch (batch_shape, flattened in C order); c is the (P, n, m) output. A[p]
    starts at the address a + Σᵢ pᵢ·a_strides[i] (bytes; a broadcast batch axis has stride
    0), B[p] likewise. op(X) is X or Xᵀ, k the inner size (see blas.gemm)."""
    P, n, m = c.shape
    one, zero = c.dtype.type(1), c.dtype.type(0)
    for p in prange(P):
        a_offset, b_offset = _offsets(p, batch_shape, a_strides, b_strides)
        gemm(address, trans_a, trans_b, n, m, k, one, a + a_offset, lda, b + b_offset, ldb,
             zero, c[p].ctypes.data, m)


@kernel(parallel=True)
def _gemm_row_blocks(blocks, address, trans_a, trans_b, k, a, lda, b, ldb, c):
    """One product c = op(A) @ op(B), c the (n, m) output, cut into `blocks` runs of rows of
    op(A) and c; each block is one BLAS call (every block reads all of op(B))."""
    n, m = c.shape
    one, zero = c.dtype.type(1), c.dtype.type(0)
    row_step = c.itemsize if trans_a == TRANS else lda * c.itemsize   # next row of op(A)
    for block in prange(blocks):
        first, stop = block * n // blocks, (block + 1) * n // blocks
        gemm(address, trans_a, trans_b, stop - first, m, k, one, a + first * row_step, lda,
             b, ldb, zero, c[first].ctypes.data, m)


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


def _batch_strides(x, batch):
    """x's byte strides along the batch axes, broadcast to `batch` (0 on broadcast axes)."""
    pad = len(batch) - (x.ndim - 2)
    return [0] * pad + [0 if size == 1 else stride
                        for size, stride in zip(x.shape[:-2], x.strides[:-2])]


def gemm_product(a, b):
    """a @ b (numpy broadcasting, both at least 2-D, one float dtype that blas.GEMM has) by
    the BLAS-calling kernels: a stack split by matrix over the threads; a single product
    (b without batch axes, a's batch axes folded into rows) by blocks of rows."""
    n, k = a.shape[-2:]
    m = b.shape[-1]
    address = GEMM[a.dtype]
    if b.ndim == 2 and (a.ndim == 2 or a.flags.c_contiguous):
        a2, trans_a, lda = _blas_layout(a.reshape(-1, k))
        b2, trans_b, ldb = _blas_layout(b)
        out = np.empty((a2.shape[0], m), dtype=a.dtype)
        _gemm_row_blocks(max(1, min(threads(), out.shape[0])), address, trans_a, trans_b, k,
                         a2.ctypes.data, lda, b2.ctypes.data, ldb, out, work=out.size * k)
        return out.reshape(a.shape[:-1] + (m,))
    batch = a.shape[:-2] if a.shape[:-2] == b.shape[:-2] else \
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a2, trans_a, lda = _blas_layout(a)
    b2, trans_b, ldb = _blas_layout(b)
    out = np.empty((math.prod(batch), n, m), dtype=a.dtype)
    _gemm_stack(np.array(batch, dtype=np.int64), np.array(_batch_strides(a2, batch), np.int64),
                np.array(_batch_strides(b2, batch), np.int64), address, trans_a, trans_b, k,
                a2.ctypes.data, lda, b2.ctypes.data, ldb, out, work=out.size * k)
    return out.reshape(batch + (n, m))


def _reads_in_place(a, b):
    """True when the kernel needs no copies: a is a contiguous stack and b the transposed view
    of one (as kᵀ of a contiguous k)."""
    return a.flags.c_contiguous and np.swapaxes(b, -1, -2).flags.c_contiguous


def route(a, b):
    """Who computes a @ b on the numba backend (measured rules, see the module docstring):
    "kernel" (a stack of tiny q·kᵀ products: the numba loop kernel), "gemm" (the BLAS-calling
    kernels, spread over the threads) or "numpy" (np.matmul, one thread: products too small to
    share, integer dtypes, empty products, or no OpenBLAS found)."""
    n, k = a.shape[-2:]
    m = b.shape[-1]
    if a.dtype != b.dtype or a.dtype not in GEMM or 0 in a.shape or 0 in b.shape:
        return "numpy"
    stack = b.ndim > 2
    if (stack and k <= _KERNEL_MAX_K and n * m <= _KERNEL_MAX_NM and a.ndim == b.ndim
            and a.shape[:-2] == b.shape[:-2] and _reads_in_place(a, b)):
        return "kernel"
    if b.ndim == 2 or a.shape[:-2] == b.shape[:-2]:
        work = a.size * m                     # multiply-adds: (a's rows) · m · k
    else:
        work = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) * n * m * k
    if threads() == 1 or work < _GEMM_MIN_WORK or (stack and n * m * k < _GEMM_MIN_MATRIX):
        return "numpy"
    return "gemm"


def _product(a, b):
    """a @ b (numpy broadcasting rules, a and b at least 2-D), by whoever `route` picks."""
    path = route(a, b)
    if path == "gemm":
        return gemm_product(a, b)
    if path == "kernel":
        return batched_matmul_kernel(a, b)
    return np.matmul(a, b)


def batched_matmul_kernel(a, b):
    """a @ b for a, b with batch axes (≥ 3-D, same float dtype), always by the numba kernel."""
    n, k = a.shape[-2:]
    m = b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    P = int(np.prod(batch))
    a3 = np.ascontiguousarray(np.broadcast_to(a, batch + (n, k))).reshape(P, n, k)
    # no copies when q and k are contiguous stacks; copies when they are head-split views
    b_t = np.ascontiguousarray(np.swapaxes(np.broadcast_to(b, batch + (k, m)), -1, -2))
    out = np.empty((P, n, m), dtype=a.dtype)
    _batched_dot_product(a3, b_t.reshape(P, m, k), out)
    return out.reshape(batch + (n, m))


def matmul_numba(a, b):
    """a @ b like matmul_numpy, computed as `route` decides (BLAS on this machine)."""
    return _product(a, b)


def matmul_grad_a_numba(grad, b):
    """grad @ bᵀ like matmul_grad_a_numpy."""
    return _product(grad, np.swapaxes(b, -1, -2))


def matmul_grad_b_numba(a, grad):
    """aᵀ @ grad like matmul_grad_b_numpy."""
    return _product(np.swapaxes(a, -1, -2), grad)
