"""`explore(loss, model)`: the computation graph as one offline page you move through.

`draw_graph` is a poster: one picture at one depth. A model-sized graph needs a map instead:
modules that open and close on click, zoom and pan, a search box, a panel that tells everything
about the node clicked, and a slider that replays the backward pass node by node. This module
builds that page as one self-contained HTML file — the SVGs, the styles (`explore.css`), the
script (`explore.js`) and the data (JSON) inline, nothing fetched from the network — that shows
inline in a notebook (`_repr_html_`) and saves as a file (`save(path)`).

The layout stays Graphviz's: the page holds one SVG per module level, pre-rendered by `dot`
(level k: every module nested deeper than k collapsed into a box, as ``draw_graph(depth=k)``).
Opening a module shows the level below it, centred on that module; clicking an open module's
frame closes it again. No layout is computed in the browser.

The backward pass is recorded when `explore` runs, by the engine itself:
``loss.backward_steps(retain_graph=True)``, the walk ``loss.backward()`` runs. Afterwards every
``.grad`` the walk touched is put back as it was (and the graph stays usable), so exploring
never changes the gradients your training loop sees. A graph that a plain ``backward()`` has
already freed cannot be walked again: the page then shows the graph and the final ``.grad``
of the leaves, and says so.
"""

from __future__ import annotations

import html
import json
import pathlib
import shutil

import numpy as np

from ..autograd import topological_order
from ..nn.module import Module
from ..tensor import Tensor
from ._source import describe_source
from .graph import (
    DEFAULT_MAX_NODES,
    GraphvizNotFound,
    _choose_layout,
    _collect,
    _draw,
    _Layout,
    _shape_text,
)
from .step import _input_name

# Levels with more boxes than this are not pre-rendered: past it the page would be a poster
# again (and `dot` slow); `draw_graph(max_nodes=None)` still draws every op.
MAX_LEVEL_BOXES = 400
# An attention softmax's weights are drawn as a heatmap of at most this many rows and columns.
HEATMAP_MAX = 32
_ASSETS = pathlib.Path(__file__).with_name("explore_assets")


def explore(loss: Tensor, model: Module | None = None) -> Explorer:
    """An offline, interactive page of the graph that produced `loss` (a scalar Tensor).

    model: the root Module, to name modules by class (as in `draw_graph`).
    Returns an `Explorer`: shown inline by Jupyter, ``.save(path)`` writes the HTML file.
    Needs Graphviz's ``dot`` (the page's pictures are its layouts); raises `GraphvizNotFound`
    without it. Run the forward inside ``mt.autograd.keep_intermediates()`` to see every
    node's values (otherwise only the values backward keeps).
    """
    if not isinstance(loss, Tensor) or loss.grad_fn is None:
        raise TypeError(
            f"explore: give the output of a computation (a Tensor with a graph), got "
            f"{type(loss).__name__}{'' if not isinstance(loss, Tensor) else ' without grad_fn'}"
        )
    if shutil.which("dot") is None:
        raise GraphvizNotFound("mt.viz.explore lays out its pictures with dot")
    items, edges, types, output_keys = _collect([loss], model)
    index = {key: i for i, key in enumerate(items)}
    steps, leaf_grads, walk_note = _record_walk(loss, items, index)
    levels, start = _levels(items, edges, types, output_keys, index)
    data = {
        "title": f"computation graph of a {_shape_text(loss.shape)} output",
        "items": [_item_data(it, leaf_grads) for it in items.values()],
        "steps": steps,
        "levels": levels,
        "start": start,
        "note": walk_note,
    }
    _step_of_items(data, items, edges, index)
    return Explorer(data)


class Explorer:
    """The page `explore` builds. ``data`` is what the page shows (a JSON-ready dict)."""

    def __init__(self, data: dict) -> None:
        self.data = data

    @property
    def html(self) -> str:
        """The whole page: one self-contained HTML document."""
        css = (_ASSETS / "explore.css").read_text(encoding="utf-8")
        js = (_ASSETS / "explore.js").read_text(encoding="utf-8")
        payload = json.dumps(self.data, separators=(",", ":")).replace("</", "<\\/")
        return (
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>\n"
            # nothing from the network: no script, style, image or connection but inline ones
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
            f"<title>{html.escape(self.data['title'])}</title>\n<style>{css}</style></head>\n"
            f"<body>{_BODY}\n<script type='application/json' id='mt-data'>{payload}</script>\n"
            f"<script>{js}</script></body></html>\n"
        )

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write the page to `path` (opens in any browser, offline); returns the path."""
        path = pathlib.Path(path)
        path.write_text(self.html, encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        """In a notebook: the page in an iframe, so that its script and styles stay its own."""
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" sandbox="allow-scripts" '
            'style="width:100%;height:640px;border:1px solid #ccc"></iframe>'
        )

    def __repr__(self) -> str:
        n, s = len(self.data["items"]), len(self.data["steps"])
        return f"<Explorer: {n} nodes, {len(self.data['levels'])} levels, {s} backward steps>"


_BODY = """<div id="bar">
 <input id="search" type="search" placeholder="search a module or op" aria-label="search">
 <button id="fit" title="fit the picture">fit</button>
 <button id="zin" title="zoom in">+</button><button id="zout" title="zoom out">−</button>
 <span id="level"></span>
 <label>backward step <input id="slider" type="range" min="0" value="0"></label>
 <span id="stepinfo"></span>
</div>
<div id="main"><div id="view"></div><div id="panel"><div id="matches"></div>
<div id="details"><p>Click a box: a module opens, an op says what it is.</p></div></div></div>"""


# ============================================================================ the data


def _levels(items, edges, types, output_keys, index):
    """One pre-rendered SVG per module level (depth 0, 1, …, every op), and the start level."""
    deepest = max((len(it.units) for it in items.values()), default=0)
    start_layout, _ = _choose_layout(items, edges, types, None, True, DEFAULT_MAX_NODES)
    levels, start = [], 0
    for depth in [*range(deepest), None]:
        layout = _Layout(items, edges, types, depth, True)
        if layout.count() > MAX_LEVEL_BOXES and levels:
            break
        members = {box: [] for box in layout.boxes}  # box -> indices of the items drawn in it
        for key, box in layout.box_of.items():
            members[box].append(index[key])
        g = _draw(layout, output_keys, None, False, False, "", None)
        svg = g.pipe(format="svg").decode("utf-8")
        svg = svg[svg.index("<svg") :]  # without the XML prologue and doctype
        if depth == start_layout.depth:
            start = len(levels)
        levels.append(
            {
                "depth": depth,
                "svg": svg,
                "boxes": [_box_data(box, members[box]) for box in layout.boxes],
                "clusters": g.cluster_paths,
            }
        )
    return levels, start


def _box_data(box, members):
    """What the page knows of one box of one level: its items and, for a module, its path."""
    if box[0] in ("op", "leaf"):
        return {"kind": "item", "items": members}
    if box[0] == "group":
        return {"kind": "module", "path": ".".join(box[1]), "items": members}
    _, parent, stem, first, last, kept, n = box
    base = ".".join(parent + ((stem,) if stem else ()))
    path = f"{base}.{first}" if stem else str(first)
    return {"kind": "fold", "path": path, "kept": ".".join(kept) if kept else None,
            "span": f"{first}–{last}", "items": members}  # fmt: skip


def _stats(a):
    if a is None or a.size == 0 or a.dtype.kind not in "fiu":
        return None
    a = a.astype(np.float64)
    finite = a[np.isfinite(a)]
    if finite.size == 0:
        return {"nonfinite": True}
    return {"min": _num(finite.min()), "max": _num(finite.max()),
            "mean": _num(finite.mean()), "std": _num(finite.std()),
            "nonfinite": bool(finite.size != a.size)}  # fmt: skip


def _num(x):
    return float(f"{float(x):.4g}")


def _norm(g):
    return None if g is None else _num(np.sqrt(np.sum(np.square(g, dtype=np.float64))))


def _item_data(it, leaf_grads):
    """Everything the details panel shows for one op or leaf."""
    d = {"title": it.title + it.suffix, "kind": it.kind, "units": list(it.units),
         "scope": ".".join(it.units), "out": list(it.shape), "dtype": str(it.dtype),
         "stats": _stats(it.value()), "step": None, "grad_norm": None}  # fmt: skip
    if it.node is not None:
        node = it.node
        d["op"], d["scope"] = node.name, node.scope
        d["inputs"] = [
            {"name": _input_name(t), "shape": list(t.shape)} for t in node.inputs if t is not None
        ]
        if node.source:
            d["where"] = describe_source(*node.source[:2])
            d["line"] = node.source_line()
        d["heat"] = _heatmap(node.name, it.value())
    else:
        t = it.tensor
        g = leaf_grads.get(id(t), t.grad.numpy() if t.grad is not None else None)
        d["grad_norm"] = _norm(g)
        d["requires_grad"] = bool(t.requires_grad)
    return d


def _heatmap(op, value):
    """An attention softmax's weights (B, [h,] L_q, L_k): batch 0 (head 0) as rows of numbers."""
    if "softmax" not in op or op.startswith("log") or value is None or value.ndim < 3:
        return None
    m = np.asarray(value[(0,) * (value.ndim - 2)], dtype=np.float64)
    m = m[:HEATMAP_MAX, :HEATMAP_MAX]
    what = "batch 0" + (", head 0" if value.ndim > 3 else "")
    return {"rows": m.shape[0], "cols": m.shape[1], "values": [round(float(v), 3) for v in m.flat],
            "caption": f"{what}: rows are queries, columns keys"}  # fmt: skip


def _step_of_items(data, items, edges, index):
    """Each item's backward step: an op's own; a leaf's, the last of its users' (when its
    gradient is complete)."""
    steps_of = {s["item"]: i for i, s in enumerate(data["steps"])}
    for i, d in enumerate(data["items"]):
        d["step"] = steps_of.get(i)
    for src, dst in edges:
        leaf, user = data["items"][index[src]], data["items"][index[dst]]
        if items[src].node is None and leaf.get("requires_grad") and user["step"] is not None:
            leaf["step"] = max(leaf["step"] or 0, user["step"])
    for i, d in enumerate(data["items"]):
        if d["step"] is not None and i in steps_of and d["grad_norm"] is None:
            d["grad_norm"] = data["steps"][d["step"]]["grad_out"]["norm"]


# ============================================================================ the walk


def _record_walk(loss, items, index):
    """Run the engine's backward walk once, keep what each step did, and put every gradient
    it changed back. Returns (steps, {id(leaf): its gradient from this walk}, note)."""
    nodes = topological_order(loss.grad_fn)
    if any(n._released for n in nodes):
        note = (
            "backward already ran and freed this graph, so its steps cannot be replayed: "
            "the gradients shown are the leaves' .grad. Call mt.viz.explore(loss) before "
            "loss.backward() to step through it."
        )
        return [], {}, note
    tensors = {id(t): t for n in nodes for t in n.inputs if t is not None and t.grad_fn is None}
    for n in nodes:
        kept = n._retained() if n._retained is not None else None
        if kept is not None:
            tensors[id(kept)] = kept
    # the .grad tensors and a copy of their numbers (an accumulation may write in place)
    grads_before = {
        i: (t.grad, None if t.grad is None else t.grad.numpy().copy()) for i, t in tensors.items()
    }
    for t in tensors.values():  # backward accumulates into .grad in place: walk on fresh ones
        t.grad = None
    node_grads = {id(n): n.grad for n in nodes}
    steps, sent = [], {}
    try:
        for step in loss.backward_steps(retain_graph=True):
            steps.append(_step_data(step, index))
            for t, g in zip(step.node.inputs, step.grad_inputs):
                if g is not None and t.grad_fn is None:
                    sent[id(t)] = g if id(t) not in sent else sent[id(t)] + g
    finally:  # the user's gradients, as they were
        for i, t in tensors.items():
            t.grad, numbers = grads_before[i]
            if numbers is not None:
                np.copyto(t.grad.numpy(), numbers)
        for n in nodes:
            n.grad = node_grads[id(n)]
    return steps, sent, ""


def _step_data(step, index):
    g = step.grad_output
    sends = []
    for t, gi in zip(step.node.inputs, step.grad_inputs):
        if t is not None:
            sends.append({"name": _input_name(t), "shape": list(t.shape), "norm": _norm(gi)})
    return {
        "item": index[("op", id(step.node))],
        "grad_out": {"shape": list(g.shape), "norm": _norm(g), **(_stats(g) or {})},
        "sends": sends,
    }


__all__ = ["explore", "Explorer", "MAX_LEVEL_BOXES"]
