"""Weight initialisers (in place, seeded by mt.manual_seed), named as in torch.nn.init."""
import math

import numpy as np

from ..autograd import no_grad
from ..random import generator


def _fans(t):
    """(fan_in, fan_out) of a weight stored (out_features, in_features, *kernel)."""
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


def calculate_gain(nonlinearity, param=None):
    """The factor that keeps activations' variance steady through `nonlinearity` (PyTorch's
    values): linear/sigmoid 1, tanh 5/3, relu √2, leaky_relu √(2/(1 + slope²)), selu 3/4."""
    if nonlinearity in ("linear", "identity", "sigmoid", "conv1d", "conv2d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope * slope))
    if nonlinearity == "selu":
        return 0.75
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")


def _kaiming_std(t, a, nonlinearity, op):
    fan_in, _ = _fans(t)
    try:
        gain = calculate_gain(nonlinearity, a)
    except ValueError:
        raise ValueError(f"{op}: unknown nonlinearity {nonlinearity!r}") from None
    return gain / math.sqrt(fan_in)


def kaiming_uniform_(t, a=0.0, nonlinearity="leaky_relu"):
    """He initialisation, U(±gain·√(3/fan_in)); with a=√5 this is PyTorch's default for Linear
    weights (uniform in ±1/√fan_in)."""
    bound = math.sqrt(3.0) * _kaiming_std(t, a, nonlinearity, "kaiming_uniform_")
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, nonlinearity="leaky_relu"):
    """He initialisation, N(0, (gain/√fan_in)²)."""
    return normal_(t, 0.0, _kaiming_std(t, a, nonlinearity, "kaiming_normal_"))
