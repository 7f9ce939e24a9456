"""Dropout from a counter-based random generator: numba kernels and their numpy twins.

Inverted dropout keeps each entry with probability 1 − p and scales it by 1/(1 − p). Which
entries are kept is decided by hashing (seed, position): entry i of a call draws the random
integer splitmix64(seed + (i + 1)·γ), and is kept when its top 24 bits, read as a fraction of
2²⁴, are ≥ p. So

* the mask needs no stored state: backward recomputes it from the seed instead of keeping an
  array of the input's size alive until then;
* every entry is independent of every other, so the kernel splits the work among threads and
  still draws exactly the numbers the twin draws — both backends drop the same entries;
* the caller draws the seed from minitensor's generator, so `mt.manual_seed` and checkpoints
  (which save the generator's state) make dropout reproducible.

splitmix64 (Steele, Lea & Flood, 2014; the seeding generator of Java's SplittableRandom and of
xoshiro) is three xor-shifts and two multiplications of 64-bit integers; γ = 0x9E3779B97F4A7C15 is
2⁶⁴ divided by the golden ratio. Its outputs pass the BigCrush statistical tests.
"""

import numpy as np

from .jit import kernel, prange

GAMMA = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
FRACTION_BITS = 24  # entry kept when (hash >> 40) ≥ p·2²⁴


def keep_threshold(p):
    """The integer the top 24 bits of a hash must reach for an entry to be kept: round(p·2²⁴).
    Exact in both backends, so they agree on every entry."""
    return np.uint64(round(p * (1 << FRACTION_BITS)))


# ---- numpy twins -----------------------------------------------------------------------------


def dropout_mask_numpy(n, seed, p):
    """keep[i] for i < n: splitmix64(seed + (i + 1)·γ) >> 40 ≥ round(p·2²⁴) (bool array (n,)).
    uint64 arithmetic wraps around mod 2⁶⁴, as the hash intends; in place, to spare memory."""
    z = np.arange(1, n + 1, dtype=np.uint64)
    z *= GAMMA
    z += np.uint64(seed)
    for shift, multiplier in ((30, MIX1), (27, MIX2)):
        z ^= z >> np.uint64(shift)
        z *= multiplier
    z ^= z >> np.uint64(31)
    return (z >> np.uint64(64 - FRACTION_BITS)) >= keep_threshold(p)


def dropout_numpy(x, seed, p):
    """Inverted dropout of x (any shape): x·keep/(1 − p), the mask drawn from (seed, position
    in x's C order). Used for the forward pass (x the input) and the backward pass (x the
    gradient: the same entries are kept and scaled)."""
    keep = dropout_mask_numpy(x.size, seed, p).reshape(x.shape)
    scale = x.dtype.type(1.0 / (1.0 - p))
    return np.where(keep, x * scale, x.dtype.type(0))


# ---- numba kernel -----------------------------------------------------------------------------


@kernel()
def keep(seed, index, threshold):
    """True when entry `index` of a dropout call with this seed is kept:
    splitmix64(seed + (index + 1)·γ) >> 40 ≥ threshold (seed, index, threshold uint64). Fused
    attention calls it too, so it drops the entries dropout() would."""
    z = seed + (index + np.uint64(1)) * GAMMA
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(64 - FRACTION_BITS)) >= threshold


@kernel(parallel=True)
def _dropout_flat(x, seed, threshold, scale, out):
    """out[i] = x[i]·scale if keep(seed, i, threshold), else 0; x, out (n,) contiguous; seed
    and threshold uint64."""
    for i in prange(x.shape[0]):
        out[i] = x[i] * scale if keep(seed, np.uint64(i), threshold) else x.dtype.type(0)


def dropout_numba(x, seed, p):
    """Numba twin of dropout_numpy (same mask, same result)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(flat)
    _dropout_flat(flat, np.uint64(seed), keep_threshold(p), x.dtype.type(1.0 / (1.0 - p)), out)
    return out.reshape(x.shape)
