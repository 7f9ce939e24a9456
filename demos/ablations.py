"""Remove one component at a time and watch what changes (a learner's third exercise, after
building the model and looking at its attention).

    python demos/ablations.py                     # all variants, 600 steps each (a few minutes)
    python demos/ablations.py --steps 300 --variants baseline,no-positional,no-scale

Every variant trains the addition model of demos/addition_task.py from the same seed, on the same
data, for the same fixed budget, then prints one table:

- held-out exact match and final training loss;
- max |score| per attention layer: the largest |QKᵀ·scale| the softmax saw on the held-out batch
  (E = encoder self-, D = decoder self-, X = cross-attention, then the layer number);
- saturation: the mean over attention rows of the largest softmax weight (1.0 = every row puts
  all its weight on one key — the softmax is saturated and passes almost no gradient).

What to look for:
- no-positional: attention alone is order-blind, so 123+456 and 321+654 look the same: accuracy
  stays near zero;
- no-scale (drop 1/√d_k): scores come out √d_k times larger ("Attention Is All You Need",
  §3.2.1: for unit-variance q and k, q·k has variance d_k),
  rows of the softmax saturate and pass little gradient; in our 600-step run it had not learned
  (docs/addition_recipe.md has the table);
- pre-norm: x + F(LN(x)) instead of LN(x + F(x)); similar here, steadier for deep stacks;
- embed-scale: ×√d_model with embeddings initialised N(0, 1/d_model) is harmless;
  embed-scale-N01: ×√d_model on N(0, 1) embeddings (PyTorch's default init) makes the token
  vectors √d_model times larger than the positional encoding, which then drowns: the model
  learns far more slowly (a PyTorch run of the same model reached only 3.6% after 2,249 steps).

Writes the table to --out/ablations.md as well.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import addition_task as add  # noqa: E402  (the same model, data and evaluation)
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
from minitensor.nn import init  # noqa: E402
from transformer import Transformer  # noqa: E402
from transformer.tasks import AdditionTask  # noqa: E402
from transformer.training import evaluate, seq2seq_batch, train  # noqa: E402

# name → (what it changes, config changes, re-initialise embeddings N(0, 1)?)
VARIANTS = {
    "baseline": ("the recipe of addition_task.py", {}, False),
    "no-positional": ("no positional encoding", {"positional": "none"}, False),
    "no-scale": ("scores not divided by √d_k", {"attention_scale": False}, False),
    "pre-norm": ("Pre-Norm instead of Post-Norm", {"norm_first": True}, False),
    "embed-scale": (
        "embeddings ×√d_model, init N(0, 1/d_model)",
        {"scale_embeddings": True},
        False,
    ),
    "embed-scale-N01": ("embeddings ×√d_model, init N(0, 1)", {"scale_embeddings": True}, True),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated subset of: " + ", ".join(VARIANTS),
    )
    p.add_argument("--steps", type=int, default=600, help="training steps per variant")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/ablations")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def short_name(path):
    """encoder.layers.1.self_attn → E1, decoder.layers.0.self_attn → D0, …cross_attn → X0."""
    parts = path.split(".")
    kind = "E" if parts[0] == "encoder" else ("X" if parts[-1] == "cross_attn" else "D")
    return f"{kind}{parts[2]}"


def run_variant(name, args, task):
    _, changes, n01 = VARIANTS[name]
    base = add.parse_args(
        ["--d-model", str(args.d_model), "--heads", str(args.heads), "--layers", str(args.layers)]
    )
    config = add.build_config(base, len(task.tokenizer)).replace(**changes)
    mt.manual_seed(args.seed)
    model = Transformer(config)
    if n01:
        for emb in (model.src_embed.token, model.tgt_embed.token):
            init.normal_(emb.weight, 0.0, 1.0)
    rng = np.random.default_rng(args.seed)
    optimizer = mt.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = mt.optim.lr_scheduler.WarmupCosineLR(
        optimizer,
        warmup_steps=min(200, args.steps // 3),
        total_steps=args.steps,
        min_lr=args.lr * 0.05,
    )
    history = train(
        model,
        optimizer,
        lambda s: seq2seq_batch(*task.batch(args.batch_size, rng)),
        steps=args.steps,
        scheduler=scheduler,
        max_grad_norm=base.clip or None,
        quiet=args.quiet,
        desc=name,
    )
    heldout_src, heldout_tgt = task.heldout()
    correct, _ = add.heldout_exact_match(model, task, heldout_src)
    # one teacher-forced forward on held-out problems: the score statistics come from it
    val = evaluate(model, [seq2seq_batch(heldout_src[:256], heldout_tgt[:256])])
    stats = model.score_stats()
    final_loss = float(np.mean(history.losses[-20:]))
    return {
        "variant": name,
        "exact_match": float(correct.mean()),
        "final_loss": final_loss,
        "val_loss": val["loss"],
        "seconds": history.seconds,
        "max_score": {short_name(p): s["max_abs_score"] for p, s in stats.items()},
        "saturation": float(np.mean([s["max_weight_mean"] for s in stats.values()])),
    }


def table(rows):
    layers = list(rows[0]["max_score"])
    head = (
        "| variant | what changes | held-out exact match | final train loss | held-out loss | "
        + " | ".join(f"max\\|score\\| {k}" for k in layers)
        + " | saturation |"
    )
    lines = [head, "|" + "---|" * (6 + len(layers))]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {VARIANTS[r['variant']][0]} | {100 * r['exact_match']:.1f}% | "
            f"{r['final_loss']:.3f} | {r['val_loss']:.3f} | "
            + " | ".join(f"{r['max_score'].get(k, float('nan')):.1f}" for k in layers)
            + f" | {r['saturation']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    t0 = time.perf_counter()
    args = parse_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"ablations: unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    task = AdditionTask()
    rows = []
    for name in names:
        rows.append(run_variant(name, args, task))
        if args.quiet:
            print(
                f"{name}: {100 * rows[-1]['exact_match']:.1f}% ({rows[-1]['seconds']:.0f} s)",
                flush=True,
            )
    text = (
        f"Addition task, {args.steps} steps per variant, batch {args.batch_size}, d_model "
        f"{args.d_model}, {args.heads} heads, {args.layers}+{args.layers} layers, seed "
        f"{args.seed}.\n\n" + table(rows) + "\n"
    )
    print()
    print(text)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "ablations.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}  (total {time.perf_counter() - t0:.0f} s)")
    return rows


if __name__ == "__main__":
    add.common.run(main)
