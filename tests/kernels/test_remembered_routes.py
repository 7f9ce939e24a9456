"""products._choose remembers each layout's route: a warm layout gets the answer the rule
gives it cold, a watched winner is asked again until its watch ends, and every change of what
the rule reads — the cores' owner, deterministic algorithms, a thread count, BLAS's gemm, a
fresh _FASTEST or _SAME_BITS — gets a new decision. No timing here: the timings are faked."""

import numpy as np
import pytest

import minitensor as mt
from minitensor.kernels.fast_matmul import products as P

NUMPY_PRODUCTS = (P.numpy_product, P._matmul_as_is, P.numpy_on_cores)


def _stack():
    """q @ kᵀ of attention, kᵀ a view: a layout the tiles are timed on."""
    q = np.random.default_rng(0).standard_normal((256, 16, 16)).astype(np.float32)
    return q, np.swapaxes(q, -1, -2)


def _linear():
    """A Linear layer's product: a layout gemm is timed on (where BLAS's gemm has float32)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((896, 128)).astype(np.float32)
    return x, rng.standard_normal((128, 512)).astype(np.float32)


def _layouts():
    """Every kind of layout the rule tells apart."""
    rng = np.random.default_rng(2)
    small = rng.standard_normal((8, 8)).astype(np.float32)
    x, w = _linear()
    return [
        (small, small),  # too small to share
        (small[None].repeat(4, 0), small),  # a small stack
        (x.astype(np.int64), w.astype(np.int64)),  # integers
        (x, w.astype(np.float64)),  # mixed dtypes
        (np.zeros((0, 128), np.float32), w),  # empty
        _stack(),  # the tiles' ground
        (np.zeros((4, 1, 64, 32)), np.zeros((1, 3, 32, 64))),  # broadcast batch, float64
        (x, w),  # gemm's ground
        (x, np.ascontiguousarray(w.T).T),  # x·Wᵀ, Wᵀ a view
        (np.zeros((1000, 1000), np.float32), np.zeros((1000, 1), np.float32)),  # gemv
    ]


@pytest.fixture
def state(monkeypatch):
    """The rule's state made up (2 threads for numba's pool and for BLAS, numba owning the cores,
    fresh tables) and a count of the rule's calls to `fastest`, which answers as if the
    candidate won."""
    counts = {"numba": 2, "blas": 2, "cores": 2}
    monkeypatch.setattr(P, "threads", lambda: counts["numba"])
    monkeypatch.setattr(P, "blas_threads", lambda: counts["blas"])
    monkeypatch.setattr(P, "cores", lambda: counts["cores"])
    monkeypatch.setattr(P, "_owner", ["numba"])
    monkeypatch.setattr(P, "_FASTEST", {})
    monkeypatch.setattr(P, "_SAME_BITS", {})
    counts["fastest"] = []
    winners = {"tiles": P.tiled_matmul, "gemm": P.gemm_product}

    def fastest(a, b, candidate):
        counts["fastest"].append(candidate)
        return candidate, winners[candidate]

    monkeypatch.setattr(P, "fastest", fastest)
    return counts


def _by_shape():
    """The deterministic route of a single float32 product of 2^20 multiply-adds or more (a
    stack of matrices goes to np.matmul on one thread whatever its size)."""
    return ("gemm", P.gemm_one_blas_thread) if np.dtype(np.float32) in P.GEMM else P._NUMPY


def _numpy_wins(products, a, b):
    return [1.0 if p in NUMPY_PRODUCTS else 2.0 for p in products]


def _cold(a, b):
    """The rule's answer for a @ b, worked out (nothing remembered read)."""
    deterministic = mt.are_deterministic_algorithms_enabled()
    return P._route_by_layout(a, b, deterministic) or P._route_by_state(a, b, deterministic)


@pytest.mark.parametrize("owner", ["numba", "blas", "both"])
@pytest.mark.parametrize("deterministic", [False, True])
def test_a_warm_layout_gets_the_cold_decision(owner, deterministic, monkeypatch):
    """Every layout's remembered (route, product) is the one the rule gives it cold, and a warm
    layout does not work the rule out again."""
    monkeypatch.setattr(P, "_FASTEST", {})
    monkeypatch.setattr(P, "_SAME_BITS", {})
    monkeypatch.setattr(P, "_owner", [owner])
    monkeypatch.setattr(P, "threads", lambda: 1 if owner == "blas" else 2)  # as jit.threads
    monkeypatch.setattr(P, "cores", lambda: 2)
    monkeypatch.setattr(P, "blas_threads", lambda: 2)
    monkeypatch.setattr(P, "_timings", _numpy_wins)  # no watched winner: the answers stay
    monkeypatch.setattr(P, "_other_numpy", lambda named, times, best: None)  # (nor np.matmul)
    mt.use_deterministic_algorithms(deterministic)
    layouts = _layouts()
    first = [P._choose(a, b) for a, b in layouts]
    assert first == [_cold(a, b) for a, b in layouts]

    def worked_out(*args):
        raise AssertionError("a warm layout worked its route out again")

    monkeypatch.setattr(P, "_route_by_layout", worked_out)
    monkeypatch.setattr(P, "_route_by_state", worked_out)
    assert [P._choose(a, b) for a, b in layouts] == first


def test_small_products_read_no_thread_count(monkeypatch):
    """Where the layout alone decides (most small ops; under deterministic algorithms with
    numba owning the cores, every product), no thread count is read, warm or cold: those reads
    cost a small product more than remembering its route saves."""

    def costly():
        raise AssertionError("a thread count was read")

    for name in ("threads", "cores", "blas_threads"):
        monkeypatch.setattr(P, name, costly)
    monkeypatch.setattr(P, "_owner", ["numba"])
    small_ones = _layouts()[:5]
    for _ in range(2):
        assert all(P._choose(a, b)[0] == "numpy" for a, b in small_ones)
    mt.use_deterministic_algorithms(True)
    for _ in range(2):
        assert P._choose(*_linear()) == _by_shape()
        assert P._choose(*_stack()) == P._DETERMINISTIC_TILES


@pytest.fixture
def costing(monkeypatch):
    """A fake clock for the watch (`_Watched` times each call with time.perf_counter):
    costing(product, cost) is `product`, each call of which "takes" `cost`."""
    clock = [0.0]
    monkeypatch.setattr(P.time, "perf_counter", lambda: clock[0])

    def costing(product, cost):
        def call(*args, **kwargs):
            clock[0] += cost
            return product(*args, **kwargs)

        call.__name__ = product.__name__
        return call

    return costing


@pytest.mark.parametrize(
    "candidate_cost, numpy_cost, want",
    [(3.0, 1.0, "numpy"), (1.0, 3.0, "tiles")],
    ids=["slower-in-the-program", "kept"],
)
def test_a_watched_winner_is_not_remembered_until_its_watch_ends(
    candidate_cost, numpy_cost, want, costing, monkeypatch
):
    """While a winning candidate is watched (its first calls, then as many of np.matmul's best,
    each timed), `_choose` answers with what _FASTEST holds for its layout (the watch itself), never
    a remembered copy; once the watch ends, the watch's final decision is the answer, and that
    one is remembered. (A fake clock: each call of the tiles or of np.matmul "takes" its cost.)"""
    monkeypatch.setattr(P, "threads", lambda: 2)
    monkeypatch.setattr(P, "blas_threads", lambda: 2)
    monkeypatch.setattr(P, "_FASTEST", {})
    monkeypatch.setattr(P, "tiled_matmul", costing(P.tiled_matmul, candidate_cost))
    for name in ("numpy_product", "_matmul_as_is"):
        monkeypatch.setattr(P, name, costing(getattr(P, name), numpy_cost))
    numpy_configs = (P.numpy_product, P._matmul_as_is)
    monkeypatch.setattr(
        P,
        "_timings",
        lambda products, a, b: [2.0 if p in numpy_configs else 1.0 for p in products],
    )  # the candidates won the timing
    q, k_t = _stack()
    for _ in range(2 * P._WATCHED_CALLS):
        name, product = P._choose(q, k_t)
        assert name == "tiles" and isinstance(product, P._Watched)
        np.testing.assert_allclose(P.matmul(q, k_t), q @ k_t, rtol=1e-5, atol=1e-5)
    (final,) = (v for key, v in P._FASTEST.items() if key[0] == "tiles")
    assert P._choose(q, k_t) == final and final[0] == want
    assert not isinstance(final[1], P._Watched)
    monkeypatch.setattr(P, "fastest", lambda a, b, candidate: pytest.fail("asked again"))
    assert P._choose(q, k_t) == final  # remembered now


@pytest.mark.parametrize(
    "one_thread_cost, two_threads_cost, want",
    [(3.0, 1.0, "numpy_on_cores"), (1.0, 1.0, "numpy_product"), (1.0, 3.0, "numpy_product")],
    ids=["caught-at-a-bad-moment", "a-tie-keeps-the-winner", "kept"],
)
def test_np_matmuls_winning_configuration_is_watched_against_the_other(
    one_thread_cost, two_threads_cost, want, costing, monkeypatch
):
    """Where np.matmul wins a layout over the candidate, and one thread (numpy_product under
    numba's owner) was timed faster than BLAS's threads (numpy_on_cores), the two are timed
    again where they run: the other configuration takes the layout only if clearly faster
    there. (A fake clock, as above.)"""
    monkeypatch.setattr(P, "threads", lambda: 2)
    monkeypatch.setattr(P, "cores", lambda: 2)
    monkeypatch.setattr(P, "blas_threads", lambda: 2)
    monkeypatch.setattr(P, "_owner", ["numba"])
    monkeypatch.setattr(P.config, "blas_spin_is_short", lambda: True)
    monkeypatch.setattr(P, "_FASTEST", {})
    monkeypatch.setattr(P, "numpy_product", costing(P.numpy_product, one_thread_cost))
    monkeypatch.setattr(P, "_matmul_as_is", costing(P._matmul_as_is, two_threads_cost))
    monkeypatch.setattr(P, "numpy_on_cores", P._matmul_as_is)  # (settled: the same call)
    timed = {P.numpy_product: 1.0, P._matmul_as_is: 1.5}  # one thread won the timing
    monkeypatch.setattr(P, "_timings", lambda products, a, b: [timed.get(p, 9.0) for p in products])
    x, w = _linear()
    for _ in range(2 * P._WATCHED_CALLS):
        name, product = P._choose(x, w)
        assert name == "numpy" and isinstance(product, P._Watched) and not product.must_win
        np.testing.assert_allclose(P.matmul(x, w), x @ w, rtol=1e-4, atol=1e-3)
    (final,) = (v for key, v in P._FASTEST.items() if key[0] == "gemm")
    assert (
        final[0] == "numpy"
        and final[1].__name__
        == {
            "numpy_on_cores": "_matmul_as_is",
            "numpy_product": "numpy_product",
        }[want]
    )
    assert P._choose(x, w) == final  # remembered now


def test_a_change_of_state_decides_anew(state, monkeypatch):
    """The route of a layout is decided again when the thread counts, the cores' owner,
    deterministic algorithms or BLAS's gemm change, and the earlier answer comes back with the
    earlier state."""
    q, k_t = _stack()
    calls = state["fastest"]
    assert P._choose(q, k_t)[0] == "tiles" and P._choose(q, k_t)[0] == "tiles"
    assert calls == ["tiles"]  # remembered
    state["numba"] = 1  # polite threads on a busy machine, or numba.set_num_threads(1)
    P._choose(q, k_t)
    assert len(calls) == 2
    state["numba"] = 2
    P._choose(q, k_t)
    assert len(calls) == 2  # remembered for two threads
    state["blas"] = 4
    P._choose(q, k_t)
    assert len(calls) == 3
    monkeypatch.setattr(P, "_owner", ["both"])
    x, w = _linear()
    assert P._choose(x, w) == P._NUMPY and P._choose(q, k_t)[0] == "tiles"
    assert len(calls) == 4  # the stack asked again; under "both", no gemm for the Linear
    monkeypatch.setattr(P, "_owner", ["numba"])
    has_gemm = np.dtype(np.float32) in P.GEMM
    assert P._choose(x, w)[0] == ("gemm" if has_gemm else "numpy")
    mt.use_deterministic_algorithms(True)
    # the tiles with their default tile shape, whatever was timed
    assert P._choose(q, k_t) == P._DETERMINISTIC_TILES
    mt.use_deterministic_algorithms(False)
    assert P._choose(q, k_t)[0] == "tiles"
    monkeypatch.setattr(P, "GEMM", {})
    assert P._choose(x, w) == P._NUMPY  # no BLAS to call from the threads


def test_a_thread_count_that_changed_while_the_rule_ran_is_not_remembered(state, monkeypatch):
    """The answer is kept under the thread counts read before the rule ran only if they still
    hold after it: the rule read them itself, and may have read others."""
    q, k_t = _stack()
    calls = []

    def fastest_while_the_machine_gets_busy(a, b, candidate):
        calls.append(candidate)
        state["numba"] = 1 if len(calls) == 1 else 2
        return candidate, P.tiled_matmul

    monkeypatch.setattr(P, "fastest", fastest_while_the_machine_gets_busy)
    P._choose(q, k_t)
    state["numba"] = 2
    P._choose(q, k_t)
    assert len(calls) == 2  # not remembered under two threads the first time
    P._choose(q, k_t)
    assert len(calls) == 2


def test_a_fresh_table_forgets_the_routes(state, monkeypatch):
    """The routes are remembered in _FASTEST (or _SAME_BITS under deterministic algorithms):
    replacing the table forgets them; `_forget_routes` forgets them and keeps the timings."""
    q, k_t = _stack()
    calls = state["fastest"]
    P._choose(q, k_t)
    monkeypatch.setattr(P, "_FASTEST", {})
    P._choose(q, k_t)
    assert calls == ["tiles", "tiles"]
    timing = ("tiles", "a layout timed")
    P._FASTEST[timing] = ("numpy", P.numpy_product)
    P._forget_routes()
    P._choose(q, k_t)
    assert len(calls) == 3 and timing in P._FASTEST

    monkeypatch.setattr(P, "_owner", ["blas"])  # BLAS's threads may take a deterministic route
    checked = []
    monkeypatch.setattr(P, "same_bits_route", lambda a, b, ref: checked.append(ref) or ref)
    mt.use_deterministic_algorithms(True)
    x, w = _linear()
    P._choose(x, w)
    P._choose(x, w)
    assert len(checked) == 1
    monkeypatch.setattr(P, "_SAME_BITS", {})
    P._choose(x, w)
    assert len(checked) == 2
    state["cores"] = 1
    P._choose(x, w)
    assert len(checked) == 3  # the cores BLAS may take: another decision
