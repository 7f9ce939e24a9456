"""The teacher's notebook (docs/tour.ipynb) runs top to bottom, and what a notebook shows of
training: a run that stops at its target closes its progress bar as complete."""

import pathlib

import numpy as np
import pytest

import minitensor as mt

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "tour.ipynb"


def _tiny_training(stop_at):
    from transformer import Transformer, TransformerConfig
    from transformer.training import seq2seq_batch, train

    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    model = Transformer(TransformerConfig.tiny(8, 8))
    opt = mt.optim.Adam(model.parameters(), lr=1e-3)

    def batch(step):
        ids = rng.integers(3, 8, size=(4, 5))
        return seq2seq_batch(ids, ids)

    return train(
        model,
        opt,
        batch,
        steps=10,
        eval_fn=lambda m: {"score": 1.0},
        eval_every=2,
        stop_when=lambda metrics: metrics["step"] >= stop_at,
        desc="tiny",
    )


def test_early_stop_closes_the_progress_bar_as_complete(monkeypatch):
    import tqdm.auto

    bars = []

    class Recorder(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.container = None  # tqdm.notebook keeps its widgets here
            bars.append(self)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    history = _tiny_training(stop_at=4)
    assert history.stopped_early and history.last_step == 4
    (bar,) = bars
    assert bar.n == bar.total == 4  # 100%, not "40% 4/10"
    assert "target reached" in bar.desc
    bars.clear()
    history = _tiny_training(stop_at=99)  # runs its whole budget
    assert not history.stopped_early and bars[0].n == bars[0].total == 10


def test_the_tour_notebook_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs
    )
    assert "cell [" in text  # a node's source names the cell
    assert any("image/png" in o.get("data", {}) for o in outputs)  # attention heatmaps
    assert "held-out exact match" in text
    # the explorer shows inline: its page in an iframe, with the graph and the slider
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any(h.startswith("<iframe srcdoc=") and "slider" in h for h in html)
    # numba's first-run compile lines are said once, on stdout, not as pink stderr boxes
    stderr = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    assert "compiling numba kernels" not in stderr
    assert text.count("numba compiled minitensor's kernels") <= 1


def test_the_tour_lists_its_sections_one_per_line_in_order():
    """A list item's number is what Markdown renders: '4. attention ·\n5. the addition model'
    rendered as '4. attention · 2. the addition model' (a second list restarting at 2)."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    intro = nb.cells[0].source.splitlines()
    items = [line for line in intro if line[:1].isdigit()]
    assert [line.split(".", 1)[0] for line in items] == [str(i) for i in range(1, 7)]
    assert all(line.count(". ") == 1 and "·" not in line for line in items)
    first = intro.index(items[0])
    assert intro[first : first + 6] == items  # one list, no break
    headings = [c.source.splitlines()[0] for c in nb.cells if c.source.startswith("## ")]
    assert [h.split(".", 1)[0] for h in headings] == [f"## {i}" for i in range(1, 7)]
