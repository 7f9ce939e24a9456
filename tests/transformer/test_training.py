import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn
from transformer.tasks import CopyTask, ReverseTask
from transformer.training import (
    History,
    diagnostics_table,
    evaluate,
    grad_norms_by_module,
    labeled_batch,
    lm_batch,
    module_of,
    seq2seq_batch,
    sequence_loss,
    shift_right,
    token_accuracy,
    train,
)


def test_shift_right_is_teacher_forcing():
    # "I am a dog <eos>" → decoder input "<bos> I am a dog"
    i_, am, a, dog, eos, bos = 10, 11, 12, 13, 2, 1
    tgt = np.array([[i_, am, a, dog, eos]])
    np.testing.assert_array_equal(shift_right(tgt, bos_id=bos), [[bos, i_, am, a, dog]])
    with pytest.raises(ValueError, match=r"shift_right.*\(B, L\)"):
        shift_right(np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="integers"):
        shift_right(np.zeros((2, 3)))


def test_seq2seq_batch_masks_only_when_padded():
    src = np.array([[5, 6, 0], [5, 6, 7]])
    tgt = np.array([[5, 6, 2, 0], [5, 6, 7, 2]])
    b = seq2seq_batch(src, tgt, bos_id=1, pad_id=0)
    assert b["src_padding_mask"].tolist() == [[False, False, True], [False, False, False]]
    np.testing.assert_array_equal(b["tgt_in"][:, 0], [1, 1])
    np.testing.assert_array_equal(b["tgt_out"], tgt)
    assert seq2seq_batch(src[1:], tgt[1:])["src_padding_mask"] is None
    with pytest.raises(ValueError, match="seq2seq_batch"):
        seq2seq_batch(src, tgt[:1])
    lm = lm_batch(np.array([[1, 5, 6, 2]]))
    np.testing.assert_array_equal(lm["ids"], [[1, 5, 6]])
    np.testing.assert_array_equal(lm["labels"], [[5, 6, 2]])
    assert labeled_batch(np.array([[4, 5]]), np.array([3]))["pad_id"] == -100


def test_loss_ignores_pad_positions_and_smooths():
    rng = np.random.default_rng(0)
    logits = mt.tensor(rng.standard_normal((2, 3, 5)), requires_grad=True)
    targets = np.array([[1, 2, 0], [3, 0, 0]])
    loss = sequence_loss(logits, targets, pad_id=0)
    # the mean over the 3 non-pad positions only
    lp = logits.numpy() - np.log(np.exp(logits.numpy()).sum(-1, keepdims=True))
    expected = -(lp[0, 0, 1] + lp[0, 1, 2] + lp[1, 0, 3]) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert np.all(logits.grad.numpy()[0, 2] == 0) and np.all(logits.grad.numpy()[1, 1:] == 0)
    assert np.abs(logits.grad.numpy()[0, 0]).sum() > 0
    smooth = sequence_loss(logits.detach(), targets, pad_id=0, label_smoothing=0.1).item()
    assert smooth != pytest.approx(expected)
    assert token_accuracy(logits, targets) == (
        int(sum(np.argmax(logits.numpy(), -1)[[0, 0, 1], [0, 1, 0]] == [1, 2, 3])),
        3,
    )
    with pytest.raises(ValueError, match="sequence_loss"):
        sequence_loss(logits, targets[:, :2])


def test_module_of_groups_parameters_by_sublayer():
    assert module_of("encoder.layers.0.self_attn.w_q.weight") == "encoder.layers.0.self_attn"
    assert module_of("decoder.layers.11.ff.linear1.bias") == "decoder.layers.11.ff"
    assert module_of("src_embed.token.weight") == "src_embed.token"
    assert module_of("decoder.norm.weight") == "decoder.norm"
    assert module_of("encoder.layers.1.norm2.bias") == "encoder.layers.1.norms"


class AlignedCopy(nn.Module):
    """A test double with the encoder-decoder call signature: predicts tgt[t] from src[t].

    Position-aligned, so it can learn copying (not reversing) without attention; enough to test
    that the loop, the loss masking and evaluation work."""

    def __init__(self, vocab, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, vocab)

    def forward(self, src, tgt_in, src_padding_mask=None, tgt_padding_mask=None):
        L = tgt_in.shape[1]
        src = np.pad(src, ((0, 0), (0, L - src.shape[1])))  # <pad> predicts <eos> / <pad>
        return self.proj(F.relu(self.embed(src)))


def _optimizer(model, lr):
    return mt.optim.Adam(model.parameters(), lr=lr)


def test_train_loop_learns_aligned_copy_and_records_history(capsys):
    mt.manual_seed(0)
    task = CopyTask(alphabet="abcdef", min_len=2, max_len=5)
    rng = np.random.default_rng(0)
    model = AlignedCopy(len(task.tokenizer))
    val = [seq2seq_batch(*task.batch(64, np.random.default_rng(99)))]
    before = evaluate(model, val)
    hist = train(
        model,
        _optimizer(model, 0.05),
        lambda step: seq2seq_batch(*task.batch(32, rng)),
        steps=120,
        eval_every=40,
        val_batches=val,
        quiet=True,
        eval_fn=lambda m: {"token_acc": evaluate(m, val)["token_accuracy"]},
        stop_when=lambda metrics: metrics["token_acc"] == 1.0,
    )
    after = evaluate(model, val)
    assert isinstance(hist, History) and hist.steps[0] == 1
    assert after["loss"] < before["loss"] / 5
    assert after["token_accuracy"] == 1.0
    assert hist.evals and hist.evals[-1]["token_acc"] == 1.0 and "val_loss" in hist.evals[-1]
    assert hist.stopped_early == (hist.last_step < 120)
    arrays = hist.as_arrays()
    assert arrays["losses"].shape == (len(hist.steps),) and "eval_token_acc" in arrays
    assert capsys.readouterr().out == ""  # quiet means quiet
    assert model.training


def test_eval_every_may_be_a_function_of_the_step():
    """eval_every: an int (every that many steps) or step → bool; the last step is always
    evaluated, and the function is asked after every step."""
    mt.manual_seed(0)
    task = CopyTask(alphabet="abc", min_len=2, max_len=3)
    rng = np.random.default_rng(0)
    model = AlignedCopy(len(task.tokenizer))
    asked = []

    def due(step):
        asked.append(step)
        return step in (2, 3)

    hist = train(
        model,
        _optimizer(model, 0.05),
        lambda step: seq2seq_batch(*task.batch(8, rng)),
        steps=6,
        eval_every=due,
        quiet=True,
        eval_fn=lambda m: {"seen": 1},
    )
    assert asked == [1, 2, 3, 4, 5, 6]
    assert [e["step"] for e in hist.evals] == [2, 3, 6]


def test_diagnostics_print_grad_norms_and_losses():
    mt.manual_seed(1)
    task = ReverseTask(alphabet="abc", max_len=4)
    rng = np.random.default_rng(1)
    model = AlignedCopy(len(task.tokenizer))
    printed = []
    val = [seq2seq_batch(*task.batch(16, rng))]
    train(
        model,
        _optimizer(model, 0.01),
        lambda s: seq2seq_batch(*task.batch(8, rng)),
        steps=4,
        diagnostics=True,
        diagnostics_every=2,
        val_batches=val,
        quiet=True,
        print_fn=printed.append,
    )
    assert len(printed) == 2
    from transformer.training import DIAGNOSTICS_LEGEND

    # what the columns mean is said once, under the first table, not after every one
    assert printed[0].endswith(DIAGNOSTICS_LEGEND) and DIAGNOSTICS_LEGEND not in printed[1]
    table = printed[-1]
    assert "step 4" in table and "embed" in table and "proj" in table and "val loss" in table
    norms = grad_norms_by_module(model)
    assert set(norms) == {"embed", "proj"} and all(v > 0 for v in norms.values())
    table = diagnostics_table(1, {}, {"encoder.layers.0.self_attn": (12.5, 0.97)}, 1.0)
    assert "max|score|" in table and "12.5" in table and "0.97" in table


def test_nan_loss_stops_with_a_clear_error():
    task = CopyTask(max_len=3)
    rng = np.random.default_rng(0)
    model = AlignedCopy(len(task.tokenizer))
    with mt.no_grad():
        model.proj.weight.data = np.full(model.proj.weight.shape, np.nan, np.float32)
    with pytest.raises(FloatingPointError, match="step 1"):
        train(
            model,
            _optimizer(model, 0.01),
            lambda s: seq2seq_batch(*task.batch(4, rng)),
            steps=2,
            quiet=True,
        )


def test_trace_records_the_ops_of_one_step_and_clipping_runs():
    task = CopyTask(max_len=3)
    rng = np.random.default_rng(0)
    model = AlignedCopy(len(task.tokenizer))
    hist = train(
        model,
        _optimizer(model, 0.01),
        lambda s: seq2seq_batch(*task.batch(4, rng)),
        steps=3,
        quiet=True,
        trace=True,
        max_grad_norm=1e-3,
    )
    ops = [r.op for r in hist.trace.records]
    scopes = {r.scope for r in hist.trace.records}
    assert len(ops) > 3 and "embed" in scopes and "proj" in scopes
    assert len(hist.steps) == 3  # only the first step is traced


def test_transformer_learns_copy_to_full_token_accuracy():
    """The real encoder-decoder, trained by train(): a tiny copy task reaches 100% in seconds."""
    from transformer import Transformer, TransformerConfig
    from transformer.decoding import greedy_decode

    task = CopyTask(alphabet="abcd", min_len=1, max_len=4)
    V = len(task.tokenizer)
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(V, V, d_model=32, d_ff=64, scale_embeddings=False))
    rng = np.random.default_rng(0)
    texts = task.sample(256, np.random.default_rng(123))
    val = [seq2seq_batch(*task.encode(texts))]
    hist = train(
        model,
        # (lr 1e-2 wobbled around 99.9% for 200 steps on one CPU's bits; 5e-3 reached 100% in
        # 160-260 steps for seeds 0-2 on an AMD EPYC Zen 3)
        mt.optim.Adam(model.parameters(), lr=5e-3),
        lambda s: seq2seq_batch(*task.batch(32, rng)),
        steps=400,
        eval_every=20,
        eval_fn=lambda m: {"token_acc": evaluate(m, val)["token_accuracy"]},
        stop_when=lambda metrics: metrics["token_acc"] == 1.0,
        quiet=True,
    )
    assert hist.evals[-1]["token_acc"] == 1.0, hist.evals[-1]
    # and autoregressive generation (no teacher forcing) copies the held-out strings
    src, _ = task.encode(texts)
    pred = greedy_decode(
        model,
        src,
        max_len=task.tgt_len,
        bos_id=task.tokenizer.bos_id,
        eos_id=task.tokenizer.eos_id,
        src_padding_mask=src == 0,
    )
    assert task.correct(pred, texts).mean() > 0.98


def test_train_and_evaluate_work_with_the_other_two_model_shapes():
    """Decoder-only (next-token) and encoder-only (a class per sequence) through the same loop."""
    from transformer import DecoderOnlyLM, EncoderOnly, TransformerConfig

    rng = np.random.default_rng(0)
    task = CopyTask(alphabet="abcd", max_len=5)
    # GPT-style: learn to continue "<bos> x x x …" sequences (padded, so the mask is exercised)
    texts = task.sample(64, rng)
    ids = task.tokenizer.encode_batch(texts, add_bos=True, add_eos=True)
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, len(task.tokenizer), scale_embeddings=False))
    batch = lm_batch(ids)
    assert batch["padding_mask"] is not None
    before = evaluate(lm, [batch])["loss"]
    train(lm, _optimizer(lm, 1e-2), [batch], steps=30, quiet=True)
    assert evaluate(lm, [batch])["loss"] < before - 0.3

    # BERT-style: is the first letter an "a"? one label per sequence, classes 0/1 (0 is a class,
    # not <pad>: labeled batches ignore -100 instead)
    src = task.tokenizer.encode_batch(texts)
    labels = (src[:, 0] == task.tokenizer.vocab.token_to_id("a")).astype(np.int64)
    clf = EncoderOnly(
        TransformerConfig.tiny(len(task.tokenizer), 0, scale_embeddings=False),
        num_classes=2,
        pooling="first",
    )
    cb = labeled_batch(src, labels)
    train(clf, _optimizer(clf, 1e-2), [cb], steps=40, quiet=True)
    result = evaluate(clf, [cb])
    assert result["tokens"] == 64 and result["token_accuracy"] > 0.9
