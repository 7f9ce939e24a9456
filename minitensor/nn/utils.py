"""Gradient tools: clip the global gradient norm, and watch per-parameter gradient norms.

Watching gradient norms is the first thing to do when training misbehaves: a norm that
explodes, vanishes, or is exactly zero for one layer points at the bug.
"""

import math
from collections.abc import Iterable

import numpy as np

from ..tensor import Tensor


def _params_with_grad(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p for p in parameters if p.grad is not None]


def _norm(array, norm_type):
    a = array.reshape(-1).astype(np.float64, copy=False)
    if norm_type == 2.0:  # the common case: x·x needs no |x| (one pass fewer over every grad)
        # numpy's own sum, not np.dot: BLAS's dot shares a long vector out among its threads,
        # so its bits would depend on their count (against mt.use_deterministic_algorithms),
        # and it wakes them for it, which costs more than the sum (benchmarks/README.md,
        # "The gradient norm without BLAS")
        return float(np.sqrt((a * a).sum()))
    a = np.abs(a)
    if norm_type == math.inf:
        return float(a.max()) if a.size else 0.0
    return float(np.sum(a**norm_type) ** (1.0 / norm_type))


def _two_norm(arrays):
    """√(Σ x²) over every entry of every array: the joint 2-norm of the gradients, as one
    sum over all of them laid end to end (one pass in C: a model's hundred small gradients
    cost more to visit one by one than to add up). einsum with a float64 result accumulates in
    float64 without a float64 copy, in one thread (BLAS's dot would share a long vector among
    its threads, so its bits would depend on their count)."""
    flat = np.concatenate([a.reshape(-1) for a in arrays])
    return math.sqrt(np.einsum("i,i->", flat, flat, dtype=np.float64))


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Scale all gradients together so that their joint norm is at most `max_norm`.

    The joint (total) norm is the norm of the vector of every gradient element, i.e. the norm
    of the per-parameter norms. Every gradient is multiplied by min(1, max_norm / (total +
    1e-6)), which keeps the update's direction and bounds its size; a NaN or infinite total
    makes every gradient NaN, as in torch (check the returned norm, or pass
    ``error_if_nonfinite=True`` to raise instead). Returns the total norm *before* clipping as
    a 0-d tensor in the gradients' dtype, as torch. Parameters without a gradient are skipped;
    `foreach` (torch's choice of kernel) changes nothing here.
    """
    norm_type = float(norm_type)
    params = _params_with_grad(parameters)
    if not params:
        return Tensor(0.0)
    if norm_type == 2.0:  # the common case
        total = _two_norm([p.grad.numpy() for p in params])
    else:
        norms = [_norm(p.grad.numpy(), norm_type) for p in params]
        if norm_type == math.inf:
            total = max(norms, key=lambda n: math.inf if math.isnan(n) else n)
        else:
            total = float(np.sum(np.power(norms, norm_type)) ** (1.0 / norm_type))
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(
            f"clip_grad_norm_: the total gradient norm is {total} (NaN or Inf); "
            f"run with mt.detect_anomaly() to find the op that produced it"
        )
    coef = max_norm / (total + 1e-6)
    if not coef >= 1.0:  # NaN too: as torch, a NaN total makes every gradient NaN
        for p in params:
            g = p.grad
            # an infinite norm gives coef 0 and inf · 0 = NaN, as in torch (a GradScaler then
            # skips the step): expected, so numpy's warning is silenced
            with np.errstate(invalid="ignore"):
                np.multiply(g.numpy(), g.dtype.type(coef), out=g.numpy())
            g.bump_version()
    dtype = np.result_type(*(p.grad.dtype for p in params))
    return Tensor._make(np.asarray(total, dtype=dtype))


def grad_norms(module, norm_type=2.0):
    """{dotted parameter name: norm of its gradient} for every parameter that has one.

    >>> loss.backward()
    >>> for name, n in mt.nn.utils.grad_norms(model).items(): print(f"{name:40s} {n:.3e}")
    """
    return {
        name: _norm(p.grad.numpy(), float(norm_type))
        for name, p in module.named_parameters()
        if p.grad is not None
    }
