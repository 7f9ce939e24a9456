"""The engine's cost per op as a count of CPU instructions, which a noisy machine cannot blur.

    python benchmarks/per_op_instructions.py [--ops 20000] [--modes forward,recorded,backward]

`benchmarks/per_op.py` times the engine's bookkeeping per op against PyTorch. On a shared
virtual machine those times move by tens of percent between runs, so a change worth 5% cannot be
seen in them. This script counts instructions instead: it runs the same chain as per_op.py
(``z = z * y + x`` on 8 × 8 float32, then backward) under valgrind's callgrind, once with no ops
and once with --ops ops, and prints the difference divided by the number of ops. The count is
the same from run to run (hash randomisation is fixed), so two commits compare exactly.
Instructions are not time (a numpy call and a Python call retire them at different rates), so
compare minitensor with itself here, and with PyTorch in per_op.py.

Needs valgrind (Debian: ``apt-get install valgrind``). Each mode takes about a minute.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {  # mode -> (inputs require grad, run backward)
    "forward": (False, False),
    "recorded": (True, False),
    "backward": (True, True),
}


def child(mode, ops):
    """The chain of per_op.py, `ops` ops in all, after a warm-up that loads every code path."""
    sys.path.insert(0, os.path.dirname(_HERE))
    import minitensor as mt

    grad, back = MODES[mode]
    x = mt.randn(8, 8, requires_grad=grad)
    y = (mt.rand(8, 8) * 0.5).requires_grad_(grad)

    def chain():
        z = x
        for _ in range(50):
            z = z * y + x
        if back:
            z.sum().backward()

    for _ in range(3):
        chain()
    for _ in range(ops // 100):
        chain()


def instructions(mode, ops):
    """Instructions callgrind counts for a whole child run of `ops` ops."""
    # hash randomisation fixed; one thread per pool: callgrind runs a process's threads one at
    # a time and counts them all, so a pool's idle worker spinning while it waits for work
    # (OpenBLAS's does, for a while after it starts) would add a count that varies by run
    one = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    env = dict(os.environ, PYTHONHASHSEED="0", **one)
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, os.path.abspath(__file__), "--child", mode, "--ops", str(ops)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=20000, help="ops counted (a multiple of 100)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.ops)
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    print(f"instructions per op, 8×8 float32, chain of per_op.py, {args.ops} ops")
    print("| mode | instructions per op |")
    print("|---|---|")
    for mode in args.modes.split(","):
        per_op = (instructions(mode, args.ops) - instructions(mode, 0)) / args.ops
        print(f"| {mode} | {per_op:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
