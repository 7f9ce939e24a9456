"""The library's source gives reasons, not measurements: a speed-up, a time or a percentage
measured on one machine goes to benchmarks/README.md ("Figures behind the source's
reasoning"), where it says what was measured, and the comment keeps the why."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

FIGURE = re.compile(
    r"\d(?:[\d.,]*)(?:[–-][\d.]+)?\s?× (?:faster|slower)"  # "3× faster", "1.4–2.2× slower"
    r"|\d(?:[\d.]*)\s?(?:ms|µs)\b"  # "21 ms", "~10 µs"
    r"|\d+(?:[–-]\d+)?% (?:faster|slower|more steps)"  # "25–30% slower"
    r"|GFLOP"
)


def _files():
    for top in ("minitensor", "transformer"):
        yield from sorted((ROOT / top).rglob("*.py"))


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measured_figure_in_comments_or_docstrings(path):
    found = [
        f"{path.name}:{i}: {line.strip()}"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FIGURE.search(line)
    ]
    assert not found, "measured figures belong in benchmarks/README.md:\n" + "\n".join(found)


def test_the_pattern_sees_a_figure():
    assert FIGURE.search("a parallel build measured 1.4–2.2× slower")
    assert FIGURE.search("(~10 µs of BLAS work)") and FIGURE.search("ran 25–30% slower")
    assert not FIGURE.search("8 × 8 blocks, the 8 × 1 tiles")
