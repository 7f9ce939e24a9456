"""What every numba kernel here shares: the @kernel decorator, a vectorisable exp, and the
one-line notice printed while kernels compile.

Why a hand-written exp: numba compiles np.exp on a float32 to a call of the C library's expf
for each element, which stops the loop from being vectorised; softmax then spends most of its
time there. `exp` below is the textbook method — split x = n·ln2 + r with |r| ≤ ln2/2, so
eˣ = 2ⁿ·eʳ, take eʳ from a degree-6 Taylor polynomial and build 2ⁿ by writing n straight into
the float's exponent bits. It is plain arithmetic, so the loop vectorises (~10× faster); its
relative error is below 5e-7 on float32. float64 keeps the exact np.exp (the float64 tests
demand agreement with the numpy twin to 1e-12).
"""
import os
import sys
import time
import types as types_module

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import event
from numba.extending import intrinsic, overload

# fastmath flags every kernel is compiled with: only those that change no result beyond the sign
# of a zero, so each kernel stays within a few ulp of its numpy twin. Not "reassoc": it lets LLVM
# rewrite (x − max) − log_total as x − (max + log_total), which at |x| = 3e4 in float32 loses
# three digits; not "contract": a fused x·scale − max skips the rounding of x·scale that the twin
# (and torch) do; not "arcp"/"afn": reciprocal-square-root estimates; not "nnan"/"ninf": the
# kernels test for −inf (fully masked rows) and must keep NaN visible to anomaly mode. A sum
# that must vectorise is compiled with "reassoc" on its own (softmax.row_sum): there the flag
# only reorders the additions, the freedom numpy's pairwise sum takes too.
FASTMATH = {"nsz"}


# Entries of the input from which a kernel marked parallel runs on all threads. Starting a
# parallel region of numba's OpenMP pool costs a few µs (its workers spin a while between
# regions); the serial build wins below ~32k entries (~10 µs of a softmax's work), measured with
# benchmarks/kernels.py on 2 cores.
PARALLEL_MIN_WORK = 1 << 15


# A process forked from one whose kernels already ran in parallel must not start a parallel
# region: GNU OpenMP's pool does not survive fork(), and numba aborts the child if it tries
# (a multiprocessing.Pool would hang). Such a child runs every kernel serially. The hook is
# registered when the threads first start (a child forked before that may use threads), and
# only if minitensor.config's MINITENSOR_SERIAL_AFTER_FORK is on.
_forked_child = [False]


def _register_fork_hook():
    from .. import config
    if hasattr(os, "register_at_fork") and config.enabled("MINITENSOR_SERIAL_AFTER_FORK"):
        os.register_at_fork(after_in_child=lambda: _forked_child.__setitem__(0, True))


try:                                  # numba's own getter, minus the lock it takes every call
    from numba.np.ufunc.parallel import _get_num_threads as _read_num_threads
except ImportError:                   # pragma: no cover (a numba that moved it)
    _read_num_threads = None
_pool = {"started": False, "cpus": os.cpu_count() or 1, "polite": False}


def _start_pool():
    """First call: start numba's pool, register the fork hook, note the CPUs this process may
    run on (taskset, a container's CPU set) and whether the polite-threads rule is on."""
    from .. import config
    _pool["started"] = True
    _register_fork_hook()
    if hasattr(os, "sched_getaffinity"):
        _pool["cpus"] = len(os.sched_getaffinity(0))
    _pool["polite"] = config.polite_threads() and os.path.exists("/proc/loadavg")


def threads():
    """The number of threads numba's parallel builds use: numba's count (numba.set_num_threads
    changes it), at most the CPUs this process may run on; 1 in a forked child (see above) and,
    with polite threads on, 1 while other processes keep the CPUs busy (`cpus_busy`). Every
    kernel call asks, so after the first call (which starts numba's pool) it reads the number
    directly: numba.get_num_threads() takes a lock each time, a tenth of a small kernel's cost."""
    if _forked_child[0]:
        return 1
    if not _pool["started"]:
        _start_pool()
        count = numba.get_num_threads()
    else:
        count = _read_num_threads() if _read_num_threads else numba.get_num_threads()
    if _pool["polite"] and count > 1 and cpus_busy(count):
        return 1
    return min(count, _pool["cpus"])


# ---- polite threads: one thread while the machine is busy -------------------------------------

# A parallel region ends when its slowest thread does. When other processes want the same
# cores, one of our threads waits for the scheduler in every region, and the whole step
# crawls; on one thread minitensor runs at the speed of one core instead. Twice a second, one
# of Linux's counters decides: the CPU pressure (the share of time some task waited for a CPU,
# /proc/pressure/cpu) to notice the machine became busy, and the run queue (/proc/loadavg:
# tasks running now) to notice it is free again.
_BUSY_CHECK_SECONDS = 0.5
_BUSY_PRESSURE = 0.10          # some task waited for a CPU 10% of the time: the cores are shared
_busy = {"now": False, "next": 0.0, "stall": None, "at": 0.0}


def _cpu_stall_us():
    """Linux's total time (µs) some task waited for a CPU, or None without /proc/pressure."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def _running_tasks():
    """Tasks running or waiting to run right now, machine-wide (this thread included)."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return 0


def cpus_busy(count):
    """True while other work keeps the CPUs busy (checked at most twice a second): then
    minitensor runs on one thread. Busy when tasks waited for a CPU more than _BUSY_PRESSURE of
    the last interval (or, without pressure counters, more tasks run than there are CPUs); free
    again when the run queue leaves room for our other count − 1 threads."""
    now = time.monotonic()
    if now < _busy["next"]:
        return _busy["now"]
    stall, cpus = _cpu_stall_us(), _pool["cpus"]
    if _busy["now"]:
        _busy["now"] = _running_tasks() + count - 1 > cpus
    elif stall is not None and _busy["stall"] is not None:
        _busy["now"] = (stall - _busy["stall"]) > _BUSY_PRESSURE * 1e6 * (now - _busy["at"])
    elif stall is None:
        _busy["now"] = _running_tasks() > cpus
    _busy.update(next=now + _BUSY_CHECK_SECONDS, stall=stall, at=now)
    return _busy["now"]


class Kernel:
    """A numba kernel compiled two ways from one Python function: `.parallel` (its prange loop
    spread over the threads) and `.serial` (prange runs as range). Calling it picks by the
    size of the first argument, the kernel's main input (see PARALLEL_MIN_WORK), and on one
    numba thread always the serial build: a parallel build on a single thread measured 1.4–2.2×
    slower than the serial one (softmax backward on (512, 32, 32) and (512, 64, 64))."""

    def __init__(self, py_func, flags):
        self.py_func = py_func
        self.parallel = njit(cache=True, fastmath=flags, parallel=True)(py_func)
        # numba's on-disk cache is keyed by the function's name and bytecode, not by the
        # parallel flag: the serial build gets a copy of the function under a name of its own
        serial_func = types_module.FunctionType(py_func.__code__, py_func.__globals__,
                                                py_func.__name__ + "_serial",
                                                py_func.__defaults__, py_func.__closure__)
        serial_func.__qualname__ = py_func.__qualname__ + "_serial"
        self.serial = njit(cache=True, fastmath=flags)(serial_func)
        self.__doc__, self.__name__ = py_func.__doc__, py_func.__name__

    def __call__(self, *args, work=None):
        """Run the kernel; `work` (default: the first argument's size) is what is compared
        with PARALLEL_MIN_WORK."""
        big = (args[0].size if work is None else work) >= PARALLEL_MIN_WORK and threads() > 1
        return (self.parallel if big else self.serial)(*args)


def kernel(parallel=False):
    """@njit with the on-disk cache (compile once per machine, not once per process) and the
    fastmath flags above. parallel=True: the kernel's outer loop is a prange, and it is built
    both parallel and serial (class Kernel)."""
    if parallel:
        return lambda py_func: Kernel(py_func, FASTMATH)
    return njit(cache=True, fastmath=FASTMATH)


# ---- a vectorisable exp for float32 --------------------------------------------------------

@intrinsic
def _float32_from_bits(typingctx, bits):
    """Reinterpret the 32 bits of an int32 as a float32 (no conversion, like a C union)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@njit(fastmath=FASTMATH, inline="always", cache=True)
def _exp_float32(x):
    f = np.float32
    xc = min(max(x, f(-87.0)), f(88.0))                 # keep 2ⁿ a normal float
    n = np.floor(xc * f(1.4426950408889634) + f(0.5))   # n = round(x / ln2)
    # r = x − n·ln2, with ln2 split in a short head and a tail so the subtraction is exact
    r = xc - n * f(0.693359375) - n * f(-2.12194440e-4)
    p = f(1.0 / 720)                                     # eʳ ≈ Σ_{i≤6} rⁱ/i!  (Horner)
    p = p * r + f(1.0 / 120)
    p = p * r + f(1.0 / 24)
    p = p * r + f(1.0 / 6)
    p = p * r + f(0.5)
    p = p * r + f(1.0)
    p = p * r + f(1.0)
    two_n = _float32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))   # 2ⁿ
    result = p * two_n if x == x else x                 # NaN stays NaN (x == x is False)
    return f(0.0) if x < f(-87.0) else result           # e^-inf (a masked score) is exactly 0


def exp(x):
    """eˣ inside kernels: the polynomial above for float32, np.exp for float64."""
    return np.exp(x)


@overload(exp, inline="always")
def _exp_overload(x):
    if x == types.float32:
        return lambda x: _exp_float32(x)
    return lambda x: np.exp(x)


# ---- a maximum that vectorises ---------------------------------------------------------------

@intrinsic
def maximum(typingctx, a, b):
    """max(a, b) of two floats of one type, as LLVM's maxnum: unlike Python's max (a compare
    and a branch), the vectoriser turns a running maximum of maxnum into packed vmaxps — the
    row maximum of a long row runs ~10× faster. A NaN operand is ignored (IEEE maxNum); the
    kernels let NaN reach their output through exp and the sums instead."""
    if not isinstance(a, types.Float) or a != b:
        return None

    def codegen(context, builder, signature, args):
        ty = args[0].type
        fn = builder.module.declare_intrinsic("llvm.maxnum", [ty], ir.FunctionType(ty, [ty, ty]))
        return builder.call(fn, args)
    return a(a, b), codegen


@njit(cache=True, fastmath=FASTMATH | {"nnan"})
def row_max(row):
    """The largest entry of a 1-D array, NaNs ignored. Compiled with "nnan" so that LLVM may
    reorder the running `maximum` into packed vmaxps (it will not reorder a max whose NaN
    behaviour it must keep; maxnum ignores NaN anyway, so the flag changes no result)."""
    largest = row.dtype.type(-np.inf)
    for j in range(row.shape[0]):
        largest = maximum(largest, row[j])
    return largest


# ---- "compiling…" notice ---------------------------------------------------------------------

class _CompileNotice(event.Listener):
    """Print one short line the first time each kernel family (module) compiles in a process.
    Loading a kernel from numba's on-disk cache is not a compile, so this stays quiet then."""

    def __init__(self):
        self.announced = set()

    def on_start(self, ev):
        module = getattr(ev.data["dispatcher"].py_func, "__module__", "") or ""
        if module.startswith("minitensor.kernels.") and not module.endswith(".jit") \
                and module not in self.announced:
            self.announced.add(module)
            family = module.rsplit(".", 1)[-1]
            print(f"minitensor: compiling numba kernels for {family} "
                  f"(first use; cached on disk afterwards)...", file=sys.stderr, flush=True)

    def on_end(self, ev):
        pass


event.register("numba:compile", _CompileNotice())
