"""Adadelta: step sizes from running averages of squared gradients and squared updates."""

from __future__ import annotations

import numpy as np

from .optimizer import Optimizer, Params, check_torch_flags


class Adadelta(Optimizer):
    """Adadelta (Zeiler, 2012), the optimizer of pytorch/examples' MNIST program.

    For each parameter, with g its gradient:
        s ← ρ·s + (1 − ρ)·g²                     running mean of g²       (square_avg)
        Δ = √(u + eps) / √(s + eps) · g          the update, in the units of θ
        u ← ρ·u + (1 − ρ)·Δ²                     running mean of Δ²       (acc_delta)
        θ ← θ − lr · Δ
    weight_decay λ adds λθ to g first. lr = 1.0 is the paper's rule; torch keeps lr as a
    scale (StepLR decays it in the MNIST example). Same numbers as torch.optim.Adadelta.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        check_torch_flags("Adadelta", differentiable)
        super().__init__(
            params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        )

    def _check_settings(self, group):
        super()._check_settings(group)
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Adadelta: rho must be in [0, 1], got {group['rho']}")
        if group["eps"] < 0 or group["weight_decay"] < 0:
            raise ValueError("Adadelta: eps and weight_decay must be ≥ 0")

    def _update(self, param, grad, state, group):
        lr, rho, eps, wd = group["lr"], group["rho"], group["eps"], group["weight_decay"]
        if not state:
            state["step"] = 0
            state["square_avg"] = np.zeros_like(param)
            state["acc_delta"] = np.zeros_like(param)
        state["step"] += 1
        s, u = state["square_avg"], state["acc_delta"]
        if group["maximize"]:
            grad = -grad
        if wd:
            grad = grad + wd * param
        s *= rho
        s += (1.0 - rho) * grad * grad
        delta = np.sqrt(u + eps) / np.sqrt(s + eps) * grad
        u *= rho
        u += (1.0 - rho) * delta * delta
        step = self._work(param)
        np.multiply(delta, lr, out=step)
        np.subtract(param, step, out=param)
