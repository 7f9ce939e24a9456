"""Between FUSED_MIN_KEYS and FUSED_ALWAYS_KEYS keys attention's two paths — the fused node and
the softmax node between QKᵀ and ·V — are timed on the running machine, once per layout, and
the faster is kept (minitensor/ops/attention.py, `_fused_is_faster`). The clock is replaced
here wherever the choice is asserted; one test times for real and checks only the numbers."""

import numpy as np
import pytest

import minitensor as mt
from minitensor.ops import attention as A

B, H, D = 2, 2, 8


@pytest.fixture
def timing(monkeypatch):
    """The timing switched on (conftest switches it off), with no layout remembered; returns
    a list the fake clock's calls are counted in, and a setter of what it answers."""
    monkeypatch.setenv("MINITENSOR_ATTENTION_TIMING", "1")
    monkeypatch.setattr(A, "_FUSED_FASTER", {})
    calls, answer = [], {"times": None}

    def fake_median_times(functions, rounds=5, settle=0.0):
        calls.append(len(functions))
        for f in functions:  # both paths run (forward and backward on copies)
            f()
        return answer["times"]

    monkeypatch.setattr(A, "median_times", fake_median_times)
    # the thread count is part of a layout (polite threads answer 1 while the CPUs are busy)
    monkeypatch.setattr(A, "threads", lambda: 2)
    return calls, answer


def _qkv(rng, keys, queries=None, grad=True):
    queries = keys if queries is None else queries
    q = mt.tensor(rng.standard_normal((B, H, queries, D)), dtype=mt.float32, requires_grad=grad)
    k, v = (
        mt.tensor(rng.standard_normal((B, H, keys, D)), dtype=mt.float32, requires_grad=grad)
        for _ in range(2)
    )
    return q, k, v


def _node_names(out):
    return {node.name for node in mt.autograd.topological_order(out.grad_fn)}


def test_the_softmax_node_where_it_was_timed_clearly_faster_and_the_layout_remembered(rng, timing):
    calls, answer = timing
    answer["times"] = (1.0, 0.5)  # (fused, softmax node) seconds
    q, k, v = _qkv(rng, A.FUSED_MIN_KEYS)
    out, _ = A.attention(q, k, v, is_causal=True)
    assert "fused_attention" not in _node_names(out) and "softmax" in _node_names(out)
    assert calls == [2]
    assert q.grad is None and k.grad is None  # the timing ran on copies, not on these
    A.attention(q, k, v, is_causal=True)
    assert calls == [2]  # the layout is remembered: timed once
    A.attention(q, k, v)  # another layout (not causal): timed again
    assert calls == [2, 2]


def test_the_fused_node_on_a_tie_and_while_timings_would_mislead(rng, timing, monkeypatch):
    calls, answer = timing
    answer["times"] = (1.0, 0.97)  # within the edge: the fused node keeps the layout
    q, k, v = _qkv(rng, A.FUSED_MIN_KEYS + 8)
    assert "fused_attention" in _node_names(A.attention(q, k, v)[0])
    answer["times"] = None  # a helper compiling: the fused node, and nothing remembered
    q, k, v = _qkv(rng, A.FUSED_MIN_KEYS + 16)
    assert "fused_attention" in _node_names(A.attention(q, k, v)[0])
    assert len(A._FUSED_FASTER) == 1


def test_nothing_is_timed_without_a_backward_under_determinism_or_from_always_keys(rng, timing):
    calls, answer = timing
    answer["times"] = (1.0, 0.5)
    q, k, v = _qkv(rng, A.FUSED_MIN_KEYS)
    with mt.no_grad():
        A.attention(q, k, v)
    A.attention(*_qkv(rng, A.FUSED_MIN_KEYS, grad=False))
    mt.use_deterministic_algorithms(True)
    try:
        out, _ = A.attention(q, k, v)
    finally:
        mt.use_deterministic_algorithms(False)
    assert "fused_attention" in _node_names(out)
    q, k, v = _qkv(rng, A.FUSED_ALWAYS_KEYS, queries=3)
    assert "fused_attention" in _node_names(A.attention(q, k, v)[0])
    assert calls == []


def test_either_path_gives_the_same_output_and_gradients(rng, monkeypatch):
    """Timed for real: whichever path the machine picks computes the same attention."""
    monkeypatch.setenv("MINITENSOR_ATTENTION_TIMING", "1")
    monkeypatch.setattr(A, "_FUSED_FASTER", {})
    q, k, v = _qkv(rng, A.FUSED_MIN_KEYS + 4, queries=A.FUSED_MIN_KEYS + 6)
    mask = rng.random((B, 1, 1, A.FUSED_MIN_KEYS + 4)) < 0.2
    out, _ = A.attention(q, k, v, mask, is_causal=True, causal_offset=2)
    assert len(A._FUSED_FASTER) == 1
    out.sum().backward()
    grads = [t.grad.numpy().copy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    monkeypatch.setenv("MINITENSOR_ATTENTION_TIMING", "0")  # the fused node, as a reference
    ref, _ = A.attention(q, k, v, mask, is_causal=True, causal_offset=2)
    assert "fused_attention" in _node_names(ref)
    ref.sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    for got, t in zip(grads, (q, k, v)):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-4, atol=1e-5)
