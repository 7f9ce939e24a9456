"""The benchmark scripts run and print their tables (tiny budgets; the numbers themselves are
read by people, in benchmarks/README.md, never asserted)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_benchmark(name, *args):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", name), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"{name} {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def test_kernels_benchmark_prints_a_row_per_case():
    out = run_benchmark("kernels.py", "--quick", "--no-torch", "--only", "softmax")
    rows = [line for line in out.splitlines() if line.startswith("| softmax")]
    assert len(rows) == 4  # fwd and bwd on the two --quick shapes
    for row in rows:
        numba_us, numpy_us = (float(cell) for cell in row.split("|")[3:5])
        assert numba_us > 0 and numpy_us > 0


def test_kernels_benchmark_times_each_attention_tile_size_and_marks_the_chosen():
    out = run_benchmark(
        "kernels.py", "--quick", "--no-torch", "--only", "attention-tiles", "--rounds", "1"
    )
    rows = [line for line in out.splitlines() if line.startswith("| attention")]
    assert len(rows) == 6  # three tile sizes, forward and backward, at the --quick shape
    for direction in ("for", "bac"):
        ours = [row for row in rows if f"attention {direction} " in row]
        assert sum("chosen" in row for row in ours) == 1, ours
        assert all(float(row.split("|")[3]) > 0 for row in ours)


def test_kernels_benchmark_takes_turns_with_torch_in_a_child_process():
    pytest.importorskip("torch")
    out = run_benchmark("kernels.py", "--quick", "--only", "bmm-blas", "--rounds", "2")
    rows = [line for line in out.splitlines() if line.startswith("| bmm")]
    assert len(rows) == 2  # q·kᵀ and w·v at the first --quick shape
    for row in rows:
        numba_us, numpy_us, torch_us = (float(cell) for cell in row.split("|")[3:6])
        assert numba_us > 0 and numpy_us > 0 and torch_us > 0


def test_train_step_benchmark_runs_our_side():
    out = run_benchmark("train_step.py", "--steps", "2", "--rounds", "1", "--no-torch")
    assert re.search(r"minitensor: median\s+[\d.]+ ms/step", out), out


def test_train_step_benchmark_runs_torch_in_a_child_process():
    pytest.importorskip("torch")
    out = run_benchmark("train_step.py", "--steps", "2", "--rounds", "1")
    assert re.search(r"torch\s+: median\s+[\d.]+ ms/step", out), out
    assert "ratio minitensor / torch" in out


def test_per_op_instructions_child_runs_the_chain_in_every_mode():
    # the counting itself needs valgrind and a minute a mode: the child it counts must run
    for mode in ("forward", "recorded", "backward"):
        run_benchmark("per_op_instructions.py", "--child", mode, "--ops", "200")


def test_op_costs_benchmark_prints_a_row_per_op():
    out = run_benchmark("op_costs.py", "--rounds", "1", "--calls", "20", "--no-torch")
    from benchmarks.op_costs import OPS

    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(OPS)
    assert all(float(row.split("|")[2]) > 0 for row in rows)


def test_op_costs_benchmark_runs_the_same_statements_under_torch():
    pytest.importorskip("torch")
    out = run_benchmark("op_costs.py", "--rounds", "1", "--calls", "20")
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert rows and all(float(row.split("|")[3]) > 0 for row in rows)


def test_learner_code_benchmark_runs_the_port_under_both_libraries():
    args = ("--cases", "tiny", "--rounds", "1", "--steps", "1")
    out = run_benchmark("learner_code.py", *args, "--no-torch")
    (row,) = [line for line in out.splitlines() if line.startswith("| tiny")]
    assert float(row.split("|")[2]) > 0
    pytest.importorskip("torch")
    out = run_benchmark("learner_code.py", *args)
    (row,) = [line for line in out.splitlines() if line.startswith("| tiny")]
    assert float(row.split("|")[2]) > 0 and float(row.split("|")[3]) > 0


def test_demo_wall_benchmark_runs_the_demo_in_a_fresh_clone_then_warm():
    out = run_benchmark(
        "demo_wall.py", "--demo-args", "--steps 3 --eval-every 0 --no-figures --quiet"
    )
    rows = [line for line in out.splitlines() if line.startswith(("| fresh", "| warm"))]
    assert [row.split("|")[1].strip() for row in rows] == ["fresh clone", "warm cache"], out
    for row in rows:
        wall, training, steps, rest = (float(cell) for cell in row.split("|")[2:6])
        assert steps == 3 and 0 < training < wall and rest > 0
    assert out.startswith("machine: ")


def test_tables_give_the_ratio_round_by_round_beside_the_ratio_of_medians(capsys):
    """A spell that slows both libraries in one round cancels in that round's ratio: the
    paired column must be computed round by round, not from the two medians."""
    sys.path.insert(0, ROOT)
    from benchmarks.machine import print_medians

    # round 2 is a slow spell for both; minitensor's median round is not torch's
    times = {"minitensor": {"op": [1.0, 3.0, 1.2]}, "torch": {"op": [2.0, 6.0, 1.0]}}
    print_medians(times, ["op"], str, 2, "title", ("mode", "µs"))
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| op")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["1.20", "2.00", "0.60x"]  # the medians' ratio
    assert cells[4] == "0.50x (0.50–1.20)"  # per round: 0.5, 0.5, 1.2
