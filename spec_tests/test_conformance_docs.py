"""Concern: conformance kit documentation (docs/conformance.md) that a port author can trust.

The worked example is run as written, from `export` to a passing `check`; the table of
readings names only cases that exist and pin that reading, with the right counts; every
op the replay knows is documented; the harness settings the page asks for are the ones
the vectors carry.
"""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections import Counter
from contextlib import redirect_stdout

from onemodel_cy.conformance.checker import main
from onemodel_cy.conformance.codec import VECTOR_FILES, load
from onemodel_cy.conformance.replay import _OPS

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "conformance.md")


def _doc() -> str:
    with open(DOC, encoding="utf-8") as fh:
        return fh.read()


def _main(argv):
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue()


def test_worked_example_goes_from_export_to_a_passing_check(tmp_path):
    """Concern: docs. The page's §2 port, run as the page says on exported vectors, passes
    `check --allow-missing` on every rng.json case, and fails without it (the other files
    are missing); the output lines the page quotes are the ones printed."""
    code = re.search(r"```python\n(.*?)```", _doc(), re.S).group(1)
    (tmp_path / "port_rng.py").write_text(code, encoding="utf-8")
    assert _main(["export", str(tmp_path / "vectors")])[0] == 0
    run = subprocess.run([sys.executable, "port_rng.py", "vectors", "results"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    status, out = _main(["check", "--allow-missing", str(tmp_path / "results")])
    count = len(load("rng.json")["cases"])
    assert status == 0 and f"compared {count} cases" in out and out.rstrip().endswith("conforms")
    assert f"rng.json (§2): {count} passed, 0 failed, 0 missing" in _doc()
    assert _main(["check", str(tmp_path / "results")])[0] == 1


def test_reading_table_names_real_cases():
    """Concern: docs (D1-D17). Every reading has a row; each case it names exists in the
    named file and pins that reading; the per-file counts are the vectors' counts."""
    where, pins = {}, Counter()
    for name in VECTOR_FILES:
        for case in load(name)["cases"]:
            where[(name.removesuffix(".json"), case["name"])] = case["pins"]
            for pin in case["pins"]:
                pins[(pin, name)] += 1
    rows = dict(re.findall(r"^\| (D\d+) \| (.*) \|$", _doc(), re.M))
    assert set(rows) == {f"D{i}" for i in range(1, 18)}
    for reading, row in rows.items():
        files, names = row.split(" | ")
        for file, count in re.findall(r"(\w+\.json) \((\d+)\)", files):
            assert pins[(reading, file)] == int(count), (reading, file)
        in_vectors = {file: n for (pin, file), n in pins.items() if pin == reading}
        listed = dict(re.findall(r"(\w+\.json) \((\d+)\)", files))
        assert set(listed) == set(in_vectors), (f"docs/conformance.md: the row of {reading} lists {sorted(listed)}, "
                                                f"the vectors pin it in {sorted(in_vectors)}")
        for file, case in re.findall(r"`(\w+):([^`]+)`", names):
            assert reading in where[(file, case)], (reading, file, case)


def test_every_op_is_documented():
    """Concern: docs. The op table of the page covers every op the replay runs."""
    section = _doc().split("## What `check` compares, op by op")[1].split("\n## ")[0]
    table = re.findall(r"^\| (`[^|]+`) \| \w+ \|", section, re.M)
    documented = {op for cell in table for op in re.findall(r"`(\w+)`", cell)}
    assert documented == set(_OPS)


def test_harness_settings_in_the_docs_are_the_vectors():
    """Concern: §1 worker/prefetch invariance. The stream cases ask for 0 workers and
    several, a prefetch of 1 and several; the page's harness block lists exactly them."""
    seen = {}
    for case in load("stream.json")["cases"]:
        if "harness" in case["input"]:
            seen.setdefault(case["input"]["op"], set()).add(
                (tuple(case["input"]["harness"]["workers"]), tuple(case["input"]["harness"]["prefetch"])))
    assert set(seen) == {"stream_iter", "stream_digest"}
    block = re.search(r"<!-- kit:harness -->\n(.*?)<!-- /kit:harness -->", _doc(), re.S).group(1)
    for op, settings in seen.items():
        assert len(settings) == 1
        workers, prefetch = next(iter(settings))
        assert "0" in workers and max(map(int, workers)) >= 2 and "1" in prefetch and max(map(int, prefetch)) >= 2
        assert f"`workers` ∈ {{{', '.join(workers)}}} × `prefetch` ∈ {{{', '.join(prefetch)}}}" in block, op


def test_the_kit_blocks_of_the_page_are_up_to_date():
    """Concern: docs that cannot drift (issue 24). The page's blocks written from the kit
    (file table and counts, results-file list, harness settings, §7 workload and timing,
    the C port's mutations) are what generate_kit_docs.py writes from the kit now."""
    import generate_kit_docs
    assert generate_kit_docs.render(_doc()) == _doc(), "run python spec_tests/generate_kit_docs.py"


NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10}


def _prose(text: str) -> str:
    """The page without its generated blocks and code blocks (what a person typed)."""
    text = re.sub(r"<!-- kit:([\w-]+) -->.*?<!-- /kit:\1 -->", "", text, flags=re.S)
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_the_prose_states_no_count_or_timing_of_its_own():
    """Concern: docs that cannot drift (issue 24). Outside the generated blocks, every
    count of vector files is the kit's; the §7 timing is stated once (the case's own);
    the intro names every section the vectors pin; the export line the worked example
    quotes is the one export prints."""
    doc = _doc()
    for text in (_prose(doc), open(os.path.join(os.path.dirname(DOC), os.pardir, "onemodel_cy", "conformance",
                                                "vectors", "README.md"), encoding="utf-8").read()):
        for count in re.findall(r"\b(\d+|" + "|".join(NUMBER_WORDS) + r") (?:other )?vector files", text):
            assert NUMBER_WORDS.get(count, count) in (len(VECTOR_FILES), str(len(VECTOR_FILES))), count
    assert len(re.findall(r"in the oracle", doc)) == 1 and "Expected run time" in doc
    intro = doc.split("<!-- kit:files -->")[0]
    sections = {p for name in VECTOR_FILES for case in load(name)["cases"] for p in case["pins"] if p.startswith("§")}
    for section in sections:
        assert section in intro, f"the intro of docs/conformance.md does not name {section}"
    status, out = _main(["list"])
    assert status == 0 and all(name in out for name in VECTOR_FILES)
    exported = re.search(r"\$ onemodel-cy conformance export vectors\n\s+(.*)\n", doc).group(1)
    assert exported == f"wrote {len(VECTOR_FILES)} vector files and README.md to vectors"
