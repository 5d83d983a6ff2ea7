"""Corrupted packs found by ``fuzz/fuzz_packed.py`` (fuzz/FINDINGS.md, section 5), pinned.

Each was a pack the reader either refused with an exception outside the project's rule
(a bare numpy ``ValueError``, ``TypeError``, ``tokenize.TokenError``, ``RecursionError``,
``AssertionError``: none naming the file), or accepted and then could not serve (a key
past ``key_offsets``). docs/packed-format.md "What a reader checks" and the exception
rule of ``core/validate.pxd``: a pack that cannot be read is a ``PackError`` naming the file.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.data.packs import format as _format
from onemodel_cy.data.packs.format import PackError


pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


def write_pack(folder, kind="gray8"):
    rng = np.random.default_rng(3)
    if kind == "float32":
        items = [(rng.standard_normal((2, 1, w)).astype(np.float32), [1, 2], i) for i, w in enumerate((3, 2, 1))]
    else:
        items = [(rng.integers(0, 256, (2, w), dtype=np.uint8), [i], i, f"k{i}é") for i, w in enumerate((3, 1, 2))]
    path = os.path.join(str(folder), "p")
    om.pack(items, path, progress=False)
    return path


def manifest_of(path):
    with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def write_manifest_text(path, text):
    with open(os.path.join(path, "manifest.json"), "w", encoding="utf-8") as f:
        f.write(text)


def npy_header(descr, shape_text, length):
    """A version 1.0 header of ``length`` bytes (numpy reads any length)."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}"
    body = (text.ljust(length - 11) + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body


def replace_file(path, name, data, reseal=True):
    """``name.npy`` replaced by ``data``; with ``reseal`` the manifest's record (shape, size,
    SHA-256) matches the new file, so only what the fuzzer changed is wrong."""
    file = os.path.join(path, f"{name}.npy")
    with open(file, "wb") as f:
        f.write(data)
    if reseal:
        manifest = manifest_of(path)
        with open(file, "rb") as f:
            np.lib.format.read_magic(f)
            shape = np.lib.format.read_array_header_1_0(f)[0]
        manifest["arrays"][name].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                                        shape=list(shape))
        write_manifest_text(path, json.dumps(manifest))


def body_of(path, name):
    with open(os.path.join(path, f"{name}.npy"), "rb") as f:
        return f.read()[_format.HEADER_BYTES:]


def test_negative_dimensions_in_a_header_are_a_pack_error(tmp_path):
    """Format check 2 (header shape): shapes.npy headed (-1, -9), whose product 9 matches its
    body and the manifest, was accepted by the size check and then np.load raised a numpy
    ValueError naming no file. A manifest recording that shape is refused first (issue 36:
    every dimension it records is in [0, 2**48]); one recording the file's true shape
    leaves it to the header check."""
    path = write_pack(tmp_path)
    original = manifest_of(path)
    replace_file(path, "shapes", npy_header("<i8", "(-1, -9)", 128) + body_of(path, "shapes"))
    with pytest.raises(PackError, match=r"manifest\.json: arrays\.shapes\.shape\[0\] must be an integer in "
                                        r"\[0, 2\*\*48\], received -1"):
        om.PackedImageDataset(path, 0.0, 1.0)
    resealed = manifest_of(path)
    resealed["arrays"]["shapes"]["shape"] = original["arrays"]["shapes"]["shape"]
    write_manifest_text(path, json.dumps(resealed))
    with pytest.raises(PackError, match=r"shapes\.npy: must hold a C-order <i8 array"):
        om.PackedImageDataset(path, 0.0, 1.0)


def test_a_header_whose_brackets_do_not_close_is_a_pack_error(tmp_path):
    """Format check 2 (header version 1.0): one byte of labels.npy's header changed, its '}'
    gone, made numpy's tokenizer raise tokenize.TokenError, which escaped the reader."""
    path = write_pack(tmp_path)
    file = os.path.join(path, "labels.npy")
    with open(file, "rb") as f:
        data = bytearray(f.read())
    data[data.index(b"}")] = ord(" ")
    with open(file, "wb") as f:
        f.write(data)
    with pytest.raises(PackError, match=r"labels\.npy: not a \.npy version 1\.0 file"):
        om.PackedImageDataset(path, 0.0, 1.0)


@pytest.mark.parametrize("value", [["gray8"], {"gray8": 1}])
def test_a_pixels_field_of_another_type_is_a_pack_error(tmp_path, value):
    """Format check 1 (manifest fields): a list or an object as the pixel kind raised
    TypeError 'unhashable type' naming no file."""
    path = write_pack(tmp_path)
    manifest = manifest_of(path)
    manifest["pixels"] = value
    write_manifest_text(path, json.dumps(manifest))
    with pytest.raises(PackError, match=r"manifest\.json: pixels must be one of"):
        om.PackedImageDataset(path, 0.0, 1.0)


def test_a_manifest_nested_too_deep_is_a_pack_error(tmp_path):
    """Format check 1 (the manifest parses): a field nested 100000 lists deep made json raise
    RecursionError, which escaped the reader."""
    path = write_pack(tmp_path)
    text = json.dumps(dict(manifest_of(path), vocabulary="DEEP"))
    write_manifest_text(path, text.replace('"DEEP"', "[" * 100000 + "]" * 100000))
    with pytest.raises(PackError, match=r"manifest\.json: not a readable JSON manifest"):
        om.PackedImageDataset(path, 0.0, 1.0)


def test_float32_pixels_off_alignment_are_a_pack_error(tmp_path):
    """Format section '.npy files' (data 64-aligned for the memory map): float32 pixels
    behind a 130-byte header cannot be mapped aligned; the reader raised AssertionError."""
    path = write_pack(tmp_path, "float32")
    pixels = body_of(path, "pixels")
    replace_file(path, "pixels", npy_header("<f4", f"({len(pixels) // 4},)", 130) + pixels)
    for verify in ("index", "full"):
        with pytest.raises(PackError, match=r"pixels\.npy: its data starts at byte 130"):
            om.PackedImageDataset(path, verify=verify)


def test_headers_of_other_lengths_are_read_where_alignment_allows(tmp_path):
    """Format section '.npy files' (a reader parses any HEADER_LEN): 8-bit pixels and an
    index array behind 130-byte headers serve the samples they served before, on both
    routes (the fix refuses only what cannot be mapped aligned)."""
    path = write_pack(tmp_path)
    before = [om.PackedImageDataset(path, 0.5, 0.25).get_sample(i) for i in range(3)]
    for name, descr in (("pixels", "|u1"), ("labels", "<i4")):
        body = body_of(path, name)
        size = len(body) // np.dtype(descr).itemsize
        replace_file(path, name, npy_header(descr, f"({size},)", 130) + body)
    ds = om.PackedImageDataset(path, 0.5, 0.25, verify="full")
    col = om.ImageBatchCollator(width_multiple=4, pad_value=-1.0)
    for i, old in enumerate(before):
        new = ds.get_sample(i)
        assert new.image.tobytes() == old.image.tobytes() and new.label == old.label
    from onemodel_cy.collate.fetch import build_batch
    indices = np.arange(3, dtype=np.int64)
    fast, slow = (build_batch(col, ds, indices, 1, 0, 0, route=r) for r in ("packed", "samples"))
    assert fast.images.tobytes() == slow.images.tobytes() and fast.labels.tolist() == [0, 1, 2]


@pytest.mark.parametrize("offsets", [[0, 4], [], [0, 4, 4, 6, 8]])
def test_key_offsets_of_another_length_are_a_pack_error(tmp_path, offsets):
    """Format check 4 (key_offsets has N + 1 rows): too short, it was accepted and key(2) then
    raised IndexError; empty, opening raised IndexError; too long, it was accepted. A
    manifest recording the wrong length is refused from the manifest (issue 36, outside
    review: every array of one row per sample agrees with its count); one recording the
    right length, by the file's header."""
    path = write_pack(tmp_path)
    keys = body_of(path, "keys")
    values = np.array(offsets, dtype="<i8")
    if values.size:
        values[-1] = len(keys)
    recorded = manifest_of(path)["arrays"]["key_offsets"]["shape"]
    replace_file(path, "key_offsets", npy_header("<i8", f"({values.size},)", 128) + values.tobytes())
    with pytest.raises(PackError, match=rf"manifest\.json: arrays\.key_offsets\.shape must be \[4\] for the "
                                        rf"manifest's count 3, received \[{values.size}\]"):
        om.PackedImageDataset(path, 0.0, 1.0)
    resealed = manifest_of(path)
    resealed["arrays"]["key_offsets"]["shape"] = recorded
    write_manifest_text(path, json.dumps(resealed))
    with pytest.raises(PackError, match=r"key_offsets\.npy: must hold a C-order <i8 array of 1 dimensions with "
                                        r"the manifest's shape \[4\]"):
        om.PackedImageDataset(path, 0.0, 1.0)


def test_a_key_that_is_not_utf8_is_a_pack_error_naming_keys(tmp_path):
    """Format section 'Targets, labels, keys' (keys are UTF-8): a key split inside its
    two-byte character raised a bare UnicodeDecodeError; the samples are still served."""
    path = write_pack(tmp_path)
    keys = body_of(path, "keys")                         # b"k0\xc3\xa9k1\xc3\xa9k2\xc3\xa9"
    ends = np.array([0, 3, 8, len(keys)], dtype="<i8")  # sample 0 ends inside its "é"
    replace_file(path, "key_offsets", npy_header("<i8", "(4,)", 128) + ends.tobytes())
    ds = om.PackedImageDataset(path, 0.0, 1.0)
    with pytest.raises(PackError, match=r"keys\.npy: key of sample 0 is not UTF-8"):
        ds.key(0)
    assert ds.key(2) == "k2é" and ds.get_sample(0).label == 0
