"""Training steps at three scales, minitensor vs PyTorch, side by side: time and peak memory.

    python benchmarks/scale.py [--cases addition,paper,long] [--steps N] [--rounds 3]
                               [--attention fused|explicit] [--quick]

The cases (forward + cross-entropy + backward + Adam, dropout 0 unless said, the same weights
in both libraries through `transformer.interop.to_torch`):

    recipe    the README's addition recipe, what demos/addition_task.py trains: d_model 64,
              4 heads, 2+2 layers, d_ff 256, batch 128, source 7, target 5, vocab 16
    addition  d_model 128, 4 heads, 2+2 layers, d_ff 512, batch 128, source 7, target 5, vocab 16
    addition-dropout  the addition model with dropout 0.1 (torch's CPU dropout is slow: a
              benchmark with dropout flatters us, so it is a row of its own)
    paper     the paper's base model: d_model 512, 8 heads, 6+6 layers, d_ff 2048, batch 16,
              source and target 64, vocab 1000
    long      d_model 128, 4 heads, 2+2 layers, d_ff 512, batch 8, source and target 512,
              vocab 1000

Each library runs in a child process of its own (started with this script's environment, so
neither sees the other's thread settings), and the two take turns: one block of steps of one,
then one of the other, for --rounds rounds. We print the median ms per step of each, their
ratio, and each child's peak resident memory (resource.getrusage's ru_maxrss, its high-water
mark reset after building the model and warming up where Linux allows, so it is the peak of the
timed steps: weights, optimizer state, activations, gradients). The machine may be shared and
noisy: compare the ratios of one run.

minitensor decides in its first few dozen steps whose threads own the cores, numba's or BLAS's,
by timing whole steps (minitensor/kernels/ownership.py); its child runs steps until it has,
before the timed blocks, and the table's last column says which it chose.

--attention explicit runs minitensor's MultiHeadAttention on its explicit path (scores, softmax,
weights·V, with the L×L weights kept for backward) instead of the fused kernel.
--quick: tiny versions of the cases, one step, one round — a smoke test of this script.
"""

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))  # the repository, for minitensor and benchmarks.*

# minitensor before numpy: it shortens the spin of numpy's idle BLAS workers as numpy loads
import minitensor  # noqa: E402, F401, I001
import numpy as np  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from benchmarks.train_step import _ORIGINAL_ENV, PAUSE_S, torch_missing  # noqa: E402

CASES = {
    "recipe": dict(  # the README's addition recipe: what `demos/addition_task.py` trains
        model=dict(d_model=64, n_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=256),
        vocab=16,
        batch=128,
        src=7,
        tgt=5,
        steps=20,
    ),
    "addition": dict(
        model=dict(d_model=128, n_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=512),
        vocab=16,
        batch=128,
        src=7,
        tgt=5,
        steps=10,
    ),
    "addition-dropout": dict(  # the addition model with dropout 0.1 (torch's dropout is slow)
        model=dict(d_model=128, n_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=512),
        vocab=16,
        batch=128,
        src=7,
        tgt=5,
        steps=10,
        dropout=0.1,
    ),
    "paper": dict(
        model=dict(d_model=512, n_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048),
        vocab=1000,
        batch=16,
        src=64,
        tgt=64,
        steps=3,
    ),
    "long": dict(
        model=dict(d_model=128, n_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=512),
        vocab=1000,
        batch=8,
        src=512,
        tgt=512,
        steps=3,
    ),
}
QUICK = dict(
    model=dict(d_model=16, n_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32),
    vocab=11,
    batch=2,
    src=6,
    tgt=5,
    steps=1,
)
PAD, BOS = 0, 1


def case_spec(name, quick):
    return QUICK if quick else CASES[name]


def make_batch(spec, rng):
    """Random tokens (ids ≥ 2) of the case's shapes; a few padded tails in source and target."""
    b, ls, lt, vocab = spec["batch"], spec["src"], spec["tgt"], spec["vocab"]
    src = rng.integers(2, vocab, (b, ls))
    tgt = rng.integers(2, vocab, (b, lt + 1))
    tgt[:, 0] = BOS
    for row in range(b):
        src[row, rng.integers(max(1, ls - 2), ls + 1) :] = PAD
        tgt[row, rng.integers(max(2, lt - 2), lt + 2) :] = PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def build_ours(spec, seed=0):
    import minitensor as mt
    from transformer import Transformer, TransformerConfig

    mt.manual_seed(seed)
    cfg = TransformerConfig(
        src_vocab_size=spec["vocab"],
        tgt_vocab_size=spec["vocab"],
        dropout=spec.get("dropout", 0.0),
        pad_id=PAD,
        max_len=max(64, spec["src"], spec["tgt"]),
        **spec["model"],
    )
    return Transformer(cfg)


def ours_stepper(spec, attention):
    import minitensor as mt
    import minitensor.functional as F
    from transformer.attention import MultiHeadAttention
    from transformer.masks import padding_mask

    model = build_ours(spec)
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            m.need_weights = attention == "explicit"
    opt = mt.optim.Adam(model.parameters(), lr=1e-4)

    def step(batch):
        src, tgt_in, tgt_out = batch
        opt.zero_grad()
        logits = model(src, tgt_in, padding_mask(src, PAD), padding_mask(tgt_in, PAD))
        F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD
        ).backward()
        opt.step()

    return step


def torch_stepper(spec, threads):
    import torch

    from transformer.interop import to_torch

    torch.set_num_threads(threads)
    ours = build_ours(spec)
    twin = to_torch(ours)
    del ours
    gc.collect()
    twin.train()
    opt = torch.optim.Adam(twin.parameters(), lr=1e-4)
    vocab = spec["vocab"]

    def step(batch):
        src, tgt_in, tgt_out = (torch.from_numpy(a) for a in batch)
        opt.zero_grad()
        logits = twin(src, tgt_in, src == PAD, tgt_in == PAD)
        torch.nn.functional.cross_entropy(
            logits.reshape(-1, vocab), tgt_out.reshape(-1), ignore_index=PAD
        ).backward()
        opt.step()

    return step


def _reset_peak_rss():
    """Reset the process's resident-memory high-water mark (Linux: clear_refs 5); elsewhere
    the peak includes the set-up."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_mb():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20  # KiB on Linux


def settle_core_owner(step, batches, most=60):
    """Run steps until minitensor has decided whose threads own the cores (its trial of whole
    steps, minitensor/kernels/ownership.py), so that the timed blocks are the steady state a
    training run has after its first few dozen steps; the owner it chose. Steps while a
    parallel build is compiled ahead (kernels/compile_ahead.py: an empty numba cache) do not
    count towards `most`: the trial waits for them."""
    import minitensor as mt
    from minitensor.kernels import compile_ahead

    counted = i = 0
    while counted < most:
        if mt.kernels.core_owner_trial()["state"] in ("decided", "fixed"):
            break
        step(batches[i % len(batches)])
        i += 1
        counted += not compile_ahead.pending()
    return mt.kernels.core_owner()


def child(args):
    """--child ours|torch: build the case, warm up, then one block of steps per "go" line read
    from stdin (answered with its wall times as JSON); "rss" is answered with the peak RSS."""
    spec = case_spec(args.cases, args.quick)
    steps = args.steps or spec["steps"]
    rng = np.random.default_rng(0)
    batches = [make_batch(spec, rng) for _ in range(steps)]
    step = (
        ours_stepper(spec, args.attention)
        if args.child == "ours"
        else torch_stepper(spec, args.torch_threads)
    )
    step(batches[0])  # warm up (numba compiles)
    if args.child == "ours":
        owner = settle_core_owner(step, batches)
    gc.collect()
    _reset_peak_rss()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "rss":
            print(json.dumps(_peak_rss_mb()), flush=True)
            continue
        if line.strip() == "owner":
            print(json.dumps(owner if args.child == "ours" else "–"), flush=True)
            continue
        time.sleep(PAUSE_S)  # the other library's idle workers stop spinning
        wall = []
        for b in batches:
            t0 = time.perf_counter()
            step(b)
            wall.append(time.perf_counter() - t0)
        print(json.dumps(wall), flush=True)


class Child:
    """One library's steps in a process of its own."""

    def __init__(self, which, case, args):
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            which,
            "--cases",
            case,
            "--steps",
            str(args.steps or 0),
            "--attention",
            args.attention,
            "--torch-threads",
            str(args.torch_threads),
        ] + (["--quick"] if args.quick else [])
        self.process = subprocess.Popen(
            command, env=_ORIGINAL_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {which} child process for case {case!r} did not start")

    def ask(self, line):
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def run_case(case, args, with_torch):
    """Alternate blocks of the two children; returns the row of the results table."""
    children = {"minitensor": Child("ours", case, args)}
    if with_torch:
        children["torch"] = Child("torch", case, args)
    times = {name: [] for name in children}
    for _ in range(args.rounds):
        for name, c in children.items():
            times[name] += c.ask("go")
    row = {"case": case, "owner": children["minitensor"].ask("owner")}
    for name, c in children.items():
        row[name] = (float(np.median(times[name])) * 1e3, c.ask("rss"), len(times[name]))
        c.close()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases",
        default="recipe,addition,addition-dropout,long,paper",
        help=f"comma-separated, from {', '.join(CASES)}",
    )
    ap.add_argument("--steps", type=int, default=None, help="steps per block (default per case)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating blocks per library")
    ap.add_argument(
        "--attention",
        choices=("fused", "explicit"),
        default="fused",
        help="minitensor's attention path",
    )
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny cases, 1 step, 1 round")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--child", choices=("ours", "torch"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    if args.quick:
        args.rounds, args.steps = 1, 1
    with_torch = not args.no_torch
    if with_torch and torch_missing():
        print("torch is not installed: timing minitensor alone")
        with_torch = False

    print(describe())
    print(
        f"training step, forward + backward + Adam; minitensor attention: "
        f"{args.attention}; torch threads {args.torch_threads}; {args.rounds} rounds"
        + (" (--quick: tiny models)" if args.quick else "")
    )
    print(
        "| case | minitensor ms/step | PyTorch ms/step | ratio | peak RSS ours / torch (MB) "
        "| cores owned by (ours) |"
    )
    print("|---|---|---|---|---|---|")
    for case in cases:
        row = run_case(case, args, with_torch)
        ours_ms, ours_rss, n = row["minitensor"]
        if "torch" in row:
            torch_ms, torch_rss, _ = row["torch"]
            print(
                f"| {case} | {ours_ms:.1f} | {torch_ms:.1f} | {ours_ms / torch_ms:.2f}x | "
                f"{ours_rss:.0f} / {torch_rss:.0f} | {row['owner']} |",
                flush=True,
            )
        else:
            print(
                f"| {case} | {ours_ms:.1f} | – | – | {ours_rss:.0f} / – | {row['owner']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
