"""torch.accelerator as a machine without a GPU has it: minitensor runs on the CPU only.

Newer PyTorch programs pick their device with

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() \\
        else torch.device("cpu")

and here that line picks the CPU, as it does under torch on a CPU-only machine (the CPU is
not an accelerator: is_available() is False and current_accelerator() is None).
"""

from __future__ import annotations


def is_available() -> bool:
    """False: minitensor has no accelerator."""
    return False


def current_accelerator(check_available: bool = False) -> None:
    """None: there is no accelerator (torch returns None too on a CPU-only machine)."""
    return None


def device_count() -> int:
    """0 accelerators."""
    return 0


__all__ = ["is_available", "current_accelerator", "device_count"]
