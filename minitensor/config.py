"""Everything `import minitensor` changes in the process, in one place.

minitensor is a library: a user's own numpy code runs in the same process, so each process-wide
setting below is listed with its reason and a switch. Each is applied once, at the top of
`import minitensor`, before numpy or numba load (several only work then). A setting you made
yourself always wins: minitensor never overwrites an `OMP_*`, `GOMP_*`, `NUMBA_*`,
`OPENBLAS_*` or `MALLOC_*` variable you set.

    setting                 switch (environment)                 default
    single-threaded BLAS    MINITENSOR_SINGLE_THREADED_BLAS=0   OPENBLAS_NUM_THREADS=1
    keep freed memory       MINITENSOR_KEEP_FREED_MEMORY=0      glibc mallopt (see _memory.py)
    serial after fork       MINITENSOR_SERIAL_AFTER_FORK=0      forked children run serially
    polite threads          MINITENSOR_POLITE_THREADS=0         GOMP_SPINCOUNT=10000, and
                                                                one thread while the CPUs are
                                                                busy with other work
    all of the above        MINITENSOR_TUNING=0                 (nothing is changed)

`mt.config.report()` prints what was applied in this process and why.

Why each one:

* **single-threaded BLAS.** minitensor runs its parallel work on one thread pool, numba's: the
  kernels' prange loops, and the large matrix products, which numba threads hand to BLAS one
  block each (kernels/fast_matmul). A second pool, OpenBLAS's own threads, would compete with
  numba's for the same cores, and each pool's idle workers spin and steal the core the other
  wants. OPENBLAS_NUM_THREADS is read when numpy loads; if numpy is already loaded, threadpoolctl
  limits it instead (when installed).
* **keep freed memory.** A training step frees and allocates the same arrays every step; by
  default glibc hands large freed blocks back to the kernel and faults them in again next step.
  See `_memory.py`.
* **serial after fork.** GNU OpenMP's thread pool does not survive fork(): numba aborts a
  forked child that starts a parallel region (a `multiprocessing.Pool` would hang). A child
  forked after minitensor's threads started runs every kernel serially (kernels/jit.py).
* **polite threads.** Between two parallel regions, GNU OpenMP's idle workers spin (by default
  for ~300,000 iterations) before they sleep. Alone on a machine that saves a wake-up per region;
  beside other work it steals the cores that work needs, and a region then waits for a worker
  the scheduler has put aside, so two runs at once slow each other down many times over.
  GOMP_SPINCOUNT=10000 keeps a short spin, long enough to bridge the gap between two kernels of
  one step and short enough to give the cores back. And while other processes keep the CPUs
  busy (the kernel's CPU pressure, /proc/pressure/cpu, or the run queue in /proc/loadavg,
  sampled twice a second), minitensor runs on one thread: a parallel region can only finish
  when all of its threads get a core. Numbers: benchmarks/README.md, "Threads on a shared
  machine"; the reasoning: docs/kernels.md.
"""

import os
import sys

TUNING = "MINITENSOR_TUNING"
SPIN_COUNT = "10000"

# switch variable → (what it does, the variables a user may have set that make it stand aside)
SETTINGS = {
    "MINITENSOR_SINGLE_THREADED_BLAS": ("OPENBLAS_NUM_THREADS=1", ("OPENBLAS_NUM_THREADS",)),
    "MINITENSOR_KEEP_FREED_MEMORY": (
        "glibc keeps freed memory for reuse (mallopt)",
        ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"),
    ),
    "MINITENSOR_SERIAL_AFTER_FORK": ("kernels run serially in a forked child", ()),
    "MINITENSOR_POLITE_THREADS": (
        f"GOMP_SPINCOUNT={SPIN_COUNT}; one thread while the CPUs are busy",
        ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"),
    ),
}

applied = {}  # switch → what was done in this process (or why not)


def enabled(switch):
    """True unless the user turned this setting (or all of them, MINITENSOR_TUNING=0) off."""
    return os.environ.get(TUNING, "1") != "0" and os.environ.get(switch, "1") != "0"


def _user_set(names):
    """The first of `names` the user set in the environment, or None."""
    return next((name for name in names if name in os.environ), None)


def _single_threaded_blas():
    if "numpy" in sys.modules:  # BLAS already loaded: limit it at run time, if we can
        try:
            import threadpoolctl

            threadpoolctl.threadpool_limits(1, user_api="blas")
        except ImportError:
            pass
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return "OPENBLAS_NUM_THREADS=1"


def _keep_freed_memory():
    from ._memory import keep_freed_memory

    return "mallopt set" if keep_freed_memory() else "not available here (not glibc)"


def _polite_threads():
    # GNU OpenMP reads its variables once, when numba's OpenMP layer loads (first parallel
    # kernel): setting them now is in time. The one-thread-while-busy rule is kernels/jit.py's.
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return f"GOMP_SPINCOUNT={SPIN_COUNT}; one thread while the CPUs are busy"


_APPLY = {
    "MINITENSOR_SINGLE_THREADED_BLAS": _single_threaded_blas,
    "MINITENSOR_KEEP_FREED_MEMORY": _keep_freed_memory,
    "MINITENSOR_SERIAL_AFTER_FORK": lambda: "on (applied when the threads start)",
    "MINITENSOR_POLITE_THREADS": _polite_threads,
}


def apply():
    """Apply every setting that is switched on and not overridden by the user's own variables;
    record what happened in `applied`. Called once by `import minitensor`."""
    for switch, (_, user_vars) in SETTINGS.items():
        user = _user_set(user_vars)
        if not enabled(switch):
            applied[switch] = "off"
        elif user is not None:
            applied[switch] = f"left alone: you set {user}={os.environ[user]}"
        else:
            applied[switch] = _APPLY[switch]()


def polite_threads():
    """True when the one-thread-while-busy rule is on: switched on, and the user has not
    fixed numba's thread count or OpenMP's wait policy themselves."""
    return (
        applied.get("MINITENSOR_POLITE_THREADS", "").startswith("GOMP_SPINCOUNT")
        and "NUMBA_NUM_THREADS" not in os.environ
    )


def report(file=None):
    """Print each process-wide setting, its switch and what was done in this process."""
    for switch, (what, _) in SETTINGS.items():
        print(
            f"{switch:34s} {what}\n{'':34s} → {applied.get(switch, 'not applied')}",
            file=file or sys.stdout,
        )
