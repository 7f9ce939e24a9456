"""Compile ahead (minitensor/kernels/compile_ahead.py): the helper process compiles a kernel's
parallel build into numba's cache while the serial build runs; the types cross the pipe as
JSON and come back as numba's own; the ownership trial waits for the helper."""

import json
import os
import subprocess
import sys
import textwrap
import time

import numba
import numpy as np
import pytest

from minitensor.kernels import compile_ahead as CA
from minitensor.kernels import ownership

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_described_types_are_numbas_own():
    x = np.zeros((3, 4), np.float32)
    frozen = np.zeros(5, np.int64)
    frozen.setflags(write=False)
    args = [x, x[:, ::2], x.T, x[0], frozen, np.zeros((), bool), np.float32(2), 3, 2.5, True]
    described = CA.describe(args)
    assert json.loads(json.dumps(described)) == described  # crosses the pipe as it is
    assert CA.numba_types(described) == tuple(numba.typeof(a) for a in args)


def test_an_argument_of_another_kind_is_not_described():
    assert CA.describe([np.zeros(3), "text"]) is None
    assert CA.describe([np.zeros(3), (1, 2)]) is None


class Answers(list):
    """What serve() writes, as the answers it parsed: the helper's stdout, in this process."""

    def write(self, text):
        self.append(json.loads(text))

    def flush(self):
        pass


def test_the_helper_answers_each_request_and_names_a_failure():
    """serve() in this process: a request for a kernel that is not there is answered not ok
    (the asking process then compiles the build itself), and the loop goes on."""
    out = Answers()
    request = {"module": "minitensor.kernels.softmax", "name": "no_such_kernel", "args": []}
    CA.serve([json.dumps(request)] * 2, out)
    assert out == [{"module": request["module"], "name": "no_such_kernel", "ok": False}] * 2


class _PipeEnd:
    """What _read_answers reads from: the helper process's stdout, here one end of a pipe."""

    def __init__(self, fd):
        self.stdout = os.fdopen(fd, "rb", buffering=0)


def test_answers_that_arrive_together_are_all_taken(monkeypatch):
    """Two answers in one chunk of the pipe, then one cut in two: each is taken as soon as
    its line is whole (a line-reading file would have kept the second of the first two in a
    buffer where select() does not look, and its build pending until the helper wrote again)."""
    read_end, write_end = os.pipe()
    keys = {("m", "a"), ("m", "b"), ("m", "c")}
    monkeypatch.setattr(
        CA,
        "_helper",
        {"process": _PipeEnd(read_end), "pid": os.getpid(), "pending": set(keys),
         "failed": False, "warm": True, "unread": b""},
    )  # fmt: skip
    answer = [json.dumps({"module": "m", "name": n, "ok": True}) + "\n" for n in "abc"]
    os.write(write_end, (answer[0] + answer[1]).encode())
    assert CA.ready("m", "a") and CA.ready("m", "b") and not CA.ready("m", "c")
    os.write(write_end, answer[2][:10].encode())
    assert not CA.ready("m", "c")
    os.write(write_end, answer[2][10:].encode())
    assert CA.ready("m", "c") and not CA.pending()
    os.close(write_end)
    CA._helper["process"].stdout.close()


def test_a_real_helper_s_answers_written_together_are_all_taken(monkeypatch):
    """A real helper answers two requests for kernels that are not there at once (both lines
    land in the pipe before this process looks): both builds stop being pending."""
    monkeypatch.setenv("MINITENSOR_COMPILE_AHEAD", "1")
    monkeypatch.setattr(
        CA, "_helper", {"process": None, "pid": None, "pending": set(), "failed": False}
    )
    for name in ("no_such_kernel", "nor_this_one"):
        assert CA.request("minitensor.kernels.softmax", name, [np.zeros(3)])
    deadline = time.monotonic() + 60
    time.sleep(0.5)  # the helper starts and writes both answers meanwhile
    while CA.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not CA.pending() and not CA._helper["failed"]
    CA._stop()


def test_a_kernel_a_function_makes_is_compiled_ahead_by_calling_it_again(monkeypatch):
    """The products' tile kernels are made by tile_stack_kernel(rows, vectors), not named in
    their module: the request says so (jit.Kernel.made_by), and the helper's serve() makes the
    kernel the same way and compiles its parallel build."""
    from minitensor.kernels import jit
    from minitensor.kernels.fast_matmul import products

    stack = products.tile_stack_kernel(*products._DEFAULT_TILE)
    asked = []
    monkeypatch.setattr(stack, "ahead", None)
    monkeypatch.setattr(stack, "_cached", lambda args: False)
    monkeypatch.setattr(CA, "enabled", lambda: True)
    monkeypatch.setattr(CA, "pending", lambda: False)
    monkeypatch.setattr(jit, "threads", lambda: 2)
    monkeypatch.setattr(CA, "request", lambda *message: asked.append(message) or False)
    x = np.ones((64, 8, 8, 16), np.float32)  # work ≥ jit.PARALLEL_MIN_WORK: a parallel call
    assert np.allclose(products.tiled_matmul(x, np.swapaxes(x, -1, -2)), 16.0)
    ((module, name, args, made_by),) = asked
    assert made_by == ("tile_stack_kernel", products._DEFAULT_TILE)
    request = {"module": module, "name": name, "args": CA.describe(args)}
    request["made_by"] = [made_by[0], list(made_by[1])]
    out = Answers()
    CA.serve([json.dumps(request)], out)
    assert out == [{"module": module, "name": name, "ok": True}]


def test_a_helper_that_dies_leaves_every_build_to_this_process(monkeypatch):
    """A real helper, killed while it has a request: pending() sees the pipe closed, forgets
    the request and turns compiling ahead off, so every build compiles here."""
    monkeypatch.setenv("MINITENSOR_COMPILE_AHEAD", "1")
    monkeypatch.setattr(
        CA, "_helper", {"process": None, "pid": None, "pending": set(), "failed": False}
    )
    assert CA.enabled()
    assert CA.request("minitensor.kernels.softmax", "no_such_kernel", [np.zeros(3)])
    CA._helper["process"].kill()
    CA._helper["process"].wait()
    assert not CA.pending() and not CA.enabled()
    assert CA.ready("minitensor.kernels.softmax", "no_such_kernel")


def test_the_trial_waits_while_a_build_is_compiled_ahead(monkeypatch):
    """No owner is timed while the helper compiles: the trial starts only when it is done,
    and a step during a later compile is not counted."""
    ownership.reset()
    compiling = [True]
    monkeypatch.setattr(CA, "pending", lambda: compiling[0])
    monkeypatch.setenv("MINITENSOR_CORE_OWNER", "trial")
    clock = iter(range(0, 10**6)).__next__  # 1 s a step: long enough to be tried
    for _ in range(ownership.WARMUP + 5):
        ownership.step_ended(clock)
    assert ownership.core_owner_trial()["state"] == "waiting"
    compiling[0] = False
    ownership.step_ended(clock)
    assert ownership.core_owner_trial()["state"] == "trying"
    for _ in range(ownership.BLOCK):
        ownership.step_ended(clock)
    counted = sum(len(t) for t in ownership.core_owner_trial()["times"].values())
    compiling[0] = True
    for _ in range(3):
        ownership.step_ended(clock)
    assert sum(len(t) for t in ownership.core_owner_trial()["times"].values()) == counted
    ownership.reset()


CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import minitensor.kernels as K
    from minitensor.kernels import bias_activation, compile_ahead

    rng = np.random.default_rng(0)
    h = rng.standard_normal((896, 512)).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    first = K.bias_activation_forward.numba(h, b, "relu")
    kernel = bias_activation._bias_relu_rows.build()
    state = kernel.ahead
    deadline = time.monotonic() + 120
    while kernel.ahead == "waiting" and time.monotonic() < deadline:
        time.sleep(0.05)
        again = K.bias_activation_forward.numba(h, b, "relu")
    later = K.bias_activation_forward.numba(h, b, "relu")
    same = all(np.array_equal(x, y) for x, y in zip(first, later))
    helper = compile_ahead._helper["process"]
    print(json.dumps({
        "first": state, "then": kernel.ahead, "parallel built": len(kernel.parallel.signatures),
        "same": same, "helper": helper is not None,
    }))
    """
)


def _child(cache_dir, script=CHILD, **env):
    """Run `script` in a fresh process with compiling ahead on and an own numba cache;
    (its last line of output as JSON, its stderr)."""
    env = {
        **os.environ,
        "MINITENSOR_COMPILE_AHEAD": "1",
        "NUMBA_CACHE_DIR": str(cache_dir),
        "NUMBA_NUM_THREADS": "2",
        "MINITENSOR_POLITE_THREADS": "0",
        "PYTHONPATH": ROOT,
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a parallel build needs two CPUs")
def test_a_fresh_cache_compiles_the_parallel_build_ahead_and_a_warm_one_does_not(tmp_path):
    """With an empty cache the first call runs the serial build while the helper compiles
    the parallel one; once it is in the cache the kernel runs it, with the same numbers. A
    second process finds it in the cache: nothing is sent, no helper starts."""
    cold, _ = _child(tmp_path)
    assert cold == {
        "first": "waiting",
        "then": "done",
        "parallel built": 1,
        "same": True,
        "helper": True,
    }
    warm, _ = _child(tmp_path)
    assert warm == {
        "first": "done",
        "then": "done",
        "parallel built": 1,
        "same": True,
        "helper": False,
    }


TRAINING = textwrap.dedent(
    """
    import json, time
    import numpy as np
    import minitensor as mt
    import minitensor.functional as F
    from minitensor.kernels import compile_ahead
    from transformer import Transformer, TransformerConfig

    mt.manual_seed(0)
    # large enough that its kernels run on all threads (jit.PARALLEL_MIN_WORK entries)
    cfg = TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=128, n_heads=4,
                            num_encoder_layers=1, num_decoder_layers=1, d_ff=256, dropout=0.1)
    model = Transformer(cfg)
    for m in model.modules():  # the fused attention (72 keys) rather than the weights' path
        if hasattr(m, "need_weights"):
            m.need_weights = False
    opt = mt.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 20, (64, 72)), rng.integers(1, 20, (64, 73))

    def step():
        opt.zero_grad()
        logits = model(src, tgt[:, :-1])
        F.cross_entropy(logits.reshape(-1, 20), tgt[:, 1:].reshape(-1)).backward()
        opt.step()

    sent, request = [], compile_ahead.request

    def counted(module, name, args, made_by=None):
        sent.append(name)
        return request(module, name, args, made_by)

    compile_ahead.request = counted
    step()
    deadline = time.monotonic() + 240
    # the products' routes are timed once the helper is done (jit.timings_would_mislead):
    # a candidate first run then may send its parallel build too
    while time.monotonic() < deadline:
        if not compile_ahead.pending():
            step()  # every build in place: this step times the routes
            if not compile_ahead.pending():
                break
        step()
    print(json.dumps({"sent": len(sent), "names": sent, "pending": compile_ahead.pending(),
                      "failed": compile_ahead._helper["failed"]}))
    """
)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a parallel build needs two CPUs")
def test_the_helper_compiles_every_parallel_build_a_training_step_sends(tmp_path):
    """A transformer's training step from an empty cache, with the fused attention, dropout
    and Adam: every parallel build it sends ahead compiles in the helper (none falls back
    with a message), and none is left pending."""
    result, stderr = _child(tmp_path, TRAINING, MINITENSOR_CORE_OWNER="numba")
    assert "compile ahead" not in stderr, stderr[-3000:]
    assert result["sent"] >= 5 and not result["pending"] and not result["failed"], result


WARMED = textwrap.dedent(
    """
    import json
    import numpy as np
    from numba.core import event
    import minitensor as mt
    import minitensor.functional as F
    from minitensor.kernels import warm_up
    from transformer import Transformer, TransformerConfig

    warm_up.serial_builds()  # the helper's first job on an empty cache, here in this process
    compiled = []

    class Listener(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)

        def on_end(self, ev):
            pass

    event.register("numba:compile", Listener())
    mt.use_deterministic_algorithms(True)  # as the demos run
    mt.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=32, n_heads=2,
                            num_encoder_layers=1, num_decoder_layers=1, d_ff=64, dropout=0.1)
    model = Transformer(cfg)
    opt = mt.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 20, (64, 7)), rng.integers(1, 20, (64, 6))
    for _ in range(2):
        opt.zero_grad()
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 20), tgt[:, 1:].reshape(-1),
                               label_smoothing=0.1)
        loss.backward()
        opt.step()
    print(json.dumps({"compiled": compiled}))
    """
)


def test_the_warm_up_compiles_every_serial_build_a_training_step_calls(tmp_path):
    """warm_up.serial_builds on an empty cache, then a Transformer's float32 training steps
    (dropout, label smoothing, Adam) on one thread: they compile nothing themselves — the
    warm-up's calls give the kernels the argument types a step gives them. A kernel whose
    wrapper changes what it passes fails this test until warm_up.py follows."""
    result, _ = _child(tmp_path, WARMED, MINITENSOR_COMPILE_AHEAD="0", NUMBA_NUM_THREADS="1")
    assert result["compiled"] == []


COLD = textwrap.dedent(
    """
    import json, time
    import numpy as np
    import minitensor.kernels as K
    from minitensor.kernels import compile_ahead

    K.softmax_forward.numba(np.ones((2, 3), np.float32))  # the first build of the process
    asked = compile_ahead.WARM_UP in compile_ahead._helper["pending"]
    deadline = time.monotonic() + 240
    while compile_ahead.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"asked": asked, "pending": compile_ahead.pending(),
                      "helper": compile_ahead._helper["process"] is not None,
                      "failed": compile_ahead._helper["failed"]}))
    """
)


def test_a_cold_cache_sends_the_warm_up_once_and_a_warm_one_does_not(tmp_path):
    """The first kernel build on an empty cache asks the helper for the warm-up, which
    answers when done (no fallback message); the next process finds Adam's build in the
    cache and starts no helper."""
    cold, stderr = _child(tmp_path, COLD, NUMBA_NUM_THREADS="1")
    assert "compile ahead" not in stderr, stderr[-3000:]
    assert cold == {"asked": True, "pending": False, "helper": True, "failed": False}
    warm, _ = _child(tmp_path, COLD, NUMBA_NUM_THREADS="1")
    assert warm == {"asked": False, "pending": False, "helper": False, "failed": False}


def test_the_helper_stops_its_warm_up_once_told_the_first_step_is_over(monkeypatch):
    """{"warm": "enough"} (sent after the asking process's first step) is seen while the
    warm-up runs — the lines are read on a thread of their own — and stops it between two
    builds; the warm-up is still answered, and the requests after it are served."""
    import time

    from minitensor.kernels import warm_up

    seen = []

    def serial_builds(stop):
        deadline = time.monotonic() + 10
        while not stop() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(stop())

    monkeypatch.setattr(warm_up, "serial_builds", serial_builds)
    out = Answers()
    request = {"module": "minitensor.kernels.softmax", "name": "no_such_kernel", "args": []}
    lines = [json.dumps({"warm": "serial builds"}), json.dumps({"warm": "enough"})]
    CA.serve(lines + [json.dumps(request)], out)
    assert seen == [True]
    module, name = CA.WARM_UP
    assert out == [
        {"module": module, "name": name, "ok": True},
        {"module": request["module"], "name": "no_such_kernel", "ok": False},
    ]


def test_the_warm_up_asks_before_each_build_whether_to_stop():
    from minitensor.kernels import warm_up

    asked = []
    assert warm_up.serial_builds(lambda: asked.append(1) or len(asked) > 2) == 2
    assert len(asked) == 3
