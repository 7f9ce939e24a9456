"""Layers: Linear, Embedding, LayerNorm, Dropout, activations and containers."""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any

import numpy as np

from .. import functional as F
from ..autograd import no_grad
from ..creation import empty_like_shape
from ..tensor import Tensor
from ..typing import ArrayLike, DType
from . import init
from .module import Module, Parameter, _indent, check_device


class Linear(Module):
    """y = x Wᵀ + b. x (..., in_features) → (..., out_features); weight (out, in), bias (out,).

    Initialised as PyTorch does: weight kaiming_uniform_(a=√5), i.e. U(±1/√in), bias U(±1/√in).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        check_device(device, "Linear")
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty_like_shape((out_features, in_features), dtype))
        if bias:
            self.bias = Parameter(empty_like_shape((out_features,), dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Embedding(Module):
    """A table of num_embeddings vectors of size embedding_dim, indexed by integer ids.

    ids (...) → (..., embedding_dim). Initialised N(0, 1) as in PyTorch; the row of
    padding_idx starts at zero and never receives a gradient (so it stays zero under SGD and
    Adam without weight decay).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        check_device(device, "Embedding")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx {padding_idx} is outside a table of "
                    f"{num_embeddings} rows"
                )
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(empty_like_shape((num_embeddings, embedding_dim), dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, ids: Tensor | ArrayLike) -> Tensor:
        return F.embedding(ids, self.weight, padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class LayerNorm(Module):
    """γ ⊙ (x − μ)/√(σ² + eps) + β over the last len(normalized_shape) axes (each token's
    features). x (..., *normalized_shape) → same shape. γ starts at 1 and β at 0."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        check_device(device, "LayerNorm")
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        dtype = np.dtype(dtype or np.float32)
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, dtype))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = Parameter(np.zeros(self.normalized_shape, dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class Dropout(Module):
    """Zero elements with probability p in training mode (scaling the rest by 1/(1 − p));
    identity in eval mode. Draws from the generator `mt.manual_seed` seeds."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class ReLU(Module):
    """max(x, 0), elementwise. inplace is accepted for torch's signature; the result is a new
    tensor either way (autograd here never overwrites an input)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """x·Φ(x) elementwise; approximate='tanh' uses the tanh formula (as GPT-2 did)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """x·sigmoid(x), elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


def _implicit_dim(name, ndim):
    """torch's legacy axis when Softmax/LogSoftmax get no dim: 0 for 0-, 1- and 3-D input,
    1 otherwise, with torch's deprecation warning (always pass dim=)."""
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call "
        f"to include dim=X as an argument.",
        UserWarning,
        stacklevel=4,
    )
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    """softmax over axis `dim` (numpy's spelling `axis=` works too): each slice along dim
    becomes non-negative and sums to 1."""

    def __init__(self, dim: int | None = None, *, axis: int | None = None) -> None:
        super().__init__()
        self.dim = dim if dim is not None else axis

    def forward(self, x: Tensor) -> Tensor:
        dim = self.dim if self.dim is not None else _implicit_dim(type(self).__name__, x.ndim)
        return F.softmax(x, axis=dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """log(softmax(x)) over axis `dim`, computed stably."""

    def forward(self, x: Tensor) -> Tensor:
        dim = self.dim if self.dim is not None else _implicit_dim(type(self).__name__, x.ndim)
        return F.log_softmax(x, axis=dim)


class Identity(Module):
    """Returns its input (a placeholder, e.g. for an ablation that removes a layer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


# ----------------------------------------------------------------------------- containers


class _IndexedContainer(Module):
    """Children registered as '0', '1', … (so paths read layers.0, layers.1)."""

    def _index(self, i):
        n = len(self._modules)
        if not -n <= i < n:
            raise IndexError(f"{type(self).__name__}: index {i} is out of range for {n} modules")
        return i % n

    def __getitem__(self, i: int | slice) -> Module | list[Module]:
        items = list(self._modules.values())
        if isinstance(i, slice):
            # a plain list: wrapping the modules in a new container would re-parent them and
            # change their paths (and so their parameter names) in this model
            return items[i]
        return items[self._index(i)]

    def __setitem__(self, i: int, module: Module) -> None:
        key = list(self._modules)[self._index(i)]
        self.add_module(key, module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> _IndexedContainer:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> _IndexedContainer:
        for m in modules:
            self.append(m)
        return self


class Sequential(_IndexedContainer):
    """Modules applied in order, each to the previous one's output; named '0', '1', … (or by
    an OrderedDict's keys)."""

    def __init__(self, *modules: Module | OrderedDict[str, Module]) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_IndexedContainer):
    """A list of modules (e.g. the N layers of an encoder). It has no forward: loop over it."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        self.extend(modules)

    def __repr__(self) -> str:
        # PyTorch's compact form: identical consecutive layers print once, "(0-5): 6 x Layer(…)"
        if not self._modules:
            return "ModuleList()"
        groups = []
        for name, m in self._modules.items():
            text = repr(m)
            if groups and groups[-1][2] == text:
                groups[-1][1] = name
                groups[-1][3] += 1
            else:
                groups.append([name, name, text, 1])
        lines = []
        for first, last, text, count in groups:
            label = first if count == 1 else f"{first}-{last}"
            times = "" if count == 1 else f"{count} x "
            lines.append(f"({label}): {times}{_indent(text)}")
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules, registered by key (keys become path parts, so no dots)."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        for k, m in (modules or {}).items():
            self[k] = m

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise KeyError(f"ModuleDict has no key {key!r} (keys: {', '.join(self._modules)})")
        return self._modules[key]

    def __delitem__(self, key: str) -> None:
        delattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self) -> KeysView[str]:
        return self._modules.keys()

    def values(self) -> ValuesView[Module]:
        return self._modules.values()

    def items(self) -> ItemsView[str, Module]:
        return self._modules.items()
