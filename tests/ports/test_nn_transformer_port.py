"""tests/ports/nn_transformer_tutorial.py — a seq2seq program in the style of PyTorch's
nn.Transformer tutorial, with torch.utils.data, pad_sequence and torch.cuda — run under torch
and under minitensor with only its imports switched: the same weights give the same losses
step by step and the same trained weights."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _torch_shim as shim  # noqa: E402

pytestmark = [
    pytest.mark.torch,
    # torch's notes about its own fast paths, which do not apply here
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
    pytest.mark.filterwarnings("ignore:Support for mismatched:UserWarning"),
]
SOURCE = "ports/nn_transformer_tutorial.py"


@pytest.mark.parametrize("norm_first", [False, True])
def test_tutorial_trains_as_under_torch(norm_first):
    ref, ours = shim.load(SOURCE, "torch"), shim.load(SOURCE, "minitensor")
    torch.manual_seed(0)
    theirs = ref.Seq2SeqTransformer(norm_first=norm_first)
    model = ours.Seq2SeqTransformer(norm_first=norm_first)
    model.load_state_dict(theirs.state_dict(), strict=True)
    losses = ours.train(model)
    np.testing.assert_allclose(losses, ref.train(theirs), rtol=2e-5)
    assert losses[-1] < losses[0]  # it learns
    # Adam divides by √v: float32 rounding of a near-zero gradient element can move that
    # weight by a fraction of lr (1e-2 per step) — far below what a wrong gradient would do.
    # The key bias's gradient is exactly 0 (q·b_k adds one constant to a row of scores, which
    # softmax ignores), so Adam turns each library's rounding noise into full steps: skipped.
    d = theirs.d_model
    for name, p in theirs.state_dict().items():
        ours_p, theirs_p = shim.numpy(model.state_dict()[name]), p.numpy()
        if name.endswith("in_proj_bias"):
            ours_p, theirs_p = (np.delete(a, np.s_[d : 2 * d]) for a in (ours_p, theirs_p))
        np.testing.assert_allclose(ours_p, theirs_p, atol=1e-3, err_msg=name)
