"""The known-answer vectors of spec_tests/data/.

* The compiled package reproduces every §2 and §3 vector (rng, permutation, samplers).
* The oracle reproduces the same vectors through the same replay code, and the generator,
  run again, writes byte-identical files, so the files and ``reference.py`` cannot drift.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import reference as R
from conftest import DATA, f32_bits, f64_bits, f64_from_hex, load_vectors, vector_cases

SECTION_FILES = {"rng.json": "§2", "permutation.json": "§3", "samplers.json": "§3"}


def _encode(method, value):
    if method in ("next_u64", "next_int"):
        return str(int(value))
    if method in ("next_single", "next_normal"):
        assert float(np.float32(value)) == float(value), f"{method} returned a non-float32 {value!r}"
        return "0x%08x" % f32_bits(value)
    if method == "next_double":
        return "0x%016x" % f64_bits(value)
    raise AssertionError(method)


def _as_list(a):
    return [int(x) for x in a]


def _build_sampler(api, spec):
    kind = spec["kind"]
    if kind == "sequential":
        return api.SequentialSampler(int(spec["n"]), int(spec["batch_size"]), spec["drop_last"])
    if kind == "shuffled":
        return api.ShuffledSampler(int(spec["n"]), int(spec["batch_size"]), int(spec["seed"]),
                                   spec["drop_last"])
    if kind == "mixing":
        sources = [(int(s["start"]), int(s["size"]), f64_from_hex(s["share"])) for s in spec["sources"]]
        return api.MixingSampler(sources, int(spec["batch_size"]), int(spec["steps_per_epoch"]),
                                 int(spec["seed"]))
    if kind == "bucketed":
        return api.BucketedSampler([int(v) for v in spec["lengths"]], int(spec["batch_size"]),
                                   int(spec["pool_batches"]), int(spec["seed"]))
    raise AssertionError(kind)


def replay(api, case) -> dict:
    """Run one §2/§3 vector against ``api`` (the compiled package or the oracle) and return
    the comparable part of its output in the vector's encoding."""
    inp, want = case["input"], case["output"]
    op = inp["op"]
    if op == "draws":
        rng = api.SampleRng(int(inp["state"]))
        method = inp["method"]
        args = (int(inp["n"]),) if method == "next_int" else ()
        if "error" in want:
            with pytest.raises(ValueError):
                getattr(rng, method)(*args)
            return want
        values = [_encode(method, getattr(rng, method)(*args)) for _ in range(inp["count"])]
        out = {"values": values, "state_after": str(rng.state)}
        return {k: out[k] if k in out else want[k] for k in want}
    if op == "sequence":
        rng = api.SampleRng(int(inp["state"]))
        values = []
        for call in inp["calls"]:
            values.append(_encode(call[0], getattr(rng, call[0])(*[int(a) for a in call[1:]])))
        return {"values": values, "state_after": str(rng.state)}
    if op == "mix":
        return {"values": [str(api.mix(int(x))) for x in inp["x"]]}
    if op == "derive":
        out = {"values": [str(api.derive(*[int(a) for a in args])) for args in inp["args"]]}
        if "same_as_args" in want:
            out["same_as_args"] = want["same_as_args"]
            assert [str(api.derive(*[int(a) for a in args])) for args in want["same_as_args"]] \
                == out["values"]
        return out
    if op == "table":
        return {"table": [str(v) for v in _as_list(api.permutation(int(inp["n"]), int(inp["key"])))]}
    if op == "points":
        n, key = int(inp["n"]), int(inp["key"])
        if "error" in want:
            for p in inp["p"]:
                with pytest.raises(ValueError):
                    api.keyed_permutation(int(p), n, key)
            return want
        out = {"values": [str(api.keyed_permutation(int(p), n, key)) for p in inp["p"]]}
        if "passes" in want:
            out["passes"] = want["passes"]       # informative only
        return out
    if op == "sampler":
        s = _build_sampler(api, inp["sampler"])
        out = {"steps_per_epoch": str(s.steps_per_epoch), "batch_size": str(s.batch_size),
               "epochs": [{"epoch": e,
                           "batches": [[str(i) for i in _as_list(s.indices(int(e), k))]
                                       for k in range(s.steps_per_epoch)]}
                          for e in inp["epochs"]]}
        if "cumulative" in want:
            out["cumulative"] = want["cumulative"]   # internal table: checked on the oracle below
        return out
    if op == "sampler_error":
        with pytest.raises(ValueError):
            s = _build_sampler(api, inp["sampler"])
            if "call" in inp:
                s.indices(int(inp["call"]["epoch"]), int(inp["call"]["step"]))
        return want
    raise AssertionError(f"unknown op {op}")


def _cases(*files):
    out = []
    for f in files:
        out += [pytest.param(p.values[0], id=f"{f}:{p.id}") for p in vector_cases(f)]
    return out


ALL_23 = _cases(*SECTION_FILES)


@pytest.mark.parametrize("case", ALL_23)
def test_compiled_reproduces_vector(om, case):
    """The compiled package gives every §2/§3 known answer (pinned readings in `pins`)."""
    assert replay(om, case) == case["output"]


@pytest.mark.parametrize("case", ALL_23)
def test_reference_reproduces_vector(case):
    """The oracle, replayed through the same code, gives the same known answers."""
    assert replay(R, case) == case["output"]


def test_mixing_cumulative_tables():
    """D10's float64 left-to-right cumulative bounds recorded in the vectors are the oracle's."""
    for case in load_vectors("samplers.json")["cases"]:
        if case["input"]["op"] == "sampler" and case["input"]["sampler"]["kind"] == "mixing":
            s = _build_sampler(R, case["input"]["sampler"])
            assert ["0x%016x" % f64_bits(c) for c, _, _ in s._table] == case["output"]["cumulative"]


def test_vector_files_are_well_formed():
    """Every file has a section and uniquely named cases with pins, input and output; every
    reading D1-D17 is pinned by at least one case; the files stay small."""
    pinned, total = set(), 0
    for name in ["rng.json", "permutation.json", "samplers.json", "collate.json", "image.json",
                 "synthetic.json", "stream.json"]:
        path = os.path.join(DATA, name)
        total += os.path.getsize(path)
        doc = load_vectors(name)
        assert doc["section"]
        names = [c["name"] for c in doc["cases"]]
        assert len(names) == len(set(names))
        for c in doc["cases"]:
            assert set(c) == {"name", "pins", "input", "output"}
            assert c["pins"] and "op" in c["input"]
            pinned.update(c["pins"])
    assert {f"D{i}" for i in range(1, 18)} <= pinned
    assert total < 2_000_000


def test_published_values_are_in_the_vectors():
    """The SplitMix64 reference outputs from state 1234567 are recorded verbatim."""
    case = next(c for c in load_vectors("rng.json")["cases"]
                if c["name"] == "splitmix64_published_state_1234567")
    assert case["output"]["values"] == ["6457827717110365317", "3203168211198807973",
                                        "9817491932198370423", "4593380528125082431",
                                        "16408922859458223821"]


def _generator():
    path = os.path.join(DATA, "generate_vectors.py")
    spec = importlib.util.spec_from_file_location("generate_vectors", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generator_rewrites_identical_files():
    """Running the generator again from reference.py gives byte-identical files for every
    section (including §1, §4, §6 and the synthetic dataset)."""
    built = _generator().build_all()
    for name, text in built.items():
        with open(os.path.join(DATA, name), encoding="utf-8") as fh:
            assert fh.read() == text, f"{name} is stale: run python spec_tests/data/generate_vectors.py"
