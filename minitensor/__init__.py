"""minitensor: a small, readable tensor library with reverse-mode autograd.

    import minitensor as mt
    import minitensor.functional as F

    x = mt.randn(3, 4, requires_grad=True, name="x")
    loss = F.relu(x @ mt.randn(4, 2)).sum()
    loss.backward()          # x.grad now holds d loss / d x
"""
# Thread pools (PERFORMANCE.md item 6; measured again in benchmarks/README.md). These defaults
# (a user's own environment settings win) only work when set before numpy and numba load,
# hence here, first.
# * On two cores or fewer, one thread for numpy's BLAS and for numba: the addition-task training
#   step took 88 ms single-threaded and 532 ms with 2 threads while other processes shared the
#   2 cores (a 2-thread BLAS call waits for a descheduled worker: up to a 16–24 ms time slice);
#   on an idle 2-core machine 2 threads would gain at most ~1.3×.
# * With more threads: idle OpenBLAS and numba workers must not spin and steal the core the
#   other library computes on (3–5× slower steps with the libraries' own defaults). The
#   workqueue layer is numba's simplest pool; it must not be called from several Python threads
#   at once (set NUMBA_THREADING_LAYER=omp or tbb if you need that).
import os as _os
import sys as _sys

if (_os.cpu_count() or 1) <= 2 and "OPENBLAS_NUM_THREADS" not in _os.environ:
    if "numpy" in _sys.modules:    # BLAS already loaded: limit it at run time, if we can
        try:
            import threadpoolctl as _threadpoolctl
            _threadpoolctl.threadpool_limits(1, user_api="blas")
        except ImportError:
            pass
    _os.environ["OPENBLAS_NUM_THREADS"] = "1"
if (_os.cpu_count() or 1) <= 2:
    _os.environ.setdefault("NUMBA_NUM_THREADS", "1")
for _var, _value in (("OPENBLAS_THREAD_TIMEOUT", "4"), ("OMP_WAIT_POLICY", "PASSIVE"),
                     ("NUMBA_THREADING_LAYER", "workqueue")):
    _os.environ.setdefault(_var, _value)

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
