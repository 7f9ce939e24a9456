"""tests/ports/morvan_cnn.py — MorvanZhou/PyTorch-Tutorial's 401_CNN.py (Sequential Conv2d/ReLU/
MaxPool2d, Linear, a forward returning a tuple, x.view, Adam, CrossEntropyLoss, the uint8
test images turned float by `torch.unsqueeze(...).type(torch.FloatTensor)[:2000]/255.`,
torch.max(..., 1)[1].data.numpy()) — run under torch and under minitensor with only its
imports switched (and its data synthetic): the same weights give the same outputs at every
call, the same printed losses and accuracies, the same predictions and the same weights.

What the port needed in minitensor: `x.type(torch.FloatTensor)` — Tensor.type took dtypes
only; it now takes the legacy constructors (LongTensor, FloatTensor) too, tested beside
torch in test_legacy_type_surface.py.

The training loader has shuffle=True (each library's own generator); with the whole
training set in one batch the order inside it changes nothing the model computes (the loss
is a mean), and the outputs are compared with their rows sorted by input."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

pytestmark = pytest.mark.torch
SOURCE = "ports/morvan_cnn.py"


def _outputs_of(model):
    """The list every forward call of `model` appends its logits to (numpy), rows sorted by
    their input images."""
    seen = []

    def hook(module, args, out):
        logits = shim.numpy(out[0])
        order = np.argsort(shim.numpy(args[0]).reshape(len(logits), -1).sum(1), kind="stable")
        seen.append(logits[order].copy())

    model.register_forward_hook(hook)
    return seen


def _printed(text):
    """[(train loss, test accuracy)] from train()'s prints."""
    found = re.findall(r"train loss: ([0-9.]+) \| test accuracy: ([0-9.]+)", text)
    return [(float(a), float(b)) for a, b in found]


def test_cnn_trains_as_under_torch(capsys):
    ref, ours = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    torch.manual_seed(0)
    theirs, model = ref.CNN(), ours.CNN()
    model.load_state_dict(theirs.state_dict(), strict=True)
    their_outputs, outputs = _outputs_of(theirs), _outputs_of(model)
    printed, predictions = [], []
    for lib, net in ((ref, theirs), (ours, model)):
        train_loader, test_x, test_y = lib.load_data(n_train=40, n_test=30, BATCH_SIZE=40)
        assert test_x.dtype == lib.torch.float32 and float(test_x.max()) <= 1.0
        lib.train(net, train_loader, test_x, test_y, EPOCH=4)
        predictions.append(lib.predict(net, test_x, test_y))
        printed.append(_printed(capsys.readouterr().out))
    assert len(outputs) == len(their_outputs) == 9  # 4 × (a step, the test set), predict
    # float32 convolutions summed in another order: ~1e-6 relative per op, through 4 Adam
    # steps (lr 1e-3: a wrong gradient would move the logits by orders more)
    for call, (a, b) in enumerate(zip(outputs, their_outputs)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"call {call}")
    (theirs_printed, ours_printed) = printed
    assert len(ours_printed) == 4
    np.testing.assert_allclose(ours_printed, theirs_printed, atol=1e-4)  # printed to 4 places
    np.testing.assert_array_equal(predictions[1], predictions[0])
    assert ours_printed[-1][0] < ours_printed[0][0]  # it learns
    for name, p in theirs.state_dict().items():
        np.testing.assert_allclose(
            shim.numpy(model.state_dict()[name]), p.numpy(), rtol=1e-4, atol=1e-5, err_msg=name
        )


def test_learns_with_shuffled_batches(capsys):
    ours = shim.load(SOURCE, "minitensor")
    cnn, pred_y = ours.main(n_train=200, n_test=50, BATCH_SIZE=20, EPOCH=3)
    loss, accuracy = _printed(capsys.readouterr().out)[-1]
    assert accuracy >= 0.6 and loss < 1.5  # chance: 0.1 and ln 10 ≈ 2.3
    assert pred_y.shape == (10,)
