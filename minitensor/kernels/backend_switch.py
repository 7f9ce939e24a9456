"""The one switch that picks who runs the hot loops: numba kernels or their plain-numpy twins.
(Not to be confused with `minitensor/backends.py`, which is torch.backends' stand-in: the GPU
switches that torch code sets and the CPU ignores.)

    MINITENSOR_BACKEND=numpy python train.py      # environment variable, read at import
    mt.set_backend("numpy")                       # process-wide, from code
    with mt.kernels.use_backend("numpy"): ...     # for a block of this thread, restored after

The default is "numba". Both backends compute the same thing
(tests/kernels/test_kernels.py checks it), so a learner can read the numpy twin and time the
numba kernel. A `use_backend` block is per
thread (as torch's `no_grad`): two threads in overlapping blocks each see their own choice, and
other threads keep the process-wide one.
"""

import contextlib
import importlib
import os
import threading

BACKENDS = ("numba", "numpy")
ENV_VAR = "MINITENSOR_BACKEND"


def _check(name, where):
    if name not in BACKENDS:
        raise ValueError(f"{where}: unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return name


_backend = [
    _check(
        os.environ.get(ENV_VAR, "numba").strip().lower() or "numba",
        f"environment variable {ENV_VAR}",
    )
]


class _Block(threading.local):
    """The backend of the innermost `use_backend` block of this thread (None outside any)."""

    name = None


_block = _Block()


def set_backend(name: str) -> None:
    """Choose the backend for every kernel call in this process: 'numba' or 'numpy'. Called
    inside a `use_backend` block, it also changes that block's choice (the caller sees what it
    set); the block's end still restores the thread's previous choice."""
    _backend[0] = _check(name, "set_backend")
    if _block.name is not None:
        _block.name = name


def get_backend() -> str:
    """The backend kernels called from this thread dispatch to: 'numba' or 'numpy'."""
    name = _block.name
    return _backend[0] if name is None else name


@contextlib.contextmanager
def use_backend(name):
    """Run a block of this thread with another backend, then restore the previous one (even on
    error). Other threads are not affected."""
    previous = _block.name
    _block.name = _check(name, "use_backend")
    try:
        yield name
    finally:
        _block.name = previous


_deterministic = [False]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """torch's switch: True makes every result independent of the thread counts (numba's and
    BLAS's) and of timings, so a run repeats bit for bit on any number of cores of one kind of
    CPU; process-wide, as torch's. What it changes: matrix products (fast_matmul.route) take
    one route chosen by shape alone, BLAS's gemm on blocks of rows cut at fixed places with
    BLAS on one thread, instead of whichever of the tile kernel, gemm and np.matmul was timed
    fastest (np.matmul's result can change with BLAS's thread count) — or np.matmul on BLAS's
    threads where BLAS owns the cores and gave that route's bits on the layout
    (fast_matmul.products.same_bits_route); and mt.einsum's products, which numpy hands to
    BLAS, run on one BLAS thread. Everything else is thread-independent already (reductions
    add fixed runs of rows in a fixed order). The cost: products too small to share or where
    np.matmul was faster. warn_only is accepted for
    torch's signature: nothing here is refused, so there is nothing to warn about."""
    _deterministic[0] = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    """True while `use_deterministic_algorithms(True)` is in effect."""
    return _deterministic[0]


def dispatch(numba_fn, numpy_fn):
    """One public kernel: calls `numba_fn` or its twin `numpy_fn` (same signature) according to
    the switch. The two are kept as `.numba` and `.numpy` so benchmarks and tests can call
    either directly."""

    def kernel(*args, **kwargs):
        if (_block.name or _backend[0]) == "numba":
            return numba_fn(*args, **kwargs)
        return numpy_fn(*args, **kwargs)

    kernel.__name__ = kernel.__qualname__ = numpy_fn.__name__.removesuffix("_numpy")
    kernel.__doc__ = numpy_fn.__doc__
    kernel.numba, kernel.numpy = numba_fn, numpy_fn
    return kernel


def lazy(module, name):
    """A stand-in for the function `name` of `module` (relative to minitensor.kernels) that
    imports the module on its first call and calls straight through afterwards. The numba
    kernels of a family go behind it, so that numba, llvmlite and whatever the kernels look for
    at import load on the first numba call, never on the numpy backend."""
    target = []

    def call(*args, **kwargs):
        if not target:
            target.append(getattr(importlib.import_module(module, __package__), name))
        return target[0](*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{module.lstrip('.')}.{name}, imported on first use."
    return call
