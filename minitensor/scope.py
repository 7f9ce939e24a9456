"""Module scopes: every op records the dotted path of the module it ran in.

`Module.__call__` enters the module's own path (``encoder.layers.1.self_attn``) and a user can
open a scope by hand (``with mt.scope("my_block"):``). The graph viewer groups nodes by scope,
and error messages name it, so a failing op says *where* in the model it failed. Each thread
has its own scope stack (see `state`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .state import state


def current_scope() -> str:
    """The dotted scope path ops created now (in this thread) record ("" outside any module)."""
    return state.scopes[-1]


def _join(a, b):
    if not a:
        return b
    if not b:
        return a
    return a + "." + b


@contextmanager
def scope(name: str) -> Iterator[str]:
    """Open a named scope inside the current one: ops created inside record ``outer.name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"scope: name must be a non-empty string, got {name!r}")
    scopes = state.scopes
    scopes.append(_join(scopes[-1], name))
    try:
        yield scopes[-1]
    finally:
        scopes.pop()


@contextmanager
def module_scope(path: str) -> Iterator[str]:
    """Enter a module's scope by its full dotted path in its model.

    Module paths are absolute within a model (``decoder.layers.0``), so a child called from its
    parent's forward does not need the parent's name joined on; hand-made scopes that were open
    when the outermost module was called stay as a prefix.
    """
    s = enter_module(path)
    try:
        yield s.scopes[-1]
    finally:
        leave_module(s)


def enter_module(path: str):
    """Enter a module's scope (see `module_scope`) and return this thread's state, for
    `leave_module`. Module.__call__ calls the pair itself: a generator-based context manager
    costs about as much per call as a small op, and every layer is called at every step."""
    s = state
    if s.module_depth == 0:
        s.module_base.append(s.scopes[-1])
    s.module_depth += 1
    s.scopes.append(_join(s.module_base[-1], path))
    return s


def leave_module(s) -> None:
    """Leave the module scope `enter_module` entered (`s`: the state it returned)."""
    s.scopes.pop()
    s.module_depth -= 1
    if s.module_depth == 0:
        s.module_base.pop()
