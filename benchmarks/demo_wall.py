"""The addition demo's wall time as a newcomer meets it: from a fresh clone, then on the cache
that first run built.

    python benchmarks/demo_wall.py [--runs 1] [--demo-args "--seed 1"]

Clones this repository's HEAD (its committed code) into a temporary folder, where numba's
on-disk cache is empty, and runs `python demos/addition_task.py` there twice: the first run
compiles every kernel it calls (minitensor/kernels/compile_ahead.py shares that with a helper
process), the second finds them compiled. For each run the table gives the wall time of the
whole command, the training time and the steps the demo reports (the first step's compiling is
part of the training time), and the rest: start-up, the final report and the figures. --runs
clones that many times; the output's first line names the CPU.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.machine import cpu_model  # noqa: E402


def run_demo(folder, demo_args):
    """Run the demo in `folder`: (wall seconds, the demo's training seconds, its steps). It
    runs with Python's default of writing bytecode caches (.pyc), as on a newcomer's machine:
    a PYTHONDONTWRITEBYTECODE of this environment would make every run compile the
    repository's sources again (a quarter of a second of each start here)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, os.path.join("demos", "addition_task.py"), *demo_args],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"the demo failed in {folder}:\n{proc.stderr[-3000:]}")
    found = re.search(r"steps: (\d+)\s+training time: ([\d.]+) s", proc.stdout)
    if found is None:
        raise RuntimeError(f"no 'steps: … training time: …' line in:\n{proc.stdout[-3000:]}")
    return wall, float(found.group(2)), int(found.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="fresh clones, each run cold then warm")
    ap.add_argument("--demo-args", default="", help="arguments for the demo (default: none)")
    args = ap.parse_args()
    demo_args = shlex.split(args.demo_args)
    rows = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="minitensor-clone-") as folder:
            subprocess.run(["git", "clone", "-q", ROOT, folder], check=True)
            for cache in ("fresh clone", "warm cache"):
                rows.append((cache, *run_demo(folder, demo_args)))
    print(f"machine: {cpu_model()}")
    print(f"python demos/addition_task.py {args.demo_args}".rstrip())
    print("| run | wall s | training s | steps | the rest s |")
    print("|---|---|---|---|---|")
    for cache, wall, training, steps in rows:
        print(f"| {cache} | {wall:.1f} | {training:.1f} | {steps} | {wall - training:.1f} |")


if __name__ == "__main__":
    main()
