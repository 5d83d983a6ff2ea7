"""Replay known-answer vectors against an implementation, in the vectors' own encoding.

Each vector file is ``{"section": ..., "cases": [{"name", "pins", "input", "output"}]}``
(format: ``vectors/README.md``). ``replay(api, case)`` runs the case's input through
``api`` and returns an output in the same encoding, so that a result file written by this
package and one written by a port are checked the same way (``differences``). The one
replay serves the checker (``onemodel-cy conformance``), the oracle and the spec tests.
"""
from __future__ import annotations

import hashlib

import numpy as np

from onemodel_cy.conformance.augment import replay_augment, replay_augment_function, transform as augment_transform
from onemodel_cy.conformance.harness import under_every_setting
from onemodel_cy.conformance.textlines import replay_textlines
from onemodel_cy.conformance.codec import (BATCH_FIELDS, build_augmentation, build_gain_offset_copy,
                                           build_sampler, cumulative_bounds, encode_batch, encode_draw, f32_array,
                                           f32_array_data, f32_array_from, f32_hex, f64_hex, from_f64_hex, ints, short)

# Output fields written for people (walk and draw counts, the wrong float64 route shown
# for contrast, the worker settings a stream ran under); not compared.
INFORMATIVE = frozenset({"passes", "trace", "note", "draws_used", "t", "same_as_args", "harness",
                         "expected_seconds"})


class InjectedFailure(Exception):
    """The error a ``fails_at`` dataset raises for its failing index (§1: a dataset error
    surfaces at its step). Not a refusal: ``replay`` never turns it into ``{"error"}``."""


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


def _cumulative(api, spec):
    """The D10 bounds of a mixing spec: the implementation's own (``api.mixing_cumulative``
    when it offers one), else the codec's. This package keeps its table private, so its
    own results carry the codec's bounds; the ``mixing_pick`` cases with ``u`` on and
    just below each bound prove the package draws against exactly those bounds."""
    shares = [from_f64_hex(s["share"]) for s in spec["sources"] if from_f64_hex(s["share"]) > 0 and int(s["size"]) > 0]
    own = getattr(api, "mixing_cumulative", None)
    return [f64_hex(c) for c in (own(shares) if own is not None else cumulative_bounds(shares))]


def _sampler(api, inp):
    sampler = build_sampler(api, inp["sampler"])
    out = {"steps_per_epoch": str(sampler.steps_per_epoch), "batch_size": str(sampler.batch_size),
           "epochs": [{"epoch": e, "batches": [[str(i) for i in ints(sampler.indices(int(e), k))]
                                               for k in range(sampler.steps_per_epoch)]}
                      for e in inp["epochs"]]}
    if inp["sampler"]["kind"] == "mixing":
        out["cumulative"] = _cumulative(api, inp["sampler"])
    return out


def _mixing_pick(api, inp):
    """Each pick: ``MixingSampler(sources, 1, 1, seed).indices(0, 0)``, whose one slot draws
    ``u`` (the seed was solved for it); the source is the eligible one holding the index."""
    spec = {"kind": "mixing", "sources": inp["sources"], "batch_size": "1", "steps_per_epoch": "1"}
    ranges = [(k, int(s["start"]), int(s["size"])) for k, s in enumerate(inp["sources"])
              if from_f64_hex(s["share"]) > 0 and int(s["size"]) > 0]
    indices, sources = [], []
    for pick in inp["picks"]:
        index = int(build_sampler(api, dict(spec, seed=pick["seed"])).indices(0, 0)[0])
        indices.append(str(index))
        sources.append(next((str(k) for k, start, size in ranges if start <= index < start + size), "none"))
    return {"cumulative": _cumulative(api, {"sources": inp["sources"]}), "sources": sources, "indices": indices}


def _sampler_error(api, inp):
    sampler = build_sampler(api, inp["sampler"])
    if "call" in inp:
        sampler.indices(int(inp["call"]["epoch"]), int(inp["call"]["step"]))
    return {"accepted": True}


# ---------------------------------------------------------------- §4, §6, the dataset, §1

class _FailingAt:
    """A dataset that serves ``inner``'s samples but fails at one index."""

    def __init__(self, inner, index):
        self.inner, self.index = inner, index

    def __len__(self):
        return len(self.inner)

    def get_sample(self, i):
        if i == self.index:
            raise InjectedFailure(f"the dataset fails at index {i}")
        return self.inner.get_sample(i)


def _dataset(api, spec):
    if spec["kind"] != "SyntheticLineImages":
        raise ValueError(f"unknown dataset kind {spec['kind']!r}")
    dataset = api.SyntheticLineImages(int(spec["count"]), height=int(spec["height"]),
                                      min_width=int(spec["min_width"]), max_width=int(spec["max_width"]),
                                      channels=int(spec["channels"]), seed=int(spec["seed"]))
    return dataset if "fails_at" not in spec else _FailingAt(dataset, int(spec["fails_at"]))


def _augmentation(api, spec):
    return build_augmentation(spec, {"gain_offset": api.GainOffset, "gaussian_noise": api.GaussianNoise})


def _transform(api, spec):
    if spec is None:
        return None
    if spec["kind"] == "augment":         # a built-in augmentation (docs/contract.md) as the transform
        return augment_transform(api, spec["op"])
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
    return {"planar": f32_array(out), **_planar_constants(api, inp)}


def _planar_constants(api, inp):
    """The float32 ``scale`` and ``bias`` (D15) the implementation's kernel uses, read off
    two one-pixel conversions: pixel 1 with mean 0 gives ``1*scale - 0 = scale`` and pixel 0
    gives ``0*scale - bias = -bias``, both exact in float32."""
    if inp["op"] == "gray8":
        one = api.gray8_to_planar(bytes([1]), 0.0, from_f64_hex(inp["std"]), width=1, height=1)
        zero = api.gray8_to_planar(bytes([0]), from_f64_hex(inp["mean"]), from_f64_hex(inp["std"]), width=1, height=1)
        return {"scale": f32_hex(one[0, 0, 0]), "bias": f32_hex(np.float32(0) - zero[0, 0, 0])}
    stds, means = [from_f64_hex(v) for v in inp["std"]], [from_f64_hex(v) for v in inp["mean"]]
    one = api.rgb8_to_planar(bytes([1, 1, 1]), [0.0] * 3, stds, width=1, height=1)
    zero = api.rgb8_to_planar(bytes([0, 0, 0]), means, stds, width=1, height=1)
    return {"scale": [f32_hex(one[c, 0, 0]) for c in range(3)],
            "bias": [f32_hex(np.float32(0) - zero[c, 0, 0]) for c in range(3)]}


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


def _loader(api, inp, rank, workers=0, prefetch=2):
    spec = inp["loader"]
    # Worker threads, as docs/conformance.md's harness asks of a port ("that many worker
    # threads"), whatever worker_mode="auto" would choose for a Python dataset.
    return api.DataLoader(_dataset(api, inp["dataset"]), build_sampler(api, inp["sampler"]), _collator(api, spec),
                          seed=int(spec["seed"]), transform=_transform(api, spec["transform"]), rank=rank,
                          world_size=int(inp["world_size"]), workers=workers, prefetch=prefetch,
                          worker_mode="thread")


def _stream(api, inp):
    sampler, world = build_sampler(api, inp["sampler"]), int(inp["world_size"])
    # At least one loader, so that a world size below 1 reaches the loader and is refused.
    loaders = [_loader(api, inp, rank) for rank in range(max(world, 1))]
    batches = []
    for g in inp["steps"]:
        for rank, loader in enumerate(loaders):
            batch = loader.batch_at(int(g))
            epoch, step = batch.epoch, batch.step
            out = _batch(batch)
            out.update({"g": str(g), "rank": str(rank), "epoch": str(epoch), "step": str(step)})
            batches.append(out)
    return {"steps_per_epoch": str(sampler.steps_per_epoch), "batches": batches}


def _run_stream(loader, start, stop, delivery):
    """Rank's batches of ``loader.iter(start, stop)`` in delivery order (each digested into
    ``delivery``), and the global step at which the stream raised the dataset's failure
    (then the stream must end)."""
    batches, error_at = [], None
    with loader, loader.iter(start, stop) as stream:
        while True:
            try:
                batch = next(stream)
            except StopIteration:
                break
            except InjectedFailure:
                if error_at is not None:      # a second failure: the stream went on after the first
                    batches.append({"g": str(stream.next_g), "after_the_error": True})
                    break
                error_at = str(stream.next_g)
                continue                      # the next call must end the stream
            delivery.add(batch)
            out = _batch(batch)            # closes the batch
            out.update({"g": str(batch.global_step), "epoch": str(batch.epoch), "step": str(batch.step)})
            batches.append(out)
    return batches, error_at


def _stream_iter(api, inp):
    sampler = build_sampler(api, inp["sampler"])

    def runs(workers, prefetch, delivery):
        out = []
        for run in inp["runs"]:
            for rank in range(max(int(inp["world_size"]), 1)):
                batches, error_at = _run_stream(_loader(api, inp, rank, workers, prefetch),
                                                int(run["start_g"]), int(run["stop_g"]), delivery)
                for b in batches:
                    b["rank"] = str(rank)
                delivery.errors.append(error_at)
                out.append({"start_g": run["start_g"], "stop_g": run["stop_g"], "rank": str(rank),
                            "batches": batches, "error_at": error_at})
        return {"steps_per_epoch": str(sampler.steps_per_epoch), "runs": out}
    return under_every_setting(inp, runs, with_errors=True)


def _stream_digest(api, inp):
    steps_per_epoch = build_sampler(api, inp["sampler"]).steps_per_epoch

    def digests(workers, prefetch, delivery):
        loader = _loader(api, inp, 0, workers, prefetch)
        with loader, loader.iter(int(inp["start_g"]), int(inp["stop_g"])) as stream:
            for batch in stream:
                with batch:
                    delivery.add(batch)
        return {"steps_per_epoch": str(steps_per_epoch), "step_sha256": [d.hex() for d in delivery.digests],
                "sha256": hashlib.sha256(b"".join(delivery.digests)).hexdigest()}
    return under_every_setting(inp, digests, with_errors=False)


_OPS = {"draws": _draws, "sequence": _sequence, "mix": _mix, "derive": _derive, "table": _table,
        "points": _points, "sampler": _sampler, "sampler_error": _sampler_error, "collate": _collate,
        "gray8": _planar, "rgb8": _planar, "synthetic": _synthetic, "stream": _stream,
        "mixing_pick": _mixing_pick, "stream_iter": _stream_iter, "stream_digest": _stream_digest}
_OPS["textlines"] = replay_textlines    # SyntheticTextLines: its own module (conformance/textlines.py)
_OPS["augment"] = replay_augment         # onemodel_cy.augment: its own module (conformance/augment.py)
_OPS["augment_function"] = replay_augment_function


def is_refusal(output) -> bool:
    """A refusal is ``{"error": "<a non-empty name>"}``; ``null`` or ``""`` is not one."""
    return isinstance(output, dict) and isinstance(output.get("error"), str) and output["error"] != ""


def _label(expected_item, k) -> str:
    """A stream batch is named by its global step and rank (``[g=7 rank=1]``), not its position."""
    if isinstance(expected_item, dict) and "g" in expected_item and "rank" in expected_item:
        return f"[g={expected_item['g']} rank={expected_item['rank']}]"
    return f"[{k}]"


def _element(shape, flat) -> str:
    names = {4: ("sample", "channel", "row", "column"), 3: ("channel", "row", "column")}.get(len(shape))
    coords = np.unravel_index(flat, shape) if shape else ()
    if names is None:
        return f"element {list(int(c) for c in coords)} (flat {flat})"
    return "element " + ", ".join(f"{n} {int(c)}" for n, c in zip(names, coords)) + f" (flat {flat})"


def _array_differences(expected, got, path, keys, full):
    """A float32 array: shape, then hash; when the hashes differ and ``got`` carries its
    values, the first differing element with both bit patterns."""
    if not isinstance(got, dict) or "sha256" not in got or "shape" not in got:
        return [f"{path}: expected a float32 array {{shape, sha256}}, got {short(got)}"]
    if got["shape"] != expected["shape"]:
        return [f"{path}.shape: expected {expected['shape']!r}, got {short(got['shape'])}"]
    # Values written beside the hash are checked whenever they are there, even under a
    # right hash: a port's values that contradict its own hash are a fault of the port.
    try:
        mine = f32_array_data(got)
    except (ValueError, TypeError, KeyError, OverflowError) as error:
        # The messages are the codec's (a port's values in them already cut) or base64's.
        return [f"{path}: the array's values cannot be read: {str(error)[:200]}"]
    if mine is not None and hashlib.sha256(mine.astype("<f4").tobytes()).hexdigest() != got["sha256"]:
        return [f"{path}: your {'values_f32' if 'values_f32' in got else 'data_b64'} do not hash to your sha256 "
                f"({short(got['sha256'])})"]
    if got["sha256"] == expected["sha256"]:
        return []
    if mine is None:
        return [f"{path}.sha256: expected {short(expected['sha256'])}, got {short(got['sha256'])} (write values_f32 "
                f"or data_b64 beside the hash to be told the first differing element)"]
    theirs = f32_array_data(expected) if "values_f32" in expected else _lookup(full, keys)
    if theirs is None:
        return [f"{path}.sha256: expected {short(expected['sha256'])}, got {short(got['sha256'])}"]
    a, b = theirs.reshape(-1).view("<u4"), mine.reshape(-1).view("<u4")
    flat = int(np.flatnonzero(a != b)[0])
    return [f"{path}: {_element(expected['shape'], flat)} expected 0x{int(a[flat]):08x}, got 0x{int(b[flat]):08x} "
            f"({int((a != b).sum())} of {a.size} elements differ)"]


def _lookup(full, keys):
    """The expected array at ``keys`` in this package's own output for the case (the vector
    carries only its hash); ``None`` when no such output is at hand."""
    if full is None:
        return None
    try:
        node = full()
        for key in keys:
            node = node[key]
        return f32_array_data(node)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def differences(expected, got, path="output", full=None, keys=()):
    """Where ``got`` differs from ``expected`` (keys of ``expected`` only, informative ones skipped).

    ``full``, when given, returns this package's own output for the case with every float
    array's values: it names the first differing element of an array whose vector carries
    only a hash."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{path}: expected an object, got {short(got)}"]
        if "error" in expected:
            if is_refusal(got):
                return []
            if "error" in got:
                return [f"{path}: expected the input to be refused; {{\"error\": {short(got['error'])}}} is not a "
                        f"refusal (write the error's name)"]
            return [f"{path}: expected the input to be refused, it was accepted"]
        if is_refusal(got):
            return [f"{path}: your port refused this input (error {short(got['error'])}); it must be accepted"]
        if "sha256" in expected and "shape" in expected:
            return _array_differences(expected, got, path, keys, full)
        found = []
        # A stream batch's step and rank first: a batch out of place is named as such; a
        # digest's steps before the whole stream's hash: the first wrong step is named.
        for key, value in sorted(expected.items(), key=lambda item: (item[0] not in ("g", "rank"),
                                                                     item[0] != "step_sha256")):
            if informative(key):
                continue
            if key not in got:
                found.append(f"{path}.{key}: missing")
            else:
                found += differences(value, got[key], f"{path}.{key}", full, (*keys, key))
        return found
    if isinstance(expected, list):
        if not isinstance(got, list):
            return [f"{path}: expected a list of {len(expected)}, got {short(got)}"]
        found = []
        for k, (a, b) in enumerate(zip(expected, got)):
            found += differences(a, b, f"{path}{_label(a, k)}", full, (*keys, k))
        if len(got) < len(expected):
            found.append(f"{path}: {_label(expected[len(got)], len(got))} missing (expected a list of "
                         f"{len(expected)}, got {len(got)})")
        elif len(got) > len(expected):
            found.append(f"{path}: {_label(got[len(expected)], len(expected))} is extra (expected a list of "
                         f"{len(expected)}, got {len(got)})")
        return found
    return [] if expected == got else [f"{path}: expected {short(expected)}, got {short(got)}"]
