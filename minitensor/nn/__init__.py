"""minitensor.nn: Module, Parameter, layers and initialisers, shaped like torch.nn."""
from . import init
from .layers import (GELU, Dropout, Embedding, Identity, LayerNorm, Linear, ModuleDict,
                     ModuleList, ReLU, Sequential, SiLU, Softmax, Tanh)
from .module import Module, Parameter
from .. import functional
