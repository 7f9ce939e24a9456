"""minitensor: a small, readable tensor library with reverse-mode autograd.

import minitensor as mt
import minitensor.functional as F

x = mt.randn(3, 4, requires_grad=True, name="x")
loss = F.relu(x @ mt.randn(4, 2)).sum()
loss.backward()          # x.grad now holds d loss / d x
"""

# Importing changes nothing in the process: the tuning (OpenMP's spin count, BLAS threads,
# malloc) is applied where it is needed, each switch declared once in config.py.
import numpy as np  # noqa: E402

from . import config  # noqa: E402

from . import autograd, kernels, random  # noqa: E402
from .autograd import detect_anomaly, enable_grad, is_grad_enabled, no_grad
from .creation import (
    FloatTensor,
    LongTensor,
    arange,
    empty,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)
from .function import Context, Function, ShapeError, unbroadcast
from .gradcheck import GradcheckError, gradcheck
from .random import Generator, get_rng_state, manual_seed, set_rng_state
from .scope import current_scope, scope
from .tensor import Device as device
from .tensor import Tensor, bool_, float32, float64, int32, int64

from . import functional  # noqa: E402
from . import functional as F  # noqa: E402,F401
from .functional import (
    abs,
    allclose,
    argmax,
    argmin,
    argsort,
    bmm,
    cat,
    chunk,
    clip,  # noqa
    concat,
    cos,
    cumsum,
    einsum,
    exp,
    flatten,
    gather,
    index_select,
    log,
    log_softmax,
    masked_fill,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    multinomial,
    nonzero,
    relu,
    reshape,
    scatter,
    sigmoid,
    sin,
    softmax,
    sort,
    split,
    sqrt,
    squeeze,
    stack,
    std,
    sum,
    tanh,
    topk,
    transpose,
    tril,
    triu,
    unsqueeze,
    var,
    where,
)

clamp = clip

# PyTorch's dtype names (numpy dtypes here): torch.long is int64, torch.float is float32, …
uint8 = np.dtype(np.uint8)
float16 = half = np.dtype(np.float16)
long, int, float, double, bool = int64, int32, float32, float64, bool_  # noqa: A001


class _NoSuchDtype:
    """A torch dtype numpy lacks: the name exists, so a table of dtypes can be written (as
    nanoGPT's {'float32': torch.float32, 'bfloat16': torch.bfloat16, …}); using it as a
    dtype is an error whose message says why."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"minitensor.{self.name} (not available: numpy has no {self.name}; use float32)"


bfloat16 = _NoSuchDtype("bfloat16")

from . import amp, backends, cuda, utils  # noqa: E402

from .kernels import get_backend, set_backend  # noqa: E402
from . import nn  # noqa: E402
from . import viz  # noqa: E402
from . import optim  # noqa: E402
from .io import CheckpointError, load, save  # noqa: E402

__all__ = [
    "Tensor",
    "Function",
    "Context",
    "tensor",
    "zeros",
    "ones",
    "full",
    "randn",
    "rand",
    "randint",
    "arange",
    "eye",
    "zeros_like",
    "ones_like",
    "full_like",
    "randn_like",
    "rand_like",
    "manual_seed",
    "no_grad",
    "enable_grad",
    "detect_anomaly",
    "gradcheck",
    "scope",
    "unbroadcast",
    "float32",
    "float64",
    "int32",
    "int64",
    "bool_",
    "nn",
    "functional",
    "set_backend",
    "get_backend",
    "optim",
    "save",
    "load",
    "CheckpointError",
    "empty",
    "linspace",
    "LongTensor",
    "FloatTensor",
    "from_numpy",
    "device",
    "cuda",
    "uint8",
    "long",
    "int",
    "float",
    "double",
    "bool",
    "abs",
    "allclose",
    "argmax",
    "argmin",
    "bmm",
    "cat",
    "chunk",
    "clamp",
    "clip",
    "concat",
    "cos",
    "exp",
    "flatten",
    "gather",
    "index_select",
    "log",
    "log_softmax",
    "masked_fill",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "nonzero",
    "relu",
    "reshape",
    "sigmoid",
    "sin",
    "softmax",
    "split",
    "sqrt",
    "squeeze",
    "stack",
    "std",
    "sum",
    "tanh",
    "transpose",
    "tril",
    "triu",
    "unsqueeze",
    "var",
    "where",
    "argsort",
    "cumsum",
    "einsum",
    "multinomial",
    "scatter",
    "sort",
    "topk",
    "viz",
    "autograd",
    "config",
    "GradcheckError",
    "ShapeError",
    "current_scope",
    "get_rng_state",
    "set_rng_state",
    "Generator",
    "is_grad_enabled",
    "amp",
    "backends",
    "float16",
    "half",
    "bfloat16",
]
