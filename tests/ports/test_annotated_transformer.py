"""The Annotated Transformer's model code (tests/ports/annotated_transformer_port.py) under torch and
under minitensor with only the imports switched (PORT_EDITS is empty): same weights, same
log-probabilities, gradients, label-smoothed losses, training steps and greedy decodes."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

SOURCE = "ports/annotated_transformer_port.py"
V = 11

# The lines a port still changes beyond its imports: none (`.data` is a tensor outside the
# graph, as torch's, so `x.data.clone()` and `target.data.unsqueeze(1)` run as written).
PORT_EDITS = {}


def load(backend):
    return shim.load(SOURCE, backend, PORT_EDITS)


def models(**kw):
    """The same model in both libraries (torch's initial weights copied into ours)."""
    t_src, m_src = load("torch"), load("minitensor")
    torch.manual_seed(0)
    theirs = t_src.make_model(V, V, N=2, d_model=32, d_ff=64, h=4, dropout=0.0, **kw)
    ours = m_src.make_model(V, V, N=2, d_model=32, d_ff=64, h=4, dropout=0.0, **kw)
    ours.load_state_dict(theirs.state_dict())
    for model in (theirs, ours):  # make_model leaves attention's dropout at 0.1
        for m in model.modules():
            if type(m).__name__ == "Dropout":
                m.p = 0.0
    return (t_src, theirs), (m_src, ours)


def copy_batches(n, seed=0, batch_size=6):
    """The copy task's batches as numpy (the first word is 1; a few pads to exercise masks)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        data = rng.integers(1, V, (batch_size, 10))
        data[:, 0] = 1
        data[0, -3:] = 0
        out.append(data)
    return out


def test_port_runs_with_no_edits():
    assert PORT_EDITS == {}


def test_the_port_runs_under_torch():
    src = load("torch")
    torch.manual_seed(0)
    model = src.make_model(V, V, N=2, d_model=32, d_ff=64, h=4)
    model.eval()
    batch = next(src.data_gen(V, 4, 1))
    out = model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)
    assert out.shape == (4, 9, 32)
    ys = src.greedy_decode(model, batch.src[:1], batch.src_mask[:1], max_len=10, start_symbol=1)
    assert ys.shape == (1, 10)


def test_same_log_probs_and_gradients():
    (t_src, theirs), (m_src, ours) = models()
    data = copy_batches(1)[0]
    tb = t_src.Batch(torch.tensor(data), torch.tensor(data), 0)
    mb = m_src.Batch(shim.tensor("minitensor", data), shim.tensor("minitensor", data), 0)
    t_out = theirs.generator(theirs(tb.src, tb.tgt, tb.src_mask, tb.tgt_mask))
    out = ours.generator(ours(mb.src, mb.tgt, mb.src_mask, mb.tgt_mask))
    np.testing.assert_allclose(shim.numpy(out), shim.numpy(t_out), atol=1e-5)
    t_crit, crit = t_src.LabelSmoothing(V, 0, 0.1), m_src.LabelSmoothing(V, 0, 0.1)
    t_loss = t_crit(t_out.contiguous().view(-1, V), tb.tgt_y.contiguous().view(-1))
    loss = crit(out.contiguous().view(-1, V), mb.tgt_y.contiguous().view(-1))
    np.testing.assert_allclose(shim.numpy(crit.true_dist), shim.numpy(t_crit.true_dist))
    assert loss.item() == pytest.approx(t_loss.item(), rel=1e-5)
    t_loss.backward()
    loss.backward()
    shim.compare_grads(ours, theirs, atol=1e-5)


def test_label_smoothing_example():
    """The tutorial's example: 5 words, padding 0, smoothing 0.4."""
    predict = np.array([[0, 0.2, 0.7, 0.1, 0]] * 5, np.float32)
    target = np.array([2, 1, 0, 3, 3])
    results = []
    for backend in ("torch", "minitensor"):
        src = load(backend)
        crit = src.LabelSmoothing(5, 0, 0.4)
        with np.errstate(divide="ignore"):
            loss = crit(shim.tensor(backend, predict).log(), shim.tensor(backend, target))
        results.append((shim.numpy(crit.true_dist), loss.item()))
    np.testing.assert_allclose(results[1][0], results[0][0])
    # log(0) = -inf where the target is 0 makes 0·inf: NaN in torch, and here alike
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)


def test_first_example_trains_as_torch_and_decodes_the_same():
    (t_src, theirs), (m_src, ours) = models()
    data = copy_batches(3, seed=1)
    t_losses = t_src.train_copy_task(
        theirs, [t_src.Batch(torch.tensor(d), torch.tensor(d), 0) for d in data], V
    )
    losses = m_src.train_copy_task(
        ours,
        [m_src.Batch(shim.tensor("minitensor", d), shim.tensor("minitensor", d), 0) for d in data],
        V,
    )
    np.testing.assert_allclose(losses, t_losses, rtol=1e-4)
    theirs.eval()
    ours.eval()
    src = np.arange(10)[None] % (V - 1) + 1
    t_ys = t_src.greedy_decode(theirs, torch.tensor(src), torch.ones(1, 1, 10), 10, 1)
    ys = m_src.greedy_decode(
        ours, shim.tensor("minitensor", src), shim.tensor("minitensor", np.ones((1, 1, 10))), 10, 1
    )
    np.testing.assert_array_equal(shim.numpy(ys), shim.numpy(t_ys))
