"""The on-disk pack format (``docs/packed-format.md``): its files, headers, manifest and checks.

Shared by the writers (``writer.py``, ``sharded.py``), the reader (``reader.pyx``) and the
remote fetch (``remote.py``). A pack is a folder of standard numpy ``.npy`` files (version
1.0 headers, little-endian) plus ``manifest.json``, which records the format version, the
number of samples, the kind of pixels and, for every array, its dtype, shape, size in
bytes and SHA-256. Everything here is plain Python and numpy: nothing of it needs the
compiled package, so a port can follow it line by line.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
import tokenize
from typing import NamedTuple

import numpy as np

from onemodel_cy.data.vocabulary import are_symbols

FORMAT = "onemodel_cy-pack"
SHARDED_FORMAT = "onemodel_cy-sharded-pack"    # a folder of packs (shards) read as one dataset
VERSION = 1
MANIFEST = "manifest.json"
HEADER_BYTES = 128            # every array's .npy header (magic to '\n'), so data starts 64-aligned
INT32_END = 1 << 31
# Every file is flushed to the disk before the pack is renamed into place (a crash never
# leaves a complete-looking pack with missing bytes). The test suite turns it off: it
# checks the bytes written, not the disk's durability, and fsync dominates its time.
FSYNC = True

# Pixel kinds: name -> (dtype of pixels.npy, channels per image or None for any).
KINDS = {"gray8": ("|u1", 1), "rgb8": ("|u1", 3), "float32": ("<f4", None)}

# name -> (dtype, number of dimensions); keys and key_offsets are optional (both or neither),
# and so is sample_sha256 (the SHA-256 of each image's stored bytes: what lets a remote pack
# be fetched sample by sample, each checked as it arrives; docs/packed-format.md).
ARRAYS = {
    "pixels": (None, 1),
    "pixel_offsets": ("<i8", 1),
    "shapes": ("<i8", 2),
    "targets": ("<i4", 1),
    "target_offsets": ("<i8", 1),
    "labels": ("<i4", 1),
    "keys": ("|u1", 1),
    "key_offsets": ("<i8", 1),
    "sample_sha256": ("|u1", 2),
}
KEYS = ("keys", "key_offsets")
OPTIONAL = KEYS + ("sample_sha256",)
DIGEST_BYTES = 32
# A manifest is data from whoever wrote (or serves) the pack: it is read up to this many
# bytes and one more, never further (a larger one is refused), locally and from a URL. A
# pack's manifest is about 2 KB; a sharded pack's grows by about 150 bytes a shard, so
# this bound holds some 100,000 shards.
MANIFEST_BYTES = 16 << 20
# Every size a manifest records (an array file's bytes, each dimension of its shape) is
# an integer in [0, MAX_SIZE] (256 TiB): never negative, never a bool or a float.
MAX_SIZE = 1 << 48


class PackError(ValueError):
    """A pack that cannot be read as it is: the message names the file and what is wrong."""


# ---------------------------------------------------------------- .npy headers

def npy_header(descr: str, shape: tuple) -> bytes:
    """The 128-byte version 1.0 ``.npy`` header of a C-order array (numpy's own layout:
    magic, version, little-endian uint16 length, a Python dict literal padded with
    spaces and ended by a newline)."""
    dims = "".join(f"{int(n)}, " for n in shape).rstrip(" ") if len(shape) > 1 else f"{int(shape[0])},"
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    room = HEADER_BYTES - 10 - 1
    if len(text) > room:
        raise ValueError(f"a shape of {shape} does not fit the {HEADER_BYTES}-byte header")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", HEADER_BYTES - 10) + (text.ljust(room) + "\n").encode("latin1")


def write_npy(path: str, array: np.ndarray, descr: str) -> None:
    """``array`` as a ``.npy`` file with the 128-byte header, converted to ``descr`` first."""
    data = np.ascontiguousarray(array, dtype=np.dtype(descr))
    with open(path, "wb") as f:
        f.write(npy_header(descr, data.shape))
        f.write(data.tobytes())
        sync(f)


def sync(f) -> None:
    f.flush()
    if FSYNC:
        os.fsync(f.fileno())


def file_sha256(path: str, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def array_entry(folder: str, name: str, descr: str, shape: tuple) -> dict:
    """The manifest's record of an array file already written in ``folder``."""
    path = os.path.join(folder, f"{name}.npy")
    return {"file": f"{name}.npy", "dtype": descr, "shape": [int(n) for n in shape],
            "bytes": os.path.getsize(path), "sha256": file_sha256(path)}


def write_manifest(folder: str, manifest: dict) -> None:
    text = json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        sync(f)


# ---------------------------------------------------------------- reading

def read_manifest(folder: str) -> dict:
    """The manifest of the pack (or sharded pack) in ``folder``, its version and fields checked."""
    return open_manifest(folder)[0]


def open_manifest(folder: str) -> tuple[dict, str]:
    """``(manifest, sha256)``: the manifest of the pack or sharded pack in ``folder`` (its
    ``format`` tells which), its version and fields checked, and the SHA-256 of its bytes,
    the pack's content identity (the manifest records every array's SHA-256, or every
    shard's manifest SHA-256, so it names the content, wherever the folder lies). The file is
    read once and the digest is of the very bytes parsed: a pack replaced between two reads
    could otherwise pair one pack's digest with another's fields."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isdir(folder):
        raise PackError(f"{folder}: not a folder; a pack is a folder holding {MANIFEST} and .npy arrays")
    if not os.path.lexists(path):
        raise PackError(f"{path}: missing; {folder} is not a pack, or one whose writing never finished")
    check_inside(folder, path)
    return parse_manifest(read_bounded(path, MANIFEST_BYTES), path)


def read_bounded(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, read up to ``limit`` bytes and one more: a
    larger file is refused without being read further; a folder, a FIFO or a device is
    refused without being read (opened without blocking, then looked at)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PackError(f"{path}: not a regular file")
            parts, got = [], 0
            while got <= limit:
                part = os.read(fd, limit + 1 - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
        finally:
            os.close(fd)
    except OSError as error:
        raise PackError(f"{path}: not readable ({error.strerror or error})") from None
    if got > limit:
        raise PackError(f"{path}: larger than the {limit} bytes a manifest may hold (MANIFEST_BYTES)")
    return b"".join(parts)


def parse_manifest(data: bytes, path: str) -> tuple[dict, str]:
    """``(manifest, sha256)`` of the manifest bytes ``data`` (from a folder or a URL), every
    field checked: a ``PackError`` naming ``path`` (the manifest's file or URL) and the field."""
    if len(data) > MANIFEST_BYTES:
        raise PackError(f"{path}: larger than the {MANIFEST_BYTES} bytes a manifest may hold (MANIFEST_BYTES)")
    try:
        manifest = json.loads(data.decode("utf-8"), parse_int=bounded_int)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:   # nesting too deep
        raise PackError(f"{path}: not a readable JSON manifest ({error})") from None
    oversized = first_oversized(manifest)
    if oversized is not None:
        raise PackError(f"{path}: {oversized[0]} is an integer of {oversized[1]} digits; every integer "
                        f"field of a manifest fits in 64 bits")
    if not isinstance(manifest, dict) or manifest.get("format") not in (FORMAT, SHARDED_FORMAT):
        received = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise PackError(f"{path}: format must be {FORMAT!r} (a pack) or {SHARDED_FORMAT!r} (a sharded pack), "
                        f"received {brief(received)}")
    if type(manifest.get("version")) is not int or manifest["version"] != VERSION:   # True == 1 and 1.0 == 1
        raise PackError(f"{path}: pack format version {brief(manifest.get('version'))}; this reader reads "
                        f"version {VERSION} only")
    count, kind = manifest.get("count"), manifest.get("pixels")
    if type(count) is not int or not 1 <= count < INT32_END:
        raise PackError(f"{path}: count must be an integer in [1, 2**31), received {brief(count)}")
    if not isinstance(kind, str) or kind not in KINDS:      # a list or a dict is unhashable
        raise PackError(f"{path}: pixels must be one of {sorted(KINDS)}, received {brief(kind)}")
    vocabulary = manifest.get("vocabulary")
    if vocabulary is not None and not are_symbols(vocabulary):
        raise PackError(f"{path}: vocabulary must be a list of distinct one-character strings or null, received "
                        f"{brief(vocabulary)}")
    if manifest["format"] == SHARDED_FORMAT:
        check_shard_list(path, manifest)
    else:
        check_array_list(path, manifest)
    return manifest, hashlib.sha256(data).hexdigest()


def brief(value, most: int = 120) -> str:
    """``repr(value)``, cut to about ``most`` characters: a message quotes a manifest's
    value, which may be as long as the manifest."""
    text = repr(value)
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


def check_file_name(path: str, field: str, name) -> None:
    """``name`` (the manifest's ``field``) is a plain file name inside the pack's folder: a
    non-empty string with no path separator, not ``.`` or ``..``, not absolute, no NUL.
    Checked before anything is fetched or opened by it."""
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name
            or os.path.isabs(name)):
        raise PackError(f"{path}: {field} must be a plain file name inside the pack (no path separator, not "
                        f"'..', not absolute, not empty, no NUL), received {brief(name)}")


def check_size(path: str, field: str, value) -> None:
    if type(value) is not int or not 0 <= value <= MAX_SIZE:
        raise PackError(f"{path}: {field} must be an integer in [0, 2**48], received {brief(value)}")


def check_array_list(path: str, manifest: dict) -> None:
    """A pack's ``arrays``: an object naming only arrays of this format, every one that is
    not optional, each ``{"file": "<name>.npy", "dtype", "shape", "bytes", "sha256"}`` of the
    right types and bounds. What a fetch writes and a reader opens comes from here."""
    arrays = manifest.get("arrays")
    if not isinstance(arrays, dict):
        raise PackError(f"{path}: arrays must be an object naming each array file, received {brief(arrays)}")
    for name, entry in arrays.items():
        field = f"arrays.{name}"
        if name not in ARRAYS:
            raise PackError(f"{path}: {field}: not an array of this format (one of {', '.join(ARRAYS)})")
        if not isinstance(entry, dict):
            raise PackError(f"{path}: {field} must be an object {{file, dtype, shape, bytes, sha256}}, received "
                            f"{brief(entry)}")
        check_file_name(path, f"{field}.file", entry.get("file"))
        if entry["file"] != f"{name}.npy":
            raise PackError(f"{path}: {field}.file must be {name}.npy, received {brief(entry['file'])}")
        descr = expected_dtype(manifest, name)
        if entry.get("dtype") != descr:
            raise PackError(f"{path}: {field}.dtype must be {descr!r}, received {brief(entry.get('dtype'))}")
        shape = entry.get("shape")
        if not isinstance(shape, list) or len(shape) != ARRAYS[name][1]:
            raise PackError(f"{path}: {field}.shape must be a list of {ARRAYS[name][1]} integers in [0, 2**48], "
                            f"received {brief(shape)}")
        for k, n in enumerate(shape):
            check_size(path, f"{field}.shape[{k}]", n)
        check_size(path, f"{field}.bytes", entry.get("bytes"))
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not SHA256_HEX.match(digest):
            raise PackError(f"{path}: {field}.sha256 must be 64 lowercase hex digits, received {brief(digest)}")
    for name in ARRAYS:
        if name not in OPTIONAL and name not in arrays:
            raise PackError(f"{path}: arrays.{name}: missing (every pack has {name}.npy)")
    present = [name for name in KEYS if name in arrays]
    if len(present) == 1:
        raise PackError(f"{path}: keys and key_offsets come together, received only {present[0]}")
    # The arrays of one row per sample agree with `count` here, from the manifest alone: what
    # a fetch sizes by the count (an exact folder's maps, count * 5 bytes) is then no larger
    # than those arrays, which the cache's bound counts (a count of 2**31 - 1 beside arrays
    # of 24 rows would write 10 GiB of maps into a cache of any bound).
    count = manifest["count"]
    for name, shape in (("pixel_offsets", [count]), ("shapes", [count, 3]), ("labels", [count]),
                        ("target_offsets", [count + 1]), ("key_offsets", [count + 1]),
                        ("sample_sha256", [count, DIGEST_BYTES])):
        if name in arrays and arrays[name]["shape"] != shape:
            raise PackError(f"{path}: arrays.{name}.shape must be {shape} for the manifest's count {count}, "
                            f"received {brief(arrays[name]['shape'])}")


def check_inside(folder: str, path: str) -> None:
    """``path`` (a file or shard the manifest names, in ``folder``) lies inside ``folder``
    once symbolic links are followed: a link out of the pack is not followed."""
    home, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([home, real]) != home:
        raise PackError(f"{path}: a link to {real}, outside the pack's folder {home}; a pack's files lie "
                        f"in its folder")


class OversizedInt:
    """A JSON integer of more digits than any field allows, kept unparsed: Python refuses to
    convert an integer string of more than 4300 digits (a bare ValueError naming no file),
    and parsing a long one costs time quadratic in its length. ``read_manifest`` finds it
    afterwards to name its field."""

    def __init__(self, text: str):
        self.digits = len(text.lstrip("-"))


INT_DIGITS = 20         # every integer field fits in 64 bits: at most 20 digits


def bounded_int(text: str):
    return OversizedInt(text) if len(text.lstrip("-")) > INT_DIGITS else int(text)


def first_oversized(value):
    """``(field, digits)`` of the first ``OversizedInt`` in the parsed manifest, or None:
    the field as a dotted path (``arrays.pixels.bytes``, ``vocabulary[3]``). Iterative, as
    deep as the JSON parser allowed."""
    stack = [("manifest", value)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, OversizedInt):
            return where.removeprefix("manifest."), value.digits
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return None


def expected_dtype(manifest: dict, name: str) -> str:
    return KINDS[manifest["pixels"]][0] if name == "pixels" else ARRAYS[name][0]


def check_array_file(folder: str, manifest: dict, name: str, verify_sha: bool) -> tuple[str, int]:
    """The path of array ``name`` and the byte offset of its data, after checking the file
    against the manifest: present, of the recorded size, header, dtype and shape, SHA-256."""
    entry = manifest["arrays"][name]            # every field checked (check_array_list)
    path = os.path.join(folder, entry["file"])
    if not os.path.lexists(path):
        raise PackError(f"{path}: missing (the manifest lists it)")
    check_inside(folder, path)
    if not os.path.isfile(path):
        raise PackError(f"{path}: not a regular file (the manifest lists it as an array file)")
    size = os.path.getsize(path)
    if size != entry.get("bytes"):
        raise PackError(f"{path}: holds {size} bytes, the manifest records {entry.get('bytes')!r} "
                        f"(truncated, or replaced after the pack was written)")
    descr, ndim = expected_dtype(manifest, name), ARRAYS[name][1]
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version != (1, 0):
                raise ValueError(f"header version {version}, expected (1, 0)")
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        # numpy tokenizes the header text first: a header whose brackets do not close raises
        # tokenize.TokenError, which is no ValueError.
        except (ValueError, SyntaxError, tokenize.TokenError) as error:
            raise PackError(f"{path}: not a .npy version 1.0 file ({error})") from None
        offset = f.tell()
    # numpy's header parser lets negative dimensions through (np.load then fails naming no file).
    if (dtype.str != descr or fortran or len(shape) != ndim or any(n < 0 for n in shape)
            or list(shape) != entry.get("shape")):
        raise PackError(f"{path}: must hold a C-order {descr} array of {ndim} dimensions with the "
                        f"manifest's shape {entry.get('shape')!r}, received {dtype.str} shape {list(shape)} "
                        f"fortran_order={fortran}")
    if name == "pixels" and offset % dtype.itemsize:
        # The pixels are memory-mapped (page-aligned), so their alignment is the header's length.
        raise PackError(f"{path}: its data starts at byte {offset}, not a multiple of the {dtype.itemsize}-byte "
                        f"{dtype.str} items, so it cannot be mapped aligned (a writer writes a "
                        f"{HEADER_BYTES}-byte header)")
    need = offset + int(np.prod(shape, dtype=object)) * dtype.itemsize
    if size != need:
        raise PackError(f"{path}: holds {size} bytes, its header needs {need} (truncated or padded)")
    if verify_sha and file_sha256(path) != entry.get("sha256"):
        raise PackError(f"{path}: SHA-256 differs from the manifest's {entry.get('sha256')!r} "
                        f"(the file is corrupted or was changed after packing)")
    return path, offset


def load_index(folder: str, manifest: dict, verify: str) -> dict:
    """Every array of the pack checked against the manifest and against each other.

    ``pixels`` is memory-mapped read-only (nothing read yet); every other array is read
    into memory. ``verify`` is ``"index"`` (SHA-256 of every array but the pixels) or
    ``"full"`` (the pixels too)."""
    names = [name for name in ARRAYS if name not in OPTIONAL or name in manifest["arrays"]]
    arrays = {}
    for name in names:
        path, offset = check_array_file(folder, manifest, name, verify == "full" or name != "pixels")
        if name == "pixels":
            arrays[name] = np.load(path, mmap_mode="r")
        elif name != "sample_sha256":       # checked, not loaded: only a remote pack's fetch reads it
            arrays[name] = np.load(path)
    check_index(folder, manifest, arrays)
    return arrays


def fail(folder: str, name: str, what: str):
    raise PackError(f"{os.path.join(folder, name + '.npy')}: {what}")


def check_index(folder: str, manifest: dict, a: dict) -> None:
    """The arrays' values agree: every image lies inside the pixels, every dimension is
    >= 1, offsets are monotone, targets non-negative. Vectorised, with no product that can
    overflow int64 (a width is compared with what the pixels can still hold)."""
    n = manifest["count"]
    total = a["pixels"].shape[0]
    lengths = [("pixel_offsets", n), ("shapes", n), ("labels", n), ("target_offsets", n + 1)]
    for name, length in lengths + ([("key_offsets", n + 1)] if "keys" in a else []):
        if a[name].shape[0] != length:
            fail(folder, name, f"has {a[name].shape[0]} rows, the manifest's count {n} needs {length}")
    shapes, offsets = a["shapes"], a["pixel_offsets"]
    if shapes.shape[1] != 3:
        fail(folder, "shapes", f"must be [count, 3] (C, H, W), received {list(shapes.shape)}")
    for axis, dim in enumerate("CHW"):
        bad = np.flatnonzero(shapes[:, axis] < 1)
        if bad.size:
            fail(folder, "shapes", f"sample {bad[0]} has {dim}={shapes[bad[0], axis]}; every dimension must be >= 1")
    channels = KINDS[manifest["pixels"]][1]
    if channels is not None and np.any(shapes[:, 0] != channels):
        i = int(np.flatnonzero(shapes[:, 0] != channels)[0])
        fail(folder, "shapes", f"sample {i} has C={shapes[i, 0]}; {manifest['pixels']} pixels have C={channels}")
    c, h, w = shapes[:, 0], shapes[:, 1], shapes[:, 2]          # all >= 1 from here on
    outside = (offsets < 0) | (offsets > total) | (c > total) | (h > total // c)
    rows = np.where(outside, 1, c * h)                           # C * H <= total where it is used
    room = total - np.clip(offsets, 0, total)
    outside |= w > room // rows
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        fail(folder, "pixel_offsets", f"sample {i} (offset {offsets[i]}, C, H, W = {shapes[i].tolist()}) "
             f"points past the {total} pixels of pixels.npy")
    check_offsets(folder, "target_offsets", a["target_offsets"], a["targets"].shape[0], "targets")
    negative = np.flatnonzero(a["targets"] < 0)
    if negative.size:
        fail(folder, "targets", f"value {a['targets'][negative[0]]} at {negative[0]}; symbols must be >= 0")
    if "keys" in a:
        check_offsets(folder, "key_offsets", a["key_offsets"], a["keys"].shape[0], "keys")
    # sample_sha256's shape, [count, 32], is checked from the manifest (check_array_list).


def check_offsets(folder: str, name: str, offsets: np.ndarray, length: int, of: str) -> None:
    if offsets[0] != 0 or offsets[-1] != length or np.any(np.diff(offsets) < 0):
        fail(folder, name, f"must rise from 0 to the {length} entries of {of}.npy, received first "
             f"{offsets[0]}, last {offsets[-1]}{', and a decrease' if np.any(np.diff(offsets) < 0) else ''}")


# ---------------------------------------------------------------- sharded packs

# A shard is a sub-folder of the sharded pack, named by a plain name: never a path that
# could leave the pack's folder (no separator, no leading dot, so never "." or "..").
SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")
# Names a shard's folder cannot take, though SHARD_NAME matches them: the pack's own
# manifest, and the maps an exact cache folder keeps beside the shards (cache.PRESENT_MAP,
# cache.CLAIMS_MAP), which a shard of that name would collide with.
RESERVED_SHARD_NAMES = (MANIFEST, "present", "claims")
SHA256_HEX = re.compile(r"[0-9a-f]{64}\Z")


def check_shard_list(path: str, manifest: dict) -> None:
    """The fields of a sharded pack's manifest beyond those of every manifest: ``shards``, a
    non-empty list of ``{"name", "count", "manifest_sha256"}`` with distinct names whose
    counts add up to ``count`` (``vocabulary`` is checked for every manifest: ``parse_manifest``)."""
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards:
        raise PackError(f"{path}: shards must be a non-empty list of {{name, count, manifest_sha256}}, "
                        f"received {brief(shards)}")
    for k, entry in enumerate(shards):
        if (not isinstance(entry, dict) or not isinstance(entry.get("name"), str)
                or not SHARD_NAME.match(entry["name"]) or entry["name"] in RESERVED_SHARD_NAMES
                or type(entry.get("count")) is not int
                or not 1 <= entry["count"] < INT32_END or not isinstance(entry.get("manifest_sha256"), str)
                or not SHA256_HEX.match(entry["manifest_sha256"])):
            raise PackError(f"{path}: shards[{k}] must be {{\"name\": a plain folder name ({SHARD_NAME.pattern}, "
                            f"none of {', '.join(RESERVED_SHARD_NAMES)}), "
                            f"\"count\": an integer in [1, 2**31), \"manifest_sha256\": 64 lowercase hex digits}}, "
                            f"received {brief(entry)}")
    names = [entry["name"] for entry in shards]
    if len(set(names)) != len(names):
        raise PackError(f"{path}: shard names must be distinct, received {names}")
    total = sum(entry["count"] for entry in shards)
    if total != manifest["count"]:
        raise PackError(f"{path}: the shards' counts add up to {total}, the manifest's count is {manifest['count']}")


class PixelFile(NamedTuple):
    """A shard's checked ``pixels.npy``, as ``map_pixel_files`` maps it: no descriptor held."""
    filename: str
    offset: int
    nbytes: int
    dtype: np.dtype


def open_shards(folder: str, manifest: dict, verify: str) -> list:
    """Every shard of the sharded pack in ``folder`` opened as a pack (``load_index``) and
    checked against the pack's manifest: its manifest's SHA-256 is the one recorded (so
    each of its arrays is the one written), its count, pixel kind and vocabulary agree,
    and either every shard has keys or none. Returns ``[(shard folder, arrays)]`` in
    manifest order (each shard's ``pixels`` a ``PixelFile``). Each error names the shard."""
    shards = manifest["shards"]
    opened = []
    for k, entry in enumerate(shards):
        where = f"{folder}: shard {k} of {len(shards)} ({entry['name']})"
        shard = os.path.join(folder, entry["name"])
        try:
            check_inside(folder, shard)
            inner, digest = open_manifest(shard)
            if inner["format"] != FORMAT:
                raise PackError(f"{os.path.join(shard, MANIFEST)}: a shard is a pack (format {FORMAT!r}), "
                                f"received {inner['format']!r}")
            if digest != entry["manifest_sha256"]:
                raise PackError(f"{os.path.join(shard, MANIFEST)}: SHA-256 {digest}, the pack's manifest records "
                                f"{entry['manifest_sha256']} (the shard was replaced or changed after the pack "
                                f"was written)")
            for field, value in (("count", entry["count"]), ("pixels", manifest["pixels"]),
                                 ("vocabulary", manifest.get("vocabulary"))):
                if inner.get(field) != value:
                    raise PackError(f"{os.path.join(shard, MANIFEST)}: {field} {inner.get(field)!r}, the pack's "
                                    f"manifest records {value!r}")
            arrays = load_index(shard, inner, verify)
            # Its mapping let go (and with it the descriptor numpy's memmap holds): a pack of
            # more shards than the open-file limit opens (map_pixel_files maps each file again).
            arrays["pixels"] = PixelFile(arrays["pixels"].filename, arrays["pixels"].offset,
                                         arrays["pixels"].nbytes, arrays["pixels"].dtype)
            opened.append((shard, arrays))
        except PackError as error:
            raise PackError(f"{where}: {error}") from None
    with_keys = [("keys" in arrays) for _, arrays in opened]
    if len(set(with_keys)) > 1:
        k = with_keys.index(not with_keys[0])
        raise PackError(f"{folder}: shard 0 ({shards[0]['name']}) {'has' if with_keys[0] else 'has no'} keys, "
                        f"shard {k} ({shards[k]['name']}) {'has' if with_keys[k] else 'has no'} keys: every shard "
                        f"has keys, or none")
    return opened


def join_shards(opened: list, pixels: np.ndarray, starts: list) -> dict:
    """The index arrays of one pack over every shard, in manifest order: shard k's samples
    follow shard k - 1's, its pixel offsets shifted by ``starts[k]`` (where its pixels
    begin in ``pixels``, the shards' pixel files mapped back to back), its target and key
    offsets by the targets and keys before it."""
    arrays = {"pixels": pixels,
              "pixel_offsets": np.concatenate([a["pixel_offsets"] + start for (_, a), start in zip(opened, starts)]),
              "shapes": np.concatenate([a["shapes"] for _, a in opened]),
              "labels": np.concatenate([a["labels"] for _, a in opened])}
    names = [("targets", "target_offsets")] + ([("keys", "key_offsets")] if "keys" in opened[0][1] else [])
    for values, offsets in names:
        arrays[values] = np.concatenate([a[values] for _, a in opened])
        before = np.cumsum([0] + [a[values].shape[0] for _, a in opened])
        arrays[offsets] = np.concatenate([a[offsets][:-1] + b for (_, a), b in zip(opened, before)] + [before[-1:]])
    return arrays
