"""Layers: Linear, Embedding, LayerNorm, Dropout, activations and containers."""
import math
from collections import OrderedDict

import numpy as np

from .. import functional as F
from ..creation import empty_like_shape
from . import init
from .module import Module, Parameter


class Linear(Module):
    """y = x Wᵀ + b. x (..., in_features) → (..., out_features); weight (out, in).

    Initialised as PyTorch does: weight kaiming_uniform_(a=√5), i.e. U(±1/√in), bias U(±1/√in).
    """

    def __init__(self, in_features, out_features, bias=True, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty_like_shape((out_features, in_features), dtype))
        self.bias = Parameter(empty_like_shape((out_features,), dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Linear in {self.path or 'model'}: input of shape {x.shape} has "
                             f"{x.shape[-1]} features, expected {self.in_features}")
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A table of num_embeddings vectors of size embedding_dim, indexed by integer ids.

    ids (...) → (..., embedding_dim). Initialised N(0, 1) as in PyTorch; the row of
    padding_idx starts at zero and never receives a gradient.
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.weight = Parameter(empty_like_shape((num_embeddings, embedding_dim), dtype))
        self.reset_parameters()

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            from ..autograd import no_grad
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, ids):
        return F.embedding(ids, self.weight, padding_idx=self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class LayerNorm(Module):
    """LayerNorm over the last len(normalized_shape) axes: γ ⊙ (x − μ)/√(σ² + eps) + β."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape), dtype=dtype or np.float32)
            self.bias = Parameter(np.zeros(self.normalized_shape), dtype=dtype or np.float32)
        else:
            self.weight = None
            self.bias = None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Dropout(Module):
    """Zero elements with probability p in training mode (scaled by 1/(1 − p)); identity in eval."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class SiLU(Module):
    def forward(self, x):
        return F.silu(x)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Softmax(Module):
    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return F.softmax(x, axis=self.axis)


class Identity(Module):
    def forward(self, x):
        return x


class Sequential(Module):
    """Modules applied in order; named '0', '1', … (or by an OrderedDict's keys)."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                setattr(self, name, m)
        else:
            for i, m in enumerate(modules):
                setattr(self, str(i), m)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(Module):
    """A list of modules, registered as '0', '1', … (so paths read layers.0, layers.1)."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        setattr(self, str(len(self._modules)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i):
        items = list(self._modules.values())
        if isinstance(i, slice):
            return items[i]
        return items[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    """A dict of modules, registered by key."""

    def __init__(self, modules=None):
        super().__init__()
        for k, m in (modules or {}).items():
            self[k] = m

    def __setitem__(self, key, module):
        setattr(self, key, module)

    def __getitem__(self, key):
        return self._modules[key]

    def __contains__(self, key):
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()
