"""Matrix products: a batched numba kernel for attention-sized matrices, BLAS for the rest.

Every matmul of the framework comes here three times per step — the forward product and the
two backward products grad·Bᵀ and Aᵀ·grad — so all three share one routine, `_product`, which
decides who computes it:

* **Large matrices go to BLAS (np.matmul).** numpy's OpenBLAS runs a packed, register-blocked,
  hand-written-assembly kernel at close to the machine's peak (measured ~200 GFLOP/s at 512³
  and at the Linear shapes (900, 128) @ (128, 512) on this 2-core machine); the best numba
  kernel we wrote reached a third of that. A product whose right operand has no batch axes —
  every Linear layer, (B, L, d) @ (d, e) — is folded into one 2-D product (B·L, d) @ (d, e)
  and handed to BLAS as well.
* **Many small matrices go to the numba kernel.** For a stack of attention-sized matrices,
  (B·h, L, d_k) @ (B·h, d_k, L) with L, d_k ≤ 64, np.matmul calls BLAS once per matrix, on one
  thread, paying its per-call set-up each time; `_batched_dot_product` instead runs the whole
  stack in one parallel loop over the batch.

The numpy twins are np.matmul itself (it is the reference, and it is exact to rounding).
"""
import numpy as np
from numba import prange

from .jit import kernel

# Per-matrix work (n·k·m multiply-adds) up to which a batched product runs in the numba kernel;
# above it np.matmul's BLAS calls are cheap compared with their work and win. Measured with
# benchmarks/kernels.py on the attention shapes.
_NUMBA_MAX_WORK = 64 * 64 * 64


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


def route(a, b):
    """Who computes a @ b on the numba backend: "blas-2d" (b has no batch axes: one 2-D BLAS
    product), "kernel" (a batch of small matrices: the numba kernel) or "blas" (np.matmul)."""
    if b.ndim == 2:
        return "blas-2d"
    n, k = a.shape[-2:]
    m = b.shape[-1]
    small = n * k * m <= _NUMBA_MAX_WORK
    if small and a.ndim > 2 and a.dtype == b.dtype and a.dtype.kind == "f":
        return "kernel"
    return "blas"


def _product(a, b):
    """a @ b (numpy broadcasting rules, a and b at least 2-D), computed by BLAS or by the numba
    kernel — see the module docstring for the rule and why."""
    path = route(a, b)
    if path == "blas-2d":
        # Linear-layer case: fold a's batch axes into its rows, one 2-D BLAS product
        k = a.shape[-1]
        return np.matmul(a.reshape(-1, k), b).reshape(*a.shape[:-1], b.shape[-1])
    if path == "blas":
        return np.matmul(a, b)
    n, k = a.shape[-2:]
    m = b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    P = int(np.prod(batch))
    a3 = np.ascontiguousarray(np.broadcast_to(a, batch + (n, k))).reshape(P, n, k)
    # the kernel wants bᵀ contiguous: free when b is itself a transposed view (as kᵀ in q·kᵀ)
    b_t = np.ascontiguousarray(np.swapaxes(np.broadcast_to(b, batch + (k, m)), -1, -2))
    out = np.empty((P, n, m), dtype=a.dtype)
    _batched_dot_product(a3, b_t.reshape(P, m, k), out)
    return out.reshape(batch + (n, m))


def matmul_numba(a, b):
    """a @ b like matmul_numpy; attention-sized batches run in the numba kernel."""
    return _product(a, b)


def matmul_grad_a_numba(grad, b):
    """grad @ bᵀ like matmul_grad_a_numpy."""
    return _product(grad, np.swapaxes(b, -1, -2))


def matmul_grad_b_numba(a, grad):
    """aᵀ @ grad like matmul_grad_b_numpy."""
    return _product(np.swapaxes(a, -1, -2), grad)
