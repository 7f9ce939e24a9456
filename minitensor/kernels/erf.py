"""erf(x) = 2/√π ∫₀ˣ e^(−t²) dt, the Gauss error function, elementwise: GELU's exact form
x·Φ(x) = x·(1 + erf(x/√2))/2 needs it, and numpy has none.

Both versions call the C library's erf (Python's math.erf) in float64 and round the result to
x's dtype once, so they agree to the last bit:

* the numpy twin applies math.erf to each entry through np.frompyfunc — a Python call per entry,
  plain and exact, slow on large arrays;
* the numba kernel is the same function compiled as a numpy ufunc (numba.vectorize), one C
  loop. numba is imported, and the ufunc compiled (or loaded from numba's on-disk cache), on
  its first call, so the numpy backend never loads numba.

x: an array of float32 or float64 (other dtypes compute in float64); the result has x's shape
and float dtype.
"""

import math

import numpy as np

_erf_entries = np.frompyfunc(math.erf, 1, 1)  # object array in, object array out


def _float_dtype(x):
    return x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float64)


def erf_numpy(x):
    """erf of each entry of x, by math.erf."""
    x = np.asarray(x)
    dtype = _float_dtype(x)
    return np.asarray(_erf_entries(x.astype(dtype, copy=False)), dtype=dtype)


def _erf_scalar(v):
    """math.erf in float64, compiled by numba.vectorize into the ufunc below (for float32 the
    result is rounded once, like the twin's, instead of coming from the C library's erff)."""
    return math.erf(np.float64(v))


_ufunc = []


def erf_numba(x):
    """erf of each entry of x, by a numba ufunc built on the first call."""
    if not _ufunc:
        import numba

        _ufunc.append(
            numba.vectorize(["float32(float32)", "float64(float64)"], cache=True)(_erf_scalar)
        )
    x = np.asarray(x)
    return _ufunc[0](x.astype(_float_dtype(x), copy=False))
