"""mt.load on damaged and crafted files: every one ends in a CheckpointError that names the file
and the member, and no declared size is believed before the zip's real member sizes back it
(a 300-byte member declaring shape (10**12,) must not try to allocate 8 TB)."""

import json
import struct
import zipfile

import numpy as np
import pytest

import minitensor as mt

GOOD = {"model": {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}, "step": 3}


def npy_bytes(header, data=b"", version=(1, 0)):
    """A raw .npy member: magic, version, header length, the header text (padded), data."""
    text = header.encode("latin1") if isinstance(header, str) else header
    size_format = "<H" if version == (1, 0) else "<I"
    return b"\x93NUMPY" + bytes(version) + struct.pack(size_format, len(text)) + text + data


def npy_header(descr="<f4", shape=(3, 4), fortran_order=False):
    return repr({"descr": descr, "fortran_order": fortran_order, "shape": shape}) + "\n"


def structure_bytes(root):
    """The structure member for `root` (an object, or the raw JSON text of one)."""
    root_text = root if isinstance(root, str) else json.dumps(root)
    text = '{"format": "minitensor-checkpoint", "version": 1, "root": ' + root_text + "}"
    return npy_bytes(npy_header("|u1", (len(text.encode()),)), text.encode())


def array_node(key="arr_0", dtype="<f4", shape=(3, 4)):
    return {"type": "ndarray", "key": key, "dtype": dtype, "shape": list(shape)}


def write_zip(path, members, compression=zipfile.ZIP_STORED):
    """members: {name: raw bytes}, written with valid CRCs (what a tamperer can do)."""
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, raw in members.items():
            z.writestr(name, raw)
    return path


def one_array_file(path, member, root=None):
    """A checkpoint whose structure says `root` (default: one float32 (3, 4) array) and whose
    arr_0.npy member is the raw bytes `member`."""
    return write_zip(
        path, {"__structure__.npy": structure_bytes(root or array_node()), "arr_0.npy": member}
    )


def assert_refused(path, *patterns):
    with pytest.raises(mt.CheckpointError) as info:
        mt.load(path)
    message = str(info.value)
    assert path.name in message
    for pattern in patterns:
        assert pattern in message, message
    return message


DATA_3x4 = np.arange(12, dtype=np.float32).tobytes()

CRAFTED_MEMBERS = {
    # a 300-byte member that declares 8 TB of float64
    "huge shape": (
        npy_bytes(npy_header("<f8", (10**12,)), b"\0" * 200),
        array_node(dtype="<f8", shape=(10**12,)),
        ["arr_0", "bytes"],
    ),
    "huge shape, structure agrees": (
        npy_bytes(npy_header("<f4", (10**12,)), DATA_3x4),
        array_node(shape=(10**12,)),
        ["arr_0"],
    ),
    "shape overflowing int64": (
        npy_bytes(npy_header("<f4", (2**40, 2**40)), DATA_3x4),
        array_node(shape=(2**40, 2**40)),
        ["arr_0"],
    ),
    "negative shape": (
        npy_bytes(npy_header("<f4", (-1,)), DATA_3x4),
        array_node(shape=(-1,)),
        ["arr_0", "negative"],
    ),
    "data shorter than the header says": (
        npy_bytes(npy_header(), DATA_3x4[:20]),
        None,
        ["arr_0", "holds"],
    ),
    "data longer than the header says": (
        npy_bytes(npy_header(), DATA_3x4 + b"xx"),
        None,
        ["arr_0"],
    ),
    "object dtype": (
        npy_bytes(npy_header("|O", (3,)), b"\x80\x04N."),
        array_node(dtype="|O", shape=(3,)),
        ["arr_0", "needs pickle"],
    ),
    "structured dtype": (
        npy_bytes(npy_header([("a", "<f4"), ("b", "<i4")], (2,)), b"\0" * 16),
        array_node(dtype="|V8", shape=(2,)),
        ["arr_0", "structured"],
    ),
    "unknown dtype": (
        npy_bytes(npy_header("<x9", (3,)), b"\0" * 27),
        array_node(dtype="<x9"),
        ["arr_0"],
    ),
    "dtype that is not a string": (npy_bytes(npy_header(12345, (3,)), b"\0" * 12), None, ["arr_0"]),
    "bad magic": (b"\x93NUMPZ\x01\x00" + b"\0" * 100, None, ["arr_0"]),
    "unknown .npy version": (
        npy_bytes(npy_header(), DATA_3x4, version=(9, 9)),
        None,
        ["arr_0", "version"],
    ),
    "header is not a dict": (npy_bytes("[1, 2, 3]\n", DATA_3x4), None, ["arr_0"]),
    "header with missing keys": (npy_bytes("{'descr': '<f4'}\n", DATA_3x4), None, ["arr_0"]),
    "header that is not Python": (
        npy_bytes("{'descr': '<f4', 'shape': (3,4)," + "\n", DATA_3x4),
        None,
        ["arr_0"],
    ),
    # unterminated: the old-header fallback tokenizes it and tokenize raises TokenError
    "unterminated header": (npy_bytes("{'descr': ['<f4', 'shape'\n", DATA_3x4), None, ["arr_0"]),
    "header calling a function": (
        npy_bytes("{'descr': __import__('os').getcwd()}\n"),
        None,
        ["arr_0"],
    ),
    "header too large": (npy_bytes(npy_header() + " " * 20_000 + "\n", DATA_3x4), None, ["arr_0"]),
    "fortran_order not a bool": (
        npy_bytes(npy_header(fortran_order="yes"), DATA_3x4),
        None,
        ["arr_0"],
    ),
    "header length past the end": (b"\x93NUMPY\x01\x00\xff\xff{'descr'", None, ["arr_0"]),
    "empty member": (b"", None, ["arr_0"]),
    "shape disagrees with the structure": (
        npy_bytes(npy_header("<f4", (4, 3)), DATA_3x4),
        None,
        ["arr_0", "but the structure says"],
    ),
}


@pytest.mark.parametrize("case", sorted(CRAFTED_MEMBERS))
def test_crafted_member_is_refused_before_allocating(tmp_path, case):
    member, root, patterns = CRAFTED_MEMBERS[case]
    path = one_array_file(tmp_path / "crafted.npz", member, root)
    assert path.stat().st_size < 30_000
    assert_refused(path, *patterns)


BAD_STRUCTURES = {
    "tuple items not a list": {"type": "tuple", "items": "abc"},
    "dict items not a list": {"type": "dict", "items": 7},
    "dict entry not a pair": {"type": "dict", "items": [[1, 2, 3]]},
    "dict key a list": {"type": "dict", "items": [[[1, 2], 3]]},
    "type not a string": {"type": ["tuple"], "items": []},
    "array node without a key": {"type": "ndarray", "dtype": "<f4", "shape": [3, 4]},
    "array node with a list key": {**array_node(), "key": ["arr_0"]},
    "array node shape not a list": {**array_node(), "shape": "3, 4"},
    "array node naming the structure": array_node(key="__structure__"),
    "array member missing": array_node(key="arr_9"),
    "array referenced twice": [array_node(), array_node()],
    "unknown node type": {"type": "function", "code": "import os"},
    "nested lists deeper than Python's recursion limit": "[" * 5000 + "]" * 5000,
    "nested tuples deeper than Python's recursion limit": '{"type": "tuple", "items": [' * 700
    + "]}" * 700,
}


@pytest.mark.parametrize("case", sorted(BAD_STRUCTURES))
def test_bad_structure_is_refused(tmp_path, case):
    path = one_array_file(
        tmp_path / "structure.npz", npy_bytes(npy_header(), DATA_3x4), BAD_STRUCTURES[case]
    )
    assert_refused(path)


def test_structure_json_that_cannot_be_read(tmp_path):
    member = npy_bytes(npy_header(), DATA_3x4)
    cases = {
        "not UTF-8": b"\xff\xfe{",
        "an integer of 5000 digits": b'{"format": "minitensor-checkpoint", "version": 1, '
        b'"root": ' + b"9" * 5000 + b"}",
        "nested too deep for json": b"[" * 100_000 + b"]" * 100_000,
    }
    for what, text in cases.items():
        path = write_zip(
            tmp_path / "json.npz",
            {
                "__structure__.npy": npy_bytes(npy_header("|u1", (len(text),)), text),
                "arr_0.npy": member,
            },
        )
        assert_refused(path, "structure"), what
    wrong_dtype = write_zip(
        tmp_path / "dtype.npz",
        {"__structure__.npy": npy_bytes(npy_header("<f8", (2,)), b"\0" * 16)},
    )
    assert_refused(wrong_dtype, "__structure__")


def good_bytes(tmp_path, compression=zipfile.ZIP_STORED):
    path = tmp_path / "good.npz"
    mt.save(GOOD, path)
    if compression != zipfile.ZIP_STORED:  # the same members, recompressed
        with zipfile.ZipFile(path) as z:
            members = {n: z.read(n) for n in z.namelist()}
        write_zip(path, members, compression)
    return path, bytearray(path.read_bytes())


def central_entries(data):
    """Offsets of the central-directory entries (signature PK\\1\\2) in a zip's bytes."""
    out, pos = [], data.find(b"PK\x01\x02")
    while pos != -1:
        out.append(pos)
        pos = data.find(b"PK\x01\x02", pos + 4)
    return out


def test_zip_level_tampering_is_refused(tmp_path):
    path, data = good_bytes(tmp_path)
    entry = central_entries(data)[-1]  # the structure member's entry
    cases = {
        "encrypted": (8, "<H", 0x1, "encrypted"),
        "unknown compression method": (10, "<H", 99, "compression method 99"),
        "uncompressed size of 8 TB": (24, "<I", 0xFFFFFFF0, "claims"),
        "stored size past the end of the file": (20, "<I", 0xFFFFFF00, "claims"),
    }
    for what, (offset, fmt, value, pattern) in cases.items():
        bad = bytearray(data)
        struct.pack_into(fmt, bad, entry + offset, value)
        path.write_bytes(bytes(bad))
        assert "__structure__" in assert_refused(path, pattern), what


def test_deflate_bomb_claim_is_refused(tmp_path):
    path, data = good_bytes(tmp_path, zipfile.ZIP_DEFLATED)
    assert mt.load(path)["step"] == 3  # a deflated checkpoint is readable
    entry = central_entries(data)[0]
    struct.pack_into("<I", data, entry + 24, 0xFFFFFFF0)  # claim 4 GiB from a few bytes
    path.write_bytes(bytes(data))
    assert_refused(path, "claims")


def test_duplicate_member_names_are_refused(tmp_path):
    member = npy_bytes(npy_header(), DATA_3x4)
    path = tmp_path / "dup.npz"
    with pytest.warns(UserWarning, match="Duplicate name"):
        write_zip(path, {"__structure__.npy": structure_bytes(array_node()), "arr_0.npy": member})
        with zipfile.ZipFile(path, "a") as z:
            z.writestr("arr_0.npy", member)
    assert_refused(path, "same name")


def test_every_truncation_and_byte_flip_is_refused_or_harmless(tmp_path):
    """Whatever a damaged file holds, mt.load either returns the saved object or raises
    CheckpointError — never another exception, never a different object."""
    path, data = good_bytes(tmp_path)
    rng = np.random.default_rng(0)
    for cut in list(range(0, len(data), 37)) + [len(data) - 1]:
        path.write_bytes(bytes(data[:cut]))
        with pytest.raises(mt.CheckpointError):
            mt.load(path)
    for pos in rng.choice(len(data), size=250, replace=False):
        bad = bytearray(data)
        bad[pos] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(bad))
        try:
            loaded = mt.load(path)
        except mt.CheckpointError:
            continue
        assert loaded["step"] == 3 and np.array_equal(loaded["model"]["w"], GOOD["model"]["w"])


def test_fortran_order_strings_and_empty_members_still_load(tmp_path):
    path = tmp_path / "layouts.npz"
    w = np.arange(12.0).reshape(3, 4).T  # F-contiguous: saved with fortran_order
    obj = {"w": w, "text": np.array(["a", "héllo"]), "none": np.zeros((0, 5), np.int8)}
    mt.save(obj, path)
    back = mt.load(path)
    np.testing.assert_array_equal(back["w"], w)
    assert back["w"].flags.f_contiguous
    np.testing.assert_array_equal(back["text"], obj["text"])
    assert back["none"].shape == (0, 5) and back["none"].dtype == np.int8


def test_save_refuses_structured_arrays(tmp_path):
    with pytest.raises(TypeError, match=r"obj\['rec'\] is structured"):
        mt.save({"rec": np.zeros(2, dtype=[("a", "<f4")])}, tmp_path / "x.npz")
