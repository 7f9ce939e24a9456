"""The DataLoader: a dataset's samples in batches, in the order its sampler gives."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ... import random as _random
from .collate import default_collate, default_convert
from .dataset import Dataset, IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler


class DataLoader:
    """Batches of a dataset, as torch.utils.data.DataLoader.

    For a map-style dataset: the indices come from `sampler` (SequentialSampler, or a
    RandomSampler drawing from `generator` when shuffle=True), are grouped by a BatchSampler
    of batch_size (or come in lists from `batch_sampler`), and each list of samples is turned
    into a batch by collate_fn (default_collate). batch_size=None gives the samples one by one
    (through default_convert). An IterableDataset is read in order and cut into batches.
    len(loader) is the number of batches. pin_memory, timeout, worker_init_fn, prefetch_factor
    and the other worker options are accepted for torch's signature; num_workers must be 0.
    """

    def __init__(
        self,
        dataset: Dataset | Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable[int] | None = None,
        batch_sampler: Sampler | Iterable[list[int]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: _random.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        _check_workers(num_workers)
        self._iterable = isinstance(dataset, IterableDataset)
        _check_options(self._iterable, batch_size, shuffle, sampler, batch_sampler, drop_last)
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        elif sampler is None and not self._iterable:
            sampler = (
                RandomSampler(dataset, generator=generator)
                if shuffle
                else SequentialSampler(dataset)
            )
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.worker_init_fn, self.prefetch_factor = worker_init_fn, prefetch_factor
        self.persistent_workers = persistent_workers
        batched = batch_size is not None or batch_sampler is not None
        self.collate_fn = collate_fn or (default_collate if batched else default_convert)

    def __iter__(self) -> Iterator[Any]:
        if self._iterable:
            return self._iterate_stream()
        if self.batch_sampler is None:  # batch_size=None: one sample at a time
            return (self.collate_fn(self.dataset[i]) for i in self.sampler)
        return (self.collate_fn([self.dataset[i] for i in ix]) for ix in self.batch_sampler)

    def _iterate_stream(self):
        """An IterableDataset's samples in order, in batches of batch_size."""
        if self.batch_size is None:
            yield from (self.collate_fn(sample) for sample in self.dataset)
            return
        it = iter(self.dataset)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # a TypeError if the stream has no length, as in torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)


def _check_workers(num_workers):
    if num_workers < 0:
        raise ValueError(
            "DataLoader: num_workers option should be non-negative; "
            "use num_workers=0 to disable multiprocessing"
        )
    if num_workers > 0:
        raise NotImplementedError(
            f"DataLoader: num_workers={num_workers} is not supported; minitensor loads "
            f"batches in the main process, so use num_workers=0 (the default; the result "
            f"is the same, only loading is not done in parallel)"
        )


def _check_options(iterable, batch_size, shuffle, sampler, batch_sampler, drop_last):
    """torch's refusals of option combinations that contradict each other."""
    if iterable:
        for name, value in (("shuffle", shuffle), ("sampler", sampler)):
            if value not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified {name} "
                    f"option, but got {name}={value}"
                )
        if batch_sampler is not None:
            raise ValueError(
                f"DataLoader with IterableDataset: expected unspecified batch_sampler "
                f"option, but got batch_sampler={batch_sampler}"
            )
    if sampler is not None and shuffle:
        raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler or drop_last):
        raise ValueError(
            "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
            "shuffle, sampler, and drop_last"
        )
    if batch_size is None and drop_last:
        raise ValueError(
            "DataLoader: batch_size=None option disables auto-batching and is mutually "
            "exclusive with drop_last"
        )
