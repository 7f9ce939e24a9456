"""minitensor.config: every process-wide setting of `import minitensor` is applied, switchable,
and stands aside for the user's own variables; the polite-threads rule (kernels/jit.py)."""

import json
import os
import subprocess
import sys

import pytest

from minitensor.kernels import jit

REPORT = """
import json, os
import minitensor as mt
print(json.dumps({"applied": mt.config.applied,
                  "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "GOMP_SPINCOUNT")},
                  "polite": mt.config.polite_threads()}))
"""
VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "GOMP_SPINCOUNT",
    "OMP_WAIT_POLICY",
    "NUMBA_NUM_THREADS",
    "MINITENSOR_TUNING",
    "MINITENSOR_POLITE_THREADS",
    "MINITENSOR_KEEP_FREED_MEMORY",
)


def run_import(**env):
    """import minitensor in a fresh process with `env` on top of a clean environment."""
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", REPORT],
        env=dict(base, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_defaults_are_applied_and_recorded():
    out = run_import()
    assert out["env"] == {"OPENBLAS_NUM_THREADS": "1", "GOMP_SPINCOUNT": jit_spin_count()}
    assert out["polite"] is True
    assert set(out["applied"]) == {
        "MINITENSOR_SINGLE_THREADED_BLAS",
        "MINITENSOR_KEEP_FREED_MEMORY",
        "MINITENSOR_SERIAL_AFTER_FORK",
        "MINITENSOR_POLITE_THREADS",
    }


def jit_spin_count():
    from minitensor import config

    return config.SPIN_COUNT


def test_the_users_own_variables_win():
    out = run_import(GOMP_SPINCOUNT="5", OPENBLAS_NUM_THREADS="2")
    assert out["env"] == {"OPENBLAS_NUM_THREADS": "2", "GOMP_SPINCOUNT": "5"}
    assert out["applied"]["MINITENSOR_POLITE_THREADS"].startswith("left alone: you set GOMP")
    assert out["polite"] is False
    assert run_import(NUMBA_NUM_THREADS="1")["polite"] is False
    assert run_import(OMP_WAIT_POLICY="PASSIVE")["env"]["GOMP_SPINCOUNT"] is None


def test_every_setting_switches_off():
    out = run_import(MINITENSOR_TUNING="0")
    assert out["env"] == {"OPENBLAS_NUM_THREADS": None, "GOMP_SPINCOUNT": None}
    assert set(out["applied"].values()) == {"off"} and out["polite"] is False
    out = run_import(MINITENSOR_POLITE_THREADS="0")
    assert out["env"] == {"OPENBLAS_NUM_THREADS": "1", "GOMP_SPINCOUNT": None}


@pytest.fixture
def fresh_busy_state(monkeypatch):
    monkeypatch.setattr(jit, "_busy", {"now": False, "next": 0.0, "stall": None, "at": 0.0})
    monkeypatch.setitem(jit._pool, "cpus", 2)
    clock = [100.0]
    monkeypatch.setattr(jit.time, "monotonic", lambda: clock[0])
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
