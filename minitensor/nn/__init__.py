"""minitensor.nn: Module, Parameter, layers, losses, attention, initialisers and gradient
utilities, shaped like torch.nn so that what a learner learns here carries over.

`minitensor.nn.functional` is the same module as `minitensor.functional` (torch keeps its
functional ops under torch.nn), so ``import minitensor.nn.functional as F`` works.
"""

import sys as _sys

from .. import functional
from . import init, rnn_utils, utils
from .activation import ELU, Hardtanh, LeakyReLU, ReLU6, Softplus
from .attention import MultiheadAttention
from .conv import (
    AvgPool1d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    Flatten,
    MaxPool1d,
    MaxPool2d,
    Unflatten,
)
from .layers import (
    GELU,
    Dropout,
    Embedding,
    Identity,
    LayerNorm,
    Linear,
    LogSoftmax,
    ModuleDict,
    ModuleList,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from .loss import CrossEntropyLoss, KLDivLoss, MSELoss, NLLLoss
from .module import IncompatibleKeys, Module, Parameter, StateDictError
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

# One module under two names: `import minitensor.nn.functional` finds it here.
_sys.modules[__name__ + ".functional"] = functional
# torch.nn.utils.rnn: `from minitensor.nn.utils.rnn import pad_sequence` finds rnn_utils here.
utils.rnn = rnn_utils
_sys.modules[__name__ + ".utils.rnn"] = rnn_utils

__all__ = [
    "Module",
    "Parameter",
    "Linear",
    "Embedding",
    "LayerNorm",
    "Dropout",
    "ReLU",
    "GELU",
    "SiLU",
    "Sigmoid",
    "Tanh",
    "Softmax",
    "LogSoftmax",
    "Identity",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "MultiheadAttention",
    "Transformer",
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "TransformerDecoderLayer",
    "TransformerDecoder",
    "RNNBase",
    "RNN",
    "LSTM",
    "GRU",
    "RNNCellBase",
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "Conv1d",
    "Conv2d",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Flatten",
    "Unflatten",
    "LeakyReLU",
    "ELU",
    "Softplus",
    "Hardtanh",
    "ReLU6",
    "CrossEntropyLoss",
    "NLLLoss",
    "MSELoss",
    "KLDivLoss",
    "init",
    "utils",
    "functional",
    "StateDictError",
    "IncompatibleKeys",
]
