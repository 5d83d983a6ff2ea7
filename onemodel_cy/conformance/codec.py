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
VECTOR_FILES += ("augment.json",)       # onemodel_cy.augment (spec_tests/generate_augment_vectors.py)

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


# ---------------------------------------------------------------- text-line augmentations

# The leaf kinds of an ``augment`` transform spec (docs/contract.md, "Text-line
# augmentations"): the constructor's name, then its arguments in constructor order, each
# with its encoding: "f" a float64 (bits), "r" a range [f, f], "i" an integer (a decimal
# string), "i?" an integer or null, "w" a window [i, i] (width, height), "s" a string.
AUGMENT_LEAVES = {
    "resize_height": ("ResizeHeight", (("height", "i"), ("max_width", "i?"))),
    "stretch": ("Stretch", (("scale", "r"),)),
    "affine": ("Affine", (("rotate", "f"), ("shear", "f"), ("scale", "r"), ("shift", "f"), ("border", "s"),
                          ("fill", "f"))),
    "perspective": ("Perspective", (("jitter", "f"), ("border", "s"), ("fill", "f"))),
    "elastic": ("Elastic", (("magnitude", "r"), ("cell", "i"), ("border", "s"), ("fill", "f"))),
    "erode": ("Erode", (("size", "w"),)),
    "dilate": ("Dilate", (("size", "w"),)),
    "gaussian_blur": ("GaussianBlur", (("sigma", "r"),)),
    "brightness_contrast": ("BrightnessContrast", (("gain", "r"), ("offset", "r"))),
    "gaussian_noise": ("GaussianNoise", (("sigma", "r"),)),
    "speckle_noise": ("SpeckleNoise", (("sigma", "r"),)),
    "impulse_noise": ("ImpulseNoise", (("amount", "r"), ("low", "f"), ("high", "f"))),
    "invert": ("Invert", (("low", "f"), ("high", "f"))),
}


def _encode_argument(how, value):
    if how == "f":
        return f64_hex(value)
    if how == "r":
        return [f64_hex(v) for v in value]
    if how == "i?" and value is None:
        return None
    if how in ("i", "i?"):
        return str(int(value))
    if how == "w":
        return [str(int(v)) for v in value]
    return value


def _decode_argument(how, value):
    if how == "f":
        return from_f64_hex(value)
    if how == "r":
        return tuple(from_f64_hex(v) for v in value)
    if how == "i?" and value is None:
        return None
    if how in ("i", "i?"):
        return int(value)
    if how == "w":
        return tuple(int(v) for v in value)
    return value


def transform_spec(kind, *args) -> dict:
    """The spec of one operation: ``("compose", [specs])``, ``("random_apply", spec, p)``,
    ``("one_of", [specs], weights)``, or a leaf of AUGMENT_LEAVES with its arguments in
    constructor order (floats as Python floats)."""
    if kind == "compose":
        return {"kind": kind, "ops": list(args[0])}
    if kind == "random_apply":
        return {"kind": kind, "op": args[0], "p": f64_hex(args[1])}
    if kind == "one_of":
        return {"kind": kind, "ops": list(args[0]), "weights": [f64_hex(w) for w in args[1]]}
    _, fields = AUGMENT_LEAVES[kind]
    return {"kind": kind, **{name: _encode_argument(how, value) for (name, how), value in zip(fields, args)}}


def build_transform(ns, spec):
    """The operation a transform spec describes, made with ``ns``'s constructors (the
    compiled ``onemodel_cy.augment`` or the oracle's ``reference_augment``: both take the
    same arguments and refuse the same ones)."""
    kind = spec["kind"]
    if kind == "compose":
        return ns.Compose([build_transform(ns, s) for s in spec["ops"]])
    if kind == "random_apply":
        return ns.RandomApply(build_transform(ns, spec["op"]), from_f64_hex(spec["p"]))
    if kind == "one_of":
        return ns.OneOf([build_transform(ns, s) for s in spec["ops"]], [from_f64_hex(w) for w in spec["weights"]])
    if kind not in AUGMENT_LEAVES:
        raise ValueError(f"unknown augmentation kind {kind!r}")
    name, fields = AUGMENT_LEAVES[kind]
    return getattr(ns, name)(*[_decode_argument(how, spec[field]) for field, how in fields])


def transform_text(spec) -> str:
    """A spec as people read it, ``Affine(2.0, 0.3, (0.9, 1.05), 1.5, 'replicate', 0.0)``
    (floats in decimal: the bits in the spec are what counts)."""
    kind = spec["kind"]
    if kind == "compose":
        return "Compose([" + ", ".join(transform_text(s) for s in spec["ops"]) + "])"
    if kind == "random_apply":
        return f"RandomApply({transform_text(spec['op'])}, {from_f64_hex(spec['p'])!r})"
    if kind == "one_of":
        return (f"OneOf([{', '.join(transform_text(s) for s in spec['ops'])}], "
                f"{[from_f64_hex(w) for w in spec['weights']]!r})")
    name, fields = AUGMENT_LEAVES[kind]
    return f"{name}({', '.join(repr(_decode_argument(how, spec[field])) for field, how in fields)})"


def singles(state: int, count: int) -> np.ndarray:
    """``count`` successive ``next_single()`` draws of ``SampleRng(state)`` (§2), as float32:
    the pixels of an input image given by ``singles_state``."""
    golden, m1, m2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    z = np.uint64(state % (1 << 64)) + golden * np.arange(1, count + 1, dtype=np.uint64)
    z = (z ^ (z >> np.uint64(30))) * m1
    z = (z ^ (z >> np.uint64(27))) * m2
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)


def augment_image(encoded) -> np.ndarray:
    """The float32 ``[C, H, W]`` input image of an ``augment`` case: its ``values_f32``, or
    the ``next_single()`` draws of ``SampleRng(singles_state)`` in C order."""
    shape = [int(d) for d in encoded["shape"]]
    if "values_f32" in encoded:
        return np.ascontiguousarray(f32_array_from(encoded))
    return singles(int(encoded["singles_state"]), int(np.prod(shape))).reshape(shape)
