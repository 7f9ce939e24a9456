"""Attention, in one place: the masks, the core `attention`, and torch's
`F.scaled_dot_product_attention` on top of it ("Attention Is All You Need", §3.2.1).

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + M) V

`attention` is the one function every caller goes through (`F.scaled_dot_product_attention`,
`nn.MultiheadAttention`, `transformer.MultiHeadAttention` and its KV-cache step). It has two
ways to compute the same numbers, chosen by one rule (`records_graph`):

* **the five steps** (`_five_steps`), as the paper writes them, one graph node each:
  QKᵀ, ×1/√d_k, + mask, softmax, ·V. Taken whenever something will read the graph: inside
  `mt.viz.trace` (a forward hook is registered), under
  `mt.autograd.keep_intermediates()` (the step-through and `draw_graph(show_values=True)` keep
  every node's value), when the weights are asked for, and when a float mask requires grad (its
  gradient is the gradient of the scores, which only this path forms). Not in anomaly mode,
  which raises on any ±inf: the mask step's −inf is there by design.
* **fused**, when nothing reads the graph: one node `fused_attention` whose kernel never holds
  the L_q × L_k weights (FlashAttention, Dao et al. 2022: minitensor/kernels/flash_attention.py),
  from FUSED_ALWAYS_KEYS keys on; below FUSED_MIN_KEYS, QKᵀ and ·V around one softmax node that
  scales and masks as it normalises (on a few keys the tiled kernel's per-tile calls cost more
  than they save); in between, whichever of the two was faster when the layout was first timed
  on the running machine (`_fused_is_faster`). The result is the same within float32 rounding.

**Masks.** Inside this module a bool mask means **True = blocked** — the meaning of
`nn.MultiheadAttention`'s and `nn.Transformer`'s masks and of the `transformer` package. Torch's
`F.scaled_dot_product_attention` reads a bool mask the other way, True = *may attend*;
`normalize_mask(..., true_means="allowed")` converts it at that edge, and nowhere else. A float
mask is added to the scores (0 allowed, −inf blocked); integer masks are refused (0/1 is
ambiguous). The causal mask has one alignment, with an explicit offset: query i may see key j
when j ≤ i + offset — 0 is torch's top-left alignment; a KV-cache step whose L_q new queries
follow `offset` cached positions passes that offset. A query row with no allowed key gives
zero weights and a zero output (never NaN).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import config, hooks
from .. import random as _random
from ..function import Function, ShapeError, op_error
from ..kernels import core_owner, fused_attention_backward, fused_attention_forward
from ..kernels.backend_switch import are_deterministic_algorithms_enabled
from ..kernels.jit import median_times, threads, timings_would_mislead
from ..state import state
from ..tensor import Tensor
from ..typing import ArrayLike
from .linalg import matmul
from .nn import as_attention_mask, dropout, softmax
from .shape import expand, masked_fill, reshape, squeeze, swapaxes, unsqueeze

# Below this many keys the fused path stays with the softmax node (see the module docstring):
# the tiled kernel's per-tile BLAS calls cost more than they save on few keys (the addition
# model's 5–7), and the L×L weights they spare are small. At 32 keys the softmax node was the
# faster on both machines measured (benchmarks/README.md, "Teaching code as learners write it",
# has the table). From FUSED_ALWAYS_KEYS on the fused node was the faster everywhere, and the
# weights it spares grow as L²: it is taken without asking. In between, which is faster depends
# on the machine and on d_k (at 64 keys one machine timed a tie at d_k 32 and the softmax node
# clearly ahead at d_k 64: benchmarks/README.md, "Fused attention or the softmax node, timed"),
# so the two are timed on the running machine (`_fused_is_faster`).
FUSED_MIN_KEYS = 64
FUSED_ALWAYS_KEYS = 256


# ---- masks -----------------------------------------------------------------------------------


def normalize_mask(
    mask: Tensor | ArrayLike | None, op: str, true_means: str = "blocked"
) -> np.ndarray | Tensor | None:
    """The one mask rule: None stays None; bool becomes **True = blocked** (inverted when the
    caller's convention is true_means="allowed", torch's SDPA); float stays an additive mask
    — a Tensor that requires grad is kept as a Tensor, so that its gradient flows; anything else
    is refused with an error naming `op`."""
    if isinstance(mask, Tensor) and mask.requires_grad and mask.dtype.kind == "f":
        return mask
    if true_means == "allowed" and mask is not None:
        arr = np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask)
        if arr.dtype != np.bool_ and arr.dtype.kind != "f":  # 0/1 integers are ambiguous
            raise TypeError(
                f"{op}: attn_mask must be bool (True = may attend, torch's meaning) or floating "
                f"(added to the scores), got {arr.dtype} of shape {arr.shape}; convert it with "
                f"`mask != 0` (1 = may attend)"
            )
    arr = as_attention_mask(mask, op)
    if arr is not None and arr.dtype == np.bool_ and true_means == "allowed":
        return ~arr
    return arr


@functools.lru_cache(maxsize=64)
def _causal(l_q, l_k, offset):
    m = np.arange(l_k)[None, :] > np.arange(l_q)[:, None] + offset
    m.setflags(write=False)  # shared between calls: nobody may change it
    return m


def causal_mask(l_q: int, l_k: int | None = None, offset: int = 0) -> np.ndarray:
    """(L_q, L_k) bool, **True = blocked**: query i may attend to key j only when j ≤ i + offset.
    offset 0 is torch's top-left alignment; a KV-cache step passes the number of cached positions
    (its queries are the last L_q of the L_k). Cached and read-only."""
    l_k = l_q if l_k is None else l_k
    if l_q < 0 or l_k < 0:
        raise ValueError(f"causal_mask: lengths must be >= 0, got L_q={l_q}, L_k={l_k}")
    return _causal(int(l_q), int(l_k), int(offset))


def key_padding_mask(mask: Tensor | ArrayLike | None, batch: int, l_k: int, op: str):
    """A (B, L_k) key padding mask (True = blocked: a <pad> key, or additive float) shaped for
    the scores, (B, 1, 1, L_k); None stays None."""
    kpm = normalize_mask(mask, op)
    if kpm is None:
        return None
    if tuple(kpm.shape) != (batch, l_k):
        raise ShapeError(
            f"{op}: key_padding_mask of shape {tuple(kpm.shape)}, expected (batch, key length) "
            f"= {(batch, l_k)}"
        )
    return kpm[:, None, None, :]


def to_additive(mask: np.ndarray, dtype=np.float32) -> np.ndarray:
    """A bool mask (True = blocked) as an additive float mask: 0 allowed, −inf blocked."""
    if mask.dtype != np.bool_:
        return mask.astype(dtype, copy=False)
    return np.where(mask, -np.inf, 0.0).astype(dtype)


def combine(a, b, op: str = "attention"):
    """One mask from two (either may be None): two bool masks OR (blocked if either blocks);
    otherwise both become additive and are summed (a Tensor that requires grad stays in the
    graph). Their shapes must broadcast together."""
    if a is None or b is None:
        return a if b is None else b
    try:
        np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        raise ShapeError(
            f"{op}: masks of shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit together "
            f"(their lengths or batch sizes differ)"
        ) from None
    if a.dtype == np.bool_ and b.dtype == np.bool_:
        return a | b
    dtype = a.dtype if a.dtype.kind == "f" else b.dtype
    a, b = (x if isinstance(x, Tensor) else to_additive(x, dtype) for x in (a, b))
    return b + a if isinstance(b, Tensor) else a + b  # a Tensor (in the graph) on the left


def _fit_mask(mask, scores_shape, op):
    """A clear error unless the mask broadcasts to the scores (…, L_q, L_k) without growing them."""
    if mask is None:
        return
    try:
        fits = np.broadcast_shapes(tuple(mask.shape), scores_shape) == scores_shape
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(
            f"{op}: mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{scores_shape} (…, L_q, L_k)"
        )


# ---- the fused op ----------------------------------------------------------------------------


class FusedAttention(Function):
    """out = dropout(softmax(q·kᵀ·scale + mask))·v in one node, by the FlashAttention kernel.

    q (B, h, Lq, d), k (B, h, Lk, d), v (B, h, Lk, dv) → out (B, h, Lq, dv). mask: a numpy
    array broadcastable to (B, h, Lq, Lk), bool True = blocked or additive float (no gradient).
    causal: None or the offset (key j blocked for query i when j > i + causal). Saved for
    backward: q, k, v, out and one log-sum-exp per query row — not the weights."""

    name = "fused_attention"
    float_inputs = (0, 1, 2)

    @staticmethod
    def forward(ctx, q, k, v, mask=None, scale=None, causal=None, seed=0, p=0.0):
        out, lse = fused_attention_forward(q, k, v, mask, scale, causal, seed, p)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.params = (mask, scale, causal, seed, p)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        return fused_attention_backward(q, k, v, out, lse, grad, *ctx.params)


# ---- the core ------------------------------------------------------------------------------


def records_graph() -> bool:
    """Does anything read this forward's graph node by node? True inside `mt.viz.trace` (a
    forward hook runs after every op) and under `mt.autograd.keep_intermediates()` (the
    step-through and draw_graph(show_values=True) keep each node's value)."""
    return hooks.registered() or state.keep_intermediates


def _readable(need_weights, mask):
    """The rule between the two paths (see the module docstring)."""
    if isinstance(mask, Tensor):  # a float mask that requires grad: only the steps form dS
        return True
    if state.anomaly:  # anomaly mode raises on any ±inf, and the mask step writes −inf by design
        return False
    return need_weights or records_graph()


def _five_steps(q, k, v, mask, scale, p):
    """The paper's attention, one node per step; returns (output, the weights that multiply V)."""
    scores = matmul(q, swapaxes(k, -1, -2))  # 1. Q Kᵀ: every query · every key (…, L_q, L_k)
    scaled = scores * scale  # 2. × 1/√d_k, so that the softmax does not saturate (§3.2.1)
    if mask is None:  # 3. + mask: −∞ where blocked (§3.2.3)
        masked = scaled
    elif mask.dtype == np.bool_:
        masked = masked_fill(scaled, mask, -np.inf)  # selected, so an inf score there is unread
    else:
        masked = scaled + mask
    weights = softmax(masked, axis=-1)  # 4. softmax: each row sums to 1 (or is 0: no key)
    if p:
        weights = dropout(weights, p, True)
    return matmul(weights, v), weights  # 5. · V: the weighted average of the values


def _fused(q, k, v, mask, scale, causal, p, need_weights):
    """The same attention when nothing reads the graph: the FlashAttention node, or — on a few
    keys, where the softmax node was timed faster, or when the weights are wanted under anomaly
    mode — QKᵀ and ·V around one softmax node that scales and masks as it normalises (see the
    module docstring). (output, weights or None)"""
    l_k = k.shape[-2]
    if (
        l_k >= FUSED_MIN_KEYS
        and q.ndim in (3, 4)
        and not need_weights
        and (q.ndim == 3 or _fused_is_faster(q, k, v, mask, scale, causal))
    ):
        if q.ndim == 3:  # (N, L, d): one head each
            out, _ = _fused(
                *(unsqueeze(x, 1) for x in (q, k, v)),
                mask if mask is None or mask.ndim < 3 else mask[:, None],
                scale,
                causal,
                p,
                False,
            )
            return squeeze(out, 1), None
        seed = _random.generator().integers(0, 2**64, dtype=np.uint64) if p else 0
        out = FusedAttention.apply(q, k, v, mask=mask, scale=scale, causal=causal, seed=seed, p=p)
        return out, None
    weights = _softmax_node(q, k, mask, scale, causal)
    if p:
        weights = dropout(weights, p, True)
    return matmul(weights, v), (weights if need_weights else None)


def _softmax_node(q, k, mask, scale, causal):
    """softmax(q·kᵀ·scale + mask) by one softmax node that scales and masks as it normalises
    (the causal mask, if any, joined to `mask`): the weights of `_fused`'s other path."""
    if causal is not None:
        mask = combine(mask, causal_mask(q.shape[-2], k.shape[-2], causal))
    return softmax(matmul(q, swapaxes(k, -1, -2)), axis=-1, scale=scale, mask=mask)


# ---- which path is faster, timed on the running machine -----------------------------------

# {layout: whether the fused node was the faster}: timed the first time a layout is seen
_FUSED_FASTER = {}
# How much faster the softmax node must be timed to take a layout from the fused node, which
# keeps it on a tie: it holds no L × L weights. (As `fastest` asks of a product's candidate.)
_EDGE = 0.95


def _fused_is_faster(q, k, v, mask, scale, causal):
    """Whether a training forward of q (B, h, L_q, d) against L_k keys takes the fused node:
    always from FUSED_ALWAYS_KEYS keys; below, as the two paths were timed, forward and
    backward, the first time this layout was seen (the shapes, the mask's, causal or not,
    the cores' owner and the thread count). Not timed — the fused node, as before the
    timing existed — where a gradient is not wanted (no backward to time: evaluation,
    decoding), under deterministic algorithms (the two paths round differently, and which one
    runs must not depend on a clock), when MINITENSOR_ATTENTION_TIMING is off, and while a
    helper compiles kernels (the timing would see the compiler, not the machine)."""
    if k.shape[-2] >= FUSED_ALWAYS_KEYS or not _may_time(q, k, v):
        return True
    layout = (
        q.shape,
        k.shape,
        v.shape,
        q.dtype,
        None if mask is None else (mask.shape, mask.dtype),
        causal,
        core_owner(),
        threads(),
    )
    faster = _FUSED_FASTER.get(layout)
    if faster is None:
        times = _time_both_paths(q, k, v, mask, scale, causal)
        if times is None:  # a helper started compiling: the fused node, asked again next time
            return True
        fused, softmax_node = times
        faster = _FUSED_FASTER[layout] = not softmax_node < _EDGE * fused
    return faster


def _may_time(q, k, v):
    """Whether `_fused_is_faster` may time the two paths now (its docstring says when not)."""
    wanted = state.grad_enabled and (q.requires_grad or k.requires_grad or v.requires_grad)
    return (
        wanted
        and config.enabled("MINITENSOR_ATTENTION_TIMING")
        and not are_deterministic_algorithms_enabled()
        and not timings_would_mislead()
    )


def _time_both_paths(q, k, v, mask, scale, causal):
    """(fused, softmax node): the median seconds of a forward and backward of each path on
    copies of q, k and v (this graph is not touched), taking turns; None if a helper started
    compiling meanwhile. Without dropout: it costs the two paths alike. The copies keep the
    inputs' order in memory (a head split is a transposed view: the products route by it)."""
    qc, kc, vc = (Tensor(x.numpy().copy(order="K"), requires_grad=True) for x in (q, k, v))

    def fused():
        FusedAttention.apply(qc, kc, vc, mask=mask, scale=scale, causal=causal).sum().backward()

    def softmax_node():
        matmul(_softmax_node(qc, kc, mask, scale, causal), vc).sum().backward()

    return median_times([fused, softmax_node], rounds=3)


def _check_qkv(q, k, v, op):
    d = q.shape[-1] if q.ndim else None
    fits = (
        q.ndim >= 2
        and q.ndim == k.ndim == v.ndim
        and k.shape[-1] == d
        and k.shape[-2] == v.shape[-2]
        and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
    )
    if not fits:
        raise ShapeError(
            f"{op}: query {tuple(q.shape)}, key {tuple(k.shape)} and value {tuple(v.shape)} do "
            f"not fit: need query (…, L_q, d_k), key (…, L_k, d_k), value (…, L_k, d_v) with "
            f"the same leading axes"
        )


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: np.ndarray | Tensor | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
    is_causal: bool = False,
    causal_offset: int = 0,
    need_weights: bool = False,
    op: str = "attention",
) -> tuple[Tensor, Tensor | None]:
    """softmax(q·kᵀ·scale + mask)·v, the attention of §3.2.1; returns (output, weights or None).

    q (…, L_q, d_k), k (…, L_k, d_k), v (…, L_k, d_v) → output (…, L_q, d_v); weights
    (…, L_q, L_k), the ones that multiply V (after dropout), when need_weights. mask: bool
    **True = blocked** or additive float (`normalize_mask`'s rule), broadcastable to the
    scores. scale: default 1/√d_k. dropout: the probability on the weights (pass 0.0 in eval).
    is_causal blocks key j for query i when j > i + causal_offset (0: torch's top-left). The
    path is chosen by `records_graph` (see the module docstring); `op` names the caller in errors.
    """
    _check_qkv(q, k, v, op)
    if not 0.0 <= dropout < 1.0:
        raise op_error(op, f"dropout must be in [0, 1), got {dropout} (query {q.shape})")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    causal = int(causal_offset) if is_causal else None
    mask = normalize_mask(mask, op)
    _fit_mask(mask, tuple(q.shape[:-1]) + (k.shape[-2],), op)
    if _readable(need_weights, mask):
        if causal is not None:
            mask = combine(mask, causal_mask(q.shape[-2], k.shape[-2], causal), op)
        out, weights = _five_steps(q, k, v, mask, scale, dropout)
        return out, (weights if need_weights else None)
    return _fused(q, k, v, mask, scale, causal, dropout, need_weights)


# ---- torch's function ------------------------------------------------------------------------


def _repeat_heads(x, groups):
    """(…, H, S, E) → (…, H·groups, S, E), each head repeated `groups` times in a row (torch's
    repeat_interleave on the head axis, as enable_gqa does)."""
    if groups == 1:
        return x
    *lead, h, s, e = x.shape
    grown = expand(unsqueeze(x, -3), *lead, h, groups, s, e)
    return reshape(grown, (*lead, h * groups, s, e))


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | ArrayLike | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention: softmax(query·keyᵀ·scale + mask)·value.

    query (…, L, E), key (…, S, E), value (…, S, Ev) → (…, L, Ev); scale defaults to 1/√E.
    attn_mask, broadcastable to (…, L, S): **bool True = may attend** (torch's meaning here, the
    opposite of nn.MultiheadAttention's), or a float mask added to the scores — differentiated
    when it requires grad (a learned attention bias). is_causal: query i attends to keys 0..i
    (top-left aligned, as torch), not together with attn_mask. dropout_p is applied whenever it
    is > 0 (torch has no training flag here). enable_gqa: key and value may have fewer heads
    (axis −3) than query, a divisor of them; each is shared by a group of query heads.
    A query row with no key allowed gives zeros (as torch 2.x does here).
    """
    op = "scaled_dot_product_attention"
    if is_causal and attn_mask is not None:
        raise op_error(op, "give attn_mask or is_causal=True, not both (as torch)", ValueError)
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        groups, rest = divmod(query.shape[-3], key.shape[-3])
        if rest or not groups:
            raise op_error(
                op,
                f"enable_gqa: query's {query.shape[-3]} heads are not a multiple of key's "
                f"{key.shape[-3]} (query {query.shape}, key {key.shape})",
            )
        key, value = _repeat_heads(key, groups), _repeat_heads(value, groups)
    query, key, value = _broadcast_batch(query, key, value, op)
    mask = normalize_mask(attn_mask, op, true_means="allowed")
    out, _ = attention(query, key, value, mask, scale, dropout_p, is_causal, 0, False, op)
    return out


def _broadcast_batch(query, key, value, op):
    """query (…q, L, E), key (…k, S, E), value (…v, S, Ev) with their batch axes (all but the
    last two) broadcast to one shape, as torch's matmuls broadcast them."""
    if min(query.ndim, key.ndim, value.ndim) < 2:
        return query, key, value
    try:
        batch = np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
        raise op_error(
            op,
            f"batch axes of query {query.shape}, key {key.shape} and value {value.shape} "
            f"do not broadcast",
        ) from None
    return tuple(
        t if t.shape[:-2] == batch else expand(t, *batch, *t.shape[-2:])
        for t in (query, key, value)
    )
