"""BLAS's gemm callable from numba kernels: it lives in fast_matmul/blas.py (loaded with the fast
matmul, not at `import minitensor`). This name stays for kernels that import it from here;
importing it looks for numpy's OpenBLAS, so import it from inside numba-only code."""
from .fast_matmul.blas import GEMM, NO_TRANS, ROW_MAJOR, TRANS, gemm  # noqa: F401
