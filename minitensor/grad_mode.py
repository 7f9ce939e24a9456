"""Gradient mode: whether ops record a graph. `no_grad` turns recording off (inference,
optimizer updates), `enable_grad` back on; `keep_intermediates` makes the nodes recorded keep
their input tensors. The modes are per thread (see `state`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, overload

from .state import state

_Fn = TypeVar("_Fn", bound=Callable[..., Any])  # a function no_grad decorates


def is_grad_enabled() -> bool:
    """True when ops run now in this thread record a graph."""
    return state.grad_enabled


class _GradMode:
    """Context manager and decorator that sets gradient recording on or off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._prev = []

    def __enter__(self) -> _GradMode:
        self._prev.append(state.grad_enabled)
        state.grad_enabled = self.enabled
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        state.grad_enabled = self._prev.pop()
        return False

    def __call__(self, fn: _Fn) -> _Fn:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(self.enabled):  # a fresh one per call: calls may overlap
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  (wraps keeps fn's signature)


# With no argument (a context manager, or `@no_grad()`) the mode; given a function (`@no_grad`),
# that function wrapped. The overloads tell type checkers which.
@overload
def no_grad(fn: None = None) -> _GradMode: ...
@overload
def no_grad(fn: _Fn) -> _Fn: ...
def no_grad(fn: _Fn | None = None) -> _GradMode | _Fn:
    """Ops inside record no graph (inference, optimizer updates).

    A context manager (``with mt.no_grad():``) or a decorator (``@mt.no_grad()`` or
    ``@mt.no_grad``). It affects the calling thread only.
    """
    mode = _GradMode(False)
    return mode(fn) if callable(fn) else mode


@overload
def enable_grad(fn: None = None) -> _GradMode: ...
@overload
def enable_grad(fn: _Fn) -> _Fn: ...
def enable_grad(fn: _Fn | None = None) -> _GradMode | _Fn:
    """Turn recording back on inside a `no_grad` block. Context manager or decorator."""
    mode = _GradMode(True)
    return mode(fn) if callable(fn) else mode


class set_grad_enabled(_GradMode):  # noqa: N801 (torch's name for a class)
    """Recording on (True) or off (False) from here on, as torch.set_grad_enabled: called
    alone it switches the mode at once; as a context manager or decorator it restores the
    previous mode afterwards. It affects the calling thread only."""

    def __init__(self, mode: bool) -> None:
        super().__init__(bool(mode))
        self._prev.append(state.grad_enabled)  # the call itself switches, as torch's does
        state.grad_enabled = self.enabled

    def __enter__(self) -> set_grad_enabled:
        return self  # already switched by the call; __exit__ puts the previous mode back


@overload
def inference_mode(mode: bool = True) -> _GradMode: ...
@overload
def inference_mode(mode: _Fn) -> _Fn: ...
def inference_mode(mode: bool | _Fn = True) -> _GradMode | _Fn:
    """torch.inference_mode: no_grad under another name (torch's also skips version counting,
    a speed-up minitensor does not need). inference_mode(False) records as usual."""
    if callable(mode):
        return _GradMode(False)(mode)
    return _GradMode(not mode)


@contextmanager
def keep_intermediates() -> Iterator[None]:
    """Graphs recorded inside keep every intermediate tensor alive, for inspection.

    By default a node holds the arrays its backward needs, not the tensors it was given (see
    `minitensor.function.NodeInput`): an intermediate result nobody holds is freed during
    forward, as in PyTorch (most of a Transformer's activations are such). Inside this block
    each node holds its input tensors themselves, so ``draw_graph(..., show_values=True)`` and
    its NaN colouring see every node's output. Per thread, like `no_grad`::

        with mt.autograd.keep_intermediates():
            loss = model(x).sum()
        mt.viz.draw_graph(loss, show_values=True)
    """
    before = state.keep_intermediates
    state.keep_intermediates = True
    try:
        yield
    finally:
        state.keep_intermediates = before
