"""The serial builds a float32 training step calls, compiled in the order opposite to the
step's: what the compile-ahead helper (compile_ahead.py) does first on an empty cache.

On a fresh checkout the first training step compiles every kernel it calls, one after the
other, in this process: the forward pass's kernels first, then the backward pass's, then
Adam's. Meanwhile the second core is idle. So when the first kernel is built and numba's
on-disk cache holds none of them, the helper process is asked to compile the same serial
builds starting from the step's end — Adam, the backward kernels, then the forward ones —
while this process compiles from the start. Numba looks in its cache before it compiles a
new signature, so every kernel the helper finished before this process reached it loads in
milliseconds instead of compiling: the two meet in the middle.

Each call below goes through a kernel's own numba wrapper (softmax_backward_numba, ...),
with small float32 arrays of the kinds a step passes, so the kernels see the argument types
a step gives them (the wrappers make arrays contiguous and scalars of the arrays' dtype). A
call that names a kernel the step does not use, or types it otherwise, only costs the
helper's time; tests/kernels/test_compile_ahead.py trains a small Transformer after `serial_builds`
and checks that it compiles none of them itself.
"""

import numpy as np


def _arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _backward_kernels():
    """Adam's update and the backward pass's kernels, last called first."""
    from . import adam, bias_activation, cross_entropy, layer_norm, softmax

    param, grad, m, v = _arrays(8, 8, 8, 8)
    v = np.abs(v)
    yield lambda: adam.adam_update_numba(param, grad, m, v, v, 0.9, 0.98, 1e-3, 1.0, 1e-9, None)
    y = softmax.softmax_forward_numpy(*_arrays((2, 3)))
    (dy,) = _arrays((2, 3), seed=1)
    yield lambda: softmax.softmax_backward_numba(y, dy, 0.5)
    x, dx = _arrays((4, 8), (4, 8))
    yield lambda: bias_activation.bias_activation_backward_numba(dx, (np.abs(x),), "relu")
    mean, rstd = x.mean(axis=1), np.ones(4, np.float32)
    w = np.ones(8, np.float32)
    yield lambda: layer_norm.layer_norm_backward_numba(dx, x, mean, rstd, w)
    targets = np.array([1, 2, 0, 3])
    _, log_total = cross_entropy.cross_entropy_forward_numpy(x, targets)
    rows = np.ones(4, np.float32)
    yield lambda: cross_entropy.cross_entropy_backward_numba(x, targets, log_total, rows, 0, 0.1)


def _forward_kernels():
    """The forward pass's kernels, last called first (the loss, the feed-forward layer,
    Add & Norm, dropout, attention's softmax, a Linear's bias, the products)."""
    from . import bias_activation, cross_entropy, layer_norm, softmax
    from .dropout import dropout_numba  # (kernels.dropout is the kernel, not its module)
    from .fast_matmul import products

    x, b = _arrays((4, 8), 8)
    yield lambda: cross_entropy.cross_entropy_forward_numba(x, np.array([1, 2, 0, 3]), 0, 0.1)
    yield lambda: bias_activation.bias_activation_forward_numba(x, b, "relu")
    yield lambda: layer_norm.layer_norm_forward_numba(x, b, b, 1e-5)
    yield lambda: dropout_numba(x, 1, 0.1)
    scores = _arrays((2, 2, 3, 3))[0]
    yield lambda: softmax.softmax_forward_numba(scores, 0.5, np.zeros((2, 1, 1, 3), bool))
    yield lambda: bias_activation.add_bias_numba(x.copy(), b)  # a Linear's bias, in place
    # a Linear layer's product (and its gradients' transposed operands); a stack of matrices
    # (attention's products while decoding), of 4-D views and contiguous arrays
    yield lambda: products.gemm_product(x, x.T)
    q, k = _arrays((2, 2, 3, 4), (2, 2, 3, 4))
    yield lambda: products.gemm_product(q, np.swapaxes(k, -1, -2))
    yield lambda: products.gemm_product(q, np.ascontiguousarray(np.swapaxes(k, -1, -2)))


def _other_kernels():
    """Kernels other common steps call: GELU's pair, log-softmax (decoding, sampling)."""
    from . import bias_activation, softmax

    x, b = _arrays((4, 8), 8)
    y, saved = bias_activation.bias_activation_forward_numba(x, b, "gelu")
    yield lambda: bias_activation.bias_activation_backward_numba(x, saved, "gelu")
    log_p = softmax.log_softmax_forward_numba(x)
    yield lambda: softmax.log_softmax_backward_numba(log_p, x)


def serial_builds(stop=lambda: False):
    """Call every kernel of a float32 training step once, on arrays small enough that its
    serial build runs, the step's last kernel first: each build compiles into numba's cache
    (or loads from it). `stop()` is asked before each call: True ends the warm-up there (the
    asking process's first step is over). Returns how many calls were made."""
    calls = 0
    for group in (_backward_kernels, _forward_kernels, _other_kernels):
        for call in group():
            if stop():
                return calls
            call()
            calls += 1
    return calls
