"""torch.utils.data: datasets, samplers and the DataLoader that turns a dataset into batches.

    dataset[i]  → one sample (anything: a tuple of tensors, a dict, a number)
    sampler     → the order of the indices (SequentialSampler, or RandomSampler to shuffle)
    BatchSampler→ groups the indices into lists of batch_size (drop_last drops a short tail)
    collate_fn  → a list of samples → one batch (default_collate stacks tensors along a new
                  axis 0, recursing into tuples, lists and dicts as torch does)

    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True,
                        generator=mt.Generator().manual_seed(0))
    for xb, yb in loader: ...       # xb (32, *x.shape[1:]), yb (32, *y.shape[1:])

Shuffles draw from `generator=` (an mt.Generator) or, without one, from the shared generator
that mt.manual_seed seeds: the same seed gives the same order every run (numpy's PCG64, so
the order differs from torch's for the same seed). Batches are loaded in the main process:
num_workers must be 0.
"""

from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "ConcatDataset",
    "Subset",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "BatchSampler",
    "DataLoader",
    "random_split",
    "default_collate",
    "default_convert",
]
