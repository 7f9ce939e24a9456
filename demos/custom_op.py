"""Extending minitensor: write a new op, check its gradient, use it inside a Transformer.

    python demos/custom_op.py
    python demos/custom_op.py --steps 300

The op is squared ReLU, relu(x)², an activation some Transformers use in their feed-forward
layers (it is not built in, which is the point). Four steps, each printed as it runs:

1. write it: a `mt.Function` subclass with `forward` and `backward` on numpy arrays;
2. check it: `mt.gradcheck` compares backward with finite differences in float64 — first on a
   deliberately wrong backward (it fails, naming the input and the worst element), then on the
   right one;
3. use it: ``TransformerConfig(activation=squared_relu)`` puts the new op in every FFN of a
   small Transformer; it shows up under its module scope (mt.viz.trace) and in the graph;
4. train it: the reverse task for a few hundred steps — the loss falls, so gradients flow
   through the new op.

Writes --out/graph_ffn.svg (.dot without Graphviz): the graph of one FFN with the new op.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
from transformer import Transformer, TransformerConfig  # noqa: E402
from transformer.tasks import ReverseTask  # noqa: E402
from transformer.training import evaluate, seq2seq_batch, train  # noqa: E402


# --------------------------------------------------------------------------- 1. write it
class SquaredReLU(mt.Function):
    """y = relu(x)² elementwise; dy/dx = 2·relu(x)."""

    name = "squared_relu"  # how the op is called in graphs, traces and errors

    @staticmethod
    def forward(ctx, x):
        r = np.maximum(x, 0)
        ctx.save_for_backward(r)  # backward needs relu(x), not x
        return r * r

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return grad * 2 * r  # chain rule: dL/dx = dL/dy · 2·relu(x)


class SquaredReLUWrong(SquaredReLU):
    """The same op with a classic mistake: the factor 2 of the derivative is forgotten."""

    name = "squared_relu_wrong"

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return grad * r


def squared_relu(x):
    return SquaredReLU.apply(x)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--steps", type=int, default=300, help="training steps on the reverse task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/custom_op")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    mt.manual_seed(args.seed)

    print("1. the op:  y = relu(x)²,  dy/dx = 2·relu(x)")
    x = mt.tensor([[-1.0, 0.5, 2.0]], requires_grad=True)
    y = squared_relu(x)
    y.sum().backward()
    print(f"   x = {x.data.tolist()}  y = {y.data.tolist()}  dy/dx = {x.grad.data.tolist()}")
    print(f"   the node: {y.grad_fn}")

    print("2. gradcheck in float64 (inputs away from the kink at 0, where relu has no derivative)")
    rng = np.random.default_rng(args.seed)
    values = rng.uniform(0.1, 1.0, size=(4, 5)) * rng.choice([-1.0, 1.0], size=(4, 5))
    x64 = mt.tensor(values, dtype=mt.float64, requires_grad=True)
    try:
        mt.gradcheck(SquaredReLUWrong.apply, x64)
        print("   the wrong backward passed?! (it should not)")
        wrong_caught = False
    except mt.GradcheckError as e:
        print(f"   wrong backward → GradcheckError: {str(e).splitlines()[0]}")
        wrong_caught = True
    assert mt.gradcheck(SquaredReLU.apply, x64)
    print("   right backward → gradcheck passed")

    print("3. inside a Transformer: every FFN now uses the op")
    task = ReverseTask(alphabet="abcdef", max_len=5)
    tok = task.tokenizer
    cfg = TransformerConfig(
        len(tok),
        len(tok),
        d_model=32,
        n_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=64,
        dropout=0.0,
        scale_embeddings=False,
        max_len=8,
        activation=squared_relu,
    )  # your op, in every FFN
    model = Transformer(cfg)
    print("   " + repr(model.encoder.layers[0].ffn).replace("\n", "\n   "))
    src, tgt = task.batch(2, rng)
    batch = seq2seq_batch(src, tgt)
    with mt.viz.trace(quiet=True) as tr:
        model(batch["src"], batch["tgt_in"])
    for rec in tr.records:
        if rec.op == SquaredReLU.name:
            print("   trace: " + rec.line())
    ffn = model.encoder.layers[0].ffn
    h = ffn(mt.randn(1, 3, cfg.d_model))
    graph = common.draw_step_graph(
        h.sum(),
        ffn,
        os.path.join(args.out, "graph_ffn"),
        depth=None,
        title="FeedForward with the custom squared_relu op",
    )
    print(f"   graph of one FFN: {graph}")

    print(f"4. train the reverse task for {args.steps} steps: gradients flow through the new op")
    val = [seq2seq_batch(*task.batch(200, np.random.default_rng(99)))]
    before = evaluate(model, val)
    optimizer = mt.optim.Adam(model.parameters(), lr=3e-3)
    data_rng = np.random.default_rng(args.seed)
    history = train(
        model,
        optimizer,
        lambda s: seq2seq_batch(*task.batch(64, data_rng)),
        steps=args.steps,
        quiet=args.quiet,
        desc="reverse",
    )
    after = evaluate(model, val)
    print(
        f"   held-out loss {before['loss']:.3f} → {after['loss']:.3f}, token accuracy "
        f"{before['token_accuracy']:.1%} → {after['token_accuracy']:.1%} "
        f"({history.last_step} steps, {history.seconds:.1f} s)"
    )
    return {
        "wrong_caught": wrong_caught,
        "loss_before": before["loss"],
        "loss_after": after["loss"],
        "graph": graph,
    }


if __name__ == "__main__":
    common.run(main)
