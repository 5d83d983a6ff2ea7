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
from onemodel_cy.conformance.harness import under_every_setting
from onemodel_cy.conformance.codec import LONGEST, short
from onemodel_cy.conformance.replay import differences


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
    """Concern: checker hardening (issue 24). Values handed in beside a hash are checked
    against it whenever they are there, the hash right or wrong: values that do not hash to
    it, values of the wrong count and values that cannot be read are failures."""
    expected = load("collate.json")["cases"][0]["output"]["images"]
    got = dict(copy.deepcopy(expected), sha256="0" * 64)
    assert "do not hash to your sha256" in differences({"images": expected}, {"images": got})[0]
    got = dict(copy.deepcopy(expected), sha256="0" * 64, data_b64=base64.b64encode(b"1234").decode())
    del got["values_f32"]
    assert "cannot be read" in differences({"images": expected}, {"images": got})[0]
    bits = _image_bits(expected)
    contradicting = {
        "values_f32 of other values": dict(expected, values_f32=["0x%08x" % (b ^ 1) for b in bits]),
        "data_b64 of other values": {"shape": expected["shape"], "sha256": expected["sha256"],
                                     "data_b64": base64.b64encode((bits ^ 1).astype("<u4").tobytes()).decode()},
        "data_b64 that is not base64": {"shape": expected["shape"], "sha256": expected["sha256"],
                                        "data_b64": "!!!not base64!!!"},
        "values_f32 one short": dict(expected, values_f32=expected["values_f32"][:-1]),
    }
    for what, got in contradicting.items():
        found = differences({"images": expected}, {"images": got})
        assert len(found) == 1 and ("do not hash to your sha256" in found[0] or "cannot be read" in found[0]), what
    # On a hash-only vector (a stream batch), a port's contradicting values fail too.
    broken = copy.deepcopy(own_results)
    images = _case(broken, "stream.json", "shuffled_world_size_2")["output"]["batches"][0]["images"]
    del images["values_f32"]
    images["data_b64"] = "!!!not base64!!!"
    failures, report = _check(broken)
    assert failures == 1 and "batches[g=0 rank=0].images: the array's values cannot be read" in report


@pytest.mark.parametrize("spelling", ["0X3F800000", "0x3F800000", "3f800000", "0x3f8000", "0x03f800000", " 0x3f800000",
                                      "0x3f80_0000", "+0x3f800000", 1065353216, None])
def test_values_f32_are_written_one_way(spelling):
    """Concern: checker hardening (issue 24). A float32 value is "0x" and 8 lowercase hex
    digits: any other spelling of its bits (upper case, no prefix, short, padded, with
    underscores or a sign, a number) is a failure naming the entry, even beside a right hash."""
    expected = load("collate.json")["cases"][0]["output"]["images"]
    got = copy.deepcopy(expected)
    got["values_f32"][3] = spelling
    found = differences({"images": expected}, {"images": got})
    assert len(found) == 1 and "values_f32[3]" in found[0] and 'write "0x" and 8 lowercase hex digits' in found[0]


def test_values_f32_and_data_b64_must_agree():
    """Concern: checker hardening (issue 24). A port may write both encodings of an array;
    then both are read, and values that disagree are a failure even when one of them
    hashes to the right sha256."""
    expected = load("collate.json")["cases"][0]["output"]["images"]
    bits = _image_bits(expected)
    same = dict(copy.deepcopy(expected), data_b64=base64.b64encode(bits.astype("<u4").tobytes()).decode())
    assert differences({"images": expected}, {"images": same}) == []
    other = dict(copy.deepcopy(expected), data_b64=base64.b64encode((bits ^ 1).astype("<u4").tobytes()).decode())
    found = differences({"images": expected}, {"images": other})
    assert len(found) == 1 and "values_f32 and data_b64 hold different values" in found[0]


def test_two_results_files_of_one_name_fail(tmp_path, capsys, own_results):
    """Concern: checker hardening (issue 24). Two results files answering for one vector
    file (two folders handed to check) are a failure naming both, never one silently
    taken; the same file named twice is read once."""
    _write_all(tmp_path / "a", own_results)
    _write_all(tmp_path / "b", {"rng.json": own_results["rng.json"]})
    assert main(["check", str(tmp_path / "a"), str(tmp_path / "a" / "rng.json")]) == 0
    capsys.readouterr()
    assert main(["check", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    first, second = tmp_path / "a" / "rng.json", tmp_path / "b" / "rng.json"
    assert f"{second}: a second results file named rng.json, beside {first}" in out and "does NOT conform" in out


def test_a_setting_whose_stream_differs_is_handed_in():
    """Concern: §1 worker/prefetch invariance. The replay runs a stream case under every
    harness setting and, when one setting's output differs from the first's, returns that
    one, naming the setting, so that a check against the vectors fails on it; every
    setting's record is kept."""
    inp = {"harness": {"workers": ["0", "2"], "prefetch": ["1", "3"]}}

    def build(workers, prefetch, delivery):
        return {"labels": [1 if (workers, prefetch) != (2, 3) else 2]}
    out = under_every_setting(inp, build, with_errors=False)
    assert out["labels"] == [2] and "workers=2 prefetch=3 differs" in out["harness"]
    assert [(r["workers"], r["prefetch"]) for r in out["settings"]] == [("0", "1"), ("0", "3"), ("2", "1"), ("2", "3")]
    assert differences({"labels": [1]}, out) == ["output.labels[0]: expected 1, got 2"]
    out = under_every_setting(inp, lambda *a: {"labels": [1]}, with_errors=False)
    assert out["harness"] == "workers=0,prefetch=1 workers=0,prefetch=3 workers=2,prefetch=1 workers=2,prefetch=3"


def test_the_answer_key_is_refused(tmp_path, capsys, own_results):
    """Concern: a checker that cannot be handed the answer key (issue 24). The exported
    vectors themselves, and results that carry the vectors' inputs or pins, are refused
    with one line saying why; a copy of the vectors' outputs alone fails on the stream
    cases, whose harness settings it cannot show."""
    assert main(["export", str(tmp_path / "vectors")]) == 0
    capsys.readouterr()
    assert main(["check", str(tmp_path / "vectors")]) == 1
    out = capsys.readouterr().out
    for name in VECTOR_FILES:
        assert f"{name}: this is the vector file itself (the answer key), not a port's results" in out
    assert "compared 0 cases" in out
    with_inputs = copy.deepcopy(own_results)
    for case, vector in zip(with_inputs["rng.json"]["cases"], load("rng.json")["cases"]):
        case["input"] = vector["input"]
    failures, report = _check(with_inputs)
    assert failures == 1 and (f"rng.json: cases[0] ({load('rng.json')['cases'][0]['name']!r}) carries the vectors' "
                              f"input: a copy of the answer key") in report
    outputs_only = {name: {"cases": [{"name": c["name"], "output": c["output"]} for c in load(name)["cases"]]}
                    for name in VECTOR_FILES}
    failures, report = _check(outputs_only)
    harnessed = [(name, c["name"]) for name in VECTOR_FILES for c in load(name)["cases"] if "harness" in c["input"]]
    assert failures == len(harnessed) and len(harnessed) >= 10
    for name, case in harnessed:
        assert f"{name}:{case} (pins" in report and "output.settings: missing" in report


def _settings_of(results, name):
    return _case(results, "stream.json", name)["output"]["settings"]


def test_stream_results_must_show_every_harness_setting(own_results):
    """Concern: the harness made visible (issue 24, §1). A stream case's results carry one
    record per (workers, prefetch) pair its input.harness asks for, each with the digest of
    what that setting delivered: fewer settings, a setting not asked, one twice, a digest
    or an error step that is not the vectors' each fail with one line naming the setting."""
    name = "iter_shuffled_dataset_fails_at_index_20_world_size_1"
    failures, report = _check(own_results)
    assert failures == 0
    fewer = copy.deepcopy(own_results)
    del _settings_of(fewer, name)[2:]
    failures, report = _check(fewer)
    assert failures == 1 and ("output.settings: ran under 2 of the 6 settings this case asks for; missing "
                              "workers=1 prefetch=1, workers=1 prefetch=4, workers=3 prefetch=1, "
                              "workers=3 prefetch=4") in report
    other = copy.deepcopy(own_results)
    _settings_of(other, name)[5]["workers"] = "2"
    failures, report = _check(other)
    assert failures == 1 and "output.settings[workers=2 prefetch=4]: not a setting this case asks for" in report
    twice = copy.deepcopy(own_results)
    _settings_of(twice, name).append(dict(_settings_of(twice, name)[0]))
    failures, report = _check(twice)
    assert failures == 1 and "output.settings[workers=0 prefetch=1]: reported twice" in report
    wrong = copy.deepcopy(own_results)
    _settings_of(wrong, name)[4]["sha256"] = "0" * 64
    failures, report = _check(wrong)
    assert failures == 1 and ("output.settings[workers=3 prefetch=1].sha256: the batches delivered under this "
                              "setting are not the vectors'") in report
    late = copy.deepcopy(own_results)
    _settings_of(late, name)[3]["error_at"] = ["6"]
    failures, report = _check(late)
    assert failures == 1 and "output.settings[workers=1 prefetch=4].error_at: expected ['5'], got ['6']" in report
    digest = copy.deepcopy(own_results)
    _settings_of(digest, "section7_two_epochs_digest")[3]["sha256"] = "f" * 64
    failures, report = _check(digest)
    assert failures == 1 and "section7_two_epochs_digest" in report and "workers=2 prefetch=8" in report


@pytest.mark.parametrize("workers", [3, True, "3.0", " 3", "+3", "03", "0_3", "-0", "3\nprefetch=1", None,
                                     "9" * 500 + "x"])
def test_settings_are_named_by_decimal_strings(own_results, workers):
    """Concern: checker hardening (issue 24). A setting's workers and prefetch are written
    like every integer of the vectors, a decimal string with no sign, padding or other
    spelling; anything else fails on one short line that shows what was written."""
    name = "iter_shuffled_dataset_fails_at_index_20_world_size_1"
    odd = copy.deepcopy(own_results)
    _settings_of(odd, name)[5]["workers"] = workers
    failures, report = _check(odd)
    line = next(line for line in report.splitlines() if "output.settings[5]" in line)
    assert failures == 1 and "workers and prefetch must be decimal strings" in line and len(line) < 400, line
    for digits in (500, 5000):          # decimal strings, not settings asked: cut, and never a traceback
        _settings_of(odd, name)[5]["workers"] = "9" * digits
        failures, report = _check(odd)
        line = next(line for line in report.splitlines() if "not a setting this case asks for" in line)
        assert failures == 1 and len(line) < 400, line


def test_a_wrong_digest_step_is_named_before_the_whole_stream(own_results):
    """Concern: diagnostics (issue 24). A §7 digest that differs at one step is reported
    at that step (step_sha256[k], k counted from start_g), not through the stream's hash."""
    broken = copy.deepcopy(own_results)
    output = _case(broken, "stream.json", "section7_two_epochs_digest")["output"]
    output["step_sha256"][7] = "0" * 64
    output["sha256"] = "1" * 64
    failures, report = _check(broken)
    line = next(line for line in report.splitlines() if "section7_two_epochs_digest" in line)
    assert failures == 1 and ": output.step_sha256[7]: expected '" in line and "(+1 more)" in line


def test_textlines_names_the_first_differing_element(own_results):
    """Concern: diagnostics (issue 24). A textlines image whose vector holds only its hash
    is reported, when the port writes its values, at its first differing pixel with both
    bit patterns; with the hash alone, the message quotes both hashes."""
    broken = copy.deepcopy(own_results)
    image = _case(broken, "textlines.json", "textlines_default")["output"]["samples"][1]["image"]
    vector = next(c for c in load("textlines.json")["cases"] if c["name"] == "textlines_default")
    assert "values_f32" not in vector["output"]["samples"][1]["image"] and "values_f32" not in image
    import onemodel_cy
    from onemodel_cy.conformance.replay import replay
    bits = _image_bits(replay(onemodel_cy, dict(vector, input=dict(vector["input"], full=True)))["samples"][1]["image"])
    bits[100] ^= 0x1
    image["values_f32"] = ["0x%08x" % b for b in bits]
    image["sha256"] = hashlib.sha256(bits.astype("<u4").tobytes()).hexdigest()
    failures, report = _check(broken)
    rows, columns = image["shape"][1:]
    assert failures == 1 and (f"output.samples[1].image: element channel 0, row {100 // columns}, column "
                              f"{100 % columns} (flat 100) expected 0x{bits[100] ^ 1:08x}, got 0x{bits[100]:08x} "
                              f"(1 of {rows * columns} elements differ)") in report
    del image["values_f32"]
    failures, report = _check(broken)
    expected = vector["output"]["samples"][1]["image"]["sha256"]
    assert failures == 1 and f"image.sha256: expected {expected!r}, got {image['sha256']!r}" in report


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


def test_only_regular_files_up_to_the_bound_are_read(tmp_path, own_results):
    """Issue 36, item 12: a results file that is a link to /dev/zero (a MemoryError
    traceback before), a FIFO (a hang for ever before) or a file larger than
    RESULTS_BYTES is refused in one line naming it, without being read whole or waited
    on; the other files are still checked. Run as the command a user runs, in bounded time."""
    import os
    import subprocess
    import sys
    _write_all(tmp_path, own_results)
    os.remove(tmp_path / "rng.json")
    os.symlink("/dev/zero", tmp_path / "rng.json")
    os.remove(tmp_path / "image.json")
    os.mkfifo(tmp_path / "image.json")
    with open(tmp_path / "collate.json", "r+b") as f:
        f.truncate((256 << 20) + 1)           # sparse
    done = subprocess.run([sys.executable, "-m", "onemodel_cy", "conformance", "check", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1 and "Traceback" not in out + done.stderr, out + done.stderr
    for name, problem in (("rng.json", "not a regular file"), ("image.json", "not a regular file"),
                          ("collate.json", "larger than the 268435456 bytes a results file may hold")):
        lines = [line for line in out.splitlines() if f"{name}:" in line]
        assert len(lines) == 1 and str(tmp_path / name) in lines[0] and problem in lines[0], (name, out)
    assert re.search(r"stream\.json \(§1\): \d+ passed, 0 failed, 0 missing", out)
