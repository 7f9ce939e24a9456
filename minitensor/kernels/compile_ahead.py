"""Compile ahead: a kernel's parallel build is compiled in a helper process while this one
goes on with its serial build.

Numba compiles a kernel the first time it is called with new argument types, and a parallel
build takes several times as long as the serial one (its loop is split into a task that
numba's threads run). The first training step of a fresh checkout calls every kernel for the
first time, and waiting for each parallel build there costs seconds. But the two builds give
the same numbers to the bit (jit.py: each row, and each partial sum of a reduction, is
computed the same way whatever the thread count). So the first time a kernel wants its
parallel build, it runs its serial build instead — compiled here, in a fraction of the time —
and a helper process (`python -m minitensor.kernels.compile_ahead`, one per process that
needs it) compiles the parallel build into numba's on-disk cache, on another core. Once the
helper says it is there, the next call loads it from the cache and runs on all threads.

The ownership trial (ownership.py) waits until nothing is being compiled ahead: it times
numba's threads only with their parallel builds in place.

Only kernels that are names of their module qualify (the helper finds them by name), and
only the first signature of each (later ones compile here, as without this module). A kernel
whose parallel build is already in the cache is never sent. The switch:

    MINITENSOR_COMPILE_AHEAD=0     compile every build here, when it is first called
"""

import atexit
import importlib
import json
import os
import select
import subprocess
import sys

import numpy as np

from .. import config

_helper = {"process": None, "pid": None, "pending": set(), "failed": False}


def enabled() -> bool:
    """Whether a parallel build may be compiled ahead: the switch, a helper that has not
    failed, and pipes that select() can watch (not on Windows)."""
    if sys.platform == "win32" or _helper["failed"]:
        return False
    return config.enabled("MINITENSOR_COMPILE_AHEAD")


def pending() -> bool:
    """True while the helper is still compiling a parallel build this process asked for."""
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


def request(kernel_module, name, args):
    """Ask the helper to compile the parallel build of kernel `name` of `kernel_module` for
    these arguments' types; False if that cannot be asked (then compile it here)."""
    described = describe(args)
    if described is None or not _start():
        return False
    line = json.dumps({"module": kernel_module, "name": name, "args": described})
    try:
        _helper["process"].stdin.write(line + "\n")
        _helper["process"].stdin.flush()
    except OSError:
        _helper["failed"] = True
        return False
    _helper["pending"].add((kernel_module, name))
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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        _helper["process"] = subprocess.Popen(
            [sys.executable, "-m", "minitensor.kernels.compile_ahead"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
    except OSError:
        _helper["failed"] = True
        return False
    _helper["pid"], _helper["pending"] = os.getpid(), set()
    atexit.register(_stop)
    return True


def _read_answers():
    """Take every answer the helper has written so far, without waiting for more."""
    process = _helper["process"]
    if process is None or _helper["pid"] != os.getpid():
        _helper["pending"].clear()
        return
    while _helper["pending"] and select.select([process.stdout], [], [], 0)[0]:
        answer = process.stdout.readline()
        if not answer:  # the helper is gone: compile everything here from now on
            _helper["pending"].clear()
            _helper["failed"] = True
            return
        done = json.loads(answer)  # not ok: the build compiles here at its next call
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
    "ok"}."""
    for line in lines:
        asked = json.loads(line)
        ok = True
        try:
            lazy = getattr(importlib.import_module(asked["module"]), asked["name"])
            lazy.build().parallel.compile(numba_types(asked["args"]))
        except Exception as error:  # noqa: BLE001 — the asking process compiles it itself
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            print(
                f"minitensor compile ahead: {asked['name']} compiles in the asking process "
                f"instead ({type(error).__name__}: {first_line})",
                file=sys.stderr,
            )
            ok = False
        out.write(json.dumps({"module": asked["module"], "name": asked["name"], "ok": ok}) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()
