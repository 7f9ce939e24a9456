"""Checkpoints: mt.save / mt.load round trips, exact resume, and every kind of bad file."""

import json
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import nn
from minitensor.optim import lr_scheduler


def assert_same(a, b, where="obj"):
    """Equal structure, types, dtypes and bytes (NaN equal to NaN)."""
    assert type(a) is type(b), f"{where}: {type(a)} vs {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for (k, va), kb in zip(a.items(), b):
            assert type(k) is type(kb)
            assert_same(va, b[kb], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, mt.Tensor):
        assert a.requires_grad == b.requires_grad
        assert_same(a.numpy(), b.numpy(), where)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), where
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        ), where
    else:
        assert a == b, where


def test_round_trip_is_bit_exact(tmp_path):
    rng = np.random.default_rng(0)
    obj = {
        "model": OrderedDict(
            [
                ("w", rng.standard_normal((3, 4)).astype(np.float32)),
                ("b", np.float64([1e-300, -0.0, np.inf, np.nan])),
            ]
        ),
        "ints": np.arange(5, dtype=np.int32),
        "mask": np.array([[True, False]]),
        "half": rng.standard_normal(3).astype(np.float16),
        "empty": np.zeros((0, 2)),
        "scalar": np.float32(0.1),
        "tensor": mt.tensor([1.0, 2.0], requires_grad=True),
        "t64": mt.tensor([0.1], dtype=mt.float64),
        "state": {0: {"step": 7, "exp_avg": rng.standard_normal(2)}, 1: {}},
        "groups": [{"lr": 0.1, "betas": (0.9, 0.98), "nesterov": False, "params": [0, 1]}],
        "step": 2**70,
        "lr": 0.1 + 0.2,
        "neg_zero": -0.0,
        "nan": float("nan"),
        "inf": float("-inf"),
        "text": "héllo ✓",
        "none": None,
        "flag": True,
        "nested": [[], (), {}, [1, [2.5, "x"]]],
        3.5: "float key",
        None: "none key",
        "rng": mt.get_rng_state(),
    }
    path = tmp_path / "ckpt.npz"
    mt.save(obj, path)
    assert_same(obj, mt.load(path))
    assert_same(obj, mt.load(str(path)))


def test_any_file_name_and_standard_npz(tmp_path):
    path = tmp_path / "model.ckpt"  # np.savez would append .npz to a path: we don't
    mt.save({"a": np.ones(2)}, path)
    assert path.exists() and not (tmp_path / "model.ckpt.npz").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model.ckpt"]  # no temporary left over
    with np.load(path, allow_pickle=False) as npz:  # a plain .npz that numpy reads without pickle
        assert sorted(npz.files) == ["__structure__", "arr_0"]
        header = json.loads(npz["__structure__"].tobytes())
    assert header["format"] == "minitensor-checkpoint"


def test_save_refuses_what_needs_pickle(tmp_path):
    with pytest.raises(TypeError, match=r"obj\['bad'\] is an array of Python objects"):
        mt.save({"bad": np.array([{"a": 1}], dtype=object)}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match=r"obj\['f'\]\[1\] is a function"):
        mt.save({"f": [1, lambda: 0]}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="key of type tuple"):
        mt.save({(1, 2): 3}, tmp_path / "x.npz")
    assert not list(tmp_path.iterdir())  # nothing written


# ----------------------------------------------------------------------------- bad files


@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.npz"
    mt.save({"model": {"w": np.arange(1000, dtype=np.float32)}, "step": 3}, path)
    return path


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        mt.load(tmp_path / "nope.npz")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.npz"
    path.write_bytes(b"")
    with pytest.raises(mt.CheckpointError, match=r"empty\.npz.*the file is empty"):
        mt.load(path)


def test_not_an_npz(tmp_path):
    path = tmp_path / "text.npz"
    path.write_text("hello, I am not a checkpoint")
    with pytest.raises(mt.CheckpointError, match=r"text\.npz.*not an \.npz \(zip\) file"):
        mt.load(path)
    npy = tmp_path / "one.npy"
    np.save(npy, np.ones(3))
    with pytest.raises(mt.CheckpointError, match="a single .npy array"):
        mt.load(npy)


def test_truncated_file(good_file):
    data = good_file.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 100):
        good_file.write_bytes(data[:cut])
        with pytest.raises(mt.CheckpointError, match=r"good\.npz.*(truncated|damaged)"):
            mt.load(good_file)


def test_tampered_array_bytes(good_file):
    data = bytearray(good_file.read_bytes())
    pos = data.index(np.arange(1000, dtype=np.float32)[500:502].tobytes())
    data[pos] ^= 0xFF  # flip one byte of the array data
    good_file.write_bytes(bytes(data))
    with pytest.raises(mt.CheckpointError, match=r"good\.npz.*(CRC|damaged)"):
        mt.load(good_file)


def rewrite(path, members):
    """Write a zip of raw .npy members (what a tamperer could do, with valid CRCs)."""
    with zipfile.ZipFile(path, "w") as z:
        for name, arr in members.items():
            with z.open(name + ".npy", "w") as f:
                np.lib.format.write_array(f, arr, allow_pickle=True)


def members_of(path):
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def structure(text):
    return np.frombuffer(text.encode(), dtype=np.uint8)


def test_file_that_asks_for_pickle_is_refused(good_file, tmp_path):
    members = members_of(good_file)
    members["arr_0"] = np.array([{"evil": 1}, None], dtype=object)  # needs pickle to read
    rewrite(good_file, members)
    with pytest.raises(mt.CheckpointError, match=r"good\.npz.*needs pickle"):
        mt.load(good_file)
    plain = tmp_path / "plain.npz"
    np.savez(plain, x=np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(mt.CheckpointError, match="plain.npz"):
        mt.load(plain)


def test_npz_not_written_by_save(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, x=np.ones(2))
    with pytest.raises(mt.CheckpointError, match=r"no __structure__ member.*arrays: x"):
        mt.load(path)


def test_tampered_structure(good_file):
    members = members_of(good_file)
    header = json.loads(members["__structure__"].tobytes())

    def load_with(text_or_header, extra=None):
        m = dict(members)
        m["__structure__"] = structure(
            text_or_header if isinstance(text_or_header, str) else json.dumps(text_or_header)
        )
        m.update(extra or {})
        rewrite(good_file, m)
        return mt.load(good_file)

    with pytest.raises(mt.CheckpointError, match="not valid JSON"):
        load_with('{"format": "minitensor-checkpoint", "root"')
    with pytest.raises(mt.CheckpointError, match="not a minitensor checkpoint header"):
        load_with({"hello": 1})
    with pytest.raises(mt.CheckpointError, match="format version 99"):
        load_with({**header, "version": 99})
    wrong_shape = json.loads(json.dumps(header).replace("[1000]", "[10, 100]"))
    with pytest.raises(
        mt.CheckpointError,
        match=r"'arr_0' is <f4 \(1000,\) but the structure "
        r"says <f4 \(10, 100\)",
    ):
        load_with(wrong_shape)
    missing = json.loads(json.dumps(header).replace('"arr_0"', '"arr_7"'))
    with pytest.raises(mt.CheckpointError, match="'arr_7' is missing"):
        load_with(missing)
    with pytest.raises(mt.CheckpointError, match="unknown node type 'function'"):
        load_with({**header, "root": {"type": "function", "code": "import os"}})
    with pytest.raises(mt.CheckpointError, match="structure is malformed"):
        load_with({**header, "root": {"type": "dict", "entries": []}})
    with pytest.raises(mt.CheckpointError, match="bad non-finite float"):
        load_with({**header, "root": {"type": "float", "value": "1e400x"}})
    with pytest.raises(mt.CheckpointError, match="members the structure does not mention"):
        load_with(header, {"arr_1": np.zeros(3)})
    assert load_with(header)["step"] == 3  # and the untouched header still loads


# ----------------------------------------------------------------------------- models


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 16)
        self.drop = nn.Dropout(0.3)  # uses the RNG, so resuming must restore it
        self.norm = nn.LayerNorm(16)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        return self.out(self.norm(self.drop(F.gelu(self.hidden(x)))))


def test_wrong_model_checkpoint_leaves_model_untouched(tmp_path):
    path = tmp_path / "other.npz"
    mt.save({"model": nn.Sequential(nn.Linear(3, 8), nn.ReLU()).state_dict()}, path)
    net = Net()
    before = net.state_dict()
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(mt.load(path)["model"])
    msg = str(info.value)
    assert "missing keys (6)" in msg and "unexpected keys (2): 0.weight, 0.bias" in msg
    wrong_shape = Net().state_dict()
    wrong_shape["hidden.weight"] = np.zeros((16, 4), np.float32)
    mt.save({"model": wrong_shape}, path)
    with pytest.raises(
        RuntimeError,
        match=r"hidden.weight: checkpoint \(16, 4\) vs model "
        r"\(16, 3\)",
    ):
        net.load_state_dict(mt.load(path)["model"])
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[k])


def make_run(seed=0):
    mt.manual_seed(seed)
    model = Net()
    opt = mt.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = lr_scheduler.WarmupCosineLR(opt, warmup_steps=4, total_steps=20, min_lr=1e-4)
    return model, opt, sched


def train(model, opt, sched, steps):
    for _ in range(steps):
        x = mt.randn(16, 3)  # data from the shared RNG as well
        y = (x[:, :1] * x[:, 1:2]).detach()
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()


def test_resume_is_exact(tmp_path):
    model, opt, sched = make_run()
    train(model, opt, sched, 20)
    straight = model.state_dict()

    model, opt, sched = make_run()
    train(model, opt, sched, 10)
    path = tmp_path / "step10.npz"
    mt.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "rng": mt.get_rng_state(),
            "step": 10,
        },
        path,
    )
    mt.manual_seed(12345)  # disturb everything a resume must restore
    mt.randn(100)
    del model, opt, sched

    model, opt, sched = make_run(seed=99)  # fresh objects, different initial weights
    ckpt = mt.load(path)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    mt.set_rng_state(ckpt["rng"])
    assert ckpt["step"] == 10 and sched.last_epoch == 10
    train(model, opt, sched, 10)
    resumed = model.state_dict()
    assert list(resumed) == list(straight)
    for k in straight:
        np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)


def test_resume_without_rng_differs(tmp_path):
    """The control for the test above: dropout and data really depend on the RNG state."""
    model, opt, sched = make_run()
    train(model, opt, sched, 20)
    straight = model.state_dict()
    model, opt, sched = make_run()
    train(model, opt, sched, 10)
    state = (model.state_dict(), opt.state_dict(), sched.state_dict())
    model, opt, sched = make_run()
    model.load_state_dict(state[0])
    opt.load_state_dict(state[1])
    sched.load_state_dict(state[2])
    mt.manual_seed(7)
    train(model, opt, sched, 10)
    assert not np.array_equal(model.state_dict()["out.weight"], straight["out.weight"])


def test_numpy_scalars_keep_their_type(tmp_path):
    """np.float64 is a subclass of Python float; it must still come back as np.float64, as
    np.float32 does (optimizer and scheduler states hold numpy scalars)."""
    obj = {
        "f64": np.float64(0.1),
        "f32": np.float32(0.1),
        "i64": np.int64(-3),
        "b": np.bool_(True),
        "c128": np.complex128(1 - 2j),
        "f64_nan": np.float64("nan"),
        np.float64(2.5): "numpy key",
        "py": 0.1,
        "list": [np.float64(1e-300), 2.0],
    }
    mt.save(obj, tmp_path / "s.npz")
    assert_same(obj, mt.load(tmp_path / "s.npz"))
    model, opt, sched = make_run()
    train(model, opt, sched, 2)
    state = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}
    mt.save(state, tmp_path / "run.npz")
    assert_same(state, mt.load(tmp_path / "run.npz"))


# ----------------------------------------------------------------------------- durable save


def test_save_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", stat.S_ISDIR(os.fstat(fd).st_mode), os.fstat(fd).st_size))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.path.basename(src).startswith(".ckpt.npz.tmp-"), None))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    mt.save({"a": np.ones(1000)}, tmp_path / "ckpt.npz")
    size = (tmp_path / "ckpt.npz").stat().st_size
    assert events[:2] == [("fsync", False, size), ("replace", True, None)]  # file, then name
    assert len(events) == 3 and events[2][:2] == ("fsync", True)  # then the folder


@pytest.mark.parametrize("failure", [OSError("disk full"), KeyboardInterrupt()])
def test_failed_save_leaves_no_temporary_and_keeps_the_old_checkpoint(
    tmp_path, monkeypatch, failure
):
    path = tmp_path / "ckpt.npz"
    mt.save({"step": 1}, path)

    def failing_savez(f, **members):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise failure

    monkeypatch.setattr(np, "savez", failing_savez)
    with pytest.raises(type(failure)):
        mt.save({"step": 2}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]
    assert mt.load(path) == {"step": 1}


def test_temporary_of_a_killed_save_is_removed_by_the_next_save(tmp_path):
    """A process killed mid-write (SIGKILL, power cut) cannot clean up; its temporary file
    names its process id, and the next save to the same path removes it once that process is
    gone (a temporary of a save still running elsewhere is left alone)."""
    path = tmp_path / "ckpt.npz"
    script = textwrap.dedent(f"""
        import os, signal, sys
        import numpy as np
        sys.path.insert(0, {os.path.dirname(os.path.dirname(mt.__file__))!r})
        import minitensor as mt
        def killed_mid_write(f, **members):
            f.write(b"PK\\x03\\x04 half a checkpoint")
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        np.savez = killed_mid_write
        mt.save({{"step": 2}}, {str(path)!r})
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".ckpt.npz.tmp-"), left
    alive = tmp_path / f".ckpt.npz.tmp-{os.getpid()}-inprogress.npz"  # this process runs
    alive.write_bytes(b"PK\x03\x04")
    other = tmp_path / ".other.npz.tmp-999999999-x.npz"  # another file's
    other.write_bytes(b"PK\x03\x04")
    mt.save({"step": 3}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["ckpt.npz", alive.name, other.name]
    )
    assert mt.load(path) == {"step": 3}
