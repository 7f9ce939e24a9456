"""Walk the backward pass of a tiny attention block, one graph node at a time.

    python demos/step_backward.py            # Enter: next step, q: quit
    python demos/step_backward.py --all      # run every step without waiting
    python demos/step_backward.py --all --out frames   # frames into ./frames (default
                                                       # runs/step_backward; --no-frames: none)

The block is single-head self-attention over a few tokens with d_model = 4, a residual
connection and LayerNorm — small enough that every gradient fits on the screen:

    y = LayerNorm(x + softmax(Q Kᵀ / √d_model) V),   Q, K, V = x W_qᵀ, x W_kᵀ, x W_vᵀ
    loss = mean((y − target)²)

Each step is one node of the graph, in the order backward runs them (the loss first, the
weights last). For each it prints the op, its module scope, the line of this file that created
it, the gradient arriving at its output, the gradient it sends to each input and what it saved
during forward. Each frame is also drawn (`mt.viz.draw_graph(loss, highlight=step)`): orange is
the current node, green the nodes whose gradient is known, each with its gradient. With
Graphviz's `dot` installed the frames are SVG files, and `explore.html` beside them is the whole
walk as one page (`mt.viz.explore`: click a node, drag the slider); without it, .dot text files
(render them later with `dot -Tsvg`).

The walk is `loss.backward_steps()`: the same engine `loss.backward()` runs, so at the end the
demo checks the gradients equal those of a plain `backward()`. In a notebook,
`mt.viz.step_graph(step, loss)` draws a frame inline and `mt.viz.describe_step(step)` is the text.
"""

import argparse
import math
import os
import sys

import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn


class TinyAttention(nn.Module):
    """Single-head self-attention with a residual connection and LayerNorm.

    x (B, L, d_model) -> (B, L, d_model).
    """

    def __init__(self, d_model=4):
        super().__init__()
        self.d_model = d_model
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        query, key, value = self.w_q(x), self.w_k(x), self.w_v(x)  # (B, L, d_model) each
        scores = query @ key.transpose(-1, -2)  # (B, L, L)
        weights = F.softmax(scores, scale=1 / math.sqrt(self.d_model))  # rows sum to 1
        return self.norm(x + weights @ value)  # (B, L, d_model)


class Block(nn.Module):
    """The model root, so that the attention's scope reads 'attn' in the graph."""

    def __init__(self, d_model=4):
        super().__init__()
        self.attn = TinyAttention(d_model)

    def forward(self, x):
        return self.attn(x)


def build(n_tokens=3, d_model=4, seed=0):
    """The model, its input, and the loss (a scalar with its graph)."""
    mt.manual_seed(seed)
    model = Block(d_model)
    x = mt.randn(1, n_tokens, d_model)
    x.name = "x"
    target = mt.randn(1, n_tokens, d_model)
    target.name = "target"
    with mt.autograd.keep_intermediates():  # so the frames can show every node's values
        y = model(x)
        loss = ((y - target) ** 2).mean()
    return model, x, loss


# ----------------------------------------------------------------------------- printing a step

describe_step = mt.viz.describe_step  # the lines printed for one BackwardStep


# ----------------------------------------------------------------------------- frames


class FrameWriter:
    """Writes each frame as an SVG through `dot`, or as .dot text when `dot` is missing."""

    def __init__(self, folder):
        self.folder = folder
        self.use_dot = True
        os.makedirs(folder, exist_ok=True)

    def write(self, graph, name):
        if self.use_dot:
            try:
                svg = graph.pipe(format="svg")
            except mt.viz.GraphvizNotFound as e:
                self.use_dot = False
                print(f"note: {e}\n      writing .dot files instead.", file=sys.stderr)
            else:
                path = os.path.join(self.folder, name + ".svg")
                with open(path, "wb") as f:
                    f.write(svg)
                return path
        path = os.path.join(self.folder, name + ".dot")
        with open(path, "w") as f:
            f.write(graph.source)
        return path


# ----------------------------------------------------------------------------- the walk


def walk(args, read=input, out=sys.stdout):
    """Step through backward; returns the number of steps taken."""
    model, x, loss = build(args.tokens, args.d_model, args.seed)
    frames = FrameWriter(args.out) if args.out else None
    print(
        f"Tiny attention block: {args.tokens} tokens, d_model {args.d_model}; "
        f"loss = {loss.item():.5f}",
        file=out,
    )
    if frames:
        g = mt.viz.draw_graph(loss, show_values=True, model=model, title="forward pass")
        print(f"frame: {frames.write(g, 'frame_000_forward')}", file=out)
        if frames.use_dot:  # the same walk as one page with a slider (before the walk frees it)
            page = mt.viz.explore(loss, model=model).save(os.path.join(args.out, "explore.html"))
            print(
                f"explorer: {page} (open it in a browser: its slider replays this walk)", file=out
            )
    if not args.all:
        print("Enter: next step · q then Enter: quit", file=out)
    taken = 0
    for step in loss.backward_steps():
        if not args.all:
            try:
                answer = read("")
            except EOFError:
                answer = "q"
            if answer.strip().lower().startswith("q"):
                print("stopped.", file=out)
                return taken
        taken += 1
        print(describe_step(step), file=out)
        if frames:
            g = mt.viz.draw_graph(loss, highlight=step, show_grad=True, model=model)
            name = f"frame_{step.index + 1:03d}_{step.node.name}"
            print(f"   frame: {frames.write(g, name)}", file=out)
    check_against_backward(model, args, out)
    return taken


def check_against_backward(model, args, out):
    """The step-through left the same gradients as a plain loss.backward() does."""
    again, _, loss = build(args.tokens, args.d_model, args.seed)
    loss.backward()
    stepped = dict(model.named_parameters())
    same = all(
        np.array_equal(p.grad.numpy(), stepped[name].grad.numpy())
        for name, p in again.named_parameters()
    )
    print(f"done: gradients equal those of loss.backward(): {'yes' if same else 'NO'}", file=out)
    return same


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Step through the backward pass of a tiny attention block "
        "(Enter: next step, q: quit)."
    )
    p.add_argument("--all", action="store_true", help="run every step without waiting for Enter")
    p.add_argument(
        "--out",
        metavar="DIR",
        default=os.path.join("runs", "step_backward"),
        help="write each frame into DIR (SVG with Graphviz's dot, else .dot text; "
        "default: %(default)s)",
    )
    p.add_argument("--no-frames", action="store_true", help="do not write frames")
    p.add_argument("--tokens", type=int, default=3, help="number of tokens (default 3)")
    p.add_argument("--d-model", type=int, default=4, help="model width (default 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = p.parse_args(argv)
    if args.no_frames:
        args.out = None
    if args.tokens < 1 or args.d_model < 1:
        p.error("--tokens and --d-model must be at least 1")
    return args


if __name__ == "__main__":
    try:
        walk(parse_args())
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT (130)
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
