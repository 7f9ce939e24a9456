"""`Module` and `Parameter`: the building blocks every model is written in (PyTorch's shape).

Assigning a Parameter or a Module to an attribute registers it. Every module knows its parent
and its name there, so it knows its dotted path in the model (``decoder.layers.0.cross_attn``);
calling a module runs `forward` inside that scope, and every op created inside records it.
"""

from __future__ import annotations

import copy
import difflib
import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

import numpy as np

from ..creation import from_numpy
from ..scope import enter_module, leave_module
from ..state import state
from ..tensor import Tensor, check_device
from ..typing import ArrayLike, DType


class Parameter(Tensor):
    """A Tensor that a Module registers as a learnable weight (requires_grad by default).

    ``.name`` is its dotted path in the model once it belongs to a module tree
    (``encoder.layers.0.self_attn.w_q.weight``); before that it is whatever name you gave.
    A numpy array keeps its dtype (as torch.nn.Parameter keeps its tensor's): note that
    ``np.zeros(n)`` is float64, so write ``np.zeros(n, np.float32)`` for a float32 weight.
    """

    def __init__(
        self, data: Tensor | ArrayLike, requires_grad: bool = True, dtype: DType | None = None
    ) -> None:
        self._owners = []  # [(weakref to module, attribute name)], first registration first
        if isinstance(data, Tensor):
            data = data.numpy()
        if dtype is None and isinstance(data, np.ndarray):
            dtype = data.dtype  # keep float64 arrays float64 (Tensor() would make float32)
        super().__init__(data, requires_grad=requires_grad, dtype=dtype)

    def _add_owner(self, module, attr):
        if not any(ref() is module and a == attr for ref, a in self._owners):
            self._owners.append((weakref.ref(module), attr))

    def _owner(self):
        """(module, attribute) of the first module that still holds this parameter, or None.

        A tied weight (one Parameter in two modules) is named after its first owner, which is
        also the name `named_parameters` gives it when the first owner is visited first.
        """
        for ref, attr in self._owners:
            module = ref()
            if module is not None and module._parameters.get(attr) is self:
                return module, attr
        return None

    @property
    def name(self) -> str | None:
        owner = self._owner() if hasattr(self, "_owners") else None
        if owner is None:
            return self._name
        module, attr = owner
        path = module.path
        return f"{path}.{attr}" if path else attr

    @name.setter
    def name(self, value: str | None) -> None:
        self._name = value

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict[int, Any]) -> Parameter:
        # A copy belongs to no module until it is assigned to one (Module.__deepcopy__ does).
        new = Parameter(self._data.copy(), requires_grad=self.requires_grad, dtype=self.dtype)
        new._name = self._name
        memo[id(self)] = new
        new.grad = copy.deepcopy(self.grad, memo)
        return new


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What `load_state_dict(strict=False)` skipped (PyTorch's return value)."""


class StateDictError(RuntimeError):
    """A state dict does not fit the module (RuntimeError, as in PyTorch). Nothing was changed."""


class RemovableHandle:
    """What the register_*_hook methods return: handle.remove() unregisters the hook (also as
    a context manager: the hook is removed on leaving the block)."""

    _next_id = 0

    def __init__(self, table: OrderedDict) -> None:
        self._table = table
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1

    def remove(self) -> None:
        self._table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class Module:
    """Base class of layers and models.

    Subclasses set parameters and submodules as attributes in ``__init__`` and write
    ``forward``; call the module (``model(x)``), not ``forward``, so the scope is recorded.

    >>> class MLP(mt.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.hidden = mt.nn.Linear(2, 8)
    ...         self.out = mt.nn.Linear(8, 1)
    ...     def forward(self, x):                # x (B, 2) → (B, 1)
    ...         return self.out(F.tanh(self.hidden(x)))
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_local_name", "")
        object.__setattr__(self, "training", True)

    @property
    def training(self) -> bool:
        """Training mode (dropout active)? The flag `train()`/`eval()` set, read as False while
        this thread decodes (transformer.decoding runs the model as in eval mode without
        changing the flag, which another thread may be training with)."""
        return self.__dict__["_training"] and not state.eval_mode

    @training.setter
    def training(self, mode: bool) -> None:
        self.__dict__["_training"] = bool(mode)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before "
                f"assigning attributes (assigning {name!r})"
            )
        if (
            name in self._buffers
            and (value is None or isinstance(value, (Tensor, np.ndarray)))
            and not isinstance(value, Parameter)
        ):
            # assigning to a buffer's name updates the buffer (as in PyTorch)
            self.register_buffer(name, value, persistent=name not in self._non_persistent)
            return
        # a Parameter (Module) replacing one keeps its place in named_parameters and
        # state_dict, as in PyTorch (a tied decoder.weight stays before decoder.bias)
        keep = self._parameters if isinstance(value, Parameter) else None
        keep = self._modules if isinstance(value, Module) else keep
        self._unregister(name, keep)
        if isinstance(value, Parameter):
            self._parameters[name] = value
            value._add_owner(self, name)
        elif isinstance(value, Module):
            _check_child_name(self, name)
            self._modules[name] = value
            object.__setattr__(value, "_parent", weakref.ref(self))
            object.__setattr__(value, "_local_name", name)
            _moved[0] += 1
        object.__setattr__(self, name, value)

    def _unregister(self, name, keep=None):
        for store in (self._parameters, self._modules, self._buffers):
            if store is not keep:
                store.pop(name, None)
        self._non_persistent.discard(name)

    def __delattr__(self, name: str) -> None:
        self._unregister(name)
        object.__delattr__(self, name)

    def __getattr__(self, name: str) -> NoReturn:
        # Only called when normal lookup fails: a typo must never read as a silent None.
        if "_parameters" not in self.__dict__ or name.startswith("__"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        raise ModuleAttributeError(self, name)

    def register_buffer(
        self, name: str, tensor: Tensor | ArrayLike | None, persistent: bool = True
    ) -> None:
        """A tensor that is state but not learnable (e.g. a positional-encoding table).

        Buffers follow `to()`/`double()` and, when persistent, are saved in `state_dict`.
        """
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(
                f"register_buffer: buffer name must be a non-empty string without '.', got {name!r}"
            )
        if isinstance(tensor, Parameter):
            raise TypeError(
                f"register_buffer({name!r}): a Parameter is learnable; assign it as "
                f"an attribute instead"
            )
        if tensor is not None and not isinstance(tensor, Tensor):
            tensor = Tensor(np.asarray(tensor), dtype=np.asarray(tensor).dtype)
        if name not in self._buffers and (name in self.__dict__ or hasattr(type(self), name)):
            raise KeyError(
                f"register_buffer: attribute {name!r} already exists in {type(self).__name__}"
            )
        self._unregister(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)
        object.__setattr__(self, name, tensor)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"register_parameter({name!r}): expected an nn.Parameter or None, "
                f"got {type(param).__name__}"
            )
        if param is None:
            self._unregister(name)
            self._parameters[name] = None
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register `module` under `name` (what Sequential, ModuleList and ModuleDict use)."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"add_module({name!r}): {type(module).__name__} is not a Module")
        if name not in self._modules and name in dir(type(self)):
            raise KeyError(
                f"add_module: {name!r} would hide {type(self).__name__}.{name}; choose another name"
            )
        setattr(self, name, module)

    register_module = add_module

    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        """copy.deepcopy(layer) (e.g. to make N identical layers): the copy is a new root whose
        children and parameters point at the copy, not at the original's tree."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key != "_parent":
                object.__setattr__(new, key, copy.deepcopy(value, memo))
        object.__setattr__(new, "_parent", None)
        for child in new._modules.values():
            if child is not None:
                object.__setattr__(child, "_parent", weakref.ref(new))
        _moved[0] += 1
        for name, p in new._parameters.items():
            if p is not None:
                p._add_owner(new, name)
        return new

    # ------------------------------------------------------------------ paths and scopes
    @property
    def path(self) -> str:
        """Dotted path of this module in its model ('' for the root).

        Every call of the module reads it (its ops record it as their scope), so the path is
        remembered, with the count of tree changes it was found at and the weak reference to
        the top module it reached: it holds until a module is placed in a tree anywhere, or
        that top module is gone."""
        known = self.__dict__.get("_path_found")  # (count of tree changes, path, top's ref)
        if known is not None and known[0] == _moved[0]:
            if known[2] is None or known[2]() is not None:
                return known[1]
        names, m, top = [], self, None
        while m._parent is not None:
            top = m._parent
            parent = top()
            if parent is None:
                break
            names.append(m._local_name)
            m = parent
        path = ".".join(reversed(names))
        object.__setattr__(self, "_path_found", (_moved[0], path, top))
        return path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Every op created inside records node.scope == this module's dotted path
        # (scope.module_scope, entered and left here without a context manager's cost)
        s = enter_module(self.path)
        try:
            hooks = self.__dict__.get("_hooks_by_kind")
            if not hooks:
                return self.forward(*args, **kwargs)
            return self._call_with_hooks(hooks, args, kwargs)
        finally:
            leave_module(s)

    def _call_with_hooks(self, hooks, args, kwargs):
        """forward between the forward-pre hooks and the forward hooks (see __call__)."""
        for hook, with_kwargs in list(hooks["forward_pre"].values()):
            changed = hook(self, args, kwargs) if with_kwargs else hook(self, args)
            if changed is not None and with_kwargs:
                args, kwargs = changed
            elif changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        out = self.forward(*args, **kwargs)
        for hook, with_kwargs in list(hooks["forward"].values()):
            changed = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            out = out if changed is None else changed
        return out

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Call hook(module, args) before each forward (hook(module, args, kwargs) with
        with_kwargs=True); what it returns, if not None, replaces the arguments (a tuple, or
        one value; (args, kwargs) with with_kwargs). Returns a handle with remove()."""
        return self._add_hook("forward_pre", hook, prepend, with_kwargs)

    def register_forward_hook(
        self,
        hook: Callable[..., Any],
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:
        """Call hook(module, args, output) after each forward (hook(module, args, kwargs,
        output) with with_kwargs=True); what it returns, if not None, replaces the output.
        Returns a handle with remove(). always_call= is accepted for torch's signature."""
        return self._add_hook("forward", hook, prepend, with_kwargs)

    def _add_hook(self, kind, hook, prepend, with_kwargs):
        if "_hooks_by_kind" not in self.__dict__:
            object.__setattr__(
                self, "_hooks_by_kind", {"forward_pre": OrderedDict(), "forward": OrderedDict()}
            )
        table = self.__dict__["_hooks_by_kind"][kind]
        handle = RemovableHandle(table)
        table[handle.id] = (hook, with_kwargs)
        if prepend:
            table.move_to_end(handle.id, last=False)
        return handle

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # ------------------------------------------------------------------ traversal
    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def named_modules(
        self, memo: set[Module] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """(dotted name, module) for this module and every descendant, parents before
        children, in registration order; a module reached twice is given once unless
        remove_duplicate=False. memo: a set of modules to skip (and to fill), as in torch."""
        seen = memo if memo is not None else set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if remove_duplicate:
                if m in seen:
                    continue
                seen.add(m)
            yield name, m
            children = [(f"{name}.{n}" if name else n, c) for n, c in m.named_children()]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def _named_members(self, store, prefix, recurse, remove_duplicate=True):
        """(dotted name, tensor) from each module's `store` dict, each tensor once (unless
        remove_duplicate=False)."""
        seen = set()
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for mname, m in modules:
            for name, t in getattr(m, store).items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{mname}.{name}" if mname else name), t

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) for every parameter, each once (tied weights once)."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer) for every buffer, each once."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> Module:
        """The module at dotted path `target` ('' is self), e.g. ``'encoder.layers.0'``."""
        m = self
        for part in target.split(".") if target else []:
            if part not in m._modules:
                done = target[: target.index(part)].rstrip(".") or type(self).__name__
                raise AttributeError(
                    f"get_submodule({target!r}): {done} has no submodule "
                    f"{part!r} (it has: {', '.join(m._modules) or 'none'})"
                )
            m = m._modules[part]
        return m

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path `target` (``'encoder.layers.0.norm.weight'``)."""
        mpath, _, pname = target.rpartition(".")
        m = self.get_submodule(mpath)
        if pname not in m._parameters or m._parameters[pname] is None:
            have = ", ".join(m._parameters) or "none"
            raise AttributeError(
                f"get_parameter({target!r}): {type(m).__name__} has no "
                f"parameter {pname!r} (it has: {have})"
            )
        return m._parameters[pname]

    def num_parameters(self, trainable_only: bool = False) -> int:
        """How many numbers the model learns (tied weights counted once)."""
        return int(
            sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)
        )

    # ------------------------------------------------------------------ modes and helpers
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout active) for this module and every descendant (each child's
        own `train` is called, so a subclass may override it)."""
        object.__setattr__(self, "training", bool(mode))
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: dropout off. Gradients are still recorded (use mt.no_grad())."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient: .grad = None (PyTorch's default), or filled with
        zeros when set_to_none=False."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.numpy()[...] = 0

    def apply(self, fn: Callable[[Module], object]) -> Module:
        """Call fn(module) on every submodule (children first) and on self; returns self.

        Typical use: custom initialisation, ``model.apply(init_weights)``.
        """
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Convert every floating-point parameter (and its grad) and buffer to a dtype in place;
        returns self. torch's forms: to(dtype), to('cpu'), to('cpu', dtype), to(tensor) (its
        dtype), to(device=…, dtype=…, non_blocking=…). minitensor runs on the CPU only: any
        other device is an error.

        Do this before creating the optimizer: its state is made from the parameters it sees.
        """
        dtype = _to_dtype(type(self).__name__, args, kwargs)
        if dtype is None:
            return self
        return self._cast(dtype)

    def cpu(self) -> Module:
        return self

    def cuda(self, device: Any = None) -> NoReturn:
        check_device("cuda", f"{type(self).__name__}.cuda")

    def _cast(self, dtype: DType) -> Module:
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise TypeError(
                f"{type(self).__name__}.to: expected a floating-point dtype, got {dtype}"
            )
        for t in list(self.parameters()) + list(self.buffers()):
            if t.dtype.kind == "f" and t.dtype != dtype:
                t.data = t.numpy().astype(dtype)  # the setter bumps the version
                if t.grad is not None:
                    t.grad = from_numpy(t.grad.numpy().astype(dtype))
        return self

    def double(self) -> Module:
        return self._cast(np.float64)

    def float(self) -> Module:
        return self._cast(np.float32)

    # ------------------------------------------------------------------ state
    def state_dict(
        self,
        *,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
    ) -> dict[str, Any]:
        """{dotted name: numpy array copy} of every parameter and persistent buffer.

        Module by module in registration order, each module's parameters before its buffers (as
        PyTorch); a tied parameter appears under each of its names, as in torch (nanoGPT's
        `transformer.wte.weight` and `lm_head.weight`), so a state dict moves between the two
        libraries with the same keys. Copies, so later training
        does not change a state dict you are about to save. (torch gives detached tensors that
        share memory; here the values are numpy arrays.) keep_vars=True gives the Parameters and
        buffers themselves; prefix is put before every name; destination: a dict to fill.
        """
        state = OrderedDict() if destination is None else destination
        for name, t in self._named_state():
            state[prefix + name] = t if keep_vars else t.numpy().copy()
        return state

    def _named_state(self):
        # every path to every tensor, as torch's state_dict: a tied or shared one more than once
        for mname, m in self.named_modules(remove_duplicate=False):
            items = list(m._parameters.items()) + [
                (k, b) for k, b in m._buffers.items() if k not in m._non_persistent
            ]
            for name, t in items:
                if t is not None:
                    yield (f"{mname}.{name}" if mname else name), t

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Copy arrays from `state_dict` into parameters and buffers by name.

        The values may be numpy arrays, minitensor tensors or torch tensors (a torch model's
        `state_dict()` loads directly when the names match; torch is never imported here).
        Everything is checked first and nothing changes if anything is wrong: one error lists
        the missing keys, the unexpected keys and the shape (or dtype kind) mismatches.
        strict=False skips missing and unexpected keys; mismatches are always errors.
        The values are copied into the existing arrays (so an optimizer keeps seeing them):
        assign=True is not supported. Returns IncompatibleKeys(missing_keys, unexpected_keys).
        """
        state = state_dict
        if assign:
            raise NotImplementedError(
                f"{type(self).__name__}.load_state_dict: assign=True is "
                f"not supported; the values are always copied in"
            )
        if not hasattr(state, "items"):
            raise TypeError(
                f"{type(self).__name__}.load_state_dict: expected a dict of arrays, "
                f"got {type(state).__name__}"
            )
        own = OrderedDict(self._named_state())
        arrays, missing, unexpected, problems = _check_state(own, state, strict)
        if problems:
            raise StateDictError(
                f"load_state_dict into {type(self).__name__} failed; nothing was changed:\n  "
                + "\n  ".join(problems)
                + _nested_hint(state)
            )
        for k, t in own.items():
            if k in arrays:
                # copy into the existing array (views and the optimizer keep seeing it)
                np.copyto(t.numpy(), arrays[k], casting="unsafe")
                t.bump_version()
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ repr
    def extra_repr(self) -> str:
        """One line (or several) describing this module's settings, shown in its repr."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        children = [(name, m) for name, m in self.named_children()]
        if not children and "\n" not in extra:
            return f"{type(self).__name__}({extra})"
        lines = extra.split("\n") if extra else []
        lines += [f"({name}): {_indent(repr(m))}" for name, m in children]
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self) -> list[str]:
        return sorted(
            set(super().__dir__()) | set(self._parameters) | set(self._modules) | set(self._buffers)
        )


def _missing_keys(own, state, arrays, mismatched):
    """The model's names not in `state`. A tensor with several names (a tied weight) counts
    as given when any one of them is (a checkpoint that lists it once still loads); its names
    holding different values are a mismatch (which value is meant cannot be told)."""
    names_of = {}
    for k, t in own.items():
        names_of.setdefault(id(t), []).append(k)
    missing = []
    for names in names_of.values():
        given = [k for k in names if k in arrays]
        if not any(k in state for k in names):
            missing.extend(names)
        elif any(not np.array_equal(arrays[k], arrays[given[0]]) for k in given[1:]):
            mismatched.append(
                f"{' and '.join(given)} name one tied tensor but hold different values"
            )
    return sorted(missing, key=list(own).index)


def _check_state(own, state, strict):
    """What load_state_dict would copy and what stops it: (arrays by name, missing keys,
    unexpected keys, problems), with every shape and dtype-kind mismatch among the problems."""
    arrays, mismatched = {}, []
    for k, v in state.items():
        v = _as_numpy(v)
        if not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf":
            mismatched.append(f"{k}: value is {type(v).__name__}, not a numeric array")
            continue
        arrays[k] = v
    missing = _missing_keys(own, state, arrays, mismatched)
    unexpected = [k for k in state if k not in own]
    for k, t in own.items():
        if k not in arrays:
            continue
        a = arrays[k]
        if a.shape != t.shape:
            mismatched.append(f"{k}: checkpoint {a.shape} vs model {t.shape}")
        elif (a.dtype.kind == "f") != (t.dtype.kind == "f"):
            mismatched.append(f"{k}: checkpoint dtype {a.dtype} vs model {t.dtype}")
    problems = []
    if strict and missing:
        problems.append(f"missing keys ({len(missing)}): " + ", ".join(missing))
    if strict and unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): " + ", ".join(unexpected))
    if mismatched:
        problems.append(f"mismatched ({len(mismatched)}): " + "; ".join(mismatched))
    return arrays, missing, unexpected, problems


def _nested_hint(state):
    """A hint for the commonest mistake: a whole checkpoint passed instead of its model part."""
    nested = [k for k, v in state.items() if isinstance(v, dict)]
    if not nested:
        return ""
    return (
        f"\n  hint: the state holds nested dicts ({', '.join(map(repr, nested))}); "
        f"did you pass a whole checkpoint instead of e.g. checkpoint['model']?"
    )


def _as_numpy(value):
    """A state-dict value as a numpy array: minitensor tensors and numpy arrays directly, torch
    tensors (duck-typed: .detach().cpu().numpy(), so torch need not be imported) by copy,
    numbers as 0-d arrays. Anything else is returned unchanged (and reported)."""
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic, int, float, bool)):
        return np.asarray(value)
    if all(hasattr(value, a) for a in ("detach", "cpu", "numpy")):
        return value.detach().cpu().numpy()
    return value


def _to_dtype(where, args, kwargs):
    """The dtype asked for by Module.to's arguments (None when only a device is given)."""
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "memory_format"}
    if unknown or len(args) > 3:
        raise TypeError(f"{where}.to: unexpected arguments {sorted(unknown) or args}")
    dtype = kwargs.get("dtype")
    check_device(kwargs.get("device"), f"{where}.to")
    for a in args:
        if isinstance(a, bool):  # non_blocking given by position
            continue
        if isinstance(a, (type, np.dtype)):
            # a dtype first: the class np.float64 has dtype/shape attributes of its own and
            # would otherwise be read as a tensor-like
            dtype = a
            continue
        if isinstance(a, str):
            # strings are devices, as in torch ('cpu'); a dtype is given as np.float64 or
            # mt.float64, so "float64" is refused by check_device with the device named
            check_device(a, f"{where}.to")
            continue
        if isinstance(a, Tensor) or (hasattr(a, "dtype") and hasattr(a, "shape")):
            # a tensor gives its dtype (a torch tensor's dtype is not a numpy one: kept as is)
            dtype = a.dtype if isinstance(a, (Tensor, np.ndarray)) else dtype
            continue
        if hasattr(a, "type"):  # a device object (torch.device("cpu"))
            check_device(a, f"{where}.to")
            continue
        dtype = a
    return dtype


class ModuleAttributeError(AttributeError):
    """AttributeError whose message (with a "did you mean" hint) is built only when shown, so
    that hasattr()/getattr(m, name, default) on a module stay cheap."""

    def __init__(self, module: Module, name: str) -> None:
        super().__init__(name)
        self.module, self.attr = module, name

    def __str__(self) -> str:
        m, name = self.module, self.attr
        known = [k for k in dir(m) if not k.startswith("_")]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        where = f" (at {m.path})" if m.path else ""
        return f"'{type(m).__name__}' module{where} has no attribute {name!r}{hint}"


def _indent(text):
    return text.replace("\n", "\n  ")


# How many times a module was placed in a tree (a parent's attribute, a deep copy's child):
# a module's remembered `path` is valid while this count has not changed
_moved = [0]


def _check_child_name(module, name):
    if not isinstance(name, str) or not name or "." in name:
        raise KeyError(
            f"{type(module).__name__}: a submodule name must be a non-empty string "
            f"without '.', got {name!r} (dots separate the levels of a path)"
        )
