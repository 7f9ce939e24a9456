"""One training step of the addition-task model, minitensor vs PyTorch, side by side.

    python benchmarks/train_step.py [--steps 20] [--rounds 3] [--profile] [--no-torch]

The model: d_model 128, 4 heads, 2 encoder + 2 decoder layers, d_ff 512, dropout 0.1, Post-Norm,
sinusoidal positions; batch 128, source length 7 ("123+456"), target length 5. The torch twin
is built by `transformer.interop.to_torch`, so both start from the same weights. A step is
forward, cross-entropy over non-pad targets, backward, Adam. We alternate blocks of steps of
the two libraries (the machine is shared and noisy: compare ratios from one run) and print the
median ms per step of each and the ratio. --profile adds a cProfile of our steps: where the
time goes, by function.

Where the time went (04:50 UTC on a busy 2-core machine, 1 thread, process CPU time per step,
numba backend): forward 47 ms, backward 50 ms, Adam 6 ms (torch: ~100 ms in all). Inside ops:
matmul 56 ms (20 forward, 35 backward: ~70-80 GFLOP/s, BLAS speed), residual/bias adds 5,
layer_norm 4.5, dropout 3 (+ ~6 drawing its float64 random masks in F.dropout), softmax 2,
embedding backward 2 (np.add.at), relu 2, reshapes/transposes 2.5. The rest (~20 ms) is
Python: the autograd engine, Function.apply, module calls. The model's own code (masks,
head splitting, module calls) is ~2 ms.

Threads: by default each library runs as it does out of the box here — torch with
torch.set_num_threads(2), minitensor with its own defaults (on a machine of 2 cores or fewer, one
BLAS and one numba thread: see minitensor/__init__.py). With 2 OpenBLAS threads the weight
gradients xᵀ·dy — (128, 896) @ (896, 128) and the like — took 15-24 ms each instead of ~1 ms
with 1 thread on this VM (a 2-thread call waits for its second worker), so a step took
400-800 ms: try it with --our-threads 2. TRAIN_STEP_DROPOUT=0 removes dropout from both.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

# Thread pools must be told before numpy, numba or torch load (PERFORMANCE.md, item 6): idle
# workers that spin steal the core another library is computing on. Same settings for both.
for _var, _value in (("OPENBLAS_THREAD_TIMEOUT", "4"), ("OMP_WAIT_POLICY", "PASSIVE"),
                     ("NUMBA_THREADING_LAYER", "workqueue")):
    os.environ.setdefault(_var, _value)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import minitensor as mt                                   # noqa: E402
import minitensor.functional as F                         # noqa: E402
from transformer import Transformer, TransformerConfig   # noqa: E402
from transformer.masks import padding_mask               # noqa: E402

VOCAB, PAD, BOS, EOS = 16, 0, 1, 2
BATCH, SRC_LEN, TGT_LEN = 128, 7, 5
DROPOUT = float(os.environ.get("TRAIN_STEP_DROPOUT", "0.1"))


def make_batch(rng):
    """Random digits in the addition task's shapes; targets have a few padded tails."""
    src = rng.integers(3, VOCAB, (BATCH, SRC_LEN))
    tgt = rng.integers(3, VOCAB, (BATCH, TGT_LEN + 1))
    tgt[:, 0] = BOS
    lengths = rng.integers(3, TGT_LEN + 1, BATCH)
    for b, n in enumerate(lengths):
        tgt[b, n] = EOS
        tgt[b, n + 1:] = PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def build(seed=0):
    mt.manual_seed(seed)
    cfg = TransformerConfig.small(VOCAB, VOCAB, max_len=64, pad_id=PAD, dropout=DROPOUT)
    return Transformer(cfg)


def ours_step(model, opt, batch):
    src, tgt_in, tgt_out = batch
    opt.zero_grad()
    logits = model(src, tgt_in, padding_mask(src, PAD), padding_mask(tgt_in, PAD))
    loss = F.cross_entropy(logits, tgt_out, ignore_index=PAD)
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
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1),
                                                 ignore_index=PAD)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def timed(fn, batches, wall, cpu):
    """Append each step's wall time and process CPU time (all threads) to the lists."""
    for b in batches:
        t0, c0 = time.perf_counter(), time.process_time()
        fn(b)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)


def limit_threads(n):
    """Give numpy's BLAS and numba n threads (see PERFORMANCE.md: pools that spin while
    another library works steal each other's cores)."""
    try:
        import threadpoolctl
        threadpoolctl.threadpool_limits(n, user_api="blas")
    except ImportError:
        print("(threadpoolctl not installed: BLAS threads not limited)")
    try:
        import numba
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass


def blas_threads():
    try:
        import threadpoolctl
        return max((p["num_threads"] for p in threadpoolctl.threadpool_info()
                    if p["user_api"] == "blas"), default="?")
    except ImportError:
        return "?"


def numba_threads():
    import numba
    return numba.get_num_threads()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--rounds", type=int, default=3, help="alternating blocks per library")
    ap.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--our-threads", type=int, default=None,
                    help="BLAS and numba threads for minitensor (default: minitensor's own)")
    ap.add_argument("--profile", action="store_true", help="cProfile our steps")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()

    if args.our_threads is not None:
        limit_threads(args.our_threads)
    rng = np.random.default_rng(0)
    batches = [make_batch(rng) for _ in range(args.steps)]
    model = build()
    opt = mt.optim.Adam(model.parameters(), lr=1e-4)
    torch_step = None if args.no_torch else make_torch(model, args.torch_threads)

    for b in batches[:3]:                                 # warm up (numba compiles, caches)
        ours_step(model, opt, b)
        if torch_step:
            torch_step(b)

    ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
    for _ in range(args.rounds):
        timed(lambda b: ours_step(model, opt, b), batches, ours, ours_cpu)
        if torch_step:
            timed(torch_step, batches, theirs, theirs_cpu)

    print(f"addition-task training step (batch {BATCH}, src {SRC_LEN}, tgt {TGT_LEN}, "
          f"d_model 128, 4 heads, 2+2 layers, d_ff 512; forward + backward + Adam)")
    print(f"kernels backend: {mt.get_backend()}")
    print(f"threads: torch {args.torch_threads}, minitensor BLAS {blas_threads()}, numba "
          f"{numba_threads()}; {len(ours)} steps "
          f"each; wall = elapsed, cpu = process CPU time summed over threads (steadier on a "
          f"busy machine)")
    med, cmed = float(np.median(ours)) * 1e3, float(np.median(ours_cpu)) * 1e3
    print(f"minitensor: median {med:7.1f} ms/step wall (min {min(ours) * 1e3:.1f}), "
          f"{cmed:7.1f} ms cpu")
    if theirs:
        tmed, tcmed = float(np.median(theirs)) * 1e3, float(np.median(theirs_cpu)) * 1e3
        print(f"torch     : median {tmed:7.1f} ms/step wall (min {min(theirs) * 1e3:.1f}), "
              f"{tcmed:7.1f} ms cpu")
        print(f"ratio minitensor / torch: {med / tmed:.2f}x wall (medians), "
              f"{min(ours) / min(theirs):.2f}x (minima), {cmed / tcmed:.2f}x cpu")

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
