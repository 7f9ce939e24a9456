"""Anomaly mode (`mt.autograd.detect_anomaly()`): every forward output and every gradient is
checked for NaN/Inf, and the first one found names the op, its module scope and the user's
line that created it. The mode is per thread (see `state`)."""

from __future__ import annotations

import linecache
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from .scope import current_scope
from .source import describe_inputs, user_frame
from .state import anomaly_on, state

_counting = threading.Lock()  # two threads opening blocks at once must not lose a count


@contextmanager
def detect_anomaly() -> Iterator[None]:
    """Check every forward output and every gradient for NaN/Inf.

    The first one found raises FloatingPointError naming the op, its module scope and the
    user's source line that created it (forward), or the node whose backward produced it.
    """
    prev = state.anomaly
    state.anomaly = True
    with _counting:
        anomaly_on[0] += 1
    try:
        yield
    finally:
        with _counting:
            anomaly_on[0] -= 1
        state.anomaly = prev


def is_anomaly_enabled():
    return state.anomaly


class AnomalyWarning(UserWarning):
    """Something anomaly mode reports without stopping (e.g. fully masked attention rows)."""


def _where_created(fn, result):
    """('`op` in scope', ' at file:line: <code>', (file, line, function) or None) for anomaly
    messages."""
    src = result.grad_fn.source if result.grad_fn is not None else user_frame()
    scope = current_scope()
    where = f"`{fn.op_name()}`" + (f" in {scope}" if scope else "")
    line = ""
    if src:
        line = f" at {src[0]}:{src[1]}: {linecache.getline(src[0], src[1]).strip()}"
    return where, line, src


def check_forward(fn, arrays, result):
    """Raise on NaN/Inf in an op's output; warn about what the op's `anomaly_check` names."""
    out = result.numpy()
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        bad = "NaN" if np.isnan(out).any() else "Inf"
        where, line, _ = _where_created(fn, result)
        raise FloatingPointError(
            f"anomaly: {where} produced {bad} in its output of shape {out.shape}{line} "
            f"(inputs: {describe_inputs(arrays)})"
        )
    # An op may name a further thing worth reporting about its output (Softmax: rows whose
    # every key was masked). It is reported as a warning: such rows can be legitimate.
    check = getattr(fn, "anomaly_check", None)
    if check is not None:
        message = check(out)
        if message:
            where, _, src = _where_created(fn, result)
            file, lineno = (src[0], src[1]) if src else ("<unknown>", 0)
            warnings.warn_explicit(f"anomaly: {where}: {message}", AnomalyWarning, file, lineno)


def check_gradient(node, i, g):
    """Raise on NaN/Inf in `g`, the gradient a node's backward returned for its input i (the
    backward engine checks each gradient before sending it on)."""
    if g.dtype.kind == "f" and not np.isfinite(g).all():
        bad = "NaN" if np.isnan(g).any() else "Inf"
        line = node.source_line()
        raise FloatingPointError(
            f"anomaly: the backward of {node.where()} produced {bad} in the gradient for "
            f"input {i} (shape {g.shape})" + (f"; the node was created by: {line}" if line else "")
        )
