"""softmax's numba kernel splits its blocks of rows into n_tasks runs (kernels/softmax.py,
_softmax_rows): any number of tasks — one, more than the threads, more than the blocks — and
either build (serial, parallel) must give the same output, bit for bit."""

import numpy as np
import pytest
from numba import prange

from minitensor.kernels import jit, softmax


def _scores_and_mask(shape, mask_shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32), rng.random(mask_shape) < 0.3


@pytest.mark.parametrize(
    "shape, mask_shape",
    [((3, 5, 7), (3, 1, 7)), ((2, 3, 4, 6), (2, 1, 1, 6)), ((1, 9), (1, 9)), ((4, 0, 3), (3,))],
)
def test_any_split_into_tasks_gives_the_same_softmax(shape, mask_shape):
    x, mask = _scores_and_mask(shape, mask_shape)
    x4, mask4 = softmax._as_4d(x, mask)
    built = softmax._softmax_rows.build()
    reference = np.empty_like(x4)
    built.serial(x4, mask4, np.float32(0.5), reference, 1)
    blocks = x4.shape[0] * x4.shape[1]
    # (on one thread the kernel runs _softmax_in_one_run, one call of _softmax_blocks)
    for build in (built.serial, built.parallel, softmax._softmax_in_one_run):
        for n_tasks in (1, 2, 3, blocks + 2):
            y = np.empty_like(x4)
            build(x4, mask4, np.float32(0.5), y, n_tasks)
            np.testing.assert_array_equal(y, reference)
    twin = softmax.softmax_forward_numpy(x, 0.5, mask)
    np.testing.assert_allclose(reference.reshape(shape), twin, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "shape, mask_shape",
    [
        ((2, 3, 5000, 3), (2, 1, 1, 3)),  # rows of 3: a block holds several runs of rows
        ((2, 4097), (2, 4097)),  # one row longer than a run: a run of one row
        ((2, 4, 1), (2, 1, 1)),  # rows of one score
    ],
)
def test_runs_of_rows_cover_every_row_once(shape, mask_shape):
    """The kernel takes exp over runs of rows (_EXP_RUN scores, or one longer row): every row
    of a block must be normalised exactly once, however the runs cut the block."""
    x, mask = _scores_and_mask(shape, mask_shape, seed=1)
    mask[..., 0] = False  # a row of one score stays allowed: its softmax is 1
    y = softmax.softmax_forward_numba(x, 0.5, mask)
    np.testing.assert_allclose(y, softmax.softmax_forward_numpy(x, 0.5, mask), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-5)


def _doubled(x, out):
    for i in prange(x.shape[0]):
        out[i] = 2 * x[i]


def test_a_kernel_given_one_thread_runs_it_where_its_serial_build_would_run():
    """jit.Kernel(one_thread=f): on one thread (here: work below PARALLEL_MIN_WORK) f runs,
    and the serial build, never called, is never compiled."""
    calls = []

    def one_thread(x, out):
        calls.append(x.shape)
        np.multiply(x, 2, out=out)

    doubled = jit.Kernel(_doubled, jit.FASTMATH, one_thread)
    x, out = np.arange(4.0), np.empty(4)
    doubled(x, out)
    assert calls == [(4,)]
    np.testing.assert_array_equal(out, 2 * x)
    assert doubled.serial.signatures == []
