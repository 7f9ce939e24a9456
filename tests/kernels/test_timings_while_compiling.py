"""While a helper process compiles kernels ahead, nothing is timed: the helper takes the other
core and a kernel that wants its parallel build runs its serial one, so a choice timed then
would be wrong for the rest of the process (on a cold cache the fused attention's tile sizes
were chosen so: the slowest of the three on long sequences). The choosers answer with their
default, remember nothing, and time the layout once the helper is done. The helper is faked
here (`compile_ahead.pending`); the timings are real but their results are not asserted."""

import numpy as np
import pytest

from minitensor.kernels import compile_ahead, jit
from minitensor.kernels import flash_attention as FA
from minitensor.kernels.fast_matmul import products as P


@pytest.fixture
def helper(monkeypatch):
    """A fake compile-ahead helper: `helper["busy"]` says whether it is compiling."""
    state = {"busy": True}
    monkeypatch.setattr(compile_ahead, "pending", lambda: state["busy"])
    return state


def test_median_times_times_nothing_while_the_helper_compiles(helper):
    calls = []
    assert jit.median_times([lambda: calls.append(1)]) is None
    assert calls == []  # not even the untimed first run
    helper["busy"] = False
    assert len(jit.median_times([lambda: calls.append(1)], rounds=3)) == 1
    assert len(calls) == 4


def test_median_times_gives_up_when_the_first_run_starts_the_helper(helper):
    """The first run of a call may be a kernel's first call, which sends its parallel build
    to the helper: then nothing is timed either."""
    helper["busy"] = False
    runs = []

    def first_call_starts_the_helper():
        runs.append(1)
        helper["busy"] = True

    assert jit.median_times([first_call_starts_the_helper]) is None
    assert runs == [1]


def _attention(rng):
    q, k, v = (rng.standard_normal((1, 2, 64, 16)).astype(np.float32) for _ in range(3))
    return q, k, v


def test_tile_sizes_are_the_default_and_not_kept_while_the_helper_compiles(helper, monkeypatch):
    monkeypatch.setattr(FA, "_CHOSEN", {})
    q, k, v = _attention(np.random.default_rng(0))
    want, _ = FA.fused_attention_forward_numpy(q, k, v, None, None, None)
    got, _ = FA.fused_attention_forward_numba(q, k, v, None, None, None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert FA._CHOSEN == {}  # nothing kept: the layout is timed later
    helper["busy"] = False
    FA.fused_attention_forward_numba(q, k, v, None, None, None)
    assert list(FA._CHOSEN.values())[0] in FA.TILES


def _linear():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((896, 128)).astype(np.float32)
    return x, rng.standard_normal((128, 512)).astype(np.float32)


@pytest.mark.parametrize("candidate", ["gemm", "tiles"])
def test_fastest_answers_numpy_provisionally_while_the_helper_compiles(
    helper, candidate, monkeypatch
):
    monkeypatch.setattr(P, "_FASTEST", {})
    a, b = _linear() if candidate == "gemm" else (np.ones((64, 16, 16), np.float32),) * 2
    timed = []
    timings = P._timings
    monkeypatch.setattr(P, "_timings", lambda *args: timed.append(1) or timings(*args))
    answer = P.fastest(a, b, candidate)
    assert isinstance(answer, P._Provisional) and answer[0] == "numpy"
    assert P._FASTEST == {} and timed == []  # nothing run: it costs every product meanwhile
    helper["busy"] = False
    assert not isinstance(P.fastest(a, b, candidate), P._Provisional)
    assert len(P._FASTEST) == 1


def test_a_provisional_route_is_not_remembered(helper, monkeypatch):
    """_choose asks again for a layout whose answer was provisional: once the helper is done it
    gets the timed one (here the candidate, made to win)."""
    monkeypatch.setattr(P, "_FASTEST", {})
    monkeypatch.setattr(P, "_owner", ["numba"])
    monkeypatch.setattr(P, "threads", lambda: 2)
    monkeypatch.setattr(P, "blas_threads", lambda: 2)

    def timings(products, a, b):  # as _timings: None while the helper compiles; gemm wins
        return None if helper["busy"] else [1.0] + [2.0] * (len(products) - 1)

    monkeypatch.setattr(P, "_timings", timings)
    a, b = _linear()
    if a.dtype not in P.GEMM:
        pytest.skip("no OpenBLAS gemm found: the layout goes to np.matmul by its layout")
    helper["busy"] = True
    first = P._choose(a, b)
    assert isinstance(first, P._Provisional)
    helper["busy"] = False
    name, _ = P._choose(a, b)
    assert name == "gemm"


def test_a_helper_started_between_the_two_timings_leaves_the_route_provisional(monkeypatch):
    """A candidate that won its first timing is timed again (`_wins_again`); when that second
    timing finds the helper compiling (None), the answer is provisional, not a loss that would
    be remembered for the process."""
    monkeypatch.setattr(P, "_FASTEST", {})
    monkeypatch.setattr(P, "_owner", ["numba"])
    monkeypatch.setattr(P, "threads", lambda: 2)
    monkeypatch.setattr(P, "blas_threads", lambda: 2)
    answers = iter([None])  # the first timing: gemm wins; the second: the helper compiles

    def timings(products, a, b):
        if len(products) == 2:
            return next(answers, [1.0, 2.0])
        return [1.0] + [2.0] * (len(products) - 1)

    monkeypatch.setattr(P, "_timings", timings)
    a, b = _linear()
    if a.dtype not in P.GEMM:
        pytest.skip("no OpenBLAS gemm found: the layout goes to np.matmul by its layout")
    assert isinstance(P._choose(a, b), P._Provisional)
    name, _ = P._choose(a, b)  # asked again, both timings answer: the candidate
    assert name == "gemm"


def test_same_bits_route_times_nothing_and_need_not_wait(helper, monkeypatch):
    """Under deterministic algorithms with BLAS owning the cores, a layout's bits are checked
    (two products of random operands, compared) and nothing is timed: the check runs at once
    while the helper compiles, and is remembered."""
    monkeypatch.setattr(P, "_SAME_BITS", {})
    monkeypatch.setattr(P, "_owner", ["blas"])
    monkeypatch.setattr(P, "cores", lambda: 2)
    monkeypatch.setattr(P, "blas_threads", lambda: 2)
    monkeypatch.setattr(P, "_timings", lambda *args: pytest.fail("same_bits_route timed"))
    checked = []
    gives_same_bits = P._gives_same_bits
    monkeypatch.setattr(
        P, "_gives_same_bits", lambda *args: checked.append(1) or gives_same_bits(*args)
    )
    a, b = _linear()
    for _ in range(3):
        answer = P.same_bits_route(a, b, P._NUMPY)
        assert not isinstance(answer, P._Provisional)
    assert len(P._SAME_BITS) == 1 and checked == [1]
