"""gradcheck: compare an op's backward with finite differences — the test for a new op.

For each input x that requires grad, and each element x[i], the numeric derivative is the
central difference (f(x + eps·e_i) − f(x − eps·e_i)) / (2·eps). Rather than the whole
Jacobian of a vector-valued f, we check the gradient of a scalar: the outputs dotted with
fixed random weights w. If backward is right for a random w it is right for all (a wrong
Jacobian entry would need an accident of measure zero to hide).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .autograd import enable_grad, no_grad
from .tensor import Tensor


class GradcheckError(AssertionError):
    """Analytic and numeric gradients disagree."""


def _outputs(result):
    outs = result if isinstance(result, (tuple, list)) else (result,)
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.kind == "f"]


def gradcheck(
    fn: Callable[..., Tensor | Sequence[Tensor]],
    *inputs: Any,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int = 0,
) -> bool:
    """Check fn's analytic gradients against finite differences, in float64.

    fn: called as fn(*inputs), returns a Tensor or a tuple of Tensors.
    inputs: Tensors (and other arguments); every Tensor with requires_grad must be float64 and
    contiguous — finite differences in float32 are too coarse to tell a bug from rounding.
    Inputs are perturbed in place and restored; their ``.grad`` is left as it was.
    An element passes when |analytic − numeric| ≤ atol + rtol·|numeric|.
    Returns True, or raises GradcheckError naming the input, the worst index and both values.
    """
    checked = [(i, t) for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad; pass tensors with requires_grad=True")
    for i, t in checked:
        if t.dtype != np.float64:
            raise TypeError(
                f"gradcheck: input {i} is {t.dtype}; use float64 inputs "
                f"(mt.tensor(..., dtype=mt.float64) or t.double())"
            )
        if not t.is_leaf:
            raise ValueError(
                f"gradcheck: input {i} of shape {t.shape} was made by "
                f"`{t.grad_fn.name}`, so it gets no .grad; pass a leaf "
                f"(t.detach().requires_grad_()) and do the op inside fn"
            )
        if not t.numpy().flags.c_contiguous:
            raise ValueError(
                f"gradcheck: input {i} of shape {t.shape} is not contiguous; pass "
                f"a contiguous copy (and make the non-contiguous view inside fn)"
            )

    grads_before = [t.grad for _, t in checked]
    try:
        analytic, weights = _analytic_grads(fn, inputs, checked, np.random.default_rng(seed))
        for (i, t), a in zip(checked, analytic):
            numeric = _numeric_grad(fn, inputs, t, weights, eps)
            _compare(i, t, a, numeric, atol, rtol)
    finally:
        for (_, t), g in zip(checked, grads_before):
            t.grad = g
    return True


def _analytic_grads(fn, inputs, checked, rng):
    """Backward of Σ w·output with random weights w; returns (the input grads, w)."""
    for _, t in checked:
        t.grad = None
    with enable_grad():
        outs = _outputs(fn(*inputs))
        if not outs:
            raise ValueError("gradcheck: fn returned no floating-point Tensor")
        weights = [rng.standard_normal(o.shape) for o in outs]
        terms = [
            (o * Tensor(w, dtype=np.float64)).sum()
            for o, w in zip(outs, weights)
            if o.requires_grad
        ]
    if terms:
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        total.backward()
    grads = [t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for _, t in checked]
    return grads, weights


def _numeric_grad(fn, inputs, t, weights, eps):
    """Central differences of Σ w·fn(inputs) with respect to each element of t."""

    def objective():
        with no_grad():  # only the values matter here: record no graph
            outs = _outputs(fn(*inputs))
        return sum(float(np.sum(o.numpy() * w)) for o, w in zip(outs, weights))

    flat = t.numpy().reshape(-1)  # a view (t is contiguous): writing it perturbs t
    numeric = np.zeros(t.numel())
    for j in range(flat.size):
        orig = flat[j]
        flat[j] = orig + eps
        plus = objective()
        flat[j] = orig - eps
        minus = objective()
        flat[j] = orig
        numeric[j] = (plus - minus) / (2 * eps)
    return numeric.reshape(t.shape)


def _compare(i, t, analytic, numeric, atol, rtol):
    err = np.abs(analytic - numeric) - (atol + rtol * np.abs(numeric))
    if (err > 0).any():
        k = np.unravel_index(np.argmax(err), t.shape)
        name = f" ({t.name})" if t.name else ""
        raise GradcheckError(
            f"gradcheck: input {i}{name} of shape {t.shape}: gradient mismatch at index "
            f"{tuple(int(v) for v in k)}: analytic {analytic[k]:.8g}, numeric {numeric[k]:.8g} "
            f"(atol={atol}, rtol={rtol}; {int((err > 0).sum())} of {t.numel()} elements differ)"
        )
