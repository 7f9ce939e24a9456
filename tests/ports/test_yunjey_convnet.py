"""tests/ports/yunjey_convnet.py — yunjey/pytorch-tutorial's ConvNet (Conv2d, BatchNorm2d, ReLU,
MaxPool2d, Linear; CrossEntropyLoss; Adam; eval() with BatchNorm's running statistics) — run
under torch and under minitensor with only its imports switched (and its data synthetic): the
same weights give the same logits at every step, the same running statistics, the same
trained weights and the same evaluation.

What the port needed in minitensor: nothing — the author's lines ran as written.

The training loader has shuffle=True, which draws from each library's own generator; with
the whole training set in one batch the order inside the batch changes nothing the model
computes (the loss is a mean, BatchNorm's statistics are over the batch), so the runs can be
compared step by step. A forward hook records the logits of every call."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

pytestmark = pytest.mark.torch
SOURCE = "ports/yunjey_convnet.py"


def _logits_of(model):
    """The list every forward call of `model` appends its logits to (numpy), rows in one
    canonical order: sorted by their input images (shuffle=True orders each library's batch
    by its own generator)."""
    seen = []

    def hook(module, args, out):
        order = np.argsort(shim.numpy(args[0]).reshape(len(out), -1).sum(1), kind="stable")
        seen.append(shim.numpy(out)[order].copy())

    model.register_forward_hook(hook)
    return seen


def test_convnet_trains_and_evaluates_as_under_torch():
    ref, ours = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    torch.manual_seed(0)
    theirs, model = ref.ConvNet(ref.num_classes), ours.ConvNet(ours.num_classes)
    model.load_state_dict(theirs.state_dict(), strict=True)
    their_logits, logits = _logits_of(theirs), _logits_of(model)
    for lib, net in ((ref, theirs), (ours, model)):
        train_loader, _ = lib.load_data(n_train=32, batch_size=32)
        lib.train(net, train_loader, num_epochs=4)
    assert len(logits) == len(their_logits) == 4
    # float32 convolutions summed in another order: ~1e-6 relative per op, over 4 steps
    for step, (a, b) in enumerate(zip(logits, their_logits)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
    # A conv bias followed by BatchNorm has gradient exactly 0 (BatchNorm subtracts the
    # channel mean): both libraries compute rounding noise, and Adam's first steps turn any
    # noise into a step of ≈ lr (of either sign) — so after 4 steps those biases may differ
    # by up to 2·4·lr, and the running means, which see them through momentum 0.1, by up to
    # 0.1·(1 + 0.9 + 0.9² + 0.9³)·2·4·lr < 3e-3.
    for bias in ("layer1.0.bias", "layer2.0.bias"):
        for net in (model, theirs):
            assert np.abs(shim.numpy(dict(net.named_parameters())[bias].grad)).max() < 1e-5
    loose = {"layer1.0.bias": 8e-3, "layer2.0.bias": 8e-3}
    loose.update({"layer1.1.running_mean": 3e-3, "layer2.1.running_mean": 3e-3})
    for name, p in theirs.state_dict().items():
        np.testing.assert_allclose(
            shim.numpy(model.state_dict()[name]),
            p.numpy(),
            rtol=1e-4,
            atol=loose.get(name, 1e-5),
            err_msg=name,
        )
    assert int(shim.numpy(model.state_dict()["layer1.1.num_batches_tracked"])) == 4
    # evaluation on the same trained weights and running statistics: the same logits
    model.load_state_dict(theirs.state_dict(), strict=True)
    accuracy = [
        lib.test(net, lib.load_data(n_test=32)[1]) for lib, net in ((ref, theirs), (ours, model))
    ]
    assert len(logits) == len(their_logits) == 5
    np.testing.assert_allclose(logits[-1], their_logits[-1], rtol=1e-4, atol=1e-5)
    assert accuracy[0] == accuracy[1]
    assert not model.training  # test() put it in eval mode: running statistics were used


def test_eval_uses_running_statistics():
    """In eval() the first BatchNorm normalises with running_mean/var, not the batch's: an
    input of one repeated image gives the same logits as that image alone."""
    ours = shim.load(SOURCE, "minitensor")
    model = ours.ConvNet()
    train_loader, _ = ours.load_data(n_train=32, batch_size=16)
    ours.train(model, train_loader, num_epochs=1)
    model.eval()
    x = next(iter(train_loader))[0][:1]
    with ours.torch.no_grad():
        one, four = model(x), model(ours.torch.cat([x] * 4))
    np.testing.assert_allclose(shim.numpy(four), np.repeat(shim.numpy(one), 4, 0), atol=1e-5)
    assert np.abs(shim.numpy(model.layer1[1].running_mean)).max() > 0


def test_learns_with_shuffled_batches():
    ours = shim.load(SOURCE, "minitensor")
    model, accuracy = ours.main(n_train=160, n_test=40, batch_size=16, num_epochs=2)
    assert accuracy >= 90.0  # chance is 10 %
