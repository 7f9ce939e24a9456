"""Compile ahead: a kernel's parallel build is compiled in a helper process while this one
goes on with its serial build.

Numba compiles a kernel the first time it is called with new argument types, and a parallel
build takes several times as long as the serial one (its loop is split into a task that
numba's threads run). The first training step of a fresh checkout calls every kernel for the
first time, and waiting for each parallel build there costs seconds. But the two builds give
the same numbers to the bit (jit.py: each row, and each partial sum of a reduction, is
computed the same way whatever the thread count). So the first time a kernel wants its
parallel build, it runs its serial build instead — compiled here, in a fraction of the time —
and a helper process (a Python running `helper_main`, one per process that
needs it) compiles the parallel build into numba's on-disk cache, on another core. Once the
helper says it is there, the next call loads it from the cache and runs on all threads.

The ownership trial (ownership.py) waits until nothing is being compiled ahead: it times
numba's threads only with their parallel builds in place.

Only kernels the helper can find qualify — names of their module, or made by a function of
their module that the helper calls again (jit.Kernel.made_by: the products' tile kernels) —
and only the first signature of each (later ones compile here, as without this module). A kernel
whose parallel build is already in the cache is never sent.

The serial builds are compiled ahead too, from the other end. When a process builds its first
kernel and the cache holds no build of Adam's kernel (the last a training step calls), the
helper's first job is warm_up.py: a float32 training step's serial builds, Adam's first and
the forward pass's last, while this process compiles them from the forward pass's first. A
build the helper has finished loads from the cache here instead of compiling. Once this
process's first training step is over, every serial build a step calls is in place, and the
helper skips what is left of its warm-up (kernels the step does not call) for the parallel
builds asked for meanwhile. The switch:

    MINITENSOR_COMPILE_AHEAD=0     compile every build here, when it is first called
"""

import atexit
import importlib
import json
import os
import queue
import select
import subprocess
import sys
import threading

import numpy as np

from .. import config

# unread: bytes of the helper's answers read from the pipe but not yet taken (part of a line)
_helper = {
    "process": None, "pid": None, "pending": set(), "failed": False, "warm": False, "unread": b"",
}  # fmt: skip


def enabled() -> bool:
    """Whether a parallel build may be compiled ahead: the switch, a helper that has not
    failed, and pipes that select() can watch (not on Windows)."""
    if sys.platform == "win32" or _helper["failed"]:
        return False
    return config.enabled("MINITENSOR_COMPILE_AHEAD")


def pending() -> bool:
    """True while the helper is still compiling what this process asked for (a parallel
    build, or the warm-up's serial builds)."""
    if _helper["pending"]:
        _read_answers()
    return bool(_helper["pending"])


# ---- what crosses the pipe: the arguments' types, as JSON --------------------------------------


def describe(args):
    """The numba types of a call's arguments, as JSON-able lists (arrays: dtype, ndim, layout,
    writeable; scalars: their numpy dtype), or None if an argument is of a kind not covered."""
    described = []
    for a in args:
        if isinstance(a, np.ndarray):
            layout = "C" if a.flags.c_contiguous else "F" if a.flags.f_contiguous else "A"
            described.append(["array", a.dtype.str, a.ndim, layout, bool(a.flags.writeable)])
        elif isinstance(a, (bool, np.bool_)):
            described.append(["scalar", "?"])
        elif isinstance(a, (int, float, np.number)):
            described.append(["scalar", np.asarray(a).dtype.str])
        else:
            return None
    return described


def numba_types(described):
    """The numba types `describe` wrote (in the helper, which imports numba)."""
    from numba.core import types
    from numba.np.numpy_support import from_dtype

    made = []
    for kind, dtype, *rest in described:
        scalar = from_dtype(np.dtype(dtype))
        if kind == "scalar":
            made.append(scalar)
        else:
            ndim, layout, writeable = rest
            made.append(types.Array(scalar, ndim, layout, readonly=not writeable))
    return tuple(made)


# ---- this process's side -----------------------------------------------------------------------


def request(kernel_module, name, args, made_by=None):
    """Ask the helper to compile the parallel build of kernel `name` of `kernel_module` for
    these arguments' types; False if that cannot be asked (then compile it here). made_by:
    for a kernel that a function of the module makes (jit.Kernel.made_by), (that function's
    name, its arguments): the helper calls it to get the kernel."""
    described = describe(args)
    if described is None or not _start():
        return False
    message = {"module": kernel_module, "name": name, "args": described}
    if made_by is not None:
        message["made_by"] = [made_by[0], list(made_by[1])]
    if not _send(message):
        return False
    _helper["pending"].add((kernel_module, name))
    return True


WARM_UP = ("minitensor.kernels.warm_up", "serial_builds")  # the warm-up's answer


def warm_up_if_cold():
    """At the first kernel build of a process: if numba's cache is cold (no serial build of
    Adam's kernel in it), ask the helper to compile a training step's serial builds, last
    first (warm_up.py). Once per process; nothing waits for it but the parallel builds."""
    if _helper["warm"] or not enabled():
        return
    _helper["warm"] = True
    if _cache_is_cold() and _start() and _send({"warm": "serial builds"}):
        _helper["pending"].add(WARM_UP)


def first_step_ended():
    """Called when the first training step has ended (ownership.step_ended): every serial
    build a step calls is in place by then, compiled here or loaded from what the helper
    finished. What is left of the helper's warm-up would compile kernels this step does not
    call (GELU's, dropout's, decoding's), before the parallel builds asked for meanwhile:
    the helper is told to skip it."""
    if WARM_UP in _helper["pending"] and _helper["pid"] == os.getpid():
        _send({"warm": "enough"})


def _cache_is_cold():
    """True when numba's cache holds no build of Adam's serial kernel (for any types)."""
    from . import adam

    try:
        index = adam._adam_kernel.build().serial._cache._cache_file._index_path
    except AttributeError:  # another numba's internals: take the cache as warm
        return False
    return not os.path.exists(index)


def _send(message):
    """One line to the helper; False (and no helper from now on) if the pipe is closed."""
    try:
        _helper["process"].stdin.write((json.dumps(message) + "\n").encode())
    except OSError:
        _helper["failed"] = True
        return False
    return True


def ready(kernel_module, name):
    """True once the helper has answered what `request` asked for this kernel: the build is
    in the cache (or the helper could not compile it: then it compiles here, as it would have
    without the helper)."""
    key = (kernel_module, name)
    if key in _helper["pending"]:
        _read_answers()
    return key not in _helper["pending"]


def _start():
    """The helper process, started on first need (again in a forked child: pipes do not cross
    fork()); False if it cannot start."""
    if _helper["process"] is not None and _helper["pid"] == os.getpid():
        return _helper["process"].poll() is None
    # the helper compiles only what it is asked (no helper of its own)
    path = os.pathsep.join(p for p in sys.path if p)
    env = dict(os.environ, PYTHONPATH=path, MINITENSOR_COMPILE_AHEAD="0")
    try:
        _helper["process"] = subprocess.Popen(
            # -c, not -m: the package imports this module, and -m would run a second copy
            [
                sys.executable,
                "-c",
                "from minitensor.kernels import compile_ahead as c; c.helper_main()",
            ],
            # unbuffered bytes both ways: an answer is in the pipe (where select() sees it)
            # until _read_answers takes it, never in a buffer of ours that select() cannot see
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
        )
    except OSError:
        _helper["failed"] = True
        return False
    _helper["pid"], _helper["pending"], _helper["unread"] = os.getpid(), set(), b""
    atexit.register(_stop)
    return True


def _read_answers():
    """Take every answer the helper has written so far, without waiting for more. The pipe is
    read in whole chunks (one may hold several answers, or part of one) and split into lines
    here: a line-reading file object would keep the answers after the first in a buffer of its
    own, where select() does not see them, until the helper wrote again."""
    process = _helper["process"]
    if process is None or _helper["pid"] != os.getpid():
        _helper["pending"].clear()
        return
    while _helper["pending"] and select.select([process.stdout], [], [], 0)[0]:
        chunk = os.read(process.stdout.fileno(), 1 << 16)
        if not chunk:  # the helper is gone: compile everything here from now on
            _helper["pending"].clear()
            _helper["failed"] = True
            return
        *lines, _helper["unread"] = (_helper["unread"] + chunk).split(b"\n")
        for line in lines:
            done = json.loads(line)  # not ok: the build compiles here at its next call
            _helper["pending"].discard((done["module"], done["name"]))


def _stop():
    """At exit: stop the helper (a build it is writing goes to a temporary file first)."""
    process = _helper["process"]
    if process is not None and _helper["pid"] == os.getpid() and process.poll() is None:
        process.kill()
        process.wait()


# ---- the helper's side ------------------------------------------------------------------------


def serve(lines=sys.stdin, out=sys.stdout):
    """The helper's loop: for each request line, compile the kernel's parallel build for the
    described types (into numba's on-disk cache) and answer with a line {"module", "name",
    "ok"}; a {"warm": "serial builds"} line compiles warm_up.py's serial builds, answered as
    WARM_UP, and stops between two of them once a {"warm": "enough"} line has come (the
    asking process's first step is over). The lines are read on a thread of their own, so
    that "enough" is seen while the warm-up runs."""
    asked_lines, enough = queue.Queue(), threading.Event()
    reader = threading.Thread(target=_read_lines, args=(lines, asked_lines, enough), daemon=True)
    reader.start()
    while (asked := asked_lines.get()) is not None:
        if "warm" in asked:
            asked = dict(zip(("module", "name"), WARM_UP))
            ok = _try("the serial builds compile", _warm_up, enough.is_set)
        else:
            ok = _try(f"{asked['name']} compiles", _compile_parallel, asked)
        out.write(json.dumps({"module": asked["module"], "name": asked["name"], "ok": ok}) + "\n")
        out.flush()


def _read_lines(lines, asked_lines, enough):
    """The helper's reader: each request line onto `asked_lines`, "enough" as `enough` set;
    None once the lines end (the asking process closed the pipe)."""
    for line in lines:
        asked = json.loads(line)
        if asked.get("warm") == "enough":
            enough.set()
        else:
            asked_lines.put(asked)
    asked_lines.put(None)


def _compile_parallel(asked):
    module = importlib.import_module(asked["module"])
    if "made_by" in asked:  # a kernel a function of the module makes (jit.Kernel.made_by)
        maker, maker_args = asked["made_by"]
        built = getattr(module, maker)(*maker_args)
    else:
        built = getattr(module, asked["name"]).build()
    built.parallel.compile(numba_types(asked["args"]))


def _warm_up(stop):
    from . import warm_up

    warm_up.serial_builds(stop)


def _try(instead, job, *args):
    """job(*args); True, or False after one line on stderr saying what compiles where now."""
    try:
        job(*args)
    except Exception as error:  # noqa: BLE001 — the asking process compiles it itself
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(
            f"minitensor compile ahead: {instead} in the asking process instead "
            f"({type(error).__name__}: {first_line})",
            file=sys.stderr,
        )
        return False
    return True


def helper_main():
    """The helper process's program."""
    from . import numba_helpers

    numba_helpers.quiet()  # the asking process has said what compiles
    serve()
