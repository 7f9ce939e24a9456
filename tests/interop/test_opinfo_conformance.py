"""minitensor against torch's own test inputs, its OpInfo database (tests/opinfo_harness.py).

The CI runs a bounded, deterministic sample (a few samples per op and dtype); `-m opinfo_full`
runs the whole walk. The table in docs/pytorch.md is generated from the CI sample
(`python tests/opinfo_harness.py --write-docs`), and a test here checks it is current.
"""

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's op_db imports it

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
import opinfo_harness as H  # noqa: E402

import minitensor as mt  # noqa: E402

pytestmark = pytest.mark.torch

# OpInfos whose wrong values or gradients are known and being fixed elsewhere, each with what
# is wrong (none now: keep it empty unless a fix is under way).
KNOWN_WRONG: dict[str, str] = {}


@pytest.fixture(scope="module")
def ci_results():
    return H.walk()


def _wrong(results):
    return {
        r.key: {c: r.examples[c] for c in H.WRONG_CLASSES if c in r.counts}
        for r in results
        if any(c in r.counts for c in H.WRONG_CLASSES)
    }


def test_the_ci_sample_gives_no_wrong_value_or_gradient(ci_results):
    wrong = {k: v for k, v in _wrong(ci_results).items() if k not in KNOWN_WRONG}
    assert not wrong, wrong


def test_the_ci_sample_covers_the_spelled_ops(ci_results):
    s = H.summary(ci_results)
    assert s["opinfos"] == 702
    assert s["spelled"] >= 340
    assert s["same"] >= 0.95 * s["checked"]


def test_the_committed_table_is_the_generated_one(ci_results):
    committed = H.committed_table()
    assert committed is not None, "docs/pytorch.md has no generated table"
    assert committed == H.table(ci_results), (
        "docs/pytorch.md's OpInfo table is stale: run python tests/opinfo_harness.py --write-docs"
    )


def test_the_table_has_one_row_per_spelled_op_and_lists_the_missing(ci_results):
    text = H.table(ci_results)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == H.summary(ci_results)["spelled"]
    for row in rows:
        cells = row.strip("|").split(" | ")
        assert cells[5].split(":")[0].strip() in ("same", "differs"), row
        assert int(cells[2]) >= int(cells[3]) + int(cells[4])
    assert "Missing (" in text and text.startswith(H.BEGIN) and text.endswith(H.END)


def test_write_docs_replaces_only_the_generated_section(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# head\n\ntext others wrote\n")
    H.write_docs(H.BEGIN + "\nfirst\n" + H.END, page)
    H.write_docs(H.BEGIN + "\nsecond\n" + H.END, page)
    text = page.read_text()
    assert text.startswith("# head\n\ntext others wrote\n") and "first" not in text
    assert H.committed_table(page) == H.BEGIN + "\nsecond\n" + H.END


# ------------------------------------------------------------ the harness catches each kind
def _sample(*tensors, **kwargs):
    from torch.testing._internal.opinfo.core import SampleInput

    return SampleInput(tensors[0], args=tensors[1:], kwargs=kwargs)


def _op(name="sin"):
    from torch.testing._internal.common_methods_invocations import op_db

    return next(o for o in op_db if o.name == name)


def _leaf(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


class _WrongBackward(mt.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * np.cos(x) * 1.001


def test_the_harness_tells_each_kind_of_difference():
    torch.manual_seed(0)
    op, x = _op(), _leaf(3, 4)
    right = H.Spelling("mt.sin", torch.sin, mt.sin)
    assert H.run_sample(op, right, _sample(x), True, 0) == (H.SAME, "")
    cases = {
        "wrong value": H.Spelling("mt.cos", torch.sin, mt.cos),
        "wrong gradient": H.Spelling("bad", torch.sin, _WrongBackward.apply),
        "wrong shape": H.Spelling("t", torch.sin, lambda a: mt.sin(a).reshape(4, 3)),
        "wrong dtype": H.Spelling("f32", torch.sin, lambda a: mt.sin(a).float()),
        "wrong type": H.Spelling("np", torch.sin, lambda a: mt.sin(a).numpy()),
        "refuses": H.Spelling("raise", torch.sin, lambda a: a.reshape(5)),
    }
    for expected, spelling in cases.items():
        assert H.run_sample(op, spelling, _sample(x), True, 0)[0] == expected, expected
    never = H.Spelling("lenient", torch.add, lambda a, b: a)
    assert H.run_sample(op, never, _sample(_leaf(3), _leaf(4)), True, 0)[0] == "no refusal"
    assert H.run_sample(op, right, _sample(x, out=x), True, 0)[0] == H.UNSUPPORTED
    z = torch.randn(3, dtype=torch.complex128)
    assert H.run_sample(op, right, _sample(z), False, 0)[0] == H.UNSUPPORTED


def test_the_harness_finds_torch_spellings():
    assert {"mt.add", "Tensor.add", "operator +"} <= {s.label for s in H.spellings(_op("add"))}
    assert "F.relu" in {s.label for s in H.spellings(_op("nn.functional.relu"))}
    assert {s.label for s in H.spellings(_op("abs"))} >= {"mt.abs", "Tensor.abs"}


@pytest.mark.opinfo_full
def test_the_whole_walk(request):
    if "opinfo_full" not in (request.config.getoption("-m") or ""):
        pytest.skip("the whole walk runs with -m opinfo_full")
    results = H.walk({"sample": None, "error": None, "reference": None})
    wrong = {k: v for k, v in _wrong(results).items() if k not in KNOWN_WRONG}
    assert not wrong, wrong
    s = H.summary(results)
    assert s["same"] >= 0.99 * s["checked"], s  # issue #22's bar for the whole walk
