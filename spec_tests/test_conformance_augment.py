"""Concern: the text-line augmentations' known answers (``vectors/augment.json``, docs/contract.md
"Text-line augmentations").

* The compiled package reproduces every case through the one replay: the functions, every
  operation, the compositions, the preset on lines and as the loader's transform (under
  every worker/prefetch setting a digest case asks for), and refuses what the vectors
  refuse, with ValueError.
* The oracle reproduces every case it can replay (all but the loader's), so the replay's
  decoding and the generator's encoding cannot drift apart.
* The file pins what it says it pins: every operation and function, both borders with a
  fill that is not 0, p = 0 and 1, OneOf on a bound, the output width at 2^20, the preset,
  each constructor's refusals; and it stays small.
"""
from __future__ import annotations

import numpy as np
import pytest

import reference as R
from conftest import load_vectors, vector_cases
from onemodel_cy.conformance.augment import replay_augment, transform
from onemodel_cy.conformance.codec import AUGMENT_LEAVES, VECTORS_DIR
from onemodel_cy.conformance.replay import _transform, differences, replay

CASES = vector_cases("augment.json")
ORACLE_CASES = [p for p in CASES if p.values[0]["input"]["op"].startswith("augment")]


def _reproduces(api, case):
    got = replay(api, case)
    assert differences(case["output"], got) == [], differences(case["output"], got)[:3]
    if "error" in case["output"]:
        assert got == case["output"]


@pytest.mark.parametrize("case", CASES)
def test_compiled_reproduces_augment_vector(om, case):
    """docs/contract.md (augmentations): the compiled package gives every known answer of
    augment.json, the rng's final state included, and refuses the refused arguments."""
    _reproduces(om, case)


@pytest.mark.parametrize("case", ORACLE_CASES)
def test_reference_reproduces_augment_vector(case):
    """The oracle, replayed through the same code, gives the same answers (the loader's
    cases aside: the oracle has no loader; the generator wrote them with ``R.batch``)."""
    _reproduces(R, case)


def _cases(op=None):
    return [c for c in load_vectors("augment.json")["cases"] if op is None or c["input"]["op"] == op]


def _kinds(spec):
    yield spec
    for child in spec.get("ops", []) + ([spec["op"]] if "op" in spec else []):
        yield from _kinds(child)


def test_the_cases_pin_every_operation_at_its_edges():
    """Every leaf kind runs in some accepted case, on a 1 x 1 image and on one taller than 200
    rows; both borders run with a constant fill that is not 0; RandomApply runs at p = 0 and
    p = 1; OneOf pins D10; an output reaches the width limit; the preset runs on lines and as
    the loader's transform; every function is there; the file stays below 300 KB."""
    accepted = [c for c in _cases("augment") if "error" not in c["output"]]
    leaves = {node["kind"] for c in accepted for node in _kinds(c["input"]["transform"])}
    assert set(AUGMENT_LEAVES) <= leaves
    for kind in AUGMENT_LEAVES:
        mine = [c for c in accepted if c["input"]["transform"]["kind"] == kind]
        shapes = [c["input"]["image"]["shape"] for c in mine] + [c["output"]["image"]["shape"] for c in mine]
        assert [1, 1, 1] in shapes, f"{kind}: no 1 x 1 image"
        assert max(s[1] for s in shapes) >= 256, f"{kind}: no tall image"
    fills = {(n["kind"], n["border"], n["fill"] != "0x0000000000000000") for c in accepted
             for n in _kinds(c["input"]["transform"]) if "border" in n}
    assert {(k, "constant", True) for k in ("affine", "perspective", "elastic")} <= fills
    assert {(k, "replicate", False) for k in ("affine", "perspective", "elastic")} <= fills
    ps = {n["p"] for c in accepted for n in _kinds(c["input"]["transform"]) if n["kind"] == "random_apply"}
    assert {"0x0000000000000000", "0x3ff0000000000000"} <= ps
    assert any("D10" in c["pins"] for c in accepted)
    assert any(c["output"]["image"]["shape"][2] == 1 << 20 for c in accepted)
    assert {c["input"]["function"] for c in _cases("augment_function")} == {"sin", "cos", "expneg", "normal"}
    assert any(c["name"].startswith("text_lines_on_a_line") for c in accepted)
    assert {c["input"]["op"] for c in _cases()} >= {"augment", "augment_function", "stream", "stream_digest"}
    assert (VECTORS_DIR / "augment.json").stat().st_size < 300_000


def test_each_constructor_refuses_in_the_vectors():
    """Every operation with a bounded argument has a case refusing it past its bound."""
    refused = {c["input"]["transform"]["kind"] for c in _cases("augment") if "error" in c["output"]}
    assert refused == set(AUGMENT_LEAVES) | {"random_apply", "one_of"}


def test_the_preset_spec_builds_the_compiled_preset(om):
    """The preset as the vectors spell it is ``text_lines()`` itself, and the loader cases run
    it as a built-in Transform (the package's own route, not a Python callable)."""
    from onemodel_cy import augment as A
    case = next(c for c in _cases("stream") if c["name"] == "text_lines_transform_world_size_1")
    built = _transform(om, case["input"]["loader"]["transform"])
    assert isinstance(built, A.Transform) and built == transform(om, case["input"]["loader"]["transform"]["op"])
    image = np.random.default_rng(0).random((1, 8, 30), dtype=np.float32)
    for state in range(20):
        a, b = built.apply(image, om.SampleRng(state)), A.text_lines().apply(image, om.SampleRng(state))
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_full_flag_gives_the_values(om):
    """A case with ``full`` false is answered with the hash only (so ``conformance run --out``
    stays small); the same case asked in full carries every value."""
    case = next(c for c in _cases("augment") if c["name"] == "stretch_past_2^20_kept_to_2^20")
    assert "values_f32" not in replay_augment(om, case["input"])["image"]
    small = next(c for c in _cases("augment") if c["name"] == "affine_identity")
    assert replay_augment(om, small["input"])["image"]["values_f32"] == small["output"]["image"]["values_f32"]
