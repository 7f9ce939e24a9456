"""`draw_graph`: the computation graph as a picture a person can read.

A Transformer's graph has thousands of primitive ops; drawn flat it is a wall of boxes. This
viewer uses what every node records (op name, module scope, output shape, source line) to draw
the graph the way the model is written:

- **module scopes become nested clusters** (``encoder`` ⊃ ``layers.0`` ⊃ ``self_attn``);
- **``depth=k`` collapses** every module nested deeper than k into one box that shows its type,
  its path and the shapes going in and out;
- **identical repeated siblings are folded**: ``encoder.layers.0 … layers.5`` become one box
  ``EncoderLayer × 6`` (or, when layers are shown in detail, ``layers.0`` in full and
  ``layers.1–5`` as one box);
- **a box budget** (``max_nodes``, 60 by default: a screen) picks the deepest depth that fits
  by itself when the picture would be too big, and says so in the picture.

The result is a ``graphviz.Digraph``: it shows inline in Jupyter, ``.source`` is the DOT text and
``.render()`` draws it with Graphviz's ``dot`` program (which only rendering needs).

How the pieces fit: `_collect` reads the graph into `_Item`s (one per op node or leaf tensor)
and edges; `_Layout` decides which box each item lands in for a given depth; `_draw` writes the
DOT. Items are never copied or changed: the viewer only reads the graph.
"""

import math
import re
from collections import defaultdict

import graphviz
import numpy as np

from ..autograd import topological_order
from ..function import Context
from ..nn.module import Module, Parameter
from ..tensor import Tensor
from ._labels import TRANSPOSE, describe_node, node_label

# The default box budget: a picture that fits a screen. A Transformer drawn at depth 2 (its
# layers' sub-layers as boxes, identical layers folded) is under 50 boxes whatever its size;
# depth 3 (every op inside attention) is over 120, taller than any screen.
DEFAULT_MAX_NODES = 60

# The other half of the budget: boxes along the longest chain. A box is about 95 pt tall with its
# gap, so 16 of them make about two screens; a graph within the budget is also drawn at most
# 1000 px wide and 2000 px tall (Graphviz's size attribute, in inches of 72 pt; a browser shows
# 1 pt as 4/3 px), the width of a notebook cell. Deeper detail is what `explore` is for.
DEFAULT_MAX_RANKS = 16
FIT_SIZE = "10.4,20.8"

INSTALL_HINT = (
    "Graphviz's `dot` program is needed to render the graph but was not found on PATH. "
    "Install it with `apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` "
    "(macOS), `conda install graphviz`, or from https://graphviz.org/download/ . "
    "Without it the graph is still available as DOT text: graph.source"
)

# Colours (named X11 colours, so the DOT stays readable).
_COLOURS = {
    "op": "white",
    "param": "lightblue",
    "input": "lightyellow",
    "group": "lavender",
    "fold": "thistle",
    "bad": "#ff8a80",
    "current": "orange",
    "known": "palegreen",
    "partly_known": "#e3f7dc",
}


class GraphvizNotFound(graphviz.ExecutableNotFound):
    """Rendering needs Graphviz's `dot` program; this error says how to install it."""

    def __init__(self, detail=""):
        RuntimeError.__init__(self, INSTALL_HINT + (f" ({detail})" if detail else ""))


class Graph(graphviz.Digraph):
    """A graphviz.Digraph whose rendering errors explain how to install Graphviz."""

    def pipe(self, *args, **kwargs):
        try:
            return super().pipe(*args, **kwargs)
        except graphviz.ExecutableNotFound as e:
            raise GraphvizNotFound(str(e)) from None

    def render(self, *args, **kwargs):
        try:
            return super().render(*args, **kwargs)
        except graphviz.ExecutableNotFound as e:
            raise GraphvizNotFound(str(e)) from None


# ============================================================================ reading the graph


def scope_units(scope):
    """Split a module path into the units drawn as clusters: an index joins its list's name.

    'encoder.layers.0.self_attn' -> ('encoder', 'layers.0', 'self_attn'). A ModuleList runs no
    op itself, so 'encoder.layers' alone would be an empty cluster around each layer.
    """
    units = []
    for part in scope.split(".") if scope else ():
        if part.isdigit() and units:
            units[-1] += "." + part
        else:
            units.append(part)
    return tuple(units)


class _Item:
    """One thing that can be drawn as a box: an op node (a Context) or a leaf tensor."""

    def __init__(self, key, kind, units, shape, dtype):
        self.key = key  # ("op", id(node)) or ("leaf", id(tensor))
        self.kind = kind  # "op", "param" or "input"
        self.units = units  # scope units of the cluster it belongs to
        self.shape = tuple(shape)
        self.dtype = dtype
        self.node = None  # the Context, for ops
        self.tensor = None  # the output tensor when reachable (values), the leaf itself
        self.title = ""  # op name, or the leaf's name
        self.suffix = ""  # a view folded into a parameter, e.g. 'ᵀ'
        self.param = None  # for such a view: the parameter itself

    def signature(self, depth):
        """What must match for two repeated modules to count as identical."""
        named = self.kind == "param" or self.title.endswith(TRANSPOSE)  # a dotted name
        title = self.title.rsplit(".", 1)[-1] if named else self.title
        return (self.units[depth:], self.kind, title, self.suffix, self.shape, str(self.dtype))

    def grad(self):
        """The gradient that reached this item in the last backward (numpy array) or None.

        A parameter's view (Wᵀ) shows the gradient of the view itself, which has the shape the
        box shows; its norm is the parameter's gradient's norm. A node keeps its own gradient
        only for a retained graph, so after a plain ``backward()`` the view's gradient is the
        parameter's ``.grad`` seen the same way (transposed, reshaped or cast)."""
        if self.node is not None and (self.node.grad is not None or self.param is None):
            return self.node.grad
        g = (self.param if self.param is not None else self.tensor).grad
        return None if g is None else self.view_of_param_grad(g.numpy())

    def view_of_param_grad(self, g):
        """A parameter's gradient `g` in the layout of this box (Wᵀ: gᵀ); an expanded view
        has no such layout, so the parameter's own gradient is shown."""
        if self.param is None or g.shape == self.shape:
            return g
        if self.node.name == "permute":
            return np.transpose(g, getattr(self.node, "axes", None))
        if self.node.name in ("reshape", "cast") and g.size == int(np.prod(self.shape)):
            return g.reshape(self.shape)
        return g

    def value(self):
        t = self.param if self.param is not None else self.tensor
        if t is None:
            return None
        return t.numpy() if isinstance(t, Tensor) else t.data  # a NodeInput: its array, or None


def _module_info(model, leaves):
    """{module path: class name}, and {id(buffer): dotted name}.

    From `model` when given; otherwise from the parameters themselves: each knows its module,
    and each module knows its parents, so the types along every parameter's path are known.
    """
    types, buffers = {}, {}
    if model is not None:
        for path, m in model.named_modules():
            types[path] = type(m).__name__
        for name, b in model.named_buffers():
            buffers[id(b)] = name
    for t in leaves:
        m = _owner_module(t)
        while isinstance(m, Module):
            types.setdefault(m.path, type(m).__name__)
            m = m._parent() if m._parent is not None else None
    return types, buffers


def _owner_module(t):
    """The module that holds parameter `t` (None for other tensors or a detached parameter)."""
    if not isinstance(t, Parameter):
        return None
    owner = t._owner() if callable(getattr(t, "_owner", None)) else None
    return owner[0] if owner else None


def _key(t):
    """The item key of an output: a Tensor (its node, or itself as a leaf) or a graph node."""
    if isinstance(t, Context):
        return ("op", id(t))
    return ("leaf", id(t)) if t.grad_fn is None else ("op", id(t.grad_fn))


def _collect(outputs, model):
    """Read the graph under `outputs` (Tensors or graph nodes): items (in forward order), edges,
    module types."""
    roots = [t if isinstance(t, Context) else t.grad_fn for t in outputs]
    roots = [r for r in roots if r is not None]
    nodes = topological_order(*roots)[::-1]  # forward order: inputs before users
    out_tensor = {}  # id(node) -> its output Tensor, where reachable
    leaves = {}
    for node in nodes:
        for t in node.inputs:
            if t is None:
                continue
            if t.grad_fn is None:
                leaves.setdefault(id(t), t)
            else:
                out_tensor.setdefault(id(t.grad_fn), t)
    for t in outputs:
        if isinstance(t, Context):
            continue
        if t.grad_fn is None:
            leaves.setdefault(id(t), t)
        else:
            out_tensor.setdefault(id(t.grad_fn), t)
    types, buffers = _module_info(model, leaves.values())

    items, edges = {}, []
    for t in leaves.values():
        items[("leaf", id(t))] = _leaf_item(t, buffers)
    for node in nodes:
        it = _Item(("op", id(node)), "op", scope_units(node.scope), node.out_shape, node.out_dtype)
        it.node, it.tensor, it.title = node, out_tensor.get(id(node)), node_label(node)
        items[it.key] = it
        for t in node.inputs:
            if t is not None:
                src = ("leaf", id(t)) if t.grad_fn is None else ("op", id(t.grad_fn))
                edges.append((src, it.key))
    _absorb_parameter_views(items, edges)
    return items, edges, types, [_key(t) for t in outputs]


def _leaf_item(t, buffers):
    """Parameters sit in their module's cluster under their dotted name; buffers likewise;
    other leaves (the user's inputs) at the top level, labelled by `.name`."""
    if isinstance(t, Parameter) or id(t) in buffers:
        name = t.name if isinstance(t, Parameter) else buffers[id(t)]
        name = name or "parameter"
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        it = _Item(("leaf", id(t)), "param", scope_units(owner), t.shape, t.dtype)
    else:
        name = t.name or ("input" if not t.requires_grad else "leaf")
        it = _Item(("leaf", id(t)), "input", (), t.shape, t.dtype)
    it.tensor, it.title = t, name
    return it


_VIEW_OPS = {"permute": TRANSPOSE, "reshape": ".reshape", "expand": ".expand", "cast": ".cast"}


def _absorb_parameter_views(items, edges):
    """Draw `Wᵀ` as one box: a view op whose only input is a parameter used nowhere else.

    Linear computes ``x @ weight.T``; without this every weight costs two boxes, one of them an
    anonymous `permute`. The box is the parameter's, named ``….weightᵀ`` with the shape of Wᵀ.
    """
    users = defaultdict(list)
    for src, dst in edges:
        users[src].append(dst)
    absorbed = set()
    for key in list(items):
        it = items[key]
        if it.kind != "op" or it.node.name not in _VIEW_OPS:
            continue
        inputs = [t for t in it.node.inputs if t is not None]
        if len(inputs) != 1 or inputs[0].grad_fn is not None:
            continue
        leaf_key = ("leaf", id(inputs[0]))
        leaf = items[leaf_key]
        if leaf.kind != "param" or len(users[leaf_key]) != 1:
            continue
        # the op's box becomes the parameter's: same key stays, so edges out of the op remain
        op = it.node.name
        it.suffix = ".permute" if op == "permute" and len(it.shape) != 2 else _VIEW_OPS[op]
        it.kind, it.units, it.title, it.param = "param", leaf.units, leaf.title, leaf.tensor
        del items[leaf_key]
        absorbed.add(leaf_key)
    edges[:] = [(s, d) for s, d in edges if s not in absorbed]


# ============================================================================ choosing the boxes

_INDEXED = re.compile(r"^(?:(.*)\.)?(\d+)$")


class _Layout:
    """Which box each item is drawn in, for one depth: itself, a collapsed module, or a fold."""

    def __init__(self, items, edges, types, depth, fold):
        self.items, self.edges, self.types = items, edges, types
        self.depth, self.fold = depth, fold
        self.folds = self._find_folds() if fold else {}
        self.box_of = {key: self._box(it) for key, it in items.items()}
        self.boxes = list(dict.fromkeys(self.box_of.values()))

    def _box(self, it):
        for i in range(1, len(it.units) + 1):
            prefix = it.units[:i]
            if prefix in self.folds:
                return self.folds[prefix]
            if self.depth is not None and i == self.depth + 1:
                return ("group", prefix)
        return it.key

    def _find_folds(self):
        """{scope units: fold box} for runs of identical indexed siblings.

        A collapsed run folds whole (``EncoderLayer × 6``); a run shown in detail keeps its first
        member and folds the rest (``layers.1–5``, same as ``layers.0``).
        """
        signatures = defaultdict(list)
        for it in self.items.values():
            for i in range(1, len(it.units) + 1):
                if self.depth is not None and i > self.depth + 1:
                    break
                signatures[it.units[:i]].append(it.signature(i))
        families = defaultdict(list)  # (parent units, list name) -> [(index, units)]
        for units in signatures:
            m = _INDEXED.match(units[-1])
            if m:
                families[(units[:-1], m.group(1))].append((int(m.group(2)), units))
        folds = {}
        for (parent, stem), members in families.items():
            members.sort()
            run = [members[0]]
            for prev, cur in zip(members, members[1:]):
                if cur[0] == prev[0] + 1 and self._same(prev[1], cur[1], signatures):
                    run.append(cur)
                else:
                    self._fold_run(run, parent, stem, folds)
                    run = [cur]
            self._fold_run(run, parent, stem, folds)
        return folds

    def _same(self, a, b, signatures):
        return self.types.get(".".join(a)) == self.types.get(".".join(b)) and sorted(
            signatures[a], key=repr
        ) == sorted(signatures[b], key=repr)

    def _fold_run(self, run, parent, stem, folds):
        if len(run) < 2:
            return
        collapsed = self.depth is not None and len(parent) + 1 > self.depth
        kept = [] if collapsed else run[:1]  # shown in detail, the model for the rest
        folded = run[len(kept) :]
        box = (
            "fold",
            parent,
            stem,
            folded[0][0],
            folded[-1][0],
            kept[0][1] if kept else None,
            len(folded),
        )
        for _, units in folded:
            folds[units] = box

    def count(self):
        return len(self.boxes)

    def ranks(self):
        """How many boxes the longest chain of the picture passes through (its height)."""
        rank = {}
        for s, d in self.edges:  # items are in forward order, so each source is ranked first
            bs, bd = self.box_of[s], self.box_of[d]
            r = rank.get(s, 0) + (bs != bd)
            rank[d] = max(rank.get(d, 0), r)
        return max(rank.values(), default=0) + 1

    def fits(self, max_nodes):
        return max_nodes is None or (
            self.count() <= max_nodes and self.ranks() <= DEFAULT_MAX_RANKS
        )


# ============================================================================ drawing


def _fmt(x):
    return f"{x:.3g}"


def _shape_text(shape, dtype=None):
    text = "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
    if dtype is not None and np.dtype(dtype) != np.float32:
        text += f" {np.dtype(dtype).name}"
    return text


def _nonfinite(a):
    """'NaN', 'Inf' or '' for an array (non-float arrays are always finite)."""
    if a is None or a.dtype.kind not in "fc" or np.isfinite(a).all():
        return ""
    return "NaN" if np.isnan(a).any() else "Inf"


def _value_problem(it):
    """`_nonfinite` of an item's output, except the −∞ a mask writes on purpose: attention's
    `masked_fill` blocks a score with −∞ so that softmax gives it weight 0."""
    value = it.value()
    bad = _nonfinite(value)
    masking = it.node is not None and it.node.name == "masked_fill"
    if bad == "Inf" and masking and not np.isposinf(value).any():
        return ""
    return bad


def _stats_text(a):
    if a is None or a.size == 0 or a.dtype.kind not in "fiub":
        return ""
    finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    if finite.size == 0:
        return "no finite values"
    if a.size == 1:
        return f"value {_fmt(finite.item())}"
    return f"min {_fmt(finite.min())} max {_fmt(finite.max())} mean {_fmt(finite.mean())}"


def _grad_text(g, freed=False):
    """freed: the node's backward ran without retain_graph, which keeps no node's gradient."""
    if g is None:
        return "grad: not kept (retain_graph=False)" if freed else "grad: none yet"
    norm = float(np.sqrt(np.sum(np.square(g, dtype=np.float64))))
    return f"grad {_shape_text(g.shape)} ‖g‖ {_fmt(norm)}"


def _escape(text):
    # DOT record/escString specials; graphviz quotes the string but keeps backslashes
    return text.replace("\\", "\\\\")


class _Highlight:
    """Which nodes a BackwardStep has reached: the current node and those whose backward ran."""

    def __init__(self, step):
        self.current = ("op", id(step.node))
        self.done = {("op", i) for i in step.done}
        self.step = step

    def known(self, it, consumers):
        """Is the gradient of this item's output known? A leaf's, once all its users ran."""
        if it.kind == "op" or it.param is not None:  # a node of the graph (W.T is one)
            return it.key in self.done
        if not it.tensor.requires_grad:
            return False
        users = consumers.get(it.key, ())
        return bool(users) and all(u in self.done for u in users)

    def grad(self, it, consumers):
        """The gradient this picture may show for `it`: the walk's own record for a node whose
        backward has run (kept by every walk from ``backward_steps``, retained graph or not),
        a leaf's ``.grad`` once all its users ran, else None (``.grad`` may still hold an
        earlier backward's)."""
        if not self.known(it, consumers):
            return None
        if it.node is not None:
            g = self.step.grad_of(it.node)
            return g if g is not None else it.node.grad
        return it.grad()


def draw_graph(
    *outputs,
    depth=None,
    show_grad=False,
    show_values=False,
    highlight=None,
    max_nodes=DEFAULT_MAX_NODES,
    model=None,
    fold=True,
    title=None,
):
    """Draw the computation graph that produced `outputs` (Tensors, or graph nodes such as
    ``loss.grad_fn`` or a backward step's ``step.node``) as a graphviz.Digraph.

    depth: None shows every op (within the budget); ``k`` collapses each module nested deeper
        than k into one box (0: the top-level modules are boxes, 1: their children, …).
    show_grad: after backward, add each node's gradient shape and norm.
    show_values: add each node's output min/max/mean (when the output tensor is reachable).
    highlight: a `BackwardStep` from ``loss.backward_steps()``: the current node is orange,
        nodes whose gradient is already known are green.
    max_nodes: the box budget (default 60, a picture that fits a screen); past it the graph is
        collapsed to the deepest depth that fits, and a note in the picture says so. None: no
        budget (every op, however tall the picture).
    model: the root Module, to name collapsed modules by class even when they hold no
        parameters (modules with parameters are found without it).
    fold: fold runs of identical siblings (``layers.0 … layers.5``) into one box.

    Nodes whose output or gradient holds NaN or Inf are red. Rendering needs Graphviz's ``dot``;
    without it ``.source`` (DOT text) still works and rendering raises `GraphvizNotFound`.
    """
    if not outputs:
        raise TypeError("draw_graph: give at least one output tensor, e.g. draw_graph(loss)")
    for i, t in enumerate(outputs):
        if not isinstance(t, (Tensor, Context)):
            raise TypeError(
                f"draw_graph: output {i} is a {type(t).__name__}, not a Tensor "
                f"(or a graph node such as loss.grad_fn)"
            )
    if depth is not None and (not isinstance(depth, int) or depth < 0):
        raise ValueError(f"draw_graph: depth must be None or an int >= 0, got {depth!r}")
    if max_nodes is not None and max_nodes < 1:
        raise ValueError(f"draw_graph: max_nodes must be None or >= 1, got {max_nodes!r}")
    items, edges, types, output_keys = _collect(outputs, model)
    layout, note = _choose_layout(items, edges, types, depth, fold, max_nodes)
    hl = _Highlight(highlight) if highlight is not None else None
    g = _draw(layout, output_keys, hl, show_grad, show_values, note, title)
    if depth is None and max_nodes is not None:  # the default: fit a notebook cell
        g.attr(size=FIT_SIZE)
    return g


def _choose_layout(items, edges, types, depth, fold, max_nodes):
    """The requested layout, or the deepest smaller depth within the budget (with a note).

    The budget is max_nodes boxes; without an explicit depth, also DEFAULT_MAX_RANKS boxes along
    the longest chain, so that the default picture is about two screens tall."""
    ranked = depth is None and max_nodes is not None

    def fits(layout):
        return layout.fits(max_nodes) if ranked else layout.count() <= (max_nodes or math.inf)

    layout = _Layout(items, edges, types, depth, fold)
    if fits(layout):
        return layout, ""
    full, tall = layout.count(), layout.ranks()
    deepest = max((len(it.units) for it in items.values()), default=0)
    start = deepest - 1 if depth is None else min(depth, deepest) - 1
    if start < 0:
        return layout, (
            f"{full} boxes, over max_nodes={max_nodes}, and no module scope left to "
            f"collapse (ops grouped in modules or `with mt.scope(name):` can be)"
        )
    for d in range(start, -1, -1):
        layout = _Layout(items, edges, types, d, fold)
        if fits(layout):
            break
    asked = "all ops" if depth is None else f"depth={depth}"
    over = f"over max_nodes={max_nodes}"
    if ranked and full <= max_nodes:
        over = f"{tall} in a chain, over {DEFAULT_MAX_RANKS} (two screens)"
    note = (
        f"collapsed automatically to depth={layout.depth}: {asked} would draw {full} boxes,\n"
        f"{over} (pass depth= or max_nodes= to see more;\nmt.viz.explore(loss) opens any module)"
    )
    if not fits(layout):
        note += f"; still {layout.count()} boxes at depth 0"
    return layout, note


def _draw(layout, output_keys, hl, show_grad, show_values, note, title):
    items = layout.items
    members = defaultdict(list)  # box -> items drawn in it
    for key, box in layout.box_of.items():
        members[box].append(items[key])
    consumers = defaultdict(list)
    for s, d in layout.edges:
        consumers[s].append(d)

    g = Graph("computation_graph")
    g.attr(rankdir="TB", fontname="Helvetica", fontsize="11", newrank="true")
    g.attr("node", fontname="Helvetica", fontsize="10")
    g.attr("edge", fontname="Helvetica", fontsize="9", color="gray40")

    # box edges with the shape of the tensor that crosses them
    box_edges, crossing_in, crossing_out = {}, defaultdict(dict), defaultdict(dict)
    for s, d in layout.edges:
        bs, bd = layout.box_of[s], layout.box_of[d]
        if bs == bd:
            continue
        shape = items[s].shape
        box_edges.setdefault((bs, bd), shape)
        crossing_in[bd].setdefault(s, shape)
        crossing_out[bs].setdefault(s, shape)
    for k in output_keys:
        crossing_out[layout.box_of[k]].setdefault(k, items[k].shape)

    ids = {box: f"n{i}" for i, box in enumerate(layout.boxes)}
    clusters = defaultdict(list)  # cluster units -> boxes directly inside
    for box in layout.boxes:
        clusters[_cluster_of(box, items)].append(box)

    def attrs_for(box):
        its = members[box]
        if box[0] in ("op", "leaf"):
            return _item_attrs(its[0], hl, consumers, show_grad, show_values)
        return _module_attrs(
            box, its, layout.types, crossing_in[box], crossing_out[box], hl, consumers
        )

    _emit_clusters(g, clusters, ids, attrs_for, layout.types)
    for (bs, bd), shape in box_edges.items():
        label = _shape_text(shape) if bs[0] in ("group", "fold") else None
        g.edge(ids[bs], ids[bd], label=label)

    lines = [title] if title else []
    depth_text = "all ops" if layout.depth is None else f"depth={layout.depth}"
    lines.append(f"{layout.count()} boxes · {depth_text}")
    if note:
        lines.append(note)
    if show_values:
        lines.extend(_freed_values_note(items.values()))
    if hl is not None:
        s = hl.step
        lines.append(
            f"backward step {s.index + 1}/{s.total}: {describe_node(s.node)} — "
            f"orange: this node, green: gradient known"
        )
    g.attr(label=_escape("\n".join(lines)), labelloc="t", labeljust="l")
    return g


def _freed_values_note(items):
    """Say why some op boxes show no values: their outputs were freed during forward."""
    freed = sum(1 for it in items if it.kind == "op" and it.value() is None)
    if not freed:
        return []
    return [
        f"(value freed): {freed} op outputs that no backward needs were freed during forward;",
        "run the forward inside `with mt.autograd.keep_intermediates():` to see every value",
    ]


def _cluster_of(box, items):
    if box[0] == "group":
        return box[1][:-1]
    if box[0] == "fold":
        return box[1]
    return items[box].units


def _emit_clusters(g, clusters, ids, attrs_for, types):
    """Write boxes into nested `subgraph cluster_…` blocks, one per module scope."""
    all_units = set()
    for units in clusters:
        for i in range(len(units) + 1):
            all_units.add(units[:i])
    children = defaultdict(list)
    for units in sorted(all_units, key=lambda u: (len(u), u)):
        if units:
            children[units[:-1]].append(units)

    used = {}  # cluster name -> module path (the explorer maps clicks on a cluster back)

    def emit(graph, units):
        for box in clusters.get(units, ()):
            graph.node(ids[box], **attrs_for(box))
        for child in children[units]:
            path = ".".join(child)
            name = "cluster_" + re.sub(r"\W", "_", path)
            while name in used:  # 'my block' and 'my_block' are two clusters
                name += "_"
            used[name] = path
            with graph.subgraph(name=name) as sub:
                kind = types.get(path)
                label = child[-1] + (f" · {kind}" if kind else "")
                sub.attr(
                    label=label,
                    tooltip=path,
                    style="rounded,dashed",
                    color="gray50",
                    fontsize="10",
                    labeljust="l",
                )
                emit(sub, child)

    emit(g, ())
    g.cluster_paths = used


def _item_attrs(it, hl, consumers, show_grad, show_values):
    lines = [it.title + it.suffix, _shape_text(it.shape, it.dtype)]
    value = it.value()
    grad = it.grad() if hl is None else hl.grad(it, consumers)
    if show_values and _stats_text(value):
        lines.append(_stats_text(value))
    elif show_values and value is None and it.kind == "op":
        lines.append("(value freed)")
    wants_grad = it.kind == "op" or (it.param if it.param is not None else it.tensor).requires_grad
    if show_grad and wants_grad:
        freed = hl is None and it.node is not None and it.node._released
        lines.append(_grad_text(grad, freed))
    bad = _value_problem(it) or (_nonfinite(grad) and f"{_nonfinite(grad)} in grad")
    if bad:
        lines.append(f"⚠ {bad}")
    fill = _COLOURS[it.kind]
    attrs = {"shape": "box" if it.kind != "input" else "ellipse", "style": "rounded,filled"}
    if it.kind == "op":
        tooltip = describe_node(it.node)
        src = it.node.source_line()
        if src:
            tooltip += "\n" + src
        attrs["tooltip"] = _escape(tooltip)
    if hl is not None:
        if it.key == hl.current:
            fill, attrs["penwidth"] = _COLOURS["current"], "3"
        elif hl.known(it, consumers):
            fill = _COLOURS["known"]
    if bad:
        fill = _COLOURS["bad"]
    attrs["fillcolor"] = fill
    attrs["label"] = _escape("\n".join(lines))
    return attrs


def _module_attrs(box, its, types, ins, outs, hl, consumers):
    """A collapsed module or a fold of identical siblings."""
    if box[0] == "group":
        path = ".".join(box[1])
        kind = types.get(path) or box[1][-1]
        head = [kind, path]
    else:
        _, parent, stem, first, last, kept, n = box
        base = ".".join(parent + ((stem,) if stem else ()))
        path = f"{base}.{first}" if stem else str(first)
        kind = types.get(path) or (stem or "module")
        span = f"{base}.{first}–{last}" if stem else f"{first}–{last}"
        head = [f"{kind} × {n}", span] if n > 1 else [kind, f"{base}.{first}" if stem else path]
        if kept:
            head.append(f"(same as {'.'.join(kept)})")
    if any(it.kind == "op" and it.param is None for it in its):
        lines = head + [_io_text("in", ins), _io_text("out", outs)]
    else:  # only parameters (used by an op outside, e.g. a fused QKV projection)
        lines = head + [
            ", ".join(
                f"{it.title.rsplit('.', 1)[-1]}{it.suffix} {_shape_text(it.shape)}" for it in its
            )
        ]
    bad = next((b for b in (_value_problem(it) or _nonfinite(it.grad()) for it in its) if b), "")
    if bad:
        lines.append(f"⚠ {bad} inside")
    fill, attrs = _COLOURS[box[0]], {"shape": "box3d", "style": "filled"}
    if hl is not None:
        ops = [it for it in its if it.kind == "op"]
        known = sum(hl.known(it, consumers) for it in ops)
        if any(it.key == hl.current for it in its):
            fill, attrs["penwidth"] = _COLOURS["current"], "3"
        elif ops and known == len(ops):
            fill = _COLOURS["known"]
        elif known:
            fill = _COLOURS["partly_known"]
        lines.append(f"gradients known: {known}/{len(ops)} ops")
    if bad:
        fill = _COLOURS["bad"]
    attrs["fillcolor"] = fill
    attrs["label"] = _escape("\n".join(lines))
    attrs["tooltip"] = _escape(f"{path}: {len(its)} nodes")
    return attrs


def _io_text(word, shapes):
    texts = list(dict.fromkeys(_shape_text(s) for s in shapes.values()))
    if not texts:
        return f"{word}: —"
    more = f" +{len(texts) - 3}" if len(texts) > 3 else ""
    return f"{word}: " + ", ".join(texts[:3]) + more


def count_boxes(graph):
    """How many boxes (nodes) a DOT graph from draw_graph draws: for tests and budgets."""
    return len(re.findall(r"^\s*n\d+ \[", graph.source, flags=re.M))


__all__ = [
    "draw_graph",
    "Graph",
    "GraphvizNotFound",
    "count_boxes",
    "scope_units",
    "INSTALL_HINT",
    "DEFAULT_MAX_NODES",
]
