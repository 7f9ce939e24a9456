"""tests/ports/gpt_style_model.py — a nanoGPT-style GPT with its training, evaluation, sampling and
checkpoint code — run under torch and under minitensor with only its imports switched (no
edits at all): same weights give the same logits, loss, gradients, AdamW steps with loss
scaling, clipping and the cosine rate, greedy generations and checkpoints."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

SOURCE = "ports/gpt_style_model.py"
VOCAB = 32
CONFIGS = [dict(flash=True, bias=True), dict(flash=False, bias=True), dict(flash=False, bias=False)]


def models(**cfg):
    """The same GPT in both libraries: torch's initial weights copied into ours."""
    t_src, m_src = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    torch.manual_seed(0)
    theirs = t_src.GPT(t_src.GPTConfig(vocab_size=VOCAB, **cfg))
    ours = m_src.GPT(m_src.GPTConfig(vocab_size=VOCAB, **cfg))
    ours.load_state_dict(theirs.state_dict())  # torch tensors load directly
    return (t_src, theirs), (m_src, ours)


def corpus(n=300, seed=0):
    """A token stream with structure to learn: mostly t → t + 1 (mod VOCAB)."""
    rng = np.random.default_rng(seed)
    steps = np.where(rng.random(n) < 0.8, 1, rng.integers(0, VOCAB, n))
    return (np.cumsum(steps) % VOCAB).astype(np.uint16)  # nanoGPT's train.bin dtype


def offsets(backend, shape, seed=1):
    """Batch offsets as the backend's LongTensors (the same numbers in both libraries)."""
    rng = np.random.default_rng(seed)
    high = 300 - 16 - 1
    values = rng.integers(0, high, shape + (4,))
    return [[shim.tensor(backend, row) for row in step] for step in values]


def forward_backward(src, backend, model, ignore=False):
    data = corpus()
    X, Y = src.get_batch(data, shim.tensor(backend, np.array([0, 7, 50, 120])))
    if ignore:
        Y[0, :5] = -1  # targets a loss must skip
    logits, loss = model(X, Y)
    loss.backward()
    return logits, loss


def test_the_source_runs_under_torch():
    (t_src, theirs), _ = models()
    logits, loss = forward_backward(t_src, "torch", theirs)
    assert logits.shape == (4, 16, VOCAB) and np.isfinite(loss.item())
    assert theirs.transformer.wte.weight is theirs.lm_head.weight


@pytest.mark.parametrize("cfg", CONFIGS)
def test_same_parameters_buffers_and_counts(cfg):
    (_, theirs), (_, ours) = models(**cfg)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())  # the tril buffer, tied names
    assert ours.transformer.wte.weight is ours.lm_head.weight  # tying survives the load
    assert ours.get_num_params() == theirs.get_num_params()
    assert ours.get_num_params(False) == theirs.get_num_params(False)
    for name, p in theirs.state_dict().items():
        np.testing.assert_array_equal(shim.numpy(ours.state_dict()[name]), p.numpy(), name)


def test_initialisation_has_the_stds_asked_for():
    _, (_, ours) = models()  # a fresh model of our own, before any weights are copied
    fresh = type(ours)(type(ours.config)(vocab_size=VOCAB, n_embd=64))
    sd = fresh.state_dict()
    assert np.std(sd["lm_head.weight"]) == pytest.approx(0.02, rel=0.1)
    assert np.std(sd["transformer.h.0.mlp.c_proj.weight"]) == pytest.approx(0.01, rel=0.1)
    assert not np.any(sd["transformer.h.0.attn.c_attn.bias"])


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("ignore", [False, True])
def test_same_logits_loss_and_gradients(cfg, ignore):
    (t_src, theirs), (m_src, ours) = models(**cfg)
    t_logits, t_loss = forward_backward(t_src, "torch", theirs, ignore)
    logits, loss = forward_backward(m_src, "minitensor", ours, ignore)
    np.testing.assert_allclose(shim.numpy(logits), shim.numpy(t_logits), atol=1e-5)
    assert loss.item() == pytest.approx(t_loss.item(), abs=1e-5)
    shim.compare_grads(ours, theirs, atol=1e-5)


def test_the_two_attention_paths_agree():
    (_, flash), (m_src, _) = models(flash=True)
    manual = m_src.GPT(m_src.GPTConfig(vocab_size=VOCAB, flash=False))
    ours_flash = m_src.GPT(m_src.GPTConfig(vocab_size=VOCAB, flash=True))
    ours_flash.load_state_dict(flash.state_dict())
    manual.load_state_dict(flash.state_dict(), strict=False)  # no tril buffer in flash's
    a, _ = forward_backward(m_src, "minitensor", ours_flash)
    b, _ = forward_backward(m_src, "minitensor", manual)
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)


def test_get_batch_and_random_offsets():
    t_src, m_src = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    data = corpus()
    ix = np.array([3, 0, 200])
    tx, ty = t_src.get_batch(data, torch.tensor(ix))
    x, y = m_src.get_batch(data, shim.tensor("minitensor", ix))  # slices by LongTensor items
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    assert x.dtype == np.int64 and np.array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])
    ix = m_src.random_offsets(data)  # torch.randint(high, size)
    assert ix.shape == (4,) and ix.dtype == np.int64
    assert 0 <= ix.numpy().min() and ix.numpy().max() < len(data) - 16


@pytest.mark.parametrize("cfg", CONFIGS[:2])
def test_training_steps_match_torch(cfg):
    (t_src, theirs), (m_src, ours) = models(**cfg)
    data = corpus()
    results = []
    for src, backend, model in ((t_src, "torch", theirs), (m_src, "minitensor", ours)):
        optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), "cpu")
        # decayed: wte (= lm_head, once), wpe, 4 Linear weights per block; the rest: the
        # 4 biases and 2 LayerNorms' weight and bias per block, and ln_f
        assert [len(g["params"]) for g in optimizer.param_groups] == [10, 18]
        results.append(src.train(model, optimizer, data, offsets(backend, (6, 2))))
    (t_losses, t_rates), (losses, rates) = results
    np.testing.assert_allclose(losses, t_losses, atol=1e-5)
    assert rates == t_rates and rates[2] == pytest.approx(1e-2) and rates[-1] == 1e-3  # cosine
    assert losses[-1] < losses[0]
    for name, p in theirs.state_dict().items():
        np.testing.assert_allclose(
            shim.numpy(ours.state_dict()[name]), p.numpy(), atol=1e-5, err_msg=name
        )
    for p in ours.parameters():
        assert p.grad is None  # zero_grad(set_to_none=True)
    assert m_src.scaler.is_enabled() and t_src.scaler.is_enabled()  # 'cpu': it scales
    assert m_src.scaler.get_scale() == t_src.scaler.get_scale() == 2.0**16


def test_estimate_loss_and_its_report_match_torch():
    (t_src, theirs), (m_src, ours) = models()
    data = {"train": corpus(), "val": corpus(seed=5)}
    t_out, t_line = t_src.report(theirs, data, {s: offsets("torch", (1, 2))[0] for s in data}, 3)
    out, line = m_src.report(ours, data, {s: offsets("minitensor", (1, 2))[0] for s in data}, 3)
    assert line == t_line  # f"{loss:.4f}" of a 0-d tensor
    assert out["val"].shape == () and out["val"].item() == pytest.approx(t_out["val"].item())
    assert ours.training and theirs.training  # estimate_loss ends in train()


def test_greedy_generation_gives_the_same_tokens():
    (t_src, theirs), (m_src, ours) = models()
    prompt = [1, 2, 3]
    # 20 new tokens: the context grows past block_size (16) and is cropped to its last 16
    t_ids = t_src.sample(theirs, prompt, 20, top_k=1)
    ids = m_src.sample(ours, prompt, 20, top_k=1)
    assert ids == t_ids and len(ids) == 23 and ids[:3] == prompt
    cold = m_src.sample(ours, prompt, 20, temperature=1e-4)  # temperature → 0 is argmax too
    assert cold == t_ids
    assert not ours.training


def test_sampling_runs_and_keeps_to_the_top_k():
    _, (m_src, ours) = models()
    ours.eval()
    idx = m_src.torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = ours.generate(idx, 8, temperature=0.8, top_k=5)
    assert out.shape == (2, 11) and out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy()[:, :3], idx.numpy())
    assert out.numpy().min() >= 0 and out.numpy().max() < VOCAB
    logits, _ = ours(out[:, :-1][:, -16:])  # the last token's distribution
    top5 = np.argsort(logits.numpy()[:, -1], axis=-1)[:, -5:]
    assert all(out.numpy()[b, -1] in top5[b] for b in range(2))
    assert out.requires_grad is False and out.grad_fn is None  # @torch.no_grad() on generate
    assert ours.generate(idx, 3).shape == (2, 6)  # no top-k: the whole softmax


def test_crop_block_size_matches_torch():
    (t_src, theirs), (m_src, ours) = models(flash=False)
    theirs.crop_block_size(8)
    ours.crop_block_size(8)
    idx = np.random.default_rng(2).integers(0, VOCAB, (2, 8))
    t_logits, _ = theirs(torch.tensor(idx))
    logits, _ = ours(shim.tensor("minitensor", idx))
    np.testing.assert_allclose(shim.numpy(logits), shim.numpy(t_logits), atol=1e-5)
    assert ours.transformer.h[0].attn.bias.shape == (1, 1, 8, 8)
    assert ours.transformer.wpe.weight.shape == (8, 16)
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("backend", ["torch", "minitensor"])
def test_checkpoint_round_trip(tmp_path, backend):
    (t_src, theirs), (m_src, ours) = models(flash=False)
    src, model = (t_src, theirs) if backend == "torch" else (m_src, ours)
    data = corpus()
    optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), "cpu")
    src.train(model, optimizer, data, offsets(backend, (6, 2)))
    model_args = dict(vocab_size=VOCAB, flash=False)
    best = src.estimate_loss(
        model,
        {"train": data, "val": data},
        {s: offsets(backend, (1, 2))[0] for s in ("train", "val")},
    )
    assert (
        src.checkpoint_if_better(model, optimizer, model_args, best, 1e9, 0, str(tmp_path))
        is best["val"]
    )  # iter 0: not saved
    worse = {"val": best["val"] + 1}
    assert (
        src.checkpoint_if_better(model, optimizer, model_args, worse, best["val"], 6, str(tmp_path))
        is best["val"]
    )  # not better: not saved
    assert not list(tmp_path.iterdir())
    src.checkpoint_if_better(model, optimizer, model_args, best, 1e9, 6, str(tmp_path))
    resumed, opt, ckpt = src.resume(str(tmp_path))  # torch.load(map_location=)
    assert ckpt["iter_num"] == 6 and ckpt["best_val_loss"].item() == best["val"].item()
    assert resumed.transformer.wte.weight is resumed.lm_head.weight
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(
            shim.numpy(resumed.state_dict()[name]), shim.numpy(value), name
        )
    if backend == "minitensor":  # our checkpoint's weights load into torch's GPT, strictly
        theirs.load_state_dict({k: torch.tensor(v) for k, v in ckpt["model"].items()})
    # the resumed run continues exactly as the original one would have
    more = offsets(backend, (1, 2), seed=9)
    src.max_iters = 1
    try:
        assert src.train(resumed, opt, data, more) == src.train(model, optimizer, data, more)
    finally:
        src.max_iters = 6


@pytest.mark.parametrize("flash", [True, False])
def test_dropout_is_off_in_eval_and_on_in_train(flash):
    (t_src, theirs), (m_src, ours) = models(flash=flash, dropout=0.2)
    idx = np.random.default_rng(3).integers(0, VOCAB, (2, 10))
    theirs.eval()
    ours.eval()
    t_logits, _ = theirs(torch.tensor(idx))  # no targets: the last position
    logits, loss = ours(shim.tensor("minitensor", idx))
    assert logits.shape == (2, 1, VOCAB) and loss is None
    np.testing.assert_allclose(shim.numpy(logits), shim.numpy(t_logits), atol=1e-5)
    ours.train()
    X, Y = (shim.tensor("minitensor", a) for a in (idx, np.roll(idx, -1, axis=1)))
    _, dropped = ours(X, Y)
    ours.eval()
    _, kept = ours(X, Y)
    assert np.isfinite(dropped.item()) and dropped.item() != kept.item()
    dropped.backward()
    assert all(p.grad is not None for p in ours.parameters())
