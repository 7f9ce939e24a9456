"""Who owns the cores during training: numba's threads, BLAS's, or both in turn — decided by
timing whole training steps on the running machine, and timed again now and then.

Two thread pools can spread minitensor's work over the cores, and only one should run at a
time. Three ways to share them:

* **numba's** (the start): the parallel kernels (softmax, LayerNorm, ...) and the matrix
  products they share out — a stack of small matrices by the tile kernel, a Linear layer's
  product by blocks of rows, each thread calling BLAS on one thread (kernels/fast_matmul).
  minitensor's own np.matmul calls run BLAS on one thread, so BLAS's pool never wakes.
* **BLAS's**: every product is np.matmul at BLAS's own thread count (but a stack of small
  matrices, where the tile kernel on one thread beats it), and numba's kernels run serially
  (jit.threads() answers 1), so numba's pool never wakes; BLAS's idle workers spin a few
  milliseconds after a call (config.blas_spin_for_owner), so the next product finds them awake.
* **both**, where OpenBLAS's idle workers sleep soon after a call (config.py, short BLAS
  spin): every Linear layer's product is np.matmul at BLAS's thread count, as for "blas",
  and numba's kernels run on numba's threads, as for "numba". Each pool still works alone,
  one call after the other; what would make them collide — BLAS's workers spinning for a
  while after each product — is gone. A large model gains (the paper's base model on an
  Intel Xeon: Adam's update and the fused attention run on two threads beside BLAS's
  products); a small one's kernels are too short to gain.

Which is fastest depends on the machine and on the model. With BLAS's workers spinning, two
pools at once lose to either: after each call a pool's idle workers spin for a while, and take
the core the other pool's next call wants — a product timed alone (fast_matmul/products.py,
`fastest`) cannot see that. On one machine BLAS's pool made a small model's step faster and
numba's a long-sequence model's (its fused attention runs on numba's threads;
benchmarks/README.md, "Who owns the cores"). Only whole steps show it, so this module times
them:

    an optimizer's step() ends a training step (Optimizer.step calls `step_ended`);
    the first WARMUP steps are not counted (numba compiles, products time their candidates);
    then the owners take turns, numba, blas[, both], numba, ..., for ROUNDS blocks of BLOCK
    steps each, the first step of every block not counted (the new owner's products time
    their candidates then); the owner whose fastest counted step was fastest keeps the cores
    — another than numba only if at least MARGIN faster than numba's — until the trial runs
    again, once AGAIN_AFTER steps and AGAIN_AFTER_SECONDS of training have passed, then
    twice as many of each, and so on: on a shared machine the other tenants come and go, and
    a trial that ran while they were busy (or idle) may have chosen for a machine that is no
    longer there. They come and go over seconds, not steps: a model of short steps (the
    addition demo's) is not timed again before its training has run that long, and a model of
    long ones not before that many steps (each trial costs a third of its steps on the slower
    owners, a few percent of the steps in between). The fastest step, not the
    median: on a shared machine the other tenants' bursts only ever add time, and a burst
    over one owner's block would sway a median of a few steps.
    "both" takes a turn only where BLAS's spin is short (config.blas_spin_is_short()), and
    not under deterministic algorithms (`_both_may_be_tried`).

Steps shorter than MIN_STEP_SECONDS never start the trial: they are bound by Python's cost
per op, not by the cores (the nanoGPT-style GPT of width 16 ran as fast under each owner). The
bar is low: a character-level GPT of width 64 has steps a few times longer, and BLAS's pool ran
it a sixth faster than numba's (benchmarks/README.md, "Short steps are tried too"). Nothing is
tried on the numpy backend either (its products are np.matmul's, whoever owns the cores).
Under mt.use_deterministic_algorithms(True) a product's result must not depend on BLAS's
thread count: BLAS runs on its own threads only on the layouts where they were seen to give
the one-thread route's bits (fast_matmul/products.py,
`same_bits_route`), else on one thread. Every owner then gives the same numbers to the bit (the
reductions and the BLAS blocks are cut at fixed places whatever the thread count), so the owner
may change mid-run. A small model can run as fast on one thread as on two (its step
is Python's cost per op), and then leaves the other core free.

    MINITENSOR_CORE_OWNER=numba|blas|both   fix the owner, no trial (default: trial)
    mt.kernels.core_owner()              who owns them now
    mt.kernels.core_owner_trial()        the trial's state: step times per owner, the decision
"""

import time

from .. import config
from . import compile_ahead
from .backend_switch import are_deterministic_algorithms_enabled, get_backend

OWNERS = ("numba", "blas", "both")
WARMUP, BLOCK, ROUNDS = 3, 4, 3
MIN_STEP_SECONDS = 0.005
MARGIN = 0.03
# after a decision the owners are timed again once both have passed (then 2×, 4×… of each)
AGAIN_AFTER, AGAIN_AFTER_SECONDS = 300, 20.0

# _owner[0] is read before every kernel call and matrix product (jit.threads,
# products.numpy_product): a list, so that a read is one index, and the state stays here.
_owner = ["numba"]
_trial = {}  # the trial's state: see reset(), which sets its start


def core_owner() -> str:
    """'numba', 'blas' or 'both': whose threads minitensor's matrix products and kernels use
    now (the module's docstring says what each means)."""
    return _owner[0]


def core_owner_trial() -> dict:
    """The trial's state: "waiting" (warming up, or steps too short), "trying" or "decided"
    (or "fixed" by MINITENSOR_CORE_OWNER), optimizer steps seen, the counted step times
    (seconds) of each owner in the latest trial, and when the owners are timed again: the
    step count and the clock time (time.perf_counter's) that must both have been reached
    (None before the first decision)."""
    return {
        "state": _trial["state"],
        "owner": _owner[0],
        "steps": _trial["steps"],
        "times": {o: list(t) for o, t in _trial["times"].items()},
        "again_at": _trial["again_at"],
        "again_at_time": _trial["again_at_time"],
    }


def _fixed_owner():
    """The owner fixed without a trial — MINITENSOR_CORE_OWNER's, numba's when every tuning
    is off (MINITENSOR_TUNING=0) — or None to hold the trial."""
    if not config.flag("MINITENSOR_TUNING"):
        return "numba"
    chosen = config.value("MINITENSOR_CORE_OWNER").lower()
    if chosen == "trial":
        return None
    if chosen not in OWNERS:
        choices = f"{', '.join(OWNERS[:-1])} or {OWNERS[-1]}"
        raise ValueError(f"MINITENSOR_CORE_OWNER={chosen!r}: expected trial, {choices}")
    return chosen


def step_ended(clock=time.perf_counter):
    """Called at the end of every optimizer step: count it, time it, and move the trial on."""
    state = _trial["state"]
    if state == "fixed":
        return
    now = clock()
    _trial["steps"] += 1
    if state == "decided":
        if _trial["steps"] < _trial["again_at"] or now < _trial["again_at_time"]:
            return
        # time the owners again: the machine's other work may have come or gone since
        _trial.update(state="waiting", last=None)
        state = "waiting"
    last, _trial["last"] = _trial["last"], now
    if state == "waiting":
        _wait(now, last)
    else:
        _try(now - last, now)


def _wait(now, last):
    """Before the trial: fix the owner if the user did, else start trying once WARMUP steps
    have passed and a step takes long enough to be worth it."""
    if _trial["steps"] == 1:
        compile_ahead.first_step_ended()
    fixed = _fixed_owner()
    if fixed is not None:
        _give_cores(fixed)
        _trial["state"] = "fixed"
        return
    long_enough = last is not None and now - last >= MIN_STEP_SECONDS
    compiling = compile_ahead.pending()  # numba's threads are timed with their parallel builds
    if _trial["steps"] > WARMUP and long_enough and not compiling and get_backend() == "numba":
        owners = OWNERS if _both_may_be_tried() else OWNERS[:2]
        # the block of steps about to run is numba's
        _trial.update(state="trying", tried=0, owners=owners, times={o: [] for o in OWNERS})
        _give_cores(owners[0])


def _both_may_be_tried():
    """Whether "both" takes a turn in the trial: where BLAS's idle workers sleep soon after a
    call (config.blas_spin_is_short), and not under deterministic algorithms. There a Linear
    layer's products go to BLAS's threads on the layouts where they give the one-thread bits
    and to gemm's blocks on numba's threads on the others (fast_matmul/products.py,
    `same_bits_route`): under "both" the two pools take turns product by product, the
    collision this owner exists to avoid (the addition demo's step took half as long again
    under it as under numba's; benchmarks/README.md, ""both" is not tried under deterministic
    algorithms")."""
    return config.blas_spin_is_short() and not are_deterministic_algorithms_enabled()


def _try(seconds, now):
    """One step of the trial: count it for the owner of its block (not a block's first step),
    hand the cores to the other owner at a block's end, decide after the last block. A step
    while a parallel build is compiled ahead (a kernel first called now) is not counted."""
    if compile_ahead.pending():
        return
    position = _trial["tried"] % BLOCK
    if position:
        _trial["times"][_owner[0]].append(seconds)
    _trial["tried"] += 1
    owners = _trial["owners"]
    if _trial["tried"] % BLOCK == 0:
        if _trial["tried"] == BLOCK * len(owners) * ROUNDS:
            _decide(_fastest(owners), now)
        else:
            _give_cores(owners[(_trial["tried"] // BLOCK) % len(owners)])


def _fastest(owners):
    """The owner whose fastest counted step was fastest; another than numba only by MARGIN
    or more, and only for steps of MIN_STEP_SECONDS or more (a step that was long only while
    numba compiled started the trial, but short steps are not the cores' to win)."""
    best = {o: min(_trial["times"][o]) for o in owners}
    numba = best["numba"]
    rival = min(owners[1:], key=best.get)
    worth_it = numba >= MIN_STEP_SECONDS
    return rival if worth_it and best[rival] < numba * (1 - MARGIN) else "numba"


def _give_cores(owner):
    """Hand the cores to `owner`. When BLAS's threads take them alone, or give them up, its
    idle workers are told how long to spin after a call (fast_matmul/blas.py, spin_for_owner:
    long while nothing else of ours runs beside them)."""
    if (owner == "blas") != (_owner[0] == "blas"):
        from .fast_matmul import blas  # (loaded with the first numba-side product already)

        blas.spin_for_owner(owner)
    _owner[0] = owner


def _decide(owner, now):
    _give_cores(owner)
    steps, seconds = _trial["again_after"]
    _trial.update(state="decided", again_at=_trial["steps"] + steps, again_at_time=now + seconds)
    _trial["again_after"] = (2 * steps, 2 * seconds)
    config.applied["MINITENSOR_CORE_OWNER"] = f"{owner}'s threads own the cores (timed steps)"


def reset():
    """Forget the trial and give the cores back to numba (tests; a new kind of workload)."""
    _give_cores("numba")
    _trial.update(state="waiting", steps=0, last=None, times={o: [] for o in OWNERS})
    _trial.update(again_at=None, again_at_time=None)
    _trial["again_after"] = (AGAIN_AFTER, AGAIN_AFTER_SECONDS)


reset()
