"""mt.viz: draw_graph (clusters, names, shapes, depth, folding, budget, highlight, grads, values,
NaN colouring, rendering with and without Graphviz) and trace (scopes, shapes, ranges, marks)."""

import io
import math
import re
import shutil

import graphviz
import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn
from minitensor.viz import GraphvizNotFound, count_boxes, draw_graph, scope_units, trace

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz's dot is not installed (CI installs it)"
)


# ----------------------------------------------------------------------------- a small model


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        weights = F.softmax(q @ k.transpose(-1, -2), scale=1 / math.sqrt(self.d))
        return self.w_o(weights @ v)


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.self_attn = Attention(d)
        self.norm1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x):
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.ff(x))


class Encoder(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.layers = nn.ModuleList([Layer(d) for _ in range(n)])
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class Model(nn.Module):
    def __init__(self, d=8, n=3):
        super().__init__()
        self.encoder = Encoder(d, n)
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def make(n=3, d=8, seed=0):
    mt.manual_seed(seed)
    model = Model(d, n)
    x = mt.randn(2, 3, d)
    x.name = "x"
    loss = (model(x) ** 2).mean()
    return model, x, loss


# ----------------------------------------------------------------------------- reading DOT

_NODE = re.compile(r'^\s*(n\d+) \[((?:[^\]"]|"(?:[^"\\]|\\.)*")*)\]', re.M)
_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s\]]+)')


def nodes(g):
    """{node id: {attribute: value}} from a Digraph's DOT source."""
    out = {}
    for nid, body in _NODE.findall(g.source):
        attrs = {k: v[1:-1] if v.startswith('"') else v for k, v in _ATTR.findall(body)}
        out[nid] = attrs
    return out


def structure(g):
    """(parent of each cluster, innermost cluster of each node) from the DOT nesting."""
    parent, where, stack = {}, {}, [None]
    for line in g.source.splitlines():
        s = line.strip()
        m = re.match(r"subgraph (cluster_\w+) \{", s)
        if m:
            parent[m.group(1)] = stack[-1]
            stack.append(m.group(1))
        elif s == "}":
            stack.pop()
        else:
            m = re.match(r"(n\d+) \[", s)
            if m:
                where[m.group(1)] = stack[-1]
    return parent, where


def find(g, text):
    """Ids of the nodes whose label starts with `text`."""
    return [nid for nid, a in nodes(g).items() if a.get("label", "").startswith(text)]


# ----------------------------------------------------------------------------- structure


def test_scope_units_join_list_indices():
    assert scope_units("") == ()
    assert scope_units("encoder.layers.0.self_attn") == ("encoder", "layers.0", "self_attn")
    assert scope_units("ff.0") == ("ff.0",)
    assert scope_units("0.w") == ("0", "w")


def test_returns_digraph_with_nested_clusters_per_module():
    model, x, loss = make()
    g = draw_graph(loss, fold=False, max_nodes=None)
    assert isinstance(g, graphviz.Digraph)
    parent, where = structure(g)
    assert parent["cluster_encoder"] is None
    assert parent["cluster_encoder_layers_0"] == "cluster_encoder"
    assert parent["cluster_encoder_layers_0_self_attn"] == "cluster_encoder_layers_0"
    assert parent["cluster_encoder_layers_0_self_attn_w_q"] == "cluster_encoder_layers_0_self_attn"
    assert parent["cluster_encoder_layers_2_ff_0"] == "cluster_encoder_layers_2"
    assert "cluster_encoder_layers" not in parent  # a ModuleList runs no op: no empty cluster
    # the softmax sits in the attention's cluster; the loss ops at the top level
    (softmax,) = [n for n in find(g, "softmax") if where[n] == "cluster_encoder_layers_1_self_attn"]
    assert where[find(g, "mean\n")[0]] is None
    # cluster labels carry the module's class, found from the parameters
    assert 'label="self_attn · Attention"' in g.source
    assert 'label="layers.0 · Layer"' in g.source


def test_parameter_names_leaf_names_and_shapes():
    model, x, loss = make()
    g = draw_graph(loss, fold=False, max_nodes=None)
    labels = [a["label"] for a in nodes(g).values()]
    names = {name for name, _ in model.named_parameters()}
    for name in names:  # every parameter appears under its dotted name
        assert any(lab.split("\n")[0] in (name, name + "ᵀ") for lab in labels), name
    _, where = structure(g)
    (wq,) = find(g, "encoder.layers.0.self_attn.w_q.weightᵀ")
    assert where[wq] == "cluster_encoder_layers_0_self_attn_w_q"
    assert nodes(g)[wq]["label"].split("\n")[1] == "(8, 8)"
    (xin,) = find(g, "x\n(2, 3, 8)")
    assert where[xin] is None and nodes(g)[xin]["shape"] == "ellipse"
    # op nodes: name and output shape; the Linear's weight.T folded into the parameter's box
    assert find(g, "softmax\n(2, 3, 3)")
    assert not find(g, "permute\n(8, 8)")
    assert len(find(g, "matmul + bias\n(2, 3, 2)")) == 1  # the head's x Wᵀ + b: one node


def test_dtype_shown_only_when_not_float32():
    a = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    a.name = "a"
    g = draw_graph(F.exp(a).sum())
    assert find(g, "exp\n(2, 3) float64")
    b = mt.randn(2, 3, requires_grad=True)
    g = draw_graph(F.exp(b).sum())
    assert find(g, "exp\n(2, 3)") and "float32" not in g.source


def test_edges_follow_the_data():
    a = mt.randn(2, 3, requires_grad=True)
    a.name = "a"
    b = mt.randn(3, 4, requires_grad=True)
    b.name = "b"
    g = draw_graph((a @ b).sum())
    (na,), (nb,), (mm,), (sm,) = find(g, "a\n"), find(g, "b\n"), find(g, "matmul"), find(g, "sum")
    for src, dst in [(na, mm), (nb, mm), (mm, sm)]:
        assert f"{src} -> {dst}" in g.source
    assert count_boxes(g) == 4


def test_leaf_output_and_several_outputs():
    a = mt.randn(3, requires_grad=True)
    a.name = "a"
    assert count_boxes(draw_graph(a)) == 1
    y1, y2 = (a * 2.0).sum(), F.exp(a).sum()
    g = draw_graph(y1, y2)
    assert find(g, "mul") and find(g, "exp") and len(find(g, "a\n")) == 1


def test_bad_arguments_are_clear():
    model, x, loss = make(n=1)
    with pytest.raises(TypeError, match="at least one output"):
        draw_graph()
    with pytest.raises(TypeError, match="output 0 is a ndarray"):
        draw_graph(np.zeros(3))
    with pytest.raises(ValueError, match="depth"):
        draw_graph(loss, depth=-1)
    with pytest.raises(ValueError, match="max_nodes"):
        draw_graph(loss, max_nodes=0)


# ----------------------------------------------------------------------------- depth and folding


def test_collapse_at_each_depth_box_counts():
    model, x, loss = make(n=3)
    counts = {
        d: count_boxes(draw_graph(loss, depth=d, fold=False, max_nodes=None))
        for d in (0, 1, 2, 3, None)
    }
    # depth 0: x, encoder, head, pow, mean
    assert counts[0] == 5
    # depth 1: x, 3 layers, encoder.norm, head's bias, weight.T, matmul + bias, pow, mean
    assert counts[1] == 10
    assert counts[0] < counts[1] < counts[2] < counts[3] < counts[None]
    # every parameter (weight.T boxes included) and every op drawn at full depth
    n_params = len(list(model.parameters()))
    n_ops = len(mt.autograd.topological_order(loss.grad_fn))
    n_views = sum(isinstance(m, nn.Linear) for m in model.modules())  # weight.T, one per Linear
    assert counts[None] == n_params + n_ops - n_views + 1  # + x


def test_collapsed_box_shows_type_path_and_shapes():
    model, x, loss = make(n=2)
    g = draw_graph(loss, depth=2, fold=False, model=model)
    (box,) = find(g, "Attention\nencoder.layers.1.self_attn\n")
    label = nodes(g)[box]["label"]
    assert "in: (2, 3, 8)" in label and "out: (2, 3, 8)" in label
    assert nodes(g)[box]["shape"] == "box3d"
    # with model=, parameter-less modules are named by class too
    assert find(g, "ReLU\nencoder.layers.0.ff.1")
    # without it the path's last part stands in
    g2 = draw_graph(loss, depth=2, fold=False)
    assert find(g2, "ff.1\nencoder.layers.0.ff.1")
    # the edge out of a collapsed box carries the shape
    assert re.search(r'-> n\d+ \[label="\(2, 3, 8\)"\]', g.source)


def test_identical_layers_fold():
    model, x, loss = make(n=3)
    g = draw_graph(loss, depth=1)
    assert find(g, "Layer × 3\nencoder.layers.0–2")
    assert count_boxes(g) == 8  # 10 without folding, minus 2
    # shown in detail: layers.0 in full, layers.1–2 as one box
    g = draw_graph(loss, max_nodes=None)
    parent, _ = structure(g)
    assert "cluster_encoder_layers_0" in parent and "cluster_encoder_layers_1" not in parent
    (box,) = find(g, "Layer × 2\nencoder.layers.1–2\n(same as encoder.layers.0)")
    assert count_boxes(g) < count_boxes(draw_graph(loss, fold=False, max_nodes=None))


def test_different_siblings_do_not_fold():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)])

        def forward(self, x):
            for layer in self.layers:
                x = F.relu(layer(x))
            return x

    mt.manual_seed(0)
    model = Stack()
    loss = model(mt.randn(2, 8)).sum()
    g = draw_graph(loss, depth=0, model=model)
    assert find(g, "Linear × 2\nlayers.0–1")  # the two 8 -> 8 layers fold
    assert find(g, "Linear\nlayers.2")  # the 8 -> 4 one stays
    g = draw_graph(loss, depth=0, model=model, fold=False)
    assert len(find(g, "Linear\nlayers.")) == 3


# ----------------------------------------------------------------------------- budget


def test_node_budget_collapses_and_says_so():
    model, x, loss = make(n=3)
    full = count_boxes(draw_graph(loss, fold=False, max_nodes=None))
    g = draw_graph(loss, fold=False, max_nodes=20)
    assert count_boxes(g) <= 20 < full
    m = re.search(
        r"collapsed automatically to depth=(\d+): all ops would draw (\d+) boxes,\s+"
        r"over max_nodes=20",
        g.source,
    )
    assert m and int(m.group(2)) == full
    # the deepest depth that fits is chosen
    d = int(m.group(1))
    assert count_boxes(draw_graph(loss, depth=d + 1, fold=False, max_nodes=None)) > 20
    # an explicit depth over budget collapses further too
    g = draw_graph(loss, depth=3, fold=False, max_nodes=12)
    assert count_boxes(g) <= 12 and "depth=3 would draw" in g.source
    # within budget: no note
    assert "collapsed automatically" not in draw_graph(loss, depth=1).source


def test_default_budget_applies():
    model, x, loss = make(n=6, d=8)
    g = draw_graph(loss, fold=False)
    assert count_boxes(g) <= mt.viz.DEFAULT_MAX_NODES
    assert "collapsed automatically" in g.source


# ----------------------------------------------------------------------------- after backward


def test_show_grad_gives_shape_and_norm():
    model, x, loss = make(n=1)
    g = draw_graph(loss, show_grad=True, max_nodes=None)
    assert "grad: none yet" in g.source
    loss.backward(retain_graph=True)  # nodes keep their gradients only for a retained graph
    g = draw_graph(loss, show_grad=True, max_nodes=None)
    w = model.encoder.layers[0].self_attn.w_q.weight
    (box,) = find(g, "encoder.layers.0.self_attn.w_q.weightᵀ")
    norm = float(np.linalg.norm(w.grad.numpy().astype(np.float64)))
    assert f"grad (8, 8) ‖g‖ {norm:.3g}" in nodes(g)[box]["label"]
    (mean,) = find(g, "mean\n")
    assert "grad () ‖g‖ 1" in nodes(g)[mean]["label"]
    assert "grad:" not in nodes(g)[find(g, "x\n")[0]]["label"]  # x needs no gradient


def test_show_values_gives_min_max_mean():
    model, x, loss = make(n=1)
    g = draw_graph(loss, show_values=True, max_nodes=None)
    (mean,) = find(g, "mean\n")
    v = loss.item()
    assert f"value {v:.3g}" in nodes(g)[mean]["label"]
    (xin,) = find(g, "x\n")
    d = x.numpy()
    assert f"min {d.min():.3g} max {d.max():.3g}" in nodes(g)[xin]["label"]
    (sm,) = find(g, "softmax")
    lo, hi = (float(s) for s in re.search(r"min (\S+) max (\S+)", nodes(g)[sm]["label"]).groups())
    assert 0 <= lo <= hi <= 1


def test_nan_and_inf_nodes_are_coloured():
    a = mt.tensor([1.0, -1.0, 2.0], requires_grad=True)
    a.name = "a"
    # the graph must keep `y * 2.0` (held by no one) for its NaN to be seen
    with np.errstate(invalid="ignore"), mt.autograd.keep_intermediates():
        y = F.log(a)
        loss = (y * 2.0).sum()
    g = draw_graph(loss)
    for name in ("log", "mul", "sum"):
        (nid,) = find(g, name + "\n")
        assert nodes(g)[nid]["fillcolor"] == "#ff8a80"
        assert "⚠ NaN" in nodes(g)[nid]["label"]
    assert nodes(g)[find(g, "a\n")[0]]["fillcolor"] != "#ff8a80"
    # a collapsed box with a NaN/Inf inside says so
    mt.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 3))
    with np.errstate(all="ignore"), mt.autograd.keep_intermediates():
        out = seq(mt.tensor([[np.inf, 1.0, 1.0]])).sum()
    g = draw_graph(out, depth=0)
    (box,) = find(g, "Linear\n0\n")
    assert nodes(g)[box]["fillcolor"] == "#ff8a80" and "inside" in nodes(g)[box]["label"]


def test_a_masks_minus_infinity_is_not_an_alarm_but_a_real_inf_is():
    """A causal mask writes −∞ on purpose (softmax then gives 0): not red. +∞ there is."""
    scores = mt.randn(1, 3, 3, requires_grad=True)
    blocked = np.triu(np.ones((3, 3), dtype=bool), k=1)
    with mt.autograd.keep_intermediates():
        masked = scores.masked_fill(mt.tensor(blocked), float("-inf"))
        loss = F.softmax(masked, dim=-1).sum()
        wrong = scores.masked_fill(mt.tensor(blocked), float("inf")).sum()
    g = draw_graph(loss)
    (nid,) = find(g, "masked_fill\n")
    assert nodes(g)[nid]["fillcolor"] != "#ff8a80" and "⚠" not in nodes(g)[nid]["label"]
    g = draw_graph(wrong)
    (nid,) = find(g, "masked_fill\n")
    assert nodes(g)[nid]["fillcolor"] == "#ff8a80" and "⚠ Inf" in nodes(g)[nid]["label"]


# ----------------------------------------------------------------------------- highlight a step


def _fills(g):
    return {nid: a.get("fillcolor") for nid, a in nodes(g).items()}


def test_highlight_marks_current_and_known_nodes():
    model, x, loss = make(n=1)
    seen_green = []
    for step in loss.backward_steps():
        g = draw_graph(loss, highlight=step, max_nodes=None, fold=False)
        fills = _fills(g)
        (current,) = [n for n, f in fills.items() if f == "orange"]
        label = nodes(g)[current]["label"]
        assert label.startswith(step.node.name) or "weightᵀ" in label.split("\n")[0]
        assert nodes(g)[current]["penwidth"] == "3"
        seen_green.append(sum(f == "palegreen" for f in fills.values()))
        assert f"backward step {step.index + 1}/{step.total}" in g.source
    assert seen_green == sorted(seen_green) and seen_green[0] == 0
    # at the last step every op and parameter is known (except the current node)
    n_boxes = count_boxes(g)
    assert seen_green[-1] == n_boxes - 2  # all but x and the current node


def test_highlight_of_an_earlier_step_after_the_walk():
    model, x, loss = make(n=1)
    steps = list(loss.backward_steps())  # the walk is over
    early = draw_graph(loss, highlight=steps[2], max_nodes=None, fold=False)
    green = {
        nodes(early)[n]["label"].split("\n")[0]
        for n, f in _fills(early).items()
        if f == "palegreen"
    }
    assert green == {"mean", "pow", "head.bias"}  # the head's add is current
    (current,) = [n for n, f in _fills(early).items() if f == "orange"]
    assert nodes(early)[current]["label"].startswith(steps[2].node.name)


def _grad_lines(g):
    """{first label line: its grad line} of every box whose fill says its gradient is known."""
    out = {}
    for nid, fill in _fills(g).items():
        if fill in ("palegreen", "orange"):
            lines = nodes(g)[nid]["label"].split("\n")
            out[lines[0]] = next((x for x in lines if x.startswith("grad")), None)
    return out


def test_a_plain_walks_pictures_show_every_gradient_they_call_known():
    """Green means 'gradient known': the label shows it, on a walk that keeps no node's .grad,
    and it is the gradient a retained walk of the same graph (which does keep .grad) shows."""
    _, _, plain = make(n=1)
    _, _, retained = make(n=1)
    walks = zip(plain.backward_steps(), retained.backward_steps(retain_graph=True))
    for a, b in walks:
        ga = draw_graph(plain, highlight=a, show_grad=True, max_nodes=None, fold=False)
        gb = draw_graph(retained, highlight=b, show_grad=True, max_nodes=None, fold=False)
        shown = _grad_lines(ga)
        assert shown and all(line and "none yet" not in line for line in shown.values()), shown
        assert shown == _grad_lines(gb)
        assert a.grad_of(a.node) is a.grad_output
    assert a.grad_of(plain.grad_fn) is not None  # an earlier node's, kept by the walk


def test_step_grad_of_is_a_snapshot_and_backward_keeps_nothing():
    _, _, loss = make(n=1)
    steps = list(loss.backward_steps())
    last = steps[-1].node
    assert steps[0].grad_of(last) is None  # not run yet at step 1
    assert steps[-1].grad_of(last) is steps[-1].grad_output
    _, _, loss = make(n=1)
    loss.backward()
    assert loss.grad_fn.grad is None  # the engine kept no node's gradient


def test_after_a_plain_backward_a_transposed_weight_shows_the_weights_gradient():
    model, x, loss = make(n=1)
    loss.backward()
    g = draw_graph(loss, show_grad=True, max_nodes=None, fold=False, model=model)
    (box,) = find(g, "head.weightᵀ")
    label = nodes(g)[box]["label"]
    w = model.head.weight
    norm = float(np.linalg.norm(w.grad.numpy().astype(np.float64)))
    assert f"grad ({w.shape[1]}, {w.shape[0]}) ‖g‖ {norm:.3g}" in label
    # an op's own gradient is not kept by a plain backward, and the label says so
    (mean,) = find(g, "mean\n")
    assert "grad: not kept (retain_graph=False)" in nodes(g)[mean]["label"]


def test_highlight_in_collapsed_view_counts_known_ops():
    model, x, loss = make(n=2)
    steps = list(loss.backward_steps(retain_graph=True))
    g = draw_graph(loss, highlight=steps[-1], depth=1, fold=False)
    (box,) = find(g, "Layer\nencoder.layers.0\n")
    assert "gradients known:" in nodes(g)[box]["label"]
    assert nodes(g)[box]["fillcolor"] in ("orange", "palegreen")


# ----------------------------------------------------------------------------- rendering


@needs_dot
def test_renders_to_svg_at_several_depths(tmp_path):
    model, x, loss = make(n=2)
    for depth in (0, 1, 2, None):
        g = draw_graph(loss, depth=depth, model=model)
        path = g.render(tmp_path / f"g{depth}", format="svg")
        svg = open(path).read()
        assert "<svg" in svg and "</svg>" in svg
        assert svg.count('class="node"') == count_boxes(g)
    assert "image/svg+xml" in g._repr_mimebundle_()


def test_without_dot_source_works_and_render_explains(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` anywhere on PATH
    model, x, loss = make(n=1)
    g = draw_graph(loss)
    assert g.source.startswith("digraph")
    with pytest.raises(GraphvizNotFound) as err:
        g.render(tmp_path / "g", format="svg")
    msg = str(err.value)
    assert "apt-get install graphviz" in msg and "graphviz.org" in msg and ".source" in msg
    assert isinstance(err.value, graphviz.ExecutableNotFound)
    with pytest.raises(GraphvizNotFound):
        g.pipe(format="svg")


# ----------------------------------------------------------------------------- trace


def test_trace_prints_one_line_per_op_with_scope_shapes_and_ranges():
    model, x, _ = make(n=1)
    buf = io.StringIO()
    with trace(file=buf) as t:
        y = model(x)
        loss = (y**2).mean()
    lines = buf.getvalue().splitlines()
    assert len(lines) == len(t.records) == len(mt.autograd.topological_order(loss.grad_fn))
    sm = [r for r in t.records if r.op == "softmax"]
    assert len(sm) == 1 and sm[0].scope == "encoder.layers.0.self_attn"
    assert sm[0].input_shapes == [(2, 3, 3)] and sm[0].output_shape == (2, 3, 3)
    assert 0 <= sm[0].stats[0] <= sm[0].stats[1] <= 1
    assert abs(sm[0].stats[2] - 1 / 3) < 1e-6  # rows of 3 sum to 1
    head = [r for r in t.records if r.scope == "head" and r.op == "matmul + bias"][0]
    assert head.stats == pytest.approx(
        (float(y.numpy().min()), float(y.numpy().max()), float(y.numpy().mean())), rel=1e-5
    )
    last = t.records[-1]
    assert last.op == "mean" and last.scope == "" and last.stats[0] == pytest.approx(loss.item())
    line = lines[[i for i, r in enumerate(t.records) if r.op == "softmax"][0]]
    assert line.startswith("encoder.layers.0.self_attn") and "(2, 3, 3) -> (2, 3, 3)" in line
    assert re.search(r"min \S+ max \S+ mean 0\.333", line)
    assert lines[-1].startswith("(top)")


def test_trace_filters_by_scope_and_stops_after_the_block(capsys):
    mt.manual_seed(0)
    model = Model(8, 12)
    x = mt.randn(1, 2, 8)
    with trace(scope="encoder.layers.1") as t:
        model(x)
    out = capsys.readouterr().out
    assert t.records and all(
        r.scope == "encoder.layers.1" or r.scope.startswith("encoder.layers.1.") for r in t.records
    )
    assert not any(r.scope.startswith("encoder.layers.10") for r in t.records)
    assert len(out.splitlines()) == len(t.records)
    n = len(t.records)
    model(x)
    assert len(t.records) == n  # the hook is gone


def test_trace_marks_nan_and_saturated_softmax():
    scores = mt.tensor([[10.0, 0.0, 0.0], [0.1, 0.2, 0.3]])
    buf = io.StringIO()
    with trace(file=buf) as t:
        F.softmax(scores)
        with np.errstate(invalid="ignore"):
            F.log(mt.tensor([-1.0, 1.0]))
    sm, lg = t.records
    assert sm.marks == ["saturated: 1/2 rows max > 0.99"]
    assert lg.marks == ["NaN ×1"]
    assert "⚠ saturated: 1/2 rows" in buf.getvalue() and "⚠ NaN ×1" in buf.getvalue()
    with trace(quiet=True, saturation=0.99995) as t:  # its top weight is 0.99991
        F.softmax(scores)
    assert t.records[0].marks == []
    causal = np.triu(np.ones((3, 3), dtype=bool), k=1)  # True = blocked
    with trace(quiet=True) as t:
        F.softmax(mt.zeros(3, 3), mask=causal)  # row 0 has one allowed key
        F.softmax(mt.zeros(2, 3), mask=np.ones((2, 3), dtype=bool))
    assert t.records[0].marks == []
    assert t.records[1].marks == ["2/2 rows fully masked (all zero)"]


def test_trace_sees_ops_under_no_grad():
    with trace(quiet=True) as t, mt.no_grad():
        with mt.scope("inference"):
            F.relu(mt.randn(2, 2))
    assert [(r.scope, r.op) for r in t.records] == [("inference", "relu")]


# ----------------------------------------------------------------------------- the Transformer


def transformer_loss(cfg, batch=1, length=4, seed=0):
    """A Transformer (transformer.models) and the loss of one teacher-forced batch."""
    from transformer.models import Transformer

    mt.manual_seed(seed)
    model = Transformer(cfg)
    rng = np.random.default_rng(seed)
    src = mt.tensor(rng.integers(4, cfg.src_vocab_size, size=(batch, length)))
    tgt_in = mt.tensor(rng.integers(4, cfg.tgt_vocab_size, size=(batch, length)))
    target = mt.tensor(rng.integers(4, cfg.tgt_vocab_size, size=(batch, length)))
    loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), target)  # classes on axis 1
    return model, loss


@needs_dot
def test_small_transformer_renders_through_dot_at_several_depths(tmp_path):
    from transformer.config import TransformerConfig

    model, loss = transformer_loss(TransformerConfig.small(16, 16), batch=2, length=5)
    counts = []
    for depth in (0, 1, 2, 3, None):
        g = draw_graph(loss, depth=depth, model=model, max_nodes=200)
        svg = open(g.render(tmp_path / f"transformer_{depth}", format="svg")).read()
        assert svg.count('class="node"') == count_boxes(g)
        counts.append(count_boxes(g))
    assert count_boxes(draw_graph(loss, model=model)) <= mt.viz.DEFAULT_MAX_NODES
    assert counts[:4] == sorted(counts[:4]) and len(set(counts[:4])) == 4
    g0 = draw_graph(loss, depth=0, model=model)
    for name in (
        "Encoder\nencoder\n",
        "Decoder\ndecoder\n",
        "Embeddings\nsrc_embed\n",
        "Linear\ngenerator\n",
    ):
        assert find(g0, name), name
    g1 = draw_graph(loss, depth=1, model=model)
    assert find(g1, "EncoderLayer × 2\nencoder.layers.0–1")
    assert find(g1, "DecoderLayer × 2\ndecoder.layers.0–1")
    full = draw_graph(loss, model=model, max_nodes=None)
    parent, _ = structure(full)
    assert parent["cluster_decoder_layers_0_cross_attn"] == "cluster_decoder_layers_0"
    assert parent["cluster_decoder_layers_0"] == "cluster_decoder"
    assert "encoder.layers.0.self_attn.w_q.weight" in full.source
    assert find(full, "DecoderLayer\ndecoder.layers.1\n(same as decoder.layers.0)")


def test_paper_size_transformer_fits_the_default_budget(tmp_path):
    """N = 6, d_model 512, h = 8, d_ff 2048 (the defaults), one sentence of 4 tokens."""
    from transformer.config import TransformerConfig

    model, loss = transformer_loss(TransformerConfig(src_vocab_size=24, tgt_vocab_size=24))
    n_nodes = len(mt.autograd.topological_order(loss.grad_fn))
    g = draw_graph(loss)  # default settings
    assert count_boxes(g) <= 60 < n_nodes
    assert "collapsed automatically to depth=1" in g.source  # depth 2 is too tall
    assert find(g, "EncoderLayer × 6\nencoder.layers.0–5")  # the layers folded whole
    assert find(g, "DecoderLayer × 6\ndecoder.layers.0–5")
    g2 = draw_graph(loss, depth=2)  # an explicit depth keeps only the box budget
    assert find(g2, "EncoderLayer × 5\nencoder.layers.1–5")  # layers.0 in detail, the rest folded
    if shutil.which("dot"):
        svg = g.pipe(format="svg").decode()
        assert svg.count('class="node"') == count_boxes(g)


def _svg_size_px(svg):
    """The (width, height) a browser gives the SVG, in px (Graphviz writes pt; 1 pt = 4/3 px)."""
    m = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg)
    return float(m.group(1)) * 4 / 3, float(m.group(2)) * 4 / 3


@pytest.mark.parametrize("with_model", [True, False])
def test_small_transformer_default_fits_a_notebook_cell(with_model):
    """The README's 2 + 2-layer model: the default picks the deepest depth within 60 boxes and
    16 boxes in a chain, and carries Graphviz's size= (at most 1000 x 2000 px)."""
    from transformer.config import TransformerConfig

    model, loss = transformer_loss(TransformerConfig.small(14, 14), batch=2, length=5)
    g = draw_graph(loss, model=model if with_model else None)
    assert mt.viz.DEFAULT_MAX_NODES == 60 and mt.viz.graph.DEFAULT_MAX_RANKS == 16
    assert 10 < count_boxes(g) <= 60
    assert "collapsed automatically to depth=1" in g.source
    assert "mt.viz.explore" in g.source  # where the detail is
    assert re.search(r'\bsize="10.4,20.8"', g.source)
    # the explicit overrides still win, without size=
    assert count_boxes(draw_graph(loss, depth=3, max_nodes=200)) > 60
    assert count_boxes(draw_graph(loss, max_nodes=None)) > 150
    assert not re.search(r"\bsize=", draw_graph(loss, depth=2).source)
    if shutil.which("dot"):
        width, height = _svg_size_px(g.pipe(format="svg").decode())
        assert width <= 1000 and height <= 2000
        unscaled = draw_graph(loss, depth=2, model=model).pipe(format="svg").decode()
        assert _svg_size_px(unscaled)[1] > 2000  # why depth 2 is not the default


def test_parameter_views_share_the_parameter_box():
    w = nn.Parameter(mt.randn(2, 3, 4))
    w.name = "w"
    g = draw_graph(w.permute(2, 0, 1).sum())
    assert find(g, "w.permute\n(4, 2, 3)") and count_boxes(g) == 2
    m = nn.Parameter(mt.randn(3, 3))
    m.name = "m"
    g = draw_graph((m.T @ m).sum())  # m used twice: the transpose stays an op
    assert find(g, "mᵀ\n(3, 3)") and find(g, "m\n(3, 3)") and count_boxes(g) == 4
    x = mt.randn(3, 4, requires_grad=True)
    g = draw_graph(x.T.sum())  # not a parameter: an anonymous permute
    assert find(g, "permute\n(4, 3)")


def test_linear_weight_shows_as_the_layers_transposed_weight(capsys):
    """nn.Linear computes x Wᵀ: its `permute` node is named W's name with ᵀ, in the graph (shape
    and gradient of Wᵀ, both (in, out)), the trace and the step-through."""
    from minitensor.viz import describe_step

    mt.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32))
    x = mt.randn(5, 64)
    with trace(quiet=True) as t:
        loss = model(x).sum()
    assert [r.op for r in t.records][:2] == ["weightᵀ", "matmul + bias"]
    assert "0  " in t.records[0].line() and "weightᵀ" in t.records[0].line()
    loss.backward(retain_graph=True)
    g = draw_graph(loss, show_grad=True, max_nodes=None)
    (box,) = find(g, "0.weightᵀ\n(64, 32)\n")
    assert "grad (64, 32)" in nodes(g)[box]["label"]
    assert not find(g, "permute")
    texts = [describe_step(s) for s in loss.backward_steps()]
    assert any(
        "`weightᵀ` (0.weight, transposed) in 0 -> output (64, 32)" in text for text in texts
    ), texts
    assert not any("permute" in text for text in texts)


def test_trace_on_the_transformer_shows_why_scores_are_scaled():
    """Filtered to one decoder layer: both attentions' softmax, with (B, h, L_q, L_k) shapes;
    without the 1/√d_k scale many more rows saturate (the causal mask's first row, one-hot
    by construction, is not counted)."""
    from transformer.config import TransformerConfig
    from transformer.models import Transformer

    saturated = {}
    for scale in (True, False):
        mt.manual_seed(0)
        cfg = TransformerConfig.small(
            16, 16, d_model=256, n_heads=4, dropout=0.0, attention_scale=scale
        )
        model = Transformer(cfg)
        rng = np.random.default_rng(0)
        src = mt.tensor(rng.integers(4, 16, size=(2, 6)))
        tgt_in = mt.tensor(rng.integers(4, 16, size=(2, 5)))
        with trace(scope="decoder.layers.0", quiet=True) as t:
            model(src, tgt_in)
        assert {r.scope.split(".")[3] for r in t.records if r.scope.count(".") >= 3} >= {
            "self_attn",
            "cross_attn",
        }
        assert all(r.scope.startswith("decoder.layers.0") for r in t.records)
        soft = {r.scope: r for r in t.records if r.op == "softmax"}
        assert soft["decoder.layers.0.self_attn"].output_shape == (2, 4, 5, 5)
        assert soft["decoder.layers.0.cross_attn"].output_shape == (2, 4, 5, 6)
        saturated[scale] = sum(
            int(re.match(r"saturated: (\d+)/", m).group(1))
            for r in soft.values()
            for m in r.marks
            if m.startswith("sat")
        )
    assert saturated[False] > saturated[True] + 10


def test_budget_without_modules_to_collapse_says_why():
    x = mt.randn(3, requires_grad=True)
    y = x
    for _ in range(30):
        y = y * 1.01
    g = draw_graph(y.sum(), max_nodes=10)
    assert count_boxes(g) == 32
    assert "over max_nodes=10, and no module scope left to collapse" in g.source
    y = x
    for i in range(30):
        with mt.scope(f"block{i // 10}"):
            y = y * 1.01
    g = draw_graph(y.sum(), max_nodes=10)
    assert count_boxes(g) == 5 and "collapsed automatically to depth=0" in g.source


# ----------------------------------------------------------------------------- a step in a notebook


def test_step_draws_itself_with_its_node_highlighted(monkeypatch):
    from minitensor.viz import step_graph, step_mimebundle, step_svg

    model, x, loss = make(n=1)
    steps = list(loss.backward_steps(retain_graph=True))
    third = steps[2]
    g = step_graph(third, loss)
    fills = _fills(g)
    assert list(fills.values()).count("orange") == 1
    assert f"backward step 3/{third.total}" in g.source
    # without the loss, the graph under the step's node (the engine may keep `step.root`)
    assert "backward step 3/" in step_graph(third).source
    if shutil.which("dot"):
        svg = step_svg(third, loss)
        assert svg.lstrip().startswith("<?xml") and 'fill="orange"' in svg
        bundle = step_mimebundle(third)
        assert set(bundle) == {"text/plain", "image/svg+xml"}
    assert step_mimebundle(third, include=["text/plain"]).keys() == {"text/plain"}
    # without Graphviz's dot: the text alone, no error
    monkeypatch.setenv("PATH", "")
    assert step_svg(third, loss) is None
    bundle = step_mimebundle(third)
    assert set(bundle) == {"text/plain"}
    assert bundle["text/plain"].startswith(f"── step 3/{third.total}: `")
    assert "gradient arriving at its output" in bundle["text/plain"]


def test_source_lines_typed_in_a_notebook_cell_read_as_the_cell(monkeypatch):
    """IPython compiles cell 3 as '/tmp/ipykernel_…/2429019779.py': say 'cell [3], line 5'."""
    from minitensor.viz import describe_node, describe_source

    assert describe_source("/home/me/model.py", 42) == "model.py:42"
    assert describe_source("<ipython-input-7-1b2c3d4e5f>", 2) == "cell [7], line 2"
    compilerop = pytest.importorskip("IPython.core.compilerop")
    import IPython.core.getipython as getipython

    compiler = compilerop.CachingCompiler()
    code = "w = nn.Parameter(mt.randn(2, 2))\nw.name = 'w'\n\n\ny = (w.T * 2).sum()\n"
    filename = compiler.cache(code, number=3)

    class Shell:
        compile = compiler

    monkeypatch.setattr(getipython, "get_ipython", lambda: Shell())
    assert describe_source(filename, 5) == "cell [3], line 5"
    assert describe_source("/home/me/model.py", 42) == "model.py:42"  # not a cell
    namespace = {"nn": nn, "mt": mt}
    exec(compile(code, filename, "exec"), namespace)
    node = namespace["y"].grad_fn
    assert describe_node(node) == "`sum` (created at cell [3], line 5)"
    assert node.where() == "`sum` (created at cell [3], line 5)"  # errors say it too
    assert (
        describe_node(node.inputs[0].grad_fn.inputs[0].grad_fn)
        == "`wᵀ` (created at cell [3], line 5)"
    )
    g = draw_graph(namespace["y"])
    assert "created at cell [3], line 5" in g.source


def test_a_step_evaluated_in_a_notebook_uses_the_viewers_drawing():
    """The core's BackwardStep asks the hook the viewer registers (the core never imports viz)."""
    from minitensor.autograd import BackwardStep

    assert BackwardStep._display_hook is mt.viz.step_mimebundle
    model, x, loss = make(n=1)
    step = next(loss.backward_steps())
    assert step.root is loss.grad_fn  # a step draws the whole graph, from the loss
    bundle = step._repr_mimebundle_()
    assert bundle["text/plain"].startswith(f"── step 1/{step.total}: `mean`")
    if shutil.which("dot"):
        assert 'fill="orange"' in bundle["image/svg+xml"]


def test_show_values_says_which_values_were_freed_and_how_to_keep_them():
    x = mt.randn(3, 4, requires_grad=True)
    w = mt.randn(4, 2, requires_grad=True)
    y = F.relu(x @ w + 1.0).sum()  # matmul's and add's outputs: no backward saves them
    source = mt.viz.draw_graph(y, show_values=True).source
    assert source.count("(value freed)") == 3  # matmul and add boxes, and the note
    assert "2 op outputs that no backward needs were freed" in source
    assert "keep_intermediates()" in source
    with mt.autograd.keep_intermediates():
        y = F.relu(x @ w + 1.0).sum()
    source = mt.viz.draw_graph(y, show_values=True).source
    assert "freed" not in source and source.count("min ") == 5  # 2 leaves and 3 ops
    assert "freed" not in mt.viz.draw_graph(y).source  # without show_values: no note
