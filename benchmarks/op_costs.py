"""The recorded cost of each common op on a small tensor, minitensor against PyTorch eager.

    python benchmarks/op_costs.py [--rounds 3] [--calls 20000] [--no-torch]

`per_op.py` times one chain of `z * y + x`, the op the engine's short path was written for.
Learners' own models call many other ops — views, reductions, softmax, indexing, a Linear
layer — and on a tensor of 8 × 8 float32 each of them costs only its bookkeeping: unwrapping the
inputs, choosing a kernel or a route, making the output, recording the graph node. This
benchmark times each such op with its inputs requiring grad (the node is recorded; no
backward), in µs per call, and prints the ratio to torch's.

Each library runs in a child process of its own; the children take turns for --rounds rounds
and the table shows the median. torch runs on one thread (on 8 × 8 neither library starts
another).
"""

import argparse
import json
import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.machine import print_medians, take_turns  # noqa: E402

# name → the statement timed; x, y, w (8 × 8) and b (8,) require grad, m is a bool mask, idx
# three row numbers. The same text runs under both libraries (T is the library, F its
# functional module).
OPS = {
    "x + y": "x + y",
    "x * 2.0": "x * 2.0",
    "x @ w": "x @ w",
    "F.linear(x, w, b)": "F.linear(x, w, b)",
    "F.relu(x)": "F.relu(x)",
    "x.exp()": "x.exp()",
    "T.sigmoid(x)": "T.sigmoid(x)",
    "F.softmax(x, dim=-1)": "F.softmax(x, dim=-1)",
    "F.log_softmax(x, dim=-1)": "F.log_softmax(x, dim=-1)",
    "F.layer_norm(x, (8,))": "F.layer_norm(x, (8,))",
    "F.dropout(x, 0.1)": "F.dropout(x, 0.1)",
    "x.sum()": "x.sum()",
    "x.mean(dim=1)": "x.mean(dim=1)",
    "x.max(dim=1)": "x.max(dim=1)",
    "x.reshape(4, 16)": "x.reshape(4, 16)",
    "x.transpose(0, 1)": "x.transpose(0, 1)",
    "x.T": "x.T",
    "x.unsqueeze(0)": "x.unsqueeze(0)",
    "x[0]": "x[0]",
    "x[:, :2]": "x[:, :2]",
    "x[idx]": "x[idx]",
    "T.cat([x, y])": "T.cat([x, y])",
    "T.stack([x, y])": "T.stack([x, y])",
    "x.masked_fill(m, 0.0)": "x.masked_fill(m, 0.0)",
    "T.where(m, x, y)": "T.where(m, x, y)",
}


def child(lib, calls):
    """Time every op once per line read; print {op: µs per call} as JSON."""
    if lib == "torch":
        import torch as T
        import torch.nn.functional as F

        T.set_num_threads(1)
    else:
        import minitensor as T
        import minitensor.functional as F
    names = {"T": T, "F": F}
    names.update(
        x=T.randn(8, 8, requires_grad=True),
        y=T.randn(8, 8, requires_grad=True),
        w=T.randn(8, 8, requires_grad=True),
        b=T.randn(8, requires_grad=True),
        m=T.randn(8, 8) > 0,
        idx=T.tensor([1, 2, 3]),
    )
    for statement in OPS.values():  # compiles what compiles, outside the timing
        timeit.timeit(statement, number=10, globals=names)
    print("ready", flush=True)
    for _ in sys.stdin:
        times = {
            op: timeit.timeit(statement, number=calls, globals=names) / calls * 1e6
            for op, statement in OPS.items()
        }
        print(json.dumps(times), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20000, help="calls per op per round")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--child", choices=("minitensor", "torch"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.calls)

    libs = ["minitensor"] + ([] if args.no_torch else ["torch"])
    times = take_turns(os.path.abspath(__file__), libs, ["--calls", str(args.calls)], args.rounds)
    title = f"recorded cost per call, 8×8 float32 inputs requiring grad, median of {args.rounds}"
    print_medians(times, OPS, lambda op: f"`{op}`", 1, title, ("op", "µs"))


if __name__ == "__main__":
    main()
