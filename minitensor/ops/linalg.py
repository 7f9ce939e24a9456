"""Matrix multiplication, 1-D to N-D, with numpy's rules and batch broadcasting.

The products themselves run in `minitensor.kernels` (numba or numpy, one switch), so this op
only handles shapes: 1-D operands become matrices, batch axes broadcast, and each gradient is
summed back to its operand's shape.

After each class comes the public function that checks its arguments and applies it
(`minitensor.functional` re-exports it); functions with no class of their own close the file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import kernels as K
from ..function import Function, ShapeError, op_error, unbroadcast
from ..kernels.matmul import is_transposed
from ..tensor import Tensor
from ..typing import ArrayLike, Scalar
from ._args import _keep_float_dtype, _operand
from .elementwise import add, mul
from .shape import transpose, unsqueeze


def _check_matmul_shapes(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(
            f"{a.shape} @ {b.shape} — matmul needs at least 1-D operands; "
            f"use * to multiply by a scalar"
        )
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise ShapeError(f"{a.shape} @ {b.shape} — inner sizes {k_a} and {k_b} differ")
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    if batch_a == batch_b or not batch_a or not batch_b:  # nothing to broadcast
        return
    try:
        np.broadcast_shapes(batch_a, batch_b)
    except ValueError:
        raise ShapeError(
            f"{a.shape} @ {b.shape} — batch shapes {batch_a} and {batch_b} do not broadcast"
        ) from None


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
        if ctx.needs_input_grad[0] and ctx.needs_input_grad[1] and b2.ndim == 2:
            if _laid_out_like(a2, g, b2) is None:  # x @ W: a Linear layer's two products at once
                ga, gb = K.linear_grads(g, a2, b2)
                return ga.reshape(a_shape), gb.reshape(b_shape)
        if ctx.needs_input_grad[0]:
            out = _laid_out_like(a2, g, b2)
            ga = unbroadcast(K.matmul_grad_a(g, b2, out=out), a2.shape).reshape(a_shape)
        if ctx.needs_input_grad[1]:
            if b2.ndim == 2:
                gb = _matrix_grad(a2, g, b2).reshape(b_shape)
            else:
                out = _laid_out_like(b2, a2, g)
                gb = unbroadcast(K.matmul_grad_b(a2, g, out=out), b2.shape).reshape(b_shape)
        return ga, gb


def _laid_out_like(x, p, q):
    """An empty array for the gradient of x, a stack of matrices, laid out in memory as x is —
    or None (then the product allocates its own, C-ordered): when x is not C-ordered, as
    attention's heads are (views of a Linear layer's (B, L, h·d_k) output as (B, h, L, d_k)),
    a gradient laid out like x goes back through the views that made x — swapaxes, then
    reshape to (B·L, h·d_k) — without a copy. Only where nothing is broadcast (the gradient
    has x's shape) and the two factors p, q and x share one dtype."""
    if x.ndim < 3 or x.flags.c_contiguous or not (x.dtype == p.dtype == q.dtype):
        return None
    if p.shape[:-2] != x.shape[:-2] or q.shape[:-2] != x.shape[:-2]:
        return None
    return np.empty_like(x)


def matmul(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """a @ b for 1-D to N-D operands, numpy's rules (batch axes broadcast)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(a)
    return MatMul.apply(*_keep_float_dtype(_operand(a, b), _operand(b, a)))


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched matmul of (B, n, m) and (B, m, p) → (B, n, p) (torch.bmm: 3-D only)."""
    if a.ndim != 3 or b.ndim != 3:
        raise op_error("bmm", f"expects two 3-D tensors, got shapes {a.shape} and {b.shape}")
    return matmul(a, b)


def _matrix_grad(a, grad, b):
    """dL/db = Σ aᵀ·grad for a 2-D b (a Linear layer's weight) and a of any batch shape.

    Summed over the batch, it is one 2-D product (B·L, k)ᵀ @ (B·L, m), cheaper than B small
    products summed afterwards. When b is a transposed C-ordered matrix (weight.T in
    x @ weight.T), the product is computed as (gradᵀ·a)ᵀ: the same numbers, laid out as
    weight itself, so weight's gradient arrives C-ordered and the optimizer reads it without a
    copy.
    """
    k, m = b.shape
    rows = math.prod(a.shape[:-1])  # not -1: k or m may be 0
    a_rows, g_rows = a.reshape(rows, k), grad.reshape(rows, m)
    if is_transposed(b):
        return K.matmul_grad_b(g_rows, a_rows).T
    return K.matmul_grad_b(a_rows, g_rows)


class LinearBias(Function):
    """x Wᵀ + b as one node: the product, then b added into the product's own output (no
    second array, no second node). Inputs: x (…, in), wt = Wᵀ (in, out), the transposed
    weight, which the graph shows as the layer's ``weightᵀ``, and b (out,).
    dL/dx = grad·W, dL/dW = gradᵀ·x (summed over the batch), dL/db = grad summed over the batch."""

    name = "matmul + bias"

    @staticmethod
    def forward(ctx, x, wt, b):
        _check_matmul_shapes(x, wt)
        x2 = x[None, :] if x.ndim == 1 else x  # a 1-D x is one row, removed again below
        ctx.save_for_backward(x2, wt)
        ctx.x_shape = x.shape
        out = K.matmul(x2, wt)
        fresh = out.flags.c_contiguous and out.flags.writeable
        if fresh and out.dtype == b.dtype and out.dtype.kind == "f":
            # the product's output is fresh memory (a matrix, or a stack of them for a batch
            # of rows): a float bias goes in place, row by row
            K.add_bias(out.reshape(-1, out.shape[-1]), b)
        else:  # integers (which numpy's product allows), mixed dtypes, another layout
            out = out + b
        return out[0] if x.ndim == 1 else out

    @staticmethod
    def backward(ctx, grad):
        x2, wt = ctx.saved_tensors
        g = grad[None, :] if len(ctx.x_shape) == 1 else grad
        gx = gw = gb = None
        if ctx.needs_input_grad[0] and ctx.needs_input_grad[1]:  # both products at once
            gx, gw = K.linear_grads(g, x2, wt)
            gx = gx.reshape(ctx.x_shape)
        elif ctx.needs_input_grad[0]:
            gx = K.matmul_grad_a(g, wt).reshape(ctx.x_shape)
        elif ctx.needs_input_grad[1]:
            gw = _matrix_grad(x2, g, wt)
        if ctx.needs_input_grad[2]:
            gb = unbroadcast(grad, (wt.shape[1],))
        return gx, gw, gb


# --------------- no Function of their own: compositions of the ops above, or no gradient
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """torch.nn.functional.linear: input Wᵀ + b, with weight (out, in) as torch lays it out (one
    row of weights per output feature) and bias (out,). input (…, in) → (…, out); a 1-D
    weight (in,) gives (…)."""
    if weight.ndim not in (1, 2):
        raise op_error(
            "linear",
            f"weight must be (out_features, in_features) or (in_features,), "
            f"got shape {weight.shape} (input {input.shape})",
        )
    if input.ndim == 0 or input.shape[-1] != weight.shape[-1]:
        raise op_error(
            "linear",
            f"input of shape {input.shape} has "
            f"{input.shape[-1] if input.ndim else 'no'} features on its "
            f"last axis, expected {weight.shape[-1]} (weight {weight.shape}: "
            f"(out_features, in_features))",
        )
    wt = transpose(weight)  # a view: the graph shows it as the layer's weightᵀ
    if bias is None or weight.ndim != 2 or tuple(bias.shape) != (weight.shape[0],):
        y = matmul(input, wt)
        return y if bias is None else y + bias
    return LinearBias.apply(*_keep_float_dtype(input, wt, _operand(bias, wt)))


def _need(op, *pairs):
    """Refuse operands of the wrong number of axes, naming the op and every shape."""
    for name, t, ndim in pairs:
        if t.ndim != ndim:
            shapes = ", ".join(f"{n} {tuple(x.shape)}" for n, x, _ in pairs)
            raise op_error(op, f"{name} must be {ndim}-D ({shapes})")


def mm(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product of (n, m) and (m, p) → (n, p) (torch.mm: 2-D only)."""
    _need("mm", ("input", a, 2), ("mat2", b, 2))
    return matmul(a, b)


def mv(a: Tensor, v: Tensor) -> Tensor:
    """Matrix-vector product (n, m) @ (m,) → (n,)."""
    _need("mv", ("input", a, 2), ("vec", v, 1))
    return matmul(a, v)


def dot(a: Tensor, b: Tensor) -> Tensor:
    """Σ a_i·b_i of two 1-D tensors of one size, as a 0-d tensor."""
    _need("dot", ("input", a, 1), ("tensor", b, 1))
    if a.dtype != b.dtype:
        raise op_error("dot", f"dtypes {a.dtype} and {b.dtype} differ", TypeError)
    return matmul(a, b)


def vdot(a: Tensor, b: Tensor) -> Tensor:
    """dot for real tensors (torch.vdot conjugates a; real numbers are their own conjugate)."""
    return dot(a, b)


def inner(a: Tensor, b: Tensor) -> Tensor:
    """Σ over the last axis of a and b: shape a.shape[:-1] + b.shape[:-1] (0-d inputs scale)."""
    if a.ndim == 0 or b.ndim == 0:
        return mul(a, b)
    return matmul(a, transpose(b, -1, -2)) if b.ndim > 1 else matmul(a, b)


def outer(a: Tensor, b: Tensor) -> Tensor:
    """The outer product a_i·b_j of two 1-D tensors, (n,) and (m,) → (n, m)."""
    _need("outer", ("input", a, 1), ("vec2", b, 1))
    return mul(unsqueeze(a, 1), unsqueeze(b, 0))


def _scaled_sum(op, x, product, beta, alpha):
    """beta·x + alpha·product; beta = 0 ignores x entirely (its NaNs too), as torch."""
    if product.dtype.kind in "iub":  # torch truncates the scales to the integer dtype
        alpha, beta = int(alpha), int(beta)
    product = product if alpha == 1 else mul(product, alpha)
    if beta == 0:  # not 0·x: 0·NaN would be NaN
        return product
    return add(x if beta == 1 else mul(x, beta), product)


def addmm(x: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1) -> Tensor:
    """beta·x + alpha·(mat1 @ mat2), x broadcast to (n, p)."""
    _need("addmm", ("mat1", mat1, 2), ("mat2", mat2, 2))
    return _scaled_sum("addmm", x, matmul(mat1, mat2), beta, alpha)


def addmv(x: Tensor, mat: Tensor, vec: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1) -> Tensor:
    """beta·x + alpha·(mat @ vec), x broadcast to (n,)."""
    _need("addmv", ("mat", mat, 2), ("vec", vec, 1))
    return _scaled_sum("addmv", x, matmul(mat, vec), beta, alpha)


def addr(x: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1) -> Tensor:
    """beta·x + alpha·outer(vec1, vec2)."""
    return _scaled_sum("addr", x, outer(vec1, vec2), beta, alpha)


def baddbmm(
    x: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1
) -> Tensor:
    """beta·x + alpha·(batch1 @ batch2) for (B, n, m) and (B, m, p) batches."""
    _need("baddbmm", ("batch1", batch1, 3), ("batch2", batch2, 3))
    return _scaled_sum("baddbmm", x, matmul(batch1, batch2), beta, alpha)


def addbmm(
    x: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1
) -> Tensor:
    """beta·x + alpha·Σ_b batch1[b] @ batch2[b]: the batch of products summed, (n, p)."""
    _need("addbmm", ("batch1", batch1, 3), ("batch2", batch2, 3))
    product = matmul(batch1, batch2).sum(0)
    return _scaled_sum("addbmm", x, product, beta, alpha)


def kron(a: Tensor, b: Tensor) -> Tensor:
    """The Kronecker product: every element of a times the whole of b, as blocks."""
    nd = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (nd - a.ndim) + a.shape)
    b = b.reshape((1,) * (nd - b.ndim) + b.shape)
    # a's axis i next to b's: (a0, 1, a1, 1, …) · (1, b0, 1, b1, …) → (a0·b0, a1·b1, …)
    wide_a = a.reshape(tuple(v for n in a.shape for v in (n, 1)))
    wide_b = b.reshape(tuple(v for n in b.shape for v in (1, n)))
    return mul(wide_a, wide_b).reshape(tuple(p * q for p, q in zip(a.shape, b.shape)))


def cross(a: Tensor, b: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along `dim` (None: the first axis of size 3), a and b
    broadcast."""
    from .shape import broadcast_tensors, getitem, stack

    a, b = broadcast_tensors(a, b)
    if dim is None:
        dim = next((i for i, n in enumerate(a.shape) if n == 3), None)
    if dim is None or a.shape[dim] != 3:
        raise op_error("cross", f"needs an axis of size 3, got shapes {a.shape} and {b.shape}")
    pick = [(slice(None),) * (dim % a.ndim) + (i,) for i in range(3)]
    (a0, a1, a2), (b0, b1, b2) = ([getitem(t, p) for p in pick] for t in (a, b))
    parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    return stack(parts, dim % a.ndim)


def tensordot(a: Tensor, b: Tensor, dims: int | Sequence = 2) -> Tensor:
    """Σ over a's last `dims` axes against b's first ones (or the axis lists dims gives)."""
    from .reduce import einsum

    if isinstance(dims, int):
        axes_a, axes_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        axes_a, axes_b = ([d] if isinstance(d, int) else list(d) for d in dims)
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(a.ndim)]
    sb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(axes_a, axes_b):
        sb[j % b.ndim] = sa[i % a.ndim]
    kept = [c for k, c in enumerate(sa) if k % a.ndim not in {i % a.ndim for i in axes_a}]
    kept += [c for k, c in enumerate(sb) if k not in {j % b.ndim for j in axes_b}]
    return einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(kept)}", a, b)
