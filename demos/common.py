"""Helpers the demos share: checkpoints, attention heatmaps, curves, the graph picture.

Nothing here is needed to understand the model; it is the plumbing that turns a trained model
into files a learner opens (PNG, SVG, .npz). Figures use matplotlib's Agg backend (no display).
"""
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:          # so `python demos/x.py` works from a fresh checkout too
    sys.path.insert(0, ROOT)

# minitensor before numpy: it chooses the BLAS/numba thread settings, which only take effect
# before numpy loads (benchmarks/README.md, "Threads")
import minitensor as mt  # noqa: E402
import numpy as np  # noqa: E402


def matplotlib_pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# --------------------------------------------------------------------------- checkpoints
def save_checkpoint(path, model, config, *, optimizer=None, scheduler=None, step=0,
                    history=None, data_rng=None, extra=None):
    """Write everything needed to resume or inspect a run into one .npz (no pickle)."""
    ckpt = {"model": model.state_dict(), "config": config.to_dict(), "step": int(step),
            "rng": mt.get_rng_state()}
    if optimizer is not None:
        ckpt["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        ckpt["scheduler"] = scheduler.state_dict()
    if history is not None:
        ckpt["history"] = history.as_arrays()
        ckpt["history_evals"] = json.dumps(history.evals)
        ckpt["history_seconds"] = float(history.seconds)
    if data_rng is not None:
        ckpt["data_rng"] = json.dumps(data_rng.bit_generator.state)
    if extra:
        ckpt["extra"] = extra
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    mt.save(ckpt, path)
    return path


def load_model(path):
    """(model, config, checkpoint dict) from a checkpoint written by save_checkpoint."""
    from transformer import Transformer, TransformerConfig
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}: train first (python demos/addition_task.py)")
    ckpt = mt.load(path)
    config = TransformerConfig(**ckpt["config"])
    model = Transformer(config)
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, config, ckpt


def restore_history(ckpt):
    """The training.History stored in a checkpoint (for --resume)."""
    from transformer.training import History
    h = History()
    arrays = ckpt.get("history")
    if arrays is not None:
        h.steps = [int(s) for s in np.asarray(arrays["steps"])]
        h.losses = [float(x) for x in np.asarray(arrays["losses"])]
        h.lrs = [float(x) for x in np.asarray(arrays["lrs"])]
        h.evals = json.loads(ckpt.get("history_evals", "[]"))
        h.seconds = float(ckpt.get("history_seconds", 0.0))
    return h


def restore_data_rng(ckpt, seed):
    rng = np.random.default_rng(seed)
    if "data_rng" in ckpt:
        rng.bit_generator.state = json.loads(ckpt["data_rng"])
    return rng


# --------------------------------------------------------------------------- attention maps
KINDS = (("encoder", "self_attn", "encoder self-attention"),
         ("decoder", "self_attn", "decoder self-attention (causal)"),
         ("decoder", "cross_attn", "cross-attention (decoder → encoder memory)"))


def attention_heatmaps(maps, src_tokens, tgt_in_tokens, out_dir, example=0, title=""):
    """One PNG per kind of attention — rows are layers, columns are heads — for one example.

    maps: model.attention_maps() → {"encoder.layers.0.self_attn": (B, h, L_q, L_k), …}.
    src_tokens / tgt_in_tokens: the labels of the source and decoder-input positions.
    Returns the list of files written.
    """
    plt = matplotlib_pyplot()
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for stack, kind, label in KINDS:
        paths = sorted((p for p in maps if p.startswith(stack + ".") and p.endswith("." + kind)),
                       key=lambda p: int(p.split(".")[2]) if p.split(".")[2].isdigit() else 0)
        if not paths:
            continue
        q_labels = src_tokens if stack == "encoder" else tgt_in_tokens
        k_labels = tgt_in_tokens if kind == "self_attn" and stack == "decoder" else src_tokens
        n_heads = maps[paths[0]].shape[1]
        fig, axes = plt.subplots(len(paths), n_heads, squeeze=False,
                                 figsize=(2.3 * n_heads + 0.6, 2.3 * len(paths) + 0.8))
        for r, path in enumerate(paths):
            # drop the <pad> rows and columns: nothing attends to them or from them
            w = np.asarray(maps[path])[example][:, :len(q_labels), :len(k_labels)]
            for h in range(n_heads):
                ax = axes[r][h]
                ax.imshow(w[h], vmin=0.0, vmax=1.0, cmap="viridis")
                ax.set_xticks(range(len(k_labels)))
                ax.set_xticklabels(k_labels, fontsize=7)
                ax.set_yticks(range(len(q_labels)))
                ax.set_yticklabels(q_labels, fontsize=7)
                ax.set_title(f"layer {path.split('.')[2]} · head {h}", fontsize=8)
        fig.suptitle(f"{label}{' — ' + title if title else ''}\nrows: queries, columns: keys",
                     fontsize=9)
        fig.tight_layout()
        name = os.path.join(out_dir, f"attention_{stack}_{kind}.png")
        fig.savefig(name, dpi=90)
        plt.close(fig)
        written.append(name)
    return written


def token_labels(tokenizer, ids):
    """Readable labels for one row of ids (specials in angle brackets, no padding)."""
    out = []
    for i in np.asarray(ids).tolist():
        if i == tokenizer.pad_id:
            break
        out.append(tokenizer.vocab.id_to_token(i))
    return out


# --------------------------------------------------------------------------- curves
def plot_curves(history, path, metric="exact_match", metric_label="held-out exact match"):
    """Training loss (log scale) and the evaluation metric over steps, in one PNG."""
    plt = matplotlib_pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(history.steps, history.losses, color="tab:blue", lw=0.8, label="training loss")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (cross-entropy)", color="tab:blue")
    evals = [e for e in history.evals if metric in e]
    if evals:
        ax2 = ax.twinx()
        ax2.plot([e["step"] for e in evals], [100 * e[metric] for e in evals], "o-",
                 color="tab:red", ms=3, label=metric_label)
        ax2.set_ylim(-2, 102)
        ax2.set_ylabel(f"{metric_label} (%)", color="tab:red")
    ax.set_title("training curve")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- the graph
def draw_step_graph(loss, model, out_base, depth=2, title=None):
    """The collapsed graph of one training step: SVG when Graphviz's `dot` is installed, else
    the DOT text (render it later with `dot -Tsvg file.dot`). Returns the file written."""
    g = mt.viz.draw_graph(loss, depth=depth, model=model, show_grad=True, title=title)
    if shutil.which("dot"):
        path = out_base + ".svg"
        with open(path, "wb") as f:
            f.write(g.pipe(format="svg"))
    else:
        path = out_base + ".dot"
        with open(path, "w") as f:
            f.write(g.source)
    return path
