"""`Module` and `Parameter`: the building blocks every model is written in (PyTorch's shape).

Assigning a Parameter or a Module to an attribute registers it. Every module knows its parent
and its name there, so it knows its dotted path in the model (``decoder.layers.0.cross_attn``);
calling a module runs `forward` inside that scope, and every op created inside records it.
"""
import weakref
from collections import OrderedDict

import numpy as np

from ..scope import module_scope
from ..tensor import Tensor


class Parameter(Tensor):
    """A Tensor that a Module registers as a learnable weight (requires_grad by default).

    ``.name`` is its dotted path in the model once it belongs to a module tree
    (``encoder.layers.0.self_attn.w_q.weight``).
    """

    def __init__(self, data, requires_grad=True, dtype=None):
        if isinstance(data, Tensor):
            data = data.data
        super().__init__(data, requires_grad=requires_grad, dtype=dtype if dtype is not None
                         else (data.dtype if isinstance(data, np.ndarray) else None))
        self._owner = None      # (weakref to module, attribute name)

    @property
    def name(self):
        if self._owner is None:
            return self._name
        module, attr = self._owner[0](), self._owner[1]
        if module is None:
            return self._name
        path = module.path
        return f"{path}.{attr}" if path else attr

    @name.setter
    def name(self, value):
        self._name = value

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base class of layers and models.

    Subclasses set parameters and submodules as attributes in ``__init__`` and write
    ``forward``; call the module (``model(x)``), not ``forward``, so the scope is recorded.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_local_name", "")
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 f"assigning attributes (assigning {name!r})")
        for store in (self._parameters, self._modules, self._buffers):
            store.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
            value._owner = (weakref.ref(self), name)
        elif isinstance(value, Module):
            self._modules[name] = value
            object.__setattr__(value, "_parent", weakref.ref(self))
            object.__setattr__(value, "_local_name", name)
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        for store in (self._parameters, self._modules, self._buffers):
            store.pop(name, None)
        object.__delattr__(self, name)

    def __getattr__(self, name):
        # only called when normal lookup fails: never return a silent None
        raise AttributeError(f"'{type(self).__name__}' module has no attribute {name!r}")

    def register_buffer(self, name, tensor):
        """A non-learnable tensor saved in state_dict (e.g. a positional-encoding table)."""
        if tensor is not None and not isinstance(tensor, Tensor):
            tensor = Tensor(tensor)
        object.__setattr__(self, name, tensor)
        self._buffers[name] = tensor

    def register_parameter(self, name, param):
        setattr(self, name, param)

    def add_module(self, name, module):
        setattr(self, name, module)

    # ------------------------------------------------------------------ paths and scopes
    @property
    def path(self):
        """Dotted path of this module in its model ('' for the root)."""
        names, m = [], self
        while m._parent is not None:
            parent = m._parent()
            if parent is None:
                break
            names.append(m._local_name)
            m = parent
        return ".".join(reversed(names))

    def __call__(self, *args, **kwargs):
        with module_scope(self.path):
            return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # ------------------------------------------------------------------ traversal
    def children(self):
        return iter(self._modules.values())

    def named_children(self):
        return iter(self._modules.items())

    def named_modules(self, prefix=""):
        """(dotted name, module) for this module and every descendant, each once."""
        seen = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            children = [(f"{name}.{n}" if name else n, c) for n, c in m._modules.items()]
            stack.extend(reversed(children))

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix=""):
        """(dotted name, parameter) for every parameter, each once (tied weights once)."""
        seen = set()
        for mname, m in self.named_modules(prefix):
            for pname, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, prefix=""):
        for mname, m in self.named_modules(prefix):
            for bname, b in m._buffers.items():
                if b is not None:
                    yield (f"{mname}.{bname}" if mname else bname), b

    def num_parameters(self):
        return int(sum(p.size for p in self.parameters()))

    # ------------------------------------------------------------------ modes and helpers
    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def apply(self, fn):
        """Call fn(module) on every submodule (children first) and on self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, dtype):
        """Convert every floating-point parameter and buffer to `dtype` in place."""
        dtype = np.dtype(dtype)
        for _, p in self.named_parameters():
            if p.dtype.kind == "f":
                p._data = p._data.astype(dtype)
                p._vc[0] += 1
        for m in self.modules():
            for bname, b in m._buffers.items():
                if b is not None and b.dtype.kind == "f":
                    b._data = b._data.astype(dtype)
        return self

    def double(self):
        return self.to(np.float64)

    def float(self):
        return self.to(np.float32)

    # ------------------------------------------------------------------ state
    def state_dict(self):
        """{dotted name: numpy array copy} for every parameter and buffer."""
        state = OrderedDict()
        for name, p in self.named_parameters():
            state[name] = p.data.copy()
        for name, b in self.named_buffers():
            state[name] = b.data.copy()
        return state

    def load_state_dict(self, state, strict=True):
        """Copy arrays from `state` into parameters and buffers by name.

        Checks everything first and changes nothing if anything is wrong: one error lists the
        missing, unexpected and shape-mismatched keys. strict=False ignores missing and
        unexpected keys (shape mismatches are always errors). Returns (missing, unexpected).
        """
        own = OrderedDict(list(self.named_parameters()) + list(self.named_buffers()))
        arrays = {k: (v.data if isinstance(v, Tensor) else np.asarray(v)) for k, v in state.items()}
        missing = [k for k in own if k not in arrays]
        unexpected = [k for k in arrays if k not in own]
        mismatched = [f"{k}: checkpoint {arrays[k].shape} vs model {own[k].shape}"
                      for k in own if k in arrays and arrays[k].shape != own[k].shape]
        problems = []
        if strict and missing:
            problems.append("missing keys: " + ", ".join(missing))
        if strict and unexpected:
            problems.append("unexpected keys: " + ", ".join(unexpected))
        if mismatched:
            problems.append("shape mismatches: " + "; ".join(mismatched))
        if problems:
            raise ValueError(f"load_state_dict into {type(self).__name__}: " + " | ".join(problems))
        for k, t in own.items():
            if k in arrays:
                t._data = np.array(arrays[k], dtype=t.dtype, copy=True)
                t._vc[0] += 1
        return missing, unexpected

    # ------------------------------------------------------------------ repr
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        if self._modules:
            lines[0] = f"{type(self).__name__}("
            if self.extra_repr():
                lines.append("  " + self.extra_repr())
            for name, m in self._modules.items():
                child = repr(m).replace("\n", "\n  ")
                lines.append(f"  ({name}): {child}")
            lines.append(")")
            return "\n".join(lines)
        return lines[0] + ")"
