"""Who owns the cores (kernels/ownership.py): the trial of whole training steps, timed with
a clock the test controls, and what each owner changes in the products and kernels."""

import numpy as np
import pytest

import minitensor as mt
from minitensor.kernels import jit, ownership
from minitensor.kernels.fast_matmul import blas, products

TRIAL_STEPS = ownership.BLOCK * 2 * ownership.ROUNDS  # numba and blas (BLAS's spin long)
BOTH_TRIAL_STEPS = ownership.BLOCK * 3 * ownership.ROUNDS  # and "both" (BLAS's spin short)


class Clock:
    """A clock that advances by the step time of whoever owns the cores when it is read."""

    def __init__(self, seconds):
        self.now, self.seconds = 0.0, seconds

    def __call__(self):
        self.now += self.seconds[ownership.core_owner()]
        return self.now


def run_steps(n, clock):
    for _ in range(n):
        ownership.step_ended(clock)


@pytest.fixture(autouse=True)
def _fresh_trial(monkeypatch):
    monkeypatch.delenv("MINITENSOR_CORE_OWNER", raising=False)
    monkeypatch.delenv("MINITENSOR_TUNING", raising=False)
    monkeypatch.setattr(ownership.config, "blas_spin_is_short", lambda: False)
    ownership.reset()
    yield
    ownership.reset()


def test_the_owner_with_faster_steps_keeps_the_cores():
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, Clock({"numba": 0.050, "blas": 0.030}))
    trial = mt.kernels.core_owner_trial()
    assert trial["state"] == "decided" and mt.kernels.core_owner() == "blas"
    counted = (ownership.BLOCK - 1) * ownership.ROUNDS  # a block's first step is not counted
    assert trial["times"]["numba"] == pytest.approx([0.050] * counted)
    assert trial["times"]["blas"] == pytest.approx([0.030] * counted)
    run_steps(10, Clock({"numba": 0.001, "blas": 1.0}))  # no second trial this soon
    assert mt.kernels.core_owner() == "blas"


def test_the_owners_are_timed_again_later_and_the_machine_of_then_decides():
    """A trial that ran while other work made BLAS's threads slow chose numba; once AGAIN_AFTER
    steps and AGAIN_AFTER_SECONDS of training have passed the owners are timed again, BLAS's
    are faster now and take the cores; the next trial waits twice as many of each."""
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, Clock({"numba": 0.030, "blas": 0.050}))
    trial = ownership.core_owner_trial()
    assert ownership.core_owner() == "numba" and trial["state"] == "decided"
    decided_at, decided_time = (
        trial["steps"],
        trial["again_at_time"] - ownership.AGAIN_AFTER_SECONDS,
    )
    assert trial["again_at"] == decided_at + ownership.AGAIN_AFTER
    # steps that reach AGAIN_AFTER_SECONDS at the 2·AGAIN_AFTER-th, not one before
    step = ownership.AGAIN_AFTER_SECONDS / (2 * ownership.AGAIN_AFTER - 0.5)
    now = Clock({"numba": step, "blas": step / 2})
    now.now = decided_time
    run_steps(ownership.AGAIN_AFTER + 1, now)
    assert ownership.core_owner() == "numba"  # steps enough, but not seconds enough
    run_steps(ownership.AGAIN_AFTER - 2, now)
    assert ownership.core_owner() == "numba"  # not yet
    run_steps(2 + TRIAL_STEPS, now)  # the step at the time, the one that starts it, the trial
    trial = ownership.core_owner_trial()
    assert ownership.core_owner() == "blas" and trial["state"] == "decided"
    counted = (ownership.BLOCK - 1) * ownership.ROUNDS
    assert trial["times"]["blas"] == pytest.approx([step / 2] * counted)  # this trial's only
    assert trial["again_at"] == trial["steps"] + 2 * ownership.AGAIN_AFTER
    assert trial["again_at_time"] == pytest.approx(now.now + 2 * ownership.AGAIN_AFTER_SECONDS)


def test_long_steps_are_timed_again_after_as_many_steps():
    """Steps of a second pass AGAIN_AFTER_SECONDS long before AGAIN_AFTER steps: the count of
    steps holds the trial back (each trial costs a third of its steps on the slower owners)."""
    clock = Clock({"numba": 1.0, "blas": 2.0})
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, clock)
    assert ownership.core_owner_trial()["state"] == "decided"
    run_steps(ownership.AGAIN_AFTER - 1, clock)
    assert ownership.core_owner_trial()["state"] == "decided"
    run_steps(2, clock)
    assert ownership.core_owner_trial()["state"] == "trying"


def test_numba_keeps_the_cores_when_blas_is_slower_or_within_the_margin():
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, Clock({"numba": 0.030, "blas": 0.050}))
    assert ownership.core_owner_trial()["state"] == "decided"
    assert ownership.core_owner() == "numba"
    ownership.reset()
    almost = 0.030 * (1 - ownership.MARGIN / 2)
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, Clock({"numba": 0.030, "blas": almost}))
    assert ownership.core_owner() == "numba"


def test_the_owners_take_turns_by_blocks_during_the_trial():
    owners = []
    clock = Clock({"numba": 0.05, "blas": 0.05})
    run_steps(ownership.WARMUP + 1, clock)
    for _ in range(TRIAL_STEPS - 1):
        owners.append(ownership.core_owner())
        ownership.step_ended(clock)
    block = ownership.BLOCK
    assert owners[:block] == ["numba"] * block
    assert owners[block : 2 * block] == ["blas"] * block
    assert owners[2 * block : 3 * block] == ["numba"] * block


def test_short_steps_never_start_the_trial():
    run_steps(100, Clock({"numba": ownership.MIN_STEP_SECONDS / 4, "blas": 0.0}))
    assert ownership.core_owner_trial()["state"] == "waiting"
    assert ownership.core_owner() == "numba"


def test_steps_that_were_long_only_at_the_start_leave_the_cores_with_numba():
    short = ownership.MIN_STEP_SECONDS / 4
    run_steps(ownership.WARMUP + 1, Clock({"numba": 1.0, "blas": 1.0}))  # compiling
    run_steps(TRIAL_STEPS, Clock({"numba": short, "blas": short / 2}))
    assert ownership.core_owner_trial()["state"] == "decided"
    assert ownership.core_owner() == "numba"


def test_deterministic_algorithms_hold_the_trial_too():
    """There BLAS stays on one thread, so "blas" means one thread for everything."""
    mt.use_deterministic_algorithms(True)
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, Clock({"numba": 0.05, "blas": 0.03}))
    assert ownership.core_owner_trial()["state"] == "decided"
    assert ownership.core_owner() == "blas"


def test_the_numpy_backend_holds_no_trial():
    with mt.kernels.use_backend("numpy"):
        run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, Clock({"numba": 0.05, "blas": 0.01}))
    assert ownership.core_owner_trial()["state"] == "waiting"


@pytest.mark.parametrize("owner", ownership.OWNERS)
def test_the_environment_fixes_the_owner(monkeypatch, owner):
    monkeypatch.setenv("MINITENSOR_CORE_OWNER", owner)
    run_steps(2, Clock({"numba": 0.05, "blas": 0.05}))
    assert ownership.core_owner_trial()["state"] == "fixed"
    assert ownership.core_owner() == owner


@pytest.mark.parametrize("owner", [None, "blas"])
def test_the_first_step_tells_the_compile_ahead_helper_once(monkeypatch, owner):
    """The first step's end is when the helper's warm-up has nothing left that the step
    calls (compile_ahead.first_step_ended), whether or not the owner is fixed."""
    if owner:
        monkeypatch.setenv("MINITENSOR_CORE_OWNER", owner)
    told = []
    monkeypatch.setattr(ownership.compile_ahead, "first_step_ended", lambda: told.append(1))
    run_steps(ownership.WARMUP + 2, Clock({"numba": 0.05, "blas": 0.05}))
    assert told == [1]


def test_a_wrong_owner_in_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv("MINITENSOR_CORE_OWNER", "bls")
    with pytest.raises(ValueError, match="MINITENSOR_CORE_OWNER='bls'.*trial, numba, blas or both"):
        ownership.step_ended(Clock({"numba": 0.05, "blas": 0.05}))


def test_no_tuning_means_numba_and_no_trial(monkeypatch):
    monkeypatch.setenv("MINITENSOR_TUNING", "0")
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, Clock({"numba": 0.05, "blas": 0.01}))
    assert ownership.core_owner_trial()["state"] == "fixed"
    assert ownership.core_owner() == "numba"


def test_an_optimizer_step_ends_a_training_step():
    w = mt.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = mt.optim.SGD([w], lr=0.1)
    for _ in range(3):
        (w * w).sum().backward()
        opt.step()
    assert ownership.core_owner_trial()["steps"] == 3


def _blas_threads_seen(monkeypatch):
    seen = []
    matmul = np.matmul

    def spy(a, b, out=None):
        seen.append(blas.blas_threads())
        return matmul(a, b, out=out)

    monkeypatch.setattr(products.np, "matmul", spy)
    return seen


def test_with_blas_owning_products_use_blas_threads_and_kernels_run_serially(monkeypatch, rng):
    a, b = rng.standard_normal((2, 64, 32), np.float32), rng.standard_normal((32, 48), np.float32)
    seen = _blas_threads_seen(monkeypatch)
    monkeypatch.setattr(products, "cores", lambda: 2)  # as on a 2-core machine, quiet
    with blas.blas_threads_at_most(8):
        start = blas.blas_threads()
        ownership._owner[0] = "blas"
        assert jit.threads() == 1
        np.testing.assert_allclose(products.numpy_product(a, b), a @ b, rtol=1e-5, atol=1e-5)
        mt.use_deterministic_algorithms(True)
        products.numpy_product(a, b)
        mt.use_deterministic_algorithms(False)
        ownership._owner[0] = "numba"
        products.numpy_product(a, b)
    assert seen == [min(2, start), 1, 1]
    assert blas.blas_threads() == start  # given back after each product


def test_under_deterministic_algorithms_a_change_of_owner_changes_no_bit(rng, monkeypatch):
    """Training with the owner switched every step gives the weights of training with numba's
    threads throughout, to the bit: products, reductions and kernels are cut at fixed places."""
    x = rng.standard_normal((512, 96)).astype(np.float32)
    y = rng.integers(0, 10, 512)

    def train(owners):
        mt.manual_seed(0)
        model = mt.nn.Sequential(mt.nn.Linear(96, 512), mt.nn.ReLU(), mt.nn.LayerNorm(512),
                                 mt.nn.Linear(512, 10))  # fmt: skip
        opt = mt.optim.Adam(model.parameters(), lr=1e-2)
        for owner in owners:
            ownership._owner[0] = owner
            opt.zero_grad()
            mt.nn.functional.cross_entropy(model(mt.tensor(x)), mt.tensor(y)).backward()
            opt.step()
        return [p.numpy().copy() for p in model.parameters()]

    monkeypatch.setenv("MINITENSOR_CORE_OWNER", "numba")  # no trial: the test sets the owner
    mt.use_deterministic_algorithms(True)
    for got, want in zip(train(["blas", "numba", "both"] * 2), train(["numba"] * 6)):
        np.testing.assert_array_equal(got, want)


def test_a_trained_model_gives_the_same_numbers_under_either_owner(rng):
    """The owner changes who computes, not what: a few Linear steps agree to rounding."""
    x = rng.standard_normal((256, 64)).astype(np.float32)

    def train(owner):
        mt.manual_seed(0)
        ownership._owner[0] = owner
        layer = mt.nn.Linear(64, 64)
        opt = mt.optim.Adam(layer.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            (layer(mt.tensor(x)) ** 2).mean().backward()
            opt.step()
        return layer.weight.numpy().copy()

    np.testing.assert_allclose(train("blas"), train("numba"), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(train("both"), train("numba"), rtol=1e-4, atol=1e-5)


def test_a_burst_of_other_work_over_one_block_does_not_sway_the_trial():
    clock = Clock({"numba": 0.050, "blas": 0.030})
    run_steps(ownership.WARMUP + 1 + ownership.BLOCK, clock)  # warm-up, numba's first block
    clock.seconds = {"numba": 0.050, "blas": 0.300}  # another tenant's burst: blas's block
    run_steps(ownership.BLOCK, clock)
    clock.seconds = {"numba": 0.050, "blas": 0.030}
    run_steps(TRIAL_STEPS - 2 * ownership.BLOCK, clock)
    assert ownership.core_owner_trial()["state"] == "decided"
    assert ownership.core_owner() == "blas"


def test_with_a_short_blas_spin_both_take_a_turn_and_may_win(monkeypatch):
    """Where BLAS's idle workers sleep soon (config.blas_spin_is_short), "both" is tried as a
    third owner, and keeps the cores if its steps were fastest by the margin."""
    monkeypatch.setattr(ownership.config, "blas_spin_is_short", lambda: True)
    clock = Clock({"numba": 0.050, "blas": 0.040, "both": 0.030})
    run_steps(ownership.WARMUP + 1, clock)
    owners = []
    for _ in range(BOTH_TRIAL_STEPS):
        owners.append(ownership.core_owner())
        ownership.step_ended(clock)
    block = ownership.BLOCK
    assert owners[: 3 * block] == ["numba"] * block + ["blas"] * block + ["both"] * block
    assert ownership.core_owner_trial()["state"] == "decided"
    assert ownership.core_owner() == "both"
    ownership.reset()
    run_steps(ownership.WARMUP + 1 + BOTH_TRIAL_STEPS,
              Clock({"numba": 0.050, "blas": 0.030, "both": 0.040}))  # fmt: skip
    assert ownership.core_owner() == "blas"  # the fastest of the three, not the last
    ownership.reset()
    almost = 0.050 * (1 - ownership.MARGIN / 2)
    run_steps(ownership.WARMUP + 1 + BOTH_TRIAL_STEPS,
              Clock({"numba": 0.050, "blas": 0.060, "both": almost}))  # fmt: skip
    assert ownership.core_owner() == "numba"


def test_with_the_spin_long_both_never_takes_a_turn():
    clock = Clock({"numba": 0.050, "blas": 0.040, "both": 0.001})
    run_steps(ownership.WARMUP + 1 + TRIAL_STEPS, clock)
    assert ownership.core_owner_trial()["state"] == "decided"
    assert ownership.core_owner() == "blas"
    assert ownership.core_owner_trial()["times"]["both"] == []


def test_under_both_products_use_blas_threads_and_kernels_numbas(monkeypatch, rng):
    """Under "both": np.matmul on BLAS's threads for every product (never numba's candidates), and
    the parallel kernels on numba's threads."""
    a, b = rng.standard_normal((256, 256), np.float32), rng.standard_normal((256, 256), np.float32)
    seen = _blas_threads_seen(monkeypatch)
    monkeypatch.setattr(products, "cores", lambda: 2)
    monkeypatch.setattr(jit, "cores", lambda: 2)
    with blas.blas_threads_at_most(8):
        start = blas.blas_threads()
        ownership._owner[0] = "both"
        assert jit.threads() == 2
        assert products.route(a, b) == "numpy"
        np.testing.assert_allclose(products.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert seen == [min(2, start)]


def test_blas_workers_are_told_when_blas_takes_or_gives_up_the_cores(monkeypatch):
    """BLAS's spin changes with the owner (long only while BLAS's threads alone own the
    cores): the trial tells fast_matmul/blas.py each time the "blas" owner starts or ends, and
    not between two other owners."""
    told = []
    monkeypatch.setattr(blas, "spin_for_owner", told.append)
    monkeypatch.setattr(ownership.config, "blas_spin_is_short", lambda: True)
    run_steps(ownership.WARMUP + 1, Clock({"numba": 1.0, "blas": 1.0, "both": 1.0}))
    run_steps(BOTH_TRIAL_STEPS, Clock({"numba": 1.0, "blas": 0.5, "both": 1.0}))
    assert ownership.core_owner() == "blas"
    # numba → blas → both, three rounds; then blas takes the cores for good
    assert told == ["blas", "both"] * ownership.ROUNDS + ["blas"]
    ownership.reset()
    assert told[-1] == "numba"


def test_both_is_not_tried_under_deterministic_algorithms(monkeypatch):
    """Under deterministic algorithms a Linear layer's products alternate between BLAS's
    threads and numba's gemm blocks by layout, so "both" would have the pools take turns
    product by product: only numba and blas are tried."""
    monkeypatch.setattr(ownership.config, "blas_spin_is_short", lambda: True)
    mt.use_deterministic_algorithms(True)
    try:
        run_steps(ownership.WARMUP + 1, Clock({"numba": 1.0, "blas": 1.0, "both": 1.0}))
        run_steps(TRIAL_STEPS, Clock({"numba": 1.0, "blas": 1.0, "both": 0.1}))
    finally:
        mt.use_deterministic_algorithms(False)
    trial = ownership.core_owner_trial()
    assert trial["state"] == "decided" and trial["times"]["both"] == []
    assert ownership.core_owner() == "numba"
