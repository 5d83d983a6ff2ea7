"""Replay known-answer vectors against this package, in the vectors' own encoding.

Each vector file is ``{"section": ..., "cases": [{"name", "pins", "input", "output"}]}``
(format: ``spec_tests/data/README.md``). ``replay(case)`` runs the case's input through
the compiled package and returns an output in the same encoding, so that a result file
written by this package and one written by a port are checked the same way.
"""
from __future__ import annotations

import hashlib
import struct

import numpy as np

import onemodel_cy as om

# Output fields written for people (derived constants, walk and draw counts, the wrong
# float64 route shown for contrast); not compared.
INFORMATIVE = frozenset({"scale", "bias", "passes", "cumulative", "trace", "note", "draws_used", "t",
                         "same_as_args"})


def informative(key) -> bool:
    return key in INFORMATIVE or key.startswith("float64_route")


def f32_hex(value) -> str:
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", np.float32(value)))[0]


def f64_hex(value) -> str:
    return "0x%016x" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]


def from_f64_hex(text) -> float:
    return struct.unpack("<d", struct.pack("<Q", int(text, 16)))[0]


def f32_array(array) -> dict:
    array = np.ascontiguousarray(array, dtype="<f4")
    return {"shape": list(array.shape), "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
            "values_f32": [f32_hex(v) for v in array.reshape(-1)]}


def _ints(values) -> list:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _draw(rng, method, args):
    value = getattr(rng, method)(*args)
    if method in ("next_u64", "next_int"):
        return str(int(value))
    if method in ("next_single", "next_normal"):
        return f32_hex(value)
    return f64_hex(value)


def _sampler(spec):
    kind = spec["kind"]
    if kind == "sequential":
        return om.SequentialSampler(int(spec["n"]), int(spec["batch_size"]), spec["drop_last"])
    if kind == "shuffled":
        return om.ShuffledSampler(int(spec["n"]), int(spec["batch_size"]), int(spec["seed"]), spec["drop_last"])
    if kind == "mixing":
        sources = [(int(s["start"]), int(s["size"]), from_f64_hex(s["share"])) for s in spec["sources"]]
        return om.MixingSampler(sources, int(spec["batch_size"]), int(spec["steps_per_epoch"]), int(spec["seed"]))
    if kind == "bucketed":
        return om.BucketedSampler([int(v) for v in spec["lengths"]], int(spec["batch_size"]),
                                  int(spec["pool_batches"]), int(spec["seed"]))
    raise ValueError(f"unknown sampler kind {kind!r}")


def _dataset(spec):
    if spec["kind"] != "SyntheticLineImages":
        raise ValueError(f"unknown dataset kind {spec['kind']!r}")
    return om.SyntheticLineImages(int(spec["count"]), height=int(spec["height"]), min_width=int(spec["min_width"]),
                                  max_width=int(spec["max_width"]), channels=int(spec["channels"]),
                                  seed=int(spec["seed"]))


def _augmentation(spec):
    if spec is None:
        return None
    if spec["kind"] == "gain_offset":
        return om.GainOffset(from_f64_hex(spec["gain"]), from_f64_hex(spec["offset"]))
    if spec["kind"] == "gaussian_noise":
        return om.GaussianNoise(from_f64_hex(spec["sigma"]))
    raise ValueError(f"unknown augmentation kind {spec['kind']!r}")


def _transform(spec):
    if spec is None:
        return None
    if spec["kind"] != "gain_offset_copy":
        raise ValueError(f"unknown transform kind {spec['kind']!r}")
    augment = om.GainOffset(from_f64_hex(spec["gain"]), from_f64_hex(spec["offset"]))

    def gain_offset_copy(sample, rng):
        image = np.array(sample.image, dtype=np.float32, copy=True)
        augment(image, rng)
        return om.Sample(image, sample.target, sample.label)
    return gain_offset_copy


def _explicit_sample(spec):
    bits = np.array([int(h, 16) for h in spec["image"]["values_f32"]], dtype=np.uint32)
    image = bits.view(np.float32).reshape(spec["image"]["shape"])
    return om.Sample(image, np.array(spec["target"], dtype=np.int32), spec["label"])


def _batch(batch) -> dict:
    with batch:
        return {"images": f32_array(batch.images), "widths": _ints(batch.widths), "targets": _ints(batch.targets),
                "target_lengths": _ints(batch.target_lengths), "labels": _ints(batch.labels),
                "indices": _ints(batch.indices)}


def _planar(op, inp):
    height, width, stride = int(inp["height"]), int(inp["width"]), int(inp["stride"])
    src = bytes(inp["src"])
    if op == "gray8":
        out = om.gray8_to_planar(src, from_f64_hex(inp["mean"]), from_f64_hex(inp["std"]),
                                 width=width, height=height, stride=stride)
    else:
        out = om.rgb8_to_planar(src, [from_f64_hex(m) for m in inp["mean"]], [from_f64_hex(s) for s in inp["std"]],
                                width=width, height=height, stride=stride)
    return {"planar": f32_array(out)}


def replay(case) -> dict:
    """This package's output for one case, in the vector encoding. Refused inputs give
    ``{"error": "<exception type>"}``."""
    inp = case["input"]
    op = inp["op"]
    try:
        return _replay(op, inp)
    except (ValueError, TypeError, IndexError, OverflowError) as error:
        return {"error": type(error).__name__}


def _replay(op, inp):
    if op == "draws":
        rng = om.SampleRng(int(inp["state"]))
        args = (int(inp["n"]),) if inp["method"] == "next_int" else ()
        values = [_draw(rng, inp["method"], args) for _ in range(inp["count"])]
        return {"values": values, "state_after": str(rng.state)}
    if op == "sequence":
        rng = om.SampleRng(int(inp["state"]))
        values = [_draw(rng, call[0], [int(a) for a in call[1:]]) for call in inp["calls"]]
        return {"values": values, "state_after": str(rng.state)}
    if op == "mix":
        return {"values": [str(om.mix(int(x))) for x in inp["x"]]}
    if op == "derive":
        return {"values": [str(om.derive(*[int(a) for a in args])) for args in inp["args"]]}
    if op == "table":
        return {"table": [str(v) for v in om.permutation(int(inp["n"]), int(inp["key"])).tolist()]}
    if op == "points":
        n, key = int(inp["n"]), int(inp["key"])
        return {"values": [str(om.keyed_permutation(int(p), n, key)) for p in inp["p"]]}
    if op in ("sampler", "sampler_error"):
        sampler = _sampler(inp["sampler"])
        if op == "sampler_error":
            if "call" in inp:
                sampler.indices(int(inp["call"]["epoch"]), int(inp["call"]["step"]))
            return {"accepted": True}
        return {"steps_per_epoch": str(sampler.steps_per_epoch), "batch_size": str(sampler.batch_size),
                "epochs": [{"epoch": e, "batches": [[str(i) for i in sampler.indices(int(e), k).tolist()]
                                                    for k in range(sampler.steps_per_epoch)]}
                           for e in inp["epochs"]]}
    if op == "collate":
        collator = om.ImageBatchCollator(int(inp["width_multiple"]), from_f64_hex(inp["pad_value"]),
                                         _augmentation(inp["augmentation"]))
        indices = [int(i) for i in inp["indices"]]
        if "samples" in inp:
            samples = [_explicit_sample(s) for s in inp["samples"]]
        else:
            dataset = _dataset(inp["dataset"])
            samples = [dataset.get_sample(i) for i in indices]
        return _batch(collator.collate(samples, indices, int(inp["seed"]), int(inp["epoch"]), int(inp["step"]),
                                       first_slot=int(inp["slot_offset"])))
    if op in ("gray8", "rgb8"):
        return _planar(op, inp)
    if op == "synthetic":
        params = {k: int(v) for k, v in inp["params"].items()}
        params.pop("count", None)    # sample i does not depend on the count
        dataset = om.SyntheticLineImages(max(int(i) for i in inp["indices"]) + 1, **params)
        samples = []
        for i in inp["indices"]:
            s = dataset.get_sample(int(i))
            samples.append({"i": str(i), "image": f32_array(s.image), "label": int(s.label),
                            "target": _ints(s.target), "width": int(s.image.shape[2])})
        return {"samples": samples}
    if op == "stream":
        dataset, sampler, spec = _dataset(inp["dataset"]), _sampler(inp["sampler"]), inp["loader"]
        world = int(inp["world_size"])
        loaders = [om.DataLoader(dataset, sampler, om.ImageBatchCollator(int(spec["width_multiple"]),
                                                                          from_f64_hex(spec["pad_value"]),
                                                                          _augmentation(spec["augmentation"])),
                                 seed=int(spec["seed"]), transform=_transform(spec["transform"]),
                                 rank=rank, world_size=world)
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
    raise ValueError(f"unknown op {op!r}")


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
