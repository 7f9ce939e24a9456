"""One training step of the addition-task model, minitensor vs PyTorch, side by side.

    python benchmarks/train_step.py [--steps 20] [--rounds 3] [--profile] [--no-torch]

Without torch installed it says so and times minitensor alone.

The model: d_model 128, 4 heads, 2 encoder + 2 decoder layers, d_ff 512, dropout 0, Post-Norm,
sinusoidal positions; batch 128, source length 7 ("123+456"), target length 5. The torch twin
is built by `transformer.interop.to_torch`, so both start from the same weights. A step is
forward, cross-entropy over non-pad targets, backward, Adam. We alternate blocks of steps of
the two libraries (the machine is shared and noisy: compare ratios from one run) and print the
median ms per step of each and the ratio. --profile adds a cProfile of our steps: where the
time goes, by function.

Threads: torch runs with torch.set_num_threads(2), minitensor with its defaults (numba's
threads, one per core; numpy's BLAS at its own count, held at one while numba's threads call
it: see minitensor/config.py). --our-threads N gives numba N threads. TRAIN_STEP_DROPOUT=0.1
adds dropout to both (torch's CPU dropout is slow, so a benchmark with it flatters us: the
default is the README's recipe, without).

Torch runs in a child process started with this script's environment before minitensor
touched it, the same model weights rebuilt there from the same seed. Both libraries use an
OpenMP thread pool whose idle workers spin for a while after each parallel region: in one
process each pool's spinning workers would steal the core the other pool wants, slowing
whichever ran second. The parent and the child take turns, one block of steps at a time, and
each block starts after a short pause in which the other's workers go to sleep.
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time

_ORIGINAL_ENV = dict(os.environ)  # for the torch child (minitensor changes none of it)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# minitensor before numpy: it shortens the spin of numpy's idle BLAS workers as numpy loads
import minitensor as mt  # noqa: E402, I001
import numpy as np  # noqa: E402
import minitensor.functional as F  # noqa: E402
from benchmarks.machine import PAUSE_S, cpu_model, thread_counts  # noqa: E402, F401
from transformer import Transformer, TransformerConfig  # noqa: E402
from transformer.masks import padding_mask  # noqa: E402

VOCAB, PAD, BOS, EOS = 16, 0, 1, 2
BATCH, SRC_LEN, TGT_LEN = 128, 7, 5
DROPOUT = float(os.environ.get("TRAIN_STEP_DROPOUT", "0"))


def make_batch(rng):
    """Random digits in the addition task's shapes; targets have a few padded tails."""
    src = rng.integers(3, VOCAB, (BATCH, SRC_LEN))
    tgt = rng.integers(3, VOCAB, (BATCH, TGT_LEN + 1))
    tgt[:, 0] = BOS
    lengths = rng.integers(3, TGT_LEN + 1, BATCH)
    for b, n in enumerate(lengths):
        tgt[b, n] = EOS
        tgt[b, n + 1 :] = PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def build(seed=0):
    mt.manual_seed(seed)
    cfg = TransformerConfig.small(VOCAB, VOCAB, max_len=64, pad_id=PAD, dropout=DROPOUT)
    return Transformer(cfg)


def ours_step(model, opt, batch):
    src, tgt_in, tgt_out = batch
    opt.zero_grad()
    logits = model(src, tgt_in, padding_mask(src, PAD), padding_mask(tgt_in, PAD))
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD)
    loss.backward()
    opt.step()
    return loss.item()


def make_torch(model, threads):
    import torch

    from transformer.interop import to_torch

    torch.set_num_threads(threads)

    twin = to_torch(model)
    twin.train()
    opt = torch.optim.Adam(twin.parameters(), lr=1e-4)

    def step(batch):
        src, tgt_in, tgt_out = (torch.from_numpy(a) for a in batch)
        opt.zero_grad()
        logits = twin(src, tgt_in, src == PAD, tgt_in == PAD)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD
        )
        loss.backward()
        opt.step()
        return loss.item()

    return step


def timed(fn, batches):
    """Each step's wall time and process CPU time (all threads), after a short pause."""
    time.sleep(PAUSE_S)
    wall, cpu = [], []
    for b in batches:
        t0, c0 = time.perf_counter(), time.process_time()
        fn(b)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def torch_child(args):
    """--torch-child: build the same model and batches, then run one block of torch steps per
    line read from stdin and answer with its times as one JSON line."""
    rng = np.random.default_rng(0)
    batches = [make_batch(rng) for _ in range(args.steps)]
    step = make_torch(build(), args.torch_threads)
    for b in batches[:3]:
        step(b)  # warm up
    print("ready", flush=True)
    for _ in sys.stdin:
        print(json.dumps(timed(step, batches)), flush=True)


class TorchChild:
    """The torch side, in its own process (see the module docstring)."""

    def __init__(self, args):
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--torch-child",
            "--steps",
            str(args.steps),
            "--torch-threads",
            str(args.torch_threads),
        ]
        self.process = subprocess.Popen(
            command, env=_ORIGINAL_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the torch child process did not start (is torch installed?)")

    def block(self):
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def torch_missing():
    """Why torch cannot run here (its ImportError, one line), or None when it imports.

    Asked in a throw-away process with the torch child's environment: importing torch here
    would start its thread pool beside ours, which is what the child process avoids."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch"], env=_ORIGINAL_ENV, capture_output=True, text=True
    )
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {probe.returncode}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--rounds", type=int, default=3, help="alternating blocks per library")
    ap.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument(
        "--our-threads",
        type=int,
        default=None,
        help="numba threads for minitensor (default: one per core)",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile our steps")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)

    import numba

    if args.our_threads is not None:
        numba.set_num_threads(args.our_threads)
    rng = np.random.default_rng(0)
    batches = [make_batch(rng) for _ in range(args.steps)]
    model = build()
    opt = mt.optim.Adam(model.parameters(), lr=1e-4)
    for b in batches[:3]:  # warm up (numba compiles, caches)
        ours_step(model, opt, b)
    child = None
    if not args.no_torch:
        missing = torch_missing()
        if missing:
            print(
                f"torch is not installed ({missing}): timing minitensor alone "
                f"(pip install torch==2.13.0 to compare; --no-torch skips this check)"
            )
        else:
            child = TorchChild(args)

    ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
    for _ in range(args.rounds):
        wall, cpu = timed(lambda b: ours_step(model, opt, b), batches)
        ours += wall
        ours_cpu += cpu
        if child:
            wall, cpu = child.block()
            theirs += wall
            theirs_cpu += cpu
    if child:
        child.close()

    print(
        f"addition-task training step (batch {BATCH}, src {SRC_LEN}, tgt {TGT_LEN}, "
        f"d_model 128, 4 heads, 2+2 layers, d_ff 512; forward + backward + Adam)"
    )
    print(f"machine: {cpu_model()}; kernels backend: {mt.get_backend()}")
    print(
        f"threads: torch {args.torch_threads}, minitensor numba {numba.get_num_threads()} "
        f"({thread_counts()}); {len(ours)} steps "
        f"each; wall = elapsed, cpu = process CPU time summed over threads"
    )
    med, cmed = float(np.median(ours)) * 1e3, float(np.median(ours_cpu)) * 1e3
    print(
        f"minitensor: median {med:7.1f} ms/step wall (min {min(ours) * 1e3:.1f}), "
        f"{cmed:7.1f} ms cpu"
    )
    if theirs:
        tmed, tcmed = float(np.median(theirs)) * 1e3, float(np.median(theirs_cpu)) * 1e3
        print(
            f"torch     : median {tmed:7.1f} ms/step wall (min {min(theirs) * 1e3:.1f}), "
            f"{tcmed:7.1f} ms cpu"
        )
        print(
            f"ratio minitensor / torch: {med / tmed:.2f}x wall (medians), "
            f"{min(ours) / min(theirs):.2f}x (minima), {cmed / tcmed:.2f}x cpu"
        )

    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for b in batches:
            ours_step(model, opt, b)
        prof.disable()
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out).sort_stats("tottime")
        stats.print_stats(25)
        print(out.getvalue())


if __name__ == "__main__":
    main()
