"""Kernels: the hot loops of a Transformer step, behind one switch.

Ops call only the names below; each dispatches to a numba kernel or to its plain-numpy twin
(same signature, same result) according to the switch in `backend_switch.py`. A kernel is
registered by its names alone: a module here that defines `<name>_numba` beside `<name>_numpy`
gets `kernels.<name>` (found by `_discover` below; nothing else to edit, no list to extend).
The switch:

    MINITENSOR_BACKEND=numpy            # environment variable (default: numba)
    mt.set_backend("numpy"), mt.get_backend()
    with mt.kernels.use_backend("numpy"): ...

One module per family, kernel and twin side by side — read the twin first:

    matmul.py         matmul, matmul_grad_a, matmul_grad_b,  (the numpy twins; the numba
                      linear_grads (a Linear layer's two      products are in fast_matmul/,
                      backward products at once)              loaded on the first numba matmul)
    fast_matmul/      a tile kernel for stacks of small matrices (its register tile in LLVM IR,
                      microkernel.py), numba threads calling BLAS (blas.py) for large products
    erf.py            erf, for mt.erf and GELU's numpy twin (numpy has none)
    softmax.py        softmax_forward/backward (fused scale + mask), log_softmax_forward/backward
    cross_entropy.py  cross_entropy_forward/backward (ignore_index, label smoothing)
    layer_norm.py     layer_norm_forward/backward
    bias_activation.py  bias_activation_forward/backward (a Linear's bias + ReLU or GELU),
                      add_bias (a Linear's bias alone, in place)
    dropout.py        dropout (a counter-based random mask: forward and backward recompute it)
    adam.py           adam_update (Adam's step for one parameter, in place, in one pass)
    flash_attention.py  fused_attention_forward/backward (softmax(Q·Kᵀ·scale + mask)·V by tiles,
                      without the L×L matrix; its tile products call BLAS from fast_matmul/)
    jit.py            the @kernel decorator (kernels built on first call), the thread count
    ownership.py      whose threads the products use, numba's or BLAS's: timed over whole
                      training steps
    numba_helpers.py  what kernels share, loaded with numba: the vectorisable float32 exp,
                      row max/sum/dot, the compile notice
    compile_ahead.py  a helper process that compiles builds into numba's cache on the other
    warm_up.py        core: parallel builds as they are first wanted, and on an empty cache
                      a training step's serial builds, from the step's end

numba is imported on the first numba kernel call, never at import: with MINITENSOR_BACKEND=numpy
a training step runs without it.

Threads: kernels marked parallel split their outer loop over numba's threads (one per core by
default; numba.set_num_threads or NUMBA_NUM_THREADS=1 for serial). Small inputs run serially.

Inputs may be float32 or float64 and non-contiguous views; outputs keep the input dtype.
"""

import importlib
import pkgutil

from .backend_switch import (
    BACKENDS,
    are_deterministic_algorithms_enabled,
    dispatch,
    get_backend,
    lazy,
    set_backend,
    use_backend,
    use_deterministic_algorithms,
)
from .matmul import FAST_PRODUCTS
from .ownership import core_owner, core_owner_trial

# Modules of this package that hold no kernel pair: the switch itself, the decorator, and the
# helpers that import numba (importing them here would load numba at `import minitensor`).
_PLUMBING = frozenset({"backend_switch", "jit", "ownership", "numba_helpers", "warm_up"})


def _pairs(module):
    """(numba kernel, numpy twin) for every `<name>_numpy` defined in `module` beside a
    `<name>_numba`, in the order of definition. A twin imported from elsewhere is not counted
    (bias_activation imports erf's), nor a numpy helper without a kernel (dropout_mask_numpy);
    a `<name>_numba` without its twin is an error: every kernel comes in a pair."""
    names = [a for a in vars(module) if not a.startswith("_")]
    for attr in names:
        if attr.endswith("_numba") and attr.removesuffix("_numba") + "_numpy" not in names:
            file = module.__name__.rsplit(".", 1)[-1]
            raise ImportError(f"kernels/{file}.py: {attr} has no plain-numpy twin")
    pairs = []
    for attr in names:
        twin = getattr(module, attr)
        numba_fn = getattr(module, attr.removesuffix("_numpy") + "_numba", None)
        if attr.endswith("_numpy") and numba_fn and twin.__module__ == module.__name__:
            pairs.append((numba_fn, twin))
    return pairs


def _discover():
    """Every kernel pair of every family module of this package, as public kernels: the one
    convention that registers a kernel (define `<name>_numba` and `<name>_numpy` in a module
    here; `kernels.<name>` then follows the backend switch)."""
    kernels = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.ispkg or info.name in _PLUMBING:
            continue  # fast_matmul is a package the matmul family loads lazily
        module = importlib.import_module(f".{info.name}", __name__)
        kernels += [dispatch(numba_fn, numpy_fn) for numba_fn, numpy_fn in _pairs(module)]
    return tuple(kernels)


KERNELS = _discover()
globals().update({k.__name__: k for k in KERNELS})

# the fast products' other entry points, loaded with them on first use (kernels/fast_matmul)
matmul_route = lazy(FAST_PRODUCTS, "route")  # who computes a @ b on numba: tiles, BLAS, numpy
tiled_matmul = lazy(FAST_PRODUCTS, "tiled_matmul")  # a @ b by the tile kernel, whatever route says
blas_matmul = lazy(FAST_PRODUCTS, "gemm_product")  # a @ b by the BLAS-calling kernels

__all__ = [k.__name__ for k in KERNELS] + [
    "BACKENDS",
    "KERNELS",
    "get_backend",
    "set_backend",
    "use_backend",
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "core_owner",
    "core_owner_trial",
    "matmul_route",
    "tiled_matmul",
    "blas_matmul",
]
