"""`Optimizer`: the base class of SGD, Adam and AdamW (PyTorch's shape).

An optimizer holds `param_groups` — a list of dicts, each with its own ``params`` and settings
(``lr``, ``weight_decay``, …) — and a per-parameter `state` (momentum buffers, Adam's moments).
`step()` updates every parameter that has a gradient, in place and outside the graph; the
update bumps each parameter's version counter, so a graph that saved the old values refuses
to backward through them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import config
from ..autograd import enable_grad, no_grad
from ..kernels.ownership import step_ended
from ..tensor import Tensor

# What an optimizer takes: parameters, named parameters, or param groups (dicts).
Params = Iterable[Tensor] | Iterable[tuple[str, Tensor]] | Iterable[dict[str, Any]]


class Optimizer:
    """Base class. Subclasses set `defaults` and write `_update(p, grad, state, group)`.

    params: an iterable of Parameters, or of dicts ``{"params": [...], "lr": ...}`` (param
    groups: settings missing from a group come from the optimizer's arguments).
    """

    def __init__(self, params: Params, defaults: dict[str, Any]) -> None:
        config.keep_freed_memory()  # a training process from now on: see config.py
        self.defaults = dict(defaults)
        self.state = {}  # Parameter → dict of this parameter's state
        self.param_groups = []
        self._scratch = {}  # dtype → a reusable work array (saves one allocation a step)
        if isinstance(params, Tensor):
            raise TypeError(
                f"{type(self).__name__}: params must be an iterable of tensors (e.g. "
                f"model.parameters()), got a single Tensor of shape {params.shape}"
            )
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if isinstance(groups[0], tuple):  # model.named_parameters(), as torch accepts
            groups = [p for _, p in groups]
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a dict ``{"params": [...], <settings>}``; missing settings take the defaults."""
        name = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{name}: a param group must be a dict with a 'params' entry")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: params must be Tensors; item {i} is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(
                    f"{name}: cannot optimise a non-leaf tensor (item {i}, shape "
                    f"{p.shape}, made by {p.grad_fn.name}); optimise the leaves"
                )
            if p.dtype.kind != "f":
                raise TypeError(f"{name}: cannot optimise a {p.dtype} tensor (item {i})")
            if id(p) in seen:
                raise ValueError(
                    f"{name}: parameter {p.name or i} appears in more than one "
                    f"param group (or twice in one)"
                )
            seen.add(id(p))
        unknown = set(group) - set(self.defaults) - {"params", "initial_lr"}
        if unknown:
            raise ValueError(
                f"{name}: unknown setting(s) {sorted(unknown)} in a param group; "
                f"known: {sorted(self.defaults)}"
            )
        full = dict(self.defaults)
        full.update(group)
        full["params"] = params
        self._check_settings(full)
        self.param_groups.append(full)

    def _check_settings(self, group):
        """Raise ValueError for impossible settings (subclasses extend)."""
        if group["lr"] < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {group['lr']}")

    # ------------------------------------------------------------------ the update
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (None, PyTorch's default) before the next backward."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.numpy()[...] = 0

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient. `closure`, if given, recomputes and
        returns the loss (it runs with gradients on); step returns its value."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad.numpy()
                    if grad.shape != p.shape:
                        raise ValueError(
                            f"{type(self).__name__}.step: gradient of shape "
                            f"{grad.shape} for parameter {p.name or ''} of shape "
                            f"{p.shape}"
                        )
                    self._update(p.numpy(), grad, self.state.setdefault(p, {}), group)
                    p.bump_version()  # in place: saved copies of p are now stale
        step_ended()  # a training step ends here: whole steps decide who owns the cores
        return loss

    def _update(self, param, grad, state, group):
        """Change the numpy array `param` in place from `grad` (numpy arrays)."""
        raise NotImplementedError

    def _work(self, like):
        """A scratch array shaped and typed like `like`, reused across parameters and steps."""
        buf = self._scratch.get(like.dtype)
        if buf is None or buf.size < like.size:
            buf = self._scratch[like.dtype] = np.empty(like.size, like.dtype)
        return buf[: like.size].reshape(like.shape)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: parameters are numbered across groups in order.

        ``{"state": {0: {"step": 3, "exp_avg": array, …}, …},
           "param_groups": [{"lr": …, …, "params": [0, 1, …]}, …]}``
        Arrays are copies, so later steps do not change a state dict you are saving.
        """
        index, groups = 0, []
        state = {}
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                if p in self.state and self.state[p]:
                    state[index] = {
                        k: (v.copy() if isinstance(v, np.ndarray) else v)
                        for k, v in self.state[p].items()
                    }
                ids.append(index)
                index += 1
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = ids
            groups.append(g)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore settings and state saved by `state_dict` (into the same model's params).

        Everything is checked before anything changes: group count, parameters per group,
        setting names and every state array's shape.
        """
        name = type(self).__name__
        try:
            saved_groups, saved_state = state_dict["param_groups"], state_dict["state"]
        except (TypeError, KeyError):
            raise ValueError(
                f"{name}.load_state_dict: expected a dict with 'state' and "
                f"'param_groups' (from optimizer.state_dict())"
            ) from None
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the checkpoint has {len(saved_groups)} "
                f"param group(s), this optimizer has {len(self.param_groups)}"
            )
        params, problems = [], []
        for gi, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                problems.append(
                    f"group {gi}: checkpoint has {len(saved['params'])} parameters, "
                    f"optimizer has {len(group['params'])}"
                )
            keys, expected = set(saved) - {"params"}, set(self.defaults)
            if not expected <= keys:
                problems.append(
                    f"group {gi}: settings {sorted(expected - keys)} are missing "
                    f"(was the checkpoint saved from another optimizer?)"
                )
            params.extend(zip(saved["params"], group["params"]))
        index_to_param = dict(params)
        for idx, st in saved_state.items():
            p = index_to_param.get(int(idx))
            if p is None:
                problems.append(f"state for parameter {idx}, which no group holds")
                continue
            for k, v in st.items():
                if isinstance(v, (np.ndarray, Tensor)) and np.shape(v) != p.shape:
                    problems.append(
                        f"state {k!r} of parameter {idx} ({p.name or 'unnamed'}): "
                        f"checkpoint {np.shape(v)} vs parameter {p.shape}"
                    )
        if problems:
            raise ValueError(
                f"{name}.load_state_dict failed; nothing was changed:\n  " + "\n  ".join(problems)
            )
        for saved, group in zip(saved_groups, self.param_groups):
            group.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for idx, st in saved_state.items():
            p = index_to_param[int(idx)]
            self.state[p] = {k: _restore(v, p) for k, v in st.items()}

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join(lines + [")"])


def check_torch_flags(name: str, differentiable: bool) -> None:
    """torch's implementation switches (foreach, fused, capturable) change nothing here;
    differentiable=True (autograd through the step) is refused rather than ignored."""
    if differentiable:
        raise NotImplementedError(
            f"{name}: differentiable=True is not supported (the update runs outside the graph)"
        )


def _restore(value, param):
    """A fresh copy of a saved state value; arrays take the parameter's dtype (as PyTorch)."""
    if isinstance(value, Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return np.array(value, dtype=param.dtype if value.dtype.kind == "f" else value.dtype)
    return value
