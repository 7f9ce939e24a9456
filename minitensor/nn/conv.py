"""The layers of a convolutional network, as torch.nn has them: Conv1d, Conv2d, MaxPool1d/2d,
AvgPool1d/2d, BatchNorm1d/2d, Flatten and Unflatten.

Parameter and buffer names, shapes, defaults and initialisation are torch's, so a torch
`state_dict()` loads strictly. The ops live in `minitensor/ops/conv.py` (im2col onto the matrix
product, and batch_norm).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import functional as F
from ..creation import empty_like_shape
from ..tensor import Tensor
from ..typing import DType
from . import init
from .module import Module, Parameter, check_device

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(value, n, name, cls):
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    if isinstance(value, Sequence) and len(value) == n:
        return tuple(int(v) for v in value)
    raise TypeError(f"{cls}: {name} must be an int or {n} ints, got {value!r}")


class _ConvNd(Module):
    """What Conv1d and Conv2d share: weight (out, in/groups, *kernel), bias (out,), torch's
    checks and initialisation (kaiming_uniform_(a=√5): U(±1/√fan_in), fan_in =
    in/groups · ∏kernel, for the weight and the bias)."""

    dims = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        cls, n = type(self).__name__, self.dims
        check_device(device, cls)
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{cls}: in_channels ({in_channels}) and out_channels ({out_channels}) must "
                f"both be divisible by groups ({groups})"
            )
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"{cls}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, n, "kernel_size", cls)
        self.stride = _tuple(stride, n, "stride", cls)
        self.dilation = _tuple(dilation, n, "dilation", cls)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"{cls}: padding must be 'same', 'valid' or ints, got {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(f"{cls}: padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _tuple(padding, n, "padding", cls)
        self.padding_mode = padding_mode
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(empty_like_shape(shape, dtype))
        if bias:
            self.bias = Parameter(empty_like_shape((out_channels,), dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def _conv(self, conv, x):
        if self.padding_mode == "zeros":
            return conv(
                x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
            )
        # torch's other modes: pad first (F.pad's pairs run from the last axis), then convolve
        pads = _explicit_padding(self.padding, self.kernel_size, self.dilation)
        pairs = tuple(p for pair in reversed(pads) for p in pair)
        x = F.pad(x, pairs, mode=self.padding_mode)
        return conv(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        zero = (0,) * self.dims
        if self.padding != zero:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self.dims:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


def _explicit_padding(padding, kernel, dilation):
    """((before, after), …) per spatial axis for an int tuple, 'valid' or 'same'."""
    if padding == "valid":
        return tuple((0, 0) for _ in kernel)
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)
    return tuple((p, p) for p in padding)


class Conv1d(_ConvNd):
    """1-D convolution over sequences: input (N, C_in, L) or (C_in, L) → (N, C_out, L_out).
    weight (C_out, C_in/groups, k), bias (C_out,). Arguments as torch.nn.Conv1d."""

    dims = 1

    def forward(self, input: Tensor) -> Tensor:
        return self._conv(F.conv1d, input)


class Conv2d(_ConvNd):
    """2-D convolution over images: input (N, C_in, H, W) or (C_in, H, W) →
    (N, C_out, H_out, W_out). weight (C_out, C_in/groups, kh, kw), bias (C_out,). Arguments as
    torch.nn.Conv2d."""

    dims = 2

    def forward(self, input: Tensor) -> Tensor:
        return self._conv(F.conv2d, input)


# ------------------------------------------------------------------ pooling
class _MaxPoolNd(Module):
    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPoolNd):
    """The largest value of each window: (N, C, L) or (C, L) → (N, C, L_out), as torch."""

    def forward(self, input: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return F.max_pool1d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            self.return_indices,
        )


class MaxPool2d(_MaxPoolNd):
    """The largest value of each window: (N, C, H, W) or (C, H, W) → (N, C, H_out, W_out)."""

    def forward(self, input: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return F.max_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            self.return_indices,
        )


class AvgPool1d(Module):
    """The mean of each window: (N, C, L) or (C, L) → (N, C, L_out), as torch."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size = _tuple(kernel_size, 1, "kernel_size", "AvgPool1d")
        stride = stride if stride is not None else kernel_size
        self.stride = _tuple(stride, 1, "stride", "AvgPool1d")
        self.padding = _tuple(padding, 1, "padding", "AvgPool1d")
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool1d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """The mean of each window: (N, C, H, W) or (C, H, W) → (N, C, H_out, W_out), as torch."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


# ------------------------------------------------------------------ batch norm
class _BatchNorm(Module):
    """Normalise each channel over the batch (Ioffe & Szegedy 2015). weight γ (C,) starts
    at 1, bias β at 0 (bias=False: none); buffers running_mean (0), running_var (1) and
    num_batches_tracked, as torch. In training the batch's statistics normalise and the
    running ones follow them (momentum; None: a cumulative average); in eval mode the running
    ones normalise."""

    expected_dims: tuple[int, ...] = (2, 3)

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: DType | None = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        check_device(device, type(self).__name__)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dtype = np.dtype(dtype or np.float32)
        if affine:
            self.weight = Parameter(np.ones(num_features, dtype))
        else:
            self.register_parameter("weight", None)
        if affine and bias:
            self.bias = Parameter(np.zeros(num_features, dtype))
        else:
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", np.zeros(num_features, dtype))
            self.register_buffer("running_var", np.ones(num_features, dtype))
            self.register_buffer("num_batches_tracked", np.zeros((), np.int64))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in self.expected_dims:
            raise ValueError(
                f"{type(self).__name__} in {self.path or type(self).__name__}: expected "
                f"{' or '.join(f'{d}-D' for d in self.expected_dims)} input, got shape "
                f"{input.shape}"
            )
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked.item())
        # batch statistics in training, or whenever there are no running ones to use
        use_batch = self.training or self.running_mean is None
        return F.batch_norm(
            input,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            use_batch,
            momentum,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) input: the statistics of each channel over N (and
    L)."""

    expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) input: the statistics of each channel over N, H and W."""

    expected_dims = (4,)


# ------------------------------------------------------------------ shape
class Flatten(Module):
    """Merge axes start_dim..end_dim into one: (N, C, H, W) → (N, C·H·W) by default (the
    batch axis is kept)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:
        return F.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split axis `dim` into `unflattened_size`: Unflatten(1, (C, H, W)) turns (N, C·H·W)
    back into (N, C, H, W)."""

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        if not isinstance(unflattened_size, Sequence):
            raise TypeError(
                f"Unflatten: unflattened_size must be a tuple of ints, got {unflattened_size!r}"
            )
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        dim = self.dim % input.ndim if input.ndim else 0
        known = math.prod(s for s in self.unflattened_size if s != -1)
        if input.ndim == 0 or (-1 not in self.unflattened_size and known != input.shape[dim]):
            raise ValueError(
                f"Unflatten in {self.path or 'Unflatten'}: axis {self.dim} of shape "
                f"{input.shape} cannot be split into {self.unflattened_size}"
            )
        shape = input.shape[:dim] + self.unflattened_size + input.shape[dim + 1 :]
        return F.reshape(input, shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
