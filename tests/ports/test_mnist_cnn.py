"""tests/ports/mnist_cnn.py — pytorch/examples' MNIST CNN (conv, relu, max_pool2d, dropout,
flatten, log_softmax, nll_loss, Adadelta, StepLR, its train/test functions and main()) —
run under torch and under minitensor with only its imports switched (and its data synthetic):
the same weights print the same losses and accuracies, and end as the same weights.

What the port needed in minitensor: `optim.Adadelta` (minitensor/optim/adadelta.py) and
`torch.accelerator` (minitensor/accelerator.py: no accelerator, as torch on a CPU-only
machine); both are tested side by side with torch in test_adadelta_surface.py.

main() builds its model with `Net()`; the tests hand it one already holding torch's initial
weights by rebinding the module's `Net`, so the authors' main() runs as written. Dropout draws
its masks from each library's own generator, so the step-by-step comparison sets p = 0 on
both; the run with dropout on checks that minitensor's copy learns, and the evaluation check
(dropout off in eval()) runs with the authors' p."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

pytestmark = pytest.mark.torch
SOURCE = "ports/mnist_cnn.py"
ARGV = ["--batch-size", "16", "--epochs", "2", "--test-batch-size", "32", "--log-interval", "1"]


def _printed(capsys):
    """(training losses, [(test loss, correct)]) from what main() printed."""
    out = capsys.readouterr().out
    losses = [float(x) for x in re.findall(r"\tLoss: ([0-9.]+)", out)]
    tests = [
        (float(a), int(c)) for a, c in re.findall(r"Average loss: ([0-9.]+), Accuracy: (\d+)", out)
    ]
    return losses, tests


def _pair(p_dropout=None):
    ref, ours = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    torch.manual_seed(0)
    theirs, model = ref.Net(), ours.Net()
    model.load_state_dict(theirs.state_dict(), strict=True)
    if p_dropout is not None:
        for m in (theirs, model):
            m.dropout1.p = m.dropout2.p = p_dropout
    return ref, ours, theirs, model


def test_main_trains_as_under_torch(capsys):
    ref, ours, theirs, model = _pair(p_dropout=0.0)
    ref.Net, ours.Net = (lambda: theirs), (lambda: model)
    ref.main(ARGV)
    their_losses, their_tests = _printed(capsys)
    assert ours.main(ARGV) is model
    losses, tests = _printed(capsys)
    assert len(losses) == 8 and len(tests) == 2
    # printed with 6 decimals; float32 sums in another order drift by ~1e-6 relative a step
    np.testing.assert_allclose(losses, their_losses, rtol=1e-4, atol=2e-6)
    assert [c for _, c in tests] == [c for _, c in their_tests]
    np.testing.assert_allclose([a for a, _ in tests], [a for a, _ in their_tests], atol=2e-4)
    assert losses[-1] < 0.5 * losses[0] and tests[-1][1] >= 28  # it learns (32 test images)
    # Adadelta's step is √(u+eps)/√(s+eps)·g: eps keeps it well conditioned, so rounding
    # differences stay at float32's scale through the 8 steps
    for name, p in theirs.state_dict().items():
        np.testing.assert_allclose(
            shim.numpy(model.state_dict()[name]), p.numpy(), rtol=1e-4, atol=1e-5, err_msg=name
        )


def test_test_function_matches_with_dropout_in_place(capsys):
    """eval() turns the authors' Dropout(0.25)/Dropout(0.5) off: test() prints the same."""
    ref, ours, theirs, model = _pair()
    for lib, net in ((ref, theirs), (ours, model)):
        loader = lib.torch.utils.data.DataLoader(
            lib.torch.utils.data.TensorDataset(*lib.synthetic_digits(32, seed=1)), batch_size=16
        )
        lib.test(net, lib.torch.device("cpu"), loader)
    out = capsys.readouterr().out
    (a1, c1), (a2, c2) = re.findall(r"Average loss: ([0-9.]+), Accuracy: (\d+)", out)
    assert c1 == c2 and abs(float(a1) - float(a2)) <= 1e-4
    assert not model.training


def test_learns_with_dropout_on(capsys):
    ours = shim.load(SOURCE, "minitensor")
    ours.main(ARGV)
    losses, tests = _printed(capsys)
    assert np.mean(losses[-2:]) < 0.5 * np.mean(losses[:2])
    assert tests[-1][1] >= 28
