"""Helpers the demos share: checkpoints, curves, the graph picture (attention heatmaps are
the library's: `transformer.viz.plot_attention` / `save_attention`).

Nothing here is needed to understand the model; it is the plumbing that turns a trained model
into files a learner opens (PNG, SVG, .npz). Figures use matplotlib's Agg backend (no display).
"""

import json
import os
import shlex
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # so `python demos/x.py` works from a fresh checkout too
    sys.path.insert(0, ROOT)

# minitensor before numpy: it sets how long numpy's idle BLAS workers spin, which OpenBLAS
# reads as numpy loads (minitensor/config.py, "OpenBLAS's spin")
import minitensor as mt  # noqa: E402, I001
import numpy as np  # noqa: E402

# Every demo gives the same numbers on any number of threads (README, "Reproducibility"): the
# matrix products take one route chosen by shape instead of the fastest one timed on this run.
mt.use_deterministic_algorithms(True)


def run(main, resume_flag=None):
    """Run a demo's main(): Ctrl-C ends it with one line and exit status 130 (what a shell
    reports for a program stopped by SIGINT), not a traceback. When training was interrupted
    and saved (transformer.training.TrainingInterrupted), the line says how to continue: this
    command again with `resume_flag` added."""
    try:
        main()
        _exit_without_teardown()
    except KeyboardInterrupt as e:
        step, path = getattr(e, "step", None), getattr(e, "path", None)
        line = "interrupted" + (f" after step {step}" if step is not None else "")
        if path and resume_flag:
            argv = [a for a in sys.argv[1:] if a != resume_flag]
            command = shlex.join(["python", sys.argv[0], *argv, resume_flag])
            line += f"; saved {path}. Continue with: {command}"
        elif path:
            line += f"; saved {path}"
        print("\n" + line, file=sys.stderr, flush=True)
        sys.exit(130)


def _exit_without_teardown():
    """End the process once main() has returned: run the exit handlers (atexit: the helper
    process that compiles kernels ahead is stopped there), flush the output, and leave without
    the interpreter's teardown of every module, which here is mostly numba unloading LLVM:
    0.2 s at the end of every run that a finished demo has no use for."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def side_by_side(here, there, timeout=300):
    """Run two lists of jobs at once, `there` in a forked copy of this process, `here` in this
    one: each job is a function returning the list of files it wrote (a figure), and the files
    of both lists are returned, `there`'s first. Independent figures then take one core each,
    not one after the other. The copy only draws: it writes its files, sends their names back
    through a pipe and exits (os._exit: none of this process's exit handlers run twice). Where
    there is no fork (Windows) or only one CPU to run on, this process runs both lists one
    after the other; if the copy fails or takes longer than `timeout` seconds, this process
    runs `there` itself."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not hasattr(os, "fork") or (cpus or 1) < 2:
        return _run_jobs(there) + _run_jobs(here)
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy
        os.close(read_end)
        status = 1
        try:
            with os.fdopen(write_end, "w") as pipe:
                pipe.write(json.dumps(_run_jobs(there)))
            status = 0
        except BaseException:  # said here; this process then draws them itself
            import traceback

            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        try:
            written = _run_jobs(here)
        finally:  # the copy is waited for even when a job here raised
            theirs = _answer(pid, pipe, timeout)
    return (theirs if theirs is not None else _run_jobs(there)) + written


def _run_jobs(jobs):
    return [path for job in jobs for path in job()]


def _answer(pid, pipe, timeout):
    """The copy's list of files, once it has exited cleanly; None if it failed or is still
    running after `timeout` seconds (then it is stopped)."""
    import select
    import signal

    ready, _, _ = select.select([pipe], [], [], timeout)
    text = pipe.read() if ready else ""
    if not ready:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not ready or status != 0:
        return None
    return json.loads(text)


def matplotlib_pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------- checkpoints
def save_checkpoint(
    path,
    model,
    config,
    *,
    optimizer=None,
    scheduler=None,
    step=0,
    history=None,
    data_rng=None,
    extra=None,
):
    """Write everything needed to resume or inspect a run into one .npz (no pickle)."""
    ckpt = {
        "model": model.state_dict(),
        "config": config.to_dict(),
        "step": int(step),
        "rng": mt.get_rng_state(),
    }
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
    """(model, config, checkpoint dict) from a checkpoint written by save_checkpoint.

    A missing file ends the demo with one line that says what to run (SystemExit: no traceback,
    the demo did nothing wrong)."""
    from transformer import Transformer, TransformerConfig

    if not os.path.exists(path):
        raise SystemExit(
            f"no checkpoint at {path}: train first (python demos/addition_task.py, "
            f"or --checkpoint to name another file)"
        )
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
        ax2.plot(
            [e["step"] for e in evals],
            [100 * e[metric] for e in evals],
            "o-",
            color="tab:red",
            ms=3,
            label=metric_label,
        )
        ax2.set_ylim(-2, 102)
        ax2.set_ylabel(f"{metric_label} (%)", color="tab:red")
    ax.set_title("training curve")
    # fixed margins (inches: the axis labels and the title), not tight_layout, which draws the
    # figure once more to measure its text before the drawing that is saved
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.75 / width, bottom=0.5 / height, top=0.9)
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
