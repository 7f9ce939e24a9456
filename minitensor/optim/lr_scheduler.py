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


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin, 2018), with torch's signature and numbers: the lr
    rises from max_lr/div_factor to max_lr over the first pct_start of total_steps, then
    falls to initial_lr/final_div_factor (three_phase: back to the initial lr first, then
    down), by cosine or linear annealing; with cycle_momentum, the momentum (Adam's β₁)
    moves the opposite way between max_momentum and base_momentum. Call step() after every
    batch; stepping past total_steps is an error, as torch."""

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.85,
        max_momentum: float | Sequence[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}"
            )
        self.anneal_strategy, self.cycle_momentum = anneal_strategy, cycle_momentum
        self.phases = _one_cycle_phases(pct_start, self.total_steps, three_phase)
        groups = optimizer.param_groups
        if last_epoch == -1:
            for group, top in zip(groups, _per_group("max_lr", max_lr, groups)):
                group["initial_lr"] = top / div_factor
                group["max_lr"], group["min_lr"] = top, top / div_factor / final_div_factor
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    "OneCycleLR: cycle_momentum needs an optimizer with momentum or betas "
                    "(or give cycle_momentum=False)"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                highs = _per_group("max_momentum", max_momentum, groups)
                for group, high, low in zip(
                    groups, highs, _per_group("base_momentum", base_momentum, groups)
                ):
                    self._set_momentum(group, high)
                    group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "linear":
            return (end - start) * pct + start
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    def get_lr(self) -> list[float]:
        """Each group's lr at `last_epoch` (and, with cycle_momentum, its momentum is set)."""
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times; total_steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self.phases):
                end_step = phase[0]
                if step <= end_step or i == len(self.phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lrs.append(self._anneal(group[phase[1]], group[phase[2]], pct))
                    if self.cycle_momentum:
                        self._set_momentum(
                            group, self._anneal(group[phase[3]], group[phase[4]], pct)
                        )
                    break
                start_step = end_step
        return lrs


def _total_steps(total_steps, epochs, steps_per_epoch):
    if total_steps is not None:
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"OneCycleLR: total_steps must be a positive int, got {total_steps}")
        return total_steps
    if epochs is None or steps_per_epoch is None:
        raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
    if epochs <= 0 or steps_per_epoch <= 0:
        raise ValueError(
            f"OneCycleLR: epochs {epochs} and steps_per_epoch {steps_per_epoch} must be > 0"
        )
    return epochs * steps_per_epoch


def _one_cycle_phases(pct_start, total, three_phase):
    """(end step, start lr key, end lr key, start momentum key, end momentum key) per phase."""
    up = float(pct_start * total) - 1
    if three_phase:
        return [
            (up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
            (
                float(2 * pct_start * total) - 2,
                "max_lr",
                "initial_lr",
                "base_momentum",
                "max_momentum",
            ),
            (total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
        ]
    return [
        (up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
        (total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
    ]


def _per_group(name, value, groups):
    """One value per param group: a list as given (checked), or one number for all."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ValueError(f"{name}: {len(value)} values for {len(groups)} param groups")
        return list(value)
    return [value] * len(groups)


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by `factor` when a metric has stopped improving for `patience` steps
    (torch's signature and rule): step(metric) after each evaluation. mode 'min' (a loss) or
    'max' (an accuracy); an improvement must beat the best by `threshold` (relative, 'rel',
    or absolute, 'abs'); after a reduction, `cooldown` steps pass before counting again; the
    lr never goes below min_lr, and a change smaller than eps is skipped."""

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | Sequence[float] = 0,
        eps: float = 1e-8,
    ) -> None:
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be < 1, got {factor}")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(
                f"ReduceLROnPlateau: mode must be 'min' or 'max' (got {mode!r}), "
                f"threshold_mode 'rel' or 'abs' (got {threshold_mode!r})"
            )
        self.optimizer = optimizer
        self.min_lrs = _per_group("min_lr", min_lr, optimizer.param_groups)
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.eps = cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def is_better(self, a: float, best: float) -> bool:
        """Whether metric `a` improves on `best` by more than the threshold."""
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if rel else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if rel else best + self.threshold)

    def step(self, metrics: Any) -> None:  # type: ignore[override]
        """Record one evaluation's metric (a number or a 0-d tensor); reduce the lr if due."""
        current = float(metrics)
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                new_lr = max(float(group["lr"]) * self.factor, floor)
                if float(group["lr"]) - new_lr > self.eps:
                    group["lr"] = new_lr
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_lr(self) -> list[float]:
        return list(self._last_lr)


class SequentialLR(LRScheduler):
    """Run `schedulers` one after another, switching at each of `milestones` (step counts), as
    torch: the next one starts from its own epoch 0. Creating it undoes the first step the
    schedulers took when they were created and starts the first one afresh."""

    def __init__(
        self,
        optimizer: Optimizer,
        schedulers: Sequence[LRScheduler],
        milestones: Sequence[int],
        last_epoch: int = -1,
    ) -> None:
        if not schedulers:
            raise ValueError("SequentialLR: expects at least one scheduler")
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau) or s.optimizer is not optimizer:
                raise ValueError(
                    f"SequentialLR: scheduler {i} ({type(s).__name__}) must be a schedule "
                    "of this optimizer, and not ReduceLROnPlateau"
                )
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR: {len(schedulers)} schedulers need "
                f"{len(schedulers) - 1} milestones, got {len(milestones)}"
            )
        self.optimizer, self._schedulers = optimizer, list(schedulers)
        self._milestones, self.last_epoch = list(milestones), last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for s in self._schedulers:  # undo the step each took when created
            s.last_epoch -= 1
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first.step()
        self._last_lr = first.get_last_lr()

    def step(self) -> None:
        """One step of the scheduler whose turn it is (at a milestone, its epoch 0)."""
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            s.last_epoch = 0  # torch's step(0): the closed-form value at epoch 0
            s._apply(s.get_lr())
        else:
            s.step()
        self._last_lr = s.get_last_lr()

    def get_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """This scheduler's counters and each inner scheduler's state_dict."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        inner = state_dict["_schedulers"]
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "_schedulers"})
        for s, sd in zip(self._schedulers, inner):
            s.load_state_dict(sd)
