"""The vectors' encoding, in one place: the files, the batch fields, float bits, sampler specs.

Everything that reads or writes a known-answer vector goes through this module: the
package's checker and ``replay``, the generator ``spec_tests/generate_vectors.py`` (which
writes the vectors from the pure-Python oracle) and the spec tests. The format is
described in ``vectors/README.md`` beside this file.

This module imports nothing from ``onemodel_cy``: the generator loads it by its path, so
that writing the vectors never imports the compiled package.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
from pathlib import Path

import numpy as np

# The vector files, in the order they are listed, written and checked.
VECTOR_FILES = ("rng.json", "permutation.json", "samplers.json", "collate.json", "image.json",
                "synthetic.json", "stream.json")
VECTOR_FILES += ("textlines.json",)     # SyntheticTextLines (spec_tests/generate_textlines_vectors.py)

# The six arrays of a collated batch (§4), in the order the contract lists them.
BATCH_FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")

VECTORS_DIR = Path(__file__).with_name("vectors")


class EncodingError(Exception):
    """A value the encoding cannot write as asked (say a float32 field handed a value no
    float32 holds). It is a fault of the implementation being replayed, not a refused
    input, so it is deliberately not a ValueError: replay lets it propagate."""


def load(name: str) -> dict:
    """The parsed vector file ``name`` (one of ``VECTOR_FILES``)."""
    with open(VECTORS_DIR / name, encoding="utf-8") as fh:
        return json.load(fh)


# ---------------------------------------------------------------- float bits

def f32_bits(value) -> int:
    """The IEEE-754 bits of a float32 value (``EncodingError`` if ``value`` is not one)."""
    single = np.float32(value)
    # Compared as float64: NumPy 2 would round a Python float to float32 before comparing.
    if float(single) != float(value) and not (math.isnan(single) and math.isnan(value)):
        raise EncodingError(f"{value!r} is not a float32 value (the nearest float32 is {single!r})")
    return struct.unpack("<I", struct.pack("<f", single))[0]


def f64_bits(value) -> int:
    """The IEEE-754 bits of a float64."""
    return struct.unpack("<Q", struct.pack("<d", float(value)))[0]


def f32_hex(value) -> str:
    """A float32 as ``'0x'`` + 8 hex digits of its bits."""
    return "0x%08x" % f32_bits(value)


def f64_hex(value) -> str:
    """A float64 as ``'0x'`` + 16 hex digits of its bits."""
    return "0x%016x" % f64_bits(value)


def from_f64_hex(text: str) -> float:
    """The float64 whose bits ``text`` spells (the inverse of ``f64_hex``)."""
    return struct.unpack("<d", struct.pack("<Q", int(text, 16)))[0]


# ---------------------------------------------------------------- arrays and batches

def ints(values) -> list:
    """An integer array (or list) as a flat list of Python ints."""
    return [int(v) for v in np.asarray(values).reshape(-1)]


def f32_array(array, full: bool = True) -> dict:
    """A float32 array as its shape and the sha256 of its little-endian C-order bytes,
    plus (``full``) every value's bits."""
    array = np.ascontiguousarray(array, dtype="<f4")
    encoded = {"shape": list(array.shape), "sha256": hashlib.sha256(array.tobytes()).hexdigest()}
    if full:
        encoded["values_f32"] = ["0x%08x" % bits for bits in array.view("<u4").reshape(-1).tolist()]
    return encoded


def f32_array_from(encoded: dict) -> np.ndarray:
    """The float32 array an ``f32_array(..., full=True)`` encoding holds."""
    bits = np.array([int(h, 16) for h in encoded["values_f32"]], dtype=np.uint32)
    return bits.view(np.float32).reshape(encoded["shape"])


# How a float32 value is written: its bits as "0x" and 8 lowercase hex digits, nothing else.
F32_TEXT = re.compile(r"0x[0-9a-f]{8}")


def f32_array_data(encoded: dict):
    """The float32 array a results file wrote in full (``values_f32`` or ``data_b64``, the
    base64 of its little-endian C-order bytes), or ``None`` when it wrote only the hash.
    Raises ``ValueError`` when the values do not fit the shape, a ``values_f32`` entry is
    not written as F32_TEXT, or both fields are there and disagree."""
    shape = [int(d) for d in encoded["shape"]]
    count = int(np.prod(shape)) if shape else 1
    arrays = []
    if "values_f32" in encoded:
        texts = encoded["values_f32"]
        if not isinstance(texts, list):
            raise ValueError(f"values_f32 must be a list of \"0x\" + 8 lowercase hex digits, got "
                             f"{type(texts).__name__}")
        wrong = next((k for k, h in enumerate(texts) if not (isinstance(h, str) and F32_TEXT.fullmatch(h))), None)
        if wrong is not None:
            raise ValueError(f"values_f32[{wrong}] is {texts[wrong]!r:.40}: write \"0x\" and 8 lowercase hex digits")
        if len(texts) != count:
            raise ValueError(f"values_f32 holds {len(texts)} values, the shape {shape} needs {count}")
        bits = np.array([int(h, 16) for h in texts], dtype="<u4")
        arrays.append(bits.view("<f4").reshape(shape))
    if "data_b64" in encoded:
        raw = base64.b64decode(encoded["data_b64"], validate=True)
        if len(raw) != 4 * count:
            raise ValueError(f"data_b64 holds {len(raw)} bytes, the shape {shape} needs {4 * count}")
        arrays.append(np.frombuffer(raw, dtype="<f4").reshape(shape))
    if len(arrays) == 2 and arrays[0].view("<u4").tobytes() != arrays[1].view("<u4").tobytes():
        raise ValueError("values_f32 and data_b64 hold different values (write one, or the same values twice)")
    return arrays[0] if arrays else None


def batch_digest(arrays) -> bytes:
    """The sha256 (32 raw bytes) of one collated batch: its six ``BATCH_FIELDS`` arrays'
    little-endian bytes concatenated in that order (images as float32 in C order, the rest
    as int32). A ``stream_digest`` case hashes these, step after step, into one digest."""
    digest = hashlib.sha256()
    for name in BATCH_FIELDS:
        dtype = "<f4" if name == "images" else "<i4"
        digest.update(np.ascontiguousarray(arrays[name], dtype=dtype).tobytes())
    return digest.digest()


def cumulative_bounds(shares) -> list:
    """D10's cumulative bounds of the eligible sources' float64 ``shares``: the total summed
    left to right, then ``c_i = c_{i-1} + share_i / total`` left to right, all in float64."""
    total = 0.0
    for share in shares:
        total += share
    bounds, cumulative = [], 0.0
    for share in shares:
        cumulative += share / total
        bounds.append(cumulative)
    return bounds


def encode_batch(arrays, full: bool = True) -> dict:
    """A collated batch (anything mapping each of ``BATCH_FIELDS`` to its array) encoded:
    the images as an ``f32_array``, the int32 arrays as lists."""
    return {name: f32_array(arrays[name], full) if name == "images" else ints(arrays[name])
            for name in BATCH_FIELDS}


def encode_draw(method: str, value) -> str:
    """One ``SampleRng`` draw: integers as decimal strings, ``next_single`` and
    ``next_normal`` as float32 bits, ``next_double`` as float64 bits."""
    if method in ("next_u64", "next_int"):
        return str(int(value))
    if method in ("next_single", "next_normal"):
        return f32_hex(value)
    if method == "next_double":
        return f64_hex(value)
    raise ValueError(f"unknown SampleRng method {method!r}")


# ---------------------------------------------------------------- messages

LONGEST = 80    # characters of a value shown in a message


def short(value) -> str:
    """``repr(value)``, cut to LONGEST characters (a port may hand in a 100,000-digit number)."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<a {type(value).__name__} nested too deeply to show>"
    return text if len(text) <= LONGEST else f"{text[:LONGEST - 20]}...{text[-12:]} ({len(text)} characters)"


# ---------------------------------------------------------------- specs

def build_sampler(api, spec: dict):
    """The sampler a vector's ``sampler`` spec describes, built with ``api`` (the compiled
    package or the oracle ``spec_tests/reference.py``: both take the same arguments)."""
    kind = spec["kind"]
    if kind == "sequential":
        return api.SequentialSampler(int(spec["n"]), int(spec["batch_size"]), spec["drop_last"])
    if kind == "shuffled":
        return api.ShuffledSampler(int(spec["n"]), int(spec["batch_size"]), int(spec["seed"]),
                                   spec["drop_last"])
    if kind == "mixing":
        sources = [(int(s["start"]), int(s["size"]), from_f64_hex(s["share"])) for s in spec["sources"]]
        return api.MixingSampler(sources, int(spec["batch_size"]), int(spec["steps_per_epoch"]),
                                 int(spec["seed"]))
    if kind == "bucketed":
        return api.BucketedSampler([int(v) for v in spec["lengths"]], int(spec["batch_size"]),
                                   int(spec["pool_batches"]), int(spec["seed"]))
    raise ValueError(f"unknown sampler kind {kind!r}")


# The augmentations a spec may name, with their float64 parameters in constructor order
# (``docs/contract.md`` defines them).
AUGMENTATIONS = {"gain_offset": ("gain", "offset"), "gaussian_noise": ("sigma",)}


def build_augmentation(spec, makers):
    """The augmentation an ``augmentation`` spec describes (``None`` stays ``None``), made
    by ``makers[kind]``, the implementation's constructor of each kind in AUGMENTATIONS,
    from the spec's float64 parameters."""
    if spec is None:
        return None
    if spec["kind"] not in AUGMENTATIONS:
        raise ValueError(f"unknown augmentation kind {spec['kind']!r}")
    return makers[spec["kind"]](*[from_f64_hex(spec[name]) for name in AUGMENTATIONS[spec["kind"]]])


def build_gain_offset_copy(spec, gain_offset):
    """The GainOffset of a ``gain_offset_copy`` transform spec (the transform returns a copy
    of the sample with that augmentation applied), made by ``gain_offset(gain, offset)``."""
    if spec["kind"] != "gain_offset_copy":
        raise ValueError(f"unknown transform kind {spec['kind']!r}")
    return build_augmentation(dict(spec, kind="gain_offset"), {"gain_offset": gain_offset})
