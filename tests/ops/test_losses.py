"""Losses of minitensor/ops/nn.py off the ordinary path (their everyday values and gradients
against torch are in tests/interop/test_pytorch_surface.py)."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_weighted_cross_entropy_ignores_a_nan_row(label_smoothing):
    # the loss is finite wherever torch's is: with weight=, an ignored target's
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
