"""Concern: conformance kit, a checker that cannot be fooled or crash (issue 11).

Every malformed results file gets one line naming the file and the problem (never a
traceback); nothing compared is never "conforms"; unknown and duplicate case names, empty
refusals, refused valid inputs are failures; stream batches are named by global step and
rank; long values are cut; a float array that differs names its first differing element.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import random
import re

import numpy as np
import pytest

from onemodel_cy.conformance.checker import check, main, run_self
from onemodel_cy.conformance.codec import VECTOR_FILES, load
from onemodel_cy.conformance.replay import LONGEST, _under_every_setting, differences, short


@pytest.fixture(scope="module")
def own_results():
    return run_self()


def _check(results, **kw):
    out = io.StringIO()
    return check(results, out=out, **kw), out.getvalue()


def _write_all(folder, results):
    folder.mkdir(exist_ok=True)
    for name, doc in results.items():
        (folder / name).write_text(json.dumps(doc), encoding="utf-8")


def _case(results, file, name):
    return next(c for c in results[file]["cases"] if c["name"] == name)


MALFORMED = {
    "truncated": lambda good: good[: len(good) // 2],
    "empty": lambda good: b"",
    "only_whitespace": lambda good: b" \n\t ",
    "binary": lambda good: bytes(range(256)) * 4,
    "nul_bytes": lambda good: b'{"cases": [\x00]}',
    "5000_digit_number": lambda good: b'{"cases": [{"name": "mix", "output": {"values": [' + b"7" * 5000 + b"]}}]}",
    "deep_nesting": lambda good: b"[" * 100_000 + b"]" * 100_000,
    "deep_nesting_in_an_output": lambda good: (b'{"cases": [{"name": "mix", "output": ' + b"[" * 50_000
                                               + b"]" * 50_000 + b"}]}"),
    "top_level_list": lambda good: b"[]",
    "top_level_string": lambda good: b'"cases"',
    "cases_null": lambda good: b'{"cases": null}',
    "cases_an_object": lambda good: b'{"cases": {"mix": {}}}',
    "no_cases": lambda good: b'{"section": "\xc2\xa72"}',
    "case_without_a_name": lambda good: b'{"cases": [{"output": {"values": []}}]}',
    "case_with_an_empty_name": lambda good: b'{"cases": [{"name": "", "output": {}}]}',
    "case_a_number": lambda good: b'{"cases": [3]}',
    "nan": lambda good: b'{"cases": [{"name": "mix", "output": {"values": [NaN]}}]}',
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_results_file_gets_one_line(tmp_path, capsys, own_results, kind):
    """Concern: checker hardening. A malformed results file (truncated, empty, binary, a
    5,000-digit number, deep nesting, a top level that is not {"cases": [...]}, a case
    without a name) is reported on one line that names the file; the other files are still
    checked; the exit status is 1."""
    _write_all(tmp_path, own_results)
    good = (tmp_path / "rng.json").read_bytes()
    (tmp_path / "rng.json").write_bytes(MALFORMED[kind](good))
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "rng.json" in line]
    assert len(lines) == 1, out
    assert str(tmp_path / "rng.json") in lines[0] and ": " in lines[0]
    assert len(lines[0]) < 300
    assert "Traceback" not in out
    assert re.search(r"stream\.json \(§1\): \d+ passed, 0 failed, 0 missing", out)


def test_missing_path_and_foreign_file_are_named(tmp_path, capsys):
    """Concern: checker hardening. A path that does not exist, or a file not named like a
    vector file, is named in a one-line message and the check fails."""
    assert main(["check", str(tmp_path / "nowhere" / "rng.json")]) == 1
    assert "no such file" in capsys.readouterr().out
    other = tmp_path / "results.json"
    other.write_text('{"cases": []}')
    assert main(["check", str(other)]) == 1
    assert "results.json: not a vector file's name" in capsys.readouterr().out


def test_allow_missing_never_passes_with_nothing_compared(own_results):
    """Concern: checker hardening. --allow-missing with every file {"cases": []}, or
    with every case name misspelled, compares nothing: the check fails, says how many cases
    it compared (0) and reports the unknown names."""
    empty = {name: {"cases": []} for name in VECTOR_FILES}
    failures, report = _check(empty, allow_missing=True)
    assert failures > 0 and "compared 0 cases" in report and "nothing was compared" in report
    misspelled = copy.deepcopy(own_results)
    for doc in misspelled.values():
        for case in doc["cases"]:
            case["name"] += "_"
    failures, report = _check(misspelled, allow_missing=True)
    assert failures >= sum(len(d["cases"]) for d in misspelled.values())
    assert "compared 0 cases" in report and "unknown case" in report and "misspelled" in report


def test_the_number_of_compared_cases_is_printed(own_results):
    """Concern: checker hardening. A passing check says how many cases it compared, all of
    them for a whole port and only the handed-in ones with --allow-missing."""
    total = sum(len(load(name)["cases"]) for name in VECTOR_FILES)
    failures, report = _check(own_results)
    assert failures == 0 and f"compared {total} cases" in report
    failures, report = _check({"rng.json": own_results["rng.json"]}, allow_missing=True)
    assert failures == 0 and f"compared {len(load('rng.json')['cases'])} cases" in report


def test_unknown_and_duplicate_names_fail(own_results):
    """Concern: checker hardening. A case name the vectors do not hold is a failure; a
    name handed in twice is a failure, and the first copy is the one compared (a wrong
    first copy cannot hide behind a right second one)."""
    extra = copy.deepcopy(own_results)
    extra["rng.json"]["cases"].append({"name": "mix_typo", "output": {}})
    failures, report = _check(extra)
    assert failures == 1 and "rng.json:'mix_typo': unknown case" in report
    dup = copy.deepcopy(own_results)
    mix = _case(dup, "rng.json", "mix")
    wrong = copy.deepcopy(mix)
    wrong["output"]["values"][0] = "1"
    dup["rng.json"]["cases"].insert(0, wrong)
    failures, report = _check(dup)
    assert failures == 2 and "duplicate case name" in report and "rng.json:mix (pins" in report


@pytest.mark.parametrize("error", [None, "", 0, False, []])
def test_an_empty_error_is_not_a_refusal(own_results, error):
    """Concern: checker hardening. {"error": null}, {"error": ""} (or any error that is not
    a non-empty name) do not count as refusing an input that must be refused."""
    broken = copy.deepcopy(own_results)
    refused = next(c for c in broken["samplers.json"]["cases"] if "error" in c["output"])
    refused["output"] = {"error": error}
    failures, report = _check(broken)
    assert failures == 1 and "is not a refusal" in report


def test_a_refused_valid_input_is_named(own_results):
    """Concern: checker hardening. A port that refuses an input the vectors accept is told
    so in those words, not with a list of missing fields."""
    broken = copy.deepcopy(own_results)
    _case(broken, "collate.json", "tiny_plain")["output"] = {"error": "ValueError"}
    failures, report = _check(broken)
    assert failures == 1 and "your port refused this input (error 'ValueError'); it must be accepted" in report


def test_stream_failures_are_named_by_global_step_and_rank(own_results):
    """Concern: checker hardening (§1). A wrong batch of a resumed stream is named by its
    global step and rank; a port that goes on after a dataset error, or never reports it,
    is told which step of which rank."""
    broken = copy.deepcopy(own_results)
    case = _case(broken, "stream.json", "iter_mixing_resumed_mid_run_world_size_2")
    case["output"]["runs"][1]["batches"][2]["indices"][0] += 1
    failures, report = _check(broken)
    assert failures == 1 and "runs[1].batches[g=5 rank=1].indices[0]" in report
    broken = copy.deepcopy(own_results)
    case = _case(broken, "stream.json", "iter_shuffled_dataset_fails_at_index_20_world_size_1")
    run = case["output"]["runs"][0]
    assert run["error_at"] == "5" and [b["g"] for b in run["batches"]] == ["2", "3", "4"]
    run["batches"].append(dict(run["batches"][-1], g="6"))
    failures, report = _check(broken)
    assert failures == 1 and "[g=6 rank=0] is extra" in report
    run["batches"].pop()
    run["error_at"] = None
    failures, report = _check(broken)
    assert failures == 1 and "runs[0].error_at: expected '5', got None" in report


def test_long_values_are_cut_in_messages(own_results):
    """Concern: checker hardening. A 100,000-digit value is shown cut to a few dozen
    characters, with its length."""
    broken = copy.deepcopy(own_results)
    _case(broken, "rng.json", "mix")["output"]["values"][3] = "9" * 100_000
    failures, report = _check(broken)
    line = next(line for line in report.splitlines() if "rng.json:mix" in line)
    assert failures == 1 and "(100002 characters)" in line and len(line) < 250
    assert len(short(list(range(10_000)))) <= LONGEST + 30


def _image_bits(encoded):
    return np.array([int(h, 16) for h in encoded["values_f32"]], dtype=np.uint32)


def test_a_differing_float_array_names_its_first_element(own_results):
    """Concern: checker (issue 11 §5). When a port writes an array's values (values_f32, or
    data_b64: base64 of the little-endian float32 bytes) beside its hash, a differing array
    is reported by its first differing element: sample, channel, row, column and both bit
    patterns, also for arrays whose vector carries only the hash."""
    broken = copy.deepcopy(own_results)
    images = _case(broken, "collate.json", "tiny_plain")["output"]["images"]   # [3, 1, 2, 3]
    bits = _image_bits(images)
    bits[9] ^= 1
    images["values_f32"] = ["0x%08x" % b for b in bits]
    images["sha256"] = hashlib.sha256(bits.astype("<u4").tobytes()).hexdigest()
    failures, report = _check(broken)
    assert failures == 1
    assert (f"images: element sample 1, channel 0, row 1, column 0 (flat 9) expected 0x{bits[9] ^ 1:08x}, "
            f"got 0x{bits[9]:08x}") in report

    broken = copy.deepcopy(own_results)
    case = _case(broken, "stream.json", "shuffled_world_size_2")
    batch = case["output"]["batches"][3]
    vector = next(c for c in load("stream.json")["cases"] if c["name"] == case["name"])
    assert "values_f32" not in vector["output"]["batches"][3]["images"]
    full = _full_images(case["name"], 3)
    full.reshape(-1).view("<u4")[40] ^= 0x10
    del batch["images"]["values_f32"]
    batch["images"]["data_b64"] = base64.b64encode(full.astype("<f4").tobytes()).decode()
    batch["images"]["sha256"] = hashlib.sha256(full.astype("<f4").tobytes()).hexdigest()
    failures, report = _check(broken)
    shape = batch["images"]["shape"]
    coords = np.unravel_index(40, shape)
    assert failures == 1 and f"batches[g=1 rank=1].images: element sample {coords[0]}, channel {coords[1]}, " \
                             f"row {coords[2]}, column {coords[3]} (flat 40)" in report


def _full_images(case_name, k):
    """The images of batch ``k`` of a stream case, as this package builds them."""
    import onemodel_cy
    from onemodel_cy.conformance.codec import f32_array_data
    from onemodel_cy.conformance.replay import replay
    case = next(c for c in load("stream.json")["cases"] if c["name"] == case_name)
    return np.array(f32_array_data(replay(onemodel_cy, case)["batches"][k]["images"]))


def test_array_values_that_do_not_match_their_hash_are_reported(own_results):
    """Concern: checker hardening. Values handed in beside a hash that they do not hash to
    (or of the wrong count) are reported, not trusted."""
    expected = load("collate.json")["cases"][0]["output"]["images"]
    got = dict(copy.deepcopy(expected), sha256="0" * 64)
    assert "do not hash to your sha256" in differences({"images": expected}, {"images": got})[0]
    got = dict(copy.deepcopy(expected), sha256="0" * 64, data_b64=base64.b64encode(b"1234").decode())
    del got["values_f32"]
    assert "cannot be read" in differences({"images": expected}, {"images": got})[0]


def test_a_setting_whose_stream_differs_is_handed_in():
    """Concern: §1 worker/prefetch invariance. The replay runs a stream case under every
    harness setting and, when one setting's output differs from the first's, returns that
    one, naming the setting, so that a check against the vectors fails on it."""
    inp = {"harness": {"workers": ["0", "2"], "prefetch": ["1", "3"]}}

    def build(api, inp_, workers, prefetch):
        return {"labels": [1 if (workers, prefetch) != (2, 3) else 2]}
    out = _under_every_setting(None, inp, build)
    assert out["labels"] == [2] and "workers=2 prefetch=3 differs" in out["harness"]
    assert differences({"labels": [1]}, out) == ["output.labels[0]: expected 1, got 2"]
    out = _under_every_setting(None, inp, lambda *a: {"labels": [1]})
    assert out["harness"] == "workers=0,prefetch=1 workers=0,prefetch=3 workers=2,prefetch=1 workers=2,prefetch=3"


_JUNK = [None, "", "0x", "-0", [], {}, 0, -1, 1e308, True, "x" * 5000, [[[[[]]]]], {"error": None},
         {"shape": ["a"], "sha256": 5}, {"shape": [1], "sha256": "0", "values_f32": ["zz"]},
         {"shape": [1], "sha256": "0", "values_f32": [str(1 << 70)]}, {"shape": [1], "sha256": "0", "data_b64": "@@"},
         2 ** 70, {"g": [], "rank": {}}]


def _nodes(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, (*path, key))
    elif isinstance(value, list):
        for k, item in enumerate(value[:3]):
            yield from _nodes(item, (*path, k))


def test_checker_never_crashes_on_any_value(own_results):
    """Concern: checker hardening. Any JSON value put anywhere in a port's output (null,
    empty strings, wrong types, huge numbers, a broken array encoding) is a reported
    failure, never an exception."""
    chooser = random.Random(11)
    names = ["tiny_plain", "iter_shuffled_dataset_fails_at_index_20_world_size_1", "mixing_pick_u_on_bounds"
             "_zero_and_empty_sources_between", "gray8_tiny", "mix", "synthetic_tiny"]
    files = {n: f for f in VECTOR_FILES for n in [c["name"] for c in own_results[f]["cases"]]}
    for name in names:
        original = _case(own_results, files[name], name)["output"]
        paths = list(_nodes(original))
        for _ in range(40):
            output = copy.deepcopy(original)
            path = chooser.choice(paths)
            junk = copy.deepcopy(chooser.choice(_JUNK))
            if not path:
                output = junk
            else:
                node = output
                for key in path[:-1]:
                    node = node[key]
                node[path[-1]] = junk
            doc = {files[name]: {"cases": [{"name": name, "output": output}]}}
            failures, report = _check(doc, allow_missing=True)
            assert "compared 1 cases" in report
            # Only a changed value the check compares must fail (an informative field
            # or values beside a right hash are not compared).
            if "values_f32" not in path:     # values_f32: compared only where the vector has them
                compared = "harness" not in path
                assert failures == (1 if compared and output != original else 0), (name, path, junk, report)
