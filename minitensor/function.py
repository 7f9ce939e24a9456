"""`Function`: the one pattern every op follows, built-in or yours.

An op is a class with two static methods on plain numpy arrays::

    class Softplus(mt.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return np.logaddexp(0, x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad / (1 + np.exp(-x))

    y = Softplus.apply(x)     # x is a Tensor; y is a Tensor whose grad_fn records the node

`apply` unwraps the Tensors, runs `forward`, and (when a gradient is wanted) records a graph
node: the `Context` object itself. The node remembers what the graph viewer, the step-through
and error messages need: the op's name, its inputs, the module scope, the user's source line,
the output's shape and what was saved for backward.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import math
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import hooks, kernels
from ._layout import name_in_advance
from .errors import ShapeError, named_error, op_error, op_in_scope
from .source import describe_inputs, describe_source, located, user_line
from .state import anomaly_on, state
from .tensor import Tensor

__all__ = [
    "Context",
    "Function",
    "NodeInput",
    "ShapeError",
    "describe_inputs",
    "op_error",
    "shape_of",
    "unbroadcast",
]


class Context:
    """What `forward` and `backward` share — and, once recorded, a node of the graph.

    Your op may store anything on ctx except these names, which the node itself uses:
    ``fn name needs_input_grad inputs scope source out_shape out_dtype grad`` (nor names
    starting with an underscore, nor the methods ``save_for_backward saved_tensors release
    check_not_released parents where source_line``).

    Attributes a node carries (read by the viewer, the step-through and error messages):
    ``name`` (op name), ``inputs`` (one entry per argument: a leaf Tensor itself, a
    `NodeInput` for a tensor another op made, None for non-tensor arguments),
    ``scope`` (module path), ``source`` ((filename, lineno, function) of the user's line),
    ``out_shape``/``out_dtype`` (of the output), ``grad`` (the gradient that reached this node's
    output during the last ``backward(retain_graph=True)``), ``needs_input_grad``.
    """

    # A Context is made for every op, so the fields a node starts with are class attributes:
    # an instance stores only what it sets (an op that is not recorded sets none of these).
    inputs = ()
    scope = ""
    out_shape = None
    out_dtype = None
    grad = None
    _saved = ()
    _saved_versions = ()  # (version counter, version then, which input, dtype, shape)
    _released = False
    _retained = None  # weakref to the output, set by Tensor.retain_grad()
    _grad_dtype = None  # float32 when forward computed float16 inputs in float32
    _src = None  # (code object, instruction offset) of the user's line; `source` formats it
    _grad_hooks = None  # set by Tensor.register_hook on the node's output
    _seq = 0  # the node's number, in the order nodes were recorded (see `_numbered`)

    def __init__(self, fn: type[Function], needs_input_grad: tuple[bool, ...]) -> None:
        self.fn = fn
        self.needs_input_grad = needs_input_grad

    @property
    def name(self) -> str:
        """The op's name (its Function's `op_name`), read from the class when asked."""
        return self.fn.op_name()

    @property
    def source(self) -> tuple[str, int, str] | None:
        """(filename, lineno, function) of the user's line that created this node, or None.

        Recording keeps the line's code object and instruction offset, and this finds the
        line number and formats them when read: most nodes are never asked where they came
        from."""
        src = self._src
        if src is None or len(src) == 3:
            return src
        return located(*src)

    @source.setter
    def source(self, value: tuple[str, int, str] | None) -> None:
        self._src = None if value is None else tuple(value)

    def save_for_backward(self, *arrays: Any) -> None:
        """Keep arrays (inputs, outputs or intermediates) for backward."""
        self._saved = arrays

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        if self._released:  # (every backward reads this: the check is inline, the message not)
            self.check_not_released()
        return self._saved

    def check_not_released(self) -> None:
        """Raise a clear error when backward already freed what this node saved."""
        if self._released:
            raise RuntimeError(
                f"backward through {self.where()} a second time: its saved tensors were freed "
                "after the first backward. Call backward(retain_graph=True) the first time if you "
                "need to backward twice."
            )

    def release(self) -> None:
        """Free what was saved for backward (done after backward unless retain_graph=True)."""
        self._saved = ()
        self._released = True

    @property
    def parents(self) -> list[Context | None]:
        """The nodes that produced this node's inputs (None for leaves and constants)."""
        return [t.grad_fn if t is not None else None for t in self.inputs]

    def where(self) -> str:
        """'matmul in encoder.layers.0.self_attn (created at model.py:42)' for messages."""
        text = f"`{self.name}`"
        if self.scope:
            text += f" in {self.scope}"
        if self.source:
            text += f" (created at {describe_source(*self.source[:2])})"
        return text

    def source_line(self) -> str:
        """The text of the user's line that created this node, or ''."""
        if not self.source:
            return ""
        return linecache.getline(self.source[0], self.source[1]).strip()

    def __repr__(self) -> str:
        return f"<{self.name} node {self.out_shape} scope={self.scope!r}>"


# The names a node is given, in the table of names its class's instances share (_layout.py: it
# holds 29): the fields of every recorded node and what backward sets, then the ops' own, those
# of the most common ops first. (`grad`, `_retained`, `_grad_dtype` and `_grad_hooks` are left
# out: set only by retain_graph=True, retain_grad(), float16 and register_hook.)
name_in_advance(
    Context,
    (
        "fn", "needs_input_grad", "inputs", "scope", "_src", "out_shape", "out_dtype", "_seq",
        "_saved", "_saved_versions", "_released", "axes", "in_shape", "shapes", "x_shape",
        "keepdims", "axis", "index", "steps", "in_dtype", "basic", "scale", "blocked", "p",
        "seed", "approximate", "shape", "params", "count",
    ),
)  # fmt: skip


class _UserContext(Context):
    """The ctx a user's op sees while its forward or backward runs: a Context that refuses
    to overwrite the node's own fields. ``ctx.name = ...`` in your forward would rename the
    node in graphs and errors, ``ctx.inputs = ...`` would cut the graph: both fail here, with
    the field named, instead of later and far away. Built-in ops get a plain Context (they
    are tested not to), so the check costs the hot path nothing."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _node_fields():
            raise AttributeError(
                f"{self.fn.op_name()} ({self.fn.__qualname__}): ctx.{name} is a field of the "
                f"graph node itself (Context: "
                f"{', '.join(sorted(n for n in _node_fields() if not n.startswith('_')))}); "
                f"store your own values under another name, e.g. ctx.my_{name.lstrip('_')}"
            )
        object.__setattr__(self, name, value)


_NODE_FIELDS: frozenset[str] = frozenset()


def _node_fields() -> frozenset[str]:
    """The names a user's ctx may not set: the node's fields and Context's methods, read from
    the class (so a field added there is protected too), except ``_saved``, which
    save_for_backward sets."""
    global _NODE_FIELDS
    if not _NODE_FIELDS:
        own = {n for n in vars(Context) if not (n.startswith("__") and n.endswith("__"))}
        _NODE_FIELDS = frozenset((own | {"fn", "needs_input_grad"}) - {"_saved"})
    return _NODE_FIELDS


def _guarded(method: Any) -> Any:
    """`method` (a user op's forward or backward) run with its ctx as a `_UserContext`."""

    @functools.wraps(method)
    def run(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        if type(ctx) is not Context:  # already guarded, or called by hand with another object
            return method(ctx, *args, **kwargs)
        ctx.__class__ = _UserContext
        try:
            return method(ctx, *args, **kwargs)
        finally:
            ctx.__class__ = Context

    return run


class NodeInput:
    """How a node refers to an input that another op made: that op's node (``grad_fn``), the
    tensor's ``shape``, ``dtype`` and ``requires_grad``, its ``name`` while it lives — but not
    its data.

    A node holding the intermediate tensors it was given would keep every activation of the
    forward pass alive until the whole graph is freed, whether backward needs it or not (the
    input of a bias add, of a residual sum, the logits). As in PyTorch, the graph keeps only
    what backward needs: each node's saved arrays (freed after its backward) and the nodes
    themselves. ``data`` is the input's array while something else still holds it (the
    program, or a node that saved it), else None. Leaves (parameters, your own tensors) stay
    in ``inputs`` as themselves: they receive ``.grad``.
    """

    __slots__ = ("_grad_fn", "_tensor", "_data")  # the op's node; weak refs to tensor, data

    def __init__(self, tensor: Tensor) -> None:
        self._grad_fn = tensor._grad_fn
        self._tensor, self._data = weakref.ref(tensor), weakref.ref(tensor._data)

    @property
    def grad_fn(self) -> Context:
        """The node of the op that made the input (the backward engine reads ``_grad_fn``,
        as it does a Tensor's)."""
        return self._grad_fn

    # The tensor's shape and dtype are its node's output's (`_inplace_recorded` keeps that
    # so), and a tensor a node made requires grad: nothing of them is copied per input
    @property
    def shape(self) -> tuple[int, ...]:
        return self._grad_fn.out_shape

    @property
    def dtype(self) -> np.dtype:
        return self._grad_fn.out_dtype

    requires_grad = True

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str | None:
        """The tensor's name while the tensor lives (read then, as it may be set after the op
        ran), else None: a name you gave a tensor you still hold."""
        tensor = self._tensor()
        return tensor.name if tensor is not None else None

    @property
    def data(self) -> np.ndarray | None:
        """The input's array if anything still holds it, else None."""
        tensor = self._tensor()
        return tensor._data if tensor is not None else self._data()

    def __repr__(self) -> str:
        held = "held" if self._data() is not None else "freed"
        return f"<input {self.shape} {self.dtype} from {self.grad_fn.name} ({held})>"


class Function:
    """Base class of every op. Subclass it, write `forward` and `backward`, call `apply`.

    - ``forward(ctx, *arrays, **params) -> ndarray``: compute the output from numpy arrays.
    - ``backward(ctx, grad) -> ndarray | tuple``: given dLoss/dOutput, return dLoss/dInput for
      each positional input (None where there is no gradient). Each gradient must have its
      input's shape: use :func:`unbroadcast` when forward broadcast. Do not modify `grad` in
      place: it may be a read-only broadcast view, or shared with another node.
    - Set ``is_view = True`` when the output may share memory with the first input (reshape,
      transpose, basic indexing): when it does, the two tensors share one version counter, so
      an in-place change to either is seen by the in-place check of both.
    - Set ``name = "..."`` to choose the op's name in graphs and errors (default: class name
      in lower case).
    - Set ``float_inputs = (0,)`` (positions) for an op defined on real numbers only (exp,
      softmax, layer_norm…). As in PyTorch, integer and bool inputs there become float32 (the
      default float dtype); float16 is computed in float32 and the output returned as
      float16; other dtypes are refused with the op named. Kernels see float32/float64 only.
    - Set ``plain_params = True`` when the op's keyword arguments are never Tensors (axes, a
      shape): `apply` then passes them to forward as they are, without looking inside them
      for Tensors to unwrap and version-check.
    """

    is_view = False
    name = None
    float_inputs = ()  # positions of inputs that must be floating (see _as_float)
    plain_params = False
    # The built-in binary ops whose forward is one operator (x + y, x - y, x * y, x / y) name
    # it here: when no gradient is wanted, `apply_binary` computes it alone
    _arithmetic = None

    # It always raises; annotated None, as NoReturn would make type checkers read the class
    # itself as uncallable (and refuse MyOp.apply)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name = type(self).__name__
        raise TypeError(
            f"{name}(...) is an op class, not a function: call {name}.apply(x) "
            "(apply runs forward and records the graph node)"
        )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # An op written outside minitensor has its ctx guarded while its forward and backward
        # run: see _UserContext. Built-in ops are not wrapped (no cost per call).
        super().__init_subclass__(**kwargs)
        if cls.__module__.split(".")[0] == "minitensor":
            return
        for name in ("forward", "backward"):
            method = vars(cls).get(name)
            if isinstance(method, staticmethod):
                setattr(cls, name, staticmethod(_guarded(method.__func__)))

    @classmethod
    def op_name(cls) -> str:
        return cls.name or cls.__name__.lower()

    @staticmethod
    def forward(ctx: Context, *args: Any, **params: Any) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def backward(
        ctx: Context, grad: np.ndarray
    ) -> np.ndarray | tuple[np.ndarray | None, ...] | None:
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any, **params: Any) -> Tensor:
        """Run the op on Tensors (or arrays and numbers): unwrap → forward → wrap → record.

        This runs once per op, so it does per node what can be done per node, and it is
        written out in one function (each call costs a learner's small op as much as its
        arithmetic): the inputs are unwrapped in one pass, nothing is recorded when no
        gradient is wanted (grad mode off, or no input requires grad), and what a node
        records is formatted only when read."""
        if params and not cls.plain_params:  # keyword arguments may hold Tensors too
            arrays, needs, params, tensors = _unwrap(args, params)
            wanted = True in needs
        else:  # the common call: the Tensors are among the positional arguments only
            arrays, grads, tensors = list(args), None, None
            i = 0
            for a in args:
                if isinstance(a, Tensor):
                    arrays[i] = a._data
                    if a.requires_grad:
                        if grads is None:
                            grads = [False] * len(args)
                        grads[i] = True
                i += 1
            wanted = grads is not None
            needs = tuple(grads) if wanted else _NO_GRADS[len(args)]
        out_dtype = None
        if cls.float_inputs:
            arrays, out_dtype = _as_float(cls, arrays)
        ctx = _new(Context)
        ctx.fn, ctx.needs_input_grad = cls, needs
        if out_dtype is not None:
            ctx._grad_dtype = np.dtype(np.float32)
        try:
            out = cls.forward(ctx, *arrays, **params)
        except (ValueError, IndexError, TypeError) as e:
            _raise_named(cls, e, arrays)
        result = _wrap(cls, out, args, arrays, out_dtype)
        return _finish(cls, ctx, result, args, tensors, arrays, wanted, 4)


def apply_binary(cls: type[Function], a: Tensor, b: Tensor, skip: int) -> Tensor:
    """``cls.apply(a, b)`` for two Tensors of one dtype: the call of ``x * y``, ``x + y`` and
    the other binary elementwise ops (`ops/elementwise.py`), written out for it. It makes the
    same node as `apply`, for an op whose forward takes two arrays and no parameters, computes
    in their dtype (no `float_inputs`) and is not a view. A 8 × 8 op's arithmetic costs less
    than unwrapping and wrapping it in general, so this path skips what two Tensors of one
    dtype do not need: the argument list, the float conversion, numpy's memory test, and it
    records the node here rather than through `_record` (each call between costs).

    `skip`: how many frames above this one are minitensor's whatever the caller (2 from
    `ops.elementwise._binary`, which only an op's function such as ``mul`` calls; 1 from a
    Tensor operator): the user's source line is looked for from the frame above them."""
    ga, gb = a.requires_grad, b.requires_grad
    x, y = a._data, b._data
    s = state.__dict__ if ga or gb else None  # (see _finish; read only where it can matter)
    record = s is not None and s["grad_enabled"]
    arithmetic = cls._arithmetic
    if not record and arithmetic is not None and not (hooks._forward_hooks or anomaly_on[0]):
        # nothing to record, hook or check (inference, data preparation, evaluation under
        # no_grad): the op is its arithmetic, wrapped — no context for a forward that would
        # save nothing for anyone
        try:
            out = arithmetic(x, y)
        except (ValueError, IndexError, TypeError):
            out = None  # the path below raises the error, with the op named
        if type(out) is np.ndarray and out.base is None:  # fresh memory (not a 0-d scalar)
            result = _new(Tensor)
            result._data, result._vc = out, [0]
            return result
    ctx = _new(Context)
    ctx.fn, ctx.needs_input_grad = cls, (ga, gb) if s is not None else _NO_GRADS[2]
    try:
        out = cls.forward(ctx, x, y)
    except (ValueError, IndexError, TypeError) as e:
        _raise_named(cls, e, (x, y))
    result = _new(Tensor)  # Tensor._make, inlined: the fields not set are class defaults
    if type(out) is np.ndarray and out.base is None and x.base is not out is not y.base:
        result._data = out if out is not x and out is not y else out.copy()
    else:  # a 0-d result (numpy gives a scalar), or one numpy made a view
        result._data = _fresh(np.asarray(out), (x, y))
    result._vc = [0]
    if record:  # _record for two Tensor arguments, written out
        result.requires_grad = True
        keep = s["keep_intermediates"]
        ctx.inputs = (
            a if a._grad_fn is None or keep else _node_input(a),
            b if b._grad_fn is None or keep else _node_input(b),
        )
        ctx.scope = s["scopes"][-1]
        ctx._src = user_line(2 + skip)
        data = result._data
        ctx.out_shape, ctx.out_dtype = data.shape, data.dtype
        result._grad_fn, ctx._seq = ctx, next(_numbered)
        saved = ctx._saved
        if saved:
            ctx._saved_versions = _binary_saved_versions(saved, a, b, result)
    if hooks._forward_hooks or (anomaly_on[0] and state.anomaly):
        hooks.run_forward_hooks(cls, ctx, (x, y), result, record)
    return result


def apply_view(cls: type[Function], x: Tensor, skip: int, **params: Any) -> Tensor:
    """``cls.apply(x, **params)`` for a view op (reshape, permute, expand: ``is_view``) of one
    Tensor and plain keyword arguments: the call of the ops that only rearrange how x's memory
    is read, written out for them as `apply_binary` is for the arithmetic ones. A Transformer's
    forward is half such nodes (a Linear's weightᵀ, attention's head split and merge), and
    each costs only its bookkeeping, so this path does no more than they need: no argument
    list, no float conversion, no fresh-memory test, no saved arrays to version (a view op's
    forward saves none). It makes the same node as `apply`.

    `skip`: how many frames above this one are minitensor's whatever the caller (the op's
    function: 1): the user's source line is looked for from the frame above them."""
    data = x._data
    wanted = x.requires_grad
    ctx = _new(Context)
    ctx.fn, ctx.needs_input_grad = cls, _ONE_GRAD if wanted else _NO_GRADS[1]
    try:
        out = cls.forward(ctx, data, **params)
    except (ValueError, IndexError, TypeError) as e:
        _raise_named(cls, e, (data,))
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    result = _new(Tensor)  # Tensor._make, inlined: the fields not set are class defaults
    # a view of x shares x's version counter: an in-place change to either is one to both
    result._data, result._vc = out, x._vc if _shares_memory(out, data) else [0]
    s = state.__dict__
    record = wanted and s["grad_enabled"]
    if record:  # _record for one Tensor argument, written out
        result.requires_grad = True
        ctx.inputs = (x if x._grad_fn is None or s["keep_intermediates"] else _node_input(x),)
        ctx.scope = s["scopes"][-1]
        ctx._src = user_line(1 + skip)
        ctx.out_shape, ctx.out_dtype = out.shape, out.dtype
        result._grad_fn, ctx._seq = ctx, next(_numbered)
        if ctx._saved:  # (a view op written outside minitensor may save what it likes)
            ctx._saved_versions = _saved_versions(ctx._saved, (x,), None, result)
    if hooks._forward_hooks or s["anomaly"]:
        hooks.run_forward_hooks(cls, ctx, (data,), result, record)
    return result


_ONE_GRAD = (True,)


def _node_input(tensor):
    """NodeInput(tensor), without its __init__'s call (most inputs of most ops are made here)."""
    held = _new(NodeInput)
    held._grad_fn, held._tensor, held._data = tensor._grad_fn, _ref(tensor), _ref(tensor._data)
    return held


def _binary_saved_versions(saved, a, b, result):
    """`_saved_versions` for a node of two Tensor arguments, whose saved arrays are most often
    the arguments' data themselves (x * y saves both)."""
    x, y = a._data, b._data
    if len(saved) == 2 and saved[0] is x and saved[1] is y:  # x * y: the arguments themselves
        return ((a._vc, a._vc[0], 0), (b._vc, b._vc[0], 1))
    tracked = []
    for arr in saved:
        if arr is x:
            tracked.append((a._vc, a._vc[0], 0))
        elif arr is y:
            tracked.append((b._vc, b._vc[0], 1))
        elif isinstance(arr, np.ndarray):
            what, t = _saver(arr, ((0, a), (1, b)), result)
            if t is not None:
                tracked.append((t._vc, t._vc[0], what))
    return tuple(tracked)


def _finish(cls, ctx, result, args, tensors, arrays, wanted, skip):
    """Record ctx as the node that made `result` when a gradient is wanted (an input requires
    grad and grad mode is on), and run the forward hooks (and anomaly mode's check) on
    `arrays`, the inputs forward was given. `skip`: `_record`'s count of frames known to be
    minitensor's, counted from `user_line`'s (see `_record`)."""
    # this thread's modes, read once: each attribute read of a threading.local costs about
    # as much as an 8 × 8 op's arithmetic, and an op needs up to four of them
    s = state.__dict__
    record = wanted and s["grad_enabled"]
    if record:
        result.requires_grad = True
        _record(ctx, args, tensors, result, s, skip)
    if hooks._forward_hooks or s["anomaly"]:
        hooks.run_forward_hooks(cls, ctx, arrays, result, record)
    return result


_new = object.__new__
_ref = weakref.ref
# Each node recorded takes the next number (`Context._seq`): a node is recorded after every
# node that made its inputs, so the numbers order the graph, and backward visits the nodes
# from the highest number down (see `autograd._walk`)
_numbered = itertools.count(1)


class _NoGrads(dict):
    """(False,) * n for n arguments, made once per n: the needs_input_grad of most ops."""

    def __missing__(self, n):
        self[n] = (False,) * n
        return self[n]


_NO_GRADS = _NoGrads()


def _unwrap(args, params):
    """The op's arguments as plain arrays, which of them require grad, the keyword arguments
    as plain values, and every Tensor among them as (what, tensor).

    A Tensor may come as a positional input (what: its position), as a keyword argument
    (``argument `index```) or inside a tuple or list given as one (``argument `index`[0]``):
    whatever of its data forward saves is version-checked before backward, whether it
    requires grad or not (a mask, targets, ids, an index).
    """
    arrays, needs, tensors = [], [], []
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            tensors.append((i, a))
            arrays.append(a._data)
            needs.append(a.requires_grad)
        else:
            arrays.append(a)
            needs.append(False)
    if not params:
        return arrays, tuple(needs), params, tensors
    plain = {}
    for name, value in params.items():
        if isinstance(value, Tensor):
            tensors.append((f"argument `{name}`", value))
            value = value._data
        elif isinstance(value, (tuple, list)) and any(isinstance(v, Tensor) for v in value):
            tensors += [
                (f"argument `{name}`[{j}]", v) for j, v in enumerate(value) if isinstance(v, Tensor)
            ]
            value = type(value)(v._data if isinstance(v, Tensor) else v for v in value)
        plain[name] = value
    return arrays, tuple(needs), plain, tensors


_COMPUTE_DTYPE = {
    np.dtype(np.float32): None,
    np.dtype(np.float64): None,
    np.dtype(np.float16): np.dtype(np.float16),
}


def _as_float(cls, arrays):
    """The inputs of `cls.float_inputs` as float32/float64 arrays, and the dtype the output
    must be cast back to (float16 in, float16 out; else None)."""
    out_dtype = None
    arrays = list(arrays)
    for i in cls.float_inputs:
        a = arrays[i] if i < len(arrays) else None
        if not isinstance(a, np.ndarray):
            continue
        if a.dtype.kind in "iub":
            arrays[i] = a.astype(np.float32)
        elif a.dtype in _COMPUTE_DTYPE:
            if a.dtype == np.float16:
                arrays[i] = a.astype(np.float32)
                out_dtype = out_dtype or _COMPUTE_DTYPE[a.dtype]
        else:
            raise op_error(
                cls.op_name(),
                f"input {i} has dtype {a.dtype} (shape {a.shape}); "
                f"it computes in float32 or float64: convert with "
                f".float() or .double()",
                TypeError,
            )
    return arrays, out_dtype


def _raise_named(cls, e, arrays):
    """Errors raised by forward leave with the op's name, scope and input shapes."""
    err = _op_error(cls, e, arrays)
    if err is e or isinstance(e, ShapeError):
        raise err from None  # a deliberate, complete message: no traceback noise
    raise err from e  # keep the original traceback: it may be a bug in forward


def _wrap(cls, out, args, arrays, out_dtype=None):
    """forward's array as a Tensor (cast to `out_dtype` if given); a view of the first input
    shares its version counter, so an in-place change to either is a change to both."""
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    if out_dtype is not None and out.dtype.kind == "f":
        out = out.astype(out_dtype)
    if not cls.is_view:
        out = _fresh(out, arrays)
    result = _new(Tensor)  # Tensor._make, inlined: the fields not set here are class defaults
    result._data, result._vc = out, [0]
    if cls.is_view and isinstance(args[0], Tensor) and _shares_memory(out, arrays[0]):
        result._vc = args[0]._vc
    return result


def _shares_memory(out, x):
    """Does a view op's output share memory with its input x? numpy's answer from the views'
    `base` (a view's base is the array that owns the memory), np.may_share_memory only when
    that does not settle it."""
    base = out.base
    if out is x or (base is not None and (base is x or base is x.base)):
        return True
    return base is not None and np.may_share_memory(out, x)


def _fresh(out, arrays):
    """`out`, or a copy of it if it shares memory with an input array. numpy may hand back an
    input, or a view of one (einsum 'ij->ij', a broadcast): an op that is not a declared view
    returns fresh memory, as torch's does, so writing to its result never changes an input.
    An array that owns its memory (no ``base``) can share it only with an input that is that
    array or a view of it (numpy sets a view's base to the array owning the memory), so only
    a view needs numpy's memory test."""
    base = out.base
    if base is None:
        for a in arrays:
            if a is out or (type(a) is np.ndarray and a.base is out):
                return out.copy()
        return out
    # a view (a fresh result reshaped, most often) of an array that owns its memory: an input
    # shares that memory only by being that array or a view of it, if the input's own memory
    # is numpy's too (its base an array that owns memory, or none); numpy's test for the rest
    owner = base if type(base) is np.ndarray and base.flags.owndata else None
    for a in arrays:
        if not isinstance(a, np.ndarray):
            continue
        if owner is not None:
            a_base = a.base
            if a is owner or a_base is owner:
                return out.copy()
            if a_base is None or (type(a_base) is np.ndarray and a_base.flags.owndata):
                continue
        if np.may_share_memory(out, a):
            return out.copy()
    return out


def _record(ctx, args, tensors, result, s, skip):
    """Make ctx the graph node that produced `result`. `tensors`: the (what, Tensor) pairs
    `_unwrap` found for a call with keyword arguments, or None for a call with positional
    arguments only (the Tensors are then found among `args`); `s`: the thread's state, as
    the dict of its attributes; `skip`: how many frames, counted from `user_line`'s, are
    known to be inside minitensor (`user_line`, this function, `_finish`, `apply`: 4, the
    frame above being the op's function or the user's own call of apply). Looking at a
    frame makes Python build an object for it, which costs more than an 8 × 8 op, so the
    op's path names how many frames it knows, and only the rest are looked at."""
    keep = s["keep_intermediates"]
    # what the node keeps of each argument: a leaf Tensor itself, a `NodeInput` for a tensor
    # made by another op (so the node does not keep its data alive), None for the rest; under
    # `autograd.keep_intermediates()` every tensor argument is kept itself
    inputs = []
    for a in args:
        if not isinstance(a, Tensor):
            inputs.append(None)
        elif a._grad_fn is None or keep:
            inputs.append(a)
        else:
            inputs.append(_node_input(a))
    ctx.inputs = tuple(inputs)
    ctx.scope = s["scopes"][-1]
    ctx._src = user_line(skip)
    data = result._data
    ctx.out_shape, ctx.out_dtype = data.shape, data.dtype
    result._grad_fn, ctx._seq = ctx, next(_numbered)
    if ctx._saved:
        ctx._saved_versions = _saved_versions(ctx._saved, args, tensors, result)


def _saved_versions(saved, args, tensors, result):
    """For each saved array that is (a view of) an argument Tensor's or the output's data,
    remember that tensor's version: backward checks it did not change (the in-place check).
    `args`: the positional arguments; `tensors`: `_unwrap`'s (what, Tensor) pairs, or None
    (see `_record`). Each entry is (counter, version then, what): `what` is the input's
    position, "its output", or (description, dtype, shape) for a keyword argument. The
    message (`saved_description`) is written only if the check fails."""
    tracked = []
    for arr in saved:
        if not isinstance(arr, np.ndarray):
            continue
        what = 0  # most saved arrays are a positional input's data itself: found here
        for t in args:
            if isinstance(t, Tensor) and t._data is arr:
                break
            what += 1
        else:  # the output, a view of an input, a keyword argument's data (or none of them)
            if tensors is None:  # the (what, Tensor) pairs, listed once for the arrays left
                tensors = [(i, t) for i, t in enumerate(args) if isinstance(t, Tensor)]
            what, t = _saver(arr, tensors, result)
            if t is None:
                continue
        vc = t._vc
        tracked.append((vc, vc[0], what))
    return tuple(tracked)


def saved_description(node, what):
    """'input 0', 'float32 of shape (8, 8)': what a `_saved_versions` entry names, for the
    message when its check fails."""
    if isinstance(what, int):
        t = node.inputs[what]
        return f"input {what}", f"{t.dtype} of shape {t.shape}"
    if isinstance(what, tuple):
        what, dtype, shape = what
        return what, f"{dtype} of shape {shape}"
    return what, f"{node.out_dtype} of shape {node.out_shape}"


def _saver(arr, tensors, result):
    """(what, tensor) for a saved array that is not a positional argument's data itself: the
    output (`result`) if `arr` is its data or a view of it, else the first argument Tensor
    whose data `arr` is or whose memory a view `arr` shares; (None, None) if there is none.
    `tensors`: the arguments' (what, Tensor) pairs, positional ones first."""
    base = arr.base  # only a view can share memory without being the array
    out = result._data
    if arr is out or (base is not None and (base is out or base is out.base)):
        return "its output", result
    if base is None:  # a keyword argument's data, or an array of its own (a mean, a mask)
        for what, t in tensors:
            if t._data is arr:
                return _named(what, t), t
        return None, None
    # a view (x.reshape(...) of an input's data, most often): numpy makes a view's base the
    # array that owns the memory, so a view of an input has that input's data, or the data's
    # own base, as its base — decided without numpy's memory test. An array made from another
    # library's buffer may share memory with no base in common: the test below still finds it
    for what, t in tensors:
        if base is t._data or base is t._data.base:
            return _named(what, t), t
    if np.may_share_memory(arr, out):
        return "its output", result
    for what, t in tensors:
        if np.may_share_memory(arr, t._data):
            return _named(what, t), t
    return None, None


def _named(what, t):
    """`_saver`'s `what` for tensor t: its position as an input, or for a keyword argument
    (not an input of the node) what to say and the data's dtype and shape."""
    if isinstance(what, int):
        return what
    return (what, t._data.dtype, t._data.shape)


def _op_error(cls, err, arrays):
    """Re-raise an error from forward with the op's name, scope and input shapes.

    Errors made by `op_error` already say all that and pass through unchanged.
    """
    if getattr(err, "op_named", False):
        return err
    msg = str(err)
    if not getattr(err, "names_shapes", False) and "shape" not in msg:
        msg += f" (input shapes: {describe_inputs(arrays)})"
    # numpy's ValueError (shapes that do not broadcast) is torch's RuntimeError: a ShapeError
    # is both, so code catching either catches it
    kind = ShapeError if type(err) is ValueError else type(err)
    return named_error(kind, f"{op_in_scope(cls.op_name())}: {msg}")


def shape_of(x: Any) -> tuple[int, ...]:
    """np.shape(x), at a fifth of its cost for an array (what ops are given): np.shape goes
    through numpy's function dispatch, which costs more than an 8 × 8 addition."""
    return x.shape if type(x) is np.ndarray else np.shape(x)


def shapes_of(a: Any, b: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape_of(a), shape_of(b)) in one call: what a broadcasting op's backward needs (x + y
    keeps it at every addition, and each call of a Python function costs as much as the
    test it makes)."""
    if type(a) is type(b) is np.ndarray:
        return a.shape, b.shape
    return np.shape(a), np.shape(b)


def unbroadcast(grad: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Sum `grad` down to `shape`: the gradient of numpy broadcasting.

    When forward broadcast an input of `shape` up to grad.shape, every copy received a
    gradient, and the input's gradient is their sum: over the leading axes that broadcasting
    added, and over the axes where the input had size 1. Every binary op uses this one helper.
    """
    if grad.shape == shape:  # (a tuple, most often: the common call, decided at once)
        return grad
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = sum_leading_axes(grad, extra)
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


# From this many rows a product is the faster sum: numpy's sum over a leading axis adds one
# row at a time (a fixed cost per row), the product costs one call into BLAS
_ROWS_FOR_A_PRODUCT = 128
_PRODUCT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def sum_leading_axes(grad: np.ndarray, extra: int) -> np.ndarray:
    """`grad` summed over its first `extra` axes: grad (r1, …, r_extra, *rest) → rest. A bias's
    gradient is this sum, over every row of a batch.

    For a float array in C order with many rows it is a product, ones(1, rows) @ grad's rows
    (rows, prod(rest)): one BLAS call, where numpy's sum adds the rows one at a time. It goes
    through kernels.matmul like every product (BLAS's thread count, deterministic mode)."""
    rest = grad.shape[extra:]
    cols = math.prod(rest)
    rows = grad.size // cols if cols else 0
    if (
        rows < _ROWS_FOR_A_PRODUCT
        or grad.dtype not in _PRODUCT_DTYPES
        or not grad.flags.c_contiguous
    ):
        return grad.sum(axis=tuple(range(extra)))
    return kernels.matmul(_ones_row(rows, grad.dtype), grad.reshape(rows, cols)).reshape(rest)


@functools.lru_cache(maxsize=16)
def _ones_row(rows, dtype):
    """A read-only (1, rows) array of ones: a model sums the same few row counts every step."""
    ones = np.ones((1, rows), dtype)
    ones.flags.writeable = False
    return ones
