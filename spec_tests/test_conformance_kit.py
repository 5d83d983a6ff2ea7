"""Concern: conformance kit (DESIGN: `onemodel-cy conformance` for port authors).

The port checker replays the vectors of every section (§1, §2, §3, §4, §6 and the
synthetic dataset): this package passes every one of them, and the checker catches what a
wrong port would hand in.
"""
from __future__ import annotations

import copy
import io
import json

import pytest

from conftest import load_vectors
from onemodel_cy.conformance.checker import check, main, run_self
from onemodel_cy.conformance.codec import VECTOR_FILES
from onemodel_cy.conformance.replay import differences


@pytest.fixture(scope="module")
def own_results():
    return run_self()


@pytest.mark.parametrize("name", VECTOR_FILES)
def test_package_reproduces_every_vector(own_results, name):
    """Concern: conformance kit. Every known answer (§1 stream, §2, §3, §4, §6, the
    synthetic dataset), replayed through the compiled package, matches: the package
    conforms to the vectors it ships."""
    got = {c["name"]: c["output"] for c in own_results[name]["cases"]}
    for case in load_vectors(name)["cases"]:
        assert differences(case["output"], got[case["name"]]) == [], case["name"]


def _check(results, **kw):
    out = io.StringIO()
    return check(results, out=out, **kw), out.getvalue()


def test_checker_passes_the_package_and_names_a_wrong_value(own_results):
    """Concern: conformance kit. A port whose one label of one stream batch is off
    fails, and the report names the case, its pins and the path of the wrong value, the
    batch named by its global step and rank (issue 11: not by its position in the list)."""
    assert _check(own_results)[0] == 0
    broken = copy.deepcopy(own_results)
    broken["stream.json"]["cases"][0]["output"]["batches"][1]["labels"][0] += 1
    failures, report = _check(broken)
    assert failures == 1
    assert "batches[g=1 rank=0].labels[0]" in report and "§1" in report


def test_checker_catches_a_wrong_float_bit_and_a_missing_case(own_results):
    """Concern: conformance kit. One float32 bit of one draw, or a case left out, is a
    failure; with --allow-missing a partial port (say §2 only) is checked on what it
    handed in."""
    broken = copy.deepcopy(own_results)
    for case in broken["rng.json"]["cases"]:
        if case["name"].startswith("next_single"):
            value = int(case["output"]["values"][0], 16) ^ 1
            case["output"]["values"][0] = "0x%08x" % value
            break
    assert _check(broken)[0] == 1
    partial = {"rng.json": own_results["rng.json"]}
    assert _check(partial)[0] > 0
    assert _check(partial, allow_missing=True)[0] == 0


def test_refused_inputs_must_be_refused(own_results):
    """Concern: conformance kit. A vector whose input must be refused fails a port that
    accepts it."""
    broken = copy.deepcopy(own_results)
    refused = [c for c in broken["samplers.json"]["cases"] if "error" in c["output"]]
    assert refused
    refused[0]["output"] = {"accepted": True}
    assert _check(broken)[0] == 1


def test_cli_export_run_and_check(tmp_path):
    """Concern: conformance kit. `export` writes the vectors a port reads; `run --out`
    writes results a port can imitate; `check` on them exits 0, and 1 after a change."""
    assert main(["export", str(tmp_path / "vectors")]) == 0
    assert json.loads((tmp_path / "vectors" / "rng.json").read_text())["cases"]
    assert (tmp_path / "vectors" / "README.md").read_text().startswith("# Known-answer vectors")
    assert main(["run", "--out", str(tmp_path / "results")]) == 0
    assert main(["check", str(tmp_path / "results")]) == 0
    doc = json.loads((tmp_path / "results" / "collate.json").read_text())
    doc["cases"][0]["output"]["widths"][0] += 1
    (tmp_path / "results" / "collate.json").write_text(json.dumps(doc))
    assert main(["check", str(tmp_path / "results")]) == 1


class _Mutants:
    """The oracle with one §3 mixing pick bug switched on (for the kit to catch)."""

    def __init__(self, pick):
        import reference as R

        class Mixing(R.MixingSampler):
            def pick(self, rng):
                return pick(self, rng)
        self.MixingSampler = Mixing
        self.R = R

    def __getattr__(self, name):
        return getattr(self.R, name)


def _pick_greater_or_equal(sampler, rng):
    u = rng.next_double()
    chosen = next((e for e in sampler._table if e[0] >= u), sampler._table[-1])
    return chosen[1] + rng.next_int(chosen[2])


def _pick_literal_last_source(sampler, rng):
    u = rng.next_double()
    chosen = next((e for e in sampler._table if e[0] > u), None)
    if chosen is None:             # the bug: the last source given, eligible or not
        start, size, _ = sampler.sources[-1]
        return start + rng.next_int(max(size, 1))
    return chosen[1] + rng.next_int(chosen[2])


@pytest.mark.parametrize("mutant, case_name", [
    (_pick_greater_or_equal, "mixing_pick_u_on_bounds_zero_and_empty_sources_between"),
    (_pick_literal_last_source, "mixing_pick_last_bound_below_1_falls_back_to_last_eligible"),
])
def test_mixing_pick_cases_catch_the_classic_bugs(mutant, case_name):
    """D10: the strict `c_i > u` and the last *eligible* fallback were unreachable in the
    first vectors (issue 11). A mixing pick using `>=`, or falling back to the literal last
    source, now fails a mixing_pick case, and the samplers' epoch cases alone would not
    have caught it."""
    from onemodel_cy.conformance.codec import load as load_file
    from onemodel_cy.conformance.replay import replay
    api = _Mutants(mutant)
    failing = [c["name"] for c in load_file("samplers.json")["cases"]
               if differences(c["output"], replay(api, c))]
    assert case_name in failing
    assert all(name.startswith("mixing_pick") for name in failing)
