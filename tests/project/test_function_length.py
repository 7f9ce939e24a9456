"""No library function over 60 lines: a function a learner opens fits on one screen.

The test reads every function and method in minitensor/ and transformer/ with `ast` (nothing is
executed) and counts its lines from `def` to its last line, docstring and comments included;
nested functions count inside their parent and on their own.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LINES = 60


def _long_functions(source, filename="<source>"):
    """(name, first line, length) of each function in `source` longer than MAX_LINES."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_LINES:
                found.append((node.name, node.lineno, length))
    return found


def test_the_check_sees_a_long_function_and_a_long_method():
    body = [f"x{i} = {i}" for i in range(MAX_LINES)]  # with `def`: 61 lines
    function = "def f():\n" + "".join(f"    {line}\n" for line in body)
    method = "class A:\n    def g(self):\n" + "".join(f"        {line}\n" for line in body)
    assert _long_functions(function + method) == [("f", 1, 61), ("g", 63, 61)]
    assert _long_functions("def short():\n    return 1\n") == []


def test_no_library_function_is_over_60_lines():
    too_long = []
    for package in ("minitensor", "transformer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for name, line, length in _long_functions(path.read_text(), str(path)):
                too_long.append(f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)")
    assert not too_long, "functions over 60 lines:\n" + "\n".join(too_long)
