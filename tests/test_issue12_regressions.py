"""Issue 12's cases that regressed after they were fixed: each keeps a test here."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F


@pytest.mark.parametrize("mask", [np.array([[0, 0, 1]]), mt.tensor([[0, 0, 1]])])
def test_scaled_dot_product_attention_refuses_integer_masks(mask):
    # issue 12 #3: one rule everywhere; an integer mask would be added to the scores
    q = mt.randn(1, 1, 3, 4)
    with pytest.raises(TypeError, match=r"scaled_dot_product_attention.*int64.*mask != 0"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_weighted_cross_entropy_ignores_a_nan_row(label_smoothing):
    # issue 12 #1 (the loss is finite wherever torch's is): with weight=, an ignored target's
    # row of NaN logits was multiplied by a 0 weight (NaN·0 = NaN); it is selected out, as torch
    x = mt.tensor([[np.nan, 1.0, 2.0], [0.5, 1.0, 2.0]])
    loss = F.cross_entropy(
        x,
        mt.tensor([-100, 1]),
        weight=mt.tensor([1.0, 2.0, 0.5]),
        label_smoothing=label_smoothing,
        reduction="sum",
    )
    # torch 2.13: 2.9287376 (ε = 0) and 2.806707 (ε = 0.1)
    assert loss.item() == pytest.approx([2.9287376, 2.806707][label_smoothing > 0], rel=1e-6)
