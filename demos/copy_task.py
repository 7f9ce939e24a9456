"""The smallest sequence-to-sequence demo: a tiny Transformer learns to reverse (or copy) strings.

    python demos/copy_task.py                 # reverse "abcf" → "fcba", trains in seconds
    python demos/copy_task.py --task copy

Strings have random lengths (1 to --max-len), so batches are padded: this is the demo where the
padding mask and the loss's ``ignore_index=<pad>`` matter. Look at
``runs/copy/attention_decoder_cross_attn.png``: to reverse, each output position attends to the
mirrored source position, an anti-diagonal (a diagonal for copying). The heatmaps show a padded
example: its ``<pad>`` columns are drawn, and they are empty — nothing attends to ``<pad>``.

Writes into --out: checkpoint.npz, attention_*.png, curves.png.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
from transformer import Transformer, TransformerConfig  # noqa: E402
from transformer.decoding import greedy_decode  # noqa: E402
from transformer.tasks import CopyTask, ReverseTask  # noqa: E402
from transformer.training import evaluate, seq2seq_batch, shift_right, train  # noqa: E402
from transformer.viz import save_attention, token_labels  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--task", choices=("reverse", "copy"), default="reverse")
    p.add_argument("--alphabet", default="abcdefgh")
    p.add_argument("--max-len", type=int, default=6)
    p.add_argument("--steps", type=int, default=600, help="step budget")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--out", default="runs/copy")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def exact_match(model, task, texts, src):
    was = model.training
    model.eval()
    with mt.no_grad():
        pred = greedy_decode(
            model,
            src,
            max_len=task.tgt_len,
            bos_id=task.tokenizer.bos_id,
            eos_id=task.tokenizer.eos_id,
            src_padding_mask=src == task.tokenizer.pad_id,
        )
    model.train(was)
    pred = np.asarray(pred.numpy() if isinstance(pred, mt.Tensor) else pred)
    return task.correct(pred, texts), pred


def picture_example(alphabet, max_len, seed):
    """The string the heatmaps show: distinct letters (a repeated letter has two source
    positions to read from, which blurs the anti-diagonal), two shorter than --max-len so that
    two <pad> columns are drawn (one if --max-len is 2, none if it is 1)."""
    n = max(1, min(len(alphabet), max_len - 2 if max_len > 2 else max_len - 1))
    return "".join(np.random.default_rng(seed).permutation(list(dict.fromkeys(alphabet)))[:n])


def draw_attention(model, task, args):
    """Heatmaps of one padded example of distinct letters, replaying the model's own output
    through the decoder with the padding mask: the <pad> columns are drawn, and they are
    empty — nothing attends to <pad>."""
    tok = task.tokenizer
    text = picture_example(args.alphabet, args.max_len, args.seed)
    src = task.encode([text])[0]
    pad = np.asarray(src) == tok.pad_id
    pred = exact_match(model, task, [text], src)[1]
    model.eval()
    with mt.no_grad():
        tgt_in = shift_right(pred, tok.bos_id)
        model(src, tgt_in, src_padding_mask=pad if pad.any() else None)
    note = f"\n{int(pad.sum())} <pad> columns: nothing attends to them" if pad.any() else ""
    return save_attention(
        model.attention_maps(),
        token_labels(tok, src[0], keep_pad=True),
        token_labels(tok, pred[0]),
        args.out,
        title=f"{text!r} → {tok.decode(pred[0])!r}{note}",
    )


def main(argv=None):
    t_start = time.perf_counter()
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    mt.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    cls = ReverseTask if args.task == "reverse" else CopyTask
    task = cls(alphabet=args.alphabet, min_len=1, max_len=args.max_len)
    tok = task.tokenizer
    held_texts = task.sample(200, np.random.default_rng(10_000 + args.seed))
    held_src, held_tgt = task.encode(held_texts)
    val = [seq2seq_batch(held_src, held_tgt)]

    config = TransformerConfig(
        len(tok),
        len(tok),
        d_model=args.d_model,
        n_heads=args.heads,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        d_ff=2 * args.d_model,
        dropout=0.0,
        scale_embeddings=False,
        max_len=args.max_len + 2,
    )
    model = Transformer(config)
    optimizer = mt.optim.Adam(model.parameters(), lr=args.lr)

    def eval_fn(m):
        return {"exact_match": float(exact_match(m, task, held_texts, held_src)[0].mean())}

    history = train(
        model,
        optimizer,
        lambda step: seq2seq_batch(*task.batch(args.batch_size, rng)),
        steps=args.steps,
        eval_fn=eval_fn,
        eval_every=args.eval_every,
        stop_when=lambda m: m["exact_match"] >= 1.0,
        val_batches=val,
        quiet=args.quiet,
        desc=args.task,
    )
    correct, pred = exact_match(model, task, held_texts, held_src)
    token_acc = evaluate(model, val)["token_accuracy"]
    print(
        f"\n{args.task}: held-out exact match {correct.mean():.1%}, token accuracy "
        f"{token_acc:.1%} after {history.last_step} steps ({history.seconds:.1f} s)"
    )
    for text, p in list(zip(held_texts, tok.decode_batch(pred)))[:5]:
        print(f"  {text!r:>12} → {p!r}")

    ckpt = common.save_checkpoint(
        os.path.join(args.out, "checkpoint.npz"),
        model,
        config,
        step=history.last_step,
        history=history,
        extra={"task": args.task, "alphabet": args.alphabet},
    )
    files = draw_attention(model, task, args)
    files.append(common.plot_curves(history, os.path.join(args.out, "curves.png")))
    print("wrote " + ", ".join([ckpt] + files))
    print(f"total wall-clock: {time.perf_counter() - t_start:.1f} s")
    return float(correct.mean())


if __name__ == "__main__":
    common.run(main)
