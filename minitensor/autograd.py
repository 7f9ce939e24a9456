"""The backward engine: one iterative walk over the graph, used by `backward()` and by the
step-through `backward_steps()` alike, so what a learner steps through is what training runs.

The rest of autograd has its own modules, re-exported here so that ``mt.autograd.no_grad``,
``mt.autograd.detect_anomaly`` and ``mt.autograd.register_forward_hook`` work: gradient mode
and `keep_intermediates` (`grad_mode.py`), anomaly mode (`anomaly.py`), forward hooks
(`hooks.py`) and the per-thread state they keep (`state.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

import numpy as np

from .anomaly import AnomalyWarning, check_gradient, detect_anomaly, is_anomaly_enabled
from .grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    keep_intermediates,
    no_grad,
    set_grad_enabled,
)
from .hooks import register_forward_hook
from .state import state
from .typing import ArrayLike

if TYPE_CHECKING:  # for annotations only: both modules import this one
    from .function import Context
    from .tensor import Tensor


__all__ = [
    "AnomalyWarning",
    "BackwardStep",
    "SliceGradient",
    "backward",
    "backward_steps",
    "detect_anomaly",
    "enable_grad",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "keep_intermediates",
    "no_grad",
    "set_grad_enabled",
    "inference_mode",
    "register_forward_hook",
    "topological_order",
]


# ----------------------------------------------------------------------------- the engine


def topological_order(*roots: Context) -> list[Context]:
    """The nodes reachable from `roots` (nodes), each before every node that feeds it.

    This is the order backward visits them: a node runs only once all the gradients for its
    output have arrived (reversed, it is the order forward made them, which the graph viewer
    draws). Each node is numbered as it is recorded (``_seq``, as torch numbers its nodes),
    and a node's inputs existed before it, so the order is the nodes by number, highest first.
    """
    return _reachable(roots)[0]


def _newest_first(node):
    return -node._seq


def _reachable(roots):
    """`topological_order(*roots)`, and {id(leaf): how many of its nodes take it as an input}
    for every leaf that requires grad (a leaf taken twice by one node, x * x, counts twice):
    what a step-through knows before its first step. An iterative search, so a chain of
    10,000 ops is fine."""
    seen, stack, uses = set(roots), list(roots), {}  # (a node hashes by identity)
    while stack:
        for t in stack.pop().inputs:
            if t is None:
                continue
            fn = t._grad_fn  # (a Tensor's, or a NodeInput's)
            if fn is None:
                if t.requires_grad:  # a leaf
                    uses[id(t)] = uses.get(id(t), 0) + 1
            elif fn not in seen:
                seen.add(fn)
                stack.append(fn)
    return sorted(seen, key=_newest_first), uses


class BackwardStep:
    """One node's turn in the backward pass, as `backward_steps` yields it.

    ``node`` (the graph node: ``name``, ``scope``, ``source``), ``index`` and ``total``,
    ``grad_output`` (dLoss/dOutput arriving at the node), ``grad_inputs`` (what it sends to each
    input, None where nothing), ``saved`` (the arrays it saved for backward).
    """

    root = None  # the walk's first node (the loss's): what a step draws from
    _display_hook = None  # set by minitensor.viz: (step, include, exclude) -> a mime bundle

    def __init__(
        self,
        index: int,
        total: int,
        node: Context,
        grad_output: np.ndarray,
        grad_inputs: tuple[np.ndarray | None, ...],
        saved: tuple[Any, ...],
        run: list[int],
        n_run: int,
        grads: dict[int, tuple[int, np.ndarray]] | None = None,
    ) -> None:
        self.index, self.total, self.node = index, total, node
        self.grad_output, self.grad_inputs, self.saved = grad_output, grad_inputs, saved
        self._run, self._n_run = run, n_run  # the walk's shared run list, and its length now
        self._grads = grads if grads is not None else {}  # {id(node): (position in run, grad)}

    @property
    def done(self) -> frozenset[int]:
        """Ids of the nodes whose backward had run when this step was taken (this one
        included). A snapshot: it does not grow as the walk goes on."""
        return frozenset(self._run[: self._n_run])

    def grad_of(self, node: Context) -> np.ndarray | None:
        """The gradient that reached `node`'s output in this walk, if its backward had run by
        this step (this step's node included), else None. A walk from `backward_steps` keeps
        every node's (so that a picture of an earlier step can show them); `backward()` keeps
        none."""
        position, g = self._grads.get(id(node), (self._n_run, None))
        return g if position < self._n_run else None

    @property
    def op(self) -> str:
        return self.node.name

    @property
    def scope(self) -> str:
        return self.node.scope

    @property
    def source(self) -> tuple[str, int, str] | None:
        return self.node.source

    def _repr_mimebundle_(self, include=None, exclude=None):
        """In a notebook, a step draws the graph with its node highlighted (when viz is loaded
        and Graphviz's `dot` is installed), else its text."""
        hook = BackwardStep._display_hook
        return hook(self, include, exclude) if hook else {"text/plain": repr(self)}

    def __repr__(self) -> str:
        return (
            f"<step {self.index + 1}/{self.total}: {self.node.where()} "
            f"grad_output {self.grad_output.shape}>"
        )


def _initial_grad(tensor, grad):
    if grad is None:
        if tensor.numel() != 1:
            raise RuntimeError(
                f"backward: a gradient can be implied only for a single-element output, but this "
                f"tensor has shape {tensor.shape}. Pass grad= with that shape (or reduce it, "
                f"e.g. loss.sum())."
            )
        return np.ones_like(tensor.numpy())
    g = grad if isinstance(grad, np.ndarray) else np.asarray(getattr(grad, "data", grad))
    if g.shape != tensor.shape:
        raise ValueError(
            f"backward: grad has shape {g.shape} but the output has shape {tensor.shape}"
        )
    return g.astype(tensor.dtype, copy=False)


def _modified_in_place(node, counter, version, what):
    """Raise the in-place check's error: what `node` saved (a `_saved_versions` entry) changed
    version since forward."""
    from .function import saved_description  # function.py imports this module

    what, kind = saved_description(node, what)
    raise RuntimeError(
        f"backward: one of the variables needed for gradient computation has been "
        f"modified by an inplace operation: {what} of {node.where()} — {kind} — was "
        f"saved for backward and then modified in place (version {version} -> "
        f"{counter[0]}); its gradient would be silently wrong. Use an out-of-place op "
        f"(x = x + y instead of x.add_(y)) or clone first."
    )


def _count_error(node, grads):
    return RuntimeError(
        f"backward of {node.where()} returned {len(grads)} gradients for {len(node.inputs)} inputs"
    )


def _position(node, grads, t, g):
    """Which input of `node` the gradient `g`, returned for input `t`, was for: the first
    position holding both (an input taken twice with one gradient, x * x, fails its check at
    its first position already). Looked up only for a message: the engine's loop does not
    count positions."""
    for i, (u, h) in enumerate(zip(node.inputs, grads)):
        if u is t and h is g:
            return i
    return None


def _shape_error(node, i, g, shape):
    return RuntimeError(
        f"backward of {node.where()} returned a gradient of shape {g.shape} for input {i} of "
        f"shape {shape} (reduce broadcast gradients with mt.unbroadcast)"
    )


def backward_steps(
    tensor: Tensor, grad: Tensor | ArrayLike | None = None, retain_graph: bool = False
) -> Iterator[BackwardStep]:
    """Run backward from `tensor` one node at a time, yielding a `BackwardStep` after each.

    Consuming every step leaves exactly the gradients ``tensor.backward()`` leaves: `backward`
    is the same walk run to the end. Leaves (tensors made by the user, and parameters) receive
    their gradient in ``.grad``, accumulated across calls until zeroed; in a step-through, a
    leaf's ``.grad`` is written once every node that uses it has run.

    Bad calls (no graph, a non-scalar output without `grad`, a freed graph, a saved tensor
    modified in place) raise here, before any step runs and before any ``.grad`` changes.
    """
    return _start(tensor, grad, retain_graph, {})


def _check_saved(node):
    """Raise a clear error if backward cannot run through `node`: what it saved was freed by
    an earlier backward, or modified in place since forward."""
    if node._released:
        node.check_not_released()  # raises, naming the node
    for counter, version, what in node._saved_versions:
        if counter[0] != version:
            _modified_in_place(node, counter, version, what)


def _start(tensor, grad, retain_graph, record):
    """Check the call, then return the walk (a generator); see `backward_steps`. `record`:
    None for `backward()`, a dict for a step-through, which first looks at the whole graph:
    so that a bad graph raises before its first step, each step knows how many there are,
    and each leaf's .grad is written as soon as the last node that uses it has run."""
    if not tensor.requires_grad:
        raise RuntimeError(
            f"backward: this tensor (shape {tensor.shape}) does not require grad and has no "
            f"graph; did you compute it under no_grad, or from tensors without requires_grad?"
        )
    g0 = _initial_grad(tensor, grad)
    if tensor.grad_fn is None:  # backward on a leaf itself
        tensor._accumulate_grad(run_grad_hooks(tensor, g0))
        return iter(())
    if record is None:  # backward(): each node is checked as the walk reaches it
        return _walk(tensor.grad_fn, g0, retain_graph, _LeafGrads())
    order, leaf_uses = _reachable((tensor.grad_fn,))
    for node in order:
        _check_saved(node)
    return _walk(tensor.grad_fn, g0, retain_graph, _CountedLeafGrads(leaf_uses), record, len(order))


def run_grad_hooks(owner, grad):
    """grad after the hooks registered on a leaf or a graph node (Tensor.register_hook)."""
    hooks = getattr(owner, "_grad_hooks", None)
    if not hooks:
        return grad
    from .tensor import Tensor  # tensor.py imports this module

    for hook in list(hooks):
        replaced = hook(Tensor._make(grad))
        if replaced is not None:
            grad = replaced.numpy() if isinstance(replaced, Tensor) else np.asarray(replaced)
    return grad


def _incoming(node, g_out):
    """The gradient node's backward receives: in float32 where forward computed a float16
    input in float32, then through the hooks on the node's output (Tensor.register_hook)."""
    if node._grad_dtype is not None:
        g_out = g_out.astype(node._grad_dtype)
    return run_grad_hooks(node, g_out)


class _LeafGrads:
    """The .grad writes of one backward pass. A leaf's shares are summed as they come and its
    .grad is written once, with the whole sum (as torch's AccumulateGrad runs once all of a
    leaf's gradient has arrived): its hooks (Tensor.register_hook) see its whole gradient, and
    .grad takes one addition per pass, not one per use. `backward()` writes every leaf at the
    end of the pass (`flush`), so a pass that fails half-way has written none (a step-through
    writes sooner: `_CountedLeafGrads`). Each .grad written is kept to undo a failure."""

    def __init__(self):
        # id(leaf) -> [the sum of its shares so far, the leaf, whether this pass made the sum]
        self.pending = {}
        self.before = {}  # id -> (tensor, None or (its .grad, a copy of the values))

    def give(self, t, g):
        entry = self.pending.get(id(t))
        if entry is None:
            self.pending[id(t)] = [g, t, False]
        elif entry[2]:  # a sum this pass made: no one else holds it, so add in place
            entry[0] += g
        else:  # the first share may be another node's array too: the sum is a new array
            entry[0], entry[2] = entry[0] + g, True

    def write(self, t, g):
        if id(t) not in self.before:  # .grad accumulates in place: keep its values to undo
            kept = None if t.grad is None else (t.grad, t.grad.numpy().copy())
            self.before[id(t)] = (t, kept)
        t._accumulate_grad(run_grad_hooks(t, g))

    def flush(self):
        """Write every sum still pending."""
        pending, self.pending = self.pending, {}
        for g, t, _ in pending.values():
            self.write(t, g)

    def undo(self):
        for t, kept in self.before.values():
            t.grad = None if kept is None else kept[0]
            if kept is not None:
                np.copyto(kept[0].numpy(), kept[1])


class _CountedLeafGrads(_LeafGrads):
    """A step-through's .grad writes: it knows how many nodes use each leaf (`uses`, {id: n},
    from `_reachable`), and writes a leaf's .grad as soon as the last of them has sent its
    share, so that its steps show each .grad complete once all its users ran. `flush` writes
    the leaves some of whose users sent nothing (an unused branch)."""

    def __init__(self, uses):
        super().__init__()
        self.left = dict(uses)  # id(leaf) -> the shares still to come

    def give(self, t, g):
        super().give(t, g)
        left = self.left.get(id(t), 1) - 1  # (a retained gradient has one share: no count)
        self.left[id(t)] = left
        if not left:
            g, _, _ = self.pending.pop(id(t))
            self.write(t, g)


def _walk(root, g0, retain_graph, leaves, record=None, total=None):
    """The engine proper: visit the nodes from the newest down (`topological_order`), sending
    each node's output gradient through its backward to its inputs. The nodes waiting for
    their turn are a heap (`ready`) keyed by their number: a node enters it when its first
    gradient share arrives, and leaves it once every node made after it has run, so its
    gradient is complete. `leaves`: a `_LeafGrads`; `record` (a dict, for a step-through of
    `total` nodes) keeps every node's output gradient for the steps' `grad_of`; `backward()`
    passes None.

    What a node's backward returns is checked as it is sent on (see `_send`)."""
    grads = {root: g0}  # gradients that reached each node's output, so far (by node)
    made = set()  # ids of the arrays in `grads` this walk allocated itself (see _add_slice)
    ready = [(-root._seq, root)]
    run = []  # ids of the nodes whose backward has run, in order (kept for a step-through)
    give, anomaly = leaves.give, state.anomaly
    try:
        while ready:
            node = heappop(ready)[1]
            g_out = grads.pop(node)
            if made:  # (empty unless a view's gradient came back as a SliceGradient)
                made.discard(id(g_out))  # on its way out: someone else may hold it from now on
            if node._released:
                node.check_not_released()
            for counter, version, what in node._saved_versions:
                if counter[0] != version:
                    _modified_in_place(node, counter, version, what)
            if node._grad_dtype is not None or node._grad_hooks:
                g_out = _incoming(node, g_out)
            g_in = node.fn.backward(node, g_out)
            if type(g_in) is not tuple:
                g_in = (g_in,)
            if len(g_in) != len(node.inputs):
                raise _count_error(node, g_in)
            if retain_graph:  # kept for the graph viewer (show_grad); otherwise every
                node.grad = g_out  # node's output gradient would live as long as the graph
            retained = node._retained() if node._retained is not None else None
            if retained is not None:  # Tensor.retain_grad()
                give(retained, g_out)
            sent = [] if record is not None else None  # what a step shows it sent
            _send(node, g_in, grads, ready, give, anomaly, sent, made)
            if record is not None:  # a step-through: `backward()` has no one to show a step
                run.append(id(node))
                n = len(run)
                record[id(node)] = (n - 1, g_out)
                saved = node.saved_tensors
                step = BackwardStep(n - 1, total, node, g_out, tuple(sent), saved, run, n, record)
                step.root = root
                yield step
            if not retain_graph:  # node.release(), inline: it runs for every node
                node._saved, node._released = (), True
        leaves.flush()
    except BaseException as exc:
        # A walk that stops half-way must not leave some leaves with this pass's gradient and
        # others without: put every .grad back. That covers a backward that raised (a bug in an
        # op's backward, anomaly mode), Ctrl-C, and a step-through abandoned early (closing the
        # generator raises GeneratorExit at its `yield`) — unless no gradient is left to send.
        finished = isinstance(exc, GeneratorExit) and not grads
        if not finished:
            leaves.undo()
        raise


def _send(node, g_in, grads, ready, give, anomaly, sent, made):
    """Send what `node`'s backward returned (`g_in`, one per input) on: a leaf's to `give`
    (`_LeafGrads`), another node's added to `grads` (and the node to `ready` with its first
    share). On the way each is checked: one gradient per input, each of its input's shape
    (read from its array for a leaf, from the node that made it otherwise, not through
    Tensor's properties: this runs for every input of every node), cast to its input's
    dtype; under anomaly mode, free of NaN/Inf. `sent`, a list or None, collects each
    input's gradient (None where there is none). A `SliceGradient` is added in place
    (`_add_slice`; `made`: see there), or made whole where every entry is looked at."""
    for t, g, wanted in zip(node.inputs, g_in, node.needs_input_grad):
        if g is None or not wanted:
            if sent is not None:
                sent.append(None)
            continue
        fn = t._grad_fn  # a Tensor's node, or a NodeInput's: the op that made it
        if fn is None:  # a leaf (always a Tensor)
            data = t._data
            shape, dtype = data.shape, data.dtype
        else:
            shape, dtype = fn.out_shape, fn.out_dtype
        returned = g
        if type(g) is not np.ndarray:  # (the common case first: one test per gradient)
            if type(g) is SliceGradient:
                if fn is not None and g.shape == shape and not anomaly and sent is None:
                    _add_slice(fn, g, dtype, grads, ready, made)
                    continue
                g = g.whole()  # a leaf's .grad, anomaly mode's check, a step-through's picture
            g = np.asarray(g)
        if g.shape != shape:
            raise _shape_error(node, _position(node, g_in, t, returned), g, shape)
        if g.dtype is not dtype and g.dtype != dtype:
            g = g.astype(dtype)
        if anomaly:
            check_gradient(node, _position(node, g_in, t, returned), g)
        if sent is not None:
            sent.append(g)
        if fn is None:
            give(t, g)
        else:
            prev = grads.get(fn)
            if prev is None:  # its first share: the node waits for its turn
                grads[fn] = g
                heappush(ready, (-fn._seq, fn))
            elif id(prev) in made:
                np.add(prev, g, out=prev)
            else:
                grads[fn] = prev + g


class SliceGradient:
    """What a view's backward returns in place of a gradient of its input's whole shape: the
    gradient `values` of the part `index` of an input of shape `shape`, zero elsewhere. The
    pieces of one tensor (split, chunk, unbind, x[:, -1]) then add into one array
    (`_add_slice`) instead of each making a whole array of zeros for the engine to add."""

    __slots__ = ("index", "values", "shape")

    def __init__(self, index: Any, values: np.ndarray, shape: tuple[int, ...]) -> None:
        self.index, self.values, self.shape = index, values, shape

    def whole(self) -> np.ndarray:
        """The gradient as an array of the input's shape."""
        g = np.zeros(self.shape, self.values.dtype)
        g[self.index] = self.values
        return g


def _add_slice(fn, piece, dtype, grads, ready, made):
    """Add a SliceGradient to the gradient gathered for fn's output: into that array itself when
    this walk allocated it (`made` holds their ids until the node is run), else into zeros or a
    copy that it then allocated. Never into an array someone else may hold: a share passed on
    as it arrived (x + y sends its gradient on unchanged) is copied first."""
    prev = grads.get(fn)
    if prev is None:  # its first share: the node waits for its turn
        prev = np.zeros(piece.shape, dtype)
        heappush(ready, (-fn._seq, fn))
    elif id(prev) not in made:
        prev = prev.copy()
    prev[piece.index] += piece.values
    grads[fn] = prev
    made.add(id(prev))


def backward(
    tensor: Tensor, grad: Tensor | ArrayLike | None = None, retain_graph: bool = False
) -> None:
    """Compute the gradient of `tensor` with respect to every leaf that requires grad."""
    for _ in _start(tensor, grad, retain_graph, None):  # no record: gradients die as they go
        pass
