"""Learning-rate schedules: torch's LambdaLR, StepLR, MultiStepLR, ExponentialLR, LinearLR,
CosineAnnealingLR (same signatures and numbers), the paper's Noam schedule, warmup + cosine.

Call ``scheduler.step()`` once after each ``optimizer.step()``. Every schedule here is a
closed-form function of `last_epoch` (the number of scheduler steps taken; PyTorch's name):
creating a scheduler sets the lr for the first optimizer step (last_epoch = 0), and each
`step()` moves on by one. Because the lr depends only on that count, resuming from a
checkpoint gives exactly the same rates.

Two schedulers on one optimizer compose as in torch: StepLR, MultiStepLR, ExponentialLR,
LinearLR and CosineAnnealingLR are *chainable* — when something else changed the group's lr
since their last step (a warm-up LambdaLR, say), they apply their own step's change to that lr
instead of overwriting it; LambdaLR and ours set the lr outright.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .optimizer import Optimizer


class LRScheduler:
    """Base class: subclasses write `lr_at(base_lr, epoch)` (or `get_lr()` for all groups)."""

    chainable = False  # torch's multiplicative schedules (see the module docstring)
    floor = 0.0  # the lr a chainable schedule's change is relative to

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"{type(self).__name__}: expected an Optimizer, got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        elif any("initial_lr" not in g for g in optimizer.param_groups):
            raise KeyError(
                f"{type(self).__name__}: last_epoch={last_epoch} resumes a schedule, "
                f"but the optimizer's groups have no 'initial_lr'; load the "
                f"optimizer's state first"
            )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, base_lr: float, epoch: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        """The learning rate of each param group at the current `last_epoch`."""
        return [self.lr_at(base, self.last_epoch) for base in self.base_lrs]

    def step(self) -> None:
        """Advance one step and set each group's lr."""
        self.last_epoch += 1
        lrs = self.get_lr()
        if self.chainable:
            lrs = [
                self._chained(group["lr"], base, lr)
                for group, base, lr in zip(self.optimizer.param_groups, self.base_lrs, lrs)
            ]
        self._apply(lrs)

    def _chained(self, current, base, new):
        """torch's chainable step: (current − floor) scaled as this schedule moves from its
        previous value to `new`. Alone (current is that previous value) it is `new` exactly;
        a step that changes nothing leaves current exactly; from the floor (a cosine's
        restart) the step adds what the schedule adds."""
        previous = base if self.last_epoch == 0 else self.lr_at(base, self.last_epoch - 1)
        if current == previous:
            return new
        if new == previous:
            return current
        if previous == self.floor:
            return current + (new - self.floor)
        return self.floor + (current - self.floor) * (new - self.floor) / (previous - self.floor)

    def _apply(self, lrs):
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = list(lrs)

    def get_last_lr(self) -> list[float]:
        """The learning rates the last `step()` set, one per param group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer and functions (lambdas are code: they are not saved;
        recreate the scheduler with the same lambda and load this)."""
        return {
            k: v
            for k, v in self.__dict__.items()
            if k != "optimizer" and not callable(v) and k != "lr_lambdas"
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        unknown = set(state_dict) - set(self.state_dict())
        if unknown or "last_epoch" not in state_dict:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: keys {sorted(state_dict)} "
                f"do not match this scheduler's {sorted(self.state_dict())} (was it "
                f"saved from another kind of scheduler?)"
            )
        if len(state_dict.get("base_lrs", self.base_lrs)) != len(self.base_lrs):
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: the checkpoint has "
                f"{len(state_dict['base_lrs'])} param groups, the optimizer "
                f"{len(self.base_lrs)}"
            )
        self.__dict__.update(state_dict)
        self._apply(self.get_lr())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self.get_last_lr()})"


class LambdaLR(LRScheduler):
    """lr = base_lr · lr_lambda(epoch); one function, or a list with one per param group."""

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"LambdaLR: {len(lr_lambda)} lambdas for {n} param groups")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


class StepLR(LRScheduler):
    """lr = base_lr · gamma^⌊epoch / step_size⌋: multiply by gamma every step_size steps."""

    chainable = True

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be ≥ 1, got {step_size}")
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """lr = base_lr · gamma^(number of milestones ≤ epoch)."""

    chainable = True

    def __init__(
        self,
        optimizer: Optimizer,
        milestones: Iterable[int],
        gamma: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.milestones, self.gamma = sorted(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """lr = base_lr · gamma^epoch."""

    chainable = True

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * self.gamma**epoch


class LinearLR(LRScheduler):
    """lr = base_lr · factor, factor going linearly from start_factor to end_factor over
    total_iters steps and staying at end_factor after."""

    chainable = True

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not (0 < start_factor <= 1 and 0 <= end_factor <= 1):
            raise ValueError(
                f"LinearLR: need 0 < start_factor ≤ 1 and 0 ≤ end_factor ≤ 1, got "
                f"{start_factor} and {end_factor}"
            )
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        done = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr − eta_min) · ½(1 + cos(π · epoch / T_max)) (SGDR without
    restarts; torch computes the same numbers step by step)."""

    chainable = True

    def __init__(
        self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        self.T_max, self.eta_min = T_max, eta_min
        self.floor = eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return self.eta_min + (base_lr - self.eta_min) * 0.5 * (
            1.0 + math.cos(math.pi * epoch / self.T_max)
        )


class NoamLR(LRScheduler):
    """The Transformer paper's schedule (section 5.3), with a scale factor:

        lr = scale · d_model^−0.5 · min(step^−0.5, step · warmup_steps^−1.5)

    It rises linearly for warmup_steps steps, peaks at scale/√(d_model·warmup_steps), then
    decays as 1/√step. `step` counts optimizer steps from 1 (step = last_epoch + 1). The lr
    is absolute, as in the paper: the optimizer's own lr is not used (give it any value).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        d_model: int,
        warmup_steps: int = 4000,
        scale: float = 1.0,
        last_epoch: int = -1,
    ) -> None:
        if d_model <= 0 or warmup_steps <= 0:
            raise ValueError(
                f"NoamLR: d_model and warmup_steps must be > 0, got {d_model} and {warmup_steps}"
            )
        self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        step = epoch + 1
        return self.scale * self.d_model**-0.5 * min(step**-0.5, step * self.warmup_steps**-1.5)


Noam = NoamLR


class WarmupCosineLR(LRScheduler):
    """Linear warmup to base_lr over warmup_steps, then cosine decay to min_lr at total_steps
    (and min_lr after that):

        epoch < warmup:  lr = base_lr · (epoch + 1) / warmup_steps
        otherwise:       lr = min_lr + (base_lr − min_lr) · ½(1 + cos(π · progress)),
                         progress = (epoch − warmup_steps) / (total_steps − warmup_steps) ≤ 1
    """

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_steps: int,
        total_steps: int,
        min_lr: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if not 0 <= warmup_steps <= total_steps:
            raise ValueError(
                f"WarmupCosineLR: need 0 ≤ warmup_steps ≤ total_steps, got "
                f"{warmup_steps} and {total_steps}"
            )
        self.warmup_steps, self.total_steps, self.min_lr = warmup_steps, total_steps, min_lr
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        if epoch < self.warmup_steps:
            return base_lr * (epoch + 1) / self.warmup_steps
        decay_steps = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (epoch - self.warmup_steps) / decay_steps)
        return self.min_lr + (base_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
