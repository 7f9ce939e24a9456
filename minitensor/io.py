"""Checkpoints without pickle: `mt.save(obj, path)` and `mt.load(path)`.

A checkpoint is an ordinary .npz (zip) file. Each array is one member (``arr_0.npy``, …) and
the nested structure — dicts, lists, tuples, strings, numbers, bools, None — is one JSON
member (``__structure__.npy``, its UTF-8 bytes as a uint8 array) that refers to the arrays by
member name. Nothing is ever unpickled, so opening a checkpoint never runs code, and a file
that would need pickle is refused.

    mt.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "rng": mt.get_rng_state(), "step": 1200},
            "ckpt.npz")
    ckpt = mt.load("ckpt.npz")
    model.load_state_dict(ckpt["model"])

Round trips are bit-exact: arrays and numpy scalars keep dtype, shape and bytes; floats are
written by ``repr`` (which reads back to the same double); tuples stay tuples and dict keys keep
their type and order.

Loading treats the file as untrusted input: every member's declared dtype and shape are checked
against the bytes the zip really holds before any array is allocated, so a small crafted file
cannot ask for terabytes, and every way a file can be damaged ends in a `CheckpointError` that
names the file and the member.
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
import tokenize
import zipfile
import zlib
from collections import OrderedDict
from typing import Any

import numpy as np

from .tensor import Tensor, check_device

FORMAT = "minitensor-checkpoint"
VERSION = 1
_STRUCTURE = "__structure__"
_MAX_NPY_HEADER = 10_000  # bytes of an .npy header's dict literal (numpy's own default)
_DEFLATE_MAX_RATIO = 1032  # deflate never expands a byte stream by more than this
# mt.save stores members uncompressed; a deflated member (a file recompressed by hand) may
# expand to at most this many times its compressed size, or _INFLATE_FREE bytes: a genuine
# 1 GB stream of zeros fits in 1 MB, and would make a small file allocate a gigabyte
_MAX_INFLATE_RATIO = 64
_INFLATE_FREE = 1 << 22
_CHUNK = 1 << 24  # bytes read from a member at a time


class CheckpointError(ValueError):
    """A checkpoint file cannot be read safely (truncated, tampered, not a checkpoint, or it
    asks for pickle). The message names the file, the member and what is wrong."""


def _unsupported_dtype(dtype):
    """Why an array of `dtype` cannot be in a checkpoint, or None if it can: checkpoints hold
    plain arrays (bool, numbers, datetimes, strings) whose bytes are their values."""
    if dtype.hasobject:
        return f"an array of Python objects ({dtype}) needs pickle"
    if dtype.names is not None or dtype.subdtype is not None or dtype.kind == "V":
        return f"structured or raw-bytes dtype {dtype} is not a plain array"
    return None


# ----------------------------------------------------------------------------- save


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write `obj` (nested dicts/lists/tuples of Tensors, numpy arrays and scalars, numbers,
    strings, bools, None) to `path` as a .npz checkpoint.

    The file is written under a temporary name in the same folder, flushed to disk (fsync),
    and then renamed over `path` in one step, so `path` always holds either the old checkpoint
    or the complete new one. If writing fails (an error, Ctrl-C) the temporary file is removed;
    one left by a process that was killed outright is removed by the next save to `path`."""
    path = os.fspath(path)
    arrays = {}
    root = _encode(obj, arrays, "obj")
    header = {"format": FORMAT, "version": VERSION, "root": root}
    text = json.dumps(header, allow_nan=False, ensure_ascii=False)
    members = dict(arrays)
    members[_STRUCTURE] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    folder, name = os.path.split(os.path.abspath(path))
    _remove_stale_temporaries(folder, name)
    fd, tmp = tempfile.mkstemp(
        prefix=f"{_temporary_prefix(name)}{os.getpid()}-", suffix=".npz", dir=folder
    )
    try:
        with os.fdopen(fd, "wb") as f:  # a file object: np.savez must not append ".npz"
            np.savez(f, **members)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the name does
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp made it private; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_folder(folder)  # and the rename itself survives a power cut


def _temporary_prefix(name):
    return f".{name}.tmp-"


def _remove_stale_temporaries(folder, name):
    """Remove temporary files of earlier saves to `name` whose writer process no longer runs
    (it was killed mid-write, so it could not clean up). Each temporary's name carries its
    writer's process id, so a save still in progress in another process is left alone."""
    if os.name != "posix":  # os.kill(pid, 0) only probes a process on POSIX
        return
    prefix = _temporary_prefix(name)
    for entry in os.listdir(folder):
        if not (entry.startswith(prefix) and entry.endswith(".npz")):
            continue
        pid = entry[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not _process_exists(int(pid)):
            try:
                os.remove(os.path.join(folder, entry))
            except FileNotFoundError:  # another save removed it first
                pass


def _process_exists(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _fsync_folder(folder):
    """Flush the folder's entry list (the rename) to disk, where the OS lets a folder be
    opened (POSIX); elsewhere the rename is as durable as the OS makes it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def _encode(obj, arrays, where):
    """The JSON form of obj. Arrays go into `arrays`; `where` names the spot for errors."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (Tensor, np.ndarray, np.generic)):
        # before int/float: np.float64 is a subclass of float and would lose its type
        return _encode_array(obj, arrays, where)
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        # JSON has no NaN/Inf; json writes them as bare words (which it reads back), but a
        # tagged form keeps the file standard JSON
        return obj if math.isfinite(obj) else {"type": "float", "value": repr(obj)}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if type(obj) is list else {"type": "tuple", "items": items}
    if isinstance(obj, dict):
        kind = "ordereddict" if isinstance(obj, OrderedDict) else "dict"
        items = []
        for k, v in obj.items():
            if not (k is None or isinstance(k, (str, int, float, bool))):
                raise TypeError(
                    f"mt.save: {where} has a key of type {type(k).__name__} "
                    f"({k!r}); keys must be str, int, float, bool or None"
                )
            items.append([_encode(k, arrays, where), _encode(v, arrays, f"{where}[{k!r}]")])
        return {"type": kind, "items": items}
    raise TypeError(
        f"mt.save: {where} is a {type(obj).__name__}, which a checkpoint cannot "
        f"hold; use dicts, lists, tuples, Tensors, numpy arrays, numbers, strings, "
        f"bools and None (code such as functions or classes is never saved)"
    )


def _encode_array(obj, arrays, where):
    kind = (
        "tensor"
        if isinstance(obj, Tensor)
        else ("scalar" if isinstance(obj, np.generic) else "ndarray")
    )
    arr = obj.numpy() if isinstance(obj, Tensor) else np.asarray(obj)
    problem = _unsupported_dtype(arr.dtype)
    if problem:
        raise TypeError(
            f"mt.save: {where} is {problem}; a checkpoint holds plain arrays only "
            f"(and never uses pickle)"
        )
    key = f"arr_{len(arrays)}"
    arrays[key] = arr
    node = {"type": kind, "key": key, "dtype": arr.dtype.str, "shape": list(arr.shape)}
    if isinstance(obj, Tensor) and obj.requires_grad:
        node["requires_grad"] = True
    return node


# ----------------------------------------------------------------------------- load

# What reading damaged or crafted bytes can raise, from zipfile, zlib, numpy's .npy header
# parser (ast, tokenize), json and numpy's dtype parser: each becomes a CheckpointError.
_READ_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    struct.error,
    tokenize.TokenError,
    EOFError,
    OSError,
    ValueError,
    TypeError,
    LookupError,
    ArithmeticError,
    RuntimeError,
    MemoryError,
    SyntaxError,
)


def load(
    path: str | os.PathLike[str], map_location: Any = None, *, weights_only: bool | None = None
) -> Any:
    """Read a checkpoint written by `save`. Never unpickles; raises CheckpointError (naming
    the file, the member and the problem) for a file that is truncated, tampered with, not a
    checkpoint, or that holds arrays needing pickle. FileNotFoundError if there is no file.

    torch.load's `map_location` ('cpu', a device, or a mapping/function of devices) and
    `weights_only` are accepted as torch code passes them: everything loads on the CPU, and
    a checkpoint only ever holds data, so nothing in the file is run whatever `weights_only`
    says. A device other than the CPU is an error."""
    if not (map_location is None or isinstance(map_location, dict) or callable(map_location)):
        check_device(map_location, "load")
    path = os.fspath(path)
    _check_signature(path)
    try:
        with zipfile.ZipFile(path) as zf:
            archive = _Archive(zf, path)
            header = _read_header(archive.read(_STRUCTURE, f"the {_STRUCTURE} member"), path)
            loader = _Loader(archive, path)
            try:
                obj = loader.decode(header["root"], "obj")
            except RecursionError:
                loader.fail("obj", "the structure is malformed (nested too deeply)")
            archive.check_all_read()
    except CheckpointError:
        raise
    except _READ_ERRORS as e:
        raise CheckpointError(
            f"mt.load({path!r}): the zip container is damaged — the file "
            f"is truncated or corrupted ({type(e).__name__}: {e})"
        ) from None
    return obj


def _check_signature(path):
    with open(path, "rb") as f:  # FileNotFoundError names the path itself
        head = f.read(4)
    if not head:
        raise CheckpointError(f"mt.load({path!r}): the file is empty")
    if head != b"PK\x03\x04":
        what = "a single .npy array" if head == b"\x93NUM" else "not an .npz (zip) file"
        raise CheckpointError(
            f"mt.load({path!r}): {what}; a checkpoint is an .npz written by mt.save"
        )


class _Archive:
    """The .npy members of an open zip, read one at a time with every size checked first."""

    def __init__(self, zf, path):
        self.zf, self.path = zf, path
        self.file_size = os.path.getsize(path)
        infos = zf.infolist()
        self.members = {
            (i.filename[:-4] if i.filename.endswith(".npy") else i.filename): i for i in infos
        }
        if len(self.members) != len(infos):
            raise CheckpointError(
                f"mt.load({path!r}): two members of the zip have the same "
                f"name; the file was altered after saving"
            )
        if _STRUCTURE not in self.members:
            names = ", ".join(sorted(self.members)) or "none"
            raise CheckpointError(
                f"mt.load({path!r}): the .npz has no {_STRUCTURE} member, so it was not "
                f"written by mt.save (its arrays: {names}); read plain .npz files with "
                f"np.load(path, allow_pickle=False)"
            )
        self.read_keys = set()

    def fail(self, key, what):
        raise CheckpointError(f"mt.load({self.path!r}): member {key!r}: {what}")

    def read(self, key, where, dtype=None, shape=None):
        """The array in member `key`. When the structure gives its dtype (a str) and shape (a
        list), the member must match them; both are checked before the data is read."""
        info = self.members[key]
        self.read_keys.add(key)
        self._check_container(key, info)
        try:
            with self.zf.open(info) as f:
                npy_dtype, npy_shape, fortran = self._npy_header(key, f)
                if dtype is not None and (npy_dtype.str != dtype or list(npy_shape) != shape):
                    raise CheckpointError(
                        f"mt.load({self.path!r}): {where}: member {key!r} is {npy_dtype.str} "
                        f"{tuple(npy_shape)} but the structure says {dtype} {tuple(shape)}; "
                        f"the file was damaged or altered"
                    )
                nbytes = math.prod(npy_shape) * npy_dtype.itemsize
                if info.file_size != f.tell() + nbytes:
                    self.fail(
                        key,
                        f"its header declares {npy_dtype.str} {tuple(npy_shape)} "
                        f"({nbytes} bytes of data) but the member holds "
                        f"{info.file_size - f.tell()} bytes; the file was damaged "
                        f"or altered",
                    )
                flat = self._data(key, f, npy_dtype, math.prod(npy_shape), nbytes)
        except CheckpointError:
            raise
        except _READ_ERRORS as e:
            self.fail(key, f"damaged or truncated ({type(e).__name__}: {e})")
        if fortran:
            return flat.reshape(npy_shape[::-1]).transpose()
        return flat.reshape(npy_shape)

    def _check_container(self, key, info):
        """Refuse what zipfile would not read, and sizes the file's bytes cannot back."""
        if info.flag_bits & 0x1:
            self.fail(key, "it is encrypted; checkpoints are never encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            self.fail(
                key,
                f"zip compression method {info.compress_type} is not one a "
                f"checkpoint uses (stored or deflated)",
            )
        limit = (
            info.compress_size
            if info.compress_type == zipfile.ZIP_STORED
            else info.compress_size * _DEFLATE_MAX_RATIO + 1024
        )
        if info.file_size > limit or info.header_offset + info.compress_size > self.file_size:
            self.fail(
                key,
                f"it claims {info.file_size} bytes ({info.compress_size} stored) but "
                f"the file has {self.file_size} bytes; it is truncated or was altered",
            )
        inflated = info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > _INFLATE_FREE
        if inflated and info.file_size > info.compress_size * _MAX_INFLATE_RATIO:
            self.fail(
                key,
                f"it inflates {info.compress_size} compressed bytes to {info.file_size} "
                f"(over {_MAX_INFLATE_RATIO}x: a decompression bomb?); mt.save writes members "
                f"uncompressed, so re-save the checkpoint with mt.save if you trust it",
            )

    def _npy_header(self, key, f):
        """(dtype, shape, fortran_order) from the .npy header of member `key`."""
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f, _MAX_NPY_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f, _MAX_NPY_HEADER)
        else:
            self.fail(key, f".npy format version {version} is not one mt.save writes")
        problem = _unsupported_dtype(dtype)
        if problem:
            self.fail(
                key,
                f"{problem}; refusing to load it, since unpickling can run arbitrary code"
                if dtype.hasobject
                else problem,
            )
        if any(n < 0 for n in shape):
            self.fail(key, f"its header declares a negative shape {shape}")
        return dtype, shape, fortran

    def _data(self, key, f, dtype, count, nbytes):
        """Read `count` items (`nbytes` bytes, already checked against the member's size)."""
        flat = np.ndarray(count, dtype=dtype)  # np.empty mishandles zero-width strings
        if nbytes == 0:
            return flat
        buffer = flat.view(np.uint8)
        done = 0
        while done < nbytes:
            chunk = f.read(min(_CHUNK, nbytes - done))
            if not chunk:
                self.fail(key, f"truncated: {done} of {nbytes} bytes of data")
            buffer[done : done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
            done += len(chunk)
        if f.read(1):
            self.fail(key, "it holds more bytes than its header declares")
        return flat

    def check_all_read(self):
        unused = set(self.members) - self.read_keys
        if unused:
            raise CheckpointError(
                f"mt.load({self.path!r}): the file has members the structure "
                f"does not mention ({', '.join(sorted(unused))}): it was "
                f"altered after saving"
            )


def _read_header(raw, path):
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise CheckpointError(
            f"mt.load({path!r}): the {_STRUCTURE} member is {raw.dtype} of "
            f"shape {raw.shape}, expected UTF-8 bytes (uint8, 1-D)"
        )
    try:
        header = json.loads(raw.tobytes().decode("utf-8"))
    except (ValueError, RecursionError) as e:  # bad UTF-8, bad JSON, an int too long
        raise CheckpointError(
            f"mt.load({path!r}): the structure member is not valid JSON "
            f"({e}); the file was damaged or altered"
        ) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT or "root" not in header:
        raise CheckpointError(
            f"mt.load({path!r}): the structure member is not a minitensor checkpoint header"
        )
    if header.get("version") != VERSION:
        raise CheckpointError(
            f"mt.load({path!r}): checkpoint format version "
            f"{header.get('version')!r}; this minitensor reads version {VERSION}"
        )
    return header


class _Loader:
    """Rebuilds the object from its JSON form, checking each node as it goes."""

    def __init__(self, archive, path):
        self.archive, self.path = archive, path
        self.seen = set()

    def fail(self, where, what):
        raise CheckpointError(
            f"mt.load({self.path!r}): {where}: {what}; the file was damaged or altered"
        )

    def decode(self, node, where):
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, list):
            return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            self.fail(where, f"unexpected structure node {str(node)[:80]}")
        kind = node["type"]
        if kind == "float":
            if node.get("value") not in ("nan", "inf", "-inf"):
                self.fail(where, f"bad non-finite float {node.get('value')!r}")
            return float(node["value"])
        if kind == "tuple":
            return tuple(
                self.decode(v, f"{where}[{i}]") for i, v in enumerate(self.items(node, where))
            )
        if kind in ("dict", "ordereddict"):
            return self.mapping(node, kind, where)
        if kind in ("tensor", "ndarray", "scalar"):
            return self.array(node, kind, where)
        self.fail(where, f"unknown node type {kind!r}")

    def items(self, node, where):
        items = node.get("items")
        if not isinstance(items, list):
            self.fail(
                where, f"the structure is malformed: a {node['type']} node without a list of items"
            )
        return items

    def mapping(self, node, kind, where):
        out = OrderedDict() if kind == "ordereddict" else {}
        for pair in self.items(node, where):
            if not isinstance(pair, list) or len(pair) != 2:
                self.fail(
                    where, "the structure is malformed: a dict entry is not a [key, value] pair"
                )
            key = self.decode(pair[0], where)
            if not (key is None or isinstance(key, (str, int, float, bool, np.generic))):
                self.fail(
                    where, f"the structure is malformed: a dict key is a {type(key).__name__}"
                )
            out[key] = self.decode(pair[1], f"{where}[{key!r}]")
        return out

    def array(self, node, kind, where):
        key, dtype, shape = node.get("key"), node.get("dtype"), node.get("shape")
        if not (isinstance(key, str) and isinstance(dtype, str) and isinstance(shape, list)):
            self.fail(
                where,
                f"the structure is malformed: an array node needs a member key, "
                f"a dtype and a shape, got {str(node)[:80]}",
            )
        if key not in self.archive.members or key == _STRUCTURE:
            self.fail(where, f"the array member {key!r} is missing")
        if key in self.seen:
            self.fail(where, f"the array member {key!r} is referenced twice")
        self.seen.add(key)
        arr = self.archive.read(key, where, dtype, shape)
        if kind == "scalar":
            return arr[()]
        if kind == "tensor":
            return Tensor(arr, requires_grad=bool(node.get("requires_grad")), dtype=arr.dtype)
        return arr
