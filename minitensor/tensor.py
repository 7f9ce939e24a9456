"""`Tensor`: a numpy array plus what reverse-mode autograd needs.

``.numpy()`` is the numpy array; ``.data`` (as in torch) the same values as a Tensor outside
the graph; ``.grad`` the accumulated gradient (a Tensor, or None);
``.requires_grad`` whether gradients flow to it; ``.grad_fn`` the graph node that made it (None
for leaves); ``.name`` an optional label that the graph viewer shows.

This module knows nothing of the ops: it stands below them (the ops import Tensor). The op
methods and operators (``x.sum(1)``, ``x + y``) are the op functions themselves, bound onto
the class by `minitensor.methods` once the ops have loaded (``Tensor.sum is F.sum``); what is
written here is the tensor's own state, conversions, in-place writes and autograd.
"""

from __future__ import annotations

import builtins  # Tensor has methods named bool and float: its annotations say builtins.bool
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from . import autograd
from .device import Device, check_device
from .errors import ShapeError
from .ops._axes import normalize_axis, shape_arg, torch_index_steps
from .random import generator as _rng
from .typing import ArrayLike, DType, Scalar, Shape

if TYPE_CHECKING:  # for annotations only: function.py imports this module
    from .function import Context

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

_DEFAULT_FLOAT = float32


def _as_array(data, dtype=None):
    """Convert user data to a numpy array with minitensor's dtype rules.

    Floats become float32 unless `dtype` says otherwise (float64 arrays included); Python ints
    become int64; bools stay bool. A Tensor keeps its dtype (it already follows these rules).
    """
    if isinstance(data, Tensor):
        return np.array(data._data, dtype=dtype if dtype is not None else data.dtype)
    if dtype is not None:
        return np.array(data, dtype=np.dtype(dtype))
    arr = np.array(data)
    if arr.dtype.kind == "f" and arr.dtype != _DEFAULT_FLOAT:
        arr = arr.astype(_DEFAULT_FLOAT)
    elif arr.dtype.kind in "iu" and arr.dtype != int64 and not isinstance(data, np.ndarray):
        arr = arr.astype(int64)
    elif arr.dtype.kind not in "fiub":
        raise TypeError(f"tensor: cannot make a tensor from data of dtype {arr.dtype}")
    return arr


def _check_grad_dtype(dtype, shape, op="requires_grad"):
    if np.dtype(dtype).kind != "f":
        raise TypeError(
            f"{op}: only floating-point tensors can require gradients; this tensor is "
            f"{np.dtype(dtype)} of shape {tuple(shape)} (ids and masks are integer/bool on "
            f"purpose)"
        )


class Tensor:
    """A multi-dimensional array that records the ops applied to it for autograd.

    >>> x = mt.tensor([[1., 2.], [3., 4.]], requires_grad=True, name="x")
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([[2., 4.], [6., 8.]])
    """

    __array_priority__ = 1000  # numpy defers to Tensor's reflected operators
    # numpy ufuncs refuse Tensors (np.exp(t) raises TypeError) instead of silently returning an
    # array that has left the graph: use t.exp() / F.exp(t), or t.numpy() for plain numpy work.
    # It also makes `ndarray + Tensor` call Tensor.__radd__, so the result stays in the graph.
    __array_ufunc__ = None
    _grad_hooks = None  # Tensor.register_hook stores a list on the tensor; read per gradient
    # An op's output is made without __init__ (`_make`): the fields it leaves unset read these
    # class defaults until something sets them on the tensor (one store less per op each).
    requires_grad = False
    grad = None
    _grad_fn = None
    name = None

    def __init__(
        self,
        data: Tensor | ArrayLike,
        requires_grad: builtins.bool = False,
        dtype: DType | None = None,
        name: str | None = None,
    ) -> None:
        self._data = _as_array(data, dtype)
        self._init(requires_grad, name)

    def _init(self, requires_grad, name):
        if requires_grad:
            _check_grad_dtype(self._data.dtype, self._data.shape)
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._grad_fn = None
        self.name = name
        self._vc = [0]  # version counter, shared with views; bumped by in-place ops

    @classmethod
    def _make(cls, array, requires_grad=False):
        """Wrap an op's output array without copying or changing its dtype.

        Sets what `_init` sets, without its checks (requires_grad, grad, the node and the name
        are the class defaults until set): this runs once per op. `Function.apply` does the
        same inline."""
        t = cls.__new__(cls)
        t._data, t._vc = array, [0]
        if requires_grad:
            t.requires_grad = True
        return t

    # ------------------------------------------------------------------ basic attributes
    @property
    def data(self) -> Tensor:
        """This tensor's values as a new Tensor, as torch's ``.data``: it shares the memory,
        does not require grad and is outside the graph, so its in-place methods work on a
        parameter (``p.data.uniform_(-0.1, 0.1)``, ``p.data.zero_()``). Unlike torch's, it
        shares the version counter too: a write through ``.data`` to a value the graph
        saved makes backward refuse, never compute a silently wrong gradient.
        The numpy array is ``.numpy()``."""
        t = Tensor._make(self._data)
        t._vc = self._vc
        return t

    @data.setter
    def data(self, value: Tensor | ArrayLike) -> None:
        # As torch: self now holds value's memory (a Tensor's, not a copy); an array works too.
        # It counts as an in-place change: graphs that saved the old values become stale.
        self._data = value._data if isinstance(value, Tensor) else np.asarray(value)
        self.bump_version()

    @property
    def grad_fn(self) -> Context | None:
        return self._grad_fn

    @property
    def is_leaf(self) -> builtins.bool:
        return self._grad_fn is None

    @property
    def shape(self) -> Shape:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def device(self) -> Device:
        return Device("cpu")

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def size(self, dim: int | None = None) -> Shape | int:
        """``x.size()`` → the shape; ``x.size(d)`` → the length of axis d (as torch). The count
        of elements is ``x.numel()``."""
        if dim is None:
            return self.shape
        if not -self.ndim <= dim < max(self.ndim, 1):
            raise IndexError(f"size: dim {dim} is out of range for shape {self.shape}")
        return self.shape[dim]

    def numel(self) -> int:
        """Number of elements."""
        return self._data.size

    def dim(self) -> int:
        """Number of axes (torch's name for ndim)."""
        return self._data.ndim

    def contiguous(self, memory_format: Any = None) -> Tensor:
        """self when its data is C-contiguous, else a contiguous copy that stays in the graph.
        memory_format= is accepted for torch's signature (arrays here are always row-major)."""
        return self if self._data.flags.c_contiguous else self.clone()

    @property
    def _version(self):
        return self._vc[0]

    def bump_version(self) -> Tensor:
        """Record that this tensor's data was changed in place by code other than minitensor's
        in-place ops (an optimizer's update of ``p.numpy()``, loading weights into it): backward
        then refuses graphs that saved the old values instead of using them silently.
        The counter is shared with views of the tensor. Returns self."""
        self._vc[0] += 1
        return self

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def numpy(self) -> np.ndarray:
        """The underlying numpy array (shares memory; use .copy() to keep a snapshot)."""
        return self._data

    def item(self) -> Scalar:
        if self._data.size != 1:
            raise ValueError(
                f"item: only a one-element tensor converts to a Python number, "
                f"this one has shape {self.shape}"
            )
        return self._data.item()

    def tolist(self) -> list[Any] | Scalar:
        return self._data.tolist()

    def __float__(self) -> builtins.float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        # a one-element integer (or bool) tensor is an index, as in torch: data[i:i + n] for
        # i in a LongTensor of offsets, range(t), list[t]; a float tensor is not
        if self._data.size != 1 or self._data.dtype.kind not in "biu":
            raise TypeError(
                f"__index__: only integer tensors of a single element can be "
                f"converted to an index (shape {self.shape}, dtype {self.dtype})"
            )
        return int(self._data.item())

    def __format__(self, spec: str) -> str:
        # a 0-d tensor formats as its number (f"{loss:.4f}"), as in torch; others as their repr
        if self._data.ndim == 0:
            return format(self._data.item(), spec)
        return object.__format__(self, spec)

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data (and version counter), outside the graph."""
        t = Tensor._make(self._data)
        t._vc = self._vc
        return t

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(other.shape)

    def t(self) -> Tensor:
        """Transpose of a tensor of at most 2 axes (torch's t)."""
        if self.ndim > 2:
            raise ValueError(
                f"t: expects at most 2 axes, got shape {self.shape}; use transpose(dim0, dim1)"
            )
        return self.transpose() if self.ndim == 2 else self

    def new_zeros(
        self,
        *shape: int | Sequence[int],
        dtype: DType | None = None,
        requires_grad: builtins.bool = False,
    ) -> Tensor:
        """Zeros of the given shape, with this tensor's dtype unless `dtype` says otherwise."""
        return Tensor(
            np.zeros(shape_arg(shape)), requires_grad=requires_grad, dtype=dtype or self.dtype
        )

    def requires_grad_(self, requires_grad: builtins.bool = True) -> Tensor:
        if requires_grad:
            _check_grad_dtype(self.dtype, self.shape)
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor: use .detach()")
        self.requires_grad = bool(requires_grad)
        return self

    def to(
        self,
        *args: DType | str | Device | Tensor,
        dtype: DType | None = None,
        device: str | Device | None = None,
        copy: builtins.bool = False,
        non_blocking: builtins.bool = False,
        memory_format: Any = None,
    ) -> Tensor:
        """torch's to: to(dtype), to('cpu'), to('cpu', dtype), to(other_tensor) (its dtype),
        to(device=, dtype=). minitensor runs on the CPU only; other devices are an error
        (non_blocking, an asynchronous copy to a GPU in torch, changes nothing here; nor does
        memory_format: arrays are row-major)."""
        flags = [a for a in args if isinstance(a, builtins.bool)]  # torch's positional
        if len(flags) == 2:  # to(dtype, non_blocking, copy)
            copy = flags[1]
        for a in args:
            if isinstance(a, builtins.bool):
                continue
            if isinstance(a, (str, Device)):
                device = a
            elif isinstance(a, Tensor):
                dtype = a.dtype
            else:
                dtype = a
        check_device(device, "to")
        out = self if dtype is None else self.astype(dtype)
        return out.clone() if copy and out is self else out

    def cuda(self, device: Any = None, non_blocking: builtins.bool = False) -> NoReturn:
        """torch's move to a GPU: always an error here, since minitensor runs on the CPU only
        (write `x.to(device)` with `device = 'cuda' if mt.cuda.is_available() else 'cpu'`)."""
        raise RuntimeError(
            "cuda: CUDA is not available; minitensor runs on the CPU only (use 'cpu', or "
            "x.to(device) with device = 'cuda' if mt.cuda.is_available() else 'cpu')"
        )

    def type(self, dtype: DType | None = None) -> str | Tensor:
        """type() → the dtype's name; type(dtype) → this tensor converted, as astype.
        dtype may also be a legacy constructor, as torch's `x.type(torch.FloatTensor)`."""
        if dtype is None:
            return str(self.dtype)
        return self.astype(getattr(dtype, "tensor_dtype", dtype))

    def type_as(self, other: Tensor | np.ndarray) -> Tensor:
        """This tensor converted to `other`'s dtype (other: a tensor or a numpy array)."""
        return self.astype(other.dtype)

    # memory_format= (torch's layout request) is accepted and changes nothing: row-major arrays
    def bool(self, memory_format: Any = None) -> Tensor:
        return self.astype(bool_)

    def float(self, memory_format: Any = None) -> Tensor:
        return self.astype(float32)

    def double(self, memory_format: Any = None) -> Tensor:
        return self.astype(float64)

    def long(self, memory_format: Any = None) -> Tensor:
        return self.astype(int64)

    def int(self, memory_format: Any = None) -> Tensor:
        return self.astype(int32)

    def half(self, memory_format: Any = None) -> Tensor:
        return self.astype(np.float16)

    def cpu(self, memory_format: Any = None) -> Tensor:
        """This tensor: minitensor's tensors are always on the CPU (torch's x.cpu())."""
        return self

    def nelement(self) -> int:
        """Number of elements (torch's older name for numel)."""
        return self._data.size

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> Any:
        """Call hook(grad) with this tensor's gradient each time backward computes it; a
        tensor the hook returns replaces the gradient. Returns a handle with remove()."""
        if not self.requires_grad:
            raise RuntimeError(
                f"register_hook: this tensor (shape {self.shape}) does not require grad, so "
                "no gradient will ever reach a hook"
            )
        owner = self if self._grad_fn is None else self._grad_fn
        hooks = owner.__dict__.setdefault("_grad_hooks", [])
        hooks.append(hook)
        return _HookHandle(hooks, hook)

    # ------------------------------------------------------------------ autograd
    def backward(
        self, grad: Tensor | ArrayLike | None = None, retain_graph: builtins.bool = False
    ) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        `grad` may be omitted only for a single-element tensor (the usual loss).
        With ``retain_graph=False`` the graph's saved tensors are freed afterwards.
        """
        autograd.backward(self, grad, retain_graph)

    def backward_steps(
        self, grad: Tensor | ArrayLike | None = None, retain_graph: builtins.bool = False
    ) -> Iterator[autograd.BackwardStep]:
        """Walk backward one node at a time: see `mt.autograd.backward_steps`."""
        return autograd.backward_steps(self, grad, retain_graph)

    def retain_grad(self) -> Tensor:
        """Keep this non-leaf tensor's gradient in ``.grad`` during backward (leaves always
        get theirs). Useful to look at an activation's gradient."""
        if self._grad_fn is None:
            if not self.requires_grad:
                raise RuntimeError(
                    f"retain_grad: this tensor (shape {self.shape}) does not "
                    f"require grad, so it will never have a gradient"
                )
            return self
        self._grad_fn._retained = weakref.ref(self)
        return self

    def _accumulate_grad(self, g):
        grad = self.grad
        if grad is None:
            self.grad = Tensor._make(np.array(g, dtype=self.dtype, copy=True))
        elif grad._data.flags.writeable and (
            g.shape == grad._data.shape
            or np.broadcast_shapes(grad._data.shape, g.shape) == grad._data.shape
        ):
            # in place, as torch: a reference to .grad kept from before stays this .grad
            np.add(grad._data, g, out=grad._data, casting="same_kind")
            grad.bump_version()
        else:  # a read-only .grad someone assigned (or a shape it cannot hold): a new one
            self.grad = Tensor._make(grad._data + g)

    def zero_grad(self) -> None:
        self.grad = None

    # ------------------------------------------------------------------ in-place ops
    def _check_inplace(self, op, *operands):
        if not autograd.is_grad_enabled():
            return
        if self.requires_grad:
            raise RuntimeError(
                f"{op}: in-place change of a tensor that requires grad (shape {self.shape}); "
                f"autograd cannot track it. Use the out-of-place op, or wrap the update in "
                f"mt.no_grad() (as optimizers do)."
            )
        if any(isinstance(o, Tensor) and o.requires_grad for o in operands):
            # torch would record the write and send a gradient to the operand; an in-place
            # op records no graph here, so the operand's gradient would be lost silently
            raise RuntimeError(
                f"{op}: an operand requires grad, and an in-place op records no graph here "
                f"(its gradient would be lost); use the out-of-place op (tensor of shape "
                f"{self.shape})"
            )

    def _write_joins_graph(self, *operands: Any) -> bool:
        """Is an in-place write of `operands` into self one the graph records (torch's in-place
        autograd)? When grad mode is on and an operand requires grad, or self is a non-leaf in
        the graph — and self owns its memory (a view's base would not learn of the write, so
        a view keeps the refusal of _check_inplace, as does a leaf that requires grad)."""
        if not autograd.is_grad_enabled() or not self._data.flags.owndata:
            return False
        if self.requires_grad and self._grad_fn is None:
            return False  # a leaf that requires grad: _check_inplace refuses, as torch
        wants = any(isinstance(o, Tensor) and o.requires_grad for o in operands)
        return wants or self._grad_fn is not None

    def _inplace_recorded(self, op: str, out_of_place: Callable[[Tensor], Tensor]) -> Tensor:
        """An in-place op on a tensor in the graph, recorded as torch records it: self keeps
        its identity and memory (its views see the write) and becomes the output of the
        out-of-place op's node, whose input is self as it was (a copy: the node may save
        it). Nodes that saved self's old values see its version move and refuse at backward."""
        before = Tensor._make(self._data.copy())
        before.requires_grad, before._grad_fn = self.requires_grad, self._grad_fn
        out = out_of_place(before)
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ShapeError(
                f"{op}: the result (shape {out.shape}, dtype {out.dtype}) cannot be written "
                f"into a tensor of shape {self.shape} and dtype {self.dtype} in place"
            )
        np.copyto(self._data, out._data)
        self.requires_grad, self._grad_fn = True, out._grad_fn
        return self.bump_version()

    def _inplace(
        self,
        op: str,
        compute: Callable[[np.ndarray], ArrayLike],
        *operands: Any,
        graph: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor:
        """Overwrite self's elements with compute(self's array), checking first (self and the
        `operands` compute reads), so that a failing call leaves the tensor (and its
        version) unchanged. `graph` is the op out of place (t ↦ t.add(other), …): with it,
        a write into a tensor in the graph is recorded instead of refused."""
        if graph is not None and self._write_joins_graph(*operands):
            return self._inplace_recorded(op, graph)
        self._check_inplace(op, *operands)
        try:
            vals = compute(self._data)
            np.copyto(self._data, vals, casting="same_kind")
        except (ValueError, TypeError, IndexError) as e:
            # numpy's ValueError (shapes) is torch's RuntimeError: ShapeError is both
            raise (ShapeError if type(e) is ValueError else type(e))(
                f"{op}: cannot update a tensor of shape {self.shape} and dtype "
                f"{self.dtype} in place: {e}"
            ) from None
        return self.bump_version()

    def add_(self, other: Tensor | ArrayLike, alpha: Scalar = 1.0) -> Tensor:
        o = _raw(other)
        return self._inplace(
            "add_",
            lambda d: d + alpha * o if alpha != 1.0 else d + o,
            other,
            graph=lambda t: t.add(other, alpha=alpha),
        )

    def sub_(self, other: Tensor | ArrayLike, alpha: Scalar = 1.0) -> Tensor:
        o = _raw(other)
        return self._inplace(
            "sub_",
            lambda d: d - alpha * o if alpha != 1.0 else d - o,
            other,
            graph=lambda t: t.sub(other, alpha=alpha),
        )

    def mul_(self, other: Tensor | ArrayLike) -> Tensor:
        o = _raw(other)
        return self._inplace("mul_", lambda d: d * o, other, graph=lambda t: t.mul(other))

    def div_(self, other: Tensor | ArrayLike) -> Tensor:
        o = _raw(other)
        return self._inplace("div_", lambda d: d / o, other, graph=lambda t: t.div(other))

    def copy_(self, other: Tensor | ArrayLike) -> Tensor:
        return self._inplace("copy_", lambda d: np.asarray(_raw(other)), other)

    def fill_(self, value: Tensor | ArrayLike) -> Tensor:
        return self._inplace("fill_", lambda d: _raw(value), value)

    def zero_(self) -> Tensor:
        return self._inplace("zero_", lambda d: 0)

    # torch's other in-place methods, for code that initialises or edits weights through
    # ``p.data`` (``p.data.uniform_(-0.1, 0.1)``) or under no_grad; draws use mt.manual_seed's
    def uniform_(self, a: Scalar = 0.0, b: Scalar = 1.0) -> Tensor:
        return self._inplace("uniform_", lambda d: _rng().uniform(a, b, d.shape))

    def normal_(self, mean: Scalar = 0.0, std: Scalar = 1.0) -> Tensor:
        return self._inplace("normal_", lambda d: _rng().normal(mean, std, d.shape))

    def clamp_(
        self, min: Tensor | Scalar | None = None, max: Tensor | Scalar | None = None
    ) -> Tensor:
        return self._inplace(
            "clamp_",
            lambda d: np.clip(d, _raw(min), _raw(max)),
            min,
            max,
            graph=lambda t: t.clamp(min, max),
        )

    clip_ = clamp_

    def pow_(self, exponent: Tensor | Scalar) -> Tensor:
        return self._inplace(
            "pow_", lambda d: d ** _raw(exponent), exponent, graph=lambda t: t.pow(exponent)
        )

    def lerp_(self, end: Tensor | ArrayLike, weight: Tensor | Scalar) -> Tensor:
        return self._inplace("lerp_", lambda d: d + _raw(weight) * (_raw(end) - d), end, weight)

    def addcmul_(self, t1: Tensor, t2: Tensor, value: Scalar = 1.0) -> Tensor:
        return self._inplace("addcmul_", lambda d: d + value * _raw(t1) * _raw(t2), t1, t2)

    def addcdiv_(self, t1: Tensor, t2: Tensor, value: Scalar = 1.0) -> Tensor:
        return self._inplace("addcdiv_", lambda d: d + value * _raw(t1) / _raw(t2), t1, t2)

    def neg_(self) -> Tensor:
        return self._inplace("neg_", np.negative, graph=lambda t: t.neg())

    def abs_(self) -> Tensor:
        return self._inplace("abs_", np.abs, graph=lambda t: t.abs())

    def exp_(self) -> Tensor:
        return self._inplace("exp_", np.exp, graph=lambda t: t.exp())

    def log_(self) -> Tensor:
        return self._inplace("log_", np.log, graph=lambda t: t.log())

    def sqrt_(self) -> Tensor:
        return self._inplace("sqrt_", np.sqrt, graph=lambda t: t.sqrt())

    def tanh_(self) -> Tensor:
        return self._inplace("tanh_", np.tanh, graph=lambda t: t.tanh())

    def relu_(self) -> Tensor:
        return self._inplace("relu_", lambda d: np.maximum(d, 0), graph=lambda t: t.relu())

    def sigmoid_(self) -> Tensor:
        return self._inplace(
            "sigmoid_", lambda d: 1 / (1 + np.exp(-d)), graph=lambda t: t.sigmoid()
        )

    def masked_fill_(self, mask: Tensor | ArrayLike, value: Tensor | ArrayLike) -> Tensor:
        """Set the elements where the bool `mask` (broadcast to self's shape) is True."""

        def fill(d):
            m = _raw(mask)
            if np.broadcast_shapes(np.shape(m), self.shape) != self.shape:
                # torch: the output cannot grow in place (out of place, masked_fill broadcasts)
                raise ValueError(f"mask of shape {np.shape(m)} would grow the tensor")
            return np.where(m, _raw(value), d)

        return self._inplace(
            "masked_fill_", fill, value, graph=lambda t: t.masked_fill(mask, value)
        )

    def index_fill_(self, dim: int, index: Tensor | ArrayLike, value: Tensor | ArrayLike) -> Tensor:
        """Set every element whose position along `dim` is in the int tensor `index`."""
        index = np.asarray(_raw(index))
        where = (slice(None),) * _axis(dim, self, "index_fill_") + (index,)

        def fill(d):
            out = d.copy()
            out[where] = _raw(value)
            return out

        return self._inplace("index_fill_", fill, value)

    def __setitem__(self, index: Any, value: Tensor | ArrayLike) -> None:
        if self._write_joins_graph(value):
            return self._setitem_recorded(index, value)  # ops/shape.py, bound by methods.py
        self._check_inplace("__setitem__", value)
        if isinstance(index, Tensor):
            index = index._data
        elif isinstance(index, tuple):
            index = tuple(_raw(i) for i in index)
        target, steps = self._data, torch_index_steps(index)
        if steps:  # integers beside index arrays: select with the integers first, as torch
            target, index = target[steps[0]], steps[1]
        try:
            target[index] = _raw(value)
        except (ValueError, IndexError) as e:
            kind = ShapeError if type(e) is ValueError else type(e)
            raise kind(f"__setitem__: tensor of shape {self.shape}: {e}") from None
        self.bump_version()

    # ------------------------------------------------------------------ repr
    def __repr__(self) -> str:
        body = np.array2string(
            self._data, separator=", ", precision=4, threshold=200, edgeitems=3, prefix="tensor("
        )
        extras = []
        if self.dtype not in (float32, int64, bool_):
            extras.append(f"dtype={self.dtype}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        if self.name:
            extras.append(f"name={self.name!r}")
        tail = "".join(", " + e for e in extras)
        return f"tensor({body}{tail})"

    def __bool__(self) -> builtins.bool:
        if self._data.size != 1:
            raise ValueError(
                f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self._data)

    def __hash__(self) -> int:
        return id(self)

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __array__(
        self, dtype: DType | None = None, copy: builtins.bool | None = None
    ) -> np.ndarray:
        return self._data if dtype is None else self._data.astype(dtype)


def _axis(dim, t, op):
    return normalize_axis(dim, t.ndim, op, t.shape)


def _raw(x):
    return x._data if isinstance(x, Tensor) else x


class _HookHandle:
    """What register_hook returns: handle.remove() unregisters the hook."""

    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)
