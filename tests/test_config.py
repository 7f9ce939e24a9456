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
import time

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
    state = {"now": False, "next": 0.0, "stall": None, "ticks": None, "at": 0.0}
    monkeypatch.setattr(jit, "_busy", state)
    monkeypatch.setitem(jit._pool, "cpus", 2)
    monkeypatch.setattr(jit, "_TICKS_PER_SECOND", 100)
    clock = [100.0]
    monkeypatch.setattr(jit, "_monotonic", lambda: clock[0])
    return clock


@pytest.fixture
def seconds(monkeypatch, fresh_busy_state):
    """second(ours, others, waited): one second passes in which this process used `ours` clock
    ticks, the other processes `others` (100 a CPU), and some task waited for a CPU `waited`
    of the time; then cpus_busy(2) is asked."""
    clock = fresh_busy_state
    counters = {"busy": 0, "own": 0, "stall": 0}
    monkeypatch.setattr(jit, "_cpu_ticks", lambda: (counters["busy"], counters["own"]))
    monkeypatch.setattr(jit, "_cpu_stall_us", lambda: counters["stall"])

    def second(ours, others, waited):
        clock[0] += 1.0
        counters["busy"] += ours + others
        counters["own"] += ours
        counters["stall"] += int(waited * 1e6)
        return jit.cpus_busy(2)

    assert not jit.cpus_busy(2)  # the first look: nothing to compare yet
    return second


def test_cpus_busy_takes_waiting_and_the_other_processes_time(monkeypatch, seconds):
    """Busy once tasks waited for a CPU and the other processes took the room our threads
    need; free once they leave it. Our own threads waiting for each other, or a process that
    ran while we did not, never make the machine busy."""
    assert not seconds(200, 0, 0.0)  # both CPUs ours
    assert not seconds(200, 5, 0.4)  # our own threads waited for each other: not the others
    assert not seconds(20, 180, 0.0)  # another program's turn while we paused: nobody waited
    assert not seconds(150, 20, 0.3)  # a fifth of a CPU for the others: still room
    assert seconds(120, 80, 0.4)  # another process wants a CPU, and tasks waited: one thread
    assert seconds(100, 100, 0.0)  # it still runs (beside our one thread, nobody waits)
    assert not seconds(180, 5, 0.0)  # it ended: both threads again
    monkeypatch.setitem(jit._pool, "cpus", 4)  # four CPUs, our two threads: room for two more
    assert not seconds(200, 190, 0.3)
    assert seconds(200, 240, 0.3)


def test_cpus_busy_is_checked_twice_a_second(seconds, fresh_busy_state):
    assert seconds(120, 80, 0.4)
    fresh_busy_state[0] += 0.1  # a check now would see no one's time, and say free
    assert jit.cpus_busy(2)


def test_without_proc_stat_the_run_queue_decides(monkeypatch, fresh_busy_state):
    clock = fresh_busy_state
    monkeypatch.setattr(jit, "_cpu_ticks", lambda: None)
    monkeypatch.setattr(jit, "_running_tasks", lambda: 4)
    assert jit.cpus_busy(2)
    clock[0] += 1.0
    monkeypatch.setattr(jit, "_running_tasks", lambda: 2)  # us and one more: no room for two
    assert jit.cpus_busy(2)
    clock[0] += 1.0
    monkeypatch.setattr(jit, "_running_tasks", lambda: 1)
    assert not jit.cpus_busy(2)


def test_without_pressure_counters_the_others_time_decides(monkeypatch, seconds):
    monkeypatch.setattr(jit, "_cpu_stall_us", lambda: None)
    assert seconds(100, 100, 0.0)
    assert not seconds(200, 0, 0.0)


def test_cpu_ticks_reads_linux_counters():
    """Where Linux's /proc is there, the busy ticks of our CPUs include our own, which grow
    while we compute."""
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat (not Linux)")
    jit.cores()  # the pool's CPU set
    busy, own = jit._cpu_ticks()
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:
        pass
    busy2, own2 = jit._cpu_ticks()
    assert own2 > own and busy2 - busy >= own2 - own - 2  # (each counter ticks on its own)


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


def run_json(code, *args, **env):
    """Run `code` in a fresh Python with minitensor's variables unset (and `env` set): the JSON
    its last line prints."""
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=dict(base, **env), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def run_spin(order, **env):
    return run_json(SPIN, order, **env)


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


OWNER_SPIN = """
import json, resource, time
import minitensor as mt
import numpy as np
from minitensor.kernels import ownership
from minitensor.kernels.fast_matmul.blas import blas_threads
a = np.ones((512, 512), np.float32)
cpu = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_utime

def spun():                              # CPU used while the main thread sleeps after products
    total = 0.0
    for _ in range(10):
        for _ in range(3):
            a @ a
        before = cpu()
        time.sleep(0.05)
        total += cpu() - before
    return total

ownership.step_ended()                   # MINITENSOR_CORE_OWNER=blas: BLAS's threads own them
owned = spun()
ownership._give_cores("numba")
print(json.dumps({"blas": blas_threads(), "owned": owned, "given_back": spun()}))
"""


def test_blas_workers_spin_longer_only_while_blas_owns_the_cores():
    """While BLAS's threads alone own the cores its idle workers spin 2**24 clock cycles (a few
    ms of CPU after each burst of products, measured over ten while the main thread sleeps);
    once they give the cores back, 2**20 again (16 times shorter; the CPU clock's ticks blur
    the figures, hence the margin)."""
    got = run_json(OWNER_SPIN, MINITENSOR_CORE_OWNER="blas")
    if got["blas"] < 2:
        pytest.skip("numpy's BLAS runs on one thread here: no worker to spin")
    assert got["owned"] > max(0.03, 2 * got["given_back"]) and got["owned"] < 0.4, got


def test_blas_spin_for_owner_restarts_the_workers_only_when_the_timeout_changes(monkeypatch):
    """The timeout OpenBLAS reads (openblas_read_env, here a fake) is 24 for "blas" and 20 for
    the others; the workers restart (blas_thread_shutdown_) only on a change, and nothing is
    done where minitensor did not set the short spin itself."""
    seen, stops = [], []
    read = lambda: seen.append(os.environ.get("OPENBLAS_THREAD_TIMEOUT"))  # noqa: E731
    stop = lambda: stops.append(1)  # noqa: E731
    monkeypatch.setitem(config.applied, "MINITENSOR_SHORT_BLAS_SPIN", "OPENBLAS_THREAD_TIMEOUT=20")
    monkeypatch.setattr(config, "_blas_spin_now", ["20"])
    for owner in ("numba", "blas", "blas", "both", "numba", "blas"):
        config.blas_spin_for_owner(owner, read, stop)
    assert seen == ["24", "20", "24"] and len(stops) == 3
    assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ
    monkeypatch.setitem(config.applied, "MINITENSOR_SHORT_BLAS_SPIN", "off")
    config.blas_spin_for_owner("numba", read, stop)
    assert len(seen) == 3  # yours (or off): left alone


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
    seen = run_json(code, OPENBLAS_NUM_THREADS="1")
    assert seen["same"] and seen["threads"] == 1
    assert seen["applied"].startswith("OPENBLAS_THREAD_TIMEOUT=20 re-read")


def test_your_own_blas_timeout_wins_and_the_switch_turns_it_off():
    yours = run_spin("minitensor first", OPENBLAS_THREAD_TIMEOUT="24")
    assert yours["applied"].startswith("left alone: you set OPENBLAS_THREAD_TIMEOUT=24")
    assert not yours["short"] and yours["env"] == "24"
    assert run_spin("minitensor first", OPENBLAS_THREAD_TIMEOUT="16")["short"]
    off = run_spin("minitensor first", MINITENSOR_SHORT_BLAS_SPIN="0")
    assert off["applied"] == "off" and not off["short"]
