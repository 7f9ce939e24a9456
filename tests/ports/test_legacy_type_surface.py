"""x.type(torch.FloatTensor) / x.type(torch.LongTensor) — converting with a legacy tensor
type, as MorvanZhou's 401_CNN.py does — side by side with torch (added for that port,
tests/ports/morvan_cnn.py)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import minitensor as mt  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.mark.parametrize(
    "values", [np.array([[0, 7, 255]], np.uint8), np.array([1.7, -2.5, 3.0]), np.array([3, -4])]
)
@pytest.mark.parametrize("legacy", ["FloatTensor", "LongTensor"])
def test_type_with_a_legacy_constructor_converts_as_torch(values, legacy):
    ours = mt.tensor(values).type(getattr(mt, legacy))
    theirs = torch.tensor(values).type(getattr(torch, legacy))
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_author_s_line():
    """uint8 images (n, 28, 28) → float32 (n, 1, 28, 28) in [0, 1], and still a dtype works."""
    images = np.random.RandomState(0).randint(0, 256, (5, 28, 28)).astype(np.uint8)
    ours = mt.unsqueeze(mt.tensor(images), dim=1).type(mt.FloatTensor)[:2000] / 255.0
    theirs = torch.unsqueeze(torch.tensor(images), dim=1).type(torch.FloatTensor)[:2000] / 255.0
    assert ours.shape == tuple(theirs.shape) == (5, 1, 28, 28) and ours.dtype == np.float32
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-7)
    assert mt.tensor(images).type(mt.float64).dtype == np.float64
