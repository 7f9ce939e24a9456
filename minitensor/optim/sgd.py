"""Stochastic gradient descent, with momentum, Nesterov momentum and weight decay."""

from __future__ import annotations

import numpy as np

from .optimizer import Optimizer, Params, check_torch_flags


class SGD(Optimizer):
    """θ ← θ − lr · d, where d is the gradient, optionally smoothed by momentum.

    With weight decay λ the gradient is g + λθ (L2 regularisation). With momentum μ a buffer
    b ← μ·b + (1 − dampening)·g (b = g at the first step) and d = b, or d = g + μ·b with
    nesterov=True. Same numbers as torch.optim.SGD.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        check_torch_flags("SGD", differentiable)
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )

    def _check_settings(self, group):
        super()._check_settings(group)
        if group["momentum"] < 0 or group["weight_decay"] < 0:
            raise ValueError(
                f"SGD: momentum and weight_decay must be ≥ 0, got "
                f"{group['momentum']} and {group['weight_decay']}"
            )
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")

    def _update(self, param, grad, state, group):
        lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        if group["maximize"]:
            grad = -grad
        if wd:
            grad = grad + wd * param
        if mu:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = np.array(grad, copy=True)
            else:
                np.multiply(buf, mu, out=buf)
                buf += (1.0 - group["dampening"]) * grad
            grad = grad + mu * buf if group["nesterov"] else buf
        step = self._work(param)
        np.multiply(grad, lr, out=step)
        np.subtract(param, step, out=param)
