"""minitensor/nn/activation.py: activation modules agree with their functions."""

import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn


def test_activations_match_functional():
    x = mt.randn(3, 5)
    for module, fn in [
        (nn.ReLU(), F.relu),
        (nn.Tanh(), F.tanh),
        (nn.SiLU(), F.silu),
        (nn.GELU(), F.gelu),
        (nn.Sigmoid(), F.sigmoid),
        (nn.Softmax(dim=-1), F.softmax),
        (nn.Identity(), lambda t: t),
    ]:
        np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy())
