"""The few type aliases that minitensor's public signatures use, defined once.

    ArrayLike   what np.asarray accepts: a number, a (nested) list, a numpy array
    DType       a dtype as np.dtype() reads it: mt.float32, np.float64, float, "int64"
    Axis        one axis, several, or None for all of them (numpy's axis=, torch's dim=)
    Shape       a shape: a tuple of sizes
    Scalar      a Python number (a bool is an int)

A Tensor argument that may also be a number or an array is written ``Tensor | ArrayLike``;
arrays are ``np.ndarray``. tests/project/test_type_hints.py checks that every public function and
method of the core, nn and optim is annotated and that each hint resolves.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["ArrayLike", "Axis", "DType", "Scalar", "Shape"]

ArrayLike = npt.ArrayLike
DType = np.dtype | type | str
Axis = int | tuple[int, ...] | None
Shape = tuple[int, ...]
Scalar = int | float
