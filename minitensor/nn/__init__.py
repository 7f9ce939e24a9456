"""minitensor.nn: Module, Parameter, layers, initialisers and gradient utilities, shaped like
torch.nn so that what a learner learns here carries over."""
from . import init, utils
from .layers import (GELU, Dropout, Embedding, Identity, LayerNorm, Linear, ModuleDict,
                     ModuleList, ReLU, Sequential, Sigmoid, SiLU, Softmax, Tanh)
from .module import IncompatibleKeys, Module, Parameter, StateDictError
from .. import functional

__all__ = ["Module", "Parameter", "Linear", "Embedding", "LayerNorm", "Dropout", "ReLU", "GELU",
           "SiLU", "Sigmoid", "Tanh", "Softmax", "Identity", "Sequential", "ModuleList",
           "ModuleDict", "init", "utils", "functional", "StateDictError", "IncompatibleKeys"]
