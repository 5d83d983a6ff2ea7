"""A real port in CI: the C port in ``conformance/ports/c`` is built with the system
compiler, replays the exported vectors, and ``onemodel-cy conformance check`` must accept
its results; built again with each classic port bug switched on (one ``-D`` flag each, see
``mutations.h``), ``check`` must reject them and name, first, the case that pins the
broken rule.

The port is written from the data-loading text (§1-§4, §6) and ``docs/contract.md``; it
never imports the package. Each bug rebuilds only the sources that mention its flag.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from onemodel_cy.conformance.codec import VECTOR_FILES, load

PORT_DIR = Path(__file__).resolve().parent.parent / "conformance" / "ports" / "c"
# The flags the README gives: C99, and no contraction of a*b+c into an FMA (§2, §6 are
# defined on separately rounded float32 operations); POSIX threads for the stream harness.
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-ffp-contract=off", "-fno-fast-math", "-pthread"]

# Each bug and the (file, case) that `check` must name first. Every case named here pins
# the rule the bug breaks (its `pins` and its name say which).
MUTATIONS = {
    "BUG_SINGLE_SHIFT_41": ("rng.json", "next_single_state_0"),
    "BUG_NORMAL_DOUBLE": ("rng.json", "next_normal_state_0"),
    "BUG_NEXT_INT_NO_REDRAW": ("rng.json", "next_int_9223372036854775809_state_0"),
    "BUG_DERIVE_SWAP": ("rng.json", "derive"),
    "BUG_THREE_ROUNDS": ("permutation.json", "table_n_2_key_81985529216486895"),
    "BUG_SHUFFLED_INVERSE": ("samplers.json", "shuffled_n10_b3_seed0_drop1"),
    "BUG_MIXING_LITERAL_LAST": ("samplers.json", "mixing_pick_last_bound_below_1_falls_back_to_last_eligible"),
    "BUG_MIXING_GE": ("samplers.json", "mixing_pick_u_on_bounds_zero_and_empty_sources_between"),
    "BUG_BUCKET_INVERSE": ("samplers.json", "bucketed_last_pool_shorter"),
    "BUG_PAD_TRUNCATE": ("collate.json", "pad_0.1_rounds_to_nearest_float32"),
    "BUG_AUGMENT_STREAM_0": ("collate.json", "tiny_gain_offset"),
    "BUG_GRAY8_DOUBLE": ("image.json", "gray8_float32_constants_std_0.224_mean_0.0"),
    "BUG_SLOT_PER_RANK": ("stream.json", "sequential_world_size_2"),
    "BUG_EPOCH_FROM_RESUME": ("stream.json", "iter_shuffled_resumed_mid_epoch_world_size_1"),
    # Caught only by the harness's settings: the first setting (0 workers) is right.
    "BUG_WINDOW_DROPS_TAIL": ("stream.json", "iter_shuffled_resumed_mid_epoch_world_size_1"),
    "BUG_TEXTLINES_NO_UPPER_BOUNDS": ("textlines.json", "textlines_refuses_scale_65"),
    "BUG_NOISE_CHECKED_IN_DOUBLE": ("textlines.json", "textlines_refuses_noise_infinite_in_float32"),
    # The text-line augmentations (docs/contract.md): each caught first by the case made for it.
    "BUG_SIN_SHORT": ("augment.json", "function_sin"),
    "BUG_EXPNEG_NO_CUTOFF": ("augment.json", "function_expneg"),
    "BUG_WIDTH_TRUNCATES": ("augment.json", "stretch_half_rounds_up"),
    "BUG_BILINEAR_COLUMNS_FIRST": ("augment.json", "affine_small_scale_shift_constant_fill"),
    "BUG_RESAMPLE_NO_COPY": ("augment.json", "resize_height_same_height_columns_copied"),
    "BUG_BLUR_RADIUS_DOUBLE": ("augment.json", "blur_sigma_third_radius_1"),
    "BUG_BLUR_SUM_PAIRS": ("augment.json", "blur_sigma_1_radius_3"),
    "BUG_RANDOM_APPLY_LE": ("augment.json", "random_apply_u_equal_to_p_not_applied"),
    "BUG_ONE_OF_GE": ("augment.json", "one_of_u_on_a_bound_takes_the_next"),
    "BUG_ONE_OF_WEIGHTS_F32": ("augment.json", "one_of_weights_stay_float64"),
}

# A failing case in check's report: "<file>:<case> (pins ...): <what differs>"
FAILURE = re.compile(r"^\s*(?P<file>[\w.]+\.json):(?P<case>\S+) \(pins")


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "the C port needs a C compiler (cc or gcc) on PATH, or CC set"
    return cc


def _sources():
    return sorted(PORT_DIR.glob("*.c"))


def _compile(cc, source: Path, obj: Path, defines=()):
    cmd = [*shlex.split(cc), *CFLAGS, *[f"-D{d}" for d in defines], "-c", str(source), "-o", str(obj)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"


def _link(cc, objects, exe: Path):
    cmd = [*shlex.split(cc), *[str(o) for o in objects], "-o", str(exe), "-pthread", "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    """The port's objects built once without any bug, the exported vectors, and a runner
    that links a build, replays the vectors with it and runs the checker on its results."""
    cc = _compiler()
    root = tmp_path_factory.mktemp("c_port")
    clean = {src: root / f"{src.stem}.o" for src in _sources()}
    for src, obj in clean.items():
        _compile(cc, src, obj)
    vectors = root / "vectors"
    exported = subprocess.run([sys.executable, "-m", "onemodel_cy", "conformance", "export", str(vectors)],
                              capture_output=True, text=True)
    assert exported.returncode == 0, exported.stdout + exported.stderr

    def build(bug=None):
        exe = root / f"port-{bug or 'clean'}"
        if exe.exists():
            return exe
        objects = dict(clean)
        if bug is not None:
            touched = [src for src in clean if bug in src.read_text()]
            assert touched, f"no source of the port mentions {bug}"
            for src in touched:
                objects[src] = root / f"{src.stem}.{bug}.o"
                _compile(cc, src, objects[src], [bug])
        _link(cc, objects.values(), exe)
        return exe

    def run(bug=None):
        name = bug or "clean"
        exe, results = build(bug), root / f"results-{name}"
        results.mkdir()
        ran = subprocess.run([str(exe), str(vectors), str(results)], capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, f"the port ({name}) failed:\n{ran.stdout}{ran.stderr}"
        return subprocess.run([sys.executable, "-m", "onemodel_cy", "conformance", "check", str(results)],
                              capture_output=True, text=True, timeout=120)
    run.build = build
    return run


def test_c_port_conforms(port):
    """§1-§4, §6 and D1-D17 as a port author meets them: a C port written from the text passes
    every case of every vector file, none missing, and the checker says it conforms."""
    checked = port()
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for name in VECTOR_FILES:
        total = len(load(name)["cases"])
        assert re.search(rf"^{re.escape(name)} .*: {total} passed, 0 failed, 0 missing$",
                         checked.stdout, re.M), (name, checked.stdout)
    assert checked.stdout.strip().splitlines()[-1] == "conforms"


def test_every_bug_of_mutations_h_is_tested():
    """The bugs tested here are the ones mutations.h lists (and docs/conformance.md shows)."""
    listed = set(re.findall(r"^ \*   (BUG_\w+)", (PORT_DIR / "mutations.h").read_text(), re.M))
    assert listed == set(MUTATIONS)


@pytest.mark.parametrize("bug", sorted(MUTATIONS))
def test_c_port_mutation_is_caught(port, bug):
    """The kit catches each classic port bug (mutations.h names the rule each one breaks:
    §2 draws, D4, D5, D6, D7, D10, D11, D14, D15, §1 resume, §4 pad and stream, the
    augmentations' functions, sampling, blur, widths and composition): check fails, and the
    first case it names is the one that pins the broken rule."""
    checked = port(bug)
    assert checked.returncode != 0, f"{bug} was not caught:\n{checked.stdout}"
    failures = [m for m in map(FAILURE.match, checked.stdout.splitlines()) if m]
    assert failures, f"{bug}: check named no failing case:\n{checked.stdout}"
    expected_file, expected_case = MUTATIONS[bug]
    first = failures[0]
    assert (first["file"], first["case"]) == (expected_file, expected_case), checked.stdout
    if bug == "BUG_WINDOW_DROPS_TAIL":
        assert "output.settings[workers=1 prefetch=4].sha256" in checked.stdout, checked.stdout


def _export(folder: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "onemodel_cy", "conformance", "export", str(folder)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def test_c_port_is_clean_under_address_and_leak_sanitizers(tmp_path):
    """The port as an example port authors copy: built with AddressSanitizer and
    UndefinedBehaviorSanitizer, it replays every vector (refused inputs included) with no
    error and no leak, creates its results folder itself, and still conforms."""
    cc = _compiler()
    exe = tmp_path / "port-asan"
    flags = [f for f in CFLAGS if f != "-O2"] + ["-O1", "-g", "-fsanitize=address,undefined",
                                                 "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
    built = subprocess.run([*shlex.split(cc), *flags, *map(str, _sources()), "-o", str(exe), "-lm"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    results = tmp_path / "not-yet" / "results"
    (tmp_path / "not-yet").mkdir()
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=23",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    ran = subprocess.run([str(exe), str(_export(tmp_path / "vectors")), str(results)], capture_output=True,
                         text=True, timeout=300, env=env)
    assert ran.returncode == 0 and "Sanitizer" not in ran.stderr, ran.stderr[-4000:]
    checked = subprocess.run([sys.executable, "-m", "onemodel_cy", "conformance", "check", str(results)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout[-2000:]


def test_c_port_harness_runs_up_to_the_last_64_bit_step(port, tmp_path):
    """The harness's window is kept as a difference of steps, never ``next + prefetch``:
    a run ending at 2^64 - 1 (a step the port's unsigned 64-bit steps allow) finishes under
    a worker thread, and every setting delivers the 0-worker batches."""
    vectors = _export(tmp_path / "vectors")
    case = copy.deepcopy(next(c for c in load("stream.json")["cases"]
                              if c["name"] == "iter_shuffled_resumed_mid_epoch_world_size_1"))
    top = 2**64 - 1
    case["input"]["runs"] = [{"start_g": str(top - 3), "stop_g": str(top)}]
    case["input"]["harness"] = {"workers": ["0", "1", "3"], "prefetch": ["4", "8"]}
    (vectors / "stream.json").write_text(json.dumps({"section": "§1", "cases": [case]}), encoding="utf-8")
    exe = port.build()
    ran = subprocess.run([str(exe), str(vectors), str(tmp_path / "results")], capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    output = json.loads((tmp_path / "results" / "stream.json").read_text())["cases"][0]["output"]
    assert [b["g"] for run in output["runs"] for b in run["batches"]] == [str(g) for g in range(top - 3, top)]
    assert len(output["settings"]) == 6 and len({s["sha256"] for s in output["settings"]}) == 1
