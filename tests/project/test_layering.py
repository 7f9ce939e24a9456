"""The layers of the design, enforced: data flows one way, so nothing below imports from above.

    minitensor.config       process-wide settings (threads, malloc): standard library only
    minitensor.kernels      numba kernels and their numpy twins: import only config
    minitensor (__init__)   the front door: gathers every layer below transformer into `mt.`
    minitensor core         Tensor, Function, autograd, functional, ops: never import nn, optim,
                            viz or transformer; within it, tensor.py stands below the ops
                            (the ops import Tensor, minitensor.methods binds them onto it)
    nn, optim, viz          build on the core; never import transformer
    transformer             builds on minitensor
    demos                   nothing imports a demo

The test reads every module's imports with `ast` (nothing is executed), including imports
inside functions: a lazy import is still a dependency.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# What each layer must never import. A module belongs to the first layer whose prefix it has.
LAYERS = [
    # the package's front door gathers every layer into one namespace: `mt.nn`, `mt.viz`, ...
    ("minitensor.__init__", ("transformer", "demos"), ()),
    # config (with _memory) is the process settings, below everything: it imports only the
    # standard library, and the kernels ask it whether to be polite with threads
    ("minitensor.config", ("minitensor.", "transformer", "demos"), ("minitensor._memory",)),
    ("minitensor._memory", ("minitensor.", "transformer", "demos"), ()),
    (
        "minitensor.kernels",
        ("minitensor.", "transformer", "demos"),
        ("minitensor.kernels", "minitensor.config"),
    ),
    # Tensor is below every op: it never imports them (not even lazily); the op methods are
    # the op functions, bound onto the class by minitensor.methods. It uses the axis helpers
    # (and names function.Context in annotations only, under TYPE_CHECKING).
    (
        "minitensor.tensor",
        (
            "minitensor.ops",
            "minitensor.functional",
            "minitensor.methods",
            "minitensor.nn",
            "minitensor.optim",
            "minitensor.viz",
            "transformer",
            "demos",
        ),
        ("minitensor.ops._axes",),
    ),
    # how an op registers itself (F, mt, Tensor method): importable from any ops file
    ("minitensor.ops._register", ("minitensor.", "transformer", "demos"), ()),
    ("minitensor.nn", ("transformer", "demos", "minitensor.viz"), ()),
    ("minitensor.optim", ("transformer", "demos", "minitensor.viz"), ()),
    ("minitensor.viz", ("transformer", "demos"), ()),
    (
        "minitensor",
        ("minitensor.nn", "minitensor.optim", "minitensor.viz", "transformer", "demos"),
        (),
    ),
    ("transformer", ("demos",), ()),
]


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path, source=None):
    """Every module name `path` imports, relative imports made absolute."""
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(source or path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def _layer_of(module):
    if module == "minitensor":
        module = "minitensor.__init__"
    for prefix, forbidden, allowed in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return prefix, forbidden, allowed
    return None


def _source_files():
    for top in ("minitensor", "transformer"):
        yield from sorted((ROOT / top).rglob("*.py"))


def _within(name, prefix):
    """Is module `name` the package `prefix` or inside it? ('minitensor.' means any submodule.)"""
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


def _violations(path, source=None):
    prefix, forbidden, allowed = _layer_of(_module_name(path))
    return sorted(
        {
            name
            for name in _imports(path, source)
            if any(_within(name, f) for f in forbidden)
            and not any(_within(name, a) for a in allowed)
        }
    )


@pytest.mark.parametrize("path", list(_source_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_imports_only_from_below(path):
    bad = _violations(path)
    assert not bad, f"{_module_name(path)} imports from a layer above it: {bad}"


def test_nothing_imports_a_demo():
    for top in ("minitensor", "transformer", "tests", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            assert not any(
                name == "demos" or name.startswith("demos.") for name in _imports(path)
            ), path


def test_the_checker_sees_a_violation():
    """The walk itself works: relative imports are resolved, lazy ones inside functions too."""
    kernel = ROOT / "minitensor" / "kernels" / "softmax.py"
    assert _violations(kernel, "def f():\n    from ..tensor import Tensor\n") == [
        "minitensor.tensor",
        "minitensor.tensor.Tensor",
    ]
    assert _violations(kernel, "from .jit import kernel\n") == []
    core = ROOT / "minitensor" / "functional.py"
    assert _violations(core, "from .nn import Linear\n") == [
        "minitensor.nn",
        "minitensor.nn.Linear",
    ]
    tensor = ROOT / "minitensor" / "tensor.py"
    assert _violations(tensor, "def f():\n    from . import functional\n") == [
        "minitensor.functional"
    ]
    assert _violations(tensor, "from .ops._axes import shape_arg\n") == []
