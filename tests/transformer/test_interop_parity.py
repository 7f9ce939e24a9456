"""Parity with PyTorch: our Transformer and torch.nn.Transformer (with the same embeddings,
positions and output Linear, through transformer.interop) give the same logits and the same
gradient for every parameter — float32 within 1e-4 relative, float64 within 1e-9 — for Post-Norm
and Pre-Norm, with padding and causal masks. Skipped when torch is not installed."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from transformer import Transformer, TransformerConfig, interop
from transformer import masks as M

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

PAD = 0


def _batch(rng):
    src = rng.integers(1, 11, (3, 6))
    src[0, 4:] = PAD
    src[2, 5:] = PAD
    tgt_in = rng.integers(1, 13, (3, 5))
    tgt_in[1, 3:] = PAD
    tgt_out = rng.integers(0, 13, (3, 5))
    return src, tgt_in, tgt_out


def _close(ours, theirs, tol, what):
    scale = max(np.abs(theirs).max(), 1e-30)
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol * scale, err_msg=what)


CASES = [(np.float32, 1e-4), (np.float64, 1e-9)]


@pytest.mark.parametrize("dtype,tol", CASES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"activation": "gelu", "positional": "learned"},
        {"final_norm": False, "tie_embeddings": True},
    ],
)
def test_logits_and_every_gradient_match_torch(rng, dtype, tol, norm_first, extra):
    cfg = TransformerConfig.tiny(
        11, 13, num_encoder_layers=2, num_decoder_layers=2, norm_first=norm_first, **extra
    )
    model = Transformer(cfg).to(dtype)
    if cfg.positional == "learned":  # make the learned table matter
        for emb in (model.src_embed, model.tgt_embed):
            emb.position.weight.data = rng.standard_normal(emb.position.weight.shape).astype(dtype)
    twin = interop.to_torch(model)
    src, tgt_in, tgt_out = _batch(rng)
    spm, tpm = M.padding_mask(src, PAD), M.padding_mask(tgt_in, PAD)

    logits = model(src, tgt_in, spm, tpm)
    loss = F.cross_entropy(
        logits.reshape(-1, 13), tgt_out.reshape(-1), ignore_index=PAD, label_smoothing=0.1
    )
    loss.backward()

    t_logits = twin(torch.tensor(src), torch.tensor(tgt_in), torch.tensor(spm), torch.tensor(tpm))
    t_loss = torch.nn.functional.cross_entropy(
        t_logits.reshape(-1, 13),
        torch.tensor(tgt_out).reshape(-1),
        ignore_index=PAD,
        label_smoothing=0.1,
    )
    t_loss.backward()

    assert logits.dtype == dtype
    _close(logits.numpy(), t_logits.detach().numpy(), tol, "logits")
    _close(loss.numpy(), t_loss.detach().numpy(), tol, "loss")

    ours = dict(model.named_parameters())
    theirs = dict(twin.named_parameters())
    grad_scale = max(np.abs(p.grad.numpy()).max() for p in theirs.values() if p.grad is not None)
    checked = set()
    for name, tname, rows in interop._model_name_map(model):
        g = theirs[tname].grad.numpy()
        g = g[rows] if rows is not None else g
        og = ours[name].grad.numpy()
        if name.endswith("w_k.bias"):
            # exactly zero in exact arithmetic (softmax ignores a constant added to a row's
            # scores): compare with the scale of all gradients, not its own rounding noise
            np.testing.assert_allclose(og, g, atol=tol * grad_scale, err_msg=name)
        else:
            _close(og, g, tol, name)
        checked.add(name)
    assert checked == set(ours), set(ours) - checked  # every parameter was compared


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_from_torch_loads_a_plain_nn_transformer(rng):
    cfg = TransformerConfig.tiny(11, 13, norm_first=True, dropout=0.0)
    tt = torch.nn.Transformer(
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dim_feedforward=32,
        dropout=0.0,
        batch_first=True,
        norm_first=True,
    )
    src_e, tgt_e = torch.nn.Embedding(11, 16), torch.nn.Embedding(13, 16)
    gen = torch.nn.Linear(16, 13)
    model = interop.from_torch(Transformer(cfg), tt, src_e, tgt_e, gen)
    np.testing.assert_array_equal(
        model.encoder.layers[0].self_attn.w_k.weight.numpy(),
        tt.encoder.layers[0].self_attn.in_proj_weight.detach().numpy()[16:32],
    )
    np.testing.assert_array_equal(
        model.decoder.layers[0].cross_attn.w_o.bias.numpy(),
        tt.decoder.layers[0].multihead_attn.out_proj.bias.detach().numpy(),
    )
    np.testing.assert_array_equal(
        model.src_embed.token.weight.numpy(), src_e.weight.detach().numpy()
    )
    np.testing.assert_array_equal(model.generator.weight.numpy(), gen.weight.detach().numpy())
    # the stacks agree on the same embedded inputs
    x = rng.standard_normal((2, 4, 16)).astype(np.float32)
    y = rng.standard_normal((2, 3, 16)).astype(np.float32)
    with torch.no_grad():
        t_out = tt(
            torch.tensor(x), torch.tensor(y), tgt_mask=torch.tensor(M.causal_mask(3))
        ).numpy()
    memory = model.encoder(mt.tensor(x))
    ours = model.decoder(mt.tensor(y), memory, M.causal_mask(3)).numpy()
    _close(ours, t_out, 1e-4, "stacks")
    with pytest.raises(ValueError, match="final norm"):
        interop.from_torch(Transformer(cfg.replace(final_norm=False)), tt)


def test_round_trip_through_torch_keeps_every_weight():
    model = Transformer(TransformerConfig.tiny(11, 13, positional="learned"))
    again = interop.from_torch(
        Transformer(TransformerConfig.tiny(11, 13, positional="learned")), interop.to_torch(model)
    )
    for (name, a), (_, b) in zip(model.named_parameters(), again.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_to_torch_refuses_what_torch_cannot_express():
    for change in ({"positional": "rotary"}, {"activation": "swiglu"}, {"attention_scale": False}):
        with pytest.raises(ValueError, match="torch"):
            interop.to_torch(Transformer(TransformerConfig.tiny(5, 5, **change)))


def test_to_torch_refuses_a_custom_activation_by_name():
    def squared_relu(x):
        return mt.functional.relu(x) ** 2

    model = Transformer(TransformerConfig.tiny(5, 5, activation=squared_relu))
    with pytest.raises(
        ValueError,
        match=r"to_torch: a custom activation cannot be exported to "
        r"torch\.nn\.Transformer \(.*squared_relu\)",
    ):
        interop.to_torch(model)
