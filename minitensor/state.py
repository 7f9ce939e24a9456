"""The core's per-thread state: gradient mode, anomaly mode, the module scope stack and
the decoders' eval override.

Each thread has its own, as in PyTorch: a `no_grad` block in one thread does not stop another
thread from recording its graph, and two threads running modules do not mix their scopes. A
new thread starts from the defaults below (gradients on, anomaly mode off, top-level scope).
"""

import threading


class _ThreadState(threading.local):
    """One instance, `state`; each thread sees its own attributes (set by __init__ on the
    thread's first access)."""

    def __init__(self):
        self.grad_enabled = True  # do ops record a graph? (no_grad / enable_grad)
        self.anomaly = False  # check every output and gradient? (detect_anomaly)
        self.keep_intermediates = False  # do nodes hold their input tensors? (autograd)
        self.scopes = [""]  # the current module scope is scopes[-1]; "" = top level
        self.module_depth = 0  # how many Module calls are active
        self.module_base = [""]  # the scope current when the outermost Module call began
        # do modules run as in eval mode whatever their flag? (transformer's decoders: they
        # must not call model.eval() on a model another thread may be training)
        self.eval_mode = False


state = _ThreadState()

# How many detect_anomaly() blocks are open, in all threads: while none is, no thread checks
# anything, and an op that records nothing can skip reading its thread's mode (`state` is a
# threading.local, whose every read costs about as much as a small op's arithmetic)
anomaly_on = [0]
