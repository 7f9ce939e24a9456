"""torch.cuda as a machine without a GPU has it: minitensor runs on the CPU only.

So the usual device line works unchanged and picks the CPU:

    device = "cuda" if mt.cuda.is_available() else "cpu"

and the seeding and timing calls that PyTorch programs make "just in case" (manual_seed,
manual_seed_all, synchronize, empty_cache) do nothing. Asking for a CUDA device —
mt.device("cuda"), x.to("cuda"), x.cuda(), model.cuda(), device="cuda" — is an error that
says minitensor runs on the CPU.
"""

from __future__ import annotations

from typing import Any, NoReturn

from . import amp  # torch.cuda.amp.GradScaler: the older spelling of torch.amp's


def is_available() -> bool:
    """False: there is never a GPU for minitensor."""
    return False


def device_count() -> int:
    """0 GPUs."""
    return 0


def is_initialized() -> bool:
    return False


def manual_seed(seed: int) -> None:
    """Seeds the (absent) GPU generators: nothing to do. The CPU is seeded by mt.manual_seed."""


def manual_seed_all(seed: int) -> None:
    """Seeds every (absent) GPU: nothing to do."""


def synchronize(device: Any = None) -> None:
    """Waits for the (absent) GPU's queued work: there is none, every op here has finished
    when it returns."""


def empty_cache() -> None:
    """Frees the (absent) GPU's cached memory: nothing to do."""


def current_device() -> NoReturn:
    raise RuntimeError(
        "cuda.current_device: CUDA is not available; minitensor runs on the CPU only"
    )


__all__ = [
    "amp",
    "is_available",
    "device_count",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "synchronize",
    "empty_cache",
    "current_device",
]
