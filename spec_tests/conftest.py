"""Shared set-up of the spec tests: Hypothesis profiles, the oracle, the vectors.

Profiles (choose with the environment variable ``HYPOTHESIS_PROFILE``):

* ``quick`` (default): modest example counts so the whole suite stays fast locally;
* ``ci``: derandomized (the same examples every run), no example database, no deadline;
* ``dev``: many more examples, for hunting.
"""

from __future__ import annotations

import json
import os
import struct
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
if HERE not in sys.path:
    sys.path.insert(0, HERE)

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("quick", max_examples=40, **_common)
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, **_common)
settings.register_profile("dev", max_examples=500, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


def load_vectors(filename: str) -> dict:
    """The parsed contents of ``spec_tests/data/<filename>``."""
    with open(os.path.join(DATA, filename), encoding="utf-8") as fh:
        return json.load(fh)


def vector_cases(filename: str):
    """``pytest.param`` objects, one per case of a vector file, with the case name as id."""
    return [pytest.param(c, id=c["name"]) for c in load_vectors(filename)["cases"]]


def f32_bits(x) -> int:
    """The IEEE bits of ``x`` rounded to float32 (``x`` must already be a float32 value)."""
    return struct.unpack("<I", struct.pack("<f", np.float32(x)))[0]


def f64_bits(x) -> int:
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def f64_from_hex(h: str) -> float:
    return struct.unpack("<d", struct.pack("<Q", int(h, 16)))[0]


@pytest.fixture(scope="session")
def om():
    """The compiled package.  Not skipped when missing: a missing build is a failure."""
    import onemodel_cy
    return onemodel_cy


@pytest.fixture(scope="session")
def ref():
    """The pure-Python oracle ``spec_tests/reference.py``."""
    import reference
    return reference
