"""Kernels: the hot loops of a Transformer step, behind one switch.

Ops call only the names below; each dispatches to a numba kernel or to its plain-numpy twin
(same signature, same result) according to the switch in `backend_switch.py`:

    MINITENSOR_BACKEND=numpy            # environment variable (default: numba)
    mt.set_backend("numpy"), mt.get_backend()
    with mt.kernels.use_backend("numpy"): ...

One module per family, kernel and twin side by side — read the twin first:

    matmul.py         matmul, matmul_grad_a, matmul_grad_b   (the numpy twins; the numba
                                                              products are in fast_matmul/,
                                                              loaded on the first numba matmul)
    fast_matmul/      a tile kernel for stacks of small matrices (its register tile in LLVM IR,
                      microkernel.py), numba threads calling BLAS (blas.py) for large products
    erf.py            erf, for GELU (numpy has none)
    softmax.py        softmax_forward/backward (fused scale + mask), log_softmax_forward/backward
    cross_entropy.py  cross_entropy_forward/backward (ignore_index, label smoothing)
    layer_norm.py     layer_norm_forward/backward
    bias_activation.py  bias_activation_forward/backward (a Linear's bias + ReLU or GELU)
    dropout.py        dropout (a counter-based random mask: forward and backward recompute it)
    adam.py           adam_update (Adam's step for one parameter, in place, in one pass)
    flash_attention.py  fused_attention_forward/backward (softmax(Q·Kᵀ·scale + mask)·V by tiles,
                      without the L×L matrix; its tile products call BLAS from fast_matmul/)
    jit.py            the @kernel decorator (kernels built on first call), the thread count
    numba_helpers.py  what kernels share, loaded with numba: the vectorisable float32 exp,
                      row max/sum/dot, the compile notice

numba is imported on the first numba kernel call, never at import: with MINITENSOR_BACKEND=numpy
a training step runs without it.

Threads: kernels marked parallel split their outer loop over numba's threads (one per core by
default; numba.set_num_threads or NUMBA_NUM_THREADS=1 for serial). Small inputs run serially.

Inputs may be float32 or float64 and non-contiguous views; outputs keep the input dtype.
"""

from . import adam as _adam
from . import bias_activation as _ba
from . import cross_entropy as _ce
from . import dropout as _do
from . import erf as _erf
from . import flash_attention as _attn
from . import layer_norm as _ln
from . import matmul as _mm
from . import softmax as _sm
from .backend_switch import (
    BACKENDS,
    are_deterministic_algorithms_enabled,
    dispatch,
    get_backend,
    lazy,
    set_backend,
    use_backend,
    use_deterministic_algorithms,
)

# the fast products load on the first numba matmul (kernels/fast_matmul)
_FAST = ".fast_matmul.products"
matmul = dispatch(lazy(_FAST, "matmul"), _mm.matmul_numpy)
matmul_grad_a = dispatch(lazy(_FAST, "matmul_grad_a"), _mm.matmul_grad_a_numpy)
matmul_grad_b = dispatch(lazy(_FAST, "matmul_grad_b"), _mm.matmul_grad_b_numpy)
matmul_route = lazy(_FAST, "route")  # who computes a @ b on numba: tiles, BLAS, numpy
tiled_matmul = lazy(_FAST, "tiled_matmul")  # a @ b by the tile kernel, whatever route says
blas_matmul = lazy(_FAST, "gemm_product")  # a @ b by the BLAS-calling kernels

erf = dispatch(lazy(".erf", "erf_numba"), _erf.erf_numpy)

softmax_forward = dispatch(_sm.softmax_forward_numba, _sm.softmax_forward_numpy)
softmax_backward = dispatch(_sm.softmax_backward_numba, _sm.softmax_backward_numpy)
log_softmax_forward = dispatch(_sm.log_softmax_forward_numba, _sm.log_softmax_forward_numpy)
log_softmax_backward = dispatch(_sm.log_softmax_backward_numba, _sm.log_softmax_backward_numpy)

cross_entropy_forward = dispatch(_ce.cross_entropy_forward_numba, _ce.cross_entropy_forward_numpy)
cross_entropy_backward = dispatch(
    _ce.cross_entropy_backward_numba, _ce.cross_entropy_backward_numpy
)

dropout = dispatch(_do.dropout_numba, _do.dropout_numpy)

adam_update = dispatch(_adam.adam_update_numba, _adam.adam_update_numpy)

layer_norm_forward = dispatch(_ln.layer_norm_forward_numba, _ln.layer_norm_forward_numpy)
layer_norm_backward = dispatch(_ln.layer_norm_backward_numba, _ln.layer_norm_backward_numpy)

bias_activation_forward = dispatch(
    _ba.bias_activation_forward_numba, _ba.bias_activation_forward_numpy
)
bias_activation_backward = dispatch(
    _ba.bias_activation_backward_numba, _ba.bias_activation_backward_numpy
)

fused_attention_forward = _attn.fused_attention_forward
fused_attention_backward = _attn.fused_attention_backward

KERNELS = (
    matmul,
    matmul_grad_a,
    matmul_grad_b,
    erf,
    softmax_forward,
    softmax_backward,
    log_softmax_forward,
    log_softmax_backward,
    cross_entropy_forward,
    cross_entropy_backward,
    layer_norm_forward,
    layer_norm_backward,
    dropout,
    adam_update,
    bias_activation_forward,
    bias_activation_backward,
    fused_attention_forward,
    fused_attention_backward,
)

__all__ = [k.__name__ for k in KERNELS] + [
    "BACKENDS",
    "KERNELS",
    "get_backend",
    "set_backend",
    "use_backend",
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "matmul_route",
    "tiled_matmul",
    "blas_matmul",
]
