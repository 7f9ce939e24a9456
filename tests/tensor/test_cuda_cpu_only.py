"""minitensor.cuda is torch.cuda on a machine without a GPU: the usual device line picks the
CPU, the seeding and timing calls do nothing, and every way of asking for a CUDA device is an
error that says minitensor runs on the CPU."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.cuda  # noqa: F401  (importable as torch.cuda is)


def test_no_gpu_is_available_and_the_usual_device_line_picks_the_cpu():
    assert mt.cuda.is_available() is False and mt.cuda.device_count() == 0
    assert mt.cuda.is_initialized() is False
    device = "cuda" if mt.cuda.is_available() else "cpu"
    x = mt.ones(2, device=device).to(device)
    model = mt.nn.Linear(2, 1).to(device)
    assert model(x).shape == (1,) and str(x.device) == "cpu"


def test_seeding_and_timing_calls_do_nothing():
    mt.manual_seed(0)
    a = mt.randn(3)
    mt.manual_seed(0)
    for call in (mt.cuda.manual_seed, mt.cuda.manual_seed_all):
        assert call(123) is None
    assert mt.cuda.synchronize() is None and mt.cuda.empty_cache() is None
    assert np.array_equal(mt.randn(3).numpy(), a.numpy())  # the CPU stream was not touched
    assert mt.cuda.amp.GradScaler is mt.amp.GradScaler


@pytest.mark.parametrize(
    "ask",
    [
        lambda: mt.device("cuda"),
        lambda: mt.device("cuda:0"),
        lambda: mt.ones(2).to("cuda"),
        lambda: mt.ones(2).cuda(),
        lambda: mt.ones(2).cuda(0),
        lambda: mt.zeros(2, device="cuda"),
        lambda: mt.nn.Linear(2, 2, device="cuda"),
        lambda: mt.nn.Linear(2, 2).cuda(),
        lambda: mt.nn.Linear(2, 2).to("cuda"),
        lambda: mt.Generator(device="cuda"),
        lambda: mt.cuda.current_device(),
    ],
)
def test_asking_for_cuda_says_minitensor_runs_on_the_cpu(ask):
    with pytest.raises(RuntimeError, match="minitensor runs on the CPU"):
        ask()
