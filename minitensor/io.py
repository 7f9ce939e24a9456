"""Checkpoints without pickle: `mt.save(obj, path)` and `mt.load(path)`.

A checkpoint is an ordinary .npz (zip) file. Each array is one member (``arr_0.npy``, …) and
the nested structure — dicts, lists, tuples, strings, numbers, bools, None — is one JSON
member (``__structure__.npy``, its UTF-8 bytes as a uint8 array) that refers to the arrays by
member name. Loading uses ``allow_pickle=False`` throughout, so opening a checkpoint never
runs code, and a file that would need pickle is refused.

    mt.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "rng": mt.get_rng_state(), "step": 1200},
            "ckpt.npz")
    ckpt = mt.load("ckpt.npz")
    model.load_state_dict(ckpt["model"])

Round trips are bit-exact: arrays keep dtype, shape and bytes; floats are written by
``repr`` (which reads back to the same double); tuples stay tuples and dict keys keep their
type and order.
"""
import json
import math
import os
import tempfile
import zipfile
from collections import OrderedDict

import numpy as np

from .tensor import Tensor

FORMAT = "minitensor-checkpoint"
VERSION = 1
_STRUCTURE = "__structure__"


class CheckpointError(ValueError):
    """A checkpoint file cannot be read safely (truncated, tampered, not a checkpoint, or it
    asks for pickle). The message names the file and what is wrong."""


# ----------------------------------------------------------------------------- save

def save(obj, path):
    """Write `obj` (nested dicts/lists/tuples of Tensors, numpy arrays, numbers, strings,
    bools, None) to `path` as a .npz checkpoint. The file is written under a temporary name
    and then renamed, so a crash mid-save never leaves a half-written checkpoint at `path`."""
    path = os.fspath(path)
    arrays = {}
    root = _encode(obj, arrays, "obj")
    header = {"format": FORMAT, "version": VERSION, "root": root}
    text = json.dumps(header, allow_nan=False, ensure_ascii=False)
    members = dict(arrays)
    members[_STRUCTURE] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:     # a file object: np.savez must not append ".npz"
            np.savez(f, **members)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)      # mkstemp made it private; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _encode(obj, arrays, where):
    """The JSON form of obj. Arrays go into `arrays`; `where` names the spot for errors."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    if isinstance(obj, float):
        # JSON has no NaN/Inf; json writes them as bare words (which it reads back), but a
        # tagged form keeps the file standard JSON
        return obj if math.isfinite(obj) else {"type": "float", "value": repr(obj)}
    if isinstance(obj, (Tensor, np.ndarray, np.generic)):
        kind = "tensor" if isinstance(obj, Tensor) else (
            "scalar" if isinstance(obj, np.generic) else "ndarray")
        arr = obj.data if isinstance(obj, Tensor) else np.asarray(obj)
        if arr.dtype.hasobject:
            raise TypeError(f"mt.save: {where} is an array of Python objects ({arr.dtype}); "
                            f"storing it would need pickle, which checkpoints never use")
        key = f"arr_{len(arrays)}"
        arrays[key] = arr
        node = {"type": kind, "key": key, "dtype": arr.dtype.str, "shape": list(arr.shape)}
        if isinstance(obj, Tensor) and obj.requires_grad:
            node["requires_grad"] = True
        return node
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if type(obj) is list else {"type": "tuple", "items": items}
    if isinstance(obj, dict):
        kind = "ordereddict" if isinstance(obj, OrderedDict) else "dict"
        items = []
        for k, v in obj.items():
            if not (k is None or isinstance(k, (str, int, float, bool))):
                raise TypeError(f"mt.save: {where} has a key of type {type(k).__name__} "
                                f"({k!r}); keys must be str, int, float, bool or None")
            items.append([_encode(k, arrays, where), _encode(v, arrays, f"{where}[{k!r}]")])
        return {"type": kind, "items": items}
    raise TypeError(f"mt.save: {where} is a {type(obj).__name__}, which a checkpoint cannot "
                    f"hold; use dicts, lists, tuples, Tensors, numpy arrays, numbers, strings, "
                    f"bools and None (code such as functions or classes is never saved)")


# ----------------------------------------------------------------------------- load

def load(path):
    """Read a checkpoint written by `save`. Never unpickles; raises CheckpointError (naming
    the file and the problem) for a file that is truncated, tampered with, not a checkpoint,
    or that holds arrays needing pickle."""
    path = os.fspath(path)
    with open(path, "rb") as f:        # FileNotFoundError names the path itself
        head = f.read(4)
    if not head:
        raise CheckpointError(f"mt.load({path!r}): the file is empty")
    if head != b"PK\x03\x04":
        what = "a single .npy array" if head == b"\x93NUM" else "not an .npz (zip) file"
        raise CheckpointError(f"mt.load({path!r}): {what}; a checkpoint is an .npz written "
                              f"by mt.save")
    try:
        with np.load(path, allow_pickle=False) as npz:
            names = set(npz.files)
            if _STRUCTURE not in names:
                raise CheckpointError(
                    f"mt.load({path!r}): the .npz has no {_STRUCTURE} member, so it was not "
                    f"written by mt.save (its arrays: {', '.join(sorted(names)) or 'none'}); "
                    f"read plain .npz files with np.load(path, allow_pickle=False)")
            header = _read_header(npz[_STRUCTURE], path)
            arrays = {}
            loader = _Loader(npz, arrays, path)
            try:
                obj = loader.decode(header["root"], "obj")
            except (KeyError, TypeError, AttributeError, RecursionError) as e:
                raise CheckpointError(f"mt.load({path!r}): the structure is malformed "
                                      f"({type(e).__name__}: {e}); the file was damaged or "
                                      f"altered") from None
    except CheckpointError:
        raise
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"mt.load({path!r}): the zip container is damaged — the file "
                              f"is truncated or corrupted ({e})") from None
    except (EOFError, OSError, ValueError) as e:
        text = str(e)
        if "pickle" in text:
            raise CheckpointError(f"mt.load({path!r}): the file holds an array that needs "
                                  f"pickle (an object array); refusing to load it, since "
                                  f"unpickling can run arbitrary code") from None
        raise CheckpointError(f"mt.load({path!r}): a member is damaged or truncated "
                              f"({type(e).__name__}: {text})") from None
    unused = names - set(arrays) - {_STRUCTURE}
    if unused:
        raise CheckpointError(f"mt.load({path!r}): the file has members the structure does not "
                              f"mention ({', '.join(sorted(unused))}): it was altered after "
                              f"saving")
    return obj


def _read_header(raw, path):
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise CheckpointError(f"mt.load({path!r}): the {_STRUCTURE} member is {raw.dtype} of "
                              f"shape {raw.shape}, expected UTF-8 bytes (uint8, 1-D)")
    try:
        header = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"mt.load({path!r}): the structure member is not valid JSON "
                              f"({e}); the file was damaged or altered") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT or "root" not in header:
        raise CheckpointError(f"mt.load({path!r}): the structure member is not a minitensor "
                              f"checkpoint header")
    if header.get("version") != VERSION:
        raise CheckpointError(f"mt.load({path!r}): checkpoint format version "
                              f"{header.get('version')!r}; this minitensor reads version {VERSION}")
    return header


class _Loader:
    """Rebuilds the object from its JSON form, checking each node as it goes."""

    def __init__(self, npz, arrays, path):
        self.npz, self.arrays, self.path = npz, arrays, path

    def fail(self, where, what):
        raise CheckpointError(f"mt.load({self.path!r}): {where}: {what}; the file was damaged "
                              f"or altered")

    def decode(self, node, where):
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, list):
            return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, dict) or "type" not in node:
            self.fail(where, f"unexpected structure node {str(node)[:80]}")
        kind = node["type"]
        if kind == "float":
            if node.get("value") not in ("nan", "inf", "-inf"):
                self.fail(where, f"bad non-finite float {node.get('value')!r}")
            return float(node["value"])
        if kind == "tuple":
            return tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(node["items"]))
        if kind in ("dict", "ordereddict"):
            out = OrderedDict() if kind == "ordereddict" else {}
            for pair in node["items"]:
                if not isinstance(pair, list) or len(pair) != 2:
                    self.fail(where, "a dict entry is not a [key, value] pair")
                key = self.decode(pair[0], where)
                out[key] = self.decode(pair[1], f"{where}[{key!r}]")
            return out
        if kind in ("tensor", "ndarray", "scalar"):
            return self.array(node, kind, where)
        self.fail(where, f"unknown node type {kind!r}")

    def array(self, node, kind, where):
        key = node.get("key")
        if key not in self.npz.files:
            self.fail(where, f"the array member {key!r} is missing")
        if key in self.arrays:
            self.fail(where, f"the array member {key!r} is referenced twice")
        arr = self.npz[key]
        self.arrays[key] = arr
        if arr.dtype.str != node.get("dtype") or list(arr.shape) != node.get("shape"):
            self.fail(where, f"member {key!r} is {arr.dtype.str} {tuple(arr.shape)} but the "
                      f"structure says {node.get('dtype')} {tuple(node.get('shape') or ())}")
        if kind == "scalar":
            return arr[()]
        if kind == "tensor":
            return Tensor(arr, requires_grad=bool(node.get("requires_grad")), dtype=arr.dtype)
        return arr
