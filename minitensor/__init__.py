"""minitensor: a small, readable tensor library with reverse-mode autograd.

    import minitensor as mt
    import minitensor.functional as F

    x = mt.randn(3, 4, requires_grad=True, name="x")
    loss = F.relu(x @ mt.randn(4, 2)).sum()
    loss.backward()          # x.grad now holds d loss / d x
"""
# Threads (PERFORMANCE.md item 6; measured again in benchmarks/README.md). minitensor runs its
# parallel work on one thread pool, numba's: the kernels' prange loops, and the matrix products,
# which numba kernels hand to BLAS one matrix (or one block of rows) per thread — see
# kernels/matmul.py. numpy's own BLAS therefore runs single-threaded: two pools on the same
# cores steal them from each other (a training step took 532 ms instead of 88 when a 2-thread
# OpenBLAS shared 2 cores with other work). This default only works when set before numpy
# loads, hence here, first; a user's own OPENBLAS_NUM_THREADS wins. numba picks its threading
# layer (OpenMP where it can) and uses every core; NUMBA_NUM_THREADS=1 makes minitensor serial.
import os as _os
import sys as _sys

if "OPENBLAS_NUM_THREADS" not in _os.environ:
    if "numpy" in _sys.modules:    # BLAS already loaded: limit it at run time, if we can
        try:
            import threadpoolctl as _threadpoolctl
            _threadpoolctl.threadpool_limits(1, user_api="blas")
        except ImportError:
            pass
    _os.environ["OPENBLAS_NUM_THREADS"] = "1"

# Freed arrays stay in the process for the next step instead of being faulted in again (~25%
# of a training step on this project's machine): see _memory.py.
from ._memory import keep_freed_memory as _keep_freed_memory  # noqa: E402

_keep_freed_memory()

from . import autograd, kernels, random  # noqa: E402
from .autograd import detect_anomaly, enable_grad, is_grad_enabled, no_grad
from .creation import (arange, eye, full, full_like, ones, ones_like, rand, rand_like, randint,
                       randn, randn_like, tensor, zeros, zeros_like)
from .function import Context, Function, ShapeError, unbroadcast
from .gradcheck import GradcheckError, gradcheck
from .random import get_rng_state, manual_seed, set_rng_state
from .scope import current_scope, scope
from .tensor import Tensor, bool_, float32, float64, int32, int64
from .tensor import _install_operators

_install_operators()

from . import functional  # noqa: E402
from . import functional as F  # noqa: E402,F401
from .functional import cat, chunk, concat, split, stack, where  # noqa: E402
from .kernels import get_backend, set_backend  # noqa: E402
from . import nn  # noqa: E402
from . import viz  # noqa: E402
from . import optim  # noqa: E402
from .io import CheckpointError, load, save  # noqa: E402

__all__ = [
    "Tensor", "Function", "Context", "tensor", "zeros", "ones", "full", "randn", "rand",
    "randint", "arange", "eye", "zeros_like", "ones_like", "full_like", "randn_like",
    "rand_like", "manual_seed", "no_grad", "enable_grad", "detect_anomaly", "gradcheck",
    "scope", "unbroadcast", "float32", "float64", "int32", "int64", "bool_", "nn", "functional",
    "set_backend", "get_backend",
    "optim", "save", "load", "CheckpointError",
]
