"""Where an op was created, for graph nodes and error messages: the user's source line and
the shapes of the op's inputs.

A node records the file and line that created it. In a script that is ``model.py:42``. In a
notebook, IPython compiles each cell under a made-up file name (``/tmp/ipykernel_81/2429019779.py``,
or ``<ipython-input-3-1b2c…>`` in older IPython) that means nothing to the reader; IPython itself
keeps a map from that name to the cell's execution count, and its tracebacks say
``Cell In[3], line 5``. `describe_source` does the same: ``cell [3], line 5``.
"""

import os
import re
import sys
from sys import _getframe

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_line(skip=1):
    """(code object, instruction offset) of the first caller outside the minitensor package,
    or None: what every recorded op keeps, and `line_at` turns into a line number when a node
    is asked for its source (most never are). Finding a line number means scanning the code's
    line table, which costs as much as the rest of recording an op, so it is not done here;
    neither is the frame kept, whose locals would stay alive.
    `skip`: how many frames above this one are known to be inside the package."""
    f = _getframe(skip)
    while f is not None:
        code = f.f_code
        where = _INSIDE.get(code.co_filename)  # (a str keeps its hash: one lookup)
        if where is None:
            where = _learn_file(code.co_filename)
        if not where:
            return (code, f.f_lasti)
        f = f.f_back
    return None


# {a code object's file name: whether the file is minitensor's own}, filled as files are met.
# Every op asks this of its caller's file: a dict lookup costs a third of str.startswith's call
_INSIDE: dict[str, bool] = {}


def _learn_file(filename):
    """Whether `filename` is inside the package, remembered in `_INSIDE`."""
    _INSIDE[filename] = inside = filename.startswith(_PACKAGE_DIR)
    return inside


def line_at(code, offset):
    """The source line of the instruction at byte `offset` in `code` (what a frame's
    ``f_lineno`` says while it runs that instruction)."""
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return code.co_firstlineno if line is None else line
    return code.co_firstlineno


def user_frame():
    """(filename, lineno, function) of the first caller outside the minitensor package, or
    None: `user_line` formatted."""
    src = user_line(2)
    return None if src is None else located(*src)


def located(code, offset):
    """(filename, lineno, function) of the instruction at byte `offset` in `code`."""
    return (code.co_filename, line_at(code, offset), code.co_name)


def _shape_of(a):
    return tuple(a.shape) if hasattr(a, "shape") else type(a).__name__


def describe_inputs(arrays):
    """'(2, 3), (3, 4)': the shapes of an op's inputs, for error messages."""
    return ", ".join(str(_shape_of(a)) for a in arrays)


_OLD_IPYTHON_NAME = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")


def _ipython_cell(filename):
    """The execution count of the notebook cell compiled as `filename`, or None.

    IPython is never imported here: when it is not already running, no file is a cell.
    """
    m = _OLD_IPYTHON_NAME.match(filename)
    if m:
        return int(m.group(1))
    if "IPython" not in sys.modules:
        return None
    from IPython.core.getipython import get_ipython

    shell = get_ipython()
    cells = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if not isinstance(cells, dict):
        return None
    return cells.get(filename)


def describe_source(filename, lineno):
    """'model.py:42' for a file, 'cell [3], line 5' for a line typed in an IPython/Jupyter cell."""
    cell = _ipython_cell(filename)
    if cell is not None:
        return f"cell [{cell}], line {lineno}"
    return f"{os.path.basename(filename)}:{lineno}"
