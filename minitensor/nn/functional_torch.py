"""torch.nn.functional's losses and helpers under the names `minitensor.nn` used first. Every
one lives in `minitensor.functional` (= `minitensor.nn.functional`), with torch's signature,
torch's layout (cross_entropy and nll_loss take the classes on axis 1) and torch's mask meaning
(scaled_dot_product_attention: bool True = MAY attend); this module only re-exports them.
"""

from ..functional import (
    cross_entropy,
    kl_div,
    mse_loss,
    nll_loss,
    one_hot,  # noqa: F401
    pad,
    scaled_dot_product_attention,
)

__all__ = [
    "pad",
    "one_hot",
    "kl_div",
    "nll_loss",
    "cross_entropy",
    "mse_loss",
    "scaled_dot_product_attention",
]
