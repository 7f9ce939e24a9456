"""Weight initialisers (in place, seeded by mt.manual_seed), named as in torch.nn.init, with
torch's arguments, gains and fan conventions. Each returns the tensor it filled.

The `generator=` argument of torch's initialisers is accepted only as None: every draw comes
from the one generator that mt.manual_seed seeds.
"""

import math

import numpy as np

from ..autograd import no_grad
from ..random import generator as _rng


def _fans(t):
    """(fan_in, fan_out) of a weight stored (out_features, in_features, *kernel)."""
    if t.ndim < 2:
        raise ValueError(f"fan in/out need a tensor with at least 2 axes, got shape {t.shape}")
    receptive = int(np.prod(t.shape[2:])) if t.ndim > 2 else 1
    # weights are stored (out_features, in_features), as in PyTorch
    return t.shape[1] * receptive, t.shape[0] * receptive


def _calculate_fan_in_and_fan_out(tensor):
    """(fan_in, fan_out), under the name torch's own layers (and some tutorials) call."""
    return _fans(tensor)


def _no_generator(generator, op):
    if generator is not None:
        raise NotImplementedError(
            f"init.{op}: generator= is not supported; seed with mt.manual_seed"
        )


def _fill(t, values):
    with no_grad():
        t.copy_(np.asarray(values, dtype=t.dtype))
    return t


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """U(a, b)."""
    _no_generator(generator, "uniform_")
    return _fill(tensor, _rng().uniform(a, b, tensor.shape))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """N(mean, std²)."""
    _no_generator(generator, "normal_")
    return _fill(tensor, _rng().normal(mean, std, tensor.shape))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std²) restricted to [a, b] (absolute bounds, as torch): values outside are
    drawn again until every one lies inside."""
    _no_generator(generator, "trunc_normal_")
    if not a < b:
        raise ValueError(f"init.trunc_normal_: need a < b, got a={a}, b={b}")
    values = _rng().normal(mean, std, tensor.shape)
    outside = (values < a) | (values > b)
    while outside.any():
        values[outside] = _rng().normal(mean, std, int(outside.sum()))
        outside = (values < a) | (values > b)
    return _fill(tensor, values)


def zeros_(tensor):
    return _fill(tensor, np.zeros(tensor.shape))


def ones_(tensor):
    return _fill(tensor, np.ones(tensor.shape))


def constant_(tensor, val):
    return _fill(tensor, np.full(tensor.shape, val))


def eye_(tensor):
    """The identity matrix (a 2-D tensor; rectangular ones get ones on the diagonal)."""
    if tensor.ndim != 2:
        raise ValueError(f"init.eye_: only 2-D tensors, got shape {tensor.shape}")
    return _fill(tensor, np.eye(*tensor.shape))


def orthogonal_(tensor, gain=1.0, generator=None):
    """A (semi-)orthogonal matrix times gain (Saxe et al., 2013), from the QR decomposition of
    a Gaussian matrix, signs fixed so that it is uniformly distributed; ≥ 3-D tensors are
    flattened to (shape[0], rest) first, as torch."""
    _no_generator(generator, "orthogonal_")
    if tensor.ndim < 2:
        raise ValueError(
            f"init.orthogonal_: only tensors with 2 or more axes, got shape {tensor.shape}"
        )
    rows = tensor.shape[0]
    cols = tensor.numel() // rows if rows else 0
    flat = _rng().normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q.reshape(tensor.shape))


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot: U(±gain·√(6/(fan_in + fan_out)))."""
    _no_generator(generator, "xavier_uniform_")
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot: N(0, gain²·2/(fan_in + fan_out))."""
    _no_generator(generator, "xavier_normal_")
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def calculate_gain(nonlinearity, param=None):
    """The factor that keeps activations' variance steady through `nonlinearity` (PyTorch's
    values): linear/sigmoid 1, tanh 5/3, relu √2, leaky_relu √(2/(1 + slope²)), selu 3/4."""
    if nonlinearity in (
        "linear",
        "identity",
        "sigmoid",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
    ):
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


def _kaiming_std(t, a, mode, nonlinearity, op):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"init.{op}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(t)
    try:
        gain = calculate_gain(nonlinearity, a)
    except ValueError:
        raise ValueError(f"init.{op}: unknown nonlinearity {nonlinearity!r}") from None
    return gain / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation, U(±gain·√(3/fan)), fan = fan_in or fan_out (mode); with a=√5 this
    is PyTorch's default for Linear weights (uniform in ±1/√fan_in)."""
    _no_generator(generator, "kaiming_uniform_")
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation, N(0, (gain/√fan)²), fan = fan_in or fan_out (mode)."""
    _no_generator(generator, "kaiming_normal_")
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_"))
