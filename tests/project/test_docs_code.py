"""The docs that teach by code run: each page's ```python blocks are executed in order, in one
namespace — docs/extending.md (your own op), docs/graph.md (the graph, the step-through, the
trace) and docs/kernels.md (your own kernel)."""

import linecache
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
PAGES = {  # page: (at least this many blocks, a line one of them must contain)
    "extending.md": (8, "class Softplus(mt.Function)"),
    "graph.md": (6, "loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out)"),
    "kernels.md": (5, "bias_relu = dispatch(bias_relu_numba, bias_relu_numpy)"),
}


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_has_code(page):
    blocks = python_blocks((DOCS / page).read_text(encoding="utf-8"))
    least, line = PAGES[page]
    assert len(blocks) >= least
    assert any(line in b for b in blocks)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_code_runs(page, capsys):
    namespace = {"__name__": page.removesuffix(".md") + "_doc"}
    for i, block in enumerate(python_blocks((DOCS / page).read_text(encoding="utf-8"))):
        filename = f"{page}, block {i + 1}"
        # let linecache find the block's lines, as it would for a file: nodes record their
        # source line and the docs print it
        linecache.cache[filename] = (len(block), None, block.splitlines(True), filename)
        code = compile(block, filename, "exec")
        try:
            exec(code, namespace)
        except Exception as e:  # say which block failed
            pytest.fail(f"block {i + 1} of docs/{page} raised {type(e).__name__}: {e}")


def test_a_custom_activation_plugs_into_the_transformer():
    """TransformerConfig(activation=…) takes a function, an nn.Module class or an mt.Function
    class (docs/extending.md shows it); a saved config names it and asks for it back."""
    import minitensor as mt
    import minitensor.functional as F
    from minitensor import nn
    from transformer import Transformer, TransformerConfig

    def squared_relu(x):
        return F.relu(x) ** 2

    src, tgt_in = mt.randint(3, 10, (2, 5)), mt.randint(3, 10, (2, 4))
    for activation, scope_has_act in ((squared_relu, False), (nn.GELU, True)):
        mt.manual_seed(0)
        model = Transformer(TransformerConfig.tiny(10, 10, activation=activation))
        with mt.viz.trace(quiet=True) as t:
            model(src, tgt_in)
        ffn_ops = [r.op for r in t.records if r.scope.startswith("encoder.layers.0.ffn")]
        assert ("gelu" in ffn_ops) if scope_has_act else ("pow" in ffn_ops), ffn_ops
        assert any(r.scope.endswith("ffn.act") for r in t.records) == scope_has_act
    d = TransformerConfig.tiny(10, 10, activation=squared_relu).to_dict()
    assert d["activation"].startswith("custom:") and d["activation"].endswith("squared_relu")
    with pytest.raises(ValueError, match="pass it again"):
        TransformerConfig(**d)
    assert TransformerConfig(**{**d, "activation": squared_relu}).activation is squared_relu
    with pytest.raises(ValueError, match="or a callable"):
        TransformerConfig.tiny(10, 10, activation="gleu")
