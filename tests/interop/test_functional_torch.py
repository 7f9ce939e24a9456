"""minitensor.nn.functional (torch.nn.functional's losses and helpers), nn.MultiheadAttention
and the torch-shaped Module methods without torch: gradients by finite differences (float64),
masks, errors."""

import warnings

import numpy as np
import pytest

import minitensor as mt
import minitensor.nn.functional as FT  # torch.nn.functional's spelling
from minitensor import nn


def test_pad_gradient_and_cropping(leaf):
    x = leaf(2, 3)
    assert mt.gradcheck(lambda t: FT.pad(t, (1, -1, 2, 0), value=3.0), x)
    out = FT.pad(x, (1, -1, 2, 0), value=3.0)
    assert out.shape == (4, 3)
    np.testing.assert_array_equal(out.numpy()[:2], 3.0)
    np.testing.assert_array_equal(out.numpy()[2:, 1:], x.numpy()[:, :2])


def test_nll_and_cross_entropy_gradients_with_weights_and_ignored_targets(leaf):
    x = leaf(3, 4, 2)  # (N, C, d1): classes on axis 1
    t = mt.tensor([[0, 3], [-100, 1], [2, 2]])
    w = mt.tensor([0.5, 1.0, 2.0, 1.5], dtype=mt.float64)
    assert mt.gradcheck(lambda a: FT.nll_loss(a, t, weight=w), x)
    assert mt.gradcheck(lambda a: FT.cross_entropy(a, t, weight=w, label_smoothing=0.1), x)
    assert mt.gradcheck(lambda a: FT.cross_entropy(a, t, reduction="sum"), x)


def test_cross_entropy_classes_on_axis_1_agrees_with_flattened_rows(leaf):
    x = leaf(2, 5, 3)  # (N, C, L): each row a copy of the classes
    t = mt.tensor([[0, 4, 1], [2, 2, 3]])
    ours = FT.cross_entropy(x, t, reduction="none")
    rows = mt.functional.cross_entropy(
        x.permute(0, 2, 1).reshape(-1, 5), t.reshape(-1), reduction="none"
    )
    assert FT.cross_entropy is mt.functional.cross_entropy
    np.testing.assert_allclose(ours.numpy(), rows.numpy().reshape(2, 3))
    assert ours.grad_fn.name == "cross_entropy"  # one fused node, no permute before it


def test_mean_losses_are_zero_when_every_target_is_ignored():
    x = mt.zeros(2, 3, dtype=mt.float64)
    t = mt.tensor([-100, -100])
    assert FT.nll_loss(x, t).item() == 0.0
    assert FT.cross_entropy(x, t, weight=mt.ones(3, dtype=mt.float64)).item() == 0.0


def test_kl_div_gradient_and_zero_targets(leaf):
    logp = leaf(3, 4)
    target = np.array([[0.5, 0.5, 0, 0], [0.25] * 4, [1, 0, 0, 0]])
    assert mt.gradcheck(lambda a: FT.kl_div(a, target, reduction="batchmean"), logp)
    with pytest.warns(UserWarning, match="batchmean"):
        FT.kl_div(logp, target)


def test_loss_errors_name_the_op_and_shapes():
    with pytest.raises(IndexError, match=r"nll_loss.*target 7 is out of range for 4 classes"):
        FT.nll_loss(mt.zeros(2, 4), mt.tensor([1, 7]))
    with pytest.raises(ValueError, match=r"nll_loss.*\(2, 4\).*expected target of shape"):
        FT.nll_loss(mt.zeros(2, 4), mt.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="one_hot"):
        FT.one_hot(mt.zeros(3))


def test_legacy_reduction_flags_map_as_torch():
    with pytest.warns(DeprecationWarning):
        loss = nn.MSELoss(size_average=False)
    assert loss.reduction == "sum"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert nn.NLLLoss(reduce=False).reduction == "none"


def test_sdpa_gradient_and_bool_mask_meaning(leaf):
    q, k, v = leaf(2, 3, 4), leaf(2, 5, 4), leaf(2, 5, 4)
    allowed = np.ones((3, 5), bool)
    allowed[:, 3:] = False  # keys 3 and 4 may not be attended
    assert mt.gradcheck(
        lambda a, b, c: FT.scaled_dot_product_attention(a, b, c, attn_mask=allowed), q, k, v
    )
    out = FT.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    same = FT.scaled_dot_product_attention(q, k[:, :3], v[:, :3])
    np.testing.assert_allclose(out.numpy(), same.numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="not both"):
        FT.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=True)


def test_multihead_attention_gradient_and_masks(leaf):
    mha = nn.MultiheadAttention(4, 2, batch_first=True, dtype="float64")
    x, mem = leaf(2, 3, 4), leaf(2, 5, 4)
    padding = np.zeros((2, 5), bool)
    padding[1, 3:] = True  # True = ignore this key
    assert mt.gradcheck(lambda a, b: mha(a, b, b, key_padding_mask=padding)[0], x, mem)
    _, w = mha(x, mem, mem, key_padding_mask=padding)
    assert w.shape == (2, 3, 5)
    np.testing.assert_array_equal(w.numpy()[1, :, 3:], 0.0)
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0)
    out_all_blocked, _ = mha(x, mem, mem, key_padding_mask=np.ones((2, 5), bool))
    assert np.isfinite(out_all_blocked.numpy()).all()  # zeros, not torch's NaN


def test_multihead_attention_parameters_and_errors():
    mha = nn.MultiheadAttention(6, 3)
    assert [n for n, _ in mha.named_parameters()] == [
        "in_proj_weight",
        "in_proj_bias",
        "out_proj.weight",
        "out_proj.bias",
    ]
    assert mha.in_proj_weight.shape == (18, 6)
    with pytest.raises(ValueError, match="not a multiple"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="attn_mask of shape"):
        x = mt.zeros(3, 1, 6)
        mha(x, x, x, attn_mask=np.zeros((2, 2), bool))


def test_module_to_and_load_state_dict_from_numpy():
    lin = nn.Linear(3, 2)
    assert lin.to("cpu") is lin and lin.to("cpu:0", mt.float64) is lin
    assert lin.weight.dtype == np.float64
    with pytest.raises(RuntimeError, match="CPU only"):
        lin.to("cuda:0")
    with pytest.raises(RuntimeError, match="CPU only"):
        nn.Linear(2, 2, device="cuda")
    with pytest.raises(TypeError, match="floating-point"):
        lin.to(mt.int64)
    state = {"weight": np.ones((2, 3), np.float32), "bias": np.zeros(2, np.float32)}
    lin.load_state_dict(state)
    np.testing.assert_array_equal(lin.weight.numpy(), 1.0)
    assert lin.weight.dtype == np.float64  # values are copied into place


def test_named_modules_with_duplicates_and_memo():
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, shared)
    assert [n for n, _ in seq.named_modules()] == ["", "0"]
    assert [n for n, _ in seq.named_modules(remove_duplicate=False)] == ["", "0", "1"]
    assert [n for n, _ in seq.named_modules(memo={shared})] == [""]
