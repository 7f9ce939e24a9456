"""Anomaly mode: the first NaN/Inf, in forward or in backward, names the op, the module scope
and the user's line."""

import inspect
import re
import warnings

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn


def _line_of(fn, text):
    """The line number in this file of the line of `fn` that contains `text`."""
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


class LogBlock(nn.Module):
    """A module whose forward takes the log of its input (NaN for negative entries)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x):
        h = self.proj(x)
        return F.log(h)  # planted: h has negative entries


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = LogBlock()

    def forward(self, x):
        return self.block(x).sum()


def test_forward_nan_names_op_scope_and_line():
    mt.manual_seed(0)
    model = Model()
    x = mt.randn(4, 3)
    with np.errstate(invalid="ignore"):
        with pytest.raises(FloatingPointError) as err, mt.autograd.detect_anomaly():
            model(x)
    msg = str(err.value)
    line = _line_of(LogBlock.forward, "F.log(h)")
    assert "`log` in block produced NaN" in msg
    assert f"test_anomaly.py:{line}" in msg and "return F.log(h)" in msg
    assert "shape (4, 3)" in msg


def test_forward_nan_at_top_level_and_inf():
    a = mt.tensor([1.0, -1.0], requires_grad=True)
    with np.errstate(invalid="ignore"), pytest.raises(FloatingPointError) as err:
        with mt.detect_anomaly():
            F.log(a)  # the planted NaN
    line = _line_of(test_forward_nan_at_top_level_and_inf, "# the planted NaN")
    assert re.search(rf"`log` produced NaN .*test_anomaly.py:{line}", str(err.value))
    with np.errstate(over="ignore"), pytest.raises(FloatingPointError, match="`exp` produced Inf"):
        with mt.detect_anomaly():
            F.exp(mt.tensor([1000.0]))  # no grad needed: still checked


def test_without_anomaly_mode_nan_passes_silently():
    a = mt.tensor([1.0, -1.0], requires_grad=True)
    with np.errstate(invalid="ignore"):
        y = F.log(a).sum()
    assert np.isnan(y.item())
    assert not mt.autograd.is_anomaly_enabled()


class InfBackward(mt.Function):
    """Identity forward; a broken backward that returns inf."""

    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return np.full_like(grad, np.inf)


def test_backward_inf_names_the_node_and_its_line():
    mt.manual_seed(0)
    lin = nn.Linear(3, 3)
    x = mt.randn(2, 3, requires_grad=True)
    with mt.scope("broken"):
        h = InfBackward.apply(lin(x))  # the planted Inf, in backward
    loss = (h * 2.0).sum()
    with pytest.raises(FloatingPointError) as err, mt.autograd.detect_anomaly():
        loss.backward()
    msg = str(err.value)
    line = _line_of(test_backward_inf_names_the_node_and_its_line, "InfBackward.apply(lin(x))")
    assert "the backward of `infbackward` in broken" in msg
    assert f"test_anomaly.py:{line}" in msg and "h = InfBackward.apply(lin(x))" in msg
    assert "Inf in the gradient for input 0 (shape (2, 3))" in msg
    # nothing downstream of the broken node received the bad gradient
    assert x.grad is None and lin.weight.grad is None


def test_backward_inf_is_caught_while_stepping():
    x = mt.randn(3, requires_grad=True)
    loss = (InfBackward.apply(x) * 3.0).sum()
    ops = []
    with mt.autograd.detect_anomaly():
        with pytest.raises(FloatingPointError, match="infbackward"):
            for step in loss.backward_steps():
                ops.append(step.op)
    assert ops == ["sum", "mul"]  # the broken node never completed a step


def test_without_anomaly_mode_backward_inf_reaches_the_leaves():
    x = mt.randn(3, requires_grad=True)
    (InfBackward.apply(x) * 3.0).sum().backward()
    assert np.isinf(x.grad.numpy()).all()


def test_anomaly_mode_is_restored_after_an_error():
    assert not mt.autograd.is_anomaly_enabled()
    with pytest.raises(RuntimeError, match="boom"):
        with mt.autograd.detect_anomaly():
            assert mt.autograd.is_anomaly_enabled()
            raise RuntimeError("boom")
    assert not mt.autograd.is_anomaly_enabled()
    with mt.autograd.detect_anomaly():
        with mt.autograd.detect_anomaly():
            pass
        assert mt.autograd.is_anomaly_enabled()  # nested blocks restore the outer state


def test_healthy_model_runs_unchanged_in_anomaly_mode():
    mt.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = mt.randn(5, 4)
    model(x).sum().backward()
    expected = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    with mt.autograd.detect_anomaly():
        model(x).sum().backward()
    for e, p in zip(expected, model.parameters()):
        assert np.array_equal(e, p.grad.numpy())


def test_anomaly_mode_reports_fully_masked_softmax_rows():
    scores = mt.randn(2, 3, 4, requires_grad=True)
    mask = np.zeros((2, 3, 4), dtype=bool)
    mask[1, 2, :] = True  # one query with nothing to attend to
    with mt.autograd.detect_anomaly():
        with mt.scope("attn"):
            with pytest.warns(mt.autograd.AnomalyWarning, match=r"softmax.*attn.*1 of 6 rows"):
                w = F.softmax(scores, mask=mask)
    assert np.all(w.numpy()[1, 2] == 0)  # zero weights, not NaN
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no report without anomaly mode,
        F.softmax(scores, mask=mask)  # nor for rows that saw a key
        with mt.autograd.detect_anomaly():
            F.softmax(scores)
