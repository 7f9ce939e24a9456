"""Every switch minitensor reads, declared once in one table, and the process-wide tuning they
control — none of which, but one setting of numpy's BLAS, happens at `import minitensor`.

minitensor is a library: a user's own numpy code and the programs they start run beside it, so
importing it changes no environment variable, no thread count of numpy's BLAS and no malloc
setting (tests/test_config.py checks this in a child process); the one thing it sets is how
long numpy's idle BLAS workers spin (below). The
tuning that makes training fast is applied where it is needed, and only there:

* **numba's OpenMP pool** (polite threads). Between two parallel regions, GNU OpenMP's idle
  workers spin (by default ~300,000 iterations) before they sleep: beside other work they steal
  the cores that work needs. GOMP_SPINCOUNT=10000 keeps a spin short enough to give the cores
  back and long enough to bridge the gap between two kernels of one step. GNU OpenMP reads it
  once, when its library loads — when numba's pool starts, at the first parallel kernel — so
  minitensor sets it for that moment only (`openmp_environment`) and then puts `os.environ`
  back: the processes you start inherit your environment, not ours. And while other processes
  keep the CPUs busy, kernels run on one thread (kernels/jit.py, `cpus_busy`): a parallel
  region can only finish when all of its threads get a core.
* **BLAS inside our own threads.** The "gemm" route of kernels/fast_matmul has numba's threads
  each call numpy's BLAS on a block of the product. While they do, BLAS's own thread count is
  held at one (kernels/fast_matmul/blas.py, `one_blas_thread`) and set back right after, so two
  thread pools never share the cores; so are minitensor's own np.matmul calls. Everywhere else
  — your own numpy code — BLAS keeps the threads it has.
* **OpenBLAS's spin** (short BLAS spin), the one setting made at import. After each product on
  BLAS's own threads, OpenBLAS's idle workers spin for 2**28 clock cycles (a tenth of a
  second) before they sleep; any numba kernel on two threads in that time shares a core with a
  spinning worker and runs at half speed (benchmarks/README.md, "OpenBLAS's spinning
  workers"). OpenBLAS reads OPENBLAS_THREAD_TIMEOUT once, as numpy loads it, so `import
  minitensor` sets 20 (2**20 cycles) for that moment only (`blas_environment`) and puts
  `os.environ` back. Where numpy was imported first, OpenBLAS is asked to read it again and
  its idle workers are stopped; they restart with the short timeout (`reread_blas_spin`).
  Products that follow each other keep the workers awake; what changes is that they sleep
  once the products stop, so that the ownership trial (kernels/ownership.py) can try BLAS's
  threads for products and numba's for kernels, both.
* **malloc** (keep freed memory, `_memory.py`): a training step frees and allocates the same
  arrays every step, and glibc by default hands large freed blocks back to the kernel and
  faults them in again. Set when the first optimizer is created (a training process), not at
  import.
* **serial after fork.** GNU OpenMP's pool does not survive fork(): a child forked after
  minitensor's threads started runs every kernel serially (kernels/jit.py).

A variable you set yourself always wins: minitensor never overrides an `OPENBLAS_*`, `OMP_*`,
`GOMP_*`, `NUMBA_*` or `MALLOC_*` variable you set. `mt.config.report()` prints every switch,
its value and what was done in this process.
"""

import contextlib
import os
import sys
from typing import NamedTuple

SPIN_COUNT = "10000"
# OpenBLAS's idle workers spin 2**28 clock cycles (a tenth of a second) after a call before
# they sleep; at 20 they spin 2**20, 256 times shorter: still long enough to bridge the
# products of one layer
BLAS_THREAD_TIMEOUT = "20"
# ... and 2**24 (a few milliseconds) while BLAS's threads alone own the cores
# (`blas_spin_for_owner`): long enough to bridge the serial kernels between two products
BLAS_OWNER_THREAD_TIMEOUT = "24"


class Switch(NamedTuple):
    """One environment variable minitensor reads: its default, what it does and why."""

    name: str
    default: str
    effect: str
    why: str
    user_vars: tuple = ()  # your own variables that make this tuning stand aside


SWITCHES = {
    switch.name: switch
    for switch in (
        Switch(
            "MINITENSOR_BACKEND",
            "numba",
            "who runs the hot loops: numba kernels, or 'numpy', their plain twins",
            "read the twin, time the kernel (kernels/backend_switch.py); read when kernels load",
        ),
        Switch(
            "MINITENSOR_TUNING",
            "1",
            "0 turns off every tuning below at once",
            "to see the process exactly as numpy and numba leave it",
        ),
        Switch(
            "MINITENSOR_POLITE_THREADS",
            "1",
            f"GOMP_SPINCOUNT={SPIN_COUNT} while numba's pool starts; one thread while the CPUs "
            "are busy",
            "idle OpenMP workers spin and steal the cores other work needs",
            ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"),
        ),
        Switch(
            "MINITENSOR_SHORT_BLAS_SPIN",
            "1",
            f"OPENBLAS_THREAD_TIMEOUT={BLAS_THREAD_TIMEOUT} while numpy's OpenBLAS loads (or "
            "re-reads its settings, if numpy was imported first): its idle workers sleep after "
            "2**20 clock cycles, not 2**28 (2**24 while BLAS's threads alone own the cores)",
            "a spinning BLAS worker halves numba's parallel kernels for a while after every "
            "product on BLAS's threads; short, the 'both' owner can be tried (ownership.py)",
            ("OPENBLAS_THREAD_TIMEOUT",),
        ),
        Switch(
            "MINITENSOR_KEEP_FREED_MEMORY",
            "1",
            "glibc keeps freed memory for reuse (mallopt), from the first optimizer on",
            "a step frees and re-allocates the same arrays; faulting them in again is slow",
            ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"),
        ),
        Switch(
            "MINITENSOR_SERIAL_AFTER_FORK",
            "1",
            "a process forked after our threads started runs every kernel serially",
            "GNU OpenMP's pool does not survive fork(); numba aborts a child that uses it",
        ),
        Switch(
            "MINITENSOR_COMPILE_AHEAD",
            "1",
            "a kernel's parallel build compiles in a helper process while its serial build runs "
            "(the same numbers, on one thread)",
            "a parallel build takes seconds to compile, on one core, at a fresh checkout's "
            "first training step (kernels/compile_ahead.py)",
        ),
        Switch(
            "MINITENSOR_ATTENTION_TIMING",
            "1",
            "between 64 and 256 keys, attention's two paths (the fused node, the softmax node) "
            "are timed once per layout and the faster kept; 0: the fused node there",
            "which is faster depends on the machine and on d_k (ops/attention.py)",
        ),
        Switch(
            "MINITENSOR_CORE_OWNER",
            "trial",
            "whose threads the matrix products use: timed over whole training steps ('trial'), "
            "or fixed: 'numba', 'blas' or 'both'",
            "a product timed alone cannot see BLAS's idle workers slowing numba's next kernel "
            "(kernels/ownership.py)",
        ),
        Switch(
            "MINITENSOR_NO_BLAS_KERNELS",
            "0",
            "1: numba's threads never call BLAS themselves; every product is np.matmul's",
            "an escape hatch should a numpy build ship a BLAS that kernels/fast_matmul misreads",
        ),
        Switch(
            "MINITENSOR_FUZZ",
            "ci",
            "tests only: the fuzzer's hypothesis profile, 'ci' (a small sample) or 'thorough'",
            "CI runs a few seconds of it; a developer runs thousands of programs",
        ),
        Switch(
            "MINITENSOR_FUZZ_LOG",
            "",
            "tests only: a file the fuzzer appends one line per program to",
            "to count what a fuzz run drew",
        ),
    )
}

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")

applied = {}  # switch → what was done in this process (or why not), filled as it happens


def value(name: str) -> str:
    """The switch's value in this process: the environment's, or its default."""
    return os.environ.get(name, SWITCHES[name].default).strip()


def flag(name: str) -> bool:
    """A yes/no switch read as one: 1/true/yes/on or 0/false/no/off (any case); anything else
    is refused, so that a typo never silently means 'on'."""
    text = value(name).lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise ValueError(
        f"{name}={os.environ[name]!r}: expected 1 or 0 (or true/false, yes/no, on/off)"
    )


def enabled(name: str) -> bool:
    """True unless the user turned this tuning (or all of them, MINITENSOR_TUNING=0) off."""
    return flag("MINITENSOR_TUNING") and flag(name)


def _user_set(names):
    """The first of `names` the user set in the environment, or None."""
    return next((name for name in names if name in os.environ), None)


def _decide(name):
    """Whether tuning `name` applies; records why not in `applied`."""
    user = _user_set(SWITCHES[name].user_vars)
    if not enabled(name):
        applied[name] = "off"
    elif user is not None:
        applied[name] = f"left alone: you set {user}={os.environ[user]}"
    else:
        return True
    return False


@contextlib.contextmanager
def openmp_environment():
    """GOMP_SPINCOUNT for the moment numba's OpenMP library loads (kernels/jit.py starts the
    pool inside this block), then `os.environ` as it was: the library has read it by then."""
    if not _decide("MINITENSOR_POLITE_THREADS"):
        yield
        return
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    try:
        yield
    finally:
        del os.environ["GOMP_SPINCOUNT"]
    applied["MINITENSOR_POLITE_THREADS"] = f"GOMP_SPINCOUNT={SPIN_COUNT} read by numba's pool"


@contextlib.contextmanager
def blas_environment():
    """OPENBLAS_THREAD_TIMEOUT for the moment numpy, and with it its OpenBLAS, loads (the first
    lines of minitensor/__init__.py run inside this block), then `os.environ` as it was.
    OpenBLAS reads the variable as its library loads: if numpy was imported before
    minitensor, it is too late here, and kernels/fast_matmul/blas.py has OpenBLAS read it
    again instead (`reread_blas_spin`)."""
    if "numpy" in sys.modules:  # too late: kernels/fast_matmul/blas.py has BLAS read it again
        yield
        return
    if not _decide("MINITENSOR_SHORT_BLAS_SPIN"):
        yield
        return
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = BLAS_THREAD_TIMEOUT
    try:
        yield
    finally:
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]
    applied["MINITENSOR_SHORT_BLAS_SPIN"] = (
        f"OPENBLAS_THREAD_TIMEOUT={BLAS_THREAD_TIMEOUT} read as numpy's BLAS loaded"
    )


def reread_blas_spin(read_environment, stop_workers) -> None:
    """The short spin where numpy was imported before minitensor, so that it does not depend on
    the order of two imports: OPENBLAS_THREAD_TIMEOUT is set for a moment while OpenBLAS reads
    its environment again (`read_environment`, OpenBLAS's openblas_read_env), then its idle
    workers are stopped (`stop_workers`, blas_thread_shutdown_, what OpenBLAS itself does
    before a fork); it starts them again at its next product on several threads, and they read
    the timeout as they start. Run once, as minitensor's BLAS layer loads (at the first
    numba-side matrix product); nothing is done where the timeout was set as numpy loaded, the
    switch is off, you set the variable, or numpy's BLAS has no such functions (not OpenBLAS).
    Stopping the workers assumes no other thread of yours is inside a BLAS call at that moment
    (as OpenBLAS assumes before a fork); MINITENSOR_SHORT_BLAS_SPIN=0 leaves them alone."""
    name = "MINITENSOR_SHORT_BLAS_SPIN"
    if name in applied or not _decide(name):  # set as numpy loaded, or not ours to set
        return
    if read_environment is None or stop_workers is None:
        applied[name] = "not set: numpy was imported first, and its BLAS cannot re-read settings"
        return
    _restart_blas_workers(read_environment, stop_workers, BLAS_THREAD_TIMEOUT)
    applied[name] = (
        f"OPENBLAS_THREAD_TIMEOUT={BLAS_THREAD_TIMEOUT} re-read by numpy's BLAS, which had loaded "
        "before minitensor; its workers restarted"
    )


def _restart_blas_workers(read_environment, stop_workers, timeout):
    """OPENBLAS_THREAD_TIMEOUT=timeout for OpenBLAS's idle workers: set for a moment while
    OpenBLAS reads its environment again (`read_environment`, openblas_read_env), then the
    workers are stopped (`stop_workers`, blas_thread_shutdown_); OpenBLAS starts them again at
    its next product on several threads, and they read the timeout as they start."""
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = timeout
    try:
        read_environment()
    finally:
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]
    stop_workers()


_blas_spin_now = [BLAS_THREAD_TIMEOUT]  # the timeout OpenBLAS's workers have, where we set it


def blas_spin_for_owner(owner, read_environment, stop_workers) -> None:
    """BLAS's idle workers spin 2**24 clock cycles after a call (BLAS_OWNER_THREAD_TIMEOUT)
    while its threads alone own the cores (kernels/ownership.py, "blas"), 2**20 otherwise.
    Under that owner numba's pool is idle, so a spinning worker takes no core minitensor's own
    work wants; and between two products of a step, serial kernels (GELU, softmax, layer norm)
    may run for a millisecond, longer than the short spin: the next product then waits for
    the worker to wake, which on a virtual machine cost a product up to half its time again
    (benchmarks/README.md, "BLAS's workers stay awake while BLAS owns the cores"). Under any
    other owner numba's kernels run beside BLAS's products, and the short spin keeps a worker
    from taking their core. Restarts the workers only when the timeout changes, and only
    where minitensor set the short spin itself (not where you set OPENBLAS_THREAD_TIMEOUT, or
    turned MINITENSOR_SHORT_BLAS_SPIN off, or numpy's BLAS cannot re-read its settings).
    Stopping the workers assumes, as `reread_blas_spin` does, that no other thread of yours is
    inside a BLAS call then: the owner changes at the end of an optimizer step."""
    ours = applied.get("MINITENSOR_SHORT_BLAS_SPIN", "").startswith("OPENBLAS_THREAD_TIMEOUT=")
    if not ours or read_environment is None or stop_workers is None:
        return
    timeout = BLAS_OWNER_THREAD_TIMEOUT if owner == "blas" else BLAS_THREAD_TIMEOUT
    if timeout != _blas_spin_now[0]:
        _restart_blas_workers(read_environment, stop_workers, timeout)
        _blas_spin_now[0] = timeout


def blas_spin_is_short() -> bool:
    """True when numpy's OpenBLAS workers sleep soon after a call: minitensor set the timeout
    as numpy loaded, or you set OPENBLAS_THREAD_TIMEOUT yourself to at most ours."""
    if applied.get("MINITENSOR_SHORT_BLAS_SPIN", "").startswith("OPENBLAS_THREAD_TIMEOUT="):
        return True
    yours = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip()
    return yours.isdigit() and int(yours) <= int(BLAS_THREAD_TIMEOUT)


def keep_freed_memory() -> None:
    """Keep freed memory for reuse (_memory.py), once per process; called when the first
    optimizer is created."""
    if "MINITENSOR_KEEP_FREED_MEMORY" in applied or not _decide("MINITENSOR_KEEP_FREED_MEMORY"):
        return
    from ._memory import keep_freed_memory as set_malloc

    done = set_malloc()
    applied["MINITENSOR_KEEP_FREED_MEMORY"] = "mallopt set" if done else "not glibc: nothing set"


def polite_threads() -> bool:
    """True when the polite-threads rule is on: switched on, and the user has not fixed
    numba's thread count or OpenMP's wait policy or spin count themselves."""
    user = _user_set(SWITCHES["MINITENSOR_POLITE_THREADS"].user_vars + ("NUMBA_NUM_THREADS",))
    return enabled("MINITENSOR_POLITE_THREADS") and user is None


def report(file=None) -> None:
    """Print every switch: its value here (or default), what it does, why, and what was done
    in this process so far."""
    out = file or sys.stdout
    for switch in SWITCHES.values():
        set_here = "" if switch.name in os.environ else " (default)"
        print(f"{switch.name}={value(switch.name)}{set_here}", file=out)
        print(f"    {switch.effect}\n    why: {switch.why}", file=out)
        if switch.name in applied:
            print(f"    in this process: {applied[switch.name]}", file=out)
