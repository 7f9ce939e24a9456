"""mt.viz.explore without a browser: the page's data (levels, items, steps), that exploring leaves
every .grad as it was, the page is self-contained, and a clear error without Graphviz."""

import json
import re
import shutil

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is missing")


class Block(nn.Module):
    """Single-head self-attention and a head: a small graph with modules two deep."""

    def __init__(self, d=4):
        super().__init__()
        self.attn = nn.ModuleDict({"q": nn.Linear(d, d), "k": nn.Linear(d, d)})
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        q, k = self.attn["q"](x), self.attn["k"](x)
        weights = F.softmax(q @ k.transpose(-1, -2), dim=-1)  # (B, L, L)
        return self.head(weights @ x)


def make(seed=0):
    mt.manual_seed(seed)
    model = Block()
    x = mt.randn(2, 3, 4, requires_grad=True)
    x.name = "x"
    with mt.autograd.keep_intermediates():
        loss = (model(x) ** 2).mean()
    return model, x, loss


def page_data(ex):
    """The JSON the page reads, parsed back from its HTML."""
    m = re.search(r"<script type='application/json' id='mt-data'>(.*?)</script>", ex.html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


@needs_dot
def test_steps_are_the_engines_walk_and_grads_are_left_alone():
    model, x, loss = make()
    ex = mt.viz.explore(loss, model=model)
    assert x.grad is None and all(p.grad is None for p in model.parameters())
    assert loss.grad_fn.grad is None  # nor a node's
    data = page_data(ex)
    assert data == json.loads(json.dumps(ex.data))
    # the recorded steps are the walk backward() runs, in its order, with its gradients
    model2, _, again = make()
    steps = list(again.backward_steps())
    assert len(data["steps"]) == len(steps)
    for rec, step in zip(data["steps"], steps):
        item = data["items"][rec["item"]]
        assert item.get("op") == step.node.name and item["scope"] == step.node.scope
        g = step.grad_output.astype(np.float64)
        assert rec["grad_out"]["norm"] == pytest.approx(np.linalg.norm(g), rel=1e-3)
        sent = [gi for t, gi in zip(step.node.inputs, step.grad_inputs) if t is not None]
        assert [s["norm"] is None for s in rec["sends"]] == [gi is None for gi in sent]
    # the graph is still there: backward works afterwards and gives backward's gradients
    loss.backward()
    walked = dict(model2.named_parameters())
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.grad.numpy(), walked[name].grad.numpy(), err_msg=name)


@needs_dot
def test_explore_after_backward_keeps_the_accumulated_grads():
    model, x, loss = make()
    with mt.autograd.keep_intermediates():
        loss2 = (model(x) ** 2).mean()
    loss2.backward(retain_graph=True)
    before = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    ex = mt.viz.explore(loss2, model=model)
    assert ex.data["steps"] and not ex.data["note"]
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.grad.numpy(), before[n])
    # a graph a plain backward freed cannot be replayed: the page says so, and shows .grad
    loss.backward()
    ex = mt.viz.explore(loss, model=model)
    assert ex.data["steps"] == [] and "before" in ex.data["note"]
    (w,) = [d for d in ex.data["items"] if d["title"] == "head.bias"]
    assert w["grad_norm"] == pytest.approx(
        float(np.linalg.norm(model.head.bias.grad.numpy())), 1e-3
    )


@needs_dot
def test_levels_boxes_and_items():
    model, x, loss = make()
    data = mt.viz.explore(loss, model=model).data
    depths = [level["depth"] for level in data["levels"]]
    assert depths == [0, 1, None]  # modules are at most two deep here, then every op
    for level in data["levels"]:
        assert level["svg"].startswith("<svg") and level["svg"].count('class="node"') == len(
            level["boxes"]
        )
        members = sorted(i for b in level["boxes"] for i in b["items"])
        assert members == list(range(len(data["items"])))  # every item in exactly one box
    top = data["levels"][0]
    assert {b["path"] for b in top["boxes"] if b["kind"] == "module"} == {"attn", "head"}
    assert "attn" in top["clusters"].values() or not top["clusters"]
    assert set(data["levels"][1]["clusters"].values()) == {"attn", "head"}
    (soft,) = [d for d in data["items"] if d.get("op") == "softmax"]
    assert soft["scope"] == "" and soft["out"] == [2, 3, 3]
    assert "F.softmax" in soft["line"] and "test_explore.py" in soft["where"]
    assert [i["shape"] for i in soft["inputs"]] == [[2, 3, 3]]
    assert soft["stats"]["min"] >= 0 and soft["stats"]["max"] <= 1
    (xd,) = [d for d in data["items"] if d["title"] == "x"]
    users = [
        i
        for i, rec in enumerate(data["steps"])
        if "x" in [t["name"] for t in data["items"][rec["item"]]["inputs"]]
    ]
    assert len(users) == 3 and xd["step"] == users[-1]  # known once its last user ran


@needs_dot
def test_attention_softmax_weights_make_a_heatmap():
    model, x, loss = make()
    data = mt.viz.explore(loss, model=model).data
    (soft,) = [d for d in data["items"] if d.get("heat")]
    heat = soft["heat"]
    with mt.autograd.keep_intermediates():
        q, k = model.attn["q"](x), model.attn["k"](x)
        weights = F.softmax(q @ k.transpose(-1, -2), dim=-1).numpy()[0]
    assert (heat["rows"], heat["cols"]) == weights.shape
    np.testing.assert_allclose(np.reshape(heat["values"], weights.shape), weights, atol=1e-3)


@needs_dot
def test_the_page_is_self_contained_and_shows_in_a_notebook(tmp_path):
    model, x, loss = make()
    ex = mt.viz.explore(loss, model=model)
    page = ex.html
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from the network
    assert "<script src" not in page and "<link" not in page
    path = ex.save(tmp_path / "graph.html")
    assert path.read_text(encoding="utf-8") == page
    frame = ex._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in frame
    assert "&lt;svg" in frame and "<svg" not in frame  # the page, escaped into the attribute
    assert "backward steps" in repr(ex)


def test_without_dot_explore_says_how_to_install_it(monkeypatch):
    model, x, loss = make()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(mt.viz.GraphvizNotFound, match="apt-get install graphviz"):
        mt.viz.explore(loss, model=model)
    with pytest.raises(TypeError, match="explore"):
        mt.viz.explore(x.detach())
