"""Matrix products, a @ b and the two products of its backward, with numpy's batch broadcasting.

Every matmul of the framework comes here three times per step — the forward product and the
backward products grad·Bᵀ and Aᵀ·grad. The numpy twins below are np.matmul itself: read them
first. The numba backend's versions live in the subpackage `fast_matmul`, imported on the first
numba matmul (kernels/__init__.py, `backend_switch.lazy`), so that `import minitensor` and the numpy
backend never compile a kernel, ask llvmlite about the CPU or look for numpy's OpenBLAS.

There, `route` picks who computes each product:

* "tiles": a tile kernel (fast_matmul/microkernel.py, the register tile every BLAS is built on)
  for stacks of small matrices — attention's q·kᵀ and weights·v — one run of matrices per thread;
* "gemm": numba's threads each calling OpenBLAS's gemm (fast_matmul/blas.py) on their own block
  of rows or their own matrices, for large products (Linear layers);
* "numpy": np.matmul on one thread, for what is too small to share, integer or mixed dtypes.
"""

import math

import numpy as np

from .backend_switch import lazy

FAST_PRODUCTS = ".fast_matmul.products"  # the numba products' module, imported on first use


def matmul_numpy(a, b):
    """a @ b with numpy's batch broadcasting: a (..., n, k), b (..., k, m) → (..., n, m)."""
    return np.matmul(a, b)


def matmul_grad_a_numpy(grad, b, out=None):
    """dL/da = grad @ bᵀ: grad (..., n, m), b (..., k, m) → (..., n, k) (batch broadcast; the
    caller sums broadcast axes back). out: an array of the result's shape and dtype to write
    it into, in whatever memory layout out has (ops/linalg.py passes one laid out as a)."""
    return np.matmul(grad, np.swapaxes(b, -1, -2), out=out)


def matmul_grad_b_numpy(a, grad, out=None):
    """dL/db = aᵀ @ grad: a (..., n, k), grad (..., n, m) → (..., k, m) (batch broadcast);
    out as for matmul_grad_a_numpy."""
    return np.matmul(np.swapaxes(a, -1, -2), grad, out=out)


def linear_grads_numpy(grad, x, wt):
    """The two backward products of y = x @ wt for a 2-D wt (k, m) — a Linear layer's
    transposed weight — and x (..., k), grad (..., m): (dL/dx, dL/dwt) = (grad @ wtᵀ, of x's
    shape; Σ xᵀ·grad over every row of the batch, (k, m)). The second is one product of all
    the rows, (B·L, k)ᵀ @ (B·L, m), cheaper than B small ones summed; where wt is a transposed
    C-ordered matrix (weight.T) it is computed as (gradᵀ·x)ᵀ: the same numbers, laid out as the
    weight itself, so the weight's gradient arrives C-ordered for the optimizer."""
    k, m = wt.shape
    rows = math.prod(x.shape[:-1])  # not -1: k or m may be 0
    x_rows, g_rows = x.reshape(rows, k), grad.reshape(rows, m)
    gx = matmul_grad_a_numpy(grad, wt)
    if is_transposed(wt):
        return gx, matmul_grad_b_numpy(g_rows, x_rows).T
    return gx, matmul_grad_b_numpy(x_rows, g_rows)


def is_transposed(w):
    """Whether the matrix w is a transposed C-ordered one (a Linear layer's weight.T): its
    gradient is then computed as (gradᵀ·x)ᵀ, the same numbers laid out as the weight itself."""
    return w.flags.f_contiguous and not w.flags.c_contiguous


# the numba kernels: stand-ins that import fast_matmul on their first call
matmul_numba = lazy(FAST_PRODUCTS, "matmul")
matmul_grad_a_numba = lazy(FAST_PRODUCTS, "matmul_grad_a")
matmul_grad_b_numba = lazy(FAST_PRODUCTS, "matmul_grad_b")
linear_grads_numba = lazy(FAST_PRODUCTS, "linear_grads")
