"""Matrix multiplication, 1-D to N-D, with numpy's rules and batch broadcasting.

The products themselves run in `minitensor.kernels` (numba or numpy, one switch), so this op
only handles shapes: 1-D operands become matrices, batch axes broadcast, and each gradient is
summed back to its operand's shape.
"""
import math

import numpy as np

from .. import kernels as K
from ..function import Function, ShapeError, unbroadcast


def _check_matmul_shapes(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"{a.shape} @ {b.shape} — matmul needs at least 1-D operands; "
                         f"use * to multiply by a scalar")
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise ShapeError(f"{a.shape} @ {b.shape} — inner sizes {k_a} and {k_b} differ")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ShapeError(f"{a.shape} @ {b.shape} — batch shapes {a.shape[:-2]} and "
                         f"{b.shape[:-2]} do not broadcast") from None


class MatMul(Function):
    """out = a @ b. For 2-D: dL/da = grad @ bᵀ and dL/db = aᵀ @ grad."""

    @staticmethod
    def forward(ctx, a, b):
        _check_matmul_shapes(a, b)
        # A 1-D a is a row vector (1, k); a 1-D b is a column vector (k, 1); the added axis is
        # removed from the result, as numpy does.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        ctx.save_for_backward(a2, b2)
        ctx.shapes = (a.shape, b.shape)
        out = K.matmul(a2, b2)
        if b.ndim == 1:
            out = out[..., 0]
        if a.ndim == 1:
            out = out[..., 0, :] if b.ndim > 1 else out[..., 0]
        return out

    @staticmethod
    def backward(ctx, grad):
        a2, b2 = ctx.saved_tensors
        a_shape, b_shape = ctx.shapes
        # put back the axes forward removed, so grad is (..., n, m)
        g = grad
        if b2.shape[-1] == 1 and len(b_shape) == 1:
            g = g[..., None]
        if a2.shape[-2] == 1 and len(a_shape) == 1:
            g = g[..., None, :]
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = unbroadcast(K.matmul_grad_a(g, b2), a2.shape).reshape(a_shape)
        if ctx.needs_input_grad[1]:
            if b2.ndim == 2:
                gb = _matrix_grad(a2, g, b2).reshape(b_shape)
            else:
                gb = unbroadcast(K.matmul_grad_b(a2, g), b2.shape).reshape(b_shape)
        return ga, gb


def _matrix_grad(a, grad, b):
    """dL/db = Σ aᵀ·grad for a 2-D b (a Linear layer's weight) and a of any batch shape.

    Summed over the batch, it is one 2-D product (B·L, k)ᵀ @ (B·L, m), cheaper than B small
    products summed afterwards. When b is a transposed C-ordered matrix (weight.T in
    x @ weight.T), the product is computed as (gradᵀ·a)ᵀ: the same numbers, laid out as
    weight itself, so weight's gradient arrives C-ordered and the optimizer reads it without a
    copy.
    """
    k, m = b.shape
    rows = math.prod(a.shape[:-1])          # not -1: k or m may be 0
    a_rows, g_rows = a.reshape(rows, k), grad.reshape(rows, m)
    if b.flags.f_contiguous and not b.flags.c_contiguous:
        return K.matmul_grad_b(g_rows, a_rows).T
    return K.matmul_grad_b(a_rows, g_rows)
