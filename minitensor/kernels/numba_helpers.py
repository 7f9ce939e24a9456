"""The numba-only helpers kernels share: a vectorisable float32 exp, the normal CDF (GELU's Φ)
built on it, a maximum that vectorises, row reductions (maximum, sum, dot product), softmax's
masked score, and the one-line notice printed while kernels compile. Importing this module
imports numba; kernels reach these names through kernels/jit.py (`jit.exp`, `jit.row_sum`,
...), which imports this module on first access.

Why a hand-written exp: numba compiles np.exp on a float32 to a call of the C library's expf
for each element, which stops the loop from being vectorised; softmax then spends most of its
time there. `exp` below is the textbook method — split x = n·ln2 + r with |r| ≤ ln2/2, so
eˣ = 2ⁿ·eʳ, take eʳ from a degree-6 Taylor polynomial and build 2ⁿ by writing n straight into
the float's exponent bits. It is plain arithmetic, so the loop vectorises; its relative error
is below 5e-7 on float32. float64 keeps the exact np.exp (the float64 tests demand agreement
with the numpy twin to 1e-12).
"""

import math
import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import event
from numba.extending import intrinsic, overload
from numba.np.numpy_support import as_dtype

from .jit import FASTMATH

# ---- a vectorisable exp for float32 --------------------------------------------------------


@intrinsic
def _float32_from_bits(typingctx, bits):
    """Reinterpret the 32 bits of an int32 as a float32 (no conversion, like a C union)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _mul_add(typingctx, a, b, c):
    """a·b + c as LLVM's fmuladd: one fused multiply-add where the CPU has one (one rounding,
    half the instructions), a multiply and an add where it has not. The kernels' fastmath flags
    leave out "contract", so that no x·scale − max is fused behind the reader's back; inside
    exp's polynomial the fusion is written here on purpose: its error is within exp's own."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        ty = args[0].type
        fn = builder.module.declare_intrinsic(
            "llvm.fmuladd", [ty], ir.FunctionType(ty, [ty, ty, ty])
        )
        return builder.call(fn, args)

    return a(a, b, c), codegen


@njit(fastmath=FASTMATH, inline="always", cache=True)
def _exp_float32(x):
    f = np.float32
    xc = min(max(x, f(-87.0)), f(88.0))  # keep 2ⁿ a normal float
    n = np.floor(_mul_add(xc, f(1.4426950408889634), f(0.5)))  # n = round(x / ln2)
    # r = x − n·ln2, with ln2 split in a short head and a tail so the subtraction is exact
    r = _mul_add(-n, f(-2.12194440e-4), _mul_add(-n, f(0.693359375), xc))
    p = f(1.0 / 720)  # eʳ ≈ Σ_{i≤6} rⁱ/i!  (Horner)
    p = _mul_add(p, r, f(1.0 / 120))
    p = _mul_add(p, r, f(1.0 / 24))
    p = _mul_add(p, r, f(1.0 / 6))
    p = _mul_add(p, r, f(0.5))
    p = _mul_add(p, r, f(1.0))
    p = _mul_add(p, r, f(1.0))
    two_n = _float32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))  # 2ⁿ
    result = p * two_n if x == x else x  # NaN stays NaN (x == x is False)
    return f(0.0) if x < f(-87.0) else result  # e^-inf (a masked score) is exactly 0


def exp(x):
    """eˣ inside kernels: the polynomial above for float32, np.exp for float64."""
    return np.exp(x)


# Not inline="always": numba would paste exp's code into every kernel that calls it and type it
# again there (typing is most of a small kernel's compile). As a call, exp is compiled once per
# process, and LLVM inlines it into each kernel's loop before vectorising it: the same vector
# code as numba's inlining gave, and a shorter cold compile of every kernel that calls exp
# (benchmarks/README.md, "the demo's cold start").
@overload(exp)
def _exp_overload(x):
    if x == types.float32:
        return lambda x: _exp_float32(x)
    return lambda x: np.exp(x)


# ---- the standard normal CDF Φ, for GELU -------------------------------------------------------

# Φ(h) for float32 from erfc: Φ(−|h|) = erfc(z)/2 with z = |h|/√2 and
#     erfc(z) ≈ t·exp(−z² + P(t)),  t = 1/(1 + z/2),
# P the degree-9 Chebyshev fit of Numerical Recipes (Press et al., §6.2, "erfcc"), whose relative
# error is below 1.2e-7 for every z. Plain arithmetic and `exp`, so a kernel's loop vectorises
# (numba's erf is a scalar call per entry); and the tail Φ(−|h|) keeps its relative accuracy,
# where 1 + erf(h/√2) in float32 rounds to 0 below h ≈ −5.4.
_ERFC_FIT = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)
_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9 = _ERFC_FIT
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@njit(fastmath=FASTMATH, inline="always", cache=True)
def _normal_cdf_float32(h):
    f = np.float32
    z = abs(h) * f(_INV_SQRT2)
    # np.divide, not /: numba's / tests for a zero divisor (Python's ZeroDivisionError), a
    # branch that keeps the loop from vectorising
    t = np.divide(f(1), _mul_add(f(0.5), z, f(1)))
    # P(t) by Estrin's scheme: pairs of terms, then pairs of pairs. Horner's rule would be nine
    # multiply-adds each waiting for the last; here the longest chain is four, so the CPU
    # overlaps more of each vector's work with the next one's (the loop is bound by that wait,
    # not by the count of operations).
    t2 = t * t
    t4 = t2 * t2
    low = _mul_add(t2, _mul_add(t, f(_C3), f(_C2)), _mul_add(t, f(_C1), f(_C0)))  # c0…c3
    high = _mul_add(t2, _mul_add(t, f(_C7), f(_C6)), _mul_add(t, f(_C5), f(_C4)))  # c4…c7
    high = _mul_add(t4, _mul_add(t, f(_C9), f(_C8)), high)  # c4…c9, from t⁴ on
    p = _mul_add(t4, high, low)
    tail = f(0.5) * t * _exp_float32(_mul_add(-z, z, p))  # Φ(−|h|)
    return tail if h < f(0) else f(1) - tail


def normal_cdf(h):
    """Φ(h), the standard normal CDF, inside kernels: the erfc fit above for float32, the C
    library's erf for float64 (exact, as the numpy twins)."""
    return 0.5 * (1.0 + math.erf(h * _INV_SQRT2))


# inline="always", unlike exp: LLVM leaves a call this long a call, one per entry, and the
# loop around it scalar (measured: the GELU kernels ran much slower so). Only those two kernels
# call it, so numba's typing it again in each costs little compile time.
@overload(normal_cdf, inline="always")
def _normal_cdf_overload(h):
    if h == types.float32:
        return lambda h: _normal_cdf_float32(h)
    return lambda h: 0.5 * (1.0 + math.erf(h * _INV_SQRT2))


# ---- a maximum that vectorises ---------------------------------------------------------------


@intrinsic
def maximum(typingctx, a, b):
    """max(a, b) of two floats of one type, as LLVM's maxnum: unlike Python's max (a compare
    and a branch), the vectoriser turns a running maximum of maxnum into packed vmaxps, many
    lanes per instruction instead of one compare and branch per element (the gain on a long
    row is in benchmarks/README.md, "Figures behind the source's reasoning"). A NaN operand
    is ignored (IEEE maxNum); the kernels let NaN reach their output through exp and the
    sums instead."""
    if not isinstance(a, types.Float) or a != b:
        return None

    def codegen(context, builder, signature, args):
        ty = args[0].type
        fn = builder.module.declare_intrinsic("llvm.maxnum", [ty], ir.FunctionType(ty, [ty, ty]))
        return builder.call(fn, args)

    return a(a, b), codegen


@njit(cache=True, fastmath=FASTMATH | {"nnan"})
def row_max(row):
    """The largest entry of a 1-D array, NaNs ignored. Compiled with "nnan" so that LLVM may
    reorder the running `maximum` into packed vmaxps (it will not reorder a max whose NaN
    behaviour it must keep; maxnum ignores NaN anyway, so the flag changes no result)."""
    largest = row.dtype.type(-np.inf)
    for j in range(row.shape[0]):
        largest = maximum(largest, row[j])
    return largest


@njit(cache=True, fastmath=FASTMATH | {"reassoc"})
def row_sum(row):
    """Σⱼ row[j] of a 1-D array. Compiled with "reassoc", which lets LLVM keep eight partial
    sums in one vector register (the sum vectorises); here it can do nothing but reorder the
    additions, as numpy's pairwise sum does too."""
    total = row.dtype.type(0)
    for j in range(row.shape[0]):
        total += row[j]
    return total


@njit(cache=True, fastmath=FASTMATH | {"reassoc"})
def row_dot(a, b):
    """Σⱼ a[j]·b[j] of two 1-D arrays, each product rounded as numpy rounds it (no fused
    multiply-add); "reassoc" only reorders the sum, as in row_sum."""
    total = a.dtype.type(0)
    for j in range(a.shape[0]):
        total += a[j] * b[j]
    return total


# ---- softmax's score under a mask --------------------------------------------------------------


def masked_score(x, m, scale):
    """z = scale·x + m for an additive mask entry m; z = −inf for a blocked bool entry m, where
    x is not used at all (an inf or NaN score at a blocked position cannot reach the row)."""
    if isinstance(m, (bool, np.bool_)):
        return -np.inf if m else x * scale
    return x * scale + m


@overload(masked_score, inline="always")
def _masked_score_overload(x, m, scale):
    if isinstance(m, types.Boolean):
        blocked = as_dtype(x).type(-np.inf)
        return lambda x, m, scale: blocked if m else x * scale
    return lambda x, m, scale: x * scale + m


# ---- "compiling…" notice ---------------------------------------------------------------------


def _notice_stream():
    """stderr, where a program's diagnostics go — but stdout in a Jupyter notebook, where
    stderr shows as a red box: a first run's compile is news, not an error."""
    return sys.stdout if "ipykernel" in sys.modules else sys.stderr


class _CompileNotice(event.Listener):
    """Print one short line the first time each kernel family (module) compiles in a process.
    Loading a kernel from numba's on-disk cache is not a compile, so this stays quiet then."""

    def __init__(self):
        self.announced = set()

    def on_start(self, ev):
        module = getattr(ev.data["dispatcher"].py_func, "__module__", "") or ""
        helper = module.endswith((".jit", ".numba_helpers"))
        if module.startswith("minitensor.kernels.") and not helper and module not in self.announced:
            self.announced.add(module)
            family = module.rsplit(".", 1)[-1]
            print(
                f"minitensor: compiling numba kernels for {family} "
                f"(first use; cached on disk afterwards)...",
                file=_notice_stream(),
                flush=True,
            )

    def on_end(self, ev):
        pass


_NOTICE = _CompileNotice()
event.register("numba:compile", _NOTICE)


def quiet():
    """No "compiling…" notice from this process (the compile-ahead helper's)."""
    event.unregister("numba:compile", _NOTICE)
