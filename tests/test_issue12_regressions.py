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
