"""tests/ports/word_language_model.py — pytorch/examples' word-level language model (model.py
with main.py's batchify, get_batch, repackage_hidden, train and evaluate) — run under torch
and under minitensor with only its imports switched: from the same weights, every model kind
gives the same validation losses epoch by epoch, the same test loss and the same trained
weights, through both of main.py's update rules (clip_grad_norm_ then the manual
`p.data.add_(p.grad, alpha=-lr)`, or AdamW).

What the port needed from the library: Module.__setattr__ replacing a registered Parameter
kept the name but moved it to the end, so the tied model's state_dict listed decoder.bias
before decoder.weight (torch keeps the old place; fixed, tests/ports/
test_module_setattr_surface.py). Embedding, LSTM/GRU/RNN with inter-layer dropout,
new_zeros, narrow, nn.Transformer as a base class, register_buffer, log_softmax/NLLLoss and
clip_grad_norm_ were already there. Test-side only: dropout is set to 0
(the two libraries draw different random masks); nn.Transformer's own layers keep their
default dropout of 0.1 whatever main.py's --dropout says, so the test zeroes those modules'
p (and the attention's dropout) in both models before training."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
]
SOURCE = "ports/word_language_model.py"
SMALL = dict(emsize=8, nhid=8, nlayers=2, batch_size=4, bptt=8, epochs=3, dropout=0.0)


def _no_dropout(model, nn):
    """Every Dropout module's p, and MultiheadAttention's dropout, set to 0."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(m, nn.MultiheadAttention):
            m.dropout = 0.0


def _both(**options):
    """The program set up under both libraries, ours holding torch's initial weights."""
    ref, ours = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    theirs, model = ref.setup(**options), ours.setup(**options)
    _no_dropout(theirs, torch.nn)
    _no_dropout(model, ours.nn)
    model.load_state_dict(theirs.state_dict(), strict=True)
    return ref, ours


def _same_weights(ref, ours, atol):
    theirs = ref.model.state_dict()
    mine = ours.model.state_dict()
    assert list(mine) == list(theirs)
    for name, p in theirs.items():
        np.testing.assert_allclose(shim.numpy(mine[name]), p.numpy(), atol=atol, err_msg=name)


@pytest.mark.parametrize(
    "kind, tied",
    [("LSTM", True), ("LSTM", False), ("GRU", False), ("RNN_TANH", False), ("RNN_RELU", False)],
)
def test_rnn_language_model_trains_as_under_torch(kind, tied, capsys):
    ref, ours = _both(model=kind, tied=tied, log_interval=2, **SMALL)
    assert ours.evaluate(ours.val_data) == pytest.approx(ref.evaluate(ref.val_data), rel=1e-6)
    val_losses, test_loss = ours.run()
    ref_val_losses, ref_test_loss = ref.run()
    # lr 20 amplifies float32 rounding in the gradients (each step is clipped to norm 0.25,
    # so a weight moves by up to 5 per step): after a dozen steps the two libraries' losses
    # agree to about 1e-5 relative, the weights to about 1e-4 (1.1e-4 seen for the GRU on an
    # AMD EPYC, whose BLAS blocks its sums otherwise) — a wrong gradient or a wrong clip
    # shows as a difference in the first digit.
    np.testing.assert_allclose(val_losses, ref_val_losses, rtol=1e-4)
    assert test_loss == pytest.approx(ref_test_loss, rel=1e-4)
    assert val_losses[-1] < val_losses[0]  # it learns
    _same_weights(ref, ours, atol=3e-4)
    if tied:
        assert ours.model.decoder.weight is ours.model.encoder.weight
    assert "| epoch   1 |     2/    5 batches" in capsys.readouterr().out  # train()'s log line


def test_transformer_language_model_trains_as_under_torch():
    ref, ours = _both(**{**SMALL, "nhid": 16}, model="Transformer", use_optimizer=True, lr=1e-2)
    assert ours.evaluate(ours.val_data) == pytest.approx(ref.evaluate(ref.val_data), rel=1e-6)
    val_losses, test_loss = ours.run()
    ref_val_losses, ref_test_loss = ref.run()
    np.testing.assert_allclose(val_losses, ref_val_losses, rtol=1e-4)
    assert test_loss == pytest.approx(ref_test_loss, rel=1e-4)
    assert val_losses[-1] < val_losses[0]  # it learns
    # AdamW divides by √v: a near-zero gradient element's rounding can move its weight by a
    # fraction of lr (1e-2) per step; the key bias's gradient is exactly zero (softmax ignores
    # a constant per row), so those rounding-noise steps are excluded from the comparison.
    d = SMALL["emsize"]
    theirs, mine = ref.model.state_dict(), ours.model.state_dict()
    for name, p in theirs.items():
        a, b = shim.numpy(mine[name]), p.numpy()
        if name.endswith("in_proj_bias"):
            a, b = (np.delete(x, np.s_[d : 2 * d]) for x in (a, b))
        np.testing.assert_allclose(a, b, atol=1e-3, err_msg=name)
