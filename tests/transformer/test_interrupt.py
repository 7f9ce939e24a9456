"""Ctrl-C loses nothing: `train` finishes the step under way, saves through its `checkpoint`
function and raises TrainingInterrupted; the addition demo saves OUT/checkpoint.npz
periodically and on Ctrl-C, prints one line saying how to continue, exits with 130 (the shell's
status for SIGINT), and `--resume` continues from the saved step. Every demo ends on Ctrl-C
with one line and 130, never a traceback.

The demos run in child processes that get a real SIGINT, as a terminal's Ctrl-C sends.
"""

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import minitensor as mt
from transformer import Transformer, TransformerConfig
from transformer.tasks import AdditionTask
from transformer.training import TrainingInterrupted, seq2seq_batch, train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--d-model", "16", "--heads", "2", "--layers", "1", "--batch-size", "16"]


def _tiny_run():
    mt.manual_seed(0)
    task = AdditionTask(digits=2)
    v = len(task.tokenizer)
    model = Transformer(TransformerConfig.tiny(v, v))
    rng = np.random.default_rng(0)
    return (
        model,
        mt.optim.Adam(model.parameters(), lr=1e-3),
        lambda step: seq2seq_batch(*task.batch(8, rng)),
    )


def test_train_saves_every_n_steps_and_on_ctrl_c_after_the_step_under_way():
    model, opt, batches = _tiny_run()
    saved = []

    def checkpoint(step, history):
        saved.append((step, history.last_step))
        if step == 6:  # Ctrl-C arrives during step 7's forward (the handler runs at once)
            original = model.forward

            def forward(*args, **kwargs):
                model.forward = original
                signal.raise_signal(signal.SIGINT)
                return original(*args, **kwargs)

            model.forward = forward
        return f"ckpt-{step}"

    with pytest.raises(TrainingInterrupted) as info:
        train(model, opt, batches, 50, checkpoint=checkpoint, checkpoint_every=3, quiet=True)
    assert isinstance(info.value, KeyboardInterrupt)
    assert (info.value.step, info.value.path) == (7, "ckpt-7")  # step 7 finished, then saved
    assert saved == [(3, 3), (6, 6), (7, 7)]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler put back


def test_without_a_checkpoint_function_ctrl_c_still_stops_after_a_whole_step():
    model, opt, batches = _tiny_run()
    steps = []

    def batch(step):
        steps.append(step)
        if step == 2:
            signal.raise_signal(signal.SIGINT)
        return batches(step)

    with pytest.raises(TrainingInterrupted, match="after step 2$") as info:
        train(model, opt, batch, 10, quiet=True)
    assert info.value.path is None and steps == [1, 2]


def test_train_off_the_main_thread_leaves_signals_alone():
    model, opt, batches = _tiny_run()
    out = []
    t = threading.Thread(target=lambda: out.append(train(model, opt, batches, 2, quiet=True)))
    t.start()
    t.join(120)
    assert out and out[0].last_step == 2


# ---- the demos, in child processes -------------------------------------------------------------


class _Demo:
    """A demo in a child process; its stderr (where the progress bar is) read as it comes."""

    def __init__(self, demo, *args):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join("demos", demo), *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.PIPE,  # open and silent: an interactive demo waits for Enter
        )  # fmt: skip
        self.err, self.out = [], []
        read_err = lambda: self.err.extend(iter(lambda: self.proc.stderr.read(1), ""))  # noqa: E731
        read_out = lambda: self.out.extend(iter(self.proc.stdout.readline, ""))  # noqa: E731
        self.readers = [threading.Thread(target=read_err), threading.Thread(target=read_out)]
        for t in self.readers:
            t.start()

    def wait_for(self, condition, seconds=300):
        deadline = time.monotonic() + seconds
        while not condition(self):
            assert self.proc.poll() is None, "".join(self.err)[-3000:]
            assert time.monotonic() < deadline, "the demo never got there"
            time.sleep(0.1)

    def training(self):
        """The progress bar has shown a step (tqdm prints '| 1/…' on stderr)."""
        return re.search(r"\| *[1-9]\d*/\d+", "".join(self.err)) is not None

    def interrupt(self):
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=300)
        for t in self.readers:
            t.join(60)
        return code, "".join(self.out), "".join(self.err)


@pytest.mark.slow
def test_ctrl_c_during_the_addition_demo_saves_and_resume_continues(tmp_path):
    out_dir = str(tmp_path / "run")
    ckpt = os.path.join(out_dir, "checkpoint.npz")
    args = ["--steps", "3000", "--checkpoint-every", "5", "--eval-every", "1000", "--no-figures",
            "--out", out_dir, *TINY]  # fmt: skip
    demo = _Demo("addition_task.py", *args)
    demo.wait_for(lambda d: os.path.exists(ckpt))  # the first periodic save: step 5
    code, out, err = demo.interrupt()
    assert code == 130, err
    assert "Traceback" not in err + out
    lines = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1, err
    match = re.fullmatch(
        r"interrupted after step (\d+); saved (.+)\. Continue with: (.+)", lines[0]
    )
    assert match, lines[0]
    step, path, command = int(match[1]), match[2], shlex.split(match[3])
    assert step >= 5 and path == ckpt
    assert command == ["python", os.path.join("demos", "addition_task.py"), *args, "--resume"]
    saved = mt.load(ckpt)
    assert int(saved["step"]) == step
    assert list(np.asarray(saved["history"]["steps"])) == list(range(1, step + 1))

    # the hint's command, with a budget that ends soon: it picks up at step + 1
    budget = ["--steps", str(step + 3), "--checkpoint-every", "0", "--quiet"]
    resumed = subprocess.run([sys.executable, *command[1:], *budget], cwd=ROOT,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"steps: {step + 3}" in resumed.stdout
    after = mt.load(ckpt)
    assert int(after["step"]) == step + 3
    assert list(np.asarray(after["history"]["steps"])) == list(range(1, step + 4))


DEMOS = {
    "copy_task.py": ["--steps", "100000", "--out", "{tmp}"],
    "ablations.py": ["--steps", "100000", "--out", "{tmp}"],
    "custom_op.py": ["--steps", "100000", "--out", "{tmp}"],
    "rnn_vs_transformer.py": ["--steps", "100000", "--no-figures", "--out", "{tmp}"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DEMOS))
def test_ctrl_c_in_a_demo_is_one_line_and_status_130(tmp_path, name):
    demo = _Demo(name, *[a.format(tmp=tmp_path) for a in DEMOS[name]])
    demo.wait_for(_Demo.training)
    code, out, err = demo.interrupt()
    assert code == 130, err
    assert "Traceback" not in err + out
    assert len([line for line in err.splitlines() if line.startswith("interrupted")]) == 1, err


@pytest.mark.slow
def test_ctrl_c_while_step_backward_waits_for_enter():
    demo = _Demo("step_backward.py", "--no-frames")
    demo.wait_for(lambda d: any("Enter: next step" in line for line in d.out))
    code, out, err = demo.interrupt()
    assert code == 130, err
    assert "Traceback" not in err + out
    assert err.strip().splitlines()[-1] == "interrupted"  # (after any compile notice)
