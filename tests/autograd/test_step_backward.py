"""The step-through backward (`loss.backward_steps()`) and demos/step_backward.py."""

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "demos" / "step_backward.py"


def load_demo():
    spec = importlib.util.spec_from_file_location("step_backward_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo = load_demo()


class TwoBlocks(nn.Module):
    """Two attention blocks sharing the input (a fan-out), then a tied head: a graph where
    gradients from several paths must add up before a node may run."""

    def __init__(self, d=4):
        super().__init__()
        self.blocks = nn.ModuleList([demo.TinyAttention(d), demo.TinyAttention(d)])
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        a = self.blocks[0](x)
        b = self.blocks[1](a)
        return self.head(a + b) + F.tanh(a).sum(axis=-1, keepdims=True)


def build(seed=0):
    mt.manual_seed(seed)
    model = TwoBlocks()
    x = mt.randn(2, 3, 4, requires_grad=True)
    x.name = "x"
    return model, x, (model(x) ** 2).mean()


def grads(model, x):
    out = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    out["x"] = x.grad.numpy().copy()
    return out


def test_stepping_through_leaves_the_gradients_backward_leaves():
    model, x, loss = build()
    loss.backward()
    expected = grads(model, x)
    model2, x2, loss2 = build()
    n = 0
    for _ in loss2.backward_steps():
        n += 1
    assert n > 30
    got = grads(model2, x2)
    assert expected.keys() == got.keys()
    for k in expected:
        assert np.array_equal(expected[k], got[k]), k


def test_stepping_gradients_match_the_closed_form():
    """The stepped gradient of a tiny expression equals its closed form."""
    a = mt.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    y = (F.tanh(a) * a).sum()
    list(y.backward_steps())
    t = np.tanh(a.numpy())
    np.testing.assert_allclose(a.grad.numpy(), t + a.numpy() * (1 - t**2), rtol=1e-6)


def test_step_order_is_a_reverse_topological_order():
    model, x, loss = build()
    steps = list(loss.backward_steps())
    position = {id(s.node): i for i, s in enumerate(steps)}
    assert len(position) == len(steps)  # each node once
    assert steps[0].node is loss.grad_fn
    for s in steps:
        for t in s.node.inputs:
            # every node runs before the nodes that feed it: its gradient is complete first
            if t is not None and t.grad_fn is not None:
                assert position[id(s.node)] < position[id(t.grad_fn)]
    assert [s.index for s in steps] == sorted(s.index for s in steps)
    assert all(s.total == len(mt.autograd.topological_order(loss.grad_fn)) for s in steps)


def test_each_step_carries_op_scope_source_and_gradients():
    model, x, loss = build()
    scopes = set()
    for s in loss.backward_steps():
        node = s.node
        assert s.op == node.name and s.scope == node.scope and s.source == node.source
        assert s.grad_output.shape == tuple(node.out_shape)
        assert len(s.grad_inputs) == len(node.inputs)
        for t, g in zip(node.inputs, s.grad_inputs):
            if g is not None:
                assert g.shape == t.shape
        assert isinstance(s.saved, tuple)
        assert id(node) in s.done
        assert os.path.basename(node.source[0]) in ("test_step_backward.py", "step_backward.py")
        scopes.add(node.scope)
    assert {"blocks.0", "blocks.1.norm", "head", ""} <= scopes
    soft = [s for s in build()[2].backward_steps() if s.op == "softmax"]
    assert len(soft) == 2 and soft[0].scope == "blocks.1" and len(soft[0].saved) == 1
    assert "F.softmax" in soft[0].node.source_line()


def test_gradient_arriving_is_the_sum_over_consumers():
    """`a` feeds three places; its node runs once, with the three contributions summed."""
    mt.manual_seed(1)
    x = mt.randn(3, requires_grad=True)
    a = F.exp(x)
    y = (a * 2.0).sum() + (a * a).sum() + F.tanh(a).sum()
    (step,) = [s for s in y.backward_steps() if s.op == "exp"]
    ad = np.exp(x.numpy())
    np.testing.assert_allclose(step.grad_output, 2 + 2 * ad + (1 - np.tanh(ad) ** 2), rtol=1e-5)


def test_partial_walk_gives_partial_gradients():
    model, x, loss = build()
    it = loss.backward_steps()
    for _ in range(3):
        next(it)
    assert x.grad is None  # x's gradient arrives only at the end
    for _ in it:
        pass
    assert x.grad is not None and x.grad.shape == x.shape


# ----------------------------------------------------------------------------- the demo


def run_demo(*args, stdin=None, env=None):
    return subprocess.run(
        [sys.executable, str(DEMO), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(ROOT),
    )


def _n_steps():
    model, x, loss = demo.build()
    return len(list(loss.backward_steps()))


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_demo_all_writes_an_svg_frame_per_step(tmp_path):
    r = run_demo("--all", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    n = _n_steps()
    frames = sorted(os.listdir(tmp_path))
    assert "explore.html" in frames  # the walk as one page, recorded before the demo walks
    frames.remove("explore.html")
    page = (tmp_path / "explore.html").read_text(encoding="utf-8")
    payload = re.search(r"id='mt-data'>(.*?)</script>", page, re.S).group(1)
    assert len(json.loads(payload.replace("<\\/", "</"))["steps"]) == n
    assert "explorer: " in r.stdout
    assert len(frames) == n + 1 and all(f.endswith(".svg") for f in frames)
    assert frames[0] == "frame_000_forward.svg" and frames[-1].startswith(f"frame_{n:03d}_")
    for f in frames:
        assert "</svg>" in (tmp_path / f).read_text()
    # frame k marks step k: its title names it, and one node is orange
    third = (tmp_path / frames[3]).read_text()
    assert f"backward step 3/{n}" in third and 'fill="orange"' in third
    # every box a frame colours 'gradient known' (green) or current (orange) shows a gradient
    for f in frames[1:]:
        boxes = re.split(r'<g id="node\d+" class="node">', (tmp_path / f).read_text())[1:]
        coloured = [b for b in boxes if re.search(r'fill="(palegreen|orange)"', b)]
        assert coloured and all("‖g‖" in b and "none yet" not in b for b in coloured), f
    out = r.stdout
    assert len(re.findall(r"^── step \d+/\d+: `\w+`", out, flags=re.M)) == n
    assert "created at step_backward.py:" in out and "softmax" in out
    assert "sends to input 1 (attn.norm.weight), shape (4,)" in out
    assert "gradients equal those of loss.backward(): yes" in out


def test_demo_without_dot_writes_dot_files(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path / "empty"))
    out_dir = tmp_path / "frames"
    r = run_demo("--all", "--out", str(out_dir), env=env)
    assert r.returncode == 0, r.stderr
    frames = sorted(os.listdir(out_dir))
    assert len(frames) == _n_steps() + 1 and all(f.endswith(".dot") for f in frames)
    assert (out_dir / frames[1]).read_text().startswith("digraph")
    assert "apt-get install graphviz" in r.stderr


def test_demo_steps_on_enter_and_quits_on_q(tmp_path):
    r = run_demo("--no-frames", stdin="\n\nq\n")
    assert r.returncode == 0, r.stderr
    assert "step 2/" in r.stdout and "step 3/" not in r.stdout and "stopped." in r.stdout
    r = run_demo("--no-frames", stdin="")  # end of input: stop, no traceback
    assert r.returncode == 0 and "step 1/" not in r.stdout


def test_demo_help():
    r = run_demo("--help")
    assert r.returncode == 0 and "--all" in r.stdout and "--out" in r.stdout


def test_demo_walk_in_process():
    args = demo.parse_args(["--all", "--no-frames", "--tokens", "2", "--d-model", "3"])
    import io

    buf = io.StringIO()
    taken = demo.walk(args, out=buf)
    model, x, loss = demo.build(2, 3)
    assert taken == len(list(loss.backward_steps()))
    assert "gradients equal those of loss.backward(): yes" in buf.getvalue()


# ----------------------------------------------------------------------------- the Transformer


def transformer_batch(seed=0):
    """The encoder-decoder (2 + 2 layers, dropout on) on a padded batch, and its loss."""
    from transformer.config import TransformerConfig
    from transformer.models import Transformer

    mt.manual_seed(seed)
    cfg = TransformerConfig.small(16, 16, d_model=32, n_heads=4, d_ff=64, dropout=0.1)
    model = Transformer(cfg)
    rng = np.random.default_rng(seed)
    src = rng.integers(4, 16, size=(2, 5))
    src[1, 3:] = cfg.pad_id
    tgt_in = rng.integers(4, 16, size=(2, 4))
    target = rng.integers(4, 16, size=(2, 4))
    logits = model(mt.tensor(src), mt.tensor(tgt_in), src_padding_mask=src == cfg.pad_id)
    return model, F.cross_entropy(logits.transpose(1, 2), mt.tensor(target))


def test_stepping_equals_backward_on_the_encoder_decoder():
    model, loss = transformer_batch()
    loss.backward()
    expected = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    model2, loss2 = transformer_batch()
    assert loss2.item() == loss.item()  # same seed: same dropout masks
    steps = list(loss2.backward_steps())
    got = {name: p.grad.numpy() for name, p in model2.named_parameters()}
    assert expected.keys() == got.keys()
    for name in expected:
        assert np.array_equal(expected[name], got[name]), name
    # a valid reverse topological order over the whole model, each node once
    position = {id(s.node): i for i, s in enumerate(steps)}
    assert len(position) == len(steps) > 200
    for s in steps:
        for t in s.node.inputs:
            if t is not None and t.grad_fn is not None and id(t.grad_fn) in position:
                assert position[id(s.node)] < position[id(t.grad_fn)]
    scopes = {s.scope for s in steps}
    assert {"decoder.layers.1.cross_attn", "encoder.layers.0.self_attn", "generator"} <= scopes


# --------------------------------------------------------------------------- backward_steps
def test_closing_a_step_through_half_way_puts_every_grad_back():
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    w.grad = mt.tensor([10.0, 10.0])
    x = mt.tensor([3.0, 4.0], requires_grad=True)
    loss = (w * 2.0).sum() + (x * x).sum()
    steps = loss.backward_steps()
    for _, _ in zip(range(3), steps):  # some leaves have received their gradient by now
        pass
    steps.close()
    np.testing.assert_array_equal(w.grad.numpy(), [10.0, 10.0])
    assert x.grad is None


def test_closing_a_step_through_after_its_last_step_keeps_the_gradients():
    x = mt.tensor([3.0, 4.0], requires_grad=True)
    loss = (x * x).sum()
    steps = loss.backward_steps()
    for _ in range(2):
        next(steps)
    steps.close()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 8.0])
