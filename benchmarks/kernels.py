"""minitensor.kernels: numba kernel vs its numpy twin vs PyTorch, side by side, float32.

    python benchmarks/kernels.py [--quick] [--no-torch] [--only GROUP]
    GROUP: softmax | bmm | bmm-blas | matmul | tiles | other | fusion | attention-tiles
    python benchmarks/kernels.py --compile-time      # first use: cold vs on-disk cache

Each row: the median time of one call (µs) after warm-up, over many repeats, for the numba
backend, the numpy twin and torch (when installed, torch.set_num_threads(2)), and the ratios
numpy/numba and torch/numba (> 1 means numba is faster). The machine is shared and noisy, so
the three take turns: in each of --rounds rounds (default 4) every case is timed in numba,
numpy and torch one right after the other (numba and numpy in turn first: whichever came
first after another case ran slower), and the table shows each column's median over the
rounds. Trust ratios measured in one run more than absolute times.

What is compared:
* softmax fwd: ours computes softmax(scale·x + mask) with a causal (L, L) bool mask on the 3-D
  attention shapes (plain softmax on (4096, 1024)); torch runs plain torch.softmax(x, -1) —
  one op, no mask, so the comparison is conservative.
* softmax bwd: ours the fused y ⊙ (dy − Σ dy·y)·scale; torch its aten backward kernel.
* bmm: q·kᵀ with kᵀ a transposed view (as attention computes it) and weights·v; then
  (bmm-blas) a few rows with the BLAS-calling stack kernel forced, which show why route
  gives attention stacks to the tile kernel.
* matmul: square products and the addition model's Linear shapes (B·L = 896, d_model 128,
  d_ff 512): forward, dX = dY·Wᵀ and dW = Xᵀ·dY.
* The "path" column says who computed a product on the numba backend (kernels/fast_matmul,
  `route`): "tiles" — the tile kernel (kernels/fast_matmul/microkernel.py), numba's threads
  each on its own matrices; "gemm" — numba's threads, each calling BLAS's gemm on its own
  matrices or rows; "numpy" — np.matmul (products too small to share, or where np.matmul won
  when route timed it; "numpy 1T": with BLAS on one thread, where that was faster). "tiles
  4x2" names the register tile route chose for that layout.
  The numpy twin is always np.matmul, with numpy's BLAS at its own thread count.
* tiles: the tile kernel with each register tile shape forced, on attention's stacks.

Torch is timed in a child process started with this script's original environment: torch
keeps its own default thread settings (minitensor's thread-pool defaults, set at import, are
for numpy and numba), and its OpenMP workers, which spin for a while after each op, cannot
steal the second core from numba's workers. The child builds the same inputs (same seed).
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

_ORIGINAL_ENV = dict(os.environ)  # the environment as given (for the torch child)
if "--threads" in sys.argv:  # must reach numba before it loads
    os.environ["NUMBA_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# minitensor before numpy: it shortens the spin of numpy's idle BLAS workers as numpy loads
import minitensor  # noqa: E402, F401, I001
import numpy as np  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from minitensor import kernels as K  # noqa: E402

try:
    import torch

    torch.set_num_threads(2)
except ImportError:  # torch is optional here
    torch = None


def median_us(fn, min_time=0.25, min_reps=30, max_reps=3000):
    """Median wall time of fn() in µs: 5 warm-up calls, then at least min_reps timed calls and
    at least min_time seconds."""
    for _ in range(5):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < min_reps or (
        time.perf_counter() - start < min_time and len(times) < max_reps
    ):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


class Case:
    def __init__(self, group, label, numba_fn, numpy_fn, torch_fn=None, path=""):
        self.group, self.label, self.path = group, label, path
        self.numba_fn, self.numpy_fn, self.torch_fn = numba_fn, numpy_fn, torch_fn
        self.runs, self.times = {}, {}  # column → µs of each round; their median


def softmax_cases(rng, quick):
    shapes = [(256, 8, 8), (512, 16, 16), (512, 32, 32), (512, 64, 64), (4096, 1024)]
    cases = []
    for shape in shapes[:2] if quick else shapes:
        x = rng.standard_normal(shape, dtype=np.float32)
        attention = len(shape) == 3
        mask = np.triu(np.ones(shape[-2:], dtype=bool), 1) if attention else None
        scale = 0.125 if attention else 1.0
        y = K.softmax_forward.numpy(x, scale, mask)
        dy = rng.standard_normal(shape, dtype=np.float32)
        tx, ty, tdy = (torch.from_numpy(a) for a in (x, y, dy)) if torch else (None,) * 3
        what = "masked, scaled" if attention else "plain"
        cases.append(
            Case(
                "softmax",
                f"softmax fwd {shape} {what}",
                lambda x=x, s=scale, m=mask: K.softmax_forward.numba(x, s, m),
                lambda x=x, s=scale, m=mask: K.softmax_forward.numpy(x, s, m),
                torch and (lambda tx=tx: torch.softmax(tx, -1)),
            )
        )
        cases.append(
            Case(
                "softmax",
                f"softmax bwd {shape}",
                lambda y=y, dy=dy, s=scale: K.softmax_backward.numba(y, dy, s),
                lambda y=y, dy=dy, s=scale: K.softmax_backward.numpy(y, dy, s),
                torch
                and (
                    lambda ty=ty, tdy=tdy: torch.ops.aten._softmax_backward_data(
                        tdy, ty, -1, torch.float32
                    )
                ),
            )
        )
    return cases


def bmm_cases(rng, quick):
    cases = []
    for bh in (256,) if quick else (256, 512):
        for L in (8, 16, 32, 64):
            for d in (16, 32):
                q, k = (rng.standard_normal((bh, L, d), dtype=np.float32) for _ in range(2))
                w = rng.standard_normal((bh, L, L), dtype=np.float32)
                v = rng.standard_normal((bh, L, d), dtype=np.float32)
                k_t = np.swapaxes(k, 1, 2)
                tq, tk, tw, tv = (
                    (torch.from_numpy(a) for a in (q, k, w, v)) if torch else (None,) * 4
                )
                cases.append(
                    Case(
                        "bmm",
                        f"bmm q·kᵀ ({bh},{L},{d})@({bh},{d},{L})",
                        lambda q=q, k_t=k_t: K.matmul.numba(q, k_t),
                        lambda q=q, k_t=k_t: K.matmul.numpy(q, k_t),
                        torch and (lambda tq=tq, tk=tk: torch.bmm(tq, tk.transpose(1, 2))),
                        path=_path(q, k_t),
                    )
                )
                cases.append(
                    Case(
                        "bmm",
                        f"bmm w·v ({bh},{L},{L})@({bh},{L},{d})",
                        lambda w=w, v=v: K.matmul.numba(w, v),
                        lambda w=w, v=v: K.matmul.numpy(w, v),
                        torch and (lambda tw=tw, tv=tv: torch.bmm(tw, tv)),
                        path=_path(w, v),
                    )
                )
    return cases


def bmm_blas_cases(rng, quick):
    """The BLAS-calling stack kernel forced (route gives attention stacks to the tile kernel):
    the comparison behind that rule."""
    cases = []
    for L, d in ((8, 16), (16, 32), (32, 32), (64, 32)):
        q, k = (rng.standard_normal((512, L, d), dtype=np.float32) for _ in range(2))
        w = rng.standard_normal((512, L, L), dtype=np.float32)
        k_t = np.swapaxes(k, 1, 2)
        tq, tk, tw = (torch.from_numpy(a) for a in (q, k, w)) if torch else (None,) * 3
        cases.append(
            Case(
                "bmm-blas",
                f"bmm q·kᵀ (512,{L},{d}) BLAS stack forced",
                lambda q=q, k_t=k_t: K.blas_matmul(q, k_t),
                lambda q=q, k_t=k_t: K.matmul.numpy(q, k_t),
                torch and (lambda tq=tq, tk=tk: torch.bmm(tq, tk.transpose(1, 2))),
                path="gemm",
            )
        )
        cases.append(
            Case(
                "bmm-blas",
                f"bmm w·v (512,{L},{L})@(512,{L},{d}) BLAS stack forced",
                lambda w=w, v=q: K.blas_matmul(w, v),
                lambda w=w, v=q: K.matmul.numpy(w, v),
                torch and (lambda tw=tw, tv=tq: torch.bmm(tw, tv)),
                path="gemm",
            )
        )
    return cases[:2] if quick else cases


def tile_cases(rng, quick):
    """The tile kernel with each register tile shape of TILE_SHAPES forced, on attention's
    stacks: the table behind `fastest`'s choice of tile per layout (the path column says
    which tile route picks for that layout on this machine)."""
    from minitensor.kernels.fast_matmul import products as P

    cases = []
    for L in (16,) if quick else (16, 32, 64):
        q, k = (rng.standard_normal((512, L, 32), dtype=np.float32) for _ in range(2))
        w = rng.standard_normal((512, L, L), dtype=np.float32)
        k_t = np.swapaxes(k, 1, 2)
        tq, tk, tw = (torch.from_numpy(a) for a in (q, k, w)) if torch else (None,) * 3
        for what, a, b, torch_fn in (
            ("q·kᵀ", q, k_t, torch and (lambda tq=tq, tk=tk: torch.bmm(tq, tk.transpose(1, 2)))),
            ("w·v", w, q, torch and (lambda tw=tw, tv=tq: torch.bmm(tw, tv))),
        ):
            for shape in P.TILE_SHAPES:
                cases.append(
                    Case(
                        "tiles",
                        f"{what} (512,{L},32) tile {shape[0]}x{shape[1]}",
                        lambda a=a, b=b, shape=shape: K.tiled_matmul(a, b, shape),
                        lambda a=a, b=b: K.matmul.numpy(a, b),
                        torch_fn,
                        path=_path(a, b),
                    )
                )
    return cases


def _path(a, b):
    """route's answer for a @ b. The route is chosen now, as the cases are built, before
    torch's child process starts (see _wait_until_cores_free); the label is read when the
    table is printed, the answer the timed calls settled on (a watched winner may have lost
    its layout since): the tile shape it picked ("tiles 4x2"), and "numpy 1T" where
    np.matmul runs with BLAS on one thread."""
    from minitensor.kernels import core_owner
    from minitensor.kernels.fast_matmul import products as P

    P._choose(a, b)

    def label():
        name, product = P._choose(a, b)
        product = getattr(product, "product", product)  # a watched choice: what it runs
        if name == "tiles":
            return "tiles {}x{}".format(*product.keywords["tile"])
        if product is P.numpy_product and core_owner() == "numba":
            return "numpy 1T"
        return name

    return label


def matmul_cases(rng, quick):
    cases = []
    sizes = (128, 512) if quick else (128, 256, 512, 1024)
    for n in sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        ta, tb = (torch.from_numpy(t) for t in (a, b)) if torch else (None, None)
        cases.append(
            Case(
                "matmul",
                f"matmul {n}³",
                lambda a=a, b=b: K.matmul.numba(a, b),
                lambda a=a, b=b: K.matmul.numpy(a, b),
                torch and (lambda ta=ta, tb=tb: torch.mm(ta, tb)),
                path=_path(a, b),
            )
        )
    rows = 896
    for d_in, d_out in ((128, 384), (128, 512), (128, 128), (512, 128)):
        x = rng.standard_normal((rows, d_in), dtype=np.float32)
        w = rng.standard_normal((d_in, d_out), dtype=np.float32)
        g = rng.standard_normal((rows, d_out), dtype=np.float32)
        tx, tw, tg = (torch.from_numpy(t) for t in (x, w, g)) if torch else (None,) * 3
        shape = f"({rows},{d_in})@({d_in},{d_out})"
        cases.append(
            Case(
                "matmul",
                f"Linear fwd {shape}",
                lambda x=x, w=w: K.matmul.numba(x, w),
                lambda x=x, w=w: K.matmul.numpy(x, w),
                torch and (lambda tx=tx, tw=tw: torch.mm(tx, tw)),
                path=_path(x, w),
            )
        )
        if quick:
            continue
        cases.append(
            Case(
                "matmul",
                f"Linear dX=dY·Wᵀ {shape}",
                lambda g=g, w=w: K.matmul_grad_a.numba(g, w),
                lambda g=g, w=w: K.matmul_grad_a.numpy(g, w),
                torch and (lambda tg=tg, tw=tw: torch.mm(tg, tw.t())),
                path=_path(g, w.T),
            )
        )
        cases.append(
            Case(
                "matmul",
                f"Linear dW=Xᵀ·dY {shape}",
                lambda x=x, g=g: K.matmul_grad_b.numba(x, g),
                lambda x=x, g=g: K.matmul_grad_b.numpy(x, g),
                torch and (lambda tx=tx, tg=tg: torch.mm(tx.t(), tg)),
                path=_path(x.T, g),
            )
        )
    return cases


def other_cases(rng, quick):
    """The other fused kernels of a Transformer step, at the addition model's sizes."""
    cases = []
    x = rng.standard_normal((896, 128), dtype=np.float32)
    w, b = np.ones(128, np.float32), np.zeros(128, np.float32)
    y, mean, rstd = K.layer_norm_forward.numpy(x, w, b, 1e-5)
    dy = rng.standard_normal(x.shape, dtype=np.float32)
    tx, tw, tb, tdy = (torch.from_numpy(a) for a in (x, w, b, dy)) if torch else (None,) * 4
    cases.append(
        Case(
            "other",
            "layer_norm fwd (896,128)",
            lambda: K.layer_norm_forward.numba(x, w, b, 1e-5),
            lambda: K.layer_norm_forward.numpy(x, w, b, 1e-5),
            torch and (lambda: torch.nn.functional.layer_norm(tx, (128,), tw, tb)),
        )
    )
    cases.append(
        Case(
            "other",
            "layer_norm bwd (896,128)",
            lambda: K.layer_norm_backward.numba(dy, x, mean, rstd, w),
            lambda: K.layer_norm_backward.numpy(dy, x, mean, rstd, w),
        )
    )
    logits = rng.standard_normal((640, 16), dtype=np.float32)
    targets = rng.integers(0, 16, 640)
    rows, lse = K.cross_entropy_forward.numpy(logits, targets, 0, 0.1)
    g = np.full(640, 1 / 640, np.float32)
    tl, tt = (torch.from_numpy(logits), torch.from_numpy(targets)) if torch else (None, None)
    cases.append(
        Case(
            "other",
            "cross_entropy fwd (640,16)",
            lambda: K.cross_entropy_forward.numba(logits, targets, 0, 0.1),
            lambda: K.cross_entropy_forward.numpy(logits, targets, 0, 0.1),
            torch
            and (
                lambda: torch.nn.functional.cross_entropy(
                    tl, tt, ignore_index=0, label_smoothing=0.1, reduction="none"
                )
            ),
        )
    )
    cases.append(
        Case(
            "other",
            "cross_entropy bwd (640,16)",
            lambda: K.cross_entropy_backward.numba(logits, targets, lse, g, 0, 0.1),
            lambda: K.cross_entropy_backward.numpy(logits, targets, lse, g, 0, 0.1),
        )
    )
    h = rng.standard_normal((128, 7, 512), dtype=np.float32)
    th = torch.from_numpy(h) if torch else None
    cases.append(
        Case(
            "other",
            "dropout p=0.1 (128,7,512)",
            lambda: K.dropout.numba(h, 12345, 0.1),
            lambda: K.dropout.numpy(h, 12345, 0.1),
            torch and (lambda: torch.nn.functional.dropout(th, 0.1, training=True)),
        )
    )
    params = [rng.standard_normal((128, 512), dtype=np.float32) for _ in range(4)]
    params[2] = np.abs(params[2])
    adam_args = (0.9, 0.98, 1e-3, 0.1, 1e-9, np.empty_like(params[0]))
    cases.append(
        Case(
            "other",
            "adam_update (128,512)",
            lambda: K.adam_update.numba(*params, params[2], *adam_args),
            lambda: K.adam_update.numpy(*params, params[2], *adam_args),
        )
    )
    return cases


def fusion_cases(rng, quick):
    """The layers' fusions (docs/kernels.md, "Fusions in the layers"): bias + activation after
    the FFN's first Linear, at the addition model's hidden size."""
    cases = []
    h = rng.standard_normal((896, 512), dtype=np.float32)
    b = rng.standard_normal(512, dtype=np.float32)
    dy = rng.standard_normal(h.shape, dtype=np.float32)
    th, tb = (torch.from_numpy(h), torch.from_numpy(b)) if torch else (None, None)
    torch_act = {"relu": torch and torch.relu, "gelu": torch and torch.nn.functional.gelu}
    for act in ("relu", "gelu"):
        _, saved = K.bias_activation_forward.numpy(h, b, act)
        cases.append(
            Case(
                "fusion",
                f"bias + {act} fwd (896,512)",
                lambda act=act: K.bias_activation_forward.numba(h, b, act),
                lambda act=act: K.bias_activation_forward.numpy(h, b, act),
                torch and (lambda act=act: torch_act[act](th + tb)),
            )
        )
        cases.append(
            Case(
                "fusion",
                f"bias + {act} bwd (896,512)",
                lambda act=act, s=saved: K.bias_activation_backward.numba(dy, s, act),
                lambda act=act, s=saved: K.bias_activation_backward.numpy(dy, s, act),
            )
        )
    return cases


def attention_tile_cases(rng, quick):
    """The fused attention's kernels with each tile size of TILES forced, forward and backward,
    on the long-sequence and paper shapes: the table behind `tile_sizes`' choice per layout
    (the path column says which it chose on this machine). The numpy column is the twin."""
    from minitensor.kernels import flash_attention as FA

    long, paper = (8, 4, 512, 32), (16, 8, 64, 64)
    shapes = (
        [((1, 2, 128, 32), "padding")]
        if quick
        else [
            (long, "padding"),
            (long, "causal"),
            (paper, "padding"),
        ]
    )
    cases = []
    for shape, kind in shapes:
        cases += _attention_tile_cases_of(FA, rng, shape, kind)
    return cases


def _attention_tile_cases_of(FA, rng, shape, kind):
    """attention_tile_cases' rows for one shape and mask kind."""
    B, _, L, _ = shape
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    mask, causal = (None, 0) if kind == "causal" else (rng.random((B, 1, 1, L)) < 0.1, None)
    FA._CHOSEN.clear()  # what tile_sizes chooses on this layout, forward then backward
    out, lse = FA.fused_attention_forward_numba(q, k, v, mask, None, causal)
    dout = rng.standard_normal(out.shape, dtype=np.float32)
    FA.fused_attention_backward_numba(q, k, v, out, lse, dout, mask, None, causal)
    chosen = dict(zip(("forward", "backward"), FA._CHOSEN.values()))
    forward = (q, k, v, mask, None, causal)
    backward = (q, k, v, out, lse, dout, mask, None, causal)
    kernels = {
        "forward": (FA.fused_attention_forward_numba, FA.fused_attention_forward_numpy, forward),
        "backward": (
            FA.fused_attention_backward_numba,
            FA.fused_attention_backward_numpy,
            backward,
        ),
    }
    cases = []
    for direction, (ours, twin, args) in kernels.items():
        for tiles in FA.TILES:
            cases.append(
                Case(
                    "attention-tiles",
                    f"attention {direction[:3]} {shape} {kind} tiles {tiles[0]}x{tiles[1]}",
                    functools.partial(ours, *args, tiles=tiles),
                    functools.partial(twin, *args),
                    path="chosen" if chosen.get(direction) == tiles else "",
                )
            )
    return cases


class TorchChild:
    """Torch's timings, from a child process started with this script's original environment
    (see the module docstring): it builds the same cases and times the one it is asked for."""

    def __init__(self):
        args_without_threads = [
            a for i, a in enumerate(sys.argv[1:]) if a != "--threads" and sys.argv[i] != "--threads"
        ]
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--torch-child",
        ] + args_without_threads
        self.process = subprocess.Popen(
            command, env=_ORIGINAL_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the torch child process did not start")

    def time_all(self):
        """µs per call of every case in torch, in order (None where a case has no torch
        version): one round of the torch column."""
        self.process.stdin.write("all\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait()


FIRST_USE = """
import sys
import time
t0 = time.perf_counter()
import numpy as np
import minitensor.kernels as K
t1 = time.perf_counter()
for dtype in (np.float32, np.float64):          # every kernel once (forward and backward)
    x = np.ones((4, 2, 3, 5), dtype)
    y = K.softmax_forward(x, 0.5, x[0, 0, 0] < 0)
    K.softmax_backward(y, x, 0.5)
    K.log_softmax_backward(K.log_softmax_forward(x), x)
    x2, t = x.reshape(-1, 5), np.zeros(24, np.int64)
    rows, lse = K.cross_entropy_forward(x2, t, -100, 0.1)
    K.cross_entropy_backward(x2, t, lse, rows, -100, 0.1)
    out, mean, rstd = K.layer_norm_forward(x2, x2[0], x2[0], 1e-5)
    K.layer_norm_backward(x2, x2, mean, rstd, x2[0])
    K.tiled_matmul(x, np.swapaxes(x, -1, -2))                     # kᵀ packed
    K.tiled_matmul(x, np.swapaxes(x, -1, -2).copy())               # read in place
    gemm_product = K.blas_matmul   # calls BLAS
    gemm_product(x.reshape(-1, 5), x[0, 0].T)
    gemm_product(x, np.swapaxes(x, -1, -2))
    K.dropout(x, 7, 0.1)
    param, m, v, work = x2.copy(), x2.copy(), x2.copy(), x2.copy()
    K.adam_update(param, x2, m, v, x2.copy(), 0.9, 0.98, 1e-3, 0.1, 1e-9, work)
t2 = time.perf_counter()
print(f"{t1 - t0:.2f} {t2 - t1:.2f}")
"""


def compile_time():
    """Time a fresh process's import and first call of every kernel (float32 and float64,
    serial builds), first with an empty numba cache directory, then again with the cache it
    filled."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, MINITENSOR_BACKEND="numba")
        for label in ("cold (empty cache)", "warm (on-disk cache)"):
            t0 = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", FIRST_USE],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            total = time.perf_counter() - t0
            import_s, first_calls_s = done.stdout.split()
            notices = done.stderr.count("minitensor: compiling")
            print(
                f"{label:<22} process {total:5.1f} s = import {import_s} s + first kernel calls "
                f"{first_calls_s} s (+ interpreter start); compile notices printed: {notices}"
            )


GROUPS = {
    "softmax": softmax_cases,
    "bmm": bmm_cases,
    "bmm-blas": bmm_blas_cases,
    "matmul": matmul_cases,
    "tiles": tile_cases,
    "other": other_cases,
    "fusion": fusion_cases,
    "attention-tiles": attention_tile_cases,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few shapes, shorter timing")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch column")
    parser.add_argument("--only", choices=sorted(GROUPS), help="one group of kernels")
    parser.add_argument(
        "--threads",
        type=int,
        help="numba threads for minitensor (default: one per core, one while the machine "
        "is busy; a number given here holds); torch always gets 2",
    )
    parser.add_argument(
        "--compile-time",
        action="store_true",
        help="time the first use of every kernel, cold and from the cache",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="times each case is measured, taking turns with the others "
        "(default 4: numba first in half of them; the table shows the median)",
    )
    parser.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile_time:
        return compile_time()
    global torch
    if args.no_torch:
        torch = None
    rng = np.random.default_rng(0)
    groups = [args.only] if args.only else list(GROUPS)
    cases = [c for g in groups for c in GROUPS[g](rng, args.quick)]
    min_time = 0.05 if args.quick else 0.25

    if args.torch_child:  # we are the child: time torch only
        print("ready", flush=True)
        for _ in sys.stdin:  # one line per round: time every case
            times = [median_us(c.torch_fn, min_time) if c.torch_fn else None for c in cases]
            print(json.dumps(times), flush=True)
        return

    import numba

    print(
        f"{describe()} ({numba.threading_layer()}), "
        f"torch {torch.__version__ + ' (2 threads)' if torch else 'not used'}; "
        f"{len(cases)} cases, float32, median µs per call, median of {args.rounds} rounds",
        file=sys.stderr,
    )
    child = TorchChild() if torch else None
    for round_ in range(args.rounds):  # the columns side by side, round after round
        if child:  # torch's column of the round, then a pause (see _wait_until_cores_free)
            for case, us in zip(cases, child.time_all()):
                if us is not None:
                    case.runs.setdefault("torch", []).append(us)
            _wait_until_cores_free()
        for case in cases:
            # numba first in one round, numpy first in the next: the one timed first after
            # another case was slower by a tenth on big products that both columns computed
            # with the same np.matmul call
            columns = [("numba", case.numba_fn), ("numpy", case.numpy_fn)]
            for column, fn in columns if round_ % 2 == 0 else columns[::-1]:
                case.runs.setdefault(column, []).append(median_us(fn, min_time))
    if child:
        child.close()
    for case in cases:
        case.times = {column: statistics.median(runs) for column, runs in case.runs.items()}

    header = (
        f"| {'kernel, shape':<48} | {'path':<10} | {'numba µs':>9} | {'numpy µs':>9} | "
        f"{'torch µs':>9} | {'numpy/numba':>11} | {'torch/numba':>11} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(col)) for col in header.split("|")[1:-1]) + "|")
    for case in cases:
        t = case.times
        torch_us = f"{t['torch']:9.1f}" if "torch" in t else f"{'-':>9}"
        torch_ratio = f"{t['torch'] / t['numba']:11.2f}" if "torch" in t else f"{'-':>11}"
        print(
            f"| {case.label:<48} | {_label(case.path):<10} | {t['numba']:9.1f} | "
            f"{t['numpy']:9.1f} | {torch_us} | {t['numpy'] / t['numba']:11.2f} | "
            f"{torch_ratio} |"
        )


def _wait_until_cores_free(most_seconds=3.0):
    """Wait until minitensor sees the cores free again after torch's child ran. minitensor's
    polite threads (jit.cores) run on one thread while other processes keep the CPUs busy, as
    measured over the last half second or so: timed case by case right after torch's child,
    the numba column ran on one thread for a while — routes chosen then (the tile kernel on
    one thread against np.matmul on BLAS's two) sent attention's q·kᵀ stack to np.matmul at
    twice the tiles' time. A process running alone has the cores; so does this column."""
    import numba

    from minitensor.kernels import jit

    alone = min(numba.get_num_threads(), len(os.sched_getaffinity(0)))
    deadline = time.perf_counter() + most_seconds
    while time.perf_counter() < deadline:
        time.sleep(0.25)
        if jit.cores() >= alone:
            return


def _label(path):
    """The path column: a fixed name, the answer of a `_path` read now, or "kernel"."""
    return (path() if callable(path) else path) or "kernel"


if __name__ == "__main__":
    main()
