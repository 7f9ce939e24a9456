"""Gradient mode: whether ops record a graph. `no_grad` turns recording off (inference,
optimizer updates), `enable_grad` back on. The mode is per thread (see `state`)."""
import functools

from .state import state


def is_grad_enabled():
    """True when ops run now in this thread record a graph."""
    return state.grad_enabled


class _GradMode:
    """Context manager and decorator that sets gradient recording on or off."""

    def __init__(self, enabled):
        self.enabled = enabled
        self._prev = []

    def __enter__(self):
        self._prev.append(state.grad_enabled)
        state.grad_enabled = self.enabled
        return self

    def __exit__(self, *exc):
        state.grad_enabled = self._prev.pop()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(self.enabled):       # a fresh one per call: calls may overlap
                return fn(*args, **kwargs)
        return wrapper


def no_grad(fn=None):
    """Ops inside record no graph (inference, optimizer updates).

    A context manager (``with mt.no_grad():``) or a decorator (``@mt.no_grad()`` or
    ``@mt.no_grad``). It affects the calling thread only.
    """
    mode = _GradMode(False)
    return mode(fn) if callable(fn) else mode


def enable_grad(fn=None):
    """Turn recording back on inside a `no_grad` block. Context manager or decorator."""
    mode = _GradMode(True)
    return mode(fn) if callable(fn) else mode
