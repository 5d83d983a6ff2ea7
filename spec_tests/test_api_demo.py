"""``onemodel-cy demo`` speaks to a newcomer: what it loads in words (no repr), its speed in
images/s beside torch's DataLoader measured in the same run (torch is in the test extra),
the bytes checked against the conformance vector's own digest, a resumed run checked, and a
final OK line; a seed the vector does not pin says so rather than passing silently."""
from __future__ import annotations

import importlib.util

from onemodel_cy.cli import main

HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_the_demo_checks_the_vector_and_ends_with_ok(capsys):
    assert main(["demo", "--steps", "40"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) < 200 for line in lines), lines
    assert lines[0].startswith("workload: 2,048 synthetic text-line images")
    assert any(line.startswith("speed: ") and "images/s" in line for line in lines)
    reference = ("reference: torch's DataLoader doing the same work here" if HAS_TORCH else
                 "reference: torch is not installed, so torch's DataLoader was not measured beside it")
    assert any(line.startswith(reference) for line in lines), lines
    assert any(line.startswith("bytes: the first two epochs (32 batches) equal the conformance vector, "
                               "sha256 6007652baac75991") for line in lines), lines
    assert any(line.startswith("resume: a run stopped at step 20") for line in lines)
    assert lines[-1].startswith("OK: ") and "images/s" in lines[-1]


def test_the_demo_says_when_the_vector_does_not_apply(capsys):
    assert main(["demo", "--steps", "4", "--seed", "3", "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert "bytes: not compared with the conformance vector, which pins seed 0 (this run: seed 3)" in out
    assert out.splitlines()[-1].startswith("OK: ")
