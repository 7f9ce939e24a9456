"""minitensor.optim: SGD/Adam/AdamW against torch.optim, param groups, state dicts,
version counters, learning-rate schedules."""

import math

import numpy as np
import pytest

import minitensor as mt
from minitensor import nn
from minitensor.optim import lr_scheduler

SHAPES = [(4, 3), (3,), (2, 2, 5)]


def make_problem(seed=0, steps=20):
    """Initial float64 values and one gradient per step for each of three parameters."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(steps)]
    return init, grads


def run_ours(make_opt, init, grads, groups=False):
    params = [nn.Parameter(a.copy()) for a in init]
    opt = make_opt(
        [{"params": params[:2]}, {"params": params[2:], "lr": 0.03}] if groups else params
    )
    for step_grads in grads:
        opt.zero_grad()
        for p, g in zip(params, step_grads):
            p.grad = mt.tensor(g, dtype=mt.float64)
        opt.step()
    return [p.numpy() for p in params]


def run_torch(torch, make_opt, init, grads, groups=False):
    params = [torch.tensor(a.copy(), requires_grad=True) for a in init]
    opt = make_opt(
        [{"params": params[:2]}, {"params": params[2:], "lr": 0.03}] if groups else params
    )
    for step_grads in grads:
        opt.zero_grad()
        for p, g in zip(params, step_grads):
            p.grad = torch.from_numpy(g.copy())
        opt.step()
    return [p.detach().numpy() for p in params]


CASES = {
    "sgd": ("SGD", dict(lr=0.1)),
    "sgd_momentum": ("SGD", dict(lr=0.1, momentum=0.9)),
    "sgd_dampening_wd": ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01)),
    "sgd_nesterov_wd": ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)),
    "sgd_maximize": ("SGD", dict(lr=0.05, momentum=0.5, maximize=True)),
    "adam": ("Adam", dict(lr=0.01)),
    "adam_paper": ("Adam", dict(lr=0.02, betas=(0.9, 0.98), eps=1e-9)),
    "adam_wd": ("Adam", dict(lr=0.01, weight_decay=0.1)),
    "adam_amsgrad": ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.01)),
    "adamw": ("AdamW", dict(lr=0.01)),
    "adamw_wd": ("AdamW", dict(lr=0.01, weight_decay=0.3, betas=(0.8, 0.99))),
    "adamw_amsgrad_maximize": ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True)),
}


@pytest.mark.torch
@pytest.mark.parametrize("groups", [False, True], ids=["one_group", "two_groups"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch_optim_over_20_steps(case, groups):
    torch = pytest.importorskip("torch")
    cls, kwargs = CASES[case]
    init, grads = make_problem(seed=len(case))
    ours = run_ours(lambda p: getattr(mt.optim, cls)(p, **kwargs), init, grads, groups)
    theirs = run_torch(torch, lambda p: getattr(torch.optim, cls)(p, **kwargs), init, grads, groups)
    for a, b, start in zip(ours, theirs, init):
        assert not np.allclose(a, start)  # the parameters really moved
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)  # and in fact much closer


def test_float32_parameters_stay_float32():
    p = nn.Parameter(np.ones(3, np.float32))
    for opt in (
        mt.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1),
        mt.optim.Adam([p], lr=0.1, weight_decay=0.1),
        mt.optim.AdamW([p]),
    ):
        p.grad = mt.tensor([1.0, 2.0, 3.0])
        opt.step()
        assert p.dtype == np.float32
        assert all(
            v.dtype == np.float32 for v in opt.state[p].values() if isinstance(v, np.ndarray)
        )


def test_step_updates_in_place_and_bumps_version():
    p = nn.Parameter(np.array([1.0, 2.0]))
    array = p.numpy()
    y = (p * p).sum()  # mul saves p for backward
    p.grad = mt.tensor([1.0, 1.0])
    v0 = p._version
    mt.optim.SGD([p], lr=0.1).step()
    assert p.numpy() is array and p._version == v0 + 1
    np.testing.assert_allclose(p.numpy(), [0.9, 1.9])
    with pytest.raises(RuntimeError):  # the graph saw the old values: backward must refuse
        y.backward()


def test_skips_params_without_grad_and_zero_grad():
    a, b = nn.Parameter(np.ones(2)), nn.Parameter(np.ones(2))
    opt = mt.optim.Adam([a, b], lr=0.1)
    a.grad = mt.tensor([1.0, -1.0], dtype=mt.float64)
    opt.step()
    assert np.array_equal(b.numpy(), [1, 1]) and b not in opt.state
    assert not np.array_equal(a.numpy(), [1, 1])
    opt.zero_grad(set_to_none=False)
    assert np.all(a.grad.numpy() == 0) and b.grad is None
    opt.zero_grad()
    assert a.grad is None


def test_per_group_learning_rate():
    a, b = nn.Parameter(np.zeros(1)), nn.Parameter(np.zeros(1))
    opt = mt.optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 1.0]
    a.grad = mt.tensor([1.0], dtype=mt.float64)
    b.grad = mt.tensor([1.0], dtype=mt.float64)
    opt.step()
    assert a.numpy()[0] == pytest.approx(-0.1) and b.numpy()[0] == pytest.approx(-1.0)


def test_bad_arguments():
    p = nn.Parameter(np.zeros(2))
    with pytest.raises(ValueError, match="empty parameter list"):
        mt.optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="more than one param group"):
        mt.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        mt.optim.SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="unknown setting"):
        mt.optim.SGD([{"params": [p], "betas": (0.9, 0.9)}], lr=0.1)
    with pytest.raises(ValueError, match="nesterov"):
        mt.optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        mt.optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="iterable"):
        mt.optim.Adam(p)


def test_optimizer_state_dict_round_trip_continues_identically():
    init, grads = make_problem(seed=3, steps=12)

    def fresh():
        params = [nn.Parameter(a.copy()) for a in init]
        opt = mt.optim.Adam(
            [{"params": params[:1]}, {"params": params[1:], "lr": 0.05}], lr=0.01, amsgrad=True
        )
        return params, opt

    def train(params, opt, gs):
        for step_grads in gs:
            for p, g in zip(params, step_grads):
                p.grad = mt.tensor(g, dtype=mt.float64)
            opt.step()

    params, opt = fresh()
    train(params, opt, grads)
    straight = [p.numpy().copy() for p in params]

    params, opt = fresh()
    train(params, opt, grads[:6])
    state = opt.state_dict()
    assert sorted(state["state"]) == [0, 1, 2] and state["state"][0]["step"] == 6
    assert [g["params"] for g in state["param_groups"]] == [[0], [1, 2]]
    snapshot = [p.numpy().copy() for p in params]
    params2 = [nn.Parameter(a) for a in snapshot]
    opt2 = mt.optim.Adam(
        [{"params": params2[:1]}, {"params": params2[1:], "lr": 0.05}], lr=0.01, amsgrad=True
    )
    train(params, opt, grads[6:7])  # the saved state dict must not see this step
    assert state["state"][0]["step"] == 6
    opt2.load_state_dict(state)
    train(params2, opt2, grads[6:])
    for a, b in zip(params2, straight):
        np.testing.assert_array_equal(a.numpy(), b)


def test_optimizer_load_state_dict_errors_change_nothing():
    a, b = nn.Parameter(np.zeros((2, 3))), nn.Parameter(np.zeros(3))
    adam = mt.optim.Adam([a, b], lr=0.1)
    a.grad, b.grad = mt.tensor(np.ones((2, 3))), mt.tensor(np.ones(3))
    adam.step()
    good = adam.state_dict()

    other = mt.optim.Adam([nn.Parameter(np.zeros((3, 2))), nn.Parameter(np.zeros(3))], lr=0.5)
    with pytest.raises(ValueError, match=r"checkpoint \(2, 3\) vs parameter \(3, 2\)"):
        other.load_state_dict(good)
    assert other.state == {} and other.param_groups[0]["lr"] == 0.5

    with pytest.raises(ValueError, match="2 parameters, optimizer has 1"):
        mt.optim.Adam([nn.Parameter(np.zeros((2, 3)))]).load_state_dict(good)
    sgd = mt.optim.SGD([a, b], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="another optimizer"):
        mt.optim.Adam([a, b]).load_state_dict(sgd.state_dict())
    with pytest.raises(ValueError, match="checkpoint has 1 param group.*this optimizer has 2"):
        mt.optim.Adam([{"params": [a]}, {"params": [b]}]).load_state_dict(good)
    with pytest.raises(ValueError, match="'state' and 'param_groups'"):
        adam.load_state_dict({"model": 1})


# ----------------------------------------------------------------------------- schedulers


def _lr_trace(optim, params, make_sched, steps, lrs):
    """The learning rates of two param groups over `steps` scheduler steps."""
    opt = optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)])
    sched = make_sched(opt)
    out = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(sched.get_last_lr())
        assert [g["lr"] for g in opt.param_groups] == out[-1]
    return np.array(out)


def lrs_ours(make_sched, steps=30, lrs=(0.1, 0.02)):
    return _lr_trace(mt.optim, [nn.Parameter(np.zeros(1)) for _ in lrs], make_sched, steps, lrs)


def lrs_torch(torch, make_sched, steps=30, lrs=(0.1, 0.02)):
    params = [torch.zeros(1, requires_grad=True) for _ in lrs]
    return _lr_trace(torch.optim, params, make_sched, steps, lrs)


def test_step_and_lambda_lr_formulas():
    ours = lrs_ours(lambda o: lr_scheduler.StepLR(o, step_size=7, gamma=0.5))
    np.testing.assert_allclose(ours[:, 1], [0.02 * 0.5 ** (e // 7) for e in range(31)])
    ours = lrs_ours(lambda o: lr_scheduler.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 2.0]))
    np.testing.assert_allclose(ours[:, 0], [0.1 / (e + 1) for e in range(31)])
    assert np.all(ours[:, 1] == 0.04)


def noam(step, d_model=64, warmup=10, scale=2.0):
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.torch
def test_lambda_and_step_lr_match_torch():
    torch = pytest.importorskip("torch")
    fn = lambda e: 0.95**e + 0.01 * (e % 3)  # noqa: E731
    np.testing.assert_allclose(
        lrs_ours(lambda o: lr_scheduler.LambdaLR(o, fn)),
        lrs_torch(torch, lambda o: torch.optim.lr_scheduler.LambdaLR(o, fn)),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        lrs_ours(lambda o: lr_scheduler.StepLR(o, step_size=7, gamma=0.5)),
        lrs_torch(torch, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5)),
        rtol=1e-12,
    )


def test_noam_follows_the_formula():
    ours = lrs_ours(lambda o: lr_scheduler.NoamLR(o, d_model=64, warmup_steps=10, scale=2.0))
    np.testing.assert_allclose(ours[:, 0], [noam(s) for s in range(1, 32)], rtol=1e-12)
    assert np.array_equal(ours[:, 0], ours[:, 1])  # absolute: the groups' lrs are not used
    peak = ours[:, 0].argmax()
    assert peak == 9 and ours[peak, 0] == pytest.approx(2.0 / math.sqrt(64 * 10))
    assert ours[0, 0] > 0


@pytest.mark.torch
def test_noam_matches_torch_lambda():
    torch = pytest.importorskip("torch")
    ours = lrs_ours(lambda o: lr_scheduler.NoamLR(o, d_model=64, warmup_steps=10, scale=2.0))
    # torch has no Noam: the same schedule as a LambdaLR over an lr of 1
    theirs = lrs_torch(
        torch, lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: noam(e + 1)), lrs=(1.0, 1.0)
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


WARMUP, TOTAL, MIN_LR = 5, 25, 0.001


def cosine_factor(e, base):
    if e < WARMUP:
        return (e + 1) / WARMUP
    prog = min(1.0, (e - WARMUP) / (TOTAL - WARMUP))
    return (MIN_LR + (base - MIN_LR) * 0.5 * (1 + math.cos(math.pi * prog))) / base


def test_warmup_cosine_shape():
    ours = lrs_ours(lambda o: lr_scheduler.WarmupCosineLR(o, WARMUP, TOTAL, min_lr=MIN_LR))
    expected = [[0.1 * cosine_factor(e, 0.1), 0.02 * cosine_factor(e, 0.02)] for e in range(31)]
    np.testing.assert_allclose(ours, expected, rtol=1e-12)
    assert ours[0, 0] == pytest.approx(0.02) and ours[WARMUP - 1, 0] == pytest.approx(0.1)
    assert np.all(np.diff(ours[:WARMUP, 0]) > 0)  # rises linearly …
    assert np.all(np.diff(ours[WARMUP : TOTAL + 1, 0]) < 0)  # … then decays …
    assert ours[TOTAL, 0] == pytest.approx(MIN_LR) and ours[-1, 0] == pytest.approx(MIN_LR)


@pytest.mark.torch
def test_warmup_cosine_matches_torch_lambda():
    torch = pytest.importorskip("torch")
    ours = lrs_ours(lambda o: lr_scheduler.WarmupCosineLR(o, WARMUP, TOTAL, min_lr=MIN_LR))
    theirs = lrs_torch(
        torch,
        lambda o: torch.optim.lr_scheduler.LambdaLR(
            o, [lambda e: cosine_factor(e, 0.1), lambda e: cosine_factor(e, 0.02)]
        ),
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_scheduler_state_dict_resumes():
    p = nn.Parameter(np.zeros(1))
    opt = mt.optim.Adam([p], lr=1.0)
    sched = lr_scheduler.NoamLR(opt, d_model=32, warmup_steps=4)
    for _ in range(6):
        sched.step()
    state = sched.state_dict()
    assert state["last_epoch"] == 6 and "optimizer" not in state
    opt2 = mt.optim.Adam([nn.Parameter(np.zeros(1))], lr=1.0)
    sched2 = lr_scheduler.NoamLR(opt2, d_model=32, warmup_steps=4)
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr() == [opt2.param_groups[0]["lr"]]
    sched.step(), sched2.step()
    assert sched2.get_last_lr() == sched.get_last_lr()
    with pytest.raises(ValueError, match="another kind of scheduler"):
        lr_scheduler.StepLR(opt2, 3).load_state_dict(state)
    lam = lr_scheduler.LambdaLR(opt2, lambda e: 0.5)
    assert "lr_lambdas" not in lam.state_dict()  # code is never saved


def test_scheduler_argument_errors():
    opt = mt.optim.SGD([nn.Parameter(np.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="warmup_steps ≤ total_steps"):
        lr_scheduler.WarmupCosineLR(opt, 10, 5)
    with pytest.raises(ValueError, match="step_size"):
        lr_scheduler.StepLR(opt, 0)
    with pytest.raises(ValueError, match="2 lambdas for 1"):
        lr_scheduler.LambdaLR(opt, [lambda e: 1, lambda e: 1])
    with pytest.raises(TypeError, match="expected an Optimizer"):
        lr_scheduler.StepLR(object(), 2)
