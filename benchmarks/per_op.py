"""The engine's cost per op: minitensor against PyTorch eager, side by side.

    python benchmarks/per_op.py [--rounds 5] [--ops 100]

On tensors so small (8 × 8) that the arithmetic costs nothing, a chain of `--ops` ops

    z = x
    for _ in range(ops // 2):
        z = z * y + x          # two ops a turn
    z.sum().backward()

measures what each op costs beyond its arithmetic: making the output tensor, recording the
graph node (its inputs, module scope, source line, the versions of what it saved) and, in
backward, walking the graph and accumulating gradients. Three modes: "forward" (grad off),
"forward, recorded" (inputs require grad, no backward) and "forward + backward". Small-op
workloads — a learner's own code, a decoder-only model with many small steps — are bound by it.

Each library runs in a child process of its own (their thread pools never meet), the two take
turns for --rounds rounds, and we print the median µs per op and the ratio.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.machine import print_medians, take_turns  # noqa: E402

MODES = ("forward", "forward, recorded", "forward + backward")


def child(lib, ops, repeats):
    """Time each mode `repeats` times in this process; print µs per op as JSON per line read."""
    if lib == "torch":
        import torch as T

        T.set_num_threads(2)
    else:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import minitensor as T

    def run(mode):
        grad = mode != "forward"
        x = T.randn(8, 8, requires_grad=grad)
        y = (T.rand(8, 8) * 0.5).requires_grad_(grad)  # |z| stays bounded: no overflow
        z = x
        for _ in range(ops // 2):
            z = z * y + x
        if mode == "forward + backward":
            z.sum().backward()

    def per_op(mode):
        for _ in range(5):
            run(mode)
        start = time.perf_counter()
        for _ in range(repeats):
            run(mode)
        return (time.perf_counter() - start) / repeats / ops * 1e6

    print("ready", flush=True)
    for _ in sys.stdin:
        print(json.dumps({mode: per_op(mode) for mode in MODES}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=100, help="ops per chain (even)")
    ap.add_argument("--repeats", type=int, default=50, help="chains per timing")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--child", choices=("minitensor", "torch"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.ops, args.repeats)

    libs = ["minitensor"] + ([] if args.no_torch else ["torch"])
    child_args = ["--ops", str(args.ops), "--repeats", str(args.repeats)]
    times = take_turns(os.path.abspath(__file__), libs, child_args, args.rounds)
    title = f"engine cost per op, 8×8 float32, chains of {args.ops} ops, median of {args.rounds}"
    print_medians(times, MODES, str, 2, title, ("mode", "µs/op"))


if __name__ == "__main__":
    main()
