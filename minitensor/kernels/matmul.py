"""Matrix products: BLAS for nearly every product, a batched numba kernel for the tiny q·kᵀ
stacks where it measured faster.

Every matmul of the framework comes here three times per step — the forward product and the
two backward products grad·Bᵀ and Aᵀ·grad — so all three share one routine, `_product`, and
`route` decides who computes it. The rule was measured with benchmarks/kernels.py on the
2-core machine this project runs on (tables in benchmarks/README.md):

* **2-D products and Linear layers go to BLAS.** numpy's OpenBLAS runs a packed,
  register-blocked kernel written in assembly at close to the machine's peak (~200 GFLOP/s at
  512³ and at the Linear shapes (896, 128) @ (128, 512), with AVX-512). A product whose right
  operand has no batch axes — (B, L, d) @ (d, e) — is folded into one 2-D product
  (B·L, d) @ (d, e).
* **Stacks of attention matrices go to np.matmul too**, after copying a transposed right
  operand (kᵀ) to contiguous memory where that measured faster: at L = 64 (np.matmul on a
  transposed stack measured 1.3–1.6× slower than copy + np.matmul on a contiguous one) and
  at d_k ≤ 16 with L ≥ 16 (1.2–1.4× faster with the copy). Not at L = 32, d_k = 32: with 256
  matrices, OpenBLAS ran the contiguous (32×32)·(32×32) stack 4× slower than the transposed
  one (reproducibly; 512 matrices were fine), and at L ≤ 16, d_k = 32 the copy costs more
  than it saves.
* **`batched_matmul_kernel`**, the numba kernel, reads q and kᵀ along their contiguous axis and
  runs the whole stack in one loop. route gives it only what it measured faster on: contiguous
  stacks of q·kᵀ with d_k ≤ 16 and L ≤ 8 (1.3–1.7× np.matmul; OpenBLAS is oddly slow at
  k = 16 for tiny matrices). Everywhere else it lost (0.4–0.9×, and worse on head-split views,
  which it must copy): LLVM vectorises only the innermost loop, which for d_k, L ≤ 64 is too
  short to fill a vector body, and numba offers no way to keep a tile of accumulators in
  registers the way BLAS does. benchmarks/kernels.py --only bmm-kernel shows the comparison.

The numpy twins are np.matmul itself.
"""
import numpy as np
from numba import prange

from .jit import kernel

# The numba kernel takes contiguous q·kᵀ stacks with k ≤ _KERNEL_MAX_K and n·m ≤ _KERNEL_MAX_NM
# (measured, see the module docstring).
_KERNEL_MAX_K = 16
_KERNEL_MAX_NM = 8 * 8
# np.matmul gets a contiguous copy of a transposed right operand from this per-matrix work on
# (L = 64: measured 1.3-1.6x faster), and for inner size k <= _COPY_MAX_K with n·m >= _COPY_MIN_NM
# (d_k <= 16, L >= 16: 1.2-1.4x faster). See the module docstring for where a copy lost.
_COPY_MIN_WORK = 64 * 64 * 16
_COPY_MAX_K = 16
_COPY_MIN_NM = 16 * 16


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


def _reads_in_place(a, b):
    """True when the kernel needs no copies: a is a contiguous stack and b the transposed view
    of one (as kᵀ of a contiguous k)."""
    return a.flags.c_contiguous and np.swapaxes(b, -1, -2).flags.c_contiguous


def route(a, b):
    """Who computes a @ b on the numba backend: "blas-2d" (b has no batch axes: one 2-D BLAS
    product), "kernel" (a stack of tiny q·kᵀ products: the numba kernel) or "blas"
    (np.matmul)."""
    if b.ndim == 2:
        return "blas-2d"
    n, k = a.shape[-2:]
    m = b.shape[-1]
    if (k <= _KERNEL_MAX_K and n * m <= _KERNEL_MAX_NM and a.ndim == b.ndim
            and a.shape[:-2] == b.shape[:-2] and a.dtype == b.dtype and a.dtype.kind == "f"
            and _reads_in_place(a, b)):
        return "kernel"
    return "blas"


def _product(a, b):
    """a @ b (numpy broadcasting rules, a and b at least 2-D), by BLAS or by the numba kernel
    — see the module docstring for the rule and why."""
    path = route(a, b)
    n, k = a.shape[-2:]
    m = b.shape[-1]
    if path == "blas-2d":
        # Linear-layer case: fold a's batch axes into its rows, one 2-D BLAS product
        return np.matmul(a.reshape(-1, k), b).reshape(*a.shape[:-1], m)
    if path == "blas":
        copy_pays = n * k * m >= _COPY_MIN_WORK or (k <= _COPY_MAX_K and n * m >= _COPY_MIN_NM)
        if copy_pays and not b.flags.c_contiguous:
            b = np.ascontiguousarray(b)
        return np.matmul(a, b)
    return batched_matmul_kernel(a, b)


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
