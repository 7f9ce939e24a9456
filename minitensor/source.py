"""Where an op was created, for graph nodes and error messages: the user's source line and
the shapes of the op's inputs."""
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_frame():
    """(filename, lineno, function) of the first caller outside the minitensor package, or
    None."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        f = f.f_back
    if f is None:
        return None
    return (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


def _shape_of(a):
    return tuple(a.shape) if hasattr(a, "shape") else type(a).__name__


def describe_inputs(arrays):
    """'(2, 3), (3, 4)': the shapes of an op's inputs, for error messages."""
    return ", ".join(str(_shape_of(a)) for a in arrays)
