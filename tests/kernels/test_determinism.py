"""The same run on any thread count: under mt.use_deterministic_algorithms(True) a short
training run gives bit-identical losses and weights on one or two numba threads and one or two
BLAS threads; the kernels that sum over rows split them at fixed places whatever the thread
count, and so do the BLAS-calling products.

Each configuration runs in a child process: numba's and OpenBLAS's thread counts are read when
their pools start. Setting NUMBA_NUM_THREADS also turns polite threads off, so the count asked
for is the count used.
"""

import json
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import minitensor as mt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRAIN = r"""
import hashlib, json, sys
import numpy as np
import minitensor as mt
from transformer import Transformer, TransformerConfig
from transformer.tasks import AdditionTask
from transformer.training import seq2seq_batch, train_step

mt.use_deterministic_algorithms(sys.argv[1] == "1")
mt.manual_seed(0)
task = AdditionTask(digits=3)
v = len(task.tokenizer)
# big enough that the Linear layers go to the BLAS-calling threads (≥ 2^20 multiply-adds) and
# the LayerNorm / bias gradients sum over hundreds of rows
cfg = TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, d_ff=128,
                        num_encoder_layers=1, num_decoder_layers=1, dropout=0.1,
                        activation="relu", max_len=32, pad_id=0)
model = Transformer(cfg)
opt = mt.optim.Adam(model.parameters(), lr=2e-3)
rng = np.random.default_rng(0)
losses = [train_step(model, opt, seq2seq_batch(*task.batch(128, rng)), max_grad_norm=1.0)[0]
          for _ in range(4)]
weights = hashlib.sha256(b"".join(p.numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({"losses": [float(x).hex() for x in losses], "weights": weights}))
"""


def _child(code, *args, numba_threads, blas_threads, **more_env):
    env = dict(os.environ, NUMBA_NUM_THREADS=str(numba_threads), **more_env)
    env["OPENBLAS_NUM_THREADS"] = str(blas_threads)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env=env, timeout=600, cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_training_run_is_bit_identical_on_one_and_two_threads():
    runs = {
        (n, b): _child(TRAIN, "1", numba_threads=n, blas_threads=b)
        for n, b in ((1, 1), (2, 1), (2, 2), (1, 2))
    }
    for n in (1, 2):  # BLAS owning the cores after the first step: its threads where same bits
        runs[(n, n, "blas")] = _child(
            TRAIN, "1", numba_threads=n, blas_threads=n, MINITENSOR_CORE_OWNER="blas"
        )
    first = runs[(1, 1)]
    assert len(set(first["losses"])) > 1  # it trained
    for threads, run in runs.items():
        assert run == first, f"numba/BLAS threads {threads} differ from (1, 1)"


PRODUCTS = r"""
import hashlib, json
import numpy as np
import minitensor as mt
from minitensor.kernels import layer_norm as LN, bias_activation as BA
from minitensor.kernels.fast_matmul import products as P

rng = np.random.default_rng(0)
out = {}
x = rng.standard_normal((1000, 48)).astype(np.float32)
dy = rng.standard_normal((1000, 48)).astype(np.float32)
w, b = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
_, mean, rstd = LN.layer_norm_forward_numba(x, w, b, 1e-5)
grads = LN.layer_norm_backward_numba(dy, x, mean, rstd, w)
out["layer_norm"] = [a.tobytes().hex() for a in grads]
for act in ("relu", "gelu"):
    y, saved = BA.bias_activation_forward_numba(x, b, act)
    out[act] = BA.bias_activation_backward_numba(dy, saved, act)[1].tobytes().hex()
# BLAS may compute a block of 8 rows with another kernel than one of 17: the blocks of rows
# must not follow the thread count (and BLAS's own threads stay out: one BLAS thread per block)
mt.use_deterministic_algorithms(True)
for n, k, m in ((17, 64, 1000), (129, 513, 65), (1000, 333, 77)):
    for dt in (np.float32, np.float64):
        a = rng.standard_normal((n, k)).astype(dt)
        c = rng.standard_normal((k, m)).astype(dt)
        digest = hashlib.sha256(P.matmul(a, c).tobytes()).hexdigest()
        out[f"gemm {n}x{k}x{m} {dt.__name__}"] = digest
# where BLAS owns the cores, np.matmul on BLAS's threads may take a layout it gave the same
# bits on (same_bits_route): the bits must still be the one-thread route's
P._owner[0] = "blas"
for n, k, m in ((17, 64, 1000), (896, 64, 256), (1000, 333, 77)):
    a = rng.standard_normal((n, k)).astype(np.float32)
    c = rng.standard_normal((k, m)).astype(np.float32)
    layouts = {"x·W": (a, c), "x·Wᵀ": (a, c.T.copy().T), "xᵀ·g": (a.T.copy().T, c)}
    for name, (x, y) in layouts.items():
        for _ in range(2):  # the first call checks the layout, the second uses its choice
            digest = hashlib.sha256(P.matmul(x, y).tobytes()).hexdigest()
        out[f"blas-owned {name} {n}x{k}x{m}"] = digest
print(json.dumps(out))
"""


def test_row_sums_and_blas_blocks_do_not_depend_on_the_thread_count():
    one = _child(PRODUCTS, numba_threads=1, blas_threads=1)
    two = _child(PRODUCTS, numba_threads=2, blas_threads=2)
    assert one.keys() == two.keys()
    assert [k for k in one if one[k] != two[k]] == []


def test_the_switch_is_torchs():
    torch = pytest.importorskip("torch")
    assert not mt.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() is False
    try:
        mt.use_deterministic_algorithms(True)
        torch.use_deterministic_algorithms(True, warn_only=True)
        assert mt.are_deterministic_algorithms_enabled() is True
        assert torch.are_deterministic_algorithms_enabled() is True
        mt.use_deterministic_algorithms(True, warn_only=True)  # torch's signature
    finally:
        mt.use_deterministic_algorithms(False)
        torch.use_deterministic_algorithms(False)
    assert mt.are_deterministic_algorithms_enabled() is False


def test_deterministic_products_take_one_route_by_shape_and_agree_with_numpy():
    from minitensor.kernels.fast_matmul import products as P

    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 4, 16, 16)).astype(np.float32)  # a stack the tiles may take
    b = rng.standard_normal((8, 4, 16, 16)).astype(np.float32)
    big = rng.standard_normal((1024, 64)).astype(np.float32), rng.standard_normal((64, 64))
    ints = np.ones((4, 4), np.int64)
    try:
        mt.use_deterministic_algorithms(True)
        # by shape alone: BLAS's gemm from 2^20 multiply-adds, else np.matmul (this stack is
        # below the tiles' 2^18)
        want = "gemm" if a.dtype in P.GEMM else "numpy"  # numpy without an OpenBLAS we can call
        assert P.route(a, b) == "numpy" and P.route(big[0], big[1].astype(np.float32)) == want
        assert P.route(ints, ints) == "numpy"
        np.testing.assert_allclose(P.matmul(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-5)
        # a stack of small matrices past 2^18 multiply-adds: the tile kernel with its default
        # tile (each matrix one thread's), the same bits on one of numba's threads as on all
        stack = rng.standard_normal((64, 4, 32, 16)).astype(np.float32)
        stack_t = stack.swapaxes(-1, -2)
        assert P.route(stack, stack_t) == "tiles"
        assert P.tile_shape(stack, stack_t) == P.TILE_SHAPES[0]
        on_all = P.matmul(stack, stack_t)
        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            np.testing.assert_array_equal(P.matmul(stack, stack_t), on_all)
        finally:
            numba.set_num_threads(threads)
        np.testing.assert_allclose(on_all, np.matmul(stack, stack_t), rtol=1e-5, atol=1e-5)
        x = mt.randn(3, 5, requires_grad=True)
        (x @ mt.randn(5, 2)).sum().backward()
        assert x.grad.shape == (3, 5)
    finally:
        mt.use_deterministic_algorithms(False)


def test_blas_threads_take_a_deterministic_layout_only_with_the_same_bits(monkeypatch):
    """Under deterministic algorithms, np.matmul on BLAS's threads replaces the one-thread route
    on a layout only where BLAS owns the cores (the owners' trial found its threads faster)
    and its bits agreed on random operands of that layout; a broadcast operand is never
    checked."""
    from minitensor.kernels.fast_matmul import products as P

    rng = np.random.default_rng(2)
    a = rng.standard_normal((300, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    monkeypatch.setattr(P, "_SAME_BITS", {})
    monkeypatch.setattr(P, "cores", lambda: 2)
    monkeypatch.setattr(P, "_owner", ["blas"])
    # BLAS's threads as one thread's bits: whether OpenBLAS's do depends on the CPU's kernels
    # (they differ on this layout on an AMD EPYC Zen 3); what is tested is the choice
    monkeypatch.setattr(P, "_numpy_on", lambda count, x, y, out=None: np.matmul(x, y))
    reference = ("numpy", P.numpy_product)
    mt.use_deterministic_algorithms(True)
    try:
        assert P.same_bits_route(a, b, reference)[0] == "numpy"
        chosen = P.same_bits_route(a, b, reference)[1]
        assert chosen is not P.numpy_product  # BLAS's threads, kept for the layout
        assert np.array_equal(chosen(a, b), P.numpy_product(a, b))
        assert P.same_bits_route(a, np.broadcast_to(b[:1], b.shape), reference) == reference
        monkeypatch.setattr(P, "_owner", ["numba"])  # BLAS on one thread: nothing to check
        assert P.same_bits_route(a, b.T.copy().T, reference) == reference
        monkeypatch.setattr(P, "_owner", ["blas"])
        monkeypatch.setattr(P, "_SAME_BITS", {})

        def last_bit(count, x, y, out=None):  # BLAS's threads (not its one thread) round otherwise
            return np.matmul(x, y) * np.float32(1 + 2**-23 if count > 1 else 1)

        monkeypatch.setattr(P, "_numpy_on", last_bit)
        assert P.same_bits_route(a, b, reference) == reference
    finally:
        mt.use_deterministic_algorithms(False)


def test_einsum_under_deterministic_algorithms_does_not_depend_on_blas_threads():
    """mt.einsum hands its products to BLAS (numpy's tensordot); under deterministic algorithms
    BLAS runs them on one thread, so the values and gradients are the same bits whatever
    BLAS's thread count (BLAS shares a product out among its threads, rounding otherwise)."""
    from minitensor.kernels.fast_matmul.blas import blas_threads_at_most

    rng = np.random.default_rng(5)
    a0 = rng.standard_normal((896, 64)).astype(np.float32)
    b0 = rng.standard_normal((64, 64)).astype(np.float32)

    def run():
        a, b = mt.tensor(a0, requires_grad=True), mt.tensor(b0, requires_grad=True)
        out = mt.einsum("ij,jk->ik", a, b)
        (out * out).sum().backward()
        return out.numpy(), a.grad.numpy(), b.grad.numpy()

    mt.use_deterministic_algorithms(True)
    try:
        on_blas_threads = run()
        with blas_threads_at_most(1):
            on_one_thread = run()
    finally:
        mt.use_deterministic_algorithms(False)
    for x, y in zip(on_blas_threads, on_one_thread):
        np.testing.assert_array_equal(x, y)
