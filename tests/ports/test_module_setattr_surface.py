"""Module.__setattr__ replacing a registered Parameter or submodule keeps its place in
named_parameters / state_dict, side by side with torch — pytorch/examples'
word_language_model ties `self.decoder.weight = self.encoder.weight` after the decoder
made its own weight, and its state_dict must list decoder.weight before decoder.bias
for load_state_dict(torch_model.state_dict()) and the per-name comparisons to line up."""

import pytest

torch = pytest.importorskip("torch")

import minitensor as mt  # noqa: E402

pytestmark = pytest.mark.torch


def _tied(lib):
    encoder, decoder = lib.nn.Embedding(5, 3), lib.nn.Linear(3, 5)
    decoder.weight = encoder.weight
    model = lib.nn.Sequential(encoder, decoder)
    return model, decoder


@pytest.mark.parametrize("lib", [torch, mt])
def test_tied_weight_keeps_its_place(lib):
    model, decoder = _tied(lib)
    assert list(model.state_dict()) == ["0.weight", "1.weight", "1.bias"]
    assert [n for n, _ in decoder.named_parameters()] == ["weight", "bias"]
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "1.bias"]  # shared once


@pytest.mark.parametrize("lib", [torch, mt])
def test_replaced_submodule_keeps_its_place(lib):
    model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Tanh(), lib.nn.Linear(2, 1))
    setattr(model, "0", lib.nn.Linear(2, 2, bias=False))
    assert list(model.state_dict()) == ["0.weight", "2.weight", "2.bias"]
    assert [type(m).__name__ for m in model] == ["Linear", "Tanh", "Linear"]


def test_state_dicts_agree_name_for_name():
    theirs, _ = _tied(torch)
    ours, _ = _tied(mt)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert ours[1].weight is ours[0].weight  # still tied after loading
