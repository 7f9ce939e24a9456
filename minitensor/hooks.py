"""Forward hooks: a function called after every op's forward (`viz.trace` is built on them).

Hooks are process-wide (a tracer sees the ops of every thread); anomaly mode's forward check
runs here too, for the threads that turned it on.
"""

from . import anomaly
from .state import state

_forward_hooks = []


def register_forward_hook(hook):
    """Call ``hook(fn, ctx, input_arrays, output_tensor, recorded)`` after every op's forward.

    Returns a handle with ``remove()``.
    """
    _forward_hooks.append(hook)
    return _Handle(hook)


class _Handle:
    def __init__(self, hook):
        self.hook = hook

    def remove(self):
        if self.hook in _forward_hooks:
            _forward_hooks.remove(self.hook)


def registered():
    """Is a forward hook registered (`viz.trace` is one)? Attention then records its steps."""
    return bool(_forward_hooks)


def active():
    """Is there anything to run after a forward (a hook, or anomaly mode in this thread)?"""
    return bool(_forward_hooks) or state.anomaly


def run_forward_hooks(fn, ctx, arrays, result, recorded):
    if state.anomaly:
        anomaly.check_forward(fn, arrays, result)
    for hook in list(_forward_hooks):  # noqa: PERF101  (a hook may remove itself)
        hook(fn, ctx, arrays, result, recorded)
