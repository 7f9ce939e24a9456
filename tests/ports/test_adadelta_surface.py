"""optim.Adadelta and torch.accelerator, side by side with torch (added for the MNIST port,
tests/ports/mnist_cnn.py): the same gradients give the same parameters step by step, with
every setting, and the same state_dict layout."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import minitensor as mt  # noqa: E402

pytestmark = pytest.mark.torch


def _run(lib, settings, steps, sched_gamma=None):
    """Parameters after `steps` Adadelta steps on f(θ) = Σ (θ − t)⁴ + Σ θ (float64)."""
    rng = np.random.RandomState(0)
    theta0, target = rng.randn(3, 4), rng.randn(3, 4)
    p = lib.tensor(theta0.copy(), requires_grad=True)
    t = lib.tensor(target)
    opt = lib.optim.Adadelta([p], **settings)
    sched = (
        lib.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=sched_gamma) if sched_gamma else None
    )
    for _ in range(steps):
        opt.zero_grad()
        loss = ((p - t) ** 4).sum() + p.sum()
        loss.backward()
        opt.step()
        if sched:
            sched.step()
    values = p.detach().numpy() if lib is torch else p.numpy()
    return np.array(values), opt


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"lr": 0.5, "rho": 0.5},
        {"eps": 1e-3, "weight_decay": 0.1},
        {"maximize": True},
        {"lr": 1.0, "rho": 0.0},
    ],
)
def test_adadelta_matches_torch(settings):
    ours, _ = _run(mt, settings, steps=6)
    theirs, _ = _run(torch, settings, steps=6)
    start, _ = _run(mt, settings, steps=0)
    assert not np.allclose(ours, start)  # it moved
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_adadelta_with_step_lr_and_state_dict():
    ours, opt = _run(mt, {}, steps=4, sched_gamma=0.7)
    theirs, topt = _run(torch, {}, steps=4, sched_gamma=0.7)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    state, tstate = opt.state_dict(), topt.state_dict()
    assert set(state["state"][0]) == set(tstate["state"][0]) == {"step", "square_avg", "acc_delta"}
    for k in ("square_avg", "acc_delta"):
        np.testing.assert_allclose(state["state"][0][k], tstate["state"][0][k].numpy(), rtol=1e-10)
    assert int(state["state"][0]["step"]) == int(tstate["state"][0]["step"]) == 4
    keys = set(tstate["param_groups"][0]) - {"foreach", "capturable", "differentiable"}
    assert keys <= set(state["param_groups"][0]) | {"initial_lr"}
    np.testing.assert_allclose(state["param_groups"][0]["lr"], 0.7**4)


def test_adadelta_defaults_and_refusals():
    p = mt.zeros(2, requires_grad=True)
    g = mt.optim.Adadelta([p]).param_groups[0]
    tg = torch.optim.Adadelta([torch.zeros(2, requires_grad=True)]).param_groups[0]
    for k in ("lr", "rho", "eps", "weight_decay", "maximize"):
        assert g[k] == tg[k], k
    for bad in ({"rho": 1.5}, {"lr": -1.0}, {"eps": -1.0}, {"weight_decay": -0.1}):
        with pytest.raises(ValueError):
            mt.optim.Adadelta([p], **bad)
        with pytest.raises(ValueError):
            torch.optim.Adadelta([torch.zeros(2, requires_grad=True)], **bad)
    with pytest.raises(NotImplementedError, match="differentiable"):
        mt.optim.Adadelta([p], differentiable=True)


def test_accelerator_is_absent_as_on_a_cpu_only_torch():
    assert mt.accelerator.is_available() is torch.accelerator.is_available() is False
    assert mt.accelerator.current_accelerator() is torch.accelerator.current_accelerator() is None
    assert mt.accelerator.device_count() == torch.accelerator.device_count() == 0
