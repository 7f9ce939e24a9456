"""Datasets: dataset[i] → one sample. A map-style Dataset has __getitem__ and __len__; an
IterableDataset is a stream (__iter__). TensorDataset, ConcatDataset (`a + b`), Subset and
random_split build datasets from others."""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ... import random as _random
from ...creation import randperm
from ...tensor import Tensor


class Dataset:
    """A map-style dataset: subclasses define __getitem__(index) → sample and __len__.
    `a + b` concatenates two datasets."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A stream of samples: subclasses define __iter__. The DataLoader reads it in order and
    batches it; it cannot be shuffled or sampled (it has no indices)."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class TensorDataset(Dataset):
    """Sample i is (t[i] for each tensor): tensors (n, …) that share their first size n."""

    def __init__(self, *tensors: Tensor) -> None:
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) > 1:
            raise ValueError(
                f"TensorDataset: size mismatch between tensors: shapes "
                f"{[tuple(t.shape) for t in tensors]} must share their first size"
            )
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after another: index len(a) is b[0]."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            if -index > len(self):
                raise ValueError("ConcatDataset: absolute value of index should not exceed length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(
    dataset: Dataset,
    lengths: Sequence[int | float],
    generator: _random.Generator | None = None,
) -> list[Subset]:
    """Split `dataset` at random into non-overlapping Subsets of the given lengths, or of
    fractions of len(dataset) summing to 1 (floor of each, the remainder handed out one by
    one from the first split on, as torch does)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= n:
        lengths = _fraction_lengths(lengths, n)
    if sum(lengths) != n:
        raise ValueError(
            f"random_split: sum of input lengths {list(lengths)} does not equal the length "
            f"of the input dataset ({n})"
        )
    order = randperm(n, generator=generator).tolist()
    ends = itertools.accumulate(lengths)
    return [Subset(dataset, order[end - k : end]) for end, k in zip(ends, lengths)]


def _fraction_lengths(fractions, n):
    lengths = []
    for i, frac in enumerate(fractions):
        if not 0 <= frac <= 1:
            raise ValueError(f"random_split: fraction at index {i} ({frac}) is not in [0, 1]")
        lengths.append(math.floor(n * frac))
    for i in range(n - sum(lengths)):
        lengths[i % len(lengths)] += 1
    for i, k in enumerate(lengths):
        if k == 0:
            warnings.warn(
                f"random_split: length of split at index {i} is 0; this might result in "
                f"an empty dataset",
                stacklevel=3,
            )
    return lengths
