"""minitensor/nn/init.py: init functions are seeded and scaled."""

import math

import numpy as np
import pytest

import minitensor as mt
from minitensor import nn

# ----------------------------------------------------------------------------- init


def test_init_functions_seeded_and_scaled():
    def draw():
        mt.manual_seed(11)
        w = nn.Parameter(np.zeros((200, 300), np.float32))
        nn.init.xavier_uniform_(w)
        return w.numpy().copy()

    a, b = draw(), draw()
    assert np.array_equal(a, b)
    assert abs(a.max() - math.sqrt(6 / 500)) < 1e-3
    w = nn.Parameter(np.zeros((400, 500), np.float32))
    nn.init.xavier_normal_(w)
    assert abs(w.numpy().std() - math.sqrt(2 / 900)) < 2e-3
    nn.init.kaiming_uniform_(w, nonlinearity="relu")
    assert abs(w.numpy().max() - math.sqrt(2) * math.sqrt(3 / 500)) < 2e-3
    nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.numpy().std() - math.sqrt(2 / 500)) < 2e-3
    nn.init.normal_(w, 1.0, 0.5)
    assert abs(w.numpy().mean() - 1.0) < 0.01 and abs(w.numpy().std() - 0.5) < 0.01
    nn.init.uniform_(w, -2, 3)
    assert w.numpy().min() >= -2 and w.numpy().max() < 3 and w.numpy().min() < -1.9
    nn.init.ones_(w)
    assert np.all(w.numpy() == 1)
    nn.init.zeros_(w)
    assert np.all(w.numpy() == 0)
    nn.init.constant_(w, 0.25)
    assert np.all(w.numpy() == 0.25) and w.requires_grad
    assert nn.init.calculate_gain("tanh") == 5 / 3
    with pytest.raises(ValueError, match="at least 2 axes"):
        nn.init.xavier_uniform_(nn.Parameter(np.zeros(3)))
