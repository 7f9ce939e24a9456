"""The README's code must run: each ```python block is executed in order."""

import os
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


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


def test_the_readme_benchmark_command_runs_without_torch(tmp_path):
    """`python benchmarks/train_step.py --steps 20 --rounds 3`, as the README gives it, on a
    machine without torch: ours alone, and a line that says torch is missing (simulated by a
    `torch` package that fails to import, first on the path)."""
    assert "python benchmarks/train_step.py --steps 20 --rounds 3" in README.read_text()
    fake = tmp_path / "torch"
    fake.mkdir()
    message = "No module named 'torch' (simulated)"
    (fake / "__init__.py").write_text(f"raise ImportError({message!r})\n")
    root = README.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(root)]))
    proc = subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks" / "train_step.py"),
            "--steps",
            "2",
            "--rounds",
            "1",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"torch is not installed (ImportError: {message})" in proc.stdout
    assert "minitensor: median" in proc.stdout and "torch     :" not in proc.stdout
