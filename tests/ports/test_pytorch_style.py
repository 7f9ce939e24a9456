"""tests/ports/pytorch_style_transformer.py — PyTorch tutorial code — run under torch and under
minitensor with only its imports switched: same weights, same outputs, same gradients."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

SOURCE = "ports/pytorch_style_transformer.py"
PAD, VOCAB = 0, 11


def batch(seed, b=3, s=7, t=6):
    """Source ids, decoder input (starting with 1) and output, some right-padded."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, VOCAB, (b, s))
    src[0, -2:] = PAD
    tgt = rng.integers(2, VOCAB, (b, t + 1))
    tgt[:, 0] = 1
    tgt[1, -2:] = PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def build(backend, torch_model=None, **kw):
    source = shim.load(SOURCE, backend)
    if backend == "torch":
        torch.manual_seed(0)
    model = source.Seq2SeqTransformer(VOCAB, VOCAB, **kw)
    if torch_model is not None:
        model.load_state_dict(torch_model.state_dict())  # torch tensors load directly
    return source, model


def run(source, backend, model, arrays):
    src, tgt_in, tgt_out = (shim.tensor(backend, a) for a in arrays)
    loss, log_probs, predicted = source.loss_and_argmax(model, src, tgt_in, tgt_out)
    loss.backward()
    return loss, log_probs, predicted


def test_the_source_runs_under_torch():
    source, model = build("torch")
    loss, log_probs, predicted = run(source, "torch", model, batch(0))
    assert log_probs.shape == (3, 6, VOCAB) and predicted.dtype == torch.int64
    assert np.isfinite(loss.item())


def test_the_torch_side_leaves_sys_modules_alone():
    import sys

    try:
        shim.load(SOURCE, "minitensor")
    except Exception:
        pass
    assert sys.modules["torch"] is torch
    assert sys.modules["torch.nn.functional"] is torch.nn.functional


@pytest.mark.parametrize("torch_cross_attention", [False, True])
def test_same_outputs_and_gradients_as_torch(torch_cross_attention):
    t_source, theirs = build("torch", torch_cross_attention=torch_cross_attention)
    m_source, ours = build("minitensor", theirs, torch_cross_attention=torch_cross_attention)
    arrays = batch(1)
    t_loss, t_logp, t_pred = run(t_source, "torch", theirs, arrays)
    loss, logp, pred = run(m_source, "minitensor", ours, arrays)
    np.testing.assert_allclose(shim.numpy(logp), shim.numpy(t_logp), atol=1e-5)
    assert loss.item() == pytest.approx(t_loss.item(), abs=1e-5)
    np.testing.assert_array_equal(shim.numpy(pred), shim.numpy(t_pred))
    shim.compare_grads(ours, theirs, atol=1e-5)


def test_training_steps_match_torch():
    t_source, theirs = build("torch")
    m_source, ours = build("minitensor", theirs)
    batches = [batch(seed) for seed in range(3)]
    t_losses = t_source.train_steps(theirs, [[shim.tensor("torch", a) for a in b] for b in batches])
    losses = m_source.train_steps(
        ours, [[shim.tensor("minitensor", a) for a in b] for b in batches]
    )
    np.testing.assert_allclose(losses, t_losses, atol=1e-5)
    for name, value in theirs.state_dict().items():
        if name.endswith("w_k.bias"):
            # q·(k + b) shifts every score of a query by the same q·b, which the softmax
            # ignores: this gradient is rounding noise, and Adam's m/√v blows noise up to lr
            continue
        np.testing.assert_allclose(ours.state_dict()[name], value.numpy(), atol=1e-5, err_msg=name)
