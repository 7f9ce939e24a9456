"""minitensor/nn/utils.py: clip_grad_norm_."""

import math

import numpy as np
import pytest

import minitensor as mt
from minitensor import nn

# ----------------------------------------------------------------------------- utils


@pytest.mark.torch
def test_clip_grad_norm_matches_torch_and_returns_total():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (4,), (2, 2, 2)]
    grads = [rng.standard_normal(s) * 3 for s in shapes]
    ours = [nn.Parameter(np.zeros(s)) for s in shapes]
    theirs = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    for p, q, g in zip(ours, theirs, grads):
        p.grad = mt.tensor(g, dtype=mt.float64)
        q.grad = torch.from_numpy(g.copy())
    total = nn.utils.clip_grad_norm_(ours, 1.5)
    ref = torch.nn.utils.clip_grad_norm_(theirs, 1.5)
    assert abs(total.item() - ref.item()) < 1e-10
    assert abs(float(total) - math.sqrt(sum((g**2).sum() for g in grads))) < 1e-10
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10)
    after = math.sqrt(sum((p.grad.numpy() ** 2).sum() for p in ours))
    assert abs(after - 1.5) < 1e-5
    # below the threshold nothing changes
    before = [p.grad.numpy().copy() for p in ours]
    nn.utils.clip_grad_norm_(ours, 100.0)
    for p, b in zip(ours, before):
        np.testing.assert_array_equal(p.grad.numpy(), b)
    inf_total = nn.utils.clip_grad_norm_(ours, 100.0, norm_type=math.inf)
    assert inf_total == max(np.abs(p.grad.numpy()).max() for p in ours)


def test_clip_grad_norm_does_not_depend_on_blas_threads():
    """The norm is numpy's own sum of squares, not BLAS's dot (which shares a long vector out
    among its threads, so that its last bits depend on their count): the same bits on one
    BLAS thread as on BLAS's own count, and the exact sum to rounding."""
    from minitensor.kernels.fast_matmul.blas import blas_threads_at_most

    g = np.random.default_rng(3).standard_normal(200_000)  # float64: the total keeps every bit
    p = nn.Parameter(np.zeros(g.shape))

    def total():
        p.grad = mt.tensor(g)
        return nn.utils.clip_grad_norm_([p], 1e9).item()

    on_blas_threads = total()
    with blas_threads_at_most(1):
        on_one_thread = total()
    assert on_blas_threads == on_one_thread
    exact = math.sqrt(math.fsum(x * x for x in g.tolist()))
    assert abs(on_one_thread - exact) <= 1e-12 * exact


def test_clip_grad_norm_adds_float32_gradients_up_in_float64():
    """float32 gradients of very different sizes, many entries each: the joint norm is the
    exact one to float64 rounding (a float32 sum would be off in the seventh digit; the
    function returns it rounded to the gradients' dtype, as torch, so the sum is read
    where it is made), whichever order the parameters come in."""
    rng = np.random.default_rng(5)
    grads = [(rng.standard_normal(n) * scale).astype(np.float32)
             for n, scale in ((50_000, 1e-3), (7, 1e3), (120_000, 1.0), (1, 0.0))]  # fmt: skip
    exact = math.sqrt(math.fsum(float(x) ** 2 for g in grads for x in g.tolist()))
    for order in (grads, grads[::-1]):
        assert abs(nn.utils._two_norm(order) - exact) <= 1e-12 * exact
    params = [nn.Parameter(np.zeros(g.shape, np.float32)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = mt.tensor(g)
    assert nn.utils.clip_grad_norm_(params, 1e9).item() == np.float32(exact)


def test_clip_grad_norm_nonfinite():
    p = nn.Parameter(np.zeros(2))
    p.grad = mt.tensor([np.nan, 1.0])
    with pytest.raises(RuntimeError, match="NaN or Inf"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert nn.utils.clip_grad_norm_([nn.Parameter(np.zeros(2))], 1.0) == 0.0
