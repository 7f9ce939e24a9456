"""torch.nn.functional's losses and helpers under the names `minitensor.nn` used first; every
function lives in `minitensor.functional` (= `minitensor.nn.functional`), with torch's layout
(cross_entropy and nll_loss take the classes on axis 1) and torch's mask meaning
(scaled_dot_product_attention: bool True = MAY attend).

Only mse_loss is written here: torch's signature (input, target, size_average, reduce,
reduction) around `minitensor.functional.mse_loss(input, target, reduction)`.
"""
from .. import functional as F
from ..function import op_error
from ..functional import (cross_entropy, kl_div, legacy_reduction, nll_loss,  # noqa: F401
                          one_hot, pad, scaled_dot_product_attention)

__all__ = ["pad", "one_hot", "kl_div", "nll_loss", "cross_entropy", "mse_loss",
           "scaled_dot_product_attention"]


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """(input − target)², reduced; torch's argument order (reduction is a keyword)."""
    reduction = legacy_reduction(size_average, reduce, reduction, "mse_loss")
    if weight is not None:
        raise op_error("mse_loss", "weight= is not supported (torch added it in 2.6)",
                       NotImplementedError)
    return F.mse_loss(input, target, reduction=reduction)
