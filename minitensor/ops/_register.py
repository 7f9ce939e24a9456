"""How an op function announces itself: ``@export`` puts it in `PUBLIC` (re-exported as
``F.<name>`` and ``mt.<name>``, and listed in their ``__all__``) and, unless
``method=False``, in `TENSOR_METHODS` (bound as ``Tensor.<name>``: the function itself, so
the method has the function's signature and docstring). `minitensor.methods` reads both
tables once the ops have loaded; nothing else needs editing when an op is added.

    @export
    def softplus(x: Tensor, beta: float = 1.0) -> Tensor:
        ...

This module imports nothing of minitensor: an ops file can use it without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, overload

Fn = TypeVar("Fn", bound=Callable)

PUBLIC: dict[str, Callable] = {}  # name -> op function, in the order they were defined
TENSOR_METHODS: dict[str, Callable] = {}  # method name -> op function (its first arg: the tensor)


@overload
def export(fn: Fn) -> Fn: ...
@overload
def export(*, method: bool | str = True) -> Callable[[Fn], Fn]: ...
def export(fn=None, *, method=True):
    """Mark an op function public (``F.name``, ``mt.name``) and, with `method` True (or a
    method name of its own, e.g. ``method="clamp"``), a Tensor method. Returns it unchanged."""

    def register(f):
        PUBLIC[f.__name__] = f
        if method:
            TENSOR_METHODS[method if isinstance(method, str) else f.__name__] = f
        return f

    return register if fn is None else register(fn)
