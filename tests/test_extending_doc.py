"""docs/extending.md runs: its ```python blocks are executed in order, in one namespace."""
import linecache
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "extending.md"


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_doc_has_code():
    blocks = python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 8
    assert any("class Softplus(mt.Function)" in b for b in blocks)


def test_extending_doc_code_runs(capsys):
    namespace = {"__name__": "extending_doc"}
    for i, block in enumerate(python_blocks(DOC.read_text(encoding="utf-8"))):
        filename = f"{DOC.name}, block {i + 1}"
        # let linecache find the block's lines, as it would for a file: nodes record their
        # source line and the doc prints it
        linecache.cache[filename] = (len(block), None, block.splitlines(True), filename)
        code = compile(block, filename, "exec")
        try:
            exec(code, namespace)
        except Exception as e:     # say which block failed
            pytest.fail(f"block {i + 1} of docs/extending.md raised {type(e).__name__}: {e}")
