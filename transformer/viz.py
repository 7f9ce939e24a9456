"""Attention heatmaps: what every head of every layer looked at, for one example.

    model(src, tgt_in)                     # any forward; then {path: (B, h, L_q, L_k)}:
    maps = model.attention_maps()
    fig = plot_attention(maps, src_tokens=["1", "2", "3", "+", "4", "5", "6"],
                         tgt_tokens=["9", "7", "5", "0", "<eos>"])

A Transformer has three kinds of attention ("Attention Is All You Need", §3.2.3), and each is
drawn as rows of layers by columns of heads, rows = queries, columns = keys, all on one colour
scale from 0 to 1 (each row of weights sums to 1):

- **encoder self-attention**: source token → source token;
- **decoder self-attention** (causal): row t is the position that *writes* tgt_tokens[t]; it
  reads the tokens before it, ``<bos>, tgt_tokens[0], …, tgt_tokens[t-1]`` (teacher forcing
  shifts the target right by one), so the upper triangle is empty;
- **cross-attention**: row t (writing tgt_tokens[t]) → source token: which source positions
  each output token was computed from.

Labels decide what is drawn: give fewer labels than positions and the rest (padding) is cropped;
give ``<pad>`` labels and their columns are shown — empty when the padding mask was passed,
since nothing attends to ``<pad>``.

The figures are `matplotlib.figure.Figure` objects made without pyplot, so a script can make any
number without a display; in Jupyter a returned Figure shows inline (after ``import
matplotlib.pyplot`` has set up the inline backend).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

# kind: (stack, attention module name, title)
KINDS = {
    "encoder": ("encoder", "self_attn", "encoder self-attention"),
    "decoder": ("decoder", "self_attn", "decoder self-attention (causal)"),
    "cross": ("decoder", "cross_attn", "cross-attention (decoder → encoder memory)"),
}
PANEL_INCHES = 1.8  # each head's heatmap; the tick labels are sized to it
GAP_INCHES = 0.15  # between the heads of a row
LINE_INCHES = 9 / 72 * 1.4  # one line of 8–9 pt text, with its leading


def token_labels(tokenizer: Any, ids: Any, keep_pad: bool = False) -> list[str]:
    """Readable labels for one row of ids (specials in angle brackets). Stops at the first
    ``<pad>`` unless keep_pad (then every position is labelled, ``<pad>`` included)."""
    out = []
    for i in np.asarray(getattr(ids, "data", ids)).tolist():
        if i == tokenizer.pad_id and not keep_pad:
            break
        out.append(tokenizer.vocab.id_to_token(i))
    return out


def _layer_paths(maps, stack, module):
    """The maps of one kind in layer order: encoder.layers.0.self_attn, encoder.layers.1…"""
    paths = [p for p in maps if p.startswith(stack + ".") and p.endswith("." + module)]

    def layer(p):
        parts = p.split(".")
        return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0

    return sorted(paths, key=layer)


def _axis_labels(kind, src_tokens, tgt_tokens, bos):
    """(query labels, key labels, query axis name, key axis name) of one kind of attention."""
    written = list(tgt_tokens)
    if kind == "encoder":
        return list(src_tokens), list(src_tokens), "query (source)", "key (source)"
    if kind == "decoder":
        read = [bos] + written[:-1]
        return written, read, "writes", "reads (decoder input)"
    return written, list(src_tokens), "writes", "reads (source)"


def _panels(maps, kinds, src_tokens, tgt_tokens, bos):
    """[(kind, layer path, labels…)] for every layer of every kind present in maps."""
    panels = []
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"plot_attention: kinds must be among {tuple(KINDS)}, got {kind!r}")
        stack, module, _ = KINDS[kind]
        for path in _layer_paths(maps, stack, module):
            panels.append((kind, path) + _axis_labels(kind, src_tokens, tgt_tokens, bos))
    return panels


def plot_attention(
    maps: dict[str, np.ndarray],
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    *,
    example: int = 0,
    kinds: Sequence[str] = tuple(KINDS),
    bos: str = "<bos>",
    title: str = "",
    cmap: str = "viridis",
) -> Any:
    """Every layer and head of the chosen kinds of attention, for one example, as one Figure.

    maps: ``model.attention_maps()`` — {module path: weights (B, h, L_q, L_k)}.
    src_tokens: labels of the source positions (encoder queries and keys; cross-attention keys).
    tgt_tokens: labels of the tokens the decoder WRITES, one per decoder position (the
        model's output, e.g. ``9 7 5 0 <eos>``): decoder rows are labelled by what they write,
        decoder self-attention columns by what they read (``bos`` then tgt_tokens shifted).
    example: which batch row to draw. kinds: any of "encoder", "decoder", "cross".
    Returns a matplotlib Figure: one row of panels per layer of each kind, one column per head,
    and a colour bar (weights 0–1).
    """
    panels = _panels(maps, kinds, src_tokens, tgt_tokens, bos)
    if not panels:
        raise ValueError(
            f"plot_attention: no attention maps of kinds {tuple(kinds)} among "
            f"{sorted(maps)} (run a forward pass first: model.attention_maps())"
        )
    n_heads = max(np.asarray(maps[p[1]]).shape[1] for p in panels)
    title_lines = 2 + title.count("\n") if title else 1
    tall_keys = max(_label_inches(p[3]) for p in panels)
    fig, axes, cbar_ax = _panel_grid(len(panels), n_heads, title_lines, tall_keys)
    image = None
    for r, (kind, path, q_labels, k_labels, q_name, k_name) in enumerate(panels):
        weights = np.asarray(maps[path])[example]
        for h in range(n_heads):
            ax = axes[r][h]
            if h >= weights.shape[0]:
                ax.set_visible(False)
                continue
            # the heads of a row share its queries: their names are drawn once, on the left
            image = _heatmap(
                ax, weights[h][: len(q_labels), : len(k_labels)], q_labels if h == 0 else None,
                k_labels, cmap, n_rows=len(q_labels),
            )  # fmt: skip
            ax.set_title(
                f"{KINDS[kind][2].split(' (')[0]}\n{_layer_name(path)} · head {h}", fontsize=8
            )
            if h == 0:
                ax.set_ylabel(q_name, fontsize=8)
            ax.set_xlabel(k_name, fontsize=8)
    fig.colorbar(image, cax=cbar_ax, label="attention weight")
    legend = "rows: queries, columns: keys; each row sums to 1"
    fig.suptitle(f"{title}\n{legend}" if title else legend, fontsize=9)
    return fig


def _panel_grid(n_rows, n_cols, title_lines, tall_keys):
    """A figure sized in inches around n_rows × n_cols square panels and a colour bar.

    The margins are fixed sizes (text is a known number of lines at 8–9 pt), so nothing has
    to be measured: matplotlib's automatic layouts draw every label once more to measure it,
    which doubles the time a figure of small heatmaps takes to save."""
    from matplotlib.figure import Figure

    line = LINE_INCHES
    left, right = 0.8, 1.1  # query labels + axis name; the colour bar and its label
    below = 2 * line + tall_keys  # key labels + axis name, under every row of panels
    above = 2 * line + 0.05  # the panel's two-line title
    top = title_lines * line + 0.15
    width = left + n_cols * PANEL_INCHES + (n_cols - 1) * GAP_INCHES + right
    height = top + n_rows * (above + PANEL_INCHES + below) - above
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(
        n_rows, n_cols, squeeze=False,
        gridspec_kw=dict(
            left=left / width, right=1 - right / width,
            top=1 - (top + above) / height, bottom=below / height,
            wspace=GAP_INCHES / PANEL_INCHES, hspace=(above + below) / PANEL_INCHES,
        ),
    )  # fmt: skip
    bar = min(3.0, height - top - below) / height  # the colour bar's height, centred
    cbar_ax = fig.add_axes(
        (1 - (right - 0.25) / width, 0.5 - bar / 2, 0.15 / width, bar), label="<colorbar>"
    )
    return fig, axes, cbar_ax


def _label_inches(labels):
    """Height of a row of key labels: one line, or the longest label when they are turned."""
    return LINE_INCHES * (0.6 * max(len(str(s)) for s in labels) if _wide(labels) else 1)


def _layer_name(path):
    parts = path.split(".")
    return f"layer {parts[2]}" if len(parts) > 2 and parts[2].isdigit() else parts[0]


def _heatmap(ax, w, q_labels, k_labels, cmap, n_rows):
    """One panel; q_labels None leaves the rows unnamed (the panel to the left names them)."""
    image = ax.imshow(w, vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto")
    size = 8 if max(n_rows, len(k_labels)) <= 12 else 6
    ax.set_xticks(range(len(k_labels)))
    ax.set_xticklabels(k_labels, fontsize=size, rotation=90 if _wide(k_labels) else 0)
    ax.set_yticks(range(n_rows) if q_labels is not None else [])
    if q_labels is not None:
        ax.set_yticklabels(q_labels, fontsize=size)
    ax.tick_params(length=0)
    return image


def _wide(labels):
    return any(len(str(s)) > 2 for s in labels) and len(labels) > 4


def save_attention(
    maps: dict[str, np.ndarray],
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    out_dir: str | os.PathLike,
    *,
    example: int = 0,
    title: str = "",
    bos: str = "<bos>",
    kinds: Sequence[str] = tuple(KINDS),
) -> list[str]:
    """One PNG per kind of attention (``attention_encoder_self_attn.png``,
    ``attention_decoder_self_attn.png``, ``attention_decoder_cross_attn.png``) in out_dir, for
    the `kinds` that `maps` holds; returns the paths written. Arguments as for
    `plot_attention`."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for kind, (stack, module, label) in KINDS.items():
        if kind not in kinds or not _layer_paths(maps, stack, module):
            continue
        heading = f"{label}\n{title}" if title else label
        fig = plot_attention(
            maps, src_tokens, tgt_tokens, example=example, kinds=(kind,), bos=bos, title=heading
        )
        path = os.path.join(out_dir, f"attention_{stack}_{module}.png")
        fig.savefig(path, dpi=90)
        written.append(path)
    return written


__all__ = ["plot_attention", "save_attention", "token_labels", "KINDS"]
