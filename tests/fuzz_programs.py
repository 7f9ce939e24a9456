"""Random programs for the differential fuzzer in tests/interop/test_fuzz.py.

A *program* is a list of steps over a *pool* of values: a step either makes a new input (an
array with edge values, and whether it requires grad) or applies one op from `OPS` to values
already in the pool, appending its result. Programs are drawn by hypothesis (`draw_program`),
with torch running alongside to know each value's shape and dtype while drawing.

Each entry of `OPS` is one row of a table: the op's name, its minitensor callable, its torch
callable (the reference), and an argument generator that picks operands from the pool (or makes
new inputs that broadcast with them) and draws the op's parameters. Where minitensor documents a
different behaviour from torch's, the torch callable implements minitensor's documented rule
from torch pieces, with a comment saying which rule (category (b) of the report: a legitimate
documented difference), so that every remaining mismatch is a question.

How a program is checked (`fuzz_check`, on each backend): minitensor runs it and keeps every
value and every gradient (``retain_grad``) of a weighted sum of all float values. Then each op is
replayed *alone* in torch on minitensor's own input values, and minitensor must agree with it:
same error-or-not (a raw numba error never counts as an error message), dtype, shape and
requires_grad, same NaN/±inf positions, finite values within tolerance; and the gradient that
reached each value must equal the sum of torch's vector-Jacobian products of its consumers (at
minitensor's upstream gradients). Replaying op by op keeps every comparison local: a mismatch
names the op that made it, and a program of 16 ops needs no more slack than one op. Last, the
program's in-place edit of a saved input that does not require grad (a mask, target, id or index
tensor, or a float constant) is applied between forward and backward (`check_inplace`).

Tolerance of one element: ``atol + rtol·|ref| + K·|ref − ref_other| + K·eps·lin``, where
ref_other is the same op run by torch at the other precision (float64 for float32 ops: torch's
own rounding error, so an ill-conditioned instance gets the slack it needs and a well-conditioned
one none), and lin, for the ops with a `bound`, is that bound on |inputs|: for a sum, the sum of
|terms| (where huge terms cancel, 1e30 + 1 − 1e30 depends on the order of the additions); for
var and layer_norm, the rounding of the mean at large offsets (see `_var_bound`).

`Program.source()` prints a program as lines ``v3 = F.add(v0, v1)``, where each name is a row of
`OPS` (its params as keywords): the report turns a mismatch into a few lines of real API.
"""

import dataclasses
import math

import numpy as np
import torch
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F

TF = torch.nn.functional

RTOL = {np.float32: 1e-5, np.float64: 1e-9}
ATOL = {np.float32: 1e-6, np.float64: 1e-12}
K = 8  # slack on the conditioning terms


# ------------------------------------------------------------------------------------ values
def edge_values(dtype):
    """The values an adversarial user feeds: infinities, NaN, huge, subnormal, signed zero."""
    tiny = 1e-40 if dtype == np.float32 else 1e-310  # subnormal in each dtype
    return np.array(
        [np.inf, -np.inf, np.nan, 1e30, -1e30, tiny, -tiny, 0.0, -0.0, 3e4, 1e6, -1e9], dtype=dtype
    )


def make_array(rng, shape, dtype, style):
    """An input array. style: 'plain' (N(0, 1)), 'edge' (about one entry in four from
    `edge_values`), 'rows' (some rows of the last axis all −1e9), 'huge' (3e4 + N(0, 1) or
    1e6·N(0, 1)), 'ints' (small integers), 'bool'."""
    if style == "bool":
        return rng.random(shape) < 0.4
    if style == "ints":
        return rng.integers(-3, 4, size=shape).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    if style == "edge":
        pick = rng.random(shape) < 0.25
        x = np.where(pick, rng.choice(edge_values(dtype), size=shape), x).astype(dtype)
    elif style == "rows" and x.ndim >= 1:
        rows = rng.random(shape[:-1] + (1,)) < 0.5
        x = np.where(rows, dtype(-1e9), x).astype(dtype)
    elif style == "huge":
        x = (x + 3e4 if rng.random() < 0.5 else x * 1e6).astype(dtype)
    return np.asarray(x, dtype=dtype)


# ------------------------------------------------------------------------------------ program
@dataclasses.dataclass
class Step:
    """One line of a program: `op` applied to pool values `args` with `params`; or, when op is
    "input", a new leaf (params: array, requires_grad)."""

    op: str
    args: tuple = ()
    params: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Program:
    steps: list
    weight_seed: int
    edit: tuple = None  # (pool index, kind, value): an in-place edit after forward

    def source(self):
        """The program as Python lines (v0 = ..., v1 = F.exp(v0), ...), for reproducers."""
        lines = []
        for i, s in enumerate(self.steps):
            if s.op == "input":
                a = s.params["array"]
                text = (
                    np.array2string(a, separator=", ", threshold=10**6, floatmode="unique")
                    if a.size
                    else f"np.zeros({a.shape})"
                )
                lines.append(
                    f"v{i} = mt.tensor(np.array({text}), dtype=np.{a.dtype}, "
                    f"requires_grad={s.params['requires_grad']})"
                )
            else:
                args = ", ".join(f"v{j}" for j in s.args)
                kw = ", ".join(f"{k}={v!r}" for k, v in s.params.items())
                lines.append(f"v{i} = {s.op}({args}{', ' if args and kw else ''}{kw})")
        if self.edit:
            i, kind, value = self.edit
            lines.append(f"# in-place edit after forward: v{i}.{kind}({value!r})")
        return "\n".join(lines)


def _kind(t):
    if t is None:
        return None
    if t.dtype == torch.bool:
        return "bool"
    return "float" if t.is_floating_point() else "int"


class Builder:
    """Draws a program step by step. `vals` holds torch's value of every pool entry (None
    where torch raised), so that generators know shapes and dtypes."""

    def __init__(self, draw, dtype):
        self.draw, self.dtype = draw, dtype
        self.rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="values seed"))
        self.steps, self.vals = [], []

    # --- pool access
    def pick(self, kinds=("float",), min_ndim=0, where=None):
        """Index of a pool value of one of `kinds` with ndim ≥ min_ndim (and where(t)), or None."""
        ok = [
            i
            for i, t in enumerate(self.vals)
            if _kind(t) in kinds and t.ndim >= min_ndim and (where is None or where(t))
        ]
        return self.draw(st.sampled_from(ok)) if ok else None

    def new_input(self, shape, kind="float", style=None, requires_grad=None, low=0, high=None):
        """Append a new leaf of `shape`; kind 'float' (edge values by `style`), 'int' (in
        [low, high)), 'bool'."""
        shape = tuple(int(n) for n in shape)
        if kind == "int":
            arr = self.rng.integers(low, high, size=shape).astype(np.int64)
            rg = False
        elif kind == "bool":
            arr, rg = make_array(self.rng, shape, None, "bool"), False
        else:
            dtype = self.dtype
            if self.draw(st.integers(0, 19)) == 0:  # now and then the other float dtype
                dtype = np.float64 if dtype == np.float32 else np.float32
            style = style or self.draw(
                st.sampled_from(["plain", "plain", "edge", "edge", "rows", "huge", "ints"])
            )
            arr = make_array(self.rng, shape, dtype, style)
            rg = self.draw(st.integers(0, 4)) > 0 if requires_grad is None else requires_grad
        return self.add(Step("input", (), {"array": np.asarray(arr), "requires_grad": rg}))

    def add(self, step):
        """Append a step; run it in torch (no grad) to learn its value's shape and dtype."""
        self.steps.append(step)
        self.vals.append(torch_value(step, self.vals))
        return len(self.steps) - 1

    # --- shapes
    def shape(self, min_ndim=0, max_ndim=4):
        ndim = self.draw(st.integers(min_ndim, max_ndim))
        return tuple(self.draw(st.sampled_from([1, 2, 3, 4, 5, 2, 3, 0])) for _ in range(ndim))

    def broadcast_partner(self, shape):
        """A shape that broadcasts with `shape`: drop leading axes, set some sizes to 1, or
        add leading axes."""
        lead = self.draw(st.integers(0, len(shape)))
        out = [1 if self.draw(st.integers(0, 3)) == 0 else n for n in shape[lead:]]
        if self.draw(st.integers(0, 4)) == 0:
            out = [self.draw(st.sampled_from([1, 2]))] + list(shape[:lead]) + out
        return tuple(out)

    def operand(self, kinds=("float", "float", "float", "int"), min_ndim=0):
        """A pool value (mostly) or a new input, for unary ops."""
        kind = self.draw(st.sampled_from(kinds))
        i = self.pick((kind,), min_ndim) if self.draw(st.integers(0, 3)) else None
        if i is None:
            i = self.new_input(
                self.shape(min_ndim), kind="float" if kind == "float" else "int", low=-3, high=4
            )
        return i

    def partner(self, i, kinds=("float",)):
        """A second operand that broadcasts with value i: from the pool if one fits, else new."""
        shape = tuple(self.vals[i].shape)
        if self.draw(st.booleans()):
            j = self.pick(kinds, where=lambda t: _broadcasts(t.shape, shape))
            if j is not None:
                return j
        kind = self.draw(st.sampled_from(kinds))
        return self.new_input(self.broadcast_partner(shape), kind=kind, low=-3, high=4)

    def axes(self, ndim, allow_none=True):
        """An axis argument: None, one axis (maybe negative) or a tuple of distinct axes."""
        choice = self.draw(st.integers(0 if allow_none else 1, 2 if ndim else 0))
        if choice == 0 or ndim == 0:
            return None
        if choice == 1:
            return self.draw(st.integers(-ndim, ndim - 1))
        return tuple(sorted(self.draw(st.sets(st.integers(0, ndim - 1), min_size=1))))


def _broadcasts(a, b):
    try:
        np.broadcast_shapes(tuple(a), tuple(b))
        return True
    except ValueError:
        return False


def torch_value(step, vals):
    """torch's result of `step` from pool values `vals` (None if torch raises or an operand
    is missing)."""
    if step.op == "input":
        return torch.from_numpy(np.array(step.params["array"]))
    args = [vals[j] for j in step.args]
    if any(a is None for a in args):
        return None
    try:
        with torch.no_grad():
            return OPS[step.op].torch(*args, **step.params)
    except Exception:
        return None


# ------------------------------------------------------------------------------------ op table
@dataclasses.dataclass
class Op:
    mt: callable  # minitensor: mt(*values, **params)
    torch: callable  # torch reference, same arguments as torch tensors
    gen: callable  # gen(builder) -> (arg indices, params), or None if not applicable
    bound: callable = None  # sums and products: torch op whose value on |inputs| bounds the
    # rounding error (add for a − b: |a| + |b|)


def _extremum_ref(whole, over_axes, x, axis, keepdims):
    """torch.max(x) for all axes (a NaN maximum's gradient shared by the NaNs), else amax
    over the axes (NaN to the whole slice of a NaN), as minitensor's max/min document."""
    if axis is not None:
        return over_axes(x, _tuple(axis), keepdim=keepdims)
    out = whole(x) if x.numel() else over_axes(x, _dims(x, axis))  # (refused: no elements)
    return out.reshape((1,) * x.ndim) if keepdims else out


def _tuple(axis):
    return (axis,) if isinstance(axis, int) else axis


def _dims(x, axis):
    return tuple(range(x.ndim)) if axis is None else axis


_INT_TO = [torch.float32]  # what `_float` makes of integers: float64 while `replay` runs
# an op at float64 to measure torch's float32 rounding


def _float(x):
    """int/bool → torch's default float: minitensor's rule for float-only ops (issue 12 #7:
    follow torch's promotion, as torch.exp does; torch's gelu/silu/softmax/layer_norm refuse
    integers instead)."""
    return x if x.is_floating_point() else x.to(_INT_TO[0])


class _GeluRef(torch.autograd.Function):
    """torch's GELU and its backward, except for the value at +inf: torch's vectorised CPU
    kernel gives NaN there for a tensor of two or more elements (torch's bug: its one-element
    path, like the limit x·Φ(x) → ∞, gives +inf)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(torch.isposinf(x), x, TF.gelu(x))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward(grad, x)


def _gelu_ref(x):
    return _GeluRef.apply(_float(x))


def gen_unary(b):
    return (b.operand(),), {}


def gen_binary(b):
    i = b.operand()
    if b.draw(st.integers(0, 4)) == 0:  # a Python number on the right
        return (i,), {"scalar": b.draw(st.sampled_from([2.0, 0.5, -1.0, 0.0, 3, -2, np.inf]))}
    return (i, b.partner(i, kinds=("float", "float", "int"))), {}


def binary(fn_mt, fn_torch):
    """A binary op whose right operand is a pool value or, with params scalar=..., a number."""
    return (
        lambda a, b=None, scalar=None: fn_mt(a, scalar if b is None else b),
        lambda a, b=None, scalar=None: fn_torch(*_promote(a, scalar if b is None else b)),
    )


def _promote(*xs):
    """The operands as torch takes them: minitensor promotes as torch.result_type does (a 0-d
    tensor does not widen a dimensioned one of its kind), so nothing is changed."""
    return xs


def gen_pow(b):
    i = b.operand()
    if b.draw(st.booleans()):
        return (i,), {"scalar": b.draw(st.sampled_from([2, 3, 0.5, -1.0, 2.0, 0.0, -2]))}
    return (i, b.partner(i)), {}


def _pow_ref(a, b):
    """torch.pow, except that an empty integer tensor to a negative integer power is empty
    (minitensor, like numpy, refuses only the elements it computes; torch refuses the call)."""
    if torch.is_tensor(a) and a.numel() == 0 and not a.is_floating_point():
        return torch.pow(a, abs(b)) if not torch.is_tensor(b) else torch.pow(a, b.abs())
    return torch.pow(a, b)


def gen_reduce(b):
    i = b.operand()
    return (i,), {"axis": b.axes(b.vals[i].ndim), "keepdims": b.draw(st.booleans())}


def gen_compare(b):
    i = b.operand(kinds=("float",))
    return (i, b.partner(i)), {}


def gen_clamp(b):
    low, high = b.draw(
        st.sampled_from(
            [(-1.0, 1.0), (None, 0.5), (0.0, None), (2.0, -2.0), (-np.inf, 3.0), (0.5, 0.5)]
        )
    )
    return (b.operand(),), {"low": low, "high": high}


def gen_clamp_tensors(b):
    """clamp with tensor bounds that broadcast with x (torch differentiates them): both, or
    one (which: 'both', 'min', 'max'); drawn from the pool, so they may require grad."""
    i = b.operand(kinds=("float",))
    shape = tuple(b.vals[i].shape)
    which = b.draw(st.sampled_from(["both", "both", "min", "max"]))
    bounds = []
    for _ in range(2 if which == "both" else 1):
        j = b.partner(i)
        # bounds no larger than x: torch's backward refuses a 0-d max that requires grad
        # when the result broadcasts larger than x ("output with shape [] doesn't match the
        # broadcast shape [1]"), where minitensor's gradient is right
        if b.vals[j] is None or np.broadcast_shapes(tuple(b.vals[j].shape), shape) != shape:
            j = b.new_input(b.broadcast_partner(shape)[-len(shape) :] if shape else ())
        bounds.append(j)
    return (i, *bounds), {"which": which}


def _clamp_tensors(clamp):
    """clamp(x, *bounds, which=…) for one library's clamp, the bounds by keyword."""

    def run(x, *bounds, which):
        if which == "both":
            return clamp(x, min=bounds[0], max=bounds[1])
        return clamp(x, **{which: bounds[0]})

    return run


def _clamp_bound(x, *bounds, which):
    # each bound's gradient sums the upstream over the positions it wins and its broadcast
    # axes, so the sum of the absolute values bounds the terms (as for add)
    return sum(bounds, x)


def gen_reshape(b):
    i = b.operand()
    n = b.vals[i].numel()
    shape = _factor(b, n)
    if shape and b.draw(st.booleans()) and n > 0:
        k = b.draw(st.integers(0, len(shape) - 1))
        shape = shape[:k] + (-1,) + shape[k + 1 :]
    return (i,), {"shape": shape}


def _factor(b, n):
    """A random shape with n elements (1 to 3 axes; n == 0 gives a 0 somewhere)."""
    if n == 0:
        return b.draw(st.sampled_from([(0,), (2, 0), (0, 3)]))
    sizes = []
    for _ in range(b.draw(st.integers(0, 2))):
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        d = b.draw(st.sampled_from(divisors))
        sizes.append(d)
        n //= d
    return tuple(sizes) + (n,) if sizes or n != 1 or b.draw(st.booleans()) else ()


def gen_transpose(b):
    i = b.operand(min_ndim=1)
    nd = b.vals[i].ndim
    axis = st.integers(-nd, nd - 1)
    return (i,), {"axis0": b.draw(axis), "axis1": b.draw(axis)}


def gen_permute(b):
    i = b.operand(min_ndim=1)
    return (i,), {"axes": tuple(b.draw(st.permutations(range(b.vals[i].ndim))))}


def gen_squeeze(b):
    i = b.operand()
    nd = b.vals[i].ndim
    if nd and b.draw(st.booleans()):  # any axis: one of size ≠ 1 stays, as in torch
        return (i,), {"axis": b.draw(st.integers(-nd, nd - 1))}
    return (i,), {"axis": None}


def gen_unsqueeze(b):
    i = b.operand()
    nd = b.vals[i].ndim
    return (i,), {"axis": b.draw(st.integers(-nd - 1, nd))}


def gen_getitem(b):
    """x[index]: a tuple of ints, slices, None and Ellipsis, or of slices, None, Ellipsis and
    one advanced index (an int64 index tensor or a bool mask, both pool values that may be
    edited in place)."""
    i = b.operand(min_ndim=1)
    shape = tuple(b.vals[i].shape)
    index, args, axis = [], [i], 0
    for _ in range(b.draw(st.integers(1, len(shape)))):
        n = shape[axis] if axis < len(shape) else 1
        kind = b.draw(st.sampled_from(["int", "slice", "slice", "none", "tensor", "mask"]))
        if kind == "int" and n > 0:
            index.append(b.draw(st.integers(-n, n - 1)))
        elif kind == "none":
            index.append(None)
            continue
        elif kind == "tensor" and len(args) == 1 and n > 0:
            args.append(b.new_input(b.shape(0, 2), kind="int", low=-n, high=n))
            index.append("@")
        elif kind == "mask" and len(args) == 1:
            args.append(b.new_input((n,), kind="bool"))
            index.append("@")
        else:
            index.append(
                slice(
                    b.draw(st.sampled_from([None, 0, 1, -2])),
                    b.draw(st.sampled_from([None, 2, -1, 5])),
                    b.draw(st.sampled_from([None, 1, 2])),
                )
            )
        axis += 1
        if axis >= len(shape):
            break
    # ints beside an index array stay: minitensor reads them as torch does (they select first)
    if b.draw(st.integers(0, 4)) == 0:
        index.append(Ellipsis)  # at the end: the mask stays on the axis it was drawn for
    return tuple(args), {"index": tuple(index)}


def _index(index, tensors):
    tensors = list(tensors)
    return tuple(tensors.pop(0) if e == "@" else e for e in index)


def int_extremes(b, shape):
    """A new integer input at its dtype's edges, with ties: uint8 (0 … 255, where −x wraps) or
    int64 (its minimum, whose negation is itself, and maximum)."""
    if b.draw(st.booleans()):
        values = np.array([0, 1, 2, 127, 128, 200, 255], np.uint8)
    else:
        info = np.iinfo(np.int64)
        values = np.array([info.min, info.min + 1, -1, 0, 1, 1, info.max], np.int64)
    arr = b.rng.choice(values, size=tuple(int(n) for n in shape))
    return b.add(Step("input", (), {"array": np.asarray(arr), "requires_grad": False}))


def gen_sort(b):
    """An axis of a float value (NaN among the edge values, ties among the small integers) or
    of integers at their dtype's edges, and a direction."""
    if b.draw(st.integers(0, 2)) == 0:
        i = int_extremes(b, b.shape(1, 3))
    else:
        i = b.operand(kinds=("float", "float", "int"), min_ndim=1)
    nd = b.vals[i].ndim
    return (i,), {"axis": b.draw(st.integers(-nd, nd - 1)), "descending": b.draw(st.booleans())}


def gen_topk(b):
    (i,), params = gen_sort(b)
    n = b.vals[i].shape[params["axis"]]
    k = b.draw(st.integers(0, n))
    return (i,), {"k": k, "axis": params["axis"], "largest": params["descending"]}


def gen_max_dim(b):
    (i,), params = gen_sort(b)
    if b.vals[i].shape[params["axis"]] == 0:  # no max of nothing: both refuse, not drawn
        return gen_max_dim(b)
    return (i,), {"axis": params["axis"], "keepdim": params["descending"]}


def _topk_ref(x, k, axis, largest, which):
    # minitensor documents its order of ties (the earlier position first); torch promises
    # none, so the reference is torch's stable sort, cut at k
    return torch.sort(x, dim=axis, descending=largest, stable=True)[which].narrow(axis, 0, k)


def gen_bitwise(b):
    """Integer or bool operands (integers at their dtype's edges now and then) that
    broadcast."""
    kind = b.draw(st.sampled_from(["int", "bool", "extremes"]))
    i = b.pick((kind,)) if kind != "extremes" and b.draw(st.booleans()) else None
    if i is None:
        shape = b.shape()
        if kind == "extremes":
            i = int_extremes(b, shape)
        else:
            i = b.new_input(shape, kind=kind, low=-8, high=8)
    return (i, b.partner(i, kinds=("int", "bool"))), {}


def gen_bitwise_not(b):
    i = b.pick(("int", "bool")) if b.draw(st.booleans()) else None
    return (int_extremes(b, b.shape()) if i is None else i,), {}


def gen_cat(b, stack=False):
    i = b.operand(min_ndim=0 if stack else 1)
    shape = tuple(b.vals[i].shape)
    nd = len(shape) + (1 if stack else 0)
    axis = b.draw(st.integers(-nd, nd - 1)) if nd else 0
    args = [i]
    for _ in range(b.draw(st.integers(1, 2))):
        other = list(shape)
        if not stack:
            other[axis % len(shape)] = b.draw(st.sampled_from([0, 1, 2]))
        j = b.pick(("float",), where=lambda t, other=other: tuple(t.shape) == tuple(other))
        args.append(j if j is not None and b.draw(st.booleans()) else b.new_input(other))
    return tuple(args), {"axis": axis}


def gen_where(b):
    i = b.operand(kinds=("float",))
    j = b.partner(i)
    if b.vals[j] is None or not _broadcasts(b.vals[i].shape, b.vals[j].shape):
        j = i
    shape = np.broadcast_shapes(tuple(b.vals[i].shape), tuple(b.vals[j].shape))
    c = b.pick(("bool",), where=lambda t: _broadcasts(t.shape, shape))
    if c is None or b.draw(st.booleans()):
        c = b.new_input(b.broadcast_partner(shape), kind="bool")
    return (c, i, j), {}


def gen_masked_fill(b):
    i = b.operand(kinds=("float",))
    shape = tuple(b.vals[i].shape)
    m = b.pick(
        ("bool",),
        where=lambda t: (
            _broadcasts(t.shape, shape) and np.broadcast_shapes(tuple(t.shape), shape) == shape
        ),
    )
    if m is None or b.draw(st.booleans()):
        m = b.new_input(b.broadcast_partner(shape)[-len(shape) :] if shape else (), kind="bool")
    return (i, m), {"value": b.draw(st.sampled_from([0.0, -np.inf, np.nan, -1e9, 2.5, 1e30]))}


def gen_masked_fill_tensor(b):
    """masked_fill with a 0-d float tensor value, new (requiring grad, mostly) or from the pool
    (maybe a result that requires grad): torch differentiates the value."""
    (i, m), _ = gen_masked_fill(b)
    v = b.pick(("float",), where=lambda t: t.ndim == 0) if b.draw(st.booleans()) else None
    if v is None:
        v = b.new_input((), kind="float")
    return (i, m, v), {}


def gen_matmul(b):
    """a @ b with 1-D or N-D operands; batch axes broadcast."""
    i = b.operand(kinds=("float",), min_ndim=1)
    sa = tuple(b.vals[i].shape)
    k = sa[-1]
    m = b.draw(st.sampled_from([1, 2, 3, 0]))
    if len(sa) == 1 or b.draw(st.integers(0, 4)) == 0:
        sb = (k,) if b.draw(st.booleans()) else (k, m)
    else:
        sb = b.broadcast_partner(sa[:-2]) + (k, m) if len(sa) > 2 else (k, m)
        if b.draw(st.integers(0, 3)) == 0:
            sb = (2,) + sb if len(sa) <= 3 and sa[:-2] in ((), (2,), (1,)) else sb
    j = b.pick(("float",), where=lambda t: tuple(t.shape) == sb)
    if j is None or b.draw(st.booleans()):
        j = b.new_input(sb, style=b.draw(st.sampled_from(["plain", "plain", "edge", "huge"])))
    if b.draw(st.integers(0, 3)) == 0:
        return (j, i), {"swap": True}  # b @ a, when that fits
    return (i, j), {}


def gen_softmax(b):
    i = b.operand(kinds=("float", "float", "float", "int"), min_ndim=1)
    shape = tuple(b.vals[i].shape)
    params = {
        "axis": b.draw(st.integers(-len(shape), len(shape) - 1)),
        "scale": b.draw(st.sampled_from([1.0, 1.0, 0.5, 0.125, 2.0])),
    }
    kind = b.draw(st.sampled_from(["none", "none", "bool", "bool", "float", "int"]))
    if kind == "none":
        return (i,), params
    mshape = b.broadcast_partner(shape)[-len(shape) :]
    if kind == "bool":
        m = b.new_input(mshape, kind="bool")
    else:  # additive (0 / −inf), or an integer mask, which minitensor must refuse
        arr = b.rng.random(mshape) < 0.3
        arr = (
            np.where(arr, -np.inf, 0.0).astype(b.dtype) if kind == "float" else arr.astype(np.int64)
        )
        m = b.add(Step("input", (), {"array": np.asarray(arr), "requires_grad": False}))
    return (i, m), params


def gen_log_softmax(b):
    i = b.operand(min_ndim=1)
    nd = b.vals[i].ndim
    return (i,), {"axis": b.draw(st.integers(-nd, nd - 1))}


def gen_layer_norm(b):
    i = b.operand(kinds=("float", "float", "float", "int"), min_ndim=1)
    shape = tuple(b.vals[i].shape)
    k = b.draw(st.integers(1, min(2, len(shape))))
    norm = shape[len(shape) - k :]
    args, params = [i], {"normalized_shape": norm, "eps": b.draw(st.sampled_from([1e-5, 1e-12]))}
    for name in ("weight", "bias"):
        if b.draw(st.booleans()):
            args.append(b.new_input(norm, style="plain"))
            params[name] = True
    return tuple(args), params


def gen_cross_entropy(b):
    """Logits (N, C) or (N, C, d1), the classes on axis 1 (torch's layout in both libraries)."""
    i = b.pick(("float",), min_ndim=2, where=lambda t: t.ndim <= 3 and t.shape[1] > 0)
    if i is None or b.draw(st.integers(0, 2)) == 0:
        i = b.new_input(b.draw(st.sampled_from([(3, 4), (2, 5, 3), (1, 3), (4, 1), (0, 3)])))
    shape = tuple(b.vals[i].shape)
    C = shape[1]
    ignore = b.draw(st.sampled_from([-100, 0, C - 1]))
    t = b.new_input(shape[:1] + shape[2:], kind="int", low=0, high=C)
    if b.draw(st.integers(0, 3)) == 0:  # some targets ignored
        arr = b.steps[t].params["array"]
        arr[b.rng.random(arr.shape) < 0.4] = ignore
        b.vals[t] = torch.from_numpy(arr.copy())
    return (i, t), {
        "ignore_index": ignore,
        "label_smoothing": b.draw(st.sampled_from([0.0, 0.0, 0.1])),
        "reduction": b.draw(st.sampled_from(["mean", "sum", "none"])),
    }


def gen_embedding(b):
    V, D = b.draw(st.sampled_from([(5, 3), (1, 2), (4, 1), (3, 0)]))
    w = b.pick(("float",), where=lambda t: tuple(t.shape) == (V, D))
    if w is None or b.draw(st.booleans()):
        w = b.new_input((V, D))
    ids = b.new_input(b.shape(0, 2), kind="int", low=0, high=V)
    return (ids, w), {"padding_idx": b.draw(st.sampled_from([None, 0, V - 1]))}


def _softmax_ref(x, mask=None, axis=-1, scale=1.0):
    """minitensor's softmax(scale·x + mask): bool mask True = blocked, float mask added; a row
    whose every score is −inf gives zeros (documented; torch gives NaN), other rows as torch."""
    x = _float(x)
    if mask is not None and mask.dtype not in (torch.bool,) and not mask.is_floating_point():
        raise TypeError("integer masks are refused (issue 12 #3)")
    z = x * scale if scale != 1.0 else x
    if mask is not None:
        z = z.masked_fill(mask, -math.inf) if mask.dtype == torch.bool else z + mask.to(z.dtype)
    empty = (z == -math.inf).all(dim=axis, keepdim=True)
    return TF.softmax(z.masked_fill(empty, 0.0), dim=axis).masked_fill(empty, 0.0)


class _Float64WhereNaN(torch.autograd.Function):
    """fn(*xs), except where a float32 result — value or gradient — is NaN and fn's float64
    result is not: there the float64 result, rounded. For torch's float32 layer_norm, which
    loses range where minitensor's x̂-based kernels do not: its backward forms b·μ with
    b ∝ rstd³ (∞ − ∞ for a row of 1e18 under a large upstream gradient), and the squares of
    deviations of 1e30 overflow its forward."""

    @staticmethod
    def forward(ctx, fn, *xs):
        ctx.fn = fn
        ctx.save_for_backward(*xs)
        out = fn(*xs)
        if out.dtype == torch.float32:
            out64 = fn(*(x.double() for x in xs)).float()
            out = torch.where(torch.isnan(out) & ~torch.isnan(out64), out64, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        xs = ctx.saved_tensors

        def vjp(dtype):
            with torch.enable_grad():
                leaves = [x.detach().to(dtype).requires_grad_() for x in xs]
                return torch.autograd.grad(ctx.fn(*leaves), leaves, grad.to(dtype))

        g = vjp(xs[0].dtype)
        if xs[0].dtype == torch.float32:
            g = tuple(
                torch.where(torch.isnan(a) & ~torch.isnan(b), b.float(), a)
                for a, b in zip(g, vjp(torch.float64))
            )
        return (None,) + g


def _layer_norm_ref(x, *wb, normalized_shape, eps, weight=False, bias=False):
    """torch's layer_norm; where its float32 kernel gives NaN that its float64 kernel does not,
    the float64 result (`_Float64WhereNaN`)."""
    # torch refuses a weight of another float dtype; minitensor computes in x's dtype
    x = _float(x)
    wb = [p.to(x.dtype) for p in wb]

    def fn(x, *wb):
        wb = list(wb)
        w = wb.pop(0) if weight else None
        return TF.layer_norm(x, normalized_shape, w, wb.pop(0) if bias else None, eps)

    return _Float64WhereNaN.apply(fn, x, *wb)


def _layer_norm_bound(x, *wb, normalized_shape, eps, weight=False, bias=False):
    """Value (|x| + |μ|)·rstd·|w|: the rounding error of x̂ = (x − μ)·rstd. Gradient
    ≈ |x|·rstd²·Σ_row |g·w|: torch's backward works with x·rstd − μ·rstd, which for a row of
    −1e9 with eps=1e-12 (rstd = 1e6) leaves an error of ~1% that minitensor's does not have."""
    x = _float(x)  # integers: float32, as the op computes them
    dims = tuple(range(-len(normalized_shape), 0))
    r = torch.rsqrt(torch.var(x, dims, unbiased=False, keepdim=True) + eps).detach()
    q = ((x * r) ** 2).sum(dims, keepdim=True) / 2  # the gradient mixes the whole row
    # |x| + mean |x| ≥ |x − μ|: at x = 0, x̂ = −μ·rstd still carries the mean's rounding
    out = (x + x.mean(dims, keepdim=True).detach()) * r + (q - q.detach())  # (q − q) first
    return out * wb[0] if weight else out  # the weight's gradient: ~eps·|x|·rstd·|g|


def _layer_norm_mt(x, *wb, normalized_shape, eps, weight=False, bias=False):
    wb = list(wb)
    w = wb.pop(0) if weight else None
    bb = wb.pop(0) if bias else None
    return F.layer_norm(x, normalized_shape, w, bb, eps=eps)


class _CrossEntropyRef(torch.autograd.Function):
    """`_cross_entropy_torch` with its backward taken at a finite upstream gradient: where the
    upstream is ±∞, torch's composed backward (nll, then log_softmax's g − p·Σg) computes
    ∞ − ∞ = NaN at the target, while the gradient is (p − q)·g, ±∞ there; minitensor's fused
    kernel gives that limit. The vector-Jacobian product is linear in g, row by row: it is
    taken at sign(g) and multiplied by ∞ (ignored rows stay 0)."""

    @staticmethod
    def forward(ctx, x, targets, *params):
        ctx.save_for_backward(x, targets)
        ctx.params = params
        return _cross_entropy_torch(x, targets, *params)

    @staticmethod
    def backward(ctx, grad):
        x, targets = ctx.saved_tensors
        ignore_index, _, reduction = ctx.params
        inf = torch.isinf(grad)
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            out = _cross_entropy_torch(xx, targets, *ctx.params)
            (dx,) = torch.autograd.grad(out, xx, torch.where(inf, torch.sign(grad), grad))
        if reduction == "none":
            inf = inf.unsqueeze(1)  # per row, over the class axis
        dx = dx * torch.where(inf, math.inf, 1.0).to(dx.dtype)
        ignored = (targets == ignore_index).unsqueeze(1)
        return (torch.where(ignored, torch.zeros((), dtype=dx.dtype), dx),) + (None,) * 4


def _cross_entropy_ref(logits, targets, ignore_index, label_smoothing, reduction):
    return _CrossEntropyRef.apply(_float(logits), targets, ignore_index, label_smoothing, reduction)


def _cross_entropy_torch(logits, targets, ignore_index, label_smoothing, reduction):
    """A 'mean' over targets that are all ignored is 0 in minitensor (documented in
    ops.nn.CrossEntropy), NaN in torch. An ignored target's row of logits gets no gradient in
    minitensor (it contributes nothing), even where it holds NaN or ±inf; torch's gets NaN
    there, its log_softmax backward multiplying the row's zero upstream gradient by a NaN
    softmax: the reference zeroes the ignored rows' logits, which changes no value."""
    x = _float(logits)
    x = torch.where((targets == ignore_index).unsqueeze(1), torch.zeros((), dtype=x.dtype), x)
    if reduction == "mean" and not (targets != ignore_index).any():
        return (
            TF.cross_entropy(
                x,
                targets,
                ignore_index=ignore_index,
                label_smoothing=label_smoothing,
                reduction="sum",
            )
            * 0.0
        )
    return TF.cross_entropy(
        x, targets, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction=reduction
    )


def _sum_ref(x, axis, keepdims):
    return torch.sum(x, _dims(x, axis), keepdim=keepdims)


def _mean_ref(x, axis, keepdims):
    return torch.mean(_float(x), _dims(x, axis), keepdim=keepdims)


def _var_bound(x, axis, keepdims):
    """A bound (in units of eps) on the rounding error of a two-pass variance: the mean is off
    by up to ~n·eps32·max|x| (the float32 eps also stands in, loosely, for float64's), which
    enters the variance squared and its gradient linearly: 3e4 + N(0, 1) loses digits in any
    order of summation, and which order is luckier differs between torch and minitensor. The
    mean's error also shifts every element's gradient 2(x − μ)/(n − 1), by up to ~eps·Σ|x|
    (where 1e30 and −1e30 cancel, what they absorbed first depends on the order): the last
    term's gradient is 2·Σ|x|/n at every element, and it adds nothing to the value."""
    x = _float(x)
    dims = _dims(x, axis)
    n = max(x.numel() // max(torch.amax(x, dims, keepdim=keepdims).numel(), 1), 1)
    m = torch.amax(x, dims, keepdim=keepdims)
    total = x.sum(dims, keepdim=keepdims)
    return n * n * 1.2e-7 * m * m + 2 * total.detach() / n * (total - total.detach())


def _to_result_type(a, b):
    """Both operands in torch.result_type(a, b): minitensor's product promotes them so, where
    torch refuses float32 @ float64."""
    if not (torch.is_tensor(a) and torch.is_tensor(b)):
        return a, b
    dtype = torch.result_type(a, b)
    return a.to(dtype), b.to(dtype)


def _matmul(fn):
    """a @ b, or b @ a with swap=True; torch's operands take minitensor's promotion."""
    return lambda a, b, swap=False: (
        fn(*_to_result_type(b, a)) if swap else fn(*_to_result_type(a, b))
    )


OPS = {
    # elementwise, unary
    "F.exp": Op(F.exp, lambda x: torch.exp(x), gen_unary),
    "F.log": Op(F.log, lambda x: torch.log(x), gen_unary),
    "F.sqrt": Op(F.sqrt, lambda x: torch.sqrt(x), gen_unary),
    "F.tanh": Op(F.tanh, lambda x: torch.tanh(x), gen_unary),
    "F.sigmoid": Op(F.sigmoid, lambda x: torch.sigmoid(x), gen_unary),
    "F.relu": Op(F.relu, lambda x: torch.relu(x), gen_unary),
    "F.gelu": Op(F.gelu, _gelu_ref, gen_unary),
    "F.gelu_tanh": Op(
        lambda x: F.gelu(x, approximate="tanh"),
        lambda x: TF.gelu(_float(x), approximate="tanh"),
        gen_unary,
    ),
    "F.silu": Op(F.silu, lambda x: TF.silu(_float(x)), gen_unary),
    "F.abs": Op(F.abs, lambda x: torch.abs(x), gen_unary),
    "F.neg": Op(F.neg, lambda x: torch.neg(x), gen_unary),
    "F.clip": Op(
        lambda x, low, high: F.clip(x, low, high),
        lambda x, low, high: torch.clamp(x, low, high),
        gen_clamp,
    ),
    # tensor bounds and a tensor fill value: arguments torch differentiates, which may
    # require grad (their gradients are compared like every other leaf's)
    "F.clamp(tensors)": Op(
        _clamp_tensors(F.clip), _clamp_tensors(torch.clamp), gen_clamp_tensors, _clamp_bound
    ),
    # elementwise, binary, with broadcasting
    "F.add": Op(*binary(F.add, torch.add), gen_binary, bound=binary(None, torch.add)[1]),
    "F.sub": Op(*binary(F.sub, torch.sub), gen_binary, bound=binary(None, torch.add)[1]),
    "F.mul": Op(*binary(F.mul, torch.mul), gen_binary, bound=binary(None, torch.mul)[1]),
    "F.div": Op(*binary(F.div, torch.div), gen_binary, bound=binary(None, torch.div)[1]),
    "F.pow": Op(*binary(F.pow, _pow_ref), gen_pow),
    # maximum, minimum and where sum an operand's gradient over its broadcast axes: |a| + |b|
    # (|a| and |b| for where) bounds the terms, which may cancel as for add
    "F.maximum": Op(
        *binary(F.maximum, lambda a, b: torch.maximum(a, torch.as_tensor(b))),
        gen_binary,
        bound=binary(None, torch.add)[1],
    ),
    "F.minimum": Op(
        *binary(F.minimum, lambda a, b: torch.minimum(a, torch.as_tensor(b))),
        gen_binary,
        bound=binary(None, torch.add)[1],
    ),
    "F.gt": Op(F.gt, torch.gt, gen_compare),
    "F.le": Op(F.le, torch.le, gen_compare),
    # reductions (torch.amax/amin: ties share the gradient evenly, as minitensor documents)
    "F.sum": Op(F.sum, _sum_ref, gen_reduce, bound=_sum_ref),
    # mean and var of integers are float32 in minitensor (documented); torch refuses them
    "F.mean": Op(F.mean, _mean_ref, gen_reduce, bound=_mean_ref),
    # (a tuple of axes: F.max(x, axis=int) is torch's (values, indices), drawn as "F.max(dim)")
    "F.max": Op(
        lambda x, axis, keepdims: F.max(x, axis=_tuple(axis), keepdims=keepdims),
        lambda x, axis, keepdims: _extremum_ref(torch.max, torch.amax, x, axis, keepdims),
        gen_reduce,
    ),
    "F.min": Op(
        lambda x, axis, keepdims: F.min(x, axis=_tuple(axis), keepdims=keepdims),
        lambda x, axis, keepdims: _extremum_ref(torch.min, torch.amin, x, axis, keepdims),
        gen_reduce,
    ),
    "F.var": Op(
        F.var,
        lambda x, axis, keepdims: torch.var(_float(x), _dims(x, axis), keepdim=keepdims),
        gen_reduce,
        bound=_var_bound,
    ),
    "F.logsumexp": Op(
        F.logsumexp,
        lambda x, axis, keepdims: torch.logsumexp(_float(x), _dims(x, axis), keepdim=keepdims),
        gen_reduce,
    ),
    # shape
    "F.reshape": Op(
        lambda x, shape: F.reshape(x, shape), lambda x, shape: x.reshape(shape), gen_reshape
    ),
    "F.transpose": Op(
        F.transpose, lambda x, axis0, axis1: x.transpose(axis0, axis1), gen_transpose
    ),
    "F.permute": Op(
        lambda x, axes: F.permute(x, *axes), lambda x, axes: x.permute(axes), gen_permute
    ),
    "F.squeeze": Op(
        F.squeeze, lambda x, axis: x.squeeze() if axis is None else x.squeeze(axis), gen_squeeze
    ),
    "F.unsqueeze": Op(F.unsqueeze, lambda x, axis: x.unsqueeze(axis), gen_unsqueeze),
    "getitem": Op(
        lambda x, *idx, index: x[_index(index, idx)],
        lambda x, *idx, index: x[_index(index, idx)],
        gen_getitem,
    ),
    "F.cat": Op(
        lambda *xs, axis: F.cat(list(xs), axis=axis),
        lambda *xs, axis: torch.cat(xs, dim=axis),
        gen_cat,
    ),
    "F.stack": Op(
        lambda *xs, axis: F.stack(list(xs), axis=axis),
        lambda *xs, axis: torch.stack(xs, dim=axis),
        lambda b: gen_cat(b, stack=True),
    ),
    "F.where": Op(
        F.where,
        lambda c, a, b: torch.where(c, *_promote(a, b)),
        gen_where,
        bound=lambda c, a, b: torch.where(c, *_promote(a, b)),
    ),
    "F.masked_fill": Op(
        F.masked_fill, lambda x, m, value: x.masked_fill(m, value), gen_masked_fill
    ),
    # its value's gradient sums the upstream over the filled positions: where on |inputs|
    "F.masked_fill(tensor)": Op(
        F.masked_fill,
        lambda x, m, v: x.masked_fill(m, v),
        gen_masked_fill_tensor,
        bound=lambda x, m, v: torch.where(m, v, x),
    ),
    # sorting and max along a dim: NaN the largest, integers at their edges, ties in order
    "F.sort": Op(
        lambda x, axis, descending: F.sort(x, axis, descending)[0],
        lambda x, axis, descending: torch.sort(x, dim=axis, descending=descending, stable=True)[0],
        gen_sort,
    ),
    "F.argsort": Op(
        F.argsort,
        lambda x, axis, descending: torch.argsort(x, dim=axis, descending=descending, stable=True),
        gen_sort,
    ),
    "F.topk": Op(
        lambda x, k, axis, largest: F.topk(x, k, axis, largest)[0],
        lambda x, k, axis, largest: _topk_ref(x, k, axis, largest, 0),
        gen_topk,
    ),
    "F.topk.indices": Op(
        lambda x, k, axis, largest: F.topk(x, k, axis, largest)[1],
        lambda x, k, axis, largest: _topk_ref(x, k, axis, largest, 1),
        gen_topk,
    ),
    "F.max(dim)": Op(
        lambda x, axis, keepdim: F.max(x, axis, keepdim)[0],
        lambda x, axis, keepdim: torch.max(x, axis, keepdim)[0],
        gen_max_dim,
    ),
    "F.max(dim).indices": Op(
        lambda x, axis, keepdim: F.max(x, axis, keepdim)[1],
        lambda x, axis, keepdim: torch.max(x, axis, keepdim)[1],
        gen_max_dim,
    ),
    # bitwise on integers, logical on bools
    "F.bitwise_and": Op(F.bitwise_and, torch.bitwise_and, gen_bitwise),
    "F.bitwise_or": Op(F.bitwise_or, torch.bitwise_or, gen_bitwise),
    "F.bitwise_xor": Op(F.bitwise_xor, torch.bitwise_xor, gen_bitwise),
    "F.bitwise_not": Op(F.bitwise_not, torch.bitwise_not, gen_bitwise_not),
    # linear algebra
    "F.matmul": Op(
        _matmul(F.matmul), _matmul(torch.matmul), gen_matmul, bound=_matmul(torch.matmul)
    ),
    # neural nets
    "F.softmax": Op(
        lambda x, mask=None, axis=-1, scale=1.0: F.softmax(x, axis=axis, scale=scale, mask=mask),
        _softmax_ref,
        gen_softmax,
    ),
    "F.log_softmax": Op(
        F.log_softmax, lambda x, axis: TF.log_softmax(_float(x), dim=axis), gen_log_softmax
    ),
    "F.layer_norm": Op(_layer_norm_mt, _layer_norm_ref, gen_layer_norm, bound=_layer_norm_bound),
    "F.cross_entropy": Op(F.cross_entropy, _cross_entropy_ref, gen_cross_entropy),
    "F.embedding": Op(
        F.embedding,
        lambda ids, w, padding_idx: TF.embedding(ids, w, padding_idx=padding_idx),
        gen_embedding,
    ),
}


# ------------------------------------------------------------------------------------ drawing
def draw_program(draw, dtype, min_ops=8, max_ops=16, with_edit=True):
    """A program of min_ops..max_ops ops (plus the inputs they make) in float `dtype`, and
    maybe an in-place edit of a saved input that does not require grad."""
    b = Builder(draw, dtype)
    for _ in range(draw(st.integers(1, 3))):
        b.new_input(b.shape())
    names = sorted(OPS)
    for _ in range(draw(st.integers(min_ops, max_ops))):
        name = draw(st.sampled_from(names))
        args, params = OPS[name].gen(b)
        b.add(Step(name, args, params))
    prog = Program(b.steps, draw(st.integers(0, 2**32 - 1)))
    if with_edit:
        prog.edit = draw_edit(b)
    return prog


EDITS = {
    "bool": [("flip", None), ("fill_", True), ("setitem", False)],
    "int": [("add_", 1), ("fill_", 0), ("setitem", 0)],
    "float": [("fill_", 0.5), ("mul_", 2.0), ("setitem", np.nan), ("add_", 1.0)],
}


def draw_edit(b):
    """(index, kind, value): an in-place edit of a pool value that an op took as an argument
    and that does not require grad (a mask, target, id or index tensor, or a float constant;
    minitensor refuses in-place edits of tensors that require grad at once)."""
    used = {j for s in b.steps for j in s.args}
    grad = needs_grad(b.steps)
    candidates = [i for i in sorted(used) if b.vals[i] is not None and not grad[i]]
    if not candidates:
        return None
    i = b.draw(st.sampled_from(candidates))
    kind, value = b.draw(st.sampled_from(EDITS[_kind(b.vals[i])]))
    return (i, kind, value)


def needs_grad(steps):
    """Which pool values require grad: float results of ops with an input that does."""
    out = []
    for s in steps:
        if s.op == "input":
            out.append(bool(s.params["requires_grad"]))
        else:
            out.append(any(out[j] for j in s.args))
    return out


def apply_edit(t, kind, value):
    """The same in-place edit on a minitensor or a torch tensor."""
    if kind == "flip":
        t.copy_(~t)
    elif kind == "setitem":
        t[(0,) if t.ndim else ()] = value
    else:
        getattr(t, kind)(value)


# ------------------------------------------------------------------------------------ running
@dataclasses.dataclass
class Run:
    """One minitensor run: every pool value (None where an op raised or an operand was
    missing), the errors by step, the loss weights, and the error of backward (if any)."""

    values: list
    errors: dict
    weights: dict
    backward_error: Exception = None
    edit_error: Exception = None


def loss_weights(prog, k, shape, dtype):
    """Weights of value k in the loss Σₖ Σ wₖ·vₖ: small dyadic numbers, exact in any dtype."""
    rng = np.random.default_rng([prog.weight_seed, k])
    return rng.choice([-2.0, -1.0, -0.5, 0.25, 1.0, 1.5], size=shape).astype(dtype)


def run_minitensor(prog, backend, edit=False):
    """Run `prog` in minitensor on `backend`, then backward through the weighted sum of every
    float value that requires grad (after the program's in-place edit when edit=True)."""
    values, errors, weights = [], {}, {}
    with mt.kernels.use_backend(backend):
        for k, s in enumerate(prog.steps):
            if s.op == "input":
                a = s.params["array"]
                values.append(
                    mt.tensor(a.copy(), dtype=a.dtype, requires_grad=s.params["requires_grad"])
                )
                continue
            args = [values[j] for j in s.args]
            out = None
            if all(a is not None for a in args):
                try:
                    out = OPS[s.op].mt(*args, **s.params)
                except Exception as e:  # compared with torch's behaviour later
                    errors[k] = e
            values.append(out)
        run = Run(values, errors, weights)
        loss = None
        for k, v in enumerate(values):
            if v is not None and v.requires_grad:
                if v.grad_fn is not None:
                    v.retain_grad()
                weights[k] = loss_weights(prog, k, v.shape, v.dtype)
                term = F.sum(v * mt.tensor(weights[k], dtype=v.dtype))
                loss = term if loss is None else loss + term
        if edit and prog.edit:
            i, kind, value = prog.edit
            try:
                apply_edit(values[i], kind, value)
            except Exception as e:
                run.edit_error = e
        if loss is not None:
            try:
                loss.backward()
            except Exception as e:
                run.backward_error = e
    return run


def torch_backward_raises(prog):
    """Run `prog` end to end in torch with its in-place edit: ("edit", error) if the edit
    raises, ("backward", error) if backward does, else (None, None)."""
    vals = []
    for s in prog.steps:
        if s.op == "input":
            t = torch.from_numpy(s.params["array"].copy())
            vals.append(t.requires_grad_() if s.params["requires_grad"] else t)
        else:
            args = [vals[j] for j in s.args]
            try:
                vals.append(
                    None if any(a is None for a in args) else OPS[s.op].torch(*args, **s.params)
                )
            except Exception:
                vals.append(None)
    loss = sum(
        (v * torch.from_numpy(loss_weights(prog, k, tuple(v.shape), _np_dtype(v)))).sum()
        for k, v in enumerate(vals)
        if v is not None and v.requires_grad
    )
    i, kind, value = prog.edit
    try:
        apply_edit(vals[i], kind, value)
    except Exception as e:
        return ("edit", e)
    if not torch.is_tensor(loss):
        return (None, None)
    try:
        loss.backward()
    except RuntimeError as e:
        return ("backward", e)
    return (None, None)


def _np_dtype(t):
    return torch.empty((), dtype=t.dtype).numpy().dtype


# ------------------------------------------------------------------------------------ checking
@dataclasses.dataclass
class Mismatch:
    step: int  # the pool index of the op (or of the value whose gradient differs)
    op: str
    what: str  # 'error' | 'dtype' | 'shape' | 'requires_grad' | 'value' | 'grad' | 'inplace'
    detail: str
    backend: str = ""

    def __str__(self):
        return f"[{self.backend}] v{self.step} = {self.op}: {self.what}: {self.detail}"


def _to_torch(t, dtype=None):
    """A torch leaf with t's values (cast to `dtype` if float), requiring grad like t."""
    a = np.array(t.numpy(), copy=True)
    if dtype is not None and a.dtype.kind == "f":
        a = a.astype(dtype)
    x = torch.from_numpy(a)
    return x.requires_grad_() if t.requires_grad and x.is_floating_point() else x


def replay(step, args, dtype=None, upstream=None, absolute=False):
    """torch's output of one step on minitensor's argument values (floats cast to `dtype`), and,
    given the upstream gradient, its vector-Jacobian product for each argument (None where an
    argument needs no gradient). absolute=True runs it on |args| and |upstream| (the rounding
    bound of a sum or a product)."""
    if dtype is not None and not absolute:  # integer inputs of float-only ops too
        _INT_TO[0] = torch.float64 if dtype == np.float64 else torch.float32
        try:
            return _replay(step, args, dtype, upstream)
        finally:
            _INT_TO[0] = torch.float32
    return _replay(step, args, dtype, upstream, absolute)


def _replay(step, args, dtype, upstream, absolute=False):
    targs = [_to_torch(a, dtype) for a in args]
    fn, params = OPS[step.op].torch, step.params
    if absolute:
        targs = [
            t if t.dtype == torch.bool else t.detach().abs().requires_grad_(t.requires_grad)
            for t in targs
        ]  # integers too: −3 in |a| + |b| would lower the bound
        fn = OPS[step.op].bound
        params = {k: abs(v) if k == "scalar" else v for k, v in params.items()}
    out = fn(*targs, **params)
    if upstream is None or not out.requires_grad or tuple(out.shape) != np.shape(upstream):
        return out, None  # (a shape mismatch is reported by the caller)
    g = torch.from_numpy(np.asarray(np.abs(upstream) if absolute else upstream)).to(out.dtype)
    wrt = [t for t in targs if t.requires_grad]
    grads = iter(torch.autograd.grad(out, wrt, g, allow_unused=True))
    return out, [next(grads) if t.requires_grad else None for t in targs]


def _np(t):
    return None if t is None else t.detach().numpy()


def compare(got, ref, scale, extra, free, value=None):
    """None if `got` matches `ref` elementwise, else a message naming the worst element.

    NaN positions must agree exactly, ±inf exactly; finite values within
    atol + rtol·scale + extra. Elements where `free` is True are not compared (rounding order
    alone decides them)."""
    if got.shape != ref.shape:
        return f"shape {got.shape}, torch {ref.shape}"
    if ref.dtype.kind not in "f":
        bad = got != ref
        tol = np.zeros(ref.shape)
    else:
        dt = ref.dtype.type
        g, r = got.astype(np.float64), ref.astype(np.float64)
        tol = np.nan_to_num(ATOL[dt] + RTOL[dt] * scale + extra, nan=np.inf)
        with np.errstate(invalid="ignore"):
            err = np.abs(g - r)
            bad = (
                (np.isnan(g) != np.isnan(r))
                | (np.isinf(r) & (g != r))
                | (np.isfinite(r) & ~(err <= tol))
            )
        bad &= ~free
    if not bad.any():
        return None
    idx = tuple(int(n) for n in np.argwhere(bad)[0])
    there = "" if value is None else f"value there {value[idx]!r}; "
    return (
        f"at {idx}: minitensor {got[idx]!r}, torch {ref[idx]!r} ({there}"
        f"tolerance {tol[idx]:.3g}; "
        f"{int(bad.sum())} of {bad.size} elements differ)"
    )


def _other_precision(dtype):
    """The other float dtype, and how much to scale the difference of its result: float64's
    difference from float32 measures float32's rounding; float32's, scaled by eps64/eps32,
    estimates float64's."""
    if dtype == np.float32:
        return np.float64, 1.0
    return np.float32, np.finfo(np.float64).eps / np.finfo(np.float32).eps


def _slack(ref, other, factor, lin, computed_in=None):
    """The conditioning part of the tolerance, K·|ref − other|·factor + K·eps·lin, and the
    elements that rounding order alone decides (lin beyond the dtype's range: the sum may or
    may not overflow). eps is that of `computed_in` where the op computed in a less precise
    dtype than ref's (a float64 weight of a float32 layer_norm: terms that cancel exactly keep
    float32's rounding)."""
    r = ref.astype(np.float64)
    extra = np.zeros(r.shape)
    free = np.zeros(r.shape, dtype=bool)
    if ref.dtype.kind != "f":
        return extra, free
    fin = np.finfo(ref.dtype)
    eps = max(float(fin.eps), float(np.finfo(computed_in).eps) if computed_in else 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        if other is not None:
            d = np.abs(r - other.astype(np.float64)) * factor
            extra += K * np.where(np.isfinite(r), np.nan_to_num(d, nan=np.inf), 0.0)
        if lin is not None:
            extra += K * eps * lin
            free |= ~(lin < float(fin.max) / 2)
    return extra, free


def _is_numba_error(e):
    return type(e).__module__.split(".")[0] == "numba"


class _Expected:
    """The gradient that should reach one value: its loss weight plus Σ of torch's
    vector-Jacobian products of the ops that consumed it, with their tolerance terms."""

    def __init__(self, shape):
        self.total = np.zeros(shape)
        self.scale = np.zeros(shape)
        self.extra = np.zeros(shape)
        self.free = np.zeros(shape, dtype=bool)

    def add(self, vjp, other=None, factor=1.0, lin=None, computed_in=None):
        """computed_in: the dtype the op computed in, when less precise than vjp's (a float64
        weight of a float32 layer_norm gets a gradient with float32's rounding)."""
        v = vjp.astype(np.float64)
        self.total = self.total + v
        self.scale = self.scale + np.abs(v)
        extra, free = _slack(
            vjp, other, factor, lin, computed_in if vjp.dtype.kind == "f" else None
        )
        if computed_in is not None and vjp.dtype.kind == "f":
            extra = extra + max(RTOL[computed_in.type] - RTOL[vjp.dtype.type], 0) * np.abs(v)
        self.extra = self.extra + extra
        self.free = self.free | free


def check_step(prog, k, run, expected):
    """Compare step k of a minitensor run with torch's replay of it on the same arguments;
    add its vector-Jacobian products to `expected`. Returns a list of Mismatch."""
    s = prog.steps[k]
    args = [run.values[j] for j in s.args]
    if any(a is None for a in args):
        return []  # an earlier step already failed
    got = run.values[k]
    up = got.grad.numpy() if got is not None and got.grad is not None else None
    try:
        ref, vjps = replay(s, args, upstream=up)
    except Exception as e:
        if k in run.errors:
            if _is_numba_error(run.errors[k]):
                return [
                    Mismatch(
                        k,
                        s.op,
                        "error",
                        f"a raw numba error reaches the user: {type(run.errors[k]).__name__}",
                    )
                ]
            return []  # both raise: agreement
        return [
            Mismatch(
                k,
                s.op,
                "error",
                f"torch raises {type(e).__name__}: {str(e)[:150]}; minitensor returns a value",
            )
        ]
    if k in run.errors:
        e = run.errors[k]
        return [
            Mismatch(
                k,
                s.op,
                "error",
                f"minitensor raises {type(e).__name__}: {str(e)[:200]}; torch returns a value",
            )
        ]
    ref_np, out = _np(ref), []
    if got.dtype != ref_np.dtype:  # reported; the values are still compared, in torch's dtype
        out.append(Mismatch(k, s.op, "dtype", f"minitensor {got.dtype}, torch {ref_np.dtype}"))
    if got.requires_grad != ref.requires_grad:
        return out + [
            Mismatch(
                k,
                s.op,
                "requires_grad",
                f"minitensor {got.requires_grad}, torch {ref.requires_grad}",
            )
        ]
    other_dtype, factor = _other_precision(ref_np.dtype.type)
    try:
        other, other_vjps = replay(s, args, other_dtype, up)
    except Exception:
        other, other_vjps = None, None
    lin, lin_vjps = None, None
    if OPS[s.op].bound:
        try:
            lin, lin_vjps = replay(s, args, np.float64, up, absolute=True)
        except (RuntimeError, IndexError):  # amax of a size-0 axis: nothing to bound
            pass
    extra, free = _slack(ref_np, _np(other), factor, _np(lin))
    with np.errstate(all="ignore"):
        got_data = got.numpy().astype(ref_np.dtype)
    msg = compare(
        got_data,
        ref_np,
        np.abs(ref_np.astype(np.float64)) if ref_np.dtype.kind == "f" else 0,
        extra,
        free,
    )
    if msg:
        out.append(Mismatch(k, s.op, "value", msg))
    for a, j in enumerate(s.args):
        if vjps is not None and vjps[a] is not None:
            expected.setdefault(j, _Expected(args[a].shape)).add(
                _np(vjps[a]),
                _np(other_vjps[a]) if other_vjps else None,
                factor,
                np.abs(_np(lin_vjps[a])) if lin_vjps and lin_vjps[a] is not None else None,
                computed_in=ref_np.dtype if ref_np.dtype.kind == "f" else None,
            )
    return out


def check_run(prog, run):
    """Every step of a minitensor run against torch, then every gradient."""
    out, expected = [], {}
    for k, s in enumerate(prog.steps):
        if s.op != "input":
            out += check_step(prog, k, run, expected)
    if run.backward_error is not None:
        e = run.backward_error
        return out + [Mismatch(-1, "backward", "error", f"{type(e).__name__}: {str(e)[:200]}")]
    for j, w in run.weights.items():
        v = run.values[j]
        exp = expected.setdefault(j, _Expected(v.shape))
        exp.add(w)
        if v.grad is None:
            out.append(Mismatch(j, prog.steps[j].op, "grad", "minitensor computed no gradient"))
            continue
        consumers = sorted({s.op for s in prog.steps if j in s.args})
        if v.grad.dtype != v.dtype:
            out.append(
                Mismatch(
                    j,
                    prog.steps[j].op,
                    "grad",
                    f"dtype {v.grad.dtype} for a "
                    f"{v.dtype} value (consumers: {', '.join(consumers)})",
                )
            )
        with np.errstate(over="ignore"):
            ref = exp.total.astype(v.dtype)
        msg = compare(
            v.grad.numpy().astype(v.dtype), ref, exp.scale, exp.extra, exp.free, v.numpy()
        )
        if msg:
            out.append(
                Mismatch(j, prog.steps[j].op, "grad", f"{msg} (consumers: {', '.join(consumers)})")
            )
    return out


def check_inplace(prog, backend, run, torch_error):
    """After the program's in-place edit of a saved input, minitensor's backward must raise
    where torch's does ('modified by an inplace operation') — or give every gradient bit for bit
    as without the edit (its op did not save that input: minitensor's softmax keeps its output,
    not its mask) — and run where torch's runs (or raise the same in-place error: minitensor
    checks every saved input, where torch sometimes saves a copy)."""
    i, kind, value = prog.edit
    if run.values[i] is None:
        return []
    edited = run_minitensor(prog, backend, edit=True)
    op = prog.steps[i].op
    if edited.edit_error is not None or torch_error[0] == "edit":
        if (edited.edit_error is None) != (torch_error[0] != "edit"):
            return [
                Mismatch(
                    i,
                    op,
                    "inplace",
                    f"{kind}({value!r}): the edit itself raises in "
                    f"one library only: {edited.edit_error!r}, "
                    f"{torch_error[1]!r}",
                )
            ]
        return []
    mt_error, torch_raised = edited.backward_error, torch_error[0] == "backward"
    said_inplace = mt_error is not None and "in place" in str(mt_error)
    if torch_raised and said_inplace or not torch_raised and mt_error is None:
        return []
    if torch_raised:
        changed = [j for j in run.weights if not _same(run.values[j].grad, edited.values[j].grad)]
        if mt_error is None and not changed:
            return []  # minitensor did not save it (softmax keeps y, not its mask)
        effect = (
            f"gradients of v{changed} changed silently"
            if mt_error is None
            else f"raises {mt_error!r}"
        )
        return [
            Mismatch(
                i,
                op,
                "inplace",
                f"v{i}.{kind}({value!r}) after forward: torch's "
                f"backward raises, minitensor's does not ({effect})",
            )
        ]
    if said_inplace:
        return []  # stricter than torch, which sometimes saves a copy (a broadcast matmul)
    return [
        Mismatch(
            i,
            op,
            "inplace",
            f"v{i}.{kind}({value!r}) after forward: minitensor's "
            f"backward raises {mt_error!r}, torch's does not",
        )
    ]


def _same(a, b):
    if a is None or b is None:
        return a is b
    return np.array_equal(a.numpy(), b.numpy(), equal_nan=True)


BACKENDS = ("numba", "numpy")


def fuzz_check(prog, backends=BACKENDS):
    """All mismatches of `prog` on each backend: values, gradients, and the in-place edit."""
    torch_error = torch_backward_raises(prog) if prog.edit else None
    out = []
    for backend in backends:
        run = run_minitensor(prog, backend)
        found = check_run(prog, run)
        if prog.edit:
            found += check_inplace(prog, backend, run, torch_error)
        for m in found:
            m.backend = backend
        out += found
    return out
