"""Module scopes: every op records the dotted path of the module it ran in.

`Module.__call__` enters the module's own path (``encoder.layers.1.self_attn``) and a user can
open a scope by hand (``with mt.scope("my_block"):``). The graph viewer groups nodes by scope,
and error messages name it, so a failing op says *where* in the model it failed.
"""
from contextlib import contextmanager

_stack = [""]          # the current scope is _stack[-1]; "" is the top level
_module_depth = [0]    # how many Module calls are active
_module_base = [""]    # the scope that was current when the outermost Module call began


def current_scope():
    """The dotted scope path ops created now will record ("" outside any module)."""
    return _stack[-1]


def _join(a, b):
    if not a:
        return b
    if not b:
        return a
    return a + "." + b


@contextmanager
def scope(name):
    """Open a named scope inside the current one: ops created inside record ``outer.name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"scope: name must be a non-empty string, got {name!r}")
    _stack.append(_join(_stack[-1], name))
    try:
        yield _stack[-1]
    finally:
        _stack.pop()


@contextmanager
def module_scope(path):
    """Enter a module's scope by its full dotted path in its model.

    Module paths are absolute within a model (``decoder.layers.0``), so a child called from its
    parent's forward does not need the parent's name joined on; hand-made scopes that were open
    when the outermost module was called stay as a prefix.
    """
    if _module_depth[0] == 0:
        _module_base.append(_stack[-1])
    _module_depth[0] += 1
    _stack.append(_join(_module_base[-1], path))
    try:
        yield _stack[-1]
    finally:
        _stack.pop()
        _module_depth[0] -= 1
        if _module_depth[0] == 0:
            _module_base.pop()
