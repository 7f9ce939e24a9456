"""BLAS's matrix-product routine (gemm), callable from inside numba kernels.

numpy ships OpenBLAS, whose gemm runs at close to the machine's peak on one core: an
assembly microkernel no numba loop we wrote came near (microkernel.py says what we tried).
np.matmul calls it one matrix after another on one thread. Here we find that same gemm in
numpy's own OpenBLAS and let numba kernels call it, so that a `prange` loop can give each
thread its own matrices of a stack, or its own block of rows of a large product.

    GEMM[np.float32], GEMM[np.float64]    the routines' addresses (absent: no OpenBLAS found)
    gemm(address, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        C = alpha·op(A)·op(B) + beta·C  for row-major matrices at the addresses a, b, c
        (integers: numpy's array.ctypes.data plus an offset in bytes); op(X) is X or Xᵀ.

MINITENSOR_NO_BLAS_KERNELS=1 (read at import) leaves GEMM empty: every product then goes to
np.matmul — an escape hatch should a numpy build ship an OpenBLAS we misread.

While numba's threads run — a parallel kernel, which may call gemm — OpenBLAS's own threads
must stay out of the way (two pools on the same cores), so every parallel kernel call holds
BLAS at one thread (`one_blas_thread`, kernels/jit.py) and gives it back its count afterwards;
minitensor's own np.matmul calls run BLAS on one thread too (products.py, numpy_product).
numpy's BLAS elsewhere keeps the threads it has.

The call goes through a small @intrinsic that turns the integer address into a function
pointer: numba's own ctypes support would bake the address into the compiled code, which then
could not be cached on disk (the library loads at another address in the next process).
"""

import ctypes
import glob
import os

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ... import config

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # the CBLAS enum values


def _find_openblas():
    """numpy's bundled OpenBLAS, or None. Its wheels ship it in numpy.libs/ (Linux, Windows),
    numpy/.dylibs/ (macOS on Intel) or numpy/.libs/; numpy on Apple silicon uses Accelerate."""
    numpy_dir = os.path.dirname(np.__file__)
    patterns = [
        os.path.join(numpy_dir, "..", "numpy.libs", "*openblas*"),
        os.path.join(numpy_dir, ".dylibs", "*openblas*"),
        os.path.join(numpy_dir, ".libs", "*openblas*"),
    ]
    for path in sorted(p for pattern in patterns for p in glob.glob(pattern)):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _find_gemms():
    """{dtype: address of cblas_?gemm} for the 64-bit-integer (ILP64) build numpy ships,
    whose symbols carry the scipy_ prefix and a 64_ suffix. Empty if there is none: the
    callers then use np.matmul."""
    lib = _find_openblas()
    found = {}
    for dtype, name in ((np.float32, "scipy_cblas_sgemm64_"), (np.float64, "scipy_cblas_dgemm64_")):
        function = getattr(lib, name, None) if lib is not None else None
        if function is not None:
            found[np.dtype(dtype)] = ctypes.cast(function, ctypes.c_void_p).value
    return found


GEMM = {} if config.flag("MINITENSOR_NO_BLAS_KERNELS") else _find_gemms()


def _thread_count_functions():
    """OpenBLAS's (get, set) of its thread count, as ctypes functions, or (None, None)."""
    lib = _find_openblas()
    get = getattr(lib, "scipy_openblas_get_num_threads64_", None)
    set_ = getattr(lib, "scipy_openblas_set_num_threads64_", None)
    if get is None or set_ is None:
        return None, None
    get.restype, set_.argtypes = ctypes.c_int, [ctypes.c_int]
    return get, set_


_get_threads, _set_threads = _thread_count_functions()


def _spin_functions():
    """OpenBLAS's (openblas_read_env, blas_thread_shutdown_) as ctypes functions, or None each:
    what config.reread_blas_spin needs where numpy was imported before minitensor."""
    lib = _find_openblas()
    return getattr(lib, "openblas_read_env", None), getattr(lib, "blas_thread_shutdown_", None)


_SPIN_FUNCTIONS = _spin_functions()
config.reread_blas_spin(*_SPIN_FUNCTIONS)


def spin_for_owner(owner: str) -> None:
    """How long OpenBLAS's idle workers spin after a call, for the cores' new owner
    (config.blas_spin_for_owner: long while BLAS's threads alone own them)."""
    config.blas_spin_for_owner(owner, *_SPIN_FUNCTIONS)


def blas_threads() -> int:
    """OpenBLAS's thread count now (1 where it cannot be read)."""
    return _get_threads() if _get_threads is not None else 1


class blas_threads_at_most:  # noqa: N801 — used as a function: with blas_threads_at_most(1)
    """OpenBLAS on at most `count` threads for a with-block, then its thread count as it was
    (one ctypes call to read it, two more only when it must change: well under a µs each). A
    class, not a contextlib.contextmanager: entering and leaving a generator-based one costs
    more than an 8 × 8 product, and this runs around many of them."""

    __slots__ = ("count", "before")

    def __init__(self, count: int) -> None:
        self.count = count

    def __enter__(self):
        self.before = blas_threads()
        if self.before > self.count:
            _set_threads(self.count)
        return self

    def __exit__(self, *exc):
        if self.before > self.count:
            _set_threads(self.before)
        return False


def one_blas_thread():
    """OpenBLAS on one thread for the block: numba's threads are about to call it."""
    return blas_threads_at_most(1)


@intrinsic
def gemm(typingctx, address, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """cblas_?gemm(RowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    called at `address`; alpha and beta are float32 for sgemm, float64 for dgemm; every other
    argument an integer (the CBLAS enums are C ints, sizes 64-bit, a/b/c addresses)."""
    if not isinstance(alpha, types.Float) or beta != alpha:
        return None
    int64 = types.int64
    signature = types.void(
        int64,
        int64,
        int64,
        int64,
        int64,
        int64,
        alpha,
        int64,
        int64,
        int64,
        int64,
        beta,
        int64,
        int64,
    )

    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        real = context.get_value_type(alpha)
        pointer = ir.IntType(8).as_pointer()
        function_type = ir.FunctionType(
            ir.VoidType(),
            [i32, i32, i32, i64, i64, i64, real, pointer, i64, pointer, i64, real, pointer, i64],
        )
        (address_, trans_a_, trans_b_, m_, n_, k_, alpha_, a_, lda_, b_, ldb_, beta_, c_, ldc_) = (
            args
        )
        function = builder.inttoptr(address_, function_type.as_pointer())
        as_int = lambda value: builder.trunc(value, i32)  # noqa: E731
        as_pointer = lambda value: builder.inttoptr(value, pointer)  # noqa: E731
        builder.call(
            function,
            [
                ir.Constant(i32, ROW_MAJOR),
                as_int(trans_a_),
                as_int(trans_b_),
                m_,
                n_,
                k_,
                alpha_,
                as_pointer(a_),
                lda_,
                as_pointer(b_),
                ldb_,
                beta_,
                as_pointer(c_),
                ldc_,
            ],
        )
        return context.get_dummy_value()

    return signature, codegen
