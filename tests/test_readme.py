"""The README's code must run: each ```python block is executed in order."""
import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_blocks_run():
    blocks = python_blocks(README.read_text())
    assert blocks, "README has no ```python blocks"
    namespace = {"__name__": "readme"}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)


def test_nn_and_optim_page_runs():
    page = README.parent / "docs" / "nn_and_optim.md"
    namespace = {"__name__": "nn_and_optim"}
    for block in python_blocks(page.read_text()):
        exec(compile(block, str(page), "exec"), namespace)
    assert namespace["ckpt"]["step"] == 300
