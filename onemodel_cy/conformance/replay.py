"""Replay known-answer vectors against an implementation, in the vectors' own encoding.

Each vector file is ``{"section": ..., "cases": [{"name", "pins", "input", "output"}]}``
(format: ``vectors/README.md``). ``replay(api, case)`` runs the case's input through
``api`` and returns an output in the same encoding, so that a result file written by this
package and one written by a port are checked the same way (``differences``). The one
replay serves the checker (``onemodel-cy conformance``), the oracle and the spec tests.
"""
from __future__ import annotations

import numpy as np

from onemodel_cy.conformance.textlines import replay_textlines
from onemodel_cy.conformance.codec import (BATCH_FIELDS, build_augmentation, build_gain_offset_copy, build_sampler,
                                           encode_batch, encode_draw, f32_array, f32_array_from, from_f64_hex, ints)

# Output fields written for people (derived constants, walk and draw counts, the wrong
# float64 route shown for contrast); not compared.
INFORMATIVE = frozenset({"scale", "bias", "passes", "cumulative", "trace", "note", "draws_used", "t",
                         "same_as_args"})


def informative(key) -> bool:
    return key in INFORMATIVE or key.startswith("float64_route")


def replay(api, case) -> dict:
    """``api``'s output for one case, in the vector encoding.

    Parameters
    ----------
    api : module
        The implementation replayed: ``onemodel_cy``, or anything offering the same names.
        The oracle ``spec_tests/reference.py`` offers the §2 and §3 ones (``rng``,
        ``permutation`` and ``samplers`` cases).
    case : dict
        One case of a vector file; only its ``input`` is read.

    Returns
    -------
    dict
        The output; an input refused with ValueError, TypeError, IndexError or
        OverflowError gives ``{"error": "<exception type>"}``.
    """
    inp = case["input"]
    try:
        run = _OPS[inp["op"]]
    except KeyError:
        raise ValueError(f"unknown op {inp['op']!r} in case {case.get('name')!r}") from None
    try:
        return run(api, inp)
    except (ValueError, TypeError, IndexError, OverflowError) as error:
        return {"error": type(error).__name__}


# ---------------------------------------------------------------- §2, §3

def _draws(api, inp):
    rng = api.SampleRng(int(inp["state"]))
    method = inp["method"]
    args = (int(inp["n"]),) if method == "next_int" else ()
    values = [encode_draw(method, getattr(rng, method)(*args)) for _ in range(inp["count"])]
    return {"values": values, "state_after": str(rng.state)}


def _sequence(api, inp):
    rng = api.SampleRng(int(inp["state"]))
    values = [encode_draw(call[0], getattr(rng, call[0])(*[int(a) for a in call[1:]])) for call in inp["calls"]]
    return {"values": values, "state_after": str(rng.state)}


def _mix(api, inp):
    return {"values": [str(api.mix(int(x))) for x in inp["x"]]}


def _derive(api, inp):
    return {"values": [str(api.derive(*[int(a) for a in args])) for args in inp["args"]]}


def _table(api, inp):
    return {"table": [str(v) for v in ints(api.permutation(int(inp["n"]), int(inp["key"])))]}


def _points(api, inp):
    n, key = int(inp["n"]), int(inp["key"])
    return {"values": [str(api.keyed_permutation(int(p), n, key)) for p in inp["p"]]}


def _sampler(api, inp):
    sampler = build_sampler(api, inp["sampler"])
    return {"steps_per_epoch": str(sampler.steps_per_epoch), "batch_size": str(sampler.batch_size),
            "epochs": [{"epoch": e, "batches": [[str(i) for i in ints(sampler.indices(int(e), k))]
                                                for k in range(sampler.steps_per_epoch)]}
                       for e in inp["epochs"]]}


def _sampler_error(api, inp):
    sampler = build_sampler(api, inp["sampler"])
    if "call" in inp:
        sampler.indices(int(inp["call"]["epoch"]), int(inp["call"]["step"]))
    return {"accepted": True}


# ---------------------------------------------------------------- §4, §6, the dataset, §1

def _dataset(api, spec):
    if spec["kind"] != "SyntheticLineImages":
        raise ValueError(f"unknown dataset kind {spec['kind']!r}")
    return api.SyntheticLineImages(int(spec["count"]), height=int(spec["height"]), min_width=int(spec["min_width"]),
                                   max_width=int(spec["max_width"]), channels=int(spec["channels"]),
                                   seed=int(spec["seed"]))


def _augmentation(api, spec):
    return build_augmentation(spec, {"gain_offset": api.GainOffset, "gaussian_noise": api.GaussianNoise})


def _transform(api, spec):
    if spec is None:
        return None
    augment = build_gain_offset_copy(spec, api.GainOffset)

    def gain_offset_copy(sample, rng):
        image = np.array(sample.image, dtype=np.float32, copy=True)
        augment(image, rng)
        return api.Sample(image, sample.target, sample.label)
    return gain_offset_copy


def _collator(api, spec):
    return api.ImageBatchCollator(int(spec["width_multiple"]), from_f64_hex(spec["pad_value"]),
                                  _augmentation(api, spec["augmentation"]))


def _batch(batch) -> dict:
    with batch:
        return encode_batch({name: getattr(batch, name) for name in BATCH_FIELDS})


def _collate(api, inp):
    indices = [int(i) for i in inp["indices"]]
    if "samples" in inp:
        samples = [api.Sample(f32_array_from(s["image"]), np.array(s["target"], dtype=np.int32), s["label"])
                   for s in inp["samples"]]
    else:
        dataset = _dataset(api, inp["dataset"])
        samples = [dataset.get_sample(i) for i in indices]
    return _batch(_collator(api, inp).collate(samples, indices, int(inp["seed"]), int(inp["epoch"]),
                                              int(inp["step"]), first_slot=int(inp["slot_offset"])))


def _planar(api, inp):
    height, width, stride = int(inp["height"]), int(inp["width"]), int(inp["stride"])
    src = bytes(inp["src"])
    if inp["op"] == "gray8":
        out = api.gray8_to_planar(src, from_f64_hex(inp["mean"]), from_f64_hex(inp["std"]),
                                  width=width, height=height, stride=stride)
    else:
        out = api.rgb8_to_planar(src, [from_f64_hex(m) for m in inp["mean"]], [from_f64_hex(s) for s in inp["std"]],
                                 width=width, height=height, stride=stride)
    return {"planar": f32_array(out)}


def _synthetic(api, inp):
    params = {k: int(v) for k, v in inp["params"].items()}
    params.pop("count", None)    # sample i does not depend on the count
    dataset = api.SyntheticLineImages(max(int(i) for i in inp["indices"]) + 1, **params)
    samples = []
    for i in inp["indices"]:
        s = dataset.get_sample(int(i))
        samples.append({"i": str(i), "image": f32_array(s.image), "label": int(s.label),
                        "target": ints(s.target), "width": int(s.image.shape[2])})
    return {"samples": samples}


def _stream(api, inp):
    dataset, sampler, spec = _dataset(api, inp["dataset"]), build_sampler(api, inp["sampler"]), inp["loader"]
    world = int(inp["world_size"])
    loaders = [api.DataLoader(dataset, sampler, _collator(api, spec), seed=int(spec["seed"]),
                              transform=_transform(api, spec["transform"]), rank=rank, world_size=world)
               for rank in range(world)]
    batches = []
    for g in inp["steps"]:
        for rank, loader in enumerate(loaders):
            batch = loader.batch_at(int(g))
            epoch, step = batch.epoch, batch.step
            out = _batch(batch)
            out.update({"g": str(g), "rank": str(rank), "epoch": str(epoch), "step": str(step)})
            batches.append(out)
    return {"steps_per_epoch": str(sampler.steps_per_epoch), "batches": batches}


_OPS = {"draws": _draws, "sequence": _sequence, "mix": _mix, "derive": _derive, "table": _table,
        "points": _points, "sampler": _sampler, "sampler_error": _sampler_error, "collate": _collate,
        "gray8": _planar, "rgb8": _planar, "synthetic": _synthetic, "stream": _stream}
_OPS["textlines"] = replay_textlines    # SyntheticTextLines: its own module (conformance/textlines.py)


def differences(expected, got, path="output"):
    """Where ``got`` differs from ``expected`` (keys of ``expected`` only, informative ones skipped)."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{path}: expected an object, got {type(got).__name__}"]
        if "error" in expected:
            return [] if "error" in got else [f"{path}: expected the input to be refused, it was accepted"]
        found = []
        for key, value in expected.items():
            if informative(key):
                continue
            if key == "values_f32" and "sha256" in expected and key not in got:
                continue   # the digest already covers the values
            if key not in got:
                found.append(f"{path}.{key}: missing")
            else:
                found += differences(value, got[key], f"{path}.{key}")
        return found
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{path}: expected a list of {len(expected)}, got "
                    f"{len(got) if isinstance(got, list) else type(got).__name__}"]
        found = []
        for k, (a, b) in enumerate(zip(expected, got)):
            found += differences(a, b, f"{path}[{k}]")
        return found
    return [] if expected == got else [f"{path}: expected {expected!r}, got {got!r}"]
