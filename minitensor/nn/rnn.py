"""Recurrent layers: RNN, LSTM and GRU (and their one-step cells), with torch.nn's arguments,
parameter names, gate order and initialisation, so a torch `state_dict()` loads strictly.

Each is built from ordinary minitensor ops (linear, sigmoid, tanh, stack), so the graph shows
every gate and autograd differentiates through time by itself. One time step is a few lines:

- RNN:  h' = tanh(W_ih x + b_ih + W_hh h + b_hh)            (or relu)
- LSTM: i, f, g, o = σ, σ, tanh, σ of (W_ih x + b_ih + W_hh h + b_hh), split in four;
        c' = f ⊙ c + i ⊙ g;  h' = o ⊙ tanh(c')
- GRU:  r, z = σ(W_ir x + b_ir + W_hr h + b_hr), σ(W_iz x + b_iz + W_hz h + b_hz);
        n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn));  h' = (1 − z) ⊙ n + z ⊙ h

(torch's GRU puts r inside the product with W_hn h + b_hn, as Cho et al. 2014's eq. 8 does
not: that changes the numbers, so we follow torch.)

Shapes, as torch: input (L, N, H_in), or (N, L, H_in) with batch_first=True, or unbatched
(L, H_in); h_0 (D·num_layers, N, H) (D = 2 when bidirectional) or (D·num_layers, H) unbatched;
output (L, N, D·H) (batch_first: (N, L, D·H)); h_n like h_0. The product W_ih x of every time
step is one matrix product before the loop; only W_hh h must wait for the previous step.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .. import functional as F
from ..creation import empty_like_shape, zeros
from ..errors import op_error
from ..tensor import Tensor
from ..typing import DType
from . import init
from .module import Module, Parameter, check_device

# how many blocks of hidden_size rows W_ih and W_hh have, in torch's order
_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ------------------------------------------------------------------ one time step
def rnn_step(xw: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, relu: bool) -> Tensor:
    """h' = act(xw + W_hh h + b_hh), where xw = W_ih x + b_ih. xw (N, H), h (N, H) → (N, H)."""
    pre = xw + F.linear(h, w_hh, b_hh)
    return F.relu(pre) if relu else F.tanh(pre)


def lstm_step(
    xw: Tensor, state: tuple[Tensor, Tensor], w_hh: Tensor, b_hh: Tensor | None
) -> tuple[Tensor, Tensor]:
    """One LSTM step. xw = W_ih x + b_ih (N, 4H); state (h, c), each (N, H) → (h', c')."""
    h, c = state
    i, f, g, o = F.chunk(xw + F.linear(h, w_hh, b_hh), 4, dim=-1)  # torch's gate order
    c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)  # forget some memory, write some new
    h = F.sigmoid(o) * F.tanh(c)  # read what the output gate lets through
    return h, c


def gru_step(xw: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """One GRU step. xw = W_ih x + b_ih (N, 3H); h (N, H) → h' (N, H)."""
    x_r, x_z, x_n = F.chunk(xw, 3, dim=-1)
    h_r, h_z, h_n = F.chunk(F.linear(h, w_hh, b_hh), 3, dim=-1)
    r = F.sigmoid(x_r + h_r)  # reset: how much of the old state the candidate sees
    z = F.sigmoid(x_z + h_z)  # update: how much of the old state is kept
    n = F.tanh(x_n + r * h_n)
    return (1 - z) * n + z * h


def _step(mode, xw, state, w_hh, b_hh):
    if mode == "LSTM":
        return lstm_step(xw, state, w_hh, b_hh)
    if mode == "GRU":
        return gru_step(xw, state, w_hh, b_hh)
    return rnn_step(xw, state, w_hh, b_hh, relu=mode == "RNN_RELU")


def _mode(cls_name, nonlinearity):
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"{cls_name}: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
    return "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"


def _uniform_init(module, hidden_size):
    """torch's reset_parameters for recurrent layers: every weight and bias U(±1/√hidden)."""
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    for p in module.parameters():
        init.uniform_(p, -bound, bound)


# ------------------------------------------------------------------ the layers
class RNNBase(Module):
    """What RNN, LSTM and GRU share: the parameters of every layer and direction, the checks
    on input and state, and the loop over layers and time."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        name = "LSTM" if mode == "LSTM" else "GRU" if mode == "GRU" else "RNN"
        check_device(device, name)
        _check_sizes(name, input_size, hidden_size, num_layers, dropout, proj_size)
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, 0
        gate_size = _GATES[mode] * hidden_size
        directions = 2 if bidirectional else 1
        for layer in range(num_layers):
            layer_in = input_size if layer == 0 else hidden_size * directions
            for suffix in ("", "_reverse")[:directions]:
                shapes = {
                    "weight_ih": (gate_size, layer_in),
                    "weight_hh": (gate_size, hidden_size),
                }
                if bias:
                    shapes |= {"bias_ih": (gate_size,), "bias_hh": (gate_size,)}
                for kind, shape in shapes.items():
                    p = Parameter(empty_like_shape(shape, dtype))
                    setattr(self, f"{kind}_l{layer}{suffix}", p)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _uniform_init(self, self.hidden_size)

    def flatten_parameters(self) -> None:
        """Does nothing: torch compacts weights for cuDNN here; the CPU has no such need."""

    def _weights(self, layer, suffix):
        get = lambda kind: getattr(self, f"{kind}_l{layer}{suffix}", None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        """input (L, N, H_in) (batch_first: (N, L, H_in)) or unbatched (L, H_in); hx as torch
        (zeros when None). Returns (output, h_n), or (output, (h_n, c_n)) for an LSTM."""
        x, hx, batched = self._prepare(input, hx)
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(("", "_reverse")[:directions]):
                state = _select_state(hx, layer * directions + d)
                out, state = self._run_direction(x, state, layer, suffix, reverse=d == 1)
                outs.append(out)
                finals.append(state)
            x = outs[0] if directions == 1 else F.concat(outs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return self._finish(x, finals, batched)

    def _run_direction(self, x, state, layer, suffix, reverse):
        """One layer, one direction over the sequence x (L, N, H_in) → (L, N, H), last state."""
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, suffix)
        xw = F.linear(x, w_ih, b_ih)  # W_ih x + b_ih for every time step at once
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        outs = [None] * x.shape[0]
        for t in steps:
            state = _step(self.mode, xw[t], state, w_hh, b_hh)
            outs[t] = state[0] if self.mode == "LSTM" else state
        return F.stack(outs, axis=0), state

    def _prepare(self, input, hx):
        """input as time-major (L, N, H_in), hx as (D·num_layers, N, H) tensors (a pair for an
        LSTM), and whether the input had a batch axis."""
        if not isinstance(input, Tensor):
            raise TypeError(
                f"{type(self).__name__}: input must be a Tensor, got {type(input).__name__} "
                f"(packed sequences are not supported: pad the batch instead)"
            )
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            layout = "(N, L, H_in)" if self.batch_first else "(L, N, H_in)"
            raise op_error(
                type(self).__name__,
                f"input of shape {input.shape}; expected {layout} or unbatched (L, H_in) "
                f"with H_in = input_size = {self.input_size}",
            )
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        states = hx if isinstance(hx, (tuple, list)) else (hx,)
        if (self.mode == "LSTM") != isinstance(hx, (tuple, list)) and hx is not None:
            raise TypeError(
                f"{type(self).__name__}: hx must be "
                f"{'a tuple (h_0, c_0)' if self.mode == 'LSTM' else 'one tensor h_0'}"
            )
        n_states = 2 if self.mode == "LSTM" else 1
        full = tuple(self._initial_state(s, x, batched) for s in (states * n_states)[:n_states])
        return x, (full if self.mode == "LSTM" else full[0]), batched

    def _initial_state(self, h, x, batched):
        layers = self.num_layers * (2 if self.bidirectional else 1)
        expected = (layers, x.shape[1], self.hidden_size)
        if h is None:
            return zeros(*expected, dtype=x.dtype)
        shown = expected if batched else (layers, self.hidden_size)
        if h.shape != shown:
            raise op_error(
                type(self).__name__,
                f"hidden state of shape {h.shape}; expected {shown} (num_layers × directions, "
                f"{'batch, ' if batched else ''}hidden_size) for input of length {x.shape[0]}",
            )
        return h if batched else h.unsqueeze(1)

    def _finish(self, x, finals, batched):
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        if self.mode == "LSTM":
            h_n = F.stack([h for h, _ in finals], axis=0)
            c_n = F.stack([c for _, c in finals], axis=0)
            if not batched:
                return x.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
            return x, (h_n, c_n)
        h_n = F.stack(finals, axis=0)
        return (x, h_n) if batched else (x.squeeze(1), h_n.squeeze(1))

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        for name, default in (("bias", True), ("batch_first", False), ("dropout", 0.0)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s + (", bidirectional=True" if self.bidirectional else "")


def _check_sizes(name, input_size, hidden_size, num_layers, dropout, proj_size):
    if proj_size:
        raise NotImplementedError(f"{name}: proj_size={proj_size} is not supported (only 0)")
    if not (isinstance(hidden_size, int) and hidden_size > 0):
        raise ValueError(f"{name}: hidden_size must be a positive int, got {hidden_size!r}")
    if not (isinstance(num_layers, int) and num_layers > 0):
        raise ValueError(f"{name}: num_layers must be a positive int, got {num_layers!r}")
    if not (isinstance(input_size, int) and input_size >= 0):
        raise ValueError(f"{name}: input_size must be a non-negative int, got {input_size!r}")
    if not 0 <= dropout <= 1 or isinstance(dropout, bool):
        raise ValueError(f"{name}: dropout must be a number in [0, 1], got {dropout!r}")
    if dropout > 0 and num_layers == 1:
        warnings.warn(  # torch's words: the dropout would never be applied
            "dropout option adds dropout after all but last recurrent layer, so non-zero "
            f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
            f"num_layers={num_layers}",
            UserWarning,
            stacklevel=4,
        )


def _select_state(hx, index):
    """Layer-and-direction `index` of the initial state (a pair for an LSTM)."""
    if isinstance(hx, tuple):
        return hx[0][index], hx[1][index]
    return hx[index]


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(W_ih x_t + b_ih + W_hh h_{t−1} + b_hh) (nonlinearity='relu' for
    relu). Arguments, shapes and parameter names as torch.nn.RNN (see the module docstring)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__(
            _mode("RNN", nonlinearity),
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory (Hochreiter & Schmidhuber 1997, with a forget gate): gates
    i, f, g, o in torch's order; forward(input, (h_0, c_0)) → (output, (h_n, c_n)).
    Arguments, shapes and parameter names as torch.nn.LSTM; proj_size is refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit (Cho et al. 2014) in torch's form: gates r, z, n, with
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)). Arguments, shapes and parameter names as
    torch.nn.GRU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("GRU", *args, **kwargs)


# ------------------------------------------------------------------ the cells
class RNNCellBase(Module):
    """One time step as a module: weight_ih (G·H, H_in), weight_hh (G·H, H), bias_ih, bias_hh
    (G·H,), as torch's cells. input (N, H_in) or unbatched (H_in,)."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__()
        name = {"LSTM": "LSTMCell", "GRU": "GRUCell"}.get(mode, "RNNCell")
        check_device(device, name)
        _check_sizes(name, input_size, hidden_size, 1, 0.0, 0)
        self.mode, self.input_size, self.hidden_size, self.bias = (
            mode,
            input_size,
            hidden_size,
            bias,
        )
        gate_size = _GATES[mode] * hidden_size
        self.weight_ih = Parameter(empty_like_shape((gate_size, input_size), dtype))
        self.weight_hh = Parameter(empty_like_shape((gate_size, hidden_size), dtype))
        for kind in ("bias_ih", "bias_hh"):
            if bias:
                setattr(self, kind, Parameter(empty_like_shape((gate_size,), dtype)))
            else:
                self.register_parameter(kind, None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _uniform_init(self, self.hidden_size)

    def _cell(self, input, hx):
        """One step on batched (N, …) tensors; unbatched input gains and loses the axis."""
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise op_error(
                type(self).__name__,
                f"input of shape {input.shape}; expected (N, {self.input_size}) or "
                f"({self.input_size},)",
            )
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        states = hx if isinstance(hx, (tuple, list)) else (hx,) * (2 if self.mode == "LSTM" else 1)
        expected = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        full = []
        for h in states:
            if h is None:
                h = zeros(x.shape[0], self.hidden_size, dtype=x.dtype)
            elif h.shape != expected:
                raise op_error(
                    type(self).__name__,
                    f"hidden state of shape {h.shape}; expected {expected} for input of shape "
                    f"{input.shape}",
                )
            else:
                h = h if batched else h.unsqueeze(0)
            full.append(h)
        xw = F.linear(x, self.weight_ih, self.bias_ih)
        state = tuple(full) if self.mode == "LSTM" else full[0]
        out = _step(self.mode, xw, state, self.weight_hh, self.bias_hh)
        if batched:
            return out
        return tuple(s.squeeze(0) for s in out) if self.mode == "LSTM" else out.squeeze(0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        s += "" if self.bias else ", bias=False"
        return s + (", nonlinearity='relu'" if self.mode == "RNN_RELU" else "")


class RNNCell(RNNCellBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu), as torch.nn.RNNCell."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        mode = _mode("RNNCell", nonlinearity)
        super().__init__(mode, input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        """input (N, H_in) or (H_in,); hx (N, H) or (H,) (zeros when None) → h' like hx."""
        return self._cell(input, hx)


class LSTMCell(RNNCellBase):
    """One LSTM step, as torch.nn.LSTMCell: forward(input, (h, c)) → (h', c')."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)

    def forward(
        self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """input (N, H_in) or (H_in,); hx = (h, c), each (N, H) or (H,) → (h', c')."""
        return self._cell(input, hx)


class GRUCell(RNNCellBase):
    """One GRU step, as torch.nn.GRUCell: forward(input, h) → h'."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: DType | None = None,
    ) -> None:
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        """input (N, H_in) or (H_in,); hx (N, H) or (H,) (zeros when None) → h' like hx."""
        return self._cell(input, hx)
