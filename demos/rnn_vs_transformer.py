"""An LSTM encoder-decoder against the Transformer, on the same addition task and step budget.

    python demos/rnn_vs_transformer.py               # 1,000 steps each (a few minutes)
    python demos/rnn_vs_transformer.py --steps 3000 --eval-every 500

Both models learn ``123+456`` → ``579`` (the sum written least-significant digit first, as in
demos/addition_task.py) from the same fresh batches, with the same optimizer, schedule and
number of steps:

- the **LSTM** (Sutskever et al. 2014, "Sequence to Sequence Learning with Neural Networks")
  reads the source one token at a time; everything it knows about ``123+456`` must fit in its
  final state (h, c), which starts the decoder; the decoder is trained with teacher forcing
  (it reads the true previous digit) and decodes greedily, one digit per step;
- the **Transformer** ("Attention Is All You Need") is the recipe of demos/addition_task.py:
  each output digit attends directly to the source digits it needs.

It prints one table and writes ``--out``/rnn_vs_transformer.png (held-out exact match over
steps, and by carry chain) and table.md. Held-out exact match is greedy decoding of the 1,000
held-out problems. "Carry chain" is the longest run of digit positions that each pass a carry
on: 0 for 123+456, 1 for 125+456, 3 for 999+1 (its top digit depends on the units digits).
A long chain is a long-range dependency: the digit written last depends on digits read first.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import addition_task as add  # noqa: E402  (the Transformer recipe and its evaluation)
import common  # noqa: E402  (also puts the repository root on sys.path)
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
import minitensor.nn as nn  # noqa: E402
from transformer import Transformer  # noqa: E402
from transformer.tasks import AdditionTask  # noqa: E402
from transformer.training import seq2seq_batch, train  # noqa: E402


class LSTMSeq2Seq(nn.Module):
    """Embedding → LSTM encoder → its final (h, c) starts an LSTM decoder → Linear.

    src (B, L_src) ids, tgt_in (B, L_tgt) ids (teacher forcing: <bos> then the target shifted
    right) → logits (B, L_tgt, vocab). The masks are accepted for the training loop's call and
    unused: addition problems have a fixed width, so nothing is padded.
    """

    def __init__(self, vocab_size, embed_dim=64, hidden_size=128, num_layers=1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.encoder = nn.LSTM(embed_dim, hidden_size, num_layers, batch_first=True)
        self.decoder = nn.LSTM(embed_dim, hidden_size, num_layers, batch_first=True)
        self.out = nn.Linear(hidden_size, vocab_size)

    def encode(self, src):
        _, state = self.encoder(self.embed(src))
        return state  # (h_n, c_n): the whole problem, in a fixed-size vector

    def forward(self, src, tgt_in, src_padding_mask=None, tgt_padding_mask=None):
        output, _ = self.decoder(self.embed(tgt_in), self.encode(src))
        return self.out(output)

    def greedy_decode(self, src, max_len, bos_id):
        """Write max_len tokens, each the most likely after the ones written: (B, max_len)."""
        with mt.no_grad():
            state = self.encode(src)
            token = np.full((len(src), 1), bos_id, dtype=np.int64)
            written = []
            for _ in range(max_len):
                output, state = self.decoder(self.embed(token), state)
                token = self.out(output).numpy().argmax(axis=-1)  # (B, 1)
                written.append(token)
        return np.concatenate(written, axis=1)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--steps", type=int, default=1000, help="training steps for each model")
    p.add_argument("--eval-every", type=int, default=250, help="held-out evaluation interval")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (Adam), both")
    p.add_argument("--hidden", type=int, default=128, help="LSTM hidden size")
    p.add_argument("--lstm-layers", type=int, default=1, help="LSTM layers (encoder = decoder)")
    p.add_argument("--d-model", type=int, default=64, help="Transformer width")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/rnn_vs_transformer", help="output folder")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def carry_chain(a, b, digits):
    """The longest run of consecutive digit positions that pass a carry on, per problem."""
    a, b = np.asarray(a), np.asarray(b)
    carry = np.zeros(a.shape, dtype=np.int64)
    run = np.zeros(a.shape, dtype=np.int64)
    longest = np.zeros(a.shape, dtype=np.int64)
    for k in range(digits):
        column = (a // 10**k) % 10 + (b // 10**k) % 10 + carry
        carry = (column >= 10).astype(np.int64)
        run = (run + 1) * carry  # a carry continues the run; none ends it
        longest = np.maximum(longest, run)
    return longest


def build(name, args, task):
    """A fresh model of either kind, seeded the same way."""
    mt.manual_seed(args.seed)
    vocab = len(task.tokenizer)
    if name == "LSTM":
        return LSTMSeq2Seq(vocab, hidden_size=args.hidden, num_layers=args.lstm_layers)
    recipe = add.parse_args(["--d-model", str(args.d_model)])
    return Transformer(add.build_config(recipe, vocab))


def heldout_correct(name, model, task, heldout_src):
    """Bool (1000,): which held-out problems the model's greedy decoding gets right."""
    if name == "Transformer":
        return add.heldout_exact_match(model, task, heldout_src)[0]
    model.eval()
    pred = model.greedy_decode(heldout_src, task.tgt_len, task.tokenizer.bos_id)
    model.train()
    return task.correct(pred, task.heldout_a, task.heldout_b)


def run(name, args, task):
    """Train one model for args.steps steps; the curve, the training time, the final answers."""
    model = build(name, args, task)
    heldout_src, _ = task.heldout()
    rng = np.random.default_rng(args.seed)  # the same batches for both models
    optimizer = mt.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = mt.optim.lr_scheduler.WarmupCosineLR(
        optimizer,
        warmup_steps=min(200, args.steps // 3),
        total_steps=args.steps,
        min_lr=args.lr * 0.05,
    )
    eval_seconds = [0.0]

    def eval_fn(m):
        t0 = time.perf_counter()
        correct = heldout_correct(name, m, task, heldout_src)
        eval_seconds[0] += time.perf_counter() - t0
        return {"exact_match": float(correct.mean())}

    history = train(
        model,
        optimizer,
        lambda step: seq2seq_batch(*task.batch(args.batch_size, rng)),
        steps=args.steps,
        scheduler=scheduler,
        max_grad_norm=1.0,
        eval_fn=eval_fn,
        eval_every=args.eval_every,
        quiet=args.quiet,
        desc=name,
    )
    correct = heldout_correct(name, model, task, heldout_src)
    return {
        "model": name,
        "parameters": model.num_parameters(),
        "curve": [(e["step"], e["exact_match"]) for e in history.evals],
        "train_seconds": history.seconds - eval_seconds[0],
        "correct": correct,
    }


def table(rows, chains, steps):
    lengths = sorted(set(chains.tolist()))
    head = "| model | parameters | held-out exact match | training time | ms / step | "
    head += " | ".join(f"carry chain {k} (n={int((chains == k).sum())})" for k in lengths)
    lines = [head + " |", "|" + "---|" * (5 + len(lengths))]
    for r in rows:
        by_chain = [f"{100 * r['correct'][chains == k].mean():.1f}%" for k in lengths]
        lines.append(
            f"| {r['model']} | {r['parameters']:,} | {100 * r['correct'].mean():.1f}% | "
            f"{r['train_seconds']:.1f} s | {1000 * r['train_seconds'] / steps:.1f} | "
            + " | ".join(by_chain)
            + " |"
        )
    return "\n".join(lines)


def plot(rows, chains, path):
    plt = common.matplotlib_pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    lengths = sorted(set(chains.tolist()))
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        steps, match = zip(*r["curve"]) if r["curve"] else ((), ())
        left.plot(steps, [100 * m for m in match], "o-", ms=3, label=r["model"])
        by_chain = [100 * r["correct"][chains == k].mean() for k in lengths]
        right.bar(np.arange(len(lengths)) + i * width, by_chain, width, label=r["model"])
    left.set(xlabel="step", ylabel="held-out exact match (%)", ylim=(-2, 102))
    left.set_title("the same batches, the same budget")
    left.legend()
    right.set_xticks(
        np.arange(len(lengths)) + width * (len(rows) - 1) / 2, [str(k) for k in lengths]
    )
    right.set(xlabel="longest carry chain", ylabel="held-out exact match (%)", ylim=(0, 102))
    right.set_title("long-range dependency: a carry passed on k digits")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv=None):
    args = parse_args(argv)
    task = AdditionTask()
    chains = carry_chain(task.heldout_a, task.heldout_b, task.digits)
    rows = []
    for name in ("LSTM", "Transformer"):
        rows.append(run(name, args, task))
        if args.quiet:
            r = rows[-1]
            print(f"{name}: {100 * r['correct'].mean():.1f}% ({r['train_seconds']:.0f} s)")
    cpu = _cpu_name()
    text = (
        f"Addition task (3 digits), {args.steps} steps each, batch {args.batch_size}, Adam "
        f"{args.lr:g} with warmup and cosine decay, seed {args.seed}; LSTM hidden {args.hidden} "
        f"({args.lstm_layers} layer(s) each side), Transformer d_model {args.d_model}, 2+2 "
        f"layers; {cpu}.\n\n" + table(rows, chains, args.steps) + "\n"
    )
    print()
    print(text)
    os.makedirs(args.out, exist_ok=True)
    written = [os.path.join(args.out, "table.md")]
    with open(written[0], "w") as f:
        f.write(text)
    if not args.no_figures:
        written.append(plot(rows, chains, os.path.join(args.out, "rnn_vs_transformer.png")))
    print("wrote " + ", ".join(written))
    return rows


def _cpu_name():
    """The CPU's model name from /proc/cpuinfo (Linux), for the table's caption."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    common.run(main)
