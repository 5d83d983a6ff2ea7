"""The known-answer vectors of ``SyntheticTextLines`` (``vectors/textlines.json``), from the oracle.

``generate_vectors.py`` writes this file with the others (it imports ``build_textlines``
from here); this module holds only what belongs to the dataset, so that its cases change
apart from the other sections. Like the main generator it computes everything with
``reference.py`` and never imports the compiled package (the encoding is loaded by path).
"""
from __future__ import annotations

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import reference as R  # noqa: E402


def _load(name, *parts):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "onemodel_cy", "conformance", *parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


codec = _load("_textlines_vector_codec", "codec.py")

# (name, parameters, indices, every value written out?)
CONFIGS = [
    ("tiny_scale_1", dict(height=7, min_length=1, max_length=3, num_symbols=16, scale=1, noise=0.5, seed=0),
     range(6), True),
    ("no_noise", dict(height=9, min_length=2, max_length=2, num_symbols=16, scale=1, noise=0.0, seed=3),
     range(4), True),
    ("default", dict(height=24, min_length=1, max_length=6, num_symbols=10, scale=2, noise=0.5, seed=0),
     [0, 1, 2, 3, 999], False),
    ("every_glyph", dict(height=21, min_length=16, max_length=16, num_symbols=16, scale=3, noise=0.25,
                         seed=11), range(2), False),
    ("seed_minus_1", dict(height=16, min_length=1, max_length=8, num_symbols=4, scale=2, noise=1.5, seed=-1),
     range(8), False),
    ("one_symbol", dict(height=30, min_length=5, max_length=7, num_symbols=1, scale=4, noise=0.1, seed=2),
     range(2), False),
]

# Inputs every implementation must refuse (ValueError in this package).
REFUSED = [
    ("height_below_glyph", dict(height=13, min_length=1, max_length=6, num_symbols=10, scale=2, noise=0.5, seed=0)),
    ("num_symbols_17", dict(height=24, min_length=1, max_length=6, num_symbols=17, scale=2, noise=0.5, seed=0)),
    ("min_length_0", dict(height=24, min_length=0, max_length=6, num_symbols=10, scale=2, noise=0.5, seed=0)),
    ("max_below_min", dict(height=24, min_length=4, max_length=3, num_symbols=10, scale=2, noise=0.5, seed=0)),
    ("negative_noise", dict(height=24, min_length=1, max_length=6, num_symbols=10, scale=2, noise=-0.5, seed=0)),
    ("scale_0", dict(height=24, min_length=1, max_length=6, num_symbols=10, scale=0, noise=0.5, seed=0)),
]

# Added in issue 24, after the released cases: every documented upper bound, the largest
# value accepted and the next one refused, and noise that is not finite — as given, or
# only once rounded to float32 (1e39 is a finite float64; the contract checks f32(noise)).
AT_BOUNDS = [
    ("scale_64", dict(height=448, min_length=1, max_length=2, num_symbols=16, scale=64, noise=0.5, seed=5),
     range(2), False),
    ("height_4096", dict(height=4096, min_length=1, max_length=1, num_symbols=10, scale=1, noise=0.5, seed=6),
     range(1), False),
    ("length_4096", dict(height=7, min_length=4096, max_length=4096, num_symbols=16, scale=1, noise=0.5, seed=7),
     range(1), False),
]
PAST_BOUNDS = [
    ("scale_65", dict(height=455, min_length=1, max_length=2, num_symbols=10, scale=65, noise=0.5, seed=0)),
    ("height_4097", dict(height=4097, min_length=1, max_length=6, num_symbols=10, scale=2, noise=0.5, seed=0)),
    ("max_length_4097", dict(height=24, min_length=1, max_length=4097, num_symbols=10, scale=2, noise=0.5, seed=0)),
    ("min_length_4097", dict(height=24, min_length=4097, max_length=4097, num_symbols=10, scale=2, noise=0.5,
                             seed=0)),
    ("num_symbols_0", dict(height=24, min_length=1, max_length=6, num_symbols=0, scale=2, noise=0.5, seed=0)),
    ("noise_nan", dict(height=24, min_length=1, max_length=6, num_symbols=10, scale=2, noise=float("nan"), seed=0)),
    ("noise_infinite", dict(height=24, min_length=1, max_length=6, num_symbols=10, scale=2, noise=float("inf"),
                            seed=0)),
    ("noise_infinite_in_float32", dict(height=24, min_length=1, max_length=6, num_symbols=10, scale=2, noise=1e39,
                                       seed=0)),
]


def _encode_params(kw: dict) -> dict:
    return {k: codec.f64_hex(v) if k == "noise" else str(int(v)) for k, v in kw.items()}


def _case(name, kw, indices, full):
    samples = []
    for i in indices:
        image, target, label = R.textlines_sample(i, **kw)
        samples.append({"i": str(i), "width": int(image.shape[2]), "target": codec.ints(target),
                        "label": int(label), "image": codec.f32_array(image, full)})
    vocabulary = list(R.SyntheticTextLines(1, **kw).vocabulary)
    pins = ["contract:SyntheticTextLines"] + (["D3"] if kw["seed"] < 0 else [])
    return {"name": f"textlines_{name}", "pins": pins,
            "input": {"op": "textlines", "params": _encode_params(kw), "indices": [str(i) for i in indices],
                      "full": full},
            "output": {"samples": samples, "vocabulary": vocabulary}}


def _refused_case(name, kw):
    try:
        R.SyntheticTextLines(1, **kw)
    except ValueError:
        pass
    else:
        raise AssertionError(f"the oracle accepted textlines_refuses_{name}")
    return {"name": f"textlines_refuses_{name}", "pins": ["contract:SyntheticTextLines"],
            "input": {"op": "textlines", "params": _encode_params(kw), "indices": ["0"], "full": False},
            "output": {"error": "ValueError"}}


def build_textlines() -> dict:
    """The document of ``textlines.json``: sample cases, the refused inputs, then (added
    later, so appended) the bounds."""
    cases = [_case(*config) for config in CONFIGS]
    cases += [_refused_case(name, kw) for name, kw in REFUSED]
    cases += [_case(*config) for config in AT_BOUNDS]
    cases += [_refused_case(name, kw) for name, kw in PAST_BOUNDS]
    return {"section": "contract", "cases": cases}
