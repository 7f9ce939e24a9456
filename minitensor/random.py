"""One random generator for the whole library, so `mt.manual_seed(n)` makes every random op
(randn, dropout, init, sampling) reproducible."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

_rng = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    """Seed every random op of minitensor."""
    _rng[0] = np.random.default_rng(int(seed))


def generator() -> np.random.Generator:
    """The shared numpy Generator (use it in new ops that need randomness)."""
    return _rng[0]


def get_rng_state() -> str:
    """The generator's state as a JSON string (safe to store in a checkpoint)."""
    return json.dumps(_rng[0].bit_generator.state)


def set_rng_state(state: str | dict[str, Any]) -> None:
    """Restore a state returned by :func:`get_rng_state`."""
    st = json.loads(state) if isinstance(state, str) else state
    if st.get("bit_generator") != "PCG64":
        raise ValueError(f"set_rng_state: expected a PCG64 state, got {st.get('bit_generator')!r}")
    gen = np.random.Generator(np.random.PCG64())
    gen.bit_generator.state = st
    _rng[0] = gen


class Generator:
    """torch.Generator stand-in: a random stream of its own, for the `generator=` arguments
    (DataLoader's shuffling, random_split) that must be reproducible without touching the
    shared generator. manual_seed(n) returns the generator itself, as torch's does, so
    `Generator().manual_seed(42)` is the usual spelling. The draws are numpy's PCG64, so the
    numbers differ from torch's for the same seed; the same seed gives the same numbers here."""

    _DEFAULT_SEED = 67280421310721  # torch's initial_seed() of a fresh Generator

    def __init__(self, device: Any = "cpu") -> None:
        if str(getattr(device, "type", device)).split(":")[0] != "cpu":
            raise RuntimeError(
                f"Generator: device {device!r} is not available; minitensor runs on the CPU only"
            )
        self.device = "cpu"
        self.manual_seed(self._DEFAULT_SEED)

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from `seed`; returns self."""
        self._seed = int(seed)
        self.numpy_rng = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        """Re-seed from the operating system's entropy; returns the new seed."""
        new = int(np.random.SeedSequence().entropy % 2**63)
        self.manual_seed(new)
        return new

    def initial_seed(self) -> int:
        """The seed the stream last started from."""
        return self._seed

    def get_state(self) -> str:
        """The stream's state as a JSON string (as get_rng_state)."""
        return json.dumps({"seed": self._seed, "state": self.numpy_rng.bit_generator.state})

    def set_state(self, state: str) -> Generator:
        """Restore a state returned by get_state; returns self."""
        st = json.loads(state)
        self.manual_seed(st["seed"])
        self.numpy_rng.bit_generator.state = st["state"]
        return self
