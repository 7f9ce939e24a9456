"""A backward step, shown: the text of one node's turn, and the graph with that node marked.

``loss.backward_steps()`` yields a `BackwardStep` per node. `describe_step(step)` says what
happened at it (the op, where it was created, the gradient arriving at its output and what it
sends to each input); `step_graph(step, loss)` draws the graph with the node in orange and
every node whose gradient is known in green; `step_mimebundle(step)` gives both to Jupyter, so
that a step evaluated in a notebook cell draws itself (text only when Graphviz's `dot` is
missing).
"""

import numpy as np

from ._labels import TRANSPOSE, node_label
from ._source import describe_source
from .graph import GraphvizNotFound, draw_graph

# A step's picture in a notebook: the default budget (a Transformer draws at depth 1, one box
# per layer stack; a small graph shows every op). `explore` steps through the detail.
STEP_MAX_NODES = 60


def _array_text(a, indent="      "):
    text = np.array2string(
        np.asarray(a),
        precision=3,
        suppress_small=True,
        max_line_width=100,
        threshold=64,
        edgeitems=3,
    )
    return indent + text.replace("\n", "\n" + indent)


def _input_name(t):
    if t.grad_fn is not None:
        return f"the output of `{node_label(t.grad_fn)}`"
    return t.name or "a leaf"


def describe_step(step):
    """The lines that say what one `BackwardStep` did (arrays longer than 64 numbers elided)."""
    node = step.node
    where = node.scope or "(top level)"
    label = node_label(node, full=False)
    what = f"`{label}`"
    if label.endswith(TRANSPOSE):  # nn.Linear's x Wᵀ: say whose weight, not 'permute'
        what += f" ({node_label(node)[:-1]}, transposed)"
    lines = [
        f"── step {step.index + 1}/{step.total}: {what} in {where} "
        f"-> output {tuple(node.out_shape)}"
    ]
    if node.source:
        lines.append(
            f"   created at {describe_source(*node.source[:2])}: "
            f"{node.source_line().split('  #')[0]}"
        )
    lines.append(f"   gradient arriving at its output, shape {step.grad_output.shape}:")
    lines.append(_array_text(step.grad_output))
    for i, (t, g) in enumerate(zip(node.inputs, step.grad_inputs)):
        if t is None:
            continue
        if g is None:
            lines.append(f"   input {i} ({_input_name(t)}): no gradient needed")
            continue
        lines.append(f"   sends to input {i} ({_input_name(t)}), shape {g.shape}:")
        lines.append(_array_text(g))
    saved = ", ".join(str(getattr(a, "shape", a)) for a in step.saved) or "nothing"
    lines.append(f"   saved during forward: {saved}")
    return "\n".join(lines)


def step_graph(step, *outputs, **options):
    """`draw_graph(*outputs, highlight=step)`: the graph with this step's node in orange.

    outputs: what backward started from (``loss``). Without it, the step's own record of the
    walk's first node is used (``step.root``, when the engine keeps it), else the graph under the
    current node only. options: any of draw_graph's (depth, show_grad, model, …); the budget
    defaults to STEP_MAX_NODES.
    """
    if not outputs:
        root = getattr(step, "root", None)
        outputs = (root,) if root is not None else (step.node,)
    options.setdefault("max_nodes", STEP_MAX_NODES)
    options.setdefault("show_grad", True)
    return draw_graph(*outputs, highlight=step, **options)


def step_svg(step, *outputs, **options):
    """The SVG text of `step_graph`, or None when Graphviz's `dot` is not installed."""
    try:
        return step_graph(step, *outputs, **options).pipe(format="svg").decode("utf-8")
    except GraphvizNotFound:
        return None


def step_mimebundle(step, include=None, exclude=None):
    """What Jupyter shows for a step: the highlighted graph (SVG) and `describe_step` as text."""
    bundle = {"text/plain": describe_step(step)}
    wanted = (include is None or "image/svg+xml" in include) and not (
        exclude and "image/svg+xml" in exclude
    )
    svg = step_svg(step) if wanted else None
    if svg is not None:
        bundle["image/svg+xml"] = svg
    return bundle
