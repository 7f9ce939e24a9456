"""transformer.viz: attention heatmaps as a matplotlib Figure, labelled by what each row writes."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import minitensor as mt  # noqa: E402
from transformer import Transformer, TransformerConfig  # noqa: E402
from transformer.masks import padding_mask  # noqa: E402
from transformer.tokenizer import CharTokenizer  # noqa: E402
from transformer.viz import plot_attention, save_attention, token_labels  # noqa: E402


def run(src_ids, tgt_in_ids, pad_mask=True):
    mt.manual_seed(0)
    cfg = TransformerConfig.tiny(16, 16, num_encoder_layers=2, num_decoder_layers=2)
    model = Transformer(cfg).eval()
    src, tgt_in = mt.tensor(np.array([src_ids])), mt.tensor(np.array([tgt_in_ids]))
    with mt.no_grad():
        model(src, tgt_in, src_padding_mask=padding_mask(src, 0) if pad_mask else None)
    return model.attention_maps()


def labels_of(ax):
    return (
        [t.get_text() for t in ax.get_yticklabels()],
        [t.get_text() for t in ax.get_xticklabels()],
    )


def test_every_layer_and_head_of_the_three_kinds_with_one_colour_scale():
    maps = run([5, 6, 7, 8], [1, 9, 10])  # <bos>=1, then what was written so far
    fig = plot_attention(maps, ["a", "b", "c", "d"], ["x", "y", "<eos>"], title="abcd → xy")
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 3 * 2 * 2  # 3 kinds × 2 layers × 2 heads
    titles = [ax.get_title() for ax in heatmaps]
    for kind in ("encoder self-attention", "decoder self-attention", "cross-attention"):
        for layer in (0, 1):
            for head in (0, 1):
                assert f"{kind}\nlayer {layer} · head {head}" in titles
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in heatmaps)
    colorbars = [ax for ax in fig.axes if not ax.images and ax.get_label() == "<colorbar>"]
    assert colorbars and "attention weight" in colorbars[0].get_ylabel()
    assert fig._suptitle.get_text().startswith("abcd → xy\nrows: queries, columns: keys")


def test_decoder_rows_are_the_tokens_written_and_columns_the_tokens_read():
    maps = run([5, 6, 7], [1, 9, 10])
    fig = plot_attention(maps, ["1", "2", "3"], ["9", "7", "<eos>"], kinds=("decoder", "cross"))
    self_ax = next(ax for ax in fig.axes if ax.get_title().startswith("decoder self"))
    cross_ax = next(ax for ax in fig.axes if ax.get_title().startswith("cross"))
    assert labels_of(self_ax) == (["9", "7", "<eos>"], ["<bos>", "9", "7"])
    assert labels_of(cross_ax) == (["9", "7", "<eos>"], ["1", "2", "3"])
    # the row that writes '9' read only <bos>: the causal mask's empty upper triangle
    w = self_ax.images[0].get_array()
    assert w[0, 0] == pytest.approx(1.0) and np.all(w[0, 1:] == 0)
    with pytest.raises(ValueError, match="kinds must be among"):
        plot_attention(maps, ["1"], ["9"], kinds=("cross_attn",))


def test_pad_columns_are_shown_and_empty():
    tok = CharTokenizer("abc")
    src_ids = [tok.vocab.token_to_id(c) for c in "ab"] + [tok.pad_id] * 2
    maps = run(src_ids, [tok.bos_id, 5])
    src_labels = token_labels(tok, src_ids, keep_pad=True)
    assert src_labels == ["a", "b", "<pad>", "<pad>"] and token_labels(tok, src_ids) == ["a", "b"]
    fig = plot_attention(maps, src_labels, ["b", "<eos>"])
    for ax in fig.axes:
        if ax.images and not ax.get_title().startswith("decoder self"):
            w = ax.images[0].get_array()
            # nothing attends to <pad>
            assert w.shape[1] == 4 and np.all(w[:, 2:] == 0), ax.get_title()


def test_save_attention_writes_one_png_per_kind(tmp_path):
    maps = run([5, 6], [1, 9])
    files = save_attention(maps, ["a", "b"], ["x", "<eos>"], tmp_path, title="ab")
    assert [f.rsplit("/", 1)[1] for f in files] == [
        "attention_encoder_self_attn.png",
        "attention_decoder_self_attn.png",
        "attention_decoder_cross_attn.png",
    ]
    assert all((tmp_path / f).stat().st_size > 1000 for f in files)
    some = save_attention(maps, ["a", "b"], ["x", "<eos>"], tmp_path / "some", kinds=("cross",))
    assert [f.rsplit("/", 1)[1] for f in some] == ["attention_decoder_cross_attn.png"]


def test_the_rows_are_named_once_per_row_of_panels():
    """The heads of a layer share its queries: only the leftmost panel names them (text is most
    of matplotlib's drawing time), every panel keeps its column names."""
    maps = run([5, 6, 7], [1, 9, 10])
    fig = plot_attention(maps, ["1", "2", "3"], ["9", "7", "<eos>"], kinds=("cross",))
    first = [ax for ax in fig.axes if ax.images and ax.get_title().endswith("head 0")]
    others = [ax for ax in fig.axes if ax.images and not ax.get_title().endswith("head 0")]
    assert len(first) == 2 and len(others) == 2  # 2 layers × 2 heads
    assert all(labels_of(ax) == (["9", "7", "<eos>"], ["1", "2", "3"]) for ax in first)
    assert all(labels_of(ax) == ([], ["1", "2", "3"]) for ax in others)
    assert all(ax.images[0].get_array().shape == (3, 3) for ax in others)
