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
    table = re.findall(r"^\| (`[^|]+`) \| \w+ \|", _doc(), re.M)
    documented = {op for cell in table for op in re.findall(r"`(\w+)`", cell)}
    assert documented == set(_OPS)


def test_harness_settings_in_the_docs_are_the_vectors():
    """Concern: §1 worker/prefetch invariance. The settings the page tells a port's harness
    to run are exactly the ones the stream cases carry, and they include 0 and several
    workers, prefetch 1 and several."""
    seen = {}
    for case in load("stream.json")["cases"]:
        if "harness" in case["input"]:
            seen.setdefault(case["input"]["op"], set()).add(
                (tuple(case["input"]["harness"]["workers"]), tuple(case["input"]["harness"]["prefetch"])))
    assert set(seen) == {"stream_iter", "stream_digest"}
    doc = _doc()
    for op, settings in seen.items():
        assert len(settings) == 1
        workers, prefetch = next(iter(settings))
        assert "0" in workers and max(map(int, workers)) >= 2 and "1" in prefetch and max(map(int, prefetch)) >= 2
        phrase = (f"`workers` ∈ {{{', '.join(workers)}}} and `prefetch` ∈ {{{', '.join(prefetch)}}} for `{op}`")
        assert phrase in doc, phrase
