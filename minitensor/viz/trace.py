"""`trace`: print every op as it runs — the classic debugging advice made into a tool.

"Print every matrix's shape and value range, step by step": that is how one sees unscaled QKᵀ
range over tens or hundreds and understands why attention divides by √d_k ("Attention Is All
You Need", §3.2.1). Inside ``with mt.viz.trace():`` each op prints one line::

    encoder.layers.0.self_attn  softmax  (2, 4, 4) -> (2, 4, 4)   min 0.01 max 0.999 mean 0.25
                                                       ⚠ saturated: 3/8 rows max > 0.99

Filter by module scope (``trace(scope="decoder.layers.0")``) to keep it short. The records are
kept too (``with trace() as t: …; t.records``), for notebooks and tests. Built on
`mt.autograd.register_forward_hook`, so it sees exactly the ops the graph records.
"""

import sys

import numpy as np

from .. import autograd
from ..scope import current_scope
from ._labels import op_label

SATURATION = 0.99  # a softmax row whose largest weight exceeds this is all but one-hot
# (rows with one unmasked key are not counted: they are one-hot by design)


class TraceRecord:
    """One op as it ran: where, what, shapes, value range and warnings."""

    def __init__(self, scope, op, input_shapes, output_shape, dtype, stats, marks, source):
        self.scope, self.op = scope, op  # op: its name, or 'weightᵀ' for a parameter's transpose
        self.input_shapes, self.output_shape, self.dtype = input_shapes, output_shape, dtype
        self.stats = stats  # (min, max, mean) over finite values, or None
        self.marks = marks  # list of warnings: 'NaN', 'Inf', 'saturated: …', …
        self.source = source  # (filename, lineno, function) of the user's line, or None

    def line(self):
        scope = self.scope or "(top)"
        ins = ", ".join(_shape_str(s) for s in self.input_shapes)
        text = f"{scope:<32} {self.op:<13} {ins} -> {_shape_str(self.output_shape)}"
        if self.dtype != "float32":
            text += f" {self.dtype}"
        if self.stats is not None:
            lo, hi, mean = self.stats
            text += f"   min {lo:.4g} max {hi:.4g} mean {mean:.4g}"
        for mark in self.marks:
            text += f"  ⚠ {mark}"
        return text

    def __repr__(self):
        return f"<TraceRecord {self.line()}>"


def _shape_str(shape):
    if isinstance(shape, tuple):
        return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
    return str(shape)  # a scalar argument, shown by value


def _input_shapes(arrays):
    shapes = []
    for a in arrays:
        if isinstance(a, np.ndarray) and a.ndim > 0:
            shapes.append(tuple(a.shape))
        elif isinstance(a, (np.ndarray, np.generic, int, float)):
            shapes.append(f"{float(np.asarray(a)):.4g}")
    return shapes


def _stats(out):
    if out.size == 0 or out.dtype.kind not in "fiu":
        return None
    finite = out[np.isfinite(out)] if out.dtype.kind == "f" else out
    if finite.size == 0:
        return None
    return float(finite.min()), float(finite.max()), float(finite.mean(dtype=np.float64))


def _marks(op, out, saturation):
    marks = []
    if out.dtype.kind == "f":
        n_nan, n_inf = int(np.isnan(out).sum()), int(np.isinf(out).sum())
        if n_nan:
            marks.append(f"NaN ×{n_nan}")
        # a mask's −∞ (attention's blocked scores) is by design, not an alarm; +∞ still is
        blocking = op == "masked_fill" and not np.isposinf(out).any()
        if n_inf and not blocking:
            marks.append(f"Inf ×{n_inf}")
    if op == "softmax" and out.ndim >= 1 and out.size:
        rows = out.reshape(-1, out.shape[-1])
        peak = rows.max(axis=1)
        # a row with a single allowed key (the first query under a causal mask) is one-hot by
        # construction, not saturated: count only rows that had a choice to make
        choices = (rows > 0).sum(axis=1)
        saturated = int(((peak > saturation) & (choices > 1)).sum())
        if saturated:
            marks.append(f"saturated: {saturated}/{len(rows)} rows max > {saturation:g}")
        blocked = int((rows.sum(axis=1) == 0).sum())
        if blocked:
            marks.append(f"{blocked}/{len(rows)} rows fully masked (all zero)")
    return marks


class trace:
    """Context manager: print one line per op run inside it (and keep them in ``.records``).

    scope: only ops whose module scope is this path or inside it ("decoder.layers.0").
    file: where to print (default: sys.stdout at the time the block starts); quiet=True keeps
    the records without printing. saturation: the softmax-row threshold for the ⚠ mark.
    """

    def __init__(self, scope=None, file=None, quiet=False, saturation=SATURATION):
        self.scope, self.file, self.quiet, self.saturation = scope, file, quiet, saturation
        self.records = []
        self._handle = None

    def _wanted(self, scope):
        if not self.scope:
            return True
        return scope == self.scope or scope.startswith(self.scope + ".")

    def _hook(self, fn, ctx, arrays, result, recorded):
        scope = ctx.scope if recorded else current_scope()
        if not self._wanted(scope):
            return
        out = result.numpy()
        op = fn.op_name()
        # a Linear's weight.T reads 'weightᵀ' (the scope column names the layer); under no_grad
        # the node is not recorded, its inputs are unknown and it stays 'permute'
        label = op_label(op, ctx.inputs, full=False) if recorded else op
        rec = TraceRecord(
            scope,
            label,
            _input_shapes(arrays),
            tuple(out.shape),
            out.dtype.name,
            _stats(out),
            _marks(op, out, self.saturation),
            ctx.source if recorded else None,
        )
        self.records.append(rec)
        if not self.quiet:
            print(rec.line(), file=self.file or sys.stdout)

    def __enter__(self):
        self._handle = autograd.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        return False
