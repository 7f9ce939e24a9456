"""Loss modules, as torch.nn names them: each holds its settings and calls the function of
the same name in `minitensor.nn.functional` (torch's layout: classes on axis 1)."""

from __future__ import annotations

import numpy as np

from .. import functional as F
from ..tensor import Tensor
from ..typing import ArrayLike
from .module import Module


class _Loss(Module):
    """Holds `reduction` ('mean' | 'sum' | 'none'), turning torch's deprecated size_average
    and reduce flags into it as torch does."""

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ) -> None:
        super().__init__()
        self.reduction = F.legacy_reduction(size_average, reduce, reduction, type(self).__name__)


class _WeightedLoss(_Loss):
    """A loss with an optional per-class `weight` (C,), kept as a buffer as in torch."""

    def __init__(
        self,
        weight: Tensor | ArrayLike | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        if weight is not None and not isinstance(weight, Tensor):
            weight = Tensor(np.asarray(weight))
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """log_softmax over the classes (axis 1 of the input) followed by the negative
    log-likelihood: input (N, C) or (N, C, d1, …) logits, target (N,) / (N, d1, …) ids or
    probabilities of the input's shape. See `F.cross_entropy`."""

    def __init__(
        self,
        weight: Tensor | ArrayLike | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Tensor | ArrayLike) -> Tensor:
        return F.cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class NLLLoss(_WeightedLoss):
    """−input[n, target[n]] for log-probabilities input (N, C) or (N, C, d1, …)."""

    def __init__(
        self,
        weight: Tensor | ArrayLike | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor | ArrayLike) -> Tensor:
        return F.nll_loss(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
        )


class MSELoss(_Loss):
    """Mean squared error (input and target of one shape)."""

    def forward(self, input: Tensor, target: Tensor | ArrayLike) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class KLDivLoss(_Loss):
    """target·(log target − input) with input log-probabilities; reduction may also be
    'batchmean' (sum / batch size, the KL divergence per example)."""

    def __init__(
        self,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
        log_target: bool = False,
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Tensor | ArrayLike) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
