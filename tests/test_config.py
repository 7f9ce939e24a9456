"""minitensor.config: `import minitensor` changes nothing in the process; every switch is declared
once and reported; the tuning is applied where it is needed, switchable, and stands aside for
the user's own variables; the polite-threads rule (kernels/jit.py)."""

import io
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from minitensor import config
from minitensor.kernels import jit

REPORT = """
import json, os, sys
import numpy as np
from threadpoolctl import threadpool_info  # sets KMP_DUPLICATE_LIB_OK itself, as it imports
before = dict(os.environ)
blas_threads = lambda: sorted({p["num_threads"] for p in threadpool_info()
                               if p["user_api"] == "blas"})
blas_before = blas_threads()
import minitensor as mt
import minitensor.nn, minitensor.optim, minitensor.viz, transformer
blas_after = blas_threads()
x = mt.randn(512, 512, requires_grad=True)
((x @ x).softmax(-1).sum()).backward()   # kernels run: numba's pool starts
mt.optim.Adam([x])                       # a training process: malloc is tuned now
print(json.dumps({
    "env_changed": sorted(k for k in set(before) | set(os.environ)
                          if before.get(k) != os.environ.get(k)),
    "blas": [blas_before, blas_after, blas_threads()],
    "applied": mt.config.applied, "polite": mt.config.polite_threads()}))
"""
VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "GOMP_SPINCOUNT",
    "OMP_WAIT_POLICY",
    "NUMBA_NUM_THREADS",
    "MINITENSOR_TUNING",
    "MINITENSOR_POLITE_THREADS",
    "MINITENSOR_KEEP_FREED_MEMORY",
    "MINITENSOR_NO_BLAS_KERNELS",
    "MINITENSOR_SHORT_BLAS_SPIN",
    "OPENBLAS_THREAD_TIMEOUT",
)


def run_import(**env):
    """import minitensor and run a little work in a fresh process with `env` on top of a
    clean environment."""
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", REPORT],
        env=dict(base, **env),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_import_and_work_leave_the_environment_and_blas_threads_alone():
    """No environment variable changes (children inherit the user's), numpy's BLAS keeps its
    thread count, and the tuning is still applied where it belongs."""
    out = run_import()
    assert out["env_changed"] == []
    blas_before, blas_after, blas_end = out["blas"]
    assert blas_before == blas_after == blas_end
    assert out["applied"]["MINITENSOR_POLITE_THREADS"].startswith("GOMP_SPINCOUNT")
    assert out["applied"]["MINITENSOR_KEEP_FREED_MEMORY"] in (
        "mallopt set",
        "not glibc: nothing set",
    )
    assert out["polite"] is True


def test_the_users_own_variables_win():
    out = run_import(GOMP_SPINCOUNT="5")
    assert out["env_changed"] == []
    assert out["applied"]["MINITENSOR_POLITE_THREADS"].startswith("left alone: you set GOMP")
    assert out["polite"] is False
    assert run_import(NUMBA_NUM_THREADS="1")["polite"] is False
    assert run_import(MALLOC_TRIM_THRESHOLD_="1")["applied"][
        "MINITENSOR_KEEP_FREED_MEMORY"
    ].startswith("left alone")


def test_every_setting_switches_off():
    out = run_import(MINITENSOR_TUNING="0")
    assert set(out["applied"].values()) == {"off"} and out["polite"] is False
    out = run_import(MINITENSOR_POLITE_THREADS="false")
    assert out["applied"]["MINITENSOR_POLITE_THREADS"] == "off"
    assert out["applied"]["MINITENSOR_KEEP_FREED_MEMORY"] != "off"


def test_openmp_environment_is_set_for_the_block_only(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    for name in ("MINITENSOR_TUNING", "MINITENSOR_POLITE_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    with config.openmp_environment():
        assert os.environ["GOMP_SPINCOUNT"] == config.SPIN_COUNT
    assert "GOMP_SPINCOUNT" not in os.environ


def test_flags_read_yes_and_no_and_refuse_anything_else(monkeypatch):
    """MINITENSOR_NO_BLAS_KERNELS=0 means 'no', not 'yes' (it was read as any non-empty text)."""
    for text, expected in (("0", False), ("1", True), ("off", False), ("Yes", True), ("", False)):
        monkeypatch.setenv("MINITENSOR_NO_BLAS_KERNELS", text)
        assert config.flag("MINITENSOR_NO_BLAS_KERNELS") is expected
    monkeypatch.setenv("MINITENSOR_NO_BLAS_KERNELS", "2")
    with pytest.raises(ValueError, match="MINITENSOR_NO_BLAS_KERNELS='2'"):
        config.flag("MINITENSOR_NO_BLAS_KERNELS")


def test_every_switch_in_the_tree_is_declared_once_and_reported():
    """Each MINITENSOR_* variable any file reads is a row of config.SWITCHES, and report()
    prints all of them with what they do and why."""
    root = pathlib.Path(__file__).resolve().parents[1]
    found = set()
    for path in root.glob("**/*.py"):
        if ".git" not in path.parts:
            found |= set(re.findall(r"MINITENSOR_[A-Z_]+[A-Z]", path.read_text()))
    for doc in (root / "README.md", *root.glob("docs/*.md"), *root.glob("benchmarks/*.md")):
        found |= set(re.findall(r"MINITENSOR_[A-Z_]+[A-Z]", doc.read_text()))
    assert found <= set(config.SWITCHES), found - set(config.SWITCHES)
    out = io.StringIO()
    config.report(file=out)
    for switch in config.SWITCHES.values():
        assert f"{switch.name}=" in out.getvalue() and switch.why in out.getvalue()


@pytest.fixture
def fresh_busy_state(monkeypatch):
    monkeypatch.setattr(jit, "_busy", {"now": False, "next": 0.0, "stall": None, "at": 0.0})
    monkeypatch.setitem(jit._pool, "cpus", 2)
    clock = [100.0]
    monkeypatch.setattr(jit, "_monotonic", lambda: clock[0])
    return clock


def test_cpus_busy_follows_cpu_pressure_then_the_run_queue(monkeypatch, fresh_busy_state):
    clock = fresh_busy_state
    stall, running = [0], [1]
    monkeypatch.setattr(jit, "_cpu_stall_us", lambda: stall[0])
    monkeypatch.setattr(jit, "_running_tasks", lambda: running[0])
    assert not jit.cpus_busy(2)  # first sample: nothing to compare yet
    clock[0] += 1.0
    stall[0] += 50_000  # 5% of a second spent waiting: not busy
    assert not jit.cpus_busy(2)
    clock[0] += 1.0
    stall[0] += 400_000  # 40%: another process wants the cores
    assert jit.cpus_busy(2)
    clock[0] += 0.1
    running[0] = 1
    assert jit.cpus_busy(2)  # not re-checked within half a second
    clock[0] += 1.0
    running[0] = 3  # the other work still runs: stay on one
    assert jit.cpus_busy(2)
    clock[0] += 1.0
    running[0] = 1  # only us: room for our second thread
    assert not jit.cpus_busy(2)


def test_without_pressure_counters_the_run_queue_decides(monkeypatch, fresh_busy_state):
    clock = fresh_busy_state
    monkeypatch.setattr(jit, "_cpu_stall_us", lambda: None)
    monkeypatch.setattr(jit, "_running_tasks", lambda: 4)
    assert jit.cpus_busy(2)
    clock[0] += 1.0
    monkeypatch.setattr(jit, "_running_tasks", lambda: 1)
    assert not jit.cpus_busy(2)


def test_threads_is_one_while_busy(monkeypatch):
    jit.threads()  # start the pool
    monkeypatch.setitem(jit._pool, "polite", True)
    monkeypatch.setattr(jit, "_read_num_threads", lambda: 2)
    monkeypatch.setitem(jit._pool, "cpus", 2)
    monkeypatch.setattr(jit, "cpus_busy", lambda count: True)
    assert jit.threads() == 1
    monkeypatch.setattr(jit, "cpus_busy", lambda count: False)
    assert jit.threads() == 2
    monkeypatch.setitem(jit._pool, "cpus", 1)  # taskset to one CPU
    assert jit.threads() == 1


SPIN = """
import json, os, resource, sys, time
if sys.argv[1] == "numpy first":
    import numpy
import minitensor as mt
import numpy as np
from minitensor.kernels.fast_matmul.blas import blas_threads
a = np.ones((512, 512), np.float32)
for _ in range(3):
    a @ a                                # on BLAS's own threads: its workers wake
cpu = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_utime
before = cpu()
time.sleep(0.3)                          # the main thread sleeps: only BLAS's workers may run
print(json.dumps({"spun": cpu() - before, "blas": blas_threads(),
                  "short": mt.config.blas_spin_is_short(),
                  "applied": mt.config.applied.get("MINITENSOR_SHORT_BLAS_SPIN"),
                  "env": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}))
"""


def run_spin(order, **env):
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", SPIN, order], env=dict(base, **env), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_minitensor_shortens_the_spin_of_blas_workers_whichever_is_imported_first():
    """Imported before numpy, minitensor has OpenBLAS's idle workers sleep soon after a
    product: a process whose main thread sleeps uses almost no CPU. Imported after, it has
    OpenBLAS read the timeout again and restarts its workers: the same. Off, the workers spin
    ~0.1 s and burn CPU while the main thread sleeps. os.environ is as it was either way."""
    first = run_spin("minitensor first")
    if first["blas"] < 2:
        pytest.skip("numpy's BLAS runs on one thread here: no worker to spin")
    assert first["applied"].startswith("OPENBLAS_THREAD_TIMEOUT=20 read as") and first["short"]
    assert first["env"] is None
    late = run_spin("numpy first")
    assert late["applied"].startswith("OPENBLAS_THREAD_TIMEOUT=20 re-read by numpy's BLAS")
    assert late["short"] and late["env"] is None and late["blas"] == first["blas"]
    off = run_spin("numpy first", MINITENSOR_SHORT_BLAS_SPIN="0")
    assert off["applied"] == "off" and not off["short"]
    assert max(first["spun"], late["spun"]) < 0.05 < off["spun"]


def test_a_numpy_imported_first_keeps_its_thread_count_and_its_other_settings():
    """Re-reading OpenBLAS's environment changes its spin only: a thread count you set for
    numpy before importing minitensor stays, and products still give numpy's bits."""
    code = (
        "import numpy as np, json\n"
        "a = np.random.default_rng(0).standard_normal((300, 300))\n"
        "before = (a @ a).tobytes()\n"
        "import minitensor as mt\n"
        "from minitensor.kernels.fast_matmul.blas import blas_threads\n"
        "print(json.dumps({'same': (a @ a).tobytes() == before, 'threads': blas_threads(),\n"
        "    'applied': mt.config.applied.get('MINITENSOR_SHORT_BLAS_SPIN')}))\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", code], env=dict(base, OPENBLAS_NUM_THREADS="1"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["same"] and seen["threads"] == 1
    assert seen["applied"].startswith("OPENBLAS_THREAD_TIMEOUT=20 re-read")


def test_your_own_blas_timeout_wins_and_the_switch_turns_it_off():
    yours = run_spin("minitensor first", OPENBLAS_THREAD_TIMEOUT="24")
    assert yours["applied"].startswith("left alone: you set OPENBLAS_THREAD_TIMEOUT=24")
    assert not yours["short"] and yours["env"] == "24"
    assert run_spin("minitensor first", OPENBLAS_THREAD_TIMEOUT="16")["short"]
    off = run_spin("minitensor first", MINITENSOR_SHORT_BLAS_SPIN="0")
    assert off["applied"] == "off" and not off["short"]
