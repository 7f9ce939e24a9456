"""minitensor.utils, as torch.utils: `data` holds Dataset, DataLoader and the samplers."""

from . import data

__all__ = ["data"]
