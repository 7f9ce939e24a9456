"""The ops of a convolutional network: convolution and pooling over images (N, C, H, W) and
sequences (N, C, L), by im2col, and batch normalisation.

A convolution is a matrix product in disguise. `im2col` lays every kh × kw window of the
(padded) input out as a column, so that the convolution is one product of the weight, one
row per output channel, with those columns:

    cols (N, C·kh·kw, Ho·Wo)        every window of every image, unrolled
    out  = W (O, C·kh·kw) @ cols    → (N, O, Ho·Wo) → (N, O, Ho, Wo)

Backward is the same picture in reverse: dW = grad @ colsᵀ, dcols = Wᵀ @ grad, and `col2im`
adds each column back onto the window it came from (windows overlap when the stride is
smaller than the kernel, so their gradients add). Groups split the channels into independent
convolutions: one product per group. Pooling uses the same windows: max or mean over each
column, and the same col2im in backward. The 1-D ops are the 2-D ones on an image one row
tall. Batch norm, a composition of mean, subtraction and division, closes the file.

After each class comes the public function that checks its arguments and applies it
(`minitensor.functional` re-exports them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import kernels as K
from ..errors import op_error
from ..function import Function
from ..grad_mode import no_grad
from ..tensor import Tensor
from .elementwise import sqrt
from .reduce import mean
from .shape import reshape, squeeze, unsqueeze

IntPair = int | Sequence[int]


# ------------------------------------------------------------------ windows
def im2col(x, kernel, stride, dilation):
    """Every window of x (N, C, H, W) as a read-only view (N, C, kh, kw, Ho, Wo):
    element [n, c, i, j, ho, wo] is x[n, c, ho·sh + i·dh, wo·sw + j·dw]. No copy is made;
    reshaping it into columns copies."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    n, c, h, w = x.shape
    ho, wo = _out_size(h, kh, sh, dh), _out_size(w, kw, sw, dw)
    s = x.strides
    shape = (n, c, kh, kw, ho, wo)
    strides = (s[0], s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw)
    return as_strided(x, shape, strides, writeable=False)


def col2im(cols, shape, stride, dilation):
    """The adjoint of im2col: add each window (N, C, kh, kw, Ho, Wo) back onto an array of
    `shape` (N, C, H, W), where it was read from. Overlapping windows add up."""
    _, _, kh, kw, ho, wo = cols.shape
    (sh, sw), (dh, dw) = stride, dilation
    out = np.zeros(shape, cols.dtype)
    for i in range(kh):  # one strided slice per kernel position: kh·kw numpy adds
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
            columns = slice(j * dw, j * dw + sw * (wo - 1) + 1, sw)
            out[:, :, rows, columns] += cols[:, :, i, j]
    return out


def _out_size(size, kernel, stride, dilation):
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def _pad(x, padding, value=0.0):
    """x (N, C, H, W) with padding ((top, bottom), (left, right)) of `value`."""
    if not any(p for pair in padding for p in pair):
        return x
    return np.pad(x, ((0, 0), (0, 0), *padding), constant_values=value)


def _unpad(x, padding):
    (top, bottom), (left, right) = padding
    return x[:, :, top : x.shape[2] - bottom, left : x.shape[3] - right]


# ------------------------------------------------------------------ convolution
class Conv2d(Function):
    """out[n, o] = Σ_c Σ_ij w[o, c, i, j] · x_padded[n, c, ho·s + i·d, wo·s + j·d] + b[o].

    x (N, C, H, W), weight (O, C/groups, kh, kw), bias (O,) or None → (N, O, Ho, Wo).
    padding is ((top, bottom), (left, right)); stride and dilation are pairs.
    """

    float_inputs = (0, 1)

    @staticmethod
    def forward(
        ctx,
        x,
        weight,
        bias=None,
        stride=(1, 1),
        padding=((0, 0), (0, 0)),
        dilation=(1, 1),
        groups=1,
    ):
        ctx.save_for_backward(x, weight)
        ctx.args = (stride, padding, dilation, groups)
        cols = _grouped_columns(_pad(x, padding), weight.shape[2:], stride, dilation, groups)
        n, o = x.shape[0], weight.shape[0]
        w = weight.reshape(groups, o // groups, -1)  # one matrix per group
        out = K.matmul(w, cols)  # (G, O/G, K) @ (N, G, K, P) → (N, G, O/G, P)
        out = out.reshape(n, o, *_spatial(x.shape, weight.shape, ctx.args))
        return out if bias is None else out + bias.reshape(1, o, 1, 1)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.args
        n, o = grad.shape[:2]
        g = grad.reshape(n, groups, o // groups, -1)  # (N, G, O/G, P)
        w = weight.reshape(groups, o // groups, -1)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dcols = K.matmul_grad_b(w, g)  # wᵀ @ g: (N, G, K, P)
            padded = (n, x.shape[1], x.shape[2] + sum(padding[0]), x.shape[3] + sum(padding[1]))
            windows = dcols.reshape(n, x.shape[1], *weight.shape[2:], *grad.shape[2:])
            dx = _unpad(col2im(windows, padded, stride, dilation), padding)
        if ctx.needs_input_grad[1]:
            cols = _grouped_columns(_pad(x, padding), weight.shape[2:], stride, dilation, groups)
            dw = K.matmul_grad_a(g, cols).sum(axis=0).reshape(weight.shape)  # Σₙ g @ colsᵀ
        if len(ctx.needs_input_grad) > 2 and ctx.needs_input_grad[2]:
            db = grad.sum(axis=(0, 2, 3))
        return (dx, dw, db)[: len(ctx.needs_input_grad)]  # no bias given: two inputs


def _grouped_columns(xp, kernel, stride, dilation, groups):
    """The windows of padded xp as columns, one block per group: (N, G, C/G·kh·kw, Ho·Wo)."""
    windows = im2col(xp, kernel, stride, dilation)
    n, c = xp.shape[:2]
    return windows.reshape(n, groups, (c // groups) * kernel[0] * kernel[1], -1)


def _spatial(x_shape, w_shape, args):
    stride, padding, dilation, _ = args
    h = x_shape[2] + sum(padding[0])
    w = x_shape[3] + sum(padding[1])
    return (
        _out_size(h, w_shape[2], stride[0], dilation[0]),
        _out_size(w, w_shape[3], stride[1], dilation[1]),
    )


def _pair(value, name, op, n=2):
    """An int or a sequence of n ints (or of one, as torch repeats it) as an n-tuple, refused
    with the op named otherwise."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * n
    if isinstance(value, Sequence) and len(value) == 1 and n > 1:
        return _pair(value[0], name, op, n)
    if (
        isinstance(value, Sequence)
        and len(value) == n
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)
    ):
        return tuple(int(v) for v in value)
    raise op_error(op, f"{name} must be an int or {n} ints, got {value!r}", TypeError)


def _conv_padding(padding, kernel, stride, dilation, op):
    """torch's padding argument (an int, ints, 'valid' or 'same') as ((top, bottom), …)."""
    n = len(kernel)
    if padding == "valid":
        return ((0, 0),) * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise op_error(
                op, f"padding='same' is not supported for strided convolutions (stride {stride})"
            )
        # as torch: the total d·(k − 1) split with the extra row on the bottom / right
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)
    if isinstance(padding, str):
        raise op_error(op, f"padding must be 'valid', 'same' or ints, got {padding!r}")
    pads = _pair(padding, "padding", op, n)
    if any(p < 0 for p in pads):
        raise op_error(op, f"padding must be non-negative, got {padding!r}")
    return tuple((p, p) for p in pads)


def _check_conv(op, x, weight, bias, stride, dilation, groups):
    spatial = weight.ndim - 2
    if x.ndim != spatial + 2:
        layout = "(N, C, H, W)" if spatial == 2 else "(N, C, L)"
        raise op_error(op, f"input of shape {x.shape}; expected {layout} (or without N)")
    if not isinstance(groups, int) or groups < 1:
        raise op_error(op, f"groups must be a positive int, got {groups!r}")
    c, o = x.shape[1], weight.shape[0]
    if c != weight.shape[1] * groups or o % groups:
        raise op_error(
            op,
            f"input of shape {x.shape} has {c} channels; weight of shape {weight.shape} "
            f"(out_channels, in_channels/groups, *kernel) with groups={groups} expects "
            f"{weight.shape[1] * groups} (and out_channels divisible by groups)",
        )
    if bias is not None and bias.shape != (o,):
        raise op_error(op, f"bias of shape {bias.shape}; expected ({o},) for weight {weight.shape}")
    if any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise op_error(op, f"stride {stride} and dilation {dilation} must be positive")


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> Tensor:
    """torch.nn.functional.conv2d: input (N, C, H, W) or (C, H, W), weight
    (O, C/groups, kh, kw), bias (O,) → (N, O, Ho, Wo) with
    Ho = ⌊(H + 2·pad − dilation·(kh − 1) − 1) / stride⌋ + 1 (likewise Wo).
    padding: int, pair, 'valid' (none) or 'same' (output size = input size, stride 1)."""
    if weight.ndim != 4:
        raise op_error("conv2d", f"weight of shape {weight.shape}; expected (O, C/groups, kh, kw)")
    unbatched = input.ndim == 3
    x = unsqueeze(input, 0) if unbatched else input
    stride, dilation = _pair(stride, "stride", "conv2d"), _pair(dilation, "dilation", "conv2d")
    _check_conv("conv2d", x, weight, bias, stride, dilation, groups)
    pads = _conv_padding(padding, weight.shape[2:], stride, dilation, "conv2d")
    _check_output_size("conv2d", x.shape, weight.shape[2:], pads, stride, dilation)
    args = (x, weight) if bias is None else (x, weight, bias)
    out = _apply_conv("conv2d", args, stride=stride, padding=pads, dilation=dilation, groups=groups)
    return squeeze(out, 0) if unbatched else out


def _apply_conv(op, args, **params):
    """Conv2d on (x, weight[, bias]). As torch: all-integer arguments convolve exactly to an
    integer output (no gradient); integers mixed with floats are refused."""
    integer = [a.dtype.kind in "iub" for a in args]
    if not any(integer):
        return Conv2d.apply(*args, **params)
    if not all(integer):
        dtypes = ", ".join(str(a.dtype) for a in args)
        raise op_error(op, f"input, weight and bias must share a dtype, got {dtypes}", TypeError)
    floats = [Tensor(a.numpy().astype(np.float64)) for a in args]
    out = Conv2d.apply(*floats, **params).numpy()
    return Tensor(np.rint(out).astype(np.result_type(*(a.dtype for a in args))))


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | str = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """torch.nn.functional.conv1d: input (N, C, L) or (C, L), weight (O, C/groups, k), bias
    (O,) → (N, O, Lo), Lo = ⌊(L + 2·pad − dilation·(k − 1) − 1) / stride⌋ + 1. Computed as
    conv2d on an image one row tall."""
    if weight.ndim != 3:
        raise op_error("conv1d", f"weight of shape {weight.shape}; expected (O, C/groups, k)")
    unbatched = input.ndim == 2
    x = unsqueeze(input, 0) if unbatched else input
    if x.ndim != 3:
        raise op_error("conv1d", f"input of shape {input.shape}; expected (N, C, L) or (C, L)")
    (s,), (d,) = _pair(stride, "stride", "conv1d", 1), _pair(dilation, "dilation", "conv1d", 1)
    _check_conv("conv1d", x, weight, bias, (s,), (d,), groups)
    (pads,) = _conv_padding(padding, weight.shape[2:], (s,), (d,), "conv1d")
    _check_output_size(
        "conv1d",
        x.shape[:2] + (1,) + x.shape[2:],
        (1, weight.shape[2]),
        ((0, 0), pads),
        (1, s),
        (1, d),
    )
    args = (unsqueeze(x, 2), unsqueeze(weight, 2))
    args += () if bias is None else (bias,)
    out = _apply_conv(
        "conv1d", args, stride=(1, s), padding=((0, 0), pads), dilation=(1, d), groups=groups
    )
    out = squeeze(out, 2)
    return squeeze(out, 0) if unbatched else out


def _check_output_size(op, shape, kernel, pads, stride, dilation):
    sizes = [
        _out_size(n + sum(p), k, s, d)
        for n, k, p, s, d in zip(shape[2:], kernel, pads, stride, dilation)
    ]
    if any(size < 1 for size in sizes):
        raise op_error(
            op,
            f"input of shape {tuple(shape)} with padding {pads} is smaller than the "
            f"kernel {tuple(kernel)} (dilation {dilation}): the output would be empty",
        )


# ------------------------------------------------------------------ pooling
class MaxPool2d(Function):
    """The largest value of each window: x (N, C, H, W) → (N, C, Ho, Wo). Padding counts as
    −∞. The gradient goes to the first maximum of each window (as torch), NaN counting as the
    largest."""

    name = "max_pool2d"

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation):
        windows = im2col(_pad(x, padding, _lowest(x.dtype)), kernel, stride, dilation)
        n, c, kh, kw, ho, wo = windows.shape
        flat = windows.reshape(n, c, kh * kw, ho, wo)
        where = np.argmax(flat, axis=2)  # the first maximum; np.argmax takes NaN as largest
        ctx.args = (x.shape, kernel, stride, padding, dilation)
        ctx.save_for_backward(where)
        return np.take_along_axis(flat, where[:, :, None], axis=2)[:, :, 0]

    @staticmethod
    def backward(ctx, grad):
        (where,) = ctx.saved_tensors
        shape, kernel, stride, padding, dilation = ctx.args
        n, c, ho, wo = grad.shape
        flat = np.zeros((n, c, kernel[0] * kernel[1], ho, wo), grad.dtype)
        np.put_along_axis(flat, where[:, :, None], grad[:, :, None], axis=2)
        padded = (n, c, shape[2] + sum(padding[0]), shape[3] + sum(padding[1]))
        windows = flat.reshape(n, c, *kernel, ho, wo)
        return _unpad(col2im(windows, padded, stride, dilation), padding)


def _lowest(dtype):
    """The padding no element loses to: −∞, or an integer dtype's smallest value (max_pool keeps
    integer inputs integer, as torch)."""
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _flat_indices(where, args):
    """torch's return_indices: each maximum's position in its input plane, h·W + w."""
    shape, (kh, kw), (sh, sw), padding, (dh, dw) = args
    i, j = np.divmod(where, kw)
    ho = np.arange(where.shape[2])[:, None]
    wo = np.arange(where.shape[3])[None, :]
    h = ho * sh + i * dh - padding[0][0]
    w = wo * sw + j * dw - padding[1][0]
    return (h * shape[3] + w).astype(np.int64)


class AvgPool2d(Function):
    """The mean of each window: x (N, C, H, W) → (N, C, Ho, Wo). Padding counts as 0; the
    divisor is the window's size (count_include_pad), the number of real elements in it, or
    divisor_override."""

    name = "avg_pool2d"
    float_inputs = (0,)

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, count_include_pad=True, divisor_override=None):
        windows = im2col(_pad(x, padding), kernel, stride, (1, 1))
        divisor = _divisor(x.shape, kernel, stride, padding, count_include_pad, divisor_override)
        ctx.args, ctx.divisor = (x.shape, kernel, stride, padding), divisor
        return (windows.sum(axis=(2, 3)) / divisor).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        shape, kernel, stride, padding = ctx.args
        n, c, ho, wo = grad.shape
        share = (grad / ctx.divisor).astype(grad.dtype, copy=False)  # each element's part
        windows = np.broadcast_to(share[:, :, None, None], (n, c, *kernel, ho, wo))
        padded = (n, c, shape[2] + sum(padding[0]), shape[3] + sum(padding[1]))
        return _unpad(col2im(windows, padded, stride, (1, 1)), padding)


def _divisor(shape, kernel, stride, padding, count_include_pad, divisor_override):
    """What each window's sum is divided by: a number, or (Ho, Wo) counts of real elements."""
    if divisor_override is not None:
        return float(divisor_override)
    (top, bottom), (left, right) = padding
    if count_include_pad and (top, left) == (bottom, right):
        return float(kernel[0] * kernel[1])
    if count_include_pad:  # ceil_mode's overhang past the right-hand padding is not counted
        counted = np.ones((1, 1, shape[2] + 2 * top, shape[3] + 2 * left))
        ones = _pad(counted, ((0, bottom - top), (0, right - left)))
    else:
        ones = _pad(np.ones((1, 1, *shape[2:])), padding)
    return im2col(ones, kernel, stride, (1, 1)).sum(axis=(2, 3))[0, 0]


def _pool_args(op, x, kernel_size, stride, padding, dilation, ceil_mode, n=2):
    """Checked (kernel, stride, padding as pairs, dilation) for a pooling op. ceil_mode=True
    adds to each axis's right-hand padding what its last, partly outside window needs."""
    kernel = _pair(kernel_size, "kernel_size", op, n)
    empty = stride is None or (isinstance(stride, Sequence) and len(stride) == 0)
    stride = kernel if empty else _pair(stride, "stride", op, n)
    pads = _pair(padding, "padding", op, n)
    dilation = _pair(dilation, "dilation", op, n)
    if x.ndim not in (n + 1, n + 2):
        layout = "(N, C, H, W) or (C, H, W)" if n == 2 else "(N, C, L) or (C, L)"
        raise op_error(op, f"input of shape {x.shape}; expected {layout}")
    if min(kernel + stride + dilation) < 1 or min(pads) < 0:
        raise op_error(
            op,
            f"kernel {kernel}, stride {stride}, dilation {dilation} must be "
            f"positive and padding {pads} non-negative",
        )
    if any(2 * p > d * (k - 1) + 1 for p, k, d in zip(pads, kernel, dilation)):
        raise op_error(op, f"padding {pads} should be at most half of the kernel {kernel}")
    sizes = [
        _pool_out_size(s, p, k, st, d, ceil_mode)
        for s, p, k, st, d in zip(x.shape[-n:], pads, kernel, stride, dilation)
    ]
    if min(sizes) < 1:
        raise op_error(op, f"input of shape {x.shape} is smaller than the kernel {kernel}")
    overhang = [  # how far the last window reaches past the padded input (ceil_mode only)
        max(0, (o - 1) * st + d * (k - 1) + 1 - (s + 2 * p))
        for o, s, p, k, st, d in zip(sizes, x.shape[-n:], pads, kernel, stride, dilation)
    ]
    return kernel, stride, tuple((p, p + e) for p, e in zip(pads, overhang)), dilation


def _pool_out_size(size, pad, kernel, stride, dilation, ceil_mode):
    """torch's pooled length: floor((size + 2·pad − span) / stride) + 1, or with ceil_mode the
    ceiling, less one when that last window would start past the input and its left padding."""
    span = dilation * (kernel - 1) + 1
    out = (size + 2 * pad - span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _as_batched_image(x, n):
    """x as (N, C, H, W): 1-D inputs gain an axis of height 1, unbatched ones a batch axis."""
    unbatched = x.ndim == n + 1
    x = unsqueeze(x, 0) if unbatched else x
    return (unsqueeze(x, 2) if n == 1 else x), unbatched


def _from_batched_image(out, n, unbatched):
    out = squeeze(out, 2) if n == 1 else out
    return squeeze(out, 0) if unbatched else out


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, n):
    op = f"max_pool{n}d"
    kernel, stride, pads, dilation = _pool_args(
        op, x, kernel_size, stride, padding, dilation, ceil_mode, n
    )
    if n == 1 and x.dtype.kind in "iu" and not return_indices:  # torch's max_pool1d_impl
        raise op_error(op, f"not implemented for {x.dtype} without return_indices", TypeError)
    if n == 1:
        kernel, stride, pads, dilation = (1, *kernel), (1, *stride), ((0, 0), *pads), (1, *dilation)
    image, unbatched = _as_batched_image(x, n)
    out = MaxPool2d.apply(image, kernel=kernel, stride=stride, padding=pads, dilation=dilation)
    result = _from_batched_image(out, n, unbatched)
    if not return_indices:
        return result
    args = (image.shape, kernel, stride, pads, dilation)
    index = _flat_indices(_argmax_again(image, args), args)
    index = index[:, :, 0] if n == 1 else index
    return result, Tensor(index[0] if unbatched else index)


def _argmax_again(image, args):
    """Each maximum's position in its window (N, C, Ho, Wo), as MaxPool2d finds it."""
    shape, kernel, stride, padding, dilation = args
    array = image.numpy()
    windows = im2col(_pad(array, padding, _lowest(array.dtype)), kernel, stride, dilation)
    n, c, kh, kw, ho, wo = windows.shape
    return np.argmax(windows.reshape(n, c, kh * kw, ho, wo), axis=2)


def max_pool2d(
    input: Tensor,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    dilation: IntPair = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """torch.nn.functional.max_pool2d: the largest value of each kernel_size window, windows
    `stride` apart (default: kernel_size). input (N, C, H, W) or (C, H, W) → (N, C, Ho, Wo).
    return_indices=True also gives each maximum's flat position h·W + w in its plane."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2)


def max_pool1d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """torch.nn.functional.max_pool1d: input (N, C, L) or (C, L) → (N, C, Lo)."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1)


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor, n):
    op = f"avg_pool{n}d"
    kernel, stride, pads, _ = _pool_args(op, x, kernel_size, stride, padding, 1, ceil_mode, n)
    if divisor == 0:
        raise op_error(op, "divisor_override must be non-zero", ZeroDivisionError)
    if n == 1:
        kernel, stride, pads = (1, *kernel), (1, *stride), ((0, 0), *pads)
    image, unbatched = _as_batched_image(x, n)
    integer = image.dtype.kind in "iu"  # torch averages integers and truncates toward zero
    out = AvgPool2d.apply(
        Tensor(image.numpy().astype(np.float64)) if integer else image,
        kernel=kernel,
        stride=stride,
        padding=pads,
        count_include_pad=count_include_pad,
        divisor_override=divisor,
    )
    out = Tensor(np.trunc(out.numpy()).astype(image.dtype)) if integer else out
    return _from_batched_image(out, n, unbatched)


def avg_pool2d(
    input: Tensor,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """torch.nn.functional.avg_pool2d: the mean of each kernel_size window, windows `stride`
    apart (default: kernel_size). input (N, C, H, W) or (C, H, W) → (N, C, Ho, Wo). Padding
    counts as zeros; count_include_pad=False divides by the real elements only."""
    return _avg_pool(
        input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2
    )


def avg_pool1d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """torch.nn.functional.avg_pool1d: input (N, C, L) or (C, L) → (N, C, Lo)."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


# --------------- no Function of its own: a composition of the ops above
def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """torch.nn.functional.batch_norm: each channel normalised over the batch (and every
    position), γ ⊙ (x − μ)/√(σ² + eps) + β (Ioffe & Szegedy 2015). input (N, C, …) → same.

    training=True: μ and σ² (biased) are this batch's, and the running statistics, when given,
    move towards them in place: running ← (1 − momentum)·running + momentum·stat, with the
    unbiased σ² (as torch). training=False: the running statistics normalise.
    """
    if input.ndim < 2:
        raise op_error("batch_norm", f"input of shape {input.shape}; expected (N, C, …)")
    c = input.shape[1]
    for name, t in (
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ):
        if t is not None and t.shape != (c,):
            raise op_error(
                "batch_norm",
                f"{name} of shape {t.shape}; expected ({c},) for input of shape {input.shape}",
            )
    axes = (0, *range(2, input.ndim))  # every axis but the channels'
    channel = (1, c) + (1,) * (input.ndim - 2)  # (C,) statistics broadcast as (1, C, 1, …)
    if training:
        count = input.numel() // c if c else 0
        if count <= 1:
            raise op_error(
                "batch_norm",
                f"expected more than 1 value per channel when "
                f"training, got input of shape {input.shape}",
            )
        mu = mean(input, axis=axes, keepdims=True)
        var = mean((input - mu) * (input - mu), axis=axes, keepdims=True)
        _update_running(running_mean, running_var, mu, var, count, momentum)
    elif running_mean is None or running_var is None:
        raise op_error("batch_norm", "running_mean and running_var are needed when not training")
    else:
        mu, var = reshape(running_mean, channel), reshape(running_var, channel)
    out = (input - mu) / sqrt(var + eps)
    if weight is not None:
        out = out * reshape(weight, channel)
    return out if bias is None else out + reshape(bias, channel)


def _update_running(running_mean, running_var, mu, var, count, momentum):
    """running ← (1 − momentum)·running + momentum·batch statistic, in place, off the graph."""
    with no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * mu.detach().reshape(-1))
        if running_var is not None:
            unbiased = var.detach().reshape(-1) * (count / (count - 1))
            running_var.mul_(1 - momentum).add_(momentum * unbiased)
