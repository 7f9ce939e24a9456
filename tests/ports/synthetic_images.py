"""Small synthetic stand-ins for MNIST, for the CNN ports in this folder (numpy only, so the
same arrays reach torch and minitensor).

Each 28×28 image is faint uniform noise with one bright 6×6 patch; the patch's place on a
2×5 grid is the label. A CNN separates the ten classes in a few steps, so a short run shows
learning."""

import numpy as np


def digits(n, seed):
    """(images (n, 1, 28, 28) float32 in [0, 1], labels (n,) int64) — ToTensor()'s range."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=n)
    images = rng.rand(n, 1, 28, 28).astype(np.float32) * 0.3
    for i, k in enumerate(labels):
        r, c = 2 + 12 * (k // 5), 1 + 5 * (k % 5)
        images[i, 0, r : r + 6, c : c + 6] += 0.7
    return images, labels.astype(np.int64)
