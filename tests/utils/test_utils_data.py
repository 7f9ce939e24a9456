"""minitensor.utils.data and nn.utils.rnn.pad_sequence against torch's: where the result is
deterministic (sequential order, drop_last, collation, split lengths, padding) the same program
runs under both libraries and the batches must be equal, values, dtypes and containers alike;
shuffles are checked for their properties (a permutation each epoch, reproducible from a seed)."""

import collections

import numpy as np
import pytest

import minitensor as mt
import minitensor.utils.data  # noqa: F401  (importable as torch.utils.data is)
from minitensor.nn.utils.rnn import pad_sequence

Point = collections.namedtuple("Point", "x y")


def _plain(batch):
    """A batch of either library as comparable Python values: every tensor becomes
    ('tensor', dtype name, numpy values); containers keep their type."""
    if isinstance(batch, mt.Tensor):
        return ("tensor", str(batch.dtype), batch.data.tolist())
    if type(batch).__module__ == "torch" and hasattr(batch, "detach"):
        return ("tensor", str(batch.dtype).removeprefix("torch."), batch.detach().numpy().tolist())
    if isinstance(batch, dict):
        return {k: _plain(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return (type(batch).__name__, *map(_plain, batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_plain(b) for b in batch)
    return batch


def _both(program):
    """program(lib) under minitensor and torch, as plain values."""
    torch = pytest.importorskip("torch")
    return _plain(program(mt)), _plain(program(torch))


def _xy(lib, n=7):
    x = lib.arange(n * 3, dtype=lib.float32).reshape(n, 3)
    return x, lib.arange(n) * 10


# ------------------------------------------------------------------- deterministic batches
@pytest.mark.torch
@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (3, False), (3, True), (7, True)])
def test_sequential_batches_match_torch(batch_size, drop_last):
    def program(lib):
        data = lib.utils.data.TensorDataset(*_xy(lib))
        loader = lib.utils.data.DataLoader(data, batch_size=batch_size, drop_last=drop_last)
        return [len(loader), len(data), list(loader)]

    ours, theirs = _both(program)
    assert ours == theirs


SAMPLES = {
    "tensors": lambda lib, i: lib.full((2,), float(i)),
    "numpy": lambda lib, i: np.arange(3, dtype=np.float32) + i,
    "numpy ints": lambda lib, i: np.array([i, 2 * i]),
    "numpy scalars": lambda lib, i: np.float32(i) / 2,
    "floats": lambda lib, i: i / 2,
    "ints": lambda lib, i: i,
    "bools": lambda lib, i: i % 2 == 0,
    "strings": lambda lib, i: f"s{i}",
    "tuples": lambda lib, i: (lib.full((2, 2), float(i)), i),
    "lists": lambda lib, i: [i, [float(i), "a"]],
    "dicts": lambda lib, i: {"x": np.ones(2) * i, "y": {"z": i, "w": (i, i)}},
    "namedtuples": lambda lib, i: Point(i, float(i)),
}


@pytest.mark.torch
@pytest.mark.parametrize("kind", list(SAMPLES))
def test_default_collate_matches_torch(kind):
    def program(lib):
        batch = [SAMPLES[kind](lib, i) for i in range(3)]
        return lib.utils.data.default_collate(batch)

    ours, theirs = _both(program)
    assert ours == theirs


@pytest.mark.torch
def test_loader_options_match_torch():
    """batch_size=None, sampler=, batch_sampler=, collate_fn=, an IterableDataset, a
    ConcatDataset (dataset + dataset) and a Subset, each as torch gives them."""

    class Stream(mt.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(7))

    def program(lib):
        D = lib.utils.data
        data = D.TensorDataset(*_xy(lib))
        stream = type("Stream", (D.IterableDataset,), {"__iter__": Stream.__iter__})()
        both = data + D.TensorDataset(*_xy(lib, 2))
        return [
            list(D.DataLoader(data, batch_size=None)),
            list(D.DataLoader(data, batch_size=2, sampler=[6, 0, 3])),
            list(D.DataLoader(data, batch_sampler=[[1, 2], [0]])),
            list(D.DataLoader(data, batch_size=4, collate_fn=lambda b: len(b))),
            list(D.DataLoader(stream, batch_size=3)),
            list(D.DataLoader(stream, batch_size=3, drop_last=True)),
            list(D.DataLoader(D.Subset(data, [4, 1]), batch_size=2)),
            [len(both), both[8], both[-1]],
            list(D.BatchSampler(D.SequentialSampler(range(5)), 2, drop_last=False)),
            len(D.BatchSampler(range(5), 2, drop_last=True)),
        ]

    ours, theirs = _both(program)
    assert ours == theirs


@pytest.mark.torch
@pytest.mark.parametrize("lengths", [[3, 4], [0.5, 0.5], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]])
def test_random_split_lengths_match_torch(lengths):
    def program(lib):
        g = lib.Generator().manual_seed(0)
        parts = lib.utils.data.random_split(range(7), lengths, generator=g)
        return [len(p) for p in parts]

    ours, theirs = _both(program)
    assert ours == theirs
    parts = mt.utils.data.random_split(range(7), lengths, generator=mt.Generator().manual_seed(1))
    assert sorted(i for p in parts for i in p) == list(range(7))


@pytest.mark.torch
def test_refusals_match_torch():
    torch = pytest.importorskip("torch")
    for lib in (mt, torch):
        D = lib.utils.data
        data = D.TensorDataset(*_xy(lib))
        with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
            D.DataLoader(data, sampler=[0, 1], shuffle=True)
        with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
            D.DataLoader(data, batch_sampler=[[0]], batch_size=2)
        with pytest.raises(ValueError, match="mutually exclusive with drop_last"):
            D.DataLoader(data, batch_size=None, drop_last=True)
        with pytest.raises(ValueError, match="expected unspecified shuffle"):
            D.DataLoader(
                type("S", (D.IterableDataset,), {"__iter__": lambda self: iter(())})(), shuffle=True
            )
        with pytest.raises(ValueError, match="does not equal the length"):
            D.random_split(range(7), [3, 3])
        with pytest.raises(RuntimeError, match="each element in list of batch should be"):
            D.default_collate([[1, 2], [1]])
        with pytest.raises(TypeError, match="default_collate: batch must contain"):
            D.default_collate([object()])


def test_more_workers_are_refused_clearly():
    data = mt.utils.data.TensorDataset(*_xy(mt))
    with pytest.raises(NotImplementedError, match="num_workers=2 is not supported.*num_workers=0"):
        mt.utils.data.DataLoader(data, num_workers=2)
    with pytest.raises(ValueError, match="size mismatch"):
        mt.utils.data.TensorDataset(mt.zeros(3), mt.zeros(4))


# ------------------------------------------------------------------------------- shuffles
def _order(loader):
    return [int(i) for _, y in loader for i in (y.data // 10).tolist()]


def test_shuffle_is_a_permutation_reproducible_from_a_seed():
    data = mt.utils.data.TensorDataset(*_xy(mt, 20))

    def epochs(generator):
        loader = mt.utils.data.DataLoader(data, batch_size=3, shuffle=True, generator=generator)
        return [_order(loader) for _ in range(3)]

    first = epochs(mt.Generator().manual_seed(5))
    assert all(sorted(e) == list(range(20)) for e in first)
    assert first[0] != first[1] != first[2]  # a new order every epoch
    assert first != list(range(20))
    assert epochs(mt.Generator().manual_seed(5)) == first
    assert epochs(mt.Generator().manual_seed(6)) != first
    mt.manual_seed(3)  # without generator=: the shared generator mt.manual_seed seeds
    shared = epochs(None)
    mt.manual_seed(3)
    assert epochs(None) == shared


def test_random_split_and_samplers_are_reproducible():
    def split(seed):
        g = mt.Generator().manual_seed(seed)
        return [list(p.indices) for p in mt.utils.data.random_split(range(30), [10, 20], g)]

    assert split(0) == split(0) != split(1)
    assert sorted(split(0)[0] + split(0)[1]) == list(range(30))
    g = mt.Generator().manual_seed(0)
    draws = list(mt.utils.data.RandomSampler(range(4), True, num_samples=50, generator=g))
    assert len(draws) == 50 and set(draws) <= set(range(4))
    longer = list(mt.utils.data.RandomSampler(range(4), num_samples=10, generator=g))
    assert sorted(longer[:4]) == sorted(longer[4:8]) == list(range(4)) and len(longer) == 10
    picked = list(mt.utils.data.SubsetRandomSampler([5, 7, 9], generator=g))
    assert sorted(picked) == [5, 7, 9]


@pytest.mark.torch
def test_generator_is_torchs_shape():
    torch = pytest.importorskip("torch")
    for lib in (mt, torch):
        g = lib.Generator()
        assert g.initial_seed() == 67280421310721
        assert g.manual_seed(42) is g and g.initial_seed() == 42
        assert g.seed() == g.initial_seed()
    g = mt.Generator().manual_seed(1)
    state, a = g.get_state(), g.numpy_rng.random()
    assert g.set_state(state).numpy_rng.random() == a


# --------------------------------------------------------------------------- pad_sequence
@pytest.mark.torch
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("trailing", [(), (2,)])
def test_pad_sequence_matches_torch(batch_first, padding_side, trailing):
    """Values and each sequence's gradient, in float64."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, *trailing)) for n in (3, 1, 4)]
    upstream = rng.standard_normal(((3, 4) if batch_first else (4, 3)) + trailing)
    out = []
    for lib, make in ((mt, mt.from_numpy), (torch, torch.from_numpy)):
        seqs = [make(a.copy()).requires_grad_() for a in arrays]
        pad = lib.nn.utils.rnn.pad_sequence
        y = pad(seqs, batch_first=batch_first, padding_value=-2.5, padding_side=padding_side)
        (y * make(upstream)).sum().backward()
        out.append([_plain(y)] + [_plain(s.grad) for s in seqs])
    assert out[0] == out[1]  # padding copies values: bit-for-bit


@pytest.mark.torch
def test_pad_sequence_integers_and_a_tensor_match_torch():
    def program(lib):
        pad = lib.nn.utils.rnn.pad_sequence
        ids = [lib.tensor([1, 2, 3]), lib.tensor([4])]
        return [pad(ids, batch_first=True, padding_value=0), pad(lib.ones(2, 3))]

    ours, theirs = _both(program)
    assert ours == theirs
    assert pad_sequence is mt.nn.utils.rnn.pad_sequence


def test_torch_import_spellings_work_in_a_fresh_interpreter():
    """`from torch.utils.data import …`, `from torch.nn.utils.rnn import pad_sequence` and
    `import torch.cuda` as first imports, before anything else loaded minitensor."""
    import subprocess
    import sys

    code = (
        "from minitensor.nn.utils.rnn import pad_sequence\n"
        "from minitensor.utils.data import DataLoader, Dataset\n"
        "import minitensor.cuda, minitensor.utils.data as d\n"
        "import minitensor as mt\n"
        "assert d is mt.utils.data and mt.nn.utils.rnn.pad_sequence is pad_sequence\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
