"""Train the encoder-decoder Transformer to add: ``123+456`` → ``579``.

The first project a learner is recommended to build: a Transformer for an addition task, then
look at every layer's attention, then remove a component and watch what changes (that is
demos/ablations.py).

    python demos/addition_task.py                 # the default recipe: ≥ 99.5% in well under 3 min
    python demos/addition_task.py --seed 1 --quiet
    python demos/addition_task.py --eval-only     # reload runs/addition/checkpoint.npz and report
    python demos/addition_task.py --no-positional-encoding --steps 1500   # an ablation by hand

What it does:
- the source is both numbers zero-padded (``023+456``); the model writes the sum's digits
  least-significant first (``9740`` for 479) and the printout shows it in normal order —
  see transformer/tasks/addition.py for why that order trains faster;
- every step draws a fresh batch of problems; a fixed held-out set of 1,000 problems is never
  trained on, and greedy decoding on it gives the exact-match accuracy printed every few
  hundred steps; training stops at --target accuracy or after --steps;
- at the end it prints held-out accuracy and predictions (failures first) and writes into --out:
  checkpoint.npz, attention_*.png (every layer and head of the three attentions on one example),
  graph_train_step.svg (the collapsed graph of one training step; .dot without Graphviz) and
  curves.png (loss and accuracy).

The recipe (defaults) and why: see docs/addition_recipe.md.
"""

import argparse
import os
import sys
import time

T_START = time.perf_counter()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402  (also puts the repository root on sys.path)
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
from transformer import Transformer, TransformerConfig  # noqa: E402
from transformer.decoding import greedy_decode  # noqa: E402
from transformer.tasks import AdditionTask  # noqa: E402
from transformer.training import evaluate, seq2seq_batch, sequence_loss, shift_right, train  # noqa: E402
from transformer.viz import save_attention, token_labels  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--digits", type=int, default=3, help="digits per operand")
    p.add_argument(
        "--steps",
        type=int,
        default=3000,
        help="step budget (training stops earlier "
        "at --target accuracy); also the length of the cosine learning-rate decay",
    )
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2, help="encoder layers = decoder layers")
    p.add_argument("--d-ff", type=int, default=None, help="feed-forward width (default 4·d_model)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (Adam)")
    p.add_argument("--warmup", type=int, default=200, help="linear warmup steps")
    p.add_argument(
        "--clip",
        type=float,
        default=1.0,
        help="clip the gradients' global norm to this (0: no clipping)",
    )
    p.add_argument("--beta2", type=float, default=0.999, help="Adam's second-moment decay")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--norm-first", action="store_true", help="Pre-Norm instead of the paper's Post-Norm"
    )
    p.add_argument(
        "--no-positional-encoding",
        action="store_true",
        help="drop the sinusoidal positions (the model then cannot tell 123 from 321)",
    )
    p.add_argument("--no-scale", action="store_true", help="drop the 1/√d_k in attention")
    p.add_argument(
        "--scale-embeddings",
        action="store_true",
        help="multiply token embeddings by √d_model as the paper does",
    )
    p.add_argument(
        "--normal-order",
        action="store_true",
        help="emit the sum most-significant digit first (slower to learn)",
    )
    p.add_argument("--target", type=float, default=0.995, help="stop at this held-out exact match")
    p.add_argument(
        "--eval-every",
        type=int,
        default=100,
        help="held-out evaluation interval; a fifth of it once the model gets half the "
        "screened problems right, so that training stops soon after it reaches --target",
    )
    p.add_argument(
        "--diagnostics",
        type=int,
        default=0,
        metavar="N",
        help="print gradient norms, attention score ranges and train/val loss every N steps",
    )
    p.add_argument(
        "--trace", action="store_true", help="print every op of the first step (mt.viz.trace)"
    )
    p.add_argument("--out", default="runs/addition", help="output folder")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT/checkpoint.npz up to "
        "--steps (the checkpoint's model and task settings win over the flags)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=200,
        metavar="N",
        help="save OUT/checkpoint.npz every N steps (0: only at the end); Ctrl-C also saves "
        "it, after the step under way, and says how to --resume",
    )
    p.add_argument(
        "--eval-only", action="store_true", help="load OUT/checkpoint.npz, evaluate, draw"
    )
    p.add_argument("--no-figures", action="store_true", help="skip the PNG/SVG files")
    p.add_argument("--quiet", action="store_true", help="no progress bar; only the final report")
    return p.parse_args(argv)


def build_config(args, vocab_size):
    return TransformerConfig(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        d_model=args.d_model,
        n_heads=args.heads,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        d_ff=args.d_ff or 4 * args.d_model,
        dropout=args.dropout,
        activation="relu",
        norm_first=args.norm_first,
        positional="none" if args.no_positional_encoding else "sinusoidal",
        scale_embeddings=args.scale_embeddings,
        attention_scale=not args.no_scale,
        max_len=32,
        pad_id=0,
    )


def _eval_interval(args, screened):
    """Steps between held-out evaluations: --eval-every, a fifth of it once the model gets
    half the screened problems right, a twentieth once it gets nine tenths of the target.
    Accuracy climbs from half to the target within a few hundred steps, and evaluations 100
    steps apart would train up to 99 steps past it; each of the extra ones costs about a step
    (a screen of 200 problems), so the closer the target, the more often it is checked.
    Evaluating only reads the model: the run is the same, step for step."""
    if screened["exact_match"] >= 0.9 * args.target:
        return max(1, args.eval_every // 20)
    if screened["exact_match"] >= args.target / 2:
        return max(1, args.eval_every // 5)
    return args.eval_every


def _evaluations(args, screened):
    """train()'s eval_every: step → whether to evaluate after it (0 with --eval-every 0: only
    after the last step)."""
    if args.eval_every <= 0:
        return 0
    return lambda step: step % _eval_interval(args, screened) == 0


def _last_exact_match(history):
    """The held-out exact match of the last evaluation in `history` (a resumed run), or 0."""
    evals = history.evals if history is not None else []
    return float(evals[-1].get("exact_match", 0.0)) if evals else 0.0


def heldout_exact_match(model, task, heldout_src, n=None, start=0):
    """Greedy-decode held-out problems start … start + n − 1 (default: to the end) → (bool
    correct (n,), ids)."""
    stop = len(heldout_src) if n is None else start + n
    was = model.training
    model.eval()
    try:
        pred = _ids(
            greedy_decode(
                model,
                heldout_src[start:stop],
                max_len=task.tgt_len,
                bos_id=task.tokenizer.bos_id,
                eos_id=task.tokenizer.eos_id,
            )
        )
    finally:
        model.train(was)
    return task.correct(pred, task.heldout_a[start:stop], task.heldout_b[start:stop]), pred


def _decode_the_rest(model, task, heldout_src, first, first_pred):
    """Every held-out problem's (correct, ids), given those of the first len(first): the rest
    are decoded and appended."""
    n = len(first)
    rest, rest_pred = heldout_exact_match(model, task, heldout_src, start=n)
    # the two decodings may end at different lengths (each stops once all its rows wrote <eos>)
    width = max(first_pred.shape[1], rest_pred.shape[1])
    pred = np.full((len(heldout_src), width), task.tokenizer.pad_id, dtype=first_pred.dtype)
    pred[:n, : first_pred.shape[1]], pred[n:, : rest_pred.shape[1]] = first_pred, rest_pred
    return np.concatenate([first, rest]), pred


def _ids(x):
    return np.asarray(x.numpy() if isinstance(x, mt.Tensor) else x)


def report(task, correct, pred, say, n_show=8):
    """Held-out accuracy and a few predictions, failures first."""
    texts = task.tokenizer.decode_batch(pred)
    say(f"held-out exact match: {correct.mean():.2%} ({int(correct.sum())}/{correct.size})")
    wrong = np.flatnonzero(~correct)
    right = np.flatnonzero(correct)
    if task.reverse_answer:
        say("(the model writes the sum least-significant digit first; shown here in normal order)")
    shown = list(wrong[: n_show // 2]) + list(right[: n_show - min(len(wrong), n_show // 2)])
    if len(wrong):
        say(f"{len(wrong)} failures, e.g.:")
    for i in shown:
        say("  " + task.describe(task.heldout_a[i], task.heldout_b[i], texts[i]))


def main(argv=None):
    args = parse_args(argv)
    say = print
    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "checkpoint.npz")
    ckpt = None
    if args.resume or args.eval_only:
        # the checkpoint's model and task win over the flags (only --steps etc. apply)
        model, config, ckpt = common.load_model(ckpt_path)
        saved = ckpt.get("extra") or {}
        args.digits = int(str(saved.get("task", f"addition-{args.digits}")).split("-")[1])
        args.normal_order = not bool(saved.get("reverse_answer", not args.normal_order))
    task = AdditionTask(digits=args.digits, reverse_answer=not args.normal_order)
    tok = task.tokenizer
    heldout_src, heldout_tgt = task.heldout()
    val_batches = [seq2seq_batch(heldout_src[:256], heldout_tgt[:256])]

    mt.manual_seed(args.seed)
    if ckpt is not None:
        model.train()
        history = common.restore_history(ckpt)
        start_step = int(ckpt["step"])
        rng = common.restore_data_rng(ckpt, args.seed)
        if "rng" in ckpt:
            mt.set_rng_state(ckpt["rng"])
    else:
        config = build_config(args, len(tok))
        model = Transformer(config)
        history, start_step = None, 0
        rng = np.random.default_rng(args.seed)

    optimizer = mt.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, args.beta2))
    scheduler = mt.optim.lr_scheduler.WarmupCosineLR(
        optimizer,
        warmup_steps=min(args.warmup, args.steps),
        total_steps=args.steps,
        min_lr=args.lr * 0.05,
    )
    if ckpt is not None and "optimizer" in ckpt and not args.eval_only:
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])

    if not args.quiet:
        say(
            f"{task.digits}-digit addition: source "
            f"{task.problem_text(123 % task.high, 456 % task.high)!r}"
            f" → target {task.answer_text(123 % task.high + 456 % task.high)!r}"
            f"{' (sum reversed)' if task.reverse_answer else ''}; "
            f"{model.num_parameters():,} parameters; d_model {config.d_model}, {config.n_heads} "
            f"heads, {config.num_encoder_layers}+{config.num_decoder_layers} layers"
        )

    screened = {"exact_match": _last_exact_match(history)}
    decoded = {}  # the last evaluation's decoding of all held-out problems, if it made one

    def eval_fn(m):
        # Greedy decoding of all 1,000 held-out problems costs several training steps, so
        # screen on the first 200 and decode the other 800 only when those reach the target.
        decoded.clear()
        first, first_pred = heldout_exact_match(m, task, heldout_src, 200)
        screened["exact_match"] = float(first.mean())
        if first.mean() < args.target:
            return {"exact_match": float(first.mean()), "evaluated_on": 200}
        correct, pred = _decode_the_rest(m, task, heldout_src, first, first_pred)
        decoded.update(correct=correct, pred=pred)
        return {"exact_match": float(correct.mean()), "evaluated_on": correct.size}

    def save(step, history):  # atomic (mt.save): Ctrl-C mid-save leaves the previous file
        return common.save_checkpoint(
            ckpt_path,
            model,
            config,
            optimizer=optimizer,
            scheduler=scheduler,
            step=step,
            history=history,
            data_rng=rng,
            extra={"task": f"addition-{task.digits}", "reverse_answer": task.reverse_answer},
        )

    remaining = max(0, args.steps - start_step)
    written = []  # files this run wrote (--eval-only only reads the checkpoint)
    if not args.eval_only and remaining > 0:
        history = train(
            model,
            optimizer,
            lambda step: seq2seq_batch(*task.batch(args.batch_size, rng)),
            steps=remaining,
            scheduler=scheduler,
            label_smoothing=args.label_smoothing,
            max_grad_norm=args.clip or None,
            eval_fn=eval_fn,
            eval_every=_evaluations(args, screened),
            stop_when=lambda metrics: metrics.get("exact_match", 0.0) >= args.target,
            val_batches=val_batches,
            diagnostics=args.diagnostics > 0,
            diagnostics_every=max(1, args.diagnostics),
            trace=args.trace,
            quiet=args.quiet,
            start_step=start_step,
            history=history,
            desc="addition",
            checkpoint=save,
            checkpoint_every=args.checkpoint_every,
        )
        written.append(save(history.last_step, history))

    model.eval()
    if decoded and history is not None and history.evals[-1]["step"] == history.last_step:
        # the evaluation after the last step decoded every held-out problem: that is the model
        # reported on (training stops right after such an evaluation when it meets --target)
        correct, pred = decoded["correct"], decoded["pred"]
    else:
        correct, pred = heldout_exact_match(model, task, heldout_src)
    say("")
    if args.eval_only:
        say(f"read {ckpt_path} (step {int(ckpt['step'])}); nothing is written back to it")
    report(task, correct, pred, say)
    if history is not None and history.steps:
        last = history.evals[-1] if history.evals else {}
        val_loss = last.get("val_loss") if last.get("step") == history.last_step else None
        val = {"loss": val_loss} if val_loss is not None else evaluate(model, val_batches)
        say(
            f"steps: {history.last_step}  training time: {history.seconds:.1f} s  "
            f"held-out loss: {val['loss']:.4f}  "
            f"{'(stopped at the target)' if history.stopped_early else ''}"
        )

    if not args.no_figures:
        written += draw_figures(model, task, history, args.out, rng_seed=args.seed)
    if written:
        say("wrote " + ", ".join(written))
    say(f"total wall-clock: {time.perf_counter() - T_START:.1f} s")
    return float(correct.mean())


def draw_figures(model, task, history, out, rng_seed=0):
    """Attention heatmaps for one example, the graph of one training step, the curves. The
    model runs first; then the files are drawn two processes at a time (common.side_by_side:
    drawing them is most of this function's time, and each figure stands alone)."""
    tok = task.tokenizer
    # 1. attention maps: replay the model's own greedy answer through the decoder, so the maps
    #    show what it looked at while writing each digit
    a, b = np.array([123 % task.high]), np.array([456 % task.high])
    src, _ = task.encode(a, b)
    model.eval()
    with mt.no_grad():
        out_ids = _ids(
            greedy_decode(model, src, max_len=task.tgt_len, bos_id=tok.bos_id, eos_id=tok.eos_id)
        )
        tgt_in = shift_right(out_ids, tok.bos_id)
        model(src, tgt_in)
    maps = model.attention_maps()
    answer = tok.decode(out_ids[0])

    def heatmaps(*kinds):  # rows: the token each decoder position writes, e.g. 9 7 5 0 <eos>
        return lambda: save_attention(
            maps,
            token_labels(tok, src[0]),
            token_labels(tok, out_ids[0]),
            out,
            title=f"{task.problem_text(a[0], b[0])} → {answer!r}",
            kinds=kinds,
        )

    # 2. the graph of one training step (forward + loss, gradients shown after backward)
    model.train()
    batch = seq2seq_batch(*task.batch(8, np.random.default_rng(rng_seed)))
    loss = sequence_loss(model(batch["src"], batch["tgt_in"]), batch["tgt_out"])
    loss.backward(retain_graph=True)  # graph nodes keep their gradients for the picture
    model.eval()

    def graph():
        title = "one training step of the addition model"
        return [
            common.draw_step_graph(loss, model, os.path.join(out, "graph_train_step"), title=title)
        ]

    # 3. loss and accuracy
    def curves():
        if history is None or not history.steps:
            return []
        return [common.plot_curves(history, os.path.join(out, "curves.png"))]

    common.matplotlib_pyplot()  # imported once, before the copy is made
    written = common.side_by_side(
        here=[heatmaps("cross"), graph, curves], there=[heatmaps("encoder", "decoder")]
    )
    model.zero_grad()
    return written


if __name__ == "__main__":
    common.run(main, resume_flag="--resume")
