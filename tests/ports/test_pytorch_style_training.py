"""tests/ports/pytorch_style_training.py — a PyTorch tutorial-style training loop — run under torch
and under minitensor with only its imports switched: same weights and batches give the same
losses, learning rates, parameters, predictions and per-token losses."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

SOURCE = "ports/pytorch_style_training.py"
VOCAB, TAGS = 12, 5


def batches(n=4, b=3, length=6, seed=0):
    """(ids, tags) pairs: the tag of a token is its id mod 4 (+1), pads at the ends."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(1, VOCAB, (b, length))
        ids[0, -2:] = 0
        tags = np.where(ids == 0, 0, ids % 4 + 1)
        out.append((ids, tags))
    return out


def run(backend, state=None):
    source = shim.load(SOURCE, backend)
    if backend == "torch":
        torch.manual_seed(0)
    model = source.Tagger(VOCAB, TAGS)
    if state is not None:
        model.load_state_dict(state)  # torch tensors load directly
    data = [tuple(shim.tensor(backend, a) for a in pair) for pair in batches()]
    losses, rates = source.train(model, data, TAGS)
    ids, tags = (shim.tensor(backend, a) for a in batches(1, seed=1)[0])
    accuracy, pred, per_token = source.evaluate(model, ids, tags)
    return model, losses, rates, accuracy, pred, per_token


def initial_state():
    source = shim.load(SOURCE, "torch")
    torch.manual_seed(0)
    return source.Tagger(VOCAB, TAGS).state_dict()


def test_training_loop_matches_torch():
    state = initial_state()
    t_model, t_losses, t_rates, t_acc, t_pred, t_tok = run("torch", state)
    model, losses, rates, acc, pred, tok = run("minitensor", state)
    np.testing.assert_allclose(losses, t_losses, rtol=1e-5, atol=1e-6)
    assert losses[-1] < 0.5 * losses[0]  # it learns
    np.testing.assert_allclose(rates, t_rates, rtol=1e-12)  # LambdaLR and StepLR chained
    for name, p in t_model.state_dict().items():
        np.testing.assert_allclose(
            shim.numpy(model.state_dict()[name]), p.numpy(), atol=1e-5, err_msg=name
        )
    assert isinstance(acc, float) and acc == pytest.approx(t_acc)
    np.testing.assert_array_equal(shim.numpy(pred), t_pred.numpy())
    assert tok.shape == tuple(t_tok.shape) == (3, 6) and tok.dtype == np.float32
    np.testing.assert_allclose(shim.numpy(tok), t_tok.numpy(), rtol=1e-5, atol=1e-6)
