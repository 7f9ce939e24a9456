"""Teaching code as learners write it, timed under PyTorch and under minitensor, side by side.

    python benchmarks/learner_code.py [--rounds 5] [--steps 10] [--cases tiny,char,small]

The model is the nanoGPT-style decoder-only GPT of tests/ports/gpt_style_model.py — a PyTorch
file (`import torch`), which both libraries run unchanged: minitensor through the same swap
of imports as the port tests (tests/_torch_shim.py). It is written the way such code is
written, not the way the transformer package is: nn.Linear on (B, T, C) batches, one c_attn
Linear split into q, k, v, .view/.transpose into heads, F.scaled_dot_product_attention with
is_causal (or, in the "-manual" cases, the masked softmax written out), nn.GELU, AdamW,
clip_grad_norm_. A training step is forward, cross-entropy, backward, clipping and AdamW.

    tiny          the port's own size: 2 layers, 2 heads, d 16, T 16, batch 16
    char          a character-level model: 2 layers, 4 heads, d 64, T 32, batch 32
    small         4 layers, 4 heads, d 128, T 64, batch 32
    small-manual  `small` with attention written out (q @ kᵀ, masked_fill, softmax, @ v)

Each case runs in two child processes, one per library (their thread pools never meet; torch
on 2 threads; one model per process, as a learner's script has: minitensor's trial of the
cores' owners times that model's steps), which take turns, one block of --steps steps at a
time, for --rounds rounds; each child first trains 45 steps (numba compiles, minitensor times
its candidates and the owners of the cores). We print the median ms per step and the ratio.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.machine import print_medians, take_turns  # noqa: E402

CASES = {
    "tiny": dict(block_size=16, vocab_size=32, n_layer=2, n_head=2, n_embd=16, batch=16),
    "char": dict(block_size=32, vocab_size=65, n_layer=2, n_head=4, n_embd=64, batch=32),
    "small": dict(block_size=64, vocab_size=65, n_layer=4, n_head=4, n_embd=128, batch=32),
    "small-manual": dict(
        block_size=64, vocab_size=65, n_layer=4, n_head=4, n_embd=128, batch=32, flash=False
    ),
}
WARMUP_STEPS = 45


def stepper(port, spec, seed=0):
    """A function running one training step of the port's GPT at the size `spec`."""
    import numpy as np

    torch = port.torch
    spec = dict(spec)
    batch, flash = spec.pop("batch"), spec.pop("flash", True)
    torch.manual_seed(seed)
    model = port.GPT(port.GPTConfig(flash=flash, **spec))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    data = rng.integers(0, spec["vocab_size"], 100_000)
    t = spec["block_size"]

    def step():
        starts = rng.integers(0, len(data) - t - 1, batch)
        x = torch.from_numpy(np.stack([data[i : i + t] for i in starts]))
        y = torch.from_numpy(np.stack([data[i + 1 : i + 1 + t] for i in starts]))
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def child(lib, cases, steps):
    """Warm every case up, then time `steps` steps of each per "go" line: JSON ms per step."""
    import contextlib
    import io
    import json

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import _torch_shim

    with contextlib.redirect_stdout(io.StringIO()):  # the port prints its parameter count
        port = _torch_shim.load("ports/gpt_style_model.py", lib)
        if lib == "torch":
            port.torch.set_num_threads(2)
        steppers = {name: stepper(port, CASES[name]) for name in cases}
    for step in steppers.values():
        for _ in range(WARMUP_STEPS):
            step()
    print("ready", flush=True)
    for _ in sys.stdin:
        result = {}
        for name, step in steppers.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            result[name] = (time.perf_counter() - start) / steps * 1e3
        print(json.dumps(result), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps per case per round")
    ap.add_argument("--cases", default=",".join(CASES), help=f"from {', '.join(CASES)}")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--child", choices=("minitensor", "torch"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    if args.child:
        return child(args.child, cases, args.steps)
    libs = ["minitensor"] + ([] if args.no_torch else ["torch"])
    times = {lib: {} for lib in libs}
    script = os.path.abspath(__file__)
    for case in cases:
        timed = take_turns(script, libs, ["--cases", case, "--steps", str(args.steps)], args.rounds)
        for lib in libs:
            times[lib].update(timed[lib])
    title = f"nanoGPT-style training step (tests/ports/gpt_style_model.py), median of {args.rounds}"
    print_medians(times, cases, str, 2, title, ("case", "ms/step"))


if __name__ == "__main__":
    main()
