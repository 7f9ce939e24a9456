"""Weight initialisers (in place, seeded by mt.manual_seed), named as in torch.nn.init."""
import math

import numpy as np

from ..autograd import no_grad
from ..random import generator


def _fans(t):
    if t.ndim < 2:
        raise ValueError(f"fan in/out need a tensor with at least 2 axes, got shape {t.shape}")
    receptive = int(np.prod(t.shape[2:])) if t.ndim > 2 else 1
    # weights are stored (out_features, in_features), as in PyTorch
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fill(t, values):
    with no_grad():
        t.copy_(np.asarray(values, dtype=t.dtype))
    return t


def uniform_(t, a=0.0, b=1.0):
    return _fill(t, generator().uniform(a, b, t.shape))


def normal_(t, mean=0.0, std=1.0):
    return _fill(t, generator().normal(mean, std, t.shape))


def zeros_(t):
    return _fill(t, np.zeros(t.shape))


def ones_(t):
    return _fill(t, np.ones(t.shape))


def constant_(t, value):
    return _fill(t, np.full(t.shape, value))


def xavier_uniform_(t, gain=1.0):
    fan_in, fan_out = _fans(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t, gain=1.0):
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform_(t, a=0.0, nonlinearity="leaky_relu"):
    """He initialisation; with a=√5 this is PyTorch's default for Linear weights
    (uniform in ±1/√fan_in)."""
    fan_in, _ = _fans(t)
    if nonlinearity == "leaky_relu":
        gain = math.sqrt(2.0 / (1 + a * a))
    elif nonlinearity == "relu":
        gain = math.sqrt(2.0)
    elif nonlinearity == "linear":
        gain = 1.0
    else:
        raise ValueError(f"kaiming_uniform_: unknown nonlinearity {nonlinearity!r}")
    bound = gain * math.sqrt(3.0 / fan_in)
    return uniform_(t, -bound, bound)
