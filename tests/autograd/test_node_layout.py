"""A graph node keeps its attributes in the table of names its class's instances share
(minitensor/_layout.py), whatever the program ran before its first recorded op: else every
node gets a dict of its own, and recording and backward cost more (benchmarks/per_op.py)."""

import subprocess
import sys
import textwrap

import pytest

# (CPython 3.11 and 3.12 keep an instance's values apart from a dict; gc.get_referents shows a
# dict among an instance's referents once it has one of its own)
pytestmark = pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 11), (3, 12)),
    reason="a CPython 3.11/3.12 layout detail",
)

PROGRAM = textwrap.dedent(
    """
    import gc
    import minitensor as mt

    def has_own_dict(node):
        return any(type(r) is dict for r in gc.get_referents(node))

    data = mt.randn(8, 8)
    for _ in range(200):  # unrecorded ops first: each makes a node that is never recorded
        data = (data * 0.5).sum(0, keepdim=True) + data
    w = mt.randn(8, 8, requires_grad=True)
    h = (data @ w).relu()
    loss = (h * h).mean()
    nodes = [loss.grad_fn, h.grad_fn, h.grad_fn.inputs[0].grad_fn]
    before = [has_own_dict(n) for n in nodes]
    loss.backward()
    after = [has_own_dict(n) for n in nodes]
    print(before, after)
    """
)


def test_nodes_recorded_after_many_unrecorded_ops_keep_the_shared_layout():
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[False, False, False] [False, False, False]"
