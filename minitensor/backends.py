"""`torch.backends`' switches that GPU training code sets, e.g. nanoGPT's

    torch.backends.cuda.matmul.allow_tf32 = True   # TensorFloat-32 matmuls on Ampere GPUs
    torch.backends.cudnn.allow_tf32 = True

They choose GPU kernels (TF32 matmuls, cuDNN's autotuning). minitensor runs on the CPU, where
torch ignores them too: here they are plain attributes that keep what was set and change
nothing, and every `is_available()` is False.

(The switch between minitensor's own numba kernels and their numpy twins is another room:
`minitensor/kernels/backend_switch.py`, `mt.set_backend`.)
"""

from types import SimpleNamespace


def _unavailable() -> bool:
    return False


cuda = SimpleNamespace(
    matmul=SimpleNamespace(
        allow_tf32=False,
        allow_fp16_reduced_precision_reduction=True,
        allow_bf16_reduced_precision_reduction=True,
    ),
    is_built=_unavailable,
)
cudnn = SimpleNamespace(
    allow_tf32=True, benchmark=False, deterministic=False, enabled=True, is_available=_unavailable
)
mps = SimpleNamespace(is_available=_unavailable, is_built=_unavailable)
