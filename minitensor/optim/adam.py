"""Adam and AdamW: per-parameter step sizes from running moments of the gradient."""

from __future__ import annotations

import math

import numpy as np

from .. import kernels as K
from .optimizer import Optimizer, Params, check_torch_flags


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015), the optimizer of the Transformer paper (β = (0.9, 0.98),
    eps = 1e-9 there).

    For each parameter, with g its gradient at step t:
        m ← β₁·m + (1 − β₁)·g              running mean of g
        v ← β₂·v + (1 − β₂)·g²             running mean of g²
        θ ← θ − lr · m̂ / (√v̂ + eps)        m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ) undo the zero start
    weight_decay λ adds λθ to g (L2 regularisation, which the moments then rescale; AdamW
    decouples it instead). amsgrad keeps the running maximum of v. Same numbers as torch.optim.Adam.
    """

    decoupled = False

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        # foreach, capturable and fused choose among torch's implementations of the same
        # update (here there is one); differentiable (a step autograd can go through) is not
        # supported. decoupled_weight_decay=True makes this AdamW, as in torch.
        check_torch_flags(type(self).__name__, differentiable)
        if decoupled_weight_decay:
            self.decoupled = True
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=tuple(betas),
                eps=eps,
                weight_decay=weight_decay,
                amsgrad=amsgrad,
                maximize=maximize,
            ),
        )

    def _check_settings(self, group):
        super()._check_settings(group)
        b1, b2 = group["betas"]
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(
                f"{type(self).__name__}: betas must be in [0, 1), got {group['betas']}"
            )
        if group["eps"] < 0 or group["weight_decay"] < 0:
            raise ValueError(f"{type(self).__name__}: eps and weight_decay must be ≥ 0")

    def _update(self, param, grad, state, group):
        lr, (beta1, beta2) = group["lr"], group["betas"]
        eps, wd = group["eps"], group["weight_decay"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(param)
            state["exp_avg_sq"] = np.zeros_like(param)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = np.zeros_like(param)
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        if group["maximize"]:
            grad = -grad
        if wd and self.decoupled:
            np.multiply(param, 1.0 - lr * wd, out=param)  # AdamW: shrink θ directly
        elif wd:
            grad = grad + wd * param  # Adam: L2 term in the gradient
        v_max = state["max_exp_avg_sq"] if group["amsgrad"] else v
        # θ ← θ − (lr/(1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + eps), with m and v updated first:
        # one pass of a numba kernel, or its numpy twin (minitensor/kernels/adam.py)
        K.adam_update(
            param,
            grad,
            m,
            v,
            v_max,
            beta1,
            beta2,
            lr / (1.0 - beta1**t),
            math.sqrt(1.0 - beta2**t),
            eps,
            self._work(param),
        )


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019): θ ← θ·(1 − lr·λ) before
    the Adam step, so decay does not pass through the moment estimates. Default λ = 0.01, as
    torch.optim.AdamW."""

    decoupled = True

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        super().__init__(
            params,
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            differentiable=differentiable,
        )
