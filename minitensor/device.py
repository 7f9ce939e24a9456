"""Where a tensor lives: minitensor runs on the CPU, so torch's device names come down to one.

`Device` is torch.device's stand-in (``mt.device("cpu")``), `check_device` the one check that
every ``device=`` argument (tensor creation, ``.to``, ``Module.to``, autocast, loading) goes
through: the CPU spellings pass, any other device is an error that says so.
"""

from __future__ import annotations

from typing import Any


def check_device(device: Any, where: str) -> None:
    """Accept torch's CPU device spellings ('cpu', 'cpu:0', a device object whose .type is
    'cpu', None); refuse any other device with a clear error (minitensor runs on the CPU)."""
    if device is None:
        return
    kind = getattr(device, "type", device)
    if not (isinstance(kind, str) and kind.split(":")[0] == "cpu"):
        raise RuntimeError(
            f"{where}: device {device!r} is not available; minitensor runs on "
            f"the CPU only (use 'cpu')"
        )


class Device:
    """torch.device stand-in: minitensor runs on the CPU, so only 'cpu' exists."""

    def __init__(self, type: str = "cpu", index: int | None = None) -> None:
        type = str(type)
        if type.split(":")[0] != "cpu":
            raise RuntimeError(f"device: minitensor runs on the CPU only, got {type!r}")
        self.type = "cpu"
        self.index = index

    def __repr__(self) -> str:
        return "device(type='cpu')"

    def __str__(self) -> str:
        return "cpu"

    def __eq__(self, other: object) -> bool:
        return str(other) == "cpu"

    def __hash__(self) -> int:
        return hash("cpu")
