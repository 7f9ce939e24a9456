"""The numba backend's matrix products, loaded on the first numba matmul (kernels/matmul.py):
importing this package compiles or loads kernels, asks llvmlite for the CPU's vector width and
looks for numpy's OpenBLAS, none of which `import minitensor` or the numpy backend needs.

    products.py      route (who computes a @ b), the tile kernels, the BLAS-calling kernels
    microkernel.py   the register tile under the tile kernels, written in LLVM IR
    blas.py          numpy's OpenBLAS gemm, callable from inside numba kernels

Read kernels/matmul.py first: its numpy twins say what these compute. This file imports
nothing, so that a kernel needing only blas.py (fused attention) does not load the rest.
"""
