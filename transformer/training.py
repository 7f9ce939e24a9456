"""Training: teacher forcing, the loss over non-pad tokens, and a train/evaluate loop with
diagnostics.

Training an encoder-decoder with teacher forcing, as code:

1. the encoder reads the whole source at once;
2. the decoder reads the whole target *shifted right* (`shift_right`): for the target
   ``I am a dog <eos>`` it reads ``<bos> I am a dog``, so position t sees only tokens < t
   (the causal mask does the rest);
3. every position predicts its next token in parallel;
4. cross-entropy is averaged over the non-``<pad>`` positions (`sequence_loss`), then backward
   and an optimizer step.

`train` runs that loop for any of the three model shapes; what a batch holds says which:

- encoder-decoder (`Transformer`): `seq2seq_batch(src, tgt)` → ``model(src, tgt_in, masks…)``;
- decoder-only (`DecoderOnlyLM`): `lm_batch(ids)` → ``model(ids[:, :-1])`` predicts ``ids[:, 1:]``;
- encoder-only (`EncoderOnly`): `labeled_batch(ids, labels)` → ``model(ids)`` against labels
  (per token for masked-token training, −100 where nothing is predicted; or one per sequence).

With ``diagnostics=True`` it prints, every N steps, a debugging checklist as one table:
gradient norm per module, the largest attention score |QKᵀ·scale| and how one-hot the softmax
rows are per layer (`DIAGNOSTICS_LEGEND` says how to read them), and train vs validation loss.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor.typing import ArrayLike

PAD_ID, BOS_ID = 0, 1  # transformer.tokenizer.Vocab puts <pad> at 0 and <bos> at 1
IGNORE_INDEX = -100  # label value that adds nothing to an encoder-only loss


# --------------------------------------------------------------------------- teacher forcing
def shift_right(tgt: mt.Tensor | ArrayLike, bos_id: int = BOS_ID) -> np.ndarray:
    """Decoder input for teacher forcing: ``<bos>`` followed by the target without its last token.

    tgt (B, L) int ids, e.g. ``I am a dog <eos>`` → (B, L) ``<bos> I am a dog``. Position t of
    the result holds the token *before* target position t, so predicting tgt[:, t] from it is
    predicting the next token. (Where tgt is padded, the input gets the shifted ``<eos>`` or
    ``<pad>``; those positions predict ``<pad>`` and the loss ignores them.)
    """
    tgt = _ids(tgt, "shift_right")
    if tgt.ndim != 2:
        raise ValueError(f"shift_right: expected target ids of shape (B, L), got {tgt.shape}")
    out = np.empty_like(tgt)
    out[:, 0] = bos_id
    out[:, 1:] = tgt[:, :-1]
    return out


def _ids(x, where):
    a = np.asarray(x.numpy() if isinstance(x, mt.Tensor) else x)
    if a.dtype.kind not in "iu":
        raise TypeError(
            f"{where}: token ids must be integers, got dtype {a.dtype} of shape {a.shape}"
        )
    return a


def _padding_mask(ids, pad_id):
    """(B, L) bool, True where ids == pad_id (blocked); None when nothing is padded (saves work)."""
    mask = ids == pad_id
    return mask if mask.any() else None


def seq2seq_batch(
    src: mt.Tensor | ArrayLike,
    tgt: mt.Tensor | ArrayLike,
    bos_id: int = BOS_ID,
    pad_id: int = PAD_ID,
) -> dict[str, Any]:
    """An encoder-decoder batch: src (B, L_src), tgt (B, L_tgt) ending in ``<eos>`` (then pads).

    Returns a dict with ``src``, ``tgt_in`` (= shift_right(tgt)), ``tgt_out`` (= tgt, the labels)
    and the padding masks (True = pad, or None when there is no padding).
    """
    src, tgt = _ids(src, "seq2seq_batch"), _ids(tgt, "seq2seq_batch")
    if src.ndim != 2 or tgt.ndim != 2 or src.shape[0] != tgt.shape[0]:
        raise ValueError(
            f"seq2seq_batch: expected src (B, L_src) and tgt (B, L_tgt), got "
            f"{src.shape} and {tgt.shape}"
        )
    tgt_in = shift_right(tgt, bos_id)
    return {
        "src": src,
        "tgt_in": tgt_in,
        "tgt_out": tgt,
        "src_padding_mask": _padding_mask(src, pad_id),
        "tgt_padding_mask": _padding_mask(tgt_in, pad_id),
        "pad_id": pad_id,
    }


def lm_batch(ids: mt.Tensor | ArrayLike, pad_id: int = PAD_ID) -> dict[str, Any]:
    """A decoder-only (GPT-style) batch: ids (B, L) → inputs ids[:, :-1], labels ids[:, 1:]."""
    ids = _ids(ids, "lm_batch")
    if ids.ndim != 2 or ids.shape[1] < 2:
        raise ValueError(f"lm_batch: expected ids of shape (B, L) with L >= 2, got {ids.shape}")
    inputs = ids[:, :-1]
    return {
        "ids": inputs,
        "labels": ids[:, 1:],
        "padding_mask": _padding_mask(inputs, pad_id),
        "pad_id": pad_id,
    }


def labeled_batch(
    ids: mt.Tensor | ArrayLike, labels: mt.Tensor | ArrayLike, pad_id: int = PAD_ID
) -> dict[str, Any]:
    """An encoder-only (BERT-style) batch: ids (B, L) and labels (B, L) per token (−100 = not
    predicted) or (B,) one class per sequence."""
    ids, labels = _ids(ids, "labeled_batch"), _ids(labels, "labeled_batch")
    if ids.ndim != 2 or labels.shape[0] != ids.shape[0]:
        raise ValueError(
            f"labeled_batch: expected ids (B, L) and labels (B,) or (B, L), got "
            f"{ids.shape} and {labels.shape}"
        )
    return {
        "ids": ids,
        "labels": labels,
        "padding_mask": _padding_mask(ids, pad_id),
        "pad_id": IGNORE_INDEX,
    }


# --------------------------------------------------------------------------- loss
def sequence_loss(
    logits: mt.Tensor,
    targets: mt.Tensor | ArrayLike,
    pad_id: int = PAD_ID,
    label_smoothing: float = 0.0,
) -> mt.Tensor:
    """Mean cross-entropy over the positions whose target is not ``<pad>``.

    logits (B, L, V) or (N, V); targets (B, L) or (N,) int ids. Label smoothing ε spreads ε of
    each target's probability mass over the whole vocabulary (the paper used ε = 0.1).
    """
    targets = _ids(targets, "sequence_loss")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"sequence_loss: logits {logits.shape} and targets {targets.shape} "
            f"differ before the class axis"
        )
    # one row of V logits per position: cross_entropy takes (N, V), the classes on axis 1
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        targets.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


def token_accuracy(
    logits: mt.Tensor, targets: mt.Tensor | ArrayLike, pad_id: int = PAD_ID
) -> tuple[int, int]:
    """(correct, counted): argmax predictions equal to the target at non-pad positions."""
    pred = np.argmax(logits.numpy() if isinstance(logits, mt.Tensor) else logits, axis=-1)
    keep = targets != pad_id
    return int(((pred == targets) & keep).sum()), int(keep.sum())


def forward_batch(model: mt.nn.Module, batch: dict[str, Any]) -> tuple[mt.Tensor, Any]:
    """Run the model on a batch made by seq2seq_batch, lm_batch or labeled_batch:
    (logits, labels)."""
    if "src" in batch:
        logits = model(
            batch["src"],
            batch["tgt_in"],
            src_padding_mask=batch["src_padding_mask"],
            tgt_padding_mask=batch["tgt_padding_mask"],
        )
        return logits, batch["tgt_out"]
    if "ids" in batch:
        if batch["padding_mask"] is None:
            logits = model(batch["ids"])
        else:
            logits = model(batch["ids"], padding_mask=batch["padding_mask"])
        return logits, batch["labels"]
    raise ValueError(
        f"forward_batch: a batch needs 'src' (encoder-decoder) or 'ids' (decoder- or "
        f"encoder-only); got keys {sorted(batch)} — build it with seq2seq_batch, "
        f"lm_batch or labeled_batch"
    )


# --------------------------------------------------------------------------- evaluation
def evaluate(
    model: mt.nn.Module, batches: Iterable[dict[str, Any]], label_smoothing: float = 0.0
) -> dict[str, float]:
    """Loss and token accuracy over `batches` (an iterable of batch dicts), without gradients.

    Returns {"loss": mean over all counted tokens, "token_accuracy": fraction, "tokens": count}.
    The model is put in eval mode (no dropout) and back into its previous mode afterwards.
    """
    was_training = model.training
    model.eval()
    total_loss, correct, counted = 0.0, 0, 0
    try:
        with mt.no_grad():
            for batch in batches:
                logits, labels = forward_batch(model, batch)
                pad = batch["pad_id"]
                loss = sequence_loss(logits, labels, pad, label_smoothing)
                c, n = token_accuracy(logits, labels, pad)
                total_loss += loss.item() * n
                correct += c
                counted += n
    finally:
        model.train(was_training)
    if counted == 0:
        raise ValueError("evaluate: the batches hold no non-pad target tokens")
    return {"loss": total_loss / counted, "token_accuracy": correct / counted, "tokens": counted}


# --------------------------------------------------------------------------- diagnostics
def module_of(param_name: str) -> str:
    """The module a parameter is reported under in the diagnostics table.

    ``encoder.layers.0.self_attn.w_q.weight`` → ``encoder.layers.0.self_attn`` (a layer's
    sublayer); ``encoder.layers.0.norm1.weight`` → ``encoder.layers.0.norms`` (a layer's
    LayerNorms share one row); ``src_embed.token.weight`` → ``src_embed.token``;
    ``decoder.norm.weight`` → ``decoder.norm``.
    """
    parts = param_name.split(".")[:-1] or [param_name]
    for i, p in enumerate(parts):
        if p.isdigit():
            sub = parts[i + 1] if i + 1 < len(parts) else ""
            if sub.startswith("norm"):
                return ".".join(parts[: i + 1] + ["norms"])
            return ".".join(parts[: i + 2])
    return ".".join(parts[:2])


def grad_norms_by_module(model: mt.nn.Module) -> dict[str, float]:
    """{module: L2 norm of the gradients of all its parameters}, from mt.nn.utils.grad_norms."""
    squares = {}
    for name, norm in mt.nn.utils.grad_norms(model).items():
        key = module_of(name)
        squares[key] = squares.get(key, 0.0) + float(norm) ** 2
    return {k: math.sqrt(v) for k, v in squares.items()}


def score_ranges(model: mt.nn.Module) -> dict[str, tuple[float, float]]:
    """{attention module: (max |score|, saturation)} of the model's last forward, if it records
    them (model.score_stats()). The scores QKᵀ·scale lie in [−max, max]; saturation is the mean
    over rows of the largest softmax weight (1.0: each row puts all its weight on one key)."""
    stats = getattr(model, "score_stats", None)
    if stats is None:
        return {}
    out = {}
    for path, s in (stats() or {}).items():
        if isinstance(s, dict) and "max_abs_score" in s:
            out[path] = (float(s["max_abs_score"]), float(s.get("max_weight_mean", float("nan"))))
    return out


def diagnostics_table(
    step: int,
    grad_norms: dict[str, float],
    scores: dict[str, tuple[float, float]],
    train_loss: float,
    val: float | None = None,
    extra: dict[str, Any] | None = None,
    order: Iterable[str] | None = None,
    legend: bool = True,
) -> str:
    """The compact table `train` prints: one row per module, then the losses.

    order: module paths in data-flow order (``[name for name, _ in model.named_modules()]``);
    rows follow it, so the table reads from the embeddings to the output layer.
    legend: end with DIAGNOSTICS_LEGEND, what the columns mean (`train` prints it under its
    first table only: a paragraph after every table buried the numbers).
    """
    rank = {name: i for i, name in enumerate(order or [])}

    def position(row):  # "….norms" rows sit where their layer's first norm does
        key = row[: -len("norms")] + "norm1" if row.endswith(".norms") else row
        return (rank.get(key, rank.get(row, len(rank))), row)

    rows = sorted(set(grad_norms) | set(scores), key=position)
    width = max([len(r) for r in rows] + [len("module")])
    lines = [
        f"── diagnostics at step {step} " + "─" * max(0, width + 22 - len(str(step))),
        f"{'module':<{width}}  {'grad norm':>10}  {'max|score|':>10}  {'saturation':>10}",
    ]
    for r in rows:
        g = f"{grad_norms[r]:10.3g}" if r in grad_norms else f"{'':>10}"
        score, sat = scores[r] if isinstance(scores.get(r), tuple) else (scores.get(r), None)
        s = f"{score:10.3g}" if score is not None else f"{'':>10}"
        t = f"{sat:10.2f}" if sat is not None else f"{'':>10}"
        alarm = "  ⚠ scores in the hundreds" if score is not None and score >= SCORE_ALARM else ""
        lines.append(f"{r:<{width}}  {g}  {s}  {t}{alarm}")
    summary = f"train loss {train_loss:.4f}"
    if val is not None:
        summary += (
            f" | val loss {val['loss']:.4f} | val token acc {100 * val['token_accuracy']:.1f}%"
        )
        gap = val["loss"] - train_loss
        if gap > 0.5 * max(train_loss, 1e-3) and gap > 0.05:
            summary += "  (val ≫ train: over-fitting?)"
    for k, v in (extra or {}).items():
        summary += " | " + _fmt(k, v)
    lines.append(summary)
    if legend:
        lines.append(DIAGNOSTICS_LEGEND)
    return "\n".join(lines)


# What the columns mean, from what healthy and broken runs show (the README's ablations of the
# addition model, 600 steps): a healthy model's scores reach 5–30 — sharp attention it learned —
# with rows' largest weight ≈ 0.7 on average; without 1/√d_k the scores are 24–42 (overlapping)
# but the rows are ≈ 0.9, near one-hot, and it does not learn; ×√d_model on N(0, 1) embeddings
# gives scores in the hundreds. So a score is flagged only in the hundreds, and saturation is
# read together with the loss.
SCORE_ALARM = 100.0
DIAGNOSTICS_LEGEND = (
    "(grad norm: of the module's parameters this step. max|score|: the largest |QKᵀ·scale| the "
    "softmax saw; a trained model's reach tens — sharp attention it learned — while hundreds "
    f"(⚠ from {SCORE_ALARM:g}) mean oversized embeddings or weights. saturation: the mean "
    "of each row's largest weight, 1.0 = one-hot; healthy runs sit near 0.7, and rows near 1 "
    "while the loss is still high are a softmax saturated before it learned, as without 1/√d_k)"
)


# --------------------------------------------------------------------------- the loop
def current_lr(optimizer: Any) -> float:
    """The learning rate of the optimizer's first parameter group (or its .lr)."""
    groups = getattr(optimizer, "param_groups", None)
    if groups:
        return float(groups[0]["lr"])
    return float(getattr(optimizer, "lr", float("nan")))


class History:
    """What `train` records: per step ``steps``, ``losses``, ``lrs``; every evaluation a dict in
    ``evals`` (``step`` plus whatever eval_fn returned, and ``val_loss`` with val_batches);
    ``seconds`` of wall-clock time, ``stopped_early``, and ``trace`` if one step was traced."""

    def __init__(self) -> None:
        self.steps, self.losses, self.lrs, self.evals = [], [], [], []
        self.seconds = 0.0
        self.stopped_early = False
        self.trace = None
        self.legend_shown = False  # the diagnostics legend is printed once, under the first table

    @property
    def last_step(self) -> int:
        return self.steps[-1] if self.steps else 0

    def as_arrays(self) -> dict[str, np.ndarray]:
        """For saving in a checkpoint (.npz): numbers only."""
        out = {
            "steps": np.array(self.steps),
            "losses": np.array(self.losses),
            "lrs": np.array(self.lrs),
        }
        keys = sorted({k for e in self.evals for k, v in e.items() if isinstance(v, (int, float))})
        for k in keys:
            out[f"eval_{k}"] = np.array([e.get(k, np.nan) for e in self.evals], dtype=np.float64)
        return out


def train_step(
    model: mt.nn.Module,
    optimizer: Any,
    batch: dict[str, Any],
    label_smoothing: float = 0.0,
    max_grad_norm: float | None = None,
) -> tuple[float, int, mt.Tensor]:
    """One step of teacher-forced training: forward, loss, backward, (clip), optimizer step.

    Returns (loss value, number of target tokens counted, the loss tensor).
    """
    logits, labels = forward_batch(model, batch)
    loss = sequence_loss(logits, labels, batch["pad_id"], label_smoothing)
    optimizer.zero_grad()
    loss.backward()
    if max_grad_norm is not None:
        mt.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return loss.item(), int((labels != batch["pad_id"]).sum()), loss


Batch = dict[str, Any]  # what seq2seq_batch, lm_batch and labeled_batch return


def train(model: mt.nn.Module, optimizer: Any, batches: Callable[[int], Batch] | Iterable[Batch],
          steps: int, *, scheduler: Any = None, label_smoothing: float = 0.0,
          max_grad_norm: float | None = None,
          eval_fn: Callable[[mt.nn.Module], dict[str, Any]] | None = None,
          eval_every: int | Callable[[int], bool] = 0,
          stop_when: Callable[[dict[str, Any]], bool] | None = None,
          val_batches: Iterable[Batch] | None = None, diagnostics: bool = False,
          diagnostics_every: int = 100, trace: bool = False, quiet: bool = False,
          start_step: int = 0, history: History | None = None, desc: str = "train",
          print_fn: Callable[[str], None] | None = None,
          checkpoint: Callable[[int, History], str | None] | None = None,
          checkpoint_every: int = 0) -> History:  # fmt: skip
    """Train `model` for up to `steps` optimizer steps (counting from `start_step`).

    batches: a function ``step → batch`` (fresh data each step, as the addition demo does) or
        an iterable of batches (cycled when exhausted); batches come from seq2seq_batch,
        lm_batch or labeled_batch.
    scheduler: stepped once after every optimizer step.
    eval_fn: ``model → dict of metrics`` (e.g. held-out exact match from greedy decoding), run
        after the last step and every `eval_every` steps — an int (0: never) or a function
        ``step → bool``; `stop_when(metrics)` → True stops early.
    val_batches: a fixed list of batches; their loss is the "val loss" in evals and diagnostics.
    diagnostics: every `diagnostics_every` steps print per-module gradient norms, attention
        score ranges per layer (model.score_stats()) and train vs validation loss.
    trace: run the first step inside ``mt.viz.trace()``, which prints every op of the forward
        with its module scope, shapes and value range (not when quiet); the records are kept in
        ``history.trace.records``.
    quiet: no progress bar and no printing.
    checkpoint: ``(step, history) → path`` that saves the run (e.g. with mt.save), called every
        `checkpoint_every` steps and on Ctrl-C. Ctrl-C lets the step under way finish (a step
        cut halfway leaves some weights updated and others not), saves, and raises
        `TrainingInterrupted` (a KeyboardInterrupt) naming the step and the file; a second
        Ctrl-C interrupts at once.

    Returns a `History`. The progress bar shows the loss (smoothed), lr, examples/s and tokens/s.
    """
    history = history if history is not None else History()
    get_batch = _batch_source(batches)
    bar, say = _progress_bar(start_step, steps, desc, quiet, print_fn)
    model.train()
    smoothed, t_start = None, time.perf_counter()
    seconds_before = history.seconds
    try:
        with _DeferredInterrupt() as interrupt:
            for step in range(start_step + 1, start_step + steps + 1):
                smoothed, stop = _train_one(
                    model, optimizer, get_batch(step), step, history, bar, say, smoothed,
                    scheduler, label_smoothing, max_grad_norm, trace, quiet, eval_fn,
                    eval_every, stop_when, val_batches, diagnostics, diagnostics_every,
                    step == start_step + steps,
                )  # fmt: skip
                if stop:
                    _complete(bar, desc)
                    break
                history.seconds = seconds_before + (time.perf_counter() - t_start)
                _checkpoint_or_stop(checkpoint, checkpoint_every, step, history, interrupt)
    finally:
        bar.close()
        history.seconds = seconds_before + (time.perf_counter() - t_start)
    return history


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped `train` after a whole step: `.step` is the last step done, `.path` the
    checkpoint saved then (None without a `checkpoint` function)."""

    def __init__(self, step: int, path: str | None) -> None:
        where = f"; saved {path}" if path else ""
        super().__init__(f"training interrupted after step {step}{where}")
        self.step, self.path = step, path


class _DeferredInterrupt:
    """While training, Ctrl-C (SIGINT) only sets `hit`; the loop ends after the step under way.
    A second Ctrl-C interrupts at once. Only the main thread receives signals, and a handler
    someone else installed is left alone: then Ctrl-C interrupts as usual."""

    def __enter__(self):
        self.hit, self.previous = False, None
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        self.hit = True
        signal.signal(signal.SIGINT, self.previous)

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def _checkpoint_or_stop(checkpoint, every, step, history, interrupt):
    """Save every `every` steps and on Ctrl-C; after a Ctrl-C raise TrainingInterrupted."""
    path = None
    if checkpoint is not None and (interrupt.hit or (every and step % every == 0)):
        path = checkpoint(step, history)
    if interrupt.hit:
        raise TrainingInterrupted(step, path)


def _train_one(
    model, optimizer, batch, step, history, bar, say, smoothed, scheduler, label_smoothing,
    max_grad_norm, trace, quiet, eval_fn, eval_every, stop_when, val_batches, diagnostics,
    diagnostics_every, last,
):  # fmt: skip
    """One step of `train`'s loop: the step, the progress bar, evaluation and diagnostics when
    due. Returns (smoothed loss, whether stop_when says to stop)."""
    t0 = time.perf_counter()
    loss, n_tokens = _step_once(
        model, optimizer, batch, step, history, trace, quiet, label_smoothing, max_grad_norm
    )
    lr = current_lr(optimizer)
    if scheduler is not None:
        scheduler.step()
    smoothed = loss if smoothed is None else 0.9 * smoothed + 0.1 * loss
    dt = max(time.perf_counter() - t0, 1e-9)
    _record_step(history, bar, step, loss, lr, smoothed, batch, n_tokens, dt)
    want_eval = bool(eval_every) and (_eval_due(eval_every, step) or last)
    want_diag = diagnostics and step % diagnostics_every == 0
    metrics = _evaluate_and_report(
        model, step, smoothed, want_eval, want_diag, history, say,
        eval_fn, val_batches, label_smoothing
    )  # fmt: skip
    stop = bool(want_eval and stop_when is not None and metrics is not None and stop_when(metrics))
    history.stopped_early = history.stopped_early or stop
    return smoothed, stop


def _step_once(
    model, optimizer, batch, step, history, trace, quiet, label_smoothing, max_grad_norm
):
    """`train_step`, inside ``mt.viz.trace()`` the first time when `trace` asks for it;
    (loss, number of target tokens). A loss that is not finite stops training with the step."""
    if trace and history.trace is None:
        with _viz_trace(quiet) as tracer:
            loss, n_tokens, _ = train_step(model, optimizer, batch, label_smoothing, max_grad_norm)
        history.trace = tracer
    else:
        loss, n_tokens, _ = train_step(model, optimizer, batch, label_smoothing, max_grad_norm)
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"train: the loss became {loss} at step {step}; lower the "
            f"learning rate or run under mt.detect_anomaly() to find the op"
        )
    return loss, n_tokens


def _eval_due(eval_every, step):
    """Whether `train` evaluates after `step` (see its `eval_every`)."""
    return bool(eval_every(step)) if callable(eval_every) else step % eval_every == 0


def _progress_bar(start_step, steps, desc, quiet, print_fn):
    """tqdm's bar over the run's steps, and the function that prints beside it."""
    from tqdm.auto import tqdm

    bar = tqdm(total=start_step + steps, initial=start_step, desc=desc, disable=quiet,
               dynamic_ncols=True, mininterval=0.5, leave=True)  # fmt: skip
    say = print_fn or (tqdm.write if not quiet else (lambda *a, **k: None))
    return bar, say


def _record_step(history, bar, step, loss, lr, smoothed, batch, n_tokens, dt):
    """Append the step to `history` and show it on the progress bar (dt: seconds it took)."""
    n_examples = len(batch["src"] if "src" in batch else batch["ids"])
    history.steps.append(step)
    history.losses.append(loss)
    history.lrs.append(lr)
    bar.update(1)
    bar.set_postfix_str(
        f"loss {smoothed:.4f} lr {lr:.2e} {n_examples / dt:,.0f} ex/s {n_tokens / dt:,.0f} tok/s",
        refresh=False,
    )


def _evaluate_and_report(
    model, step, smoothed, want_eval, want_diag, history, say, eval_fn, val_batches, label_smoothing
):
    """Run the evaluation and/or the diagnostics this step asks for, record the evaluation in
    `history`, print them; the metrics dict (None when neither was due)."""
    if want_diag:
        # read these now: evaluation below runs forwards of its own (grads survive step())
        grads, scores = grad_norms_by_module(model), score_ranges(model)
    if not (want_eval or want_diag):
        return None
    metrics, val = {"step": step, "train_loss": smoothed}, None
    if val_batches is not None:
        val = evaluate(model, val_batches, label_smoothing)
        metrics["val_loss"] = val["loss"]
    if want_eval and eval_fn is not None:
        metrics.update(eval_fn(model))
    if want_eval:
        history.evals.append(metrics)
        shown = {k: v for k, v in metrics.items() if k not in ("step", "train_loss")}
        if shown and not want_diag:
            say(f"step {step}: " + ", ".join(_fmt(k, v) for k, v in shown.items()))
    if want_diag:
        extra = {k: v for k, v in metrics.items() if k not in ("step", "train_loss", "val_loss")}
        say(
            diagnostics_table(
                step,
                grads,
                scores,
                smoothed,
                val,
                extra,
                order=[name for name, _ in model.named_modules()],
                legend=not history.legend_shown,
            )
        )
        history.legend_shown = True
    return metrics


def _complete(bar, desc):
    """Close the bar as done at the step where the target was reached: its total becomes that
    step, so it ends at 100% (green in Jupyter, whose bar turns red when closed short of its
    total — the sign of an error, which reaching the target is not)."""
    bar.total = bar.n
    widgets = getattr(bar, "container", None)  # tqdm.notebook: the progress widget's max
    if widgets is not None:
        widgets.children[1].max = bar.n
    bar.set_description(f"{desc} (target reached)", refresh=False)
    bar.refresh()


def _fmt(k, v):
    if isinstance(v, float):
        return f"{k} {100 * v:.1f}%" if ("acc" in k or "match" in k) else f"{k} {v:.4f}"
    return f"{k} {v}"


def _batch_source(batches):
    if callable(batches):
        return batches
    stored = list(batches) if not hasattr(batches, "__next__") else None
    it = iter(batches)

    def get(step):
        nonlocal it
        if stored is not None:
            return stored[(step - 1) % len(stored)]
        return next(it)

    return get


def _viz_trace(quiet):
    """mt.viz.trace(): one line per op (scope, op, shapes, value range, saturation marks)."""
    from minitensor import viz

    return viz.trace(quiet=quiet)
