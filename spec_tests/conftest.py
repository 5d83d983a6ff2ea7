"""Shared set-up of the spec tests: Hypothesis profiles, the oracle, the vectors.

The vectors, their file list and their float-bit encoding have one home,
``onemodel_cy/conformance/codec.py``; the names below are that module's.

Profiles (choose with the environment variable ``HYPOTHESIS_PROFILE``):

* ``quick`` (default): modest example counts so the whole suite stays fast locally;
* ``ci``: derandomized (the same examples every run), no example database, no deadline;
* ``dev``: many more examples, for hunting;
* ``rerun``: ``ci`` with fewer examples, for CI's second passes over the same tests (the
  build with Cython's checks on, the sanitizer build, the other supported Pythons): those
  passes check that the paths the ``ci`` pass explored hold there too, not new examples.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

from onemodel_cy.conformance.codec import f32_bits, f64_bits  # noqa: F401  (for the tests)
from onemodel_cy.conformance.codec import load as load_vectors

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("quick", max_examples=40, **_common)
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, **_common)
settings.register_profile("dev", max_examples=500, **_common)
settings.register_profile("rerun", max_examples=15, derandomize=True, database=None, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


def vector_cases(filename: str):
    """``pytest.param`` objects, one per case of a vector file, with the case name as id."""
    return [pytest.param(c, id=c["name"]) for c in load_vectors(filename)["cases"]]


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


@pytest.fixture(scope="module")
def without_fsync():
    """For tests that write packs: they check the bytes written, not the disk's durability
    (fsync dominates their time). Modules use it through ``pytest.mark.usefixtures``."""
    from onemodel_cy.data.packs import format as _format
    _format.FSYNC = False
    yield
    _format.FSYNC = True


def pytest_report_header(config):
    """Which HTTP server the remote-pack tests run against (``remote_packs.http_server``):
    nginx where it is on PATH, else aiohttp's static files."""
    try:
        from remote_packs import http_server_name
        return f"remote packs served by: {http_server_name()}"
    except ImportError as error:        # the remote extra missing: those tests are left out
        return f"remote packs served by: none ({error})"
