"""Draw every layer's and head's attention for an input you type, from a trained checkpoint.

    python demos/addition_task.py                      # train first (writes the checkpoint)
    python demos/attention_maps.py --input "123+456"
    python demos/attention_maps.py --input "999+1" --out runs/maps_999
    python demos/attention_maps.py --input "999+1" "123+456" "500+500"   # one folder per input
    python demos/attention_maps.py --checkpoint runs/copy/checkpoint.npz --input "abcdef"

The model answers with greedy decoding; its own answer is then replayed through the decoder
(teacher forcing on what it wrote), so the maps show what each position looked at while the
model produced that token. Three PNGs: encoder self-attention, decoder self-attention (note the
empty upper triangle: the causal mask) and cross-attention (which source digits each output
digit reads — for reversed sums, the units digits first).

Only our own .npz checkpoints are loaded (no pickle). It runs on the numpy backend: for one
example, loading numba and its compiled kernels takes longer than the arithmetic. Most of the
time left is matplotlib drawing the panels; several inputs in one run share the start-up.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
from transformer.decoding import greedy_decode  # noqa: E402
from transformer.tasks import AdditionTask, CopyTask, ReverseTask  # noqa: E402
from transformer.training import shift_right  # noqa: E402
from transformer.viz import save_attention, token_labels  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--checkpoint",
        default="runs/addition/checkpoint.npz",
        help="a checkpoint.npz written by addition_task.py or copy_task.py",
    )
    p.add_argument(
        "--input",
        nargs="+",
        default=["123+456"],
        help='e.g. "123+456" (or a string for a copy/reverse model); several: one subfolder each',
    )
    p.add_argument("--out", default="runs/attention_maps", help="folder for the PNGs")
    return p.parse_args(argv)


def task_from_checkpoint(ckpt):
    """Rebuild the task (and so the tokenizer and input format) a checkpoint was trained on."""
    extra = ckpt.get("extra") or {}
    name = str(extra.get("task", "addition-3"))
    if name.startswith("addition"):
        digits = int(name.split("-")[1]) if "-" in name else 3
        return AdditionTask(digits=digits, reverse_answer=bool(extra.get("reverse_answer", True)))
    cls = ReverseTask if name == "reverse" else CopyTask
    return cls(
        alphabet=str(extra.get("alphabet", "abcdefgh")), max_len=int(ckpt["config"]["max_len"]) - 2
    )


def encode_input(task, text):
    """The typed input → src ids (1, L_src), with a clear error for malformed input."""
    if isinstance(task, AdditionTask):
        m = re.fullmatch(r"\s*(\d+)\s*\+\s*(\d+)\s*", text)
        if not m or int(m.group(1)) >= task.high or int(m.group(2)) >= task.high:
            raise SystemExit(
                f"attention_maps: expected two numbers of at most {task.digits} digits "
                f"like '123+456', got {text!r}"
            )
        a, b = int(m.group(1)), int(m.group(2))
        src, _ = task.encode([a], [b])
        return src, (a, b)
    if not 1 <= len(text) <= task.max_len:
        raise SystemExit(
            f"attention_maps: this model reads 1 to {task.max_len} characters, got {text!r}"
        )
    src, _ = task.encode([text])
    return src, text


def main(argv=None):
    args = parse_args(argv)
    model, config, ckpt = common.load_model(args.checkpoint)
    task = task_from_checkpoint(ckpt)
    inputs = [(text, *encode_input(task, text)) for text in args.input]  # all checked first
    files = []
    # one example at a time: loading numba and its kernels would cost more than it saves
    with mt.kernels.use_backend("numpy"):
        for text, src, problem in inputs:
            out = args.out if len(inputs) == 1 else os.path.join(args.out, _folder_name(text))
            files += draw_one(model, task, src, problem, out)
    return files


def _folder_name(text):
    """A folder name for an input: '999+1' → '999+1', 'a b/c' → 'a_b_c'."""
    return re.sub(r"[^0-9A-Za-z+=._-]", "_", text.strip()) or "input"


def draw_one(model, task, src, problem, out):
    """Answer one input by greedy decoding, replay the answer through the decoder and write its
    three heatmap PNGs into `out`; print the answer and each module's sharpness."""
    tok = task.tokenizer
    pad = src == tok.pad_id
    with mt.no_grad():
        out_ids = np.asarray(
            greedy_decode(
                model,
                src,
                max_len=task.tgt_len,
                bos_id=tok.bos_id,
                eos_id=tok.eos_id,
                src_padding_mask=pad if pad.any() else None,
            )
        )
        tgt_in = shift_right(out_ids, tok.bos_id)
        model(src, tgt_in, src_padding_mask=pad if pad.any() else None)
    answer = tok.decode(out_ids[0])
    if isinstance(task, AdditionTask):
        print(task.describe(problem[0], problem[1], answer))
    else:
        print(f"{problem!r} → {answer!r} (expected {task.transform(problem)!r})")
    maps = model.attention_maps()
    # rows: the token each decoder position writes; <pad> columns shown (and empty) if any
    files = save_attention(
        maps,
        token_labels(tok, src[0], keep_pad=True),
        token_labels(tok, out_ids[0]),
        out,
        title=f"{tok.decode(src[0])} → {answer!r}",
    )
    for name, w in maps.items():
        top = w[0].max(axis=-1).mean()
        print(f"  {name:<28} weights {tuple(w.shape)}  mean of each row's largest weight {top:.2f}")
    print("wrote " + ", ".join(files))
    return files


if __name__ == "__main__":
    common.run(main)
