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
