"""Shared fixtures for the test suite (keep this small)."""

import os
import sys

# The tests compare parallel builds with serial ones, bit for bit, and time the cores' owners:
# every build compiles where it is first called (the demos and benchmarks the tests start
# inherit this). tests/kernels/test_compile_ahead.py tests the helper process on its own.
os.environ.setdefault("MINITENSOR_COMPILE_AHEAD", "0")
# Between 64 and 256 keys attention's two paths are timed and the faster kept: which node a
# test's forward makes would depend on the machine's load. The tests fix the fused node there;
# tests/ops/test_attention_timing.py turns the timing on and tests it.
os.environ.setdefault("MINITENSOR_ATTENTION_TIMING", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import minitensor as mt  # noqa: E402
from minitensor.kernels import ownership  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_minitensor():
    """Every test starts from the same minitensor random state, and leaves the process-wide
    deterministic switch as it found it (the demos, run in-process by some tests, turn it on),
    and the cores to numba's threads (a test's training loop may have timed the owners: the
    next test must not inherit the decision; kernels/ownership.py)."""
    mt.manual_seed(0)
    deterministic = mt.are_deterministic_algorithms_enabled()
    yield
    mt.use_deterministic_algorithms(deterministic)
    ownership.reset()
    backends = sys.modules.get("torch.backends")
    if backends is not None:  # torch's test utilities (OpInfo) freeze its flags as they import
        backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True


@pytest.fixture
def rng():
    """A fresh numpy generator with a fixed seed."""
    return np.random.default_rng(1234)


@pytest.fixture
def leaf(rng):
    """leaf(*shape, positive=False) -> a float64 leaf that requires grad, for gradcheck.

    Values stay at least 0.2 away from 0 (kinks of abs/relu, poles of 1/x), or in [0.5, 2.5)
    with positive=True (domains of log, sqrt, pow).
    """

    def make(*shape, positive=False, name=None):
        if positive:
            data = rng.uniform(0.5, 2.5, size=shape)
        else:
            data = rng.standard_normal(shape)
            data = data + 0.2 * np.where(data >= 0, 1.0, -1.0)
        return mt.tensor(data, dtype=mt.float64, requires_grad=True, name=name)

    return make


# Hypothesis profiles: "ci" (the default: a small sample, deterministic) and "thorough" (for
# the fuzzer: `MINITENSOR_FUZZ=thorough python -m pytest -m fuzz --hypothesis-seed=N`). Tests
# that set max_examples themselves keep their own.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=1500,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(__import__("os").environ.get("MINITENSOR_FUZZ", "ci"))
