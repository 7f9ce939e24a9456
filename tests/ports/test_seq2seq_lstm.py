"""tests/ports/seq2seq_lstm.py — bentrevett/pytorch-seq2seq's first notebook (LSTM
Encoder/Decoder/Seq2Seq with teacher forcing, init_weights through model.apply, Adam,
CrossEntropyLoss(ignore_index=pad_index), clip_grad_norm_, translate_sentence) — run under
torch and under minitensor with only its imports switched: from the same weights and the same
teacher-forcing draws, every epoch's train and valid loss, the test loss, the trained weights
and a greedy translation agree.

What the port needed from the library: ``outputs[t] = output`` — the decoder loop writes
each step's prediction into a zeros buffer — was refused (an in-place write recorded no
graph). Tensor.__setitem__ now records the write as torch's CopySlices does (ops/shape.py
SetItem, setitem_recorded; tests/ports/test_setitem_graph_surface.py). pad_sequence with
padding_value, DataLoader(collate_fn=), torch.backends.cudnn, torch.cuda.manual_seed,
LongTensor, Module.apply and nn.init.uniform_(param.data) were there.
Test-side only: dropout 0 (the libraries draw different masks), the training loader unshuffled
(different permutations), and Python's `random` seeded alike before each run, so that
`random.random() < teacher_forcing_ratio` takes the same branches in both."""

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

pytestmark = pytest.mark.torch
SOURCE = "ports/seq2seq_lstm.py"
SIZES = dict(encoder_embedding_dim=8, decoder_embedding_dim=8, hidden_dim=16, n_layers=2)
SMALL = {**SIZES, "encoder_dropout": 0.0, "decoder_dropout": 0.0}


def _train(module, model, device):
    random.seed(0)  # the teacher-forcing draws
    return module.run(model, device, module.make_loaders(16, shuffle=False), n_epochs=6, lr=1e-2)


def _translate(module, model, device, words):
    return module.translate_sentence(
        words, model, None, None, module.en_vocab, module.de_vocab, True, "<sos>", "<eos>", device
    )


def test_seq2seq_trains_as_under_torch(capsys):
    ref, ours = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    theirs, their_device = ref.build_model(**SMALL)
    model, device = ours.build_model(**SMALL)
    model.load_state_dict(theirs.state_dict(), strict=True)
    assert ours.count_parameters(model) == ref.count_parameters(theirs)
    history, test_loss = _train(ours, model, device)
    ref_history, ref_test_loss = _train(ref, theirs, their_device)
    # 24 Adam steps (lr 1e-2, gradients clipped to norm 1) in float32: observed agreement to
    # about 1e-7 relative in the losses; a wrong gradient, a wrong ignore_index or a
    # teacher-forcing branch taken differently changes them in the second digit.
    np.testing.assert_allclose(history, ref_history, rtol=1e-5)
    assert test_loss == pytest.approx(ref_test_loss, rel=1e-5)
    assert history[-1][0] < history[0][0] - 0.2  # it learns (train loss)
    assert history[-1][1] < history[0][1]  # and generalises a little (valid loss)
    for name, p in theirs.state_dict().items():
        np.testing.assert_allclose(
            shim.numpy(model.state_dict()[name]), p.numpy(), atol=1e-4, err_msg=name
        )
    words = ["de4", "DE5", "de6", "de7"]  # "DE5" lower-cased by translate_sentence
    assert _translate(ours, model, device, words) == _translate(ref, theirs, their_device, words)
    assert "| Test Loss:" in capsys.readouterr().out
