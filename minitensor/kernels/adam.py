"""Adam's update of one parameter, in place: a numba kernel and its numpy twin.

    m ← β₁·m + (1 − β₁)·g                    running mean of the gradient
    v ← β₂·v + (1 − β₂)·g²                   running mean of its square
    v_max ← max(v_max, v)                    (amsgrad; pass v_max = v to skip it)
    θ ← θ − step_size · m / (√v_max / c₂ + eps)

with step_size = lr/(1 − β₁ᵗ) and c₂ = √(1 − β₂ᵗ), the bias corrections computed once per
step by the optimizer (minitensor/optim/adam.py, which also applies weight decay and maximize).
The twin makes ~12 passes over the parameter's memory with numpy; the kernel makes one.

Both do the same floating-point operations in the same order, each rounded to the parameter's
dtype, so they agree bit for bit — and with torch.optim.Adam, which the optimizer tests check.
That is why this kernel is compiled without fastmath (fused multiply-adds would round
differently).
"""

import numpy as np

from .jit import kernel, prange


def adam_update_numpy(param, grad, m, v, v_max, beta1, beta2, step_size, c2, eps, work):
    """The update above, in place on param, m, v and v_max (all of param's shape and dtype;
    v_max may be v itself). work: scratch of the same shape. The scalars are rounded to the
    arrays' dtype first, as the kernel does, so every operation runs in that dtype."""
    f = param.dtype.type
    one_minus_beta1, one_minus_beta2 = f(1.0 - beta1), f(1.0 - beta2)
    beta1, beta2, step_size, c2, eps = f(beta1), f(beta2), f(step_size), f(c2), f(eps)
    np.multiply(m, beta1, out=m)
    np.multiply(grad, one_minus_beta1, out=work)
    np.add(m, work, out=m)
    np.multiply(v, beta2, out=v)
    np.multiply(grad, grad, out=work)
    np.multiply(work, one_minus_beta2, out=work)
    np.add(v, work, out=v)
    if v_max is not v:
        np.maximum(v_max, v, out=v_max)
    np.sqrt(v_max, out=work)
    np.divide(work, c2, out=work)
    np.add(work, eps, out=work)
    np.divide(m, work, out=work)
    np.multiply(work, step_size, out=work)
    np.subtract(param, work, out=param)


# no fastmath (see the module docstring): flags=False
@kernel(parallel=True, flags=False)
def _adam_kernel(param, grad, m, v, v_max, amsgrad, scalars):
    """The update for flat contiguous arrays. scalars: (β₁, 1 − β₁, β₂, 1 − β₂, step_size, c₂,
    eps), one array of the arrays' dtype (one argument for numba to check, not seven).
    v_max is read and written only under amsgrad: without it the caller passes v itself, and
    a loop that stores into two arrays LLVM cannot prove distinct is not vectorised (LLVM
    checks at run time that the arrays do not overlap, and with v_max = v they do)."""
    beta1, one_minus_beta1, beta2, one_minus_beta2 = scalars[0], scalars[1], scalars[2], scalars[3]
    step_size, c2, eps = scalars[4], scalars[5], scalars[6]
    for i in prange(param.shape[0]):
        m[i] = m[i] * beta1 + grad[i] * one_minus_beta1
        v[i] = v[i] * beta2 + (grad[i] * grad[i]) * one_minus_beta2
        second = v[i]
        if amsgrad:
            v_max[i] = np.maximum(v_max[i], second)  # NaN-propagating, like the twin
            second = v_max[i]
        # np.divide, not /: numba's / tests each divisor for zero (to raise Python's
        # ZeroDivisionError), a branch that keeps the serial build from vectorising
        param[i] = param[i] - np.divide(m[i], np.divide(np.sqrt(second), c2) + eps) * step_size


def adam_update_numba(param, grad, m, v, v_max, beta1, beta2, step_size, c2, eps, work):
    """Numba twin of adam_update_numpy. The kernel updates flat views of param and its state,
    so it needs them C-contiguous (parameters made by minitensor are); any other layout goes
    to the twin. grad may be any layout."""
    contiguous = param.flags.c_contiguous and m.flags.c_contiguous and v.flags.c_contiguous
    if not (contiguous and v_max.flags.c_contiguous):
        return adam_update_numpy(param, grad, m, v, v_max, beta1, beta2, step_size, c2, eps, work)
    # each rounded to the arrays' dtype, as np.float32(x) would round it
    scalars = np.array(
        (beta1, 1.0 - beta1, beta2, 1.0 - beta2, step_size, c2, eps), dtype=param.dtype
    )
    _adam_kernel(
        param.reshape(-1),
        np.ascontiguousarray(grad, dtype=param.dtype).reshape(-1),
        m.reshape(-1),
        v.reshape(-1),
        v_max.reshape(-1),
        v_max is not v,  # amsgrad
        scalars,
    )
