"""`torch.amp`'s GradScaler, for training loops written for GPUs (nanoGPT's, for one):

    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)              # before clipping, so the norm is the true one
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)                  # skipped when a gradient is inf or NaN
    scaler.update()

Loss scaling protects float16 gradients from underflow: the loss is multiplied by a large
scale before backward, every gradient divided by it before the step, and a step whose
gradients overflowed is skipped while the scale is halved (and doubled again after
`growth_interval` clean steps). minitensor runs on the CPU, so a scaler for 'cuda' is what
torch's is on a machine without CUDA: disabled, with torch's warning (scale() returns the loss,
step() is optimizer.step()). A scaler for 'cpu' scales as torch's does; the scale is a power of
two, so multiplying and dividing by it changes no float32 digit and the steps are the unscaled
ones.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .tensor import Tensor, check_device


class GradScaler:
    """torch.amp.GradScaler(device, init_scale, growth_factor, backoff_factor,
    growth_interval, enabled): dynamic loss scaling (see the module's docstring)."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        kind = str(getattr(device, "type", device)).split(":")[0]
        if enabled and kind == "cuda":
            warnings.warn(
                "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                UserWarning,
                stacklevel=2,
            )
            enabled = False
        elif kind != "cuda":
            check_device(device, "GradScaler")
        self._enabled = enabled
        self._scale = np.float32(init_scale)
        self._growth_factor, self._backoff_factor = growth_factor, backoff_factor
        self._growth_interval, self._growth_tracker = growth_interval, 0
        self._found_inf: dict[int, bool] = {}  # id(optimizer) → inf seen, since update()

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return float(self._scale) if self._enabled else 1.0

    def scale(self, outputs: Any) -> Any:
        """outputs (a tensor, or a list/tuple of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * Tensor(self._scale)

    def unscale_(self, optimizer: Any) -> None:
        """Divide every gradient `optimizer` steps by the scale, in place (once per update)."""
        if not self._enabled:
            return
        if id(optimizer) in self._found_inf:
            raise RuntimeError(
                "GradScaler.unscale_: unscale_() has already been called on "
                "this optimizer since the last update()"
            )
        inv = np.float32(1.0 / np.float64(self._scale))  # torch: the reciprocal in float64
        found = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                np.multiply(g.numpy(), g.dtype.type(inv), out=g.numpy())
                g.bump_version()
                found = found or not np.all(np.isfinite(g.numpy()))
        self._found_inf[id(optimizer)] = found

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """optimizer.step() on unscaled gradients, skipped if any is inf or NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        if not self._found_inf[id(optimizer)]:
            return optimizer.step(*args, **kwargs)
        return None

    def update(self, new_scale: float | None = None) -> None:
        """Halve the scale after an overflow; double it after growth_interval clean steps."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = np.float32(new_scale)
        elif not self._found_inf:
            raise AssertionError(
                "GradScaler.update: no inf checks were recorded prior to "
                "update() (call step(optimizer) or unscale_(optimizer) first)"
            )
        elif any(self._found_inf.values()):
            self._scale = np.float32(self._scale * self._backoff_factor)
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale = np.float32(self._scale * self._growth_factor)
                self._growth_tracker = 0
        self._found_inf.clear()

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        return {
            "scale": float(self._scale),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self._enabled:
            return
        self._scale = np.float32(state["scale"])
        self._growth_factor, self._backoff_factor = state["growth_factor"], state["backoff_factor"]
        self._growth_interval = state["growth_interval"]
        self._growth_tracker = state["_growth_tracker"]
