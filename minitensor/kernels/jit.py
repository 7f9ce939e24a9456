"""What every numba kernel here shares: the @kernel decorator, the thread count, and (through
numba_helpers.py) a vectorisable exp, a maximum, a row maximum and the compile notice.

This module does not import numba when it is imported: numba loads when the first kernel is
built (`kernel`), when the threads are first asked for (`threads`), or when a kernel module
reads one of numba_helpers' names (`exp`, `row_sum`, ...) from here. That is what lets a
kernel family sit beside its numpy twin in one module while the numpy backend never loads
numba:

    from . import jit
    from .jit import kernel, prange

    @kernel(parallel=True)              # nothing compiled, numba not imported, until first call
    def _rows(x, out):
        for i in prange(x.shape[0]):    # jit.prange: range in Python, numba.prange once built
            out[i] = jit.row_max(x[i])  # jit.<helper>: resolved when numba compiles the kernel

A lazy kernel called by another kernel is built when the caller is (see LazyKernel).
"""

import os
import statistics
import time
import types as types_module

from . import compile_ahead
from .ownership import _owner

# fastmath flags every kernel is compiled with: only those that change no result beyond the sign
# of a zero, so each kernel stays within a few ulp of its numpy twin. Not "reassoc": it lets LLVM
# rewrite (x − max) − log_total as x − (max + log_total), which at |x| = 3e4 in float32 loses
# three digits; not "contract": a fused x·scale − max skips the rounding of x·scale that the twin
# (and torch) do; not "arcp"/"afn": reciprocal-square-root estimates; not "nnan"/"ninf": the
# kernels test for −inf (fully masked rows) and must keep NaN visible to anomaly mode. A sum
# that must vectorise is compiled with "reassoc" on its own (numba_helpers.row_sum): there the flag
# only reorders the additions, the freedom numpy's pairwise sum takes too.
FASTMATH = {"nsz"}


# Entries of the input from which a kernel marked parallel runs on all threads. Starting a
# parallel region of numba's OpenMP pool costs a few µs (its workers spin a while between
# regions), and beside BLAS's threads in a training step each region costs more than that:
# timed over whole steps, kernels under 2¹⁸ entries made no step faster on numba's threads,
# and slower where both pools take turns. A parallel build also takes about a second to
# compile on a fresh checkout, once per kernel, and one that is never asked for is never
# compiled: the addition demo's kernels stay under 2¹⁸, and its cold start no longer waits for
# theirs (benchmarks/README.md, "Parallel builds from 2¹⁸ entries"; benchmarks/kernels.py
# shows a kernel's own crossover on your machine).
PARALLEL_MIN_WORK = 1 << 18


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


_read_num_threads = None  # numba's own getter minus its lock, where numba has one
_pool = {"started": False, "cpus": os.cpu_count() or 1, "polite": False}


def _numba():
    """numba, imported on first need together with numba_helpers (the compile notice and the
    helpers' overloads must be registered before any kernel compiles)."""
    import numba

    from . import numba_helpers  # noqa: F401

    return numba


def _one_blas_thread():
    """numpy's BLAS held at one thread for a block (fast_matmul/blas.py): a parallel kernel's
    threads may call BLAS themselves, and two thread pools on the same cores fight."""
    global _one_blas_thread
    from .fast_matmul.blas import one_blas_thread

    _one_blas_thread = one_blas_thread  # bound once: this runs before every parallel call
    return one_blas_thread()


def _start_pool():
    """First call: start numba's pool, register the fork hook, note the CPUs this process may
    run on (taskset, a container's CPU set) and whether the polite-threads rule is on."""
    global _read_num_threads
    from .. import config

    numba = _numba()
    with config.openmp_environment():  # OpenMP reads its variables as its library loads
        numba.get_num_threads()  # loads numba's threading layer and starts its pool
    try:
        from numba.np.ufunc.parallel import _get_num_threads as _read_num_threads
    except ImportError:  # numba 0.68 has no lock-free getter
        pass
    _pool["started"] = True
    _register_fork_hook()
    if hasattr(os, "sched_getaffinity"):
        _pool["cpu_set"] = os.sched_getaffinity(0)
        _pool["cpus"] = len(_pool["cpu_set"])
    _pool["polite"] = config.polite_threads() and os.path.exists("/proc/loadavg")


# A kernel that sums over rows (a bias's or a LayerNorm weight's gradient) keeps partial sums that
# the threads fill side by side and the caller adds up. How the rows are split must not depend
# on the thread count, or one and two threads would add the same numbers in another order and
# a run would not repeat on another machine: the split depends on the number of rows only.
_ROWS_PER_PART, _MAX_PARTS = 16, 64


def row_parts(n):
    """How many partial sums a kernel summing over n rows keeps (rows split evenly, in order):
    one per 16 rows, at most 64 — whatever the thread count, so the sums are bit for bit the
    same on any number of threads, while up to 64 threads share the work."""
    return max(1, min(_MAX_PARTS, -(-n // _ROWS_PER_PART)))


def threads():
    """The number of threads numba's parallel builds use: `cores()`, or 1 while BLAS's threads
    alone own the cores (ownership.py, "blas": then numba's pool never wakes beside BLAS's;
    under "both" it does). Every kernel call asks."""
    return 1 if _owner[0] == "blas" else cores()


def cores():
    """How many threads minitensor's work may run on now, whichever pool runs it: numba's
    count (numba.set_num_threads or NUMBA_NUM_THREADS changes it), at most the CPUs this
    process may run on; 1 in a forked child (see above) and, with polite threads on, while
    other processes keep the CPUs busy (`cpus_busy`). After the first call (which starts
    numba's pool) it reads numba's count directly: numba.get_num_threads() takes a lock each
    time, a tenth of a small kernel's cost."""
    if _forked_child[0]:
        return 1
    read = _read_num_threads  # set once the pool has started (where numba has it)
    if read is not None:
        count = read()
    else:
        if not _pool["started"]:
            _start_pool()
        count = _numba().get_num_threads()
    if count > 1 and _pool["polite"] and cpus_busy(count):
        return 1
    cpus = _pool["cpus"]
    return count if count < cpus else cpus


# ---- polite threads: one thread while the machine is busy -------------------------------------

# A parallel region ends when its slowest thread does. When other processes want the same
# cores, one of our threads waits for the scheduler in every region, and the whole step
# crawls; on one thread minitensor runs at the speed of one core instead. Twice a second two
# of Linux's counters decide. The CPU pressure (/proc/pressure/cpu: the share of time some
# task waited for a CPU) says whether anything had to wait; the CPU time the *other*
# processes took on the CPUs this process may use (their busy time, /proc/stat, minus this
# process's own, /proc/self/stat) says whether they left our threads room. Busy takes both:
# the pressure alone counts our own threads waiting for each other (BLAS's worker finishing
# its spin while numba's run) and flipped a quiet machine between busy and free every half
# second; the others' time alone counts a process that ran while we did not (two programs
# taking turns). Free again once the others leave room (benchmarks/README.md, "The polite
# rule counts the others").
_BUSY_CHECK_SECONDS = 0.5
_BUSY_PRESSURE = 0.10  # some task waited for a CPU 10% of the time
_BUSY_SHARE = 0.25  # the others took a quarter of a CPU more than our threads leave free
_busy = {"now": False, "next": 0.0, "stall": None, "ticks": None, "at": 0.0}
_monotonic = time.monotonic  # (bound once: every product and kernel call may ask)
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_stall_us():
    """Linux's total time (µs) some task waited for a CPU, or None without /proc/pressure."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def _cpu_ticks():
    """(busy clock ticks of the CPUs this process may run on, this process's own ticks), both
    counted since boot, or None where Linux's /proc does not say."""
    try:
        allowed = _pool.get("cpu_set") or set(range(_pool["cpus"]))
        busy = 0
        with open("/proc/stat") as f:
            for line in f:
                if not line.startswith("cpu"):
                    break
                name, *fields = line.split()
                if name != "cpu" and int(name[3:]) in allowed:
                    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[:7])
                    busy += user + nice + system + irq + softirq
        with open("/proc/self/stat") as f:  # after the name: state, ..., utime, stime
            own = f.read().rsplit(")", 1)[1].split()
        return busy, int(own[11]) + int(own[12])
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
    """True while other processes keep the CPUs busy (checked at most twice a second): then
    minitensor runs on one thread. Busy once, over the last interval, some task waited for a
    CPU more than _BUSY_PRESSURE of the time and the other processes used more of the CPUs this
    process may run on than our `count` threads leave free (by _BUSY_SHARE of a CPU); free again
    once they leave that room. Where /proc/stat cannot be read, the run queue decides: busy
    when more tasks run than there are CPUs, free when it has room for our other threads."""
    now = _monotonic()
    if now < _busy["next"]:
        return _busy["now"]
    stall, ticks, cpus = _cpu_stall_us(), _cpu_ticks(), _pool["cpus"]
    if ticks is None:
        running = _running_tasks()
        _busy["now"] = running + count - 1 > cpus if _busy["now"] else running > cpus
    elif _busy["ticks"] is not None and now > _busy["at"]:
        seconds = now - _busy["at"]
        (busy, own), (busy_then, own_then) = ticks, _busy["ticks"]
        others = ((busy - busy_then) - (own - own_then)) / (_TICKS_PER_SECOND * seconds)
        crowded = others > cpus - count + _BUSY_SHARE
        unknown = stall is None or _busy["stall"] is None  # no pressure counter: crowded decides
        waited = unknown or stall - _busy["stall"] > _BUSY_PRESSURE * 1e6 * seconds
        _busy["now"] = crowded and (_busy["now"] or waited)
    _busy.update(next=now + _BUSY_CHECK_SECONDS, stall=stall, ticks=ticks, at=now)
    return _busy["now"]


def timings_would_mislead():
    """True while a helper process compiles ahead (compile_ahead.py): it takes the other core,
    and a kernel that wants its parallel build runs its serial one meanwhile. A choice timed
    now (the fused attention's tile sizes, a product's route) would be made for another machine
    than the one the program then runs on, and kept for the process: the choosers use their
    default until the helper is done, remember nothing, and time the layout then."""
    return compile_ahead.pending()


def median_times(calls, rounds=5, settle=0.0):
    """The median time (seconds) of `rounds` timed runs of each zero-argument call, after one
    untimed run of each: how a kernel's versions are compared on the running machine (the
    products' tile shapes, the fused attention's tile sizes). The calls take turns in every
    round, so that a moment when the shared machine is busy slows them all, not the one timed
    then; and the median, not the fastest run, because on a busy machine a call on two threads
    now and then gets both cores and runs fast, while most of its runs wait for a core: the
    fastest run would pick it.

    settle: seconds for which each call runs again, untimed (at least once), right before each
    timed run. Calls on different thread pools (numba's, BLAS's) taking turns would each pay
    for waking its pool while the other's idle workers still spin — numba's OpenMP workers for
    about half a millisecond after a parallel region, OpenBLAS's for 2**20 clock cycles — and a
    call on one thread would win for that alone (a product on BLAS's two threads timed right
    after one on numba's lost to BLAS on one thread: benchmarks/README.md, "route timings that
    see each pool settled"). Settled, each is timed as it runs called again and again (a
    product of one layout, layer after layer).

    None, with nothing timed, while `timings_would_mislead` — checked before the calls run
    and after their first run (which may have started the helper that compiles ahead)."""
    if timings_would_mislead():
        return None
    for call in calls:
        call()
    if timings_would_mislead():
        return None
    times = [[] for _ in calls]
    for _ in range(rounds):
        for call, runs in zip(calls, times):
            if settle:
                _run_for(call, settle)
            start = time.perf_counter()
            call()
            runs.append(time.perf_counter() - start)
    return [statistics.median(runs) for runs in times]


def _run_for(call, seconds):
    """call() once, then again until `seconds` have passed since it started."""
    start = time.perf_counter()
    call()
    while time.perf_counter() - start < seconds:
        call()


class Kernel:
    """A numba kernel compiled two ways from one Python function: `.parallel` (its prange loop
    spread over the threads) and `.serial` (prange runs as range). Calling it picks by the
    size of the first argument, the kernel's main input (see PARALLEL_MIN_WORK), and on one
    numba thread always the serial build: a parallel build on a single thread pays the parallel
    loop's scheduling for nothing and was measured slower than the serial one (softmax
    backward; benchmarks/README.md, "Figures behind the source's reasoning").

    one_thread: for a kernel whose prange loop only hands runs of its work to another kernel
    (softmax's, which hands runs of blocks to _softmax_blocks), a Python function taking the
    same arguments that does all the work in one call of that other kernel. It runs where the
    serial build would, and the serial build is then not compiled unless something calls
    `.serial` itself: compiling it means LLVM optimising the other kernel all over again
    inside its loop, 0.4 s of a fresh checkout's first softmax."""

    def __init__(self, py_func, flags, one_thread=None):
        njit = _numba().njit
        self.py_func = py_func
        self.parallel = njit(cache=True, fastmath=flags, parallel=True)(_cache_name(py_func, ""))
        # numba's on-disk cache is keyed by the function's name and bytecode, not by the
        # parallel flag: the serial build gets a copy of the function under a name of its own
        self.serial = njit(cache=True, fastmath=flags)(_cache_name(py_func, "_serial"))
        # What runs where the serial build would (see the class docstring): numba compiles a
        # build at its first call, so a serial build never called is never compiled
        self._on_one_thread = self.serial if one_thread is None else one_thread
        self.__doc__, self.__name__ = py_func.__doc__, py_func.__name__
        self.ahead = None  # compile_ahead.py: None (not asked yet), "waiting" or "done"
        # A kernel made by a function of its module rather than named in it (the products'
        # tile kernels, one per tile shape): (that function's name, its arguments), so that
        # the compile-ahead helper can make it too. Set by the function that makes it.
        self.made_by = None

    def __call__(self, *args, work=None):
        """Run the kernel; `work` (default: the first argument's size) is what is compared
        with PARALLEL_MIN_WORK. While a helper compiles (compile_ahead.py), the serial build
        runs: the same numbers, on one thread."""
        big = (args[0].size if work is None else work) >= PARALLEL_MIN_WORK and threads() > 1
        if not big or self._compiling_ahead(args):
            return self._on_one_thread(*args)
        with _one_blas_thread():  # numba's threads own the cores now (they may call BLAS)
            return self.parallel(*args)

    def _compiling_ahead(self, args):
        """At the first call that wants the parallel build: send it to the helper process
        unless it is in numba's on-disk cache already (or the helper could not find the
        kernel: neither a name of its module nor made by one, `made_by`). Then True while the
        helper compiles anything — this build or another: the helper has the other core then,
        and a parallel build would wait for it at every call."""
        if self.ahead == "done":
            return compile_ahead.pending()
        module, name = self.py_func.__module__, self.py_func.__name__
        if self.ahead is None:
            self.ahead = "done"
            findable = self.made_by is not None or _module_kernel(module, name, self.py_func)
            if compile_ahead.enabled() and findable and not self._cached(args):
                if compile_ahead.request(module, name, args, self.made_by):
                    self.ahead = "waiting"
        if self.ahead == "waiting" and compile_ahead.ready(module, name):
            self.ahead = "done"
        return self.ahead == "waiting" or compile_ahead.pending()

    def _cached(self, args):
        """Whether numba's on-disk cache holds the parallel build for these arguments' types
        (numba's own lookup, as Dispatcher.compile makes it before compiling)."""
        dispatcher = self.parallel
        try:
            signature = tuple(dispatcher.typeof_pyval(a) for a in args)
            return dispatcher._cache.load_overload(signature, dispatcher.targetctx) is not None
        except AttributeError:  # another numba's internals: compile here, not ahead
            return True


# numba's on-disk cache knows a build by its function's name and the time stamp of the file it
# is written in, not by the files of what it calls: a kernel that inlines numba_helpers' exp or
# normal_cdf would be loaded as it was built before numba_helpers.py changed. So each kernel is
# compiled as a copy named after it and a fingerprint of numba_helpers.py's source: a change
# there compiles every kernel anew (once per machine).
_HELPERS_STAMP = []


def _cache_name(py_func, suffix):
    """A copy of py_func named py_func's name + suffix + "_" + numba_helpers.py's fingerprint:
    what numba's cache knows its build by."""
    if not _HELPERS_STAMP:
        import hashlib
        from pathlib import Path

        source = Path(__file__).with_name("numba_helpers.py").read_bytes()
        _HELPERS_STAMP.append(hashlib.sha1(source).hexdigest()[:10])
    return copy_named(py_func, f"{suffix}_{_HELPERS_STAMP[0]}")


def copy_named(py_func, suffix, namespace=None):
    """A copy of py_func (the same code, defaults and closure) named py_func's name + suffix,
    whose globals are `namespace` (default: py_func's own module's)."""
    copy = types_module.FunctionType(
        py_func.__code__,
        py_func.__globals__ if namespace is None else namespace,
        py_func.__name__ + suffix,
        py_func.__defaults__,
        py_func.__closure__,
    )
    copy.__qualname__, copy.__doc__ = py_func.__qualname__ + suffix, py_func.__doc__
    return copy


def _module_kernel(module, name, py_func):
    """True if `name` of `module` is the lazy kernel of py_func (the helper finds it so)."""
    import sys

    lazy = getattr(sys.modules.get(module), name, None)
    return isinstance(lazy, LazyKernel) and lazy.py_func is py_func


def kernel(parallel=False, lazy=True, flags=None, prepare=None, one_thread=None):
    """@njit with the on-disk cache (compile once per machine, not once per process) and the
    fastmath flags above (or `flags`). parallel=True: the kernel's outer loop is a prange, and
    it is built both parallel and serial (class Kernel). lazy=True (the default): nothing is
    built, and numba not imported, until the kernel's first call (class LazyKernel);
    lazy=False builds it now. prepare: a function called before a lazy kernel is built, to
    bind module globals its code reads that the module imports on first need.
    one_thread: see Kernel (a parallel kernel whose loop only hands runs to another kernel)."""
    flags = FASTMATH if flags is None else flags
    if lazy:
        return lambda py_func: LazyKernel(py_func, parallel, flags, prepare, one_thread)
    if parallel:
        return lambda py_func: Kernel(py_func, flags, one_thread)
    return _numba().njit(cache=True, fastmath=flags)


def prange(*args):
    """range, in Python; in a lazy kernel's module it becomes numba.prange when the kernel is
    built, so the module need not import numba to write its parallel loops."""
    return range(*args)


class LazyKernel:
    """A kernel built on its first call: until then numba is not imported. Building replaces,
    in the kernel's module, the names its code uses that numba cannot type as they are: jit's
    `prange` placeholder becomes numba.prange, and another LazyKernel becomes its build (its
    serial build if it is parallel), so lazy kernels may call each other."""

    def __init__(self, py_func, parallel, flags, prepare=None, one_thread=None):
        self.py_func, self._parallel, self._flags = py_func, parallel, flags
        self._prepare, self._one_thread = prepare, one_thread
        self.built = None
        self.__doc__, self.__name__ = py_func.__doc__, py_func.__name__

    def build(self):
        """The compiled kernel (a Kernel if parallel, else a numba dispatcher)."""
        if self.built is None:
            if self._prepare is not None:
                self._prepare()
            numba = _numba()
            compile_ahead.warm_up_if_cold()  # on an empty cache, the helper starts from the end
            _resolve_globals(self.py_func, numba)
            self.built = (
                Kernel(self.py_func, self._flags, self._one_thread)
                if self._parallel
                else numba.njit(cache=True, fastmath=self._flags)(_cache_name(self.py_func, ""))
            )
        return self.built

    def __call__(self, *args, **kwargs):
        return self.build()(*args, **kwargs)


def _resolve_globals(py_func, numba):
    """Put numba's objects in place of the lazy stand-ins among py_func's globals."""
    namespace = py_func.__globals__
    for name in py_func.__code__.co_names:
        value = namespace.get(name)
        if value is prange:
            namespace[name] = numba.prange
        elif isinstance(value, LazyKernel):
            built = value.build()
            namespace[name] = built.serial if isinstance(built, Kernel) else built


_HELPERS = ("exp", "normal_cdf", "maximum", "row_max", "row_sum", "row_dot", "masked_score")


def __getattr__(name):
    """jit.exp, jit.normal_cdf, jit.maximum, jit.row_max, jit.row_sum, jit.row_dot,
    jit.masked_score: numba's helpers (numba_helpers.py), imported on first access."""
    if name in _HELPERS:
        _numba()
        from . import numba_helpers

        return getattr(numba_helpers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
