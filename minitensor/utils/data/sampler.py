"""Samplers: the order in which a DataLoader reads a dataset's indices, and BatchSampler,
which groups them into batches."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ... import random as _random
from ...creation import randint, randperm


class Sampler:
    """An iterable of dataset indices (or, for a batch sampler, of lists of them)."""

    def __init__(self, data_source: Any = None) -> None:
        pass

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """0, 1, …, len(data_source) − 1."""

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A fresh random order of the indices at every iteration (every epoch): a permutation,
    or num_samples draws with replacement=True. Without `generator`, the shared generator
    that mt.manual_seed seeds."""

    def __init__(
        self,
        data_source: Any,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: _random.Generator | None = None,
    ) -> None:
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                f"RandomSampler: num_samples should be a positive integer value, "
                f"but got num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, g = len(self.data_source), self.generator
        if self.replacement:
            return iter(randint(n, (self.num_samples,), generator=g).tolist())
        # num_samples beyond n: whole permutations one after another, as torch
        whole, rest = divmod(self.num_samples, n)
        order = [randperm(n, generator=g).tolist() for _ in range(whole)]
        return itertools.chain(*order, randperm(n, generator=g).tolist()[:rest])

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a fresh random order at every iteration."""

    def __init__(self, indices: Sequence[int], generator: _random.Generator | None = None):
        self.indices, self.generator = indices, generator

    def __iter__(self) -> Iterator[int]:
        order = randperm(len(self.indices), generator=self.generator).tolist()
        return (self.indices[i] for i in order)

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """The sampler's indices in lists of batch_size; the last list is shorter unless
    drop_last=True drops it."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(
                f"BatchSampler: batch_size should be a positive integer value, "
                f"but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(
                f"BatchSampler: drop_last should be a boolean value, but got drop_last={drop_last}"
            )
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self) -> int:
        whole, rest = divmod(len(self.sampler), self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)
