"""§2 and §3 (readings D1-D11) through the known-answer vectors, and the conformance kit.

The vectors live in onemodel_cy/conformance/vectors/.

* The compiled package reproduces every §2 and §3 vector (rng, permutation, samplers).
* The oracle reproduces the same vectors through the same ``replay``, and the generator,
  run again, writes byte-identical files, so the files and ``reference.py`` cannot drift.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

import reference as R
from conftest import load_vectors, vector_cases
from onemodel_cy.conformance.codec import VECTOR_FILES, VECTORS_DIR, EncodingError, build_sampler, f32_hex, f64_hex
from onemodel_cy.conformance.replay import differences, replay

SECTION_FILES = {"rng.json": "§2", "permutation.json": "§3", "samplers.json": "§3"}
GENERATOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "generate_vectors.py")


def assert_reproduces(api, case):
    """``api`` gives the case's known answer; a refused input raises exactly the
    exception the vector names (the project's exception rule, not just any error)."""
    got, want = replay(api, case), case["output"]
    assert differences(want, got) == [], differences(want, got)[:3]
    if "error" in want:
        assert got == want


def _cases(*files):
    out = []
    for f in files:
        out += [pytest.param(p.values[0], id=f"{f}:{p.id}") for p in vector_cases(f)]
    return out


ALL_23 = _cases(*SECTION_FILES)


@pytest.mark.parametrize("case", ALL_23)
def test_compiled_reproduces_vector(om, case):
    """§2, §3 (D1-D11): The compiled package gives every known answer of rng.json,
    permutation.json and samplers.json (pinned readings in `pins`)."""
    assert_reproduces(om, case)


@pytest.mark.parametrize("case", ALL_23)
def test_reference_reproduces_vector(case):
    """§2, §3 (D1-D11): The oracle, replayed through the same code, gives the same known
    answers."""
    assert_reproduces(R, case)


@pytest.mark.parametrize("api", ["compiled", "reference"])
def test_derive_reduces_arguments_mod_2_64(om, api):
    """D3: derive of negative or too large arguments equals derive of the arguments
    reduced mod 2^64 (the vectors record both forms), in the package and the oracle."""
    api = om if api == "compiled" else R
    cases = [c for c in load_vectors("rng.json")["cases"] if "same_as_args" in c["output"]]
    assert cases
    for case in cases:
        reduced = {"input": {"op": "derive", "args": case["output"]["same_as_args"]}}
        assert replay(api, reduced)["values"] == case["output"]["values"], case["name"]


def test_a_draw_that_is_not_float32_is_a_fault_not_a_refusal():
    """§2: next_single and next_normal return float32 values. An implementation returning
    a wider float fails loudly in the encoding (it is not read as a refused input)."""
    assert f32_hex(0.5) == "0x3f000000"
    with pytest.raises(EncodingError):
        f32_hex(0.1)

    class WideRng:
        def __init__(self, state):
            self.state = state

        def next_single(self):
            return 0.1

    class WideApi:
        SampleRng = WideRng

    case = {"input": {"op": "draws", "state": "0", "method": "next_single", "count": 1}}
    with pytest.raises(EncodingError):
        replay(WideApi, case)


def test_mixing_cumulative_tables():
    """D10's float64 left-to-right cumulative bounds recorded in the vectors are the oracle's."""
    for case in load_vectors("samplers.json")["cases"]:
        if case["input"]["op"] == "sampler" and case["input"]["sampler"]["kind"] == "mixing":
            s = build_sampler(R, case["input"]["sampler"])
            assert [f64_hex(c) for c, _, _ in s._table] == case["output"]["cumulative"]


def test_vector_files_are_well_formed():
    """Concern: conformance kit. Every file has a section and uniquely named cases with
    pins, input and output; every reading D1-D17 is pinned by at least one case; the files
    stay small."""
    pinned, total = set(), 0
    for name in VECTOR_FILES:
        total += (VECTORS_DIR / name).stat().st_size
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
    """§2: The SplitMix64 reference outputs from state 1234567 are recorded verbatim."""
    case = next(c for c in load_vectors("rng.json")["cases"]
                if c["name"] == "splitmix64_published_state_1234567")
    assert case["output"]["values"] == ["6457827717110365317", "3203168211198807973",
                                        "9817491932198370423", "4593380528125082431",
                                        "16408922859458223821"]


def test_vectors_folder_holds_exactly_the_listed_files():
    """Concern: conformance kit. The package ships one list of vector files: the folder
    holds those and the format notes, nothing the checker would silently ignore."""
    assert sorted(p.name for p in VECTORS_DIR.iterdir()) == sorted([*VECTOR_FILES, "README.md"])


# The generator run as a port author would run it, in a fresh interpreter; afterwards the
# compiled package must not have been imported (the vectors come from the oracle only).
_RUN_GENERATOR = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("generate_vectors", sys.argv[1])
generator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generator)
status = generator.main(["--check"])
if "onemodel_cy" in sys.modules:
    sys.exit("the generator imported the compiled package")
sys.exit(status)
"""


def test_generator_rewrites_identical_files():
    """Concern: conformance kit (DESIGN: the vectors come from the oracle, never from the
    compiled code). Running the generator again from reference.py gives byte-identical
    files for every section (including §1, §4, §6 and the synthetic dataset), without
    importing the compiled package."""
    run = subprocess.run([sys.executable, "-c", _RUN_GENERATOR, GENERATOR], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(GENERATOR)), timeout=600)
    assert run.returncode == 0, (f"stale vectors or a compiled import: run python spec_tests/generate_vectors.py\n"
                                 f"{run.stdout}{run.stderr}")


BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vector_baseline.json")


def _case_digest(case) -> str:
    return hashlib.sha256(json.dumps(case, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode("utf-8")).hexdigest()


def test_released_cases_never_change():
    """Concern: conformance kit (bytes never change). Every case of the released vectors,
    recorded by its digest in vector_baseline.json, is still in its file, name, pins,
    input and expected output unchanged: new cases are only ever added."""
    with open(BASELINE, encoding="utf-8") as fh:
        baseline = json.load(fh)
    assert sum(len(cases) for cases in baseline.values()) >= 299
    for name, cases in baseline.items():
        current = {c["name"]: _case_digest(c) for c in load_vectors(name)["cases"]}
        changed = [case for case, digest in cases.items() if current.get(case) != digest]
        assert changed == [], f"{name}: released cases changed or removed: {changed[:5]}"


def _committed(path):
    """The text of ``path`` at the checkout's HEAD, or None outside a git checkout."""
    git = shutil.which("git")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if git is None or not os.path.isdir(os.path.join(root, ".git")) and not os.path.isfile(os.path.join(root, ".git")):
        return None
    run = subprocess.run([git, "show", f"HEAD:{path}"], capture_output=True, text=True, cwd=root, timeout=60)
    return run.stdout if run.returncode == 0 else None


def test_committed_cases_unchanged_in_the_working_copy():
    """Concern: conformance kit (bytes never change). Against git: every case of each
    vector file as committed at HEAD is unchanged in the working copy (a regenerated file
    may add cases, never alter one), so an edit is caught before it is committed."""
    compared = 0
    for name in VECTOR_FILES:
        text = _committed(f"onemodel_cy/conformance/vectors/{name}")
        if text is None:
            continue
        current = {c["name"]: c for c in load_vectors(name)["cases"]}
        for case in json.loads(text)["cases"]:
            assert current.get(case["name"]) == case, f"{name}:{case['name']} changed since HEAD"
            compared += 1
    if _committed("onemodel_cy/conformance/vectors/rng.json") is not None:
        assert compared >= 299
