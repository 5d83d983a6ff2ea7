"""The conformance checker: replays the vectors with this package, and checks a port's results.

See the package's docstring (``onemodel_cy.conformance``) for the commands and the results format.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import onemodel_cy
from onemodel_cy.conformance.codec import VECTOR_FILES, VECTORS_DIR, load, short
from onemodel_cy.conformance.harness import settings_differences
from onemodel_cy.conformance.replay import differences, is_refusal, replay


def run_self(out_dir=None):
    """Replay every vector with this package; returns {file: results document}."""
    results = {}
    for name in VECTOR_FILES:
        doc = load(name)
        results[name] = {"section": doc["section"],
                         "cases": [{"name": case["name"], "output": replay(onemodel_cy, case)}
                                   for case in doc["cases"]]}
        if out_dir is not None:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as fh:
                json.dump(results[name], fh, indent=None, sort_keys=True)
    return results


class ResultsError(Exception):
    """A results file that cannot be checked; its message is one line naming the file."""


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _reject_constant(name):
    raise ValueError(f"{name} is not a JSON value")


def parse_results(data: bytes, label: str) -> dict:
    """A results document from the bytes of file ``label``, or ``ResultsError`` saying in
    one line what is wrong with it."""
    if not data.strip():
        raise ResultsError(f"{label}: the file is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ResultsError(f"{label}: not UTF-8 text (a binary file?): byte 0x{data[error.start]:02x} at offset "
                           f"{error.start}") from None
    if "\x00" in text:
        raise ResultsError(f"{label}: holds NUL characters (a binary file?)")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        ends = text.rstrip()[-1:]
        hint = "" if ends in ("}", "]") else f" (the file ends with {ends!r}, not '}}': truncated?)"
        raise ResultsError(f"{label}: not valid JSON at line {error.lineno}, column {error.colno}: "
                           f"{error.msg}{hint}") from None
    except RecursionError:
        raise ResultsError(f"{label}: nested too deeply to be a results file") from None
    except ValueError as error:       # a number of thousands of digits, NaN, Infinity
        problem = ("a number of more than 4300 digits (write 64-bit integers as decimal strings)"
                   if "digits" in str(error) else short(str(error)))
        raise ResultsError(f"{label}: a value cannot be read: {problem}") from None
    validate_results(doc, label)
    return doc


def validate_results(doc, label: str) -> None:
    """``ResultsError`` unless ``doc`` is ``{"cases": [{"name": "...", ...}, ...]}``."""
    if not isinstance(doc, dict):
        raise ResultsError(f'{label}: the top level must be an object {{"cases": [...]}}, got {_kind(doc)}')
    if "cases" not in doc:
        raise ResultsError(f'{label}: no "cases" list (keys: {short(sorted(map(str, doc))[:8])})')
    if not isinstance(doc["cases"], list):
        raise ResultsError(f'{label}: "cases" must be a list, got {_kind(doc["cases"])}')
    for k, case in enumerate(doc["cases"]):
        if not isinstance(case, dict):
            raise ResultsError(f"{label}: cases[{k}] must be an object, got {_kind(case)}")
        if not isinstance(case.get("name"), str) or not case["name"]:
            raise ResultsError(f"{label}: cases[{k}] has no name (a non-empty string)")


def _own_output(case):
    """This package's output for ``case`` with every array's values, computed once, when a
    message needs an array's values or a stream setting's digest needs its batches."""
    cache = []

    def full():
        if not cache:
            whole = dict(case, input=dict(case["input"], full=True)) if "full" in case["input"] else case
            cache.append(replay(onemodel_cy, whole))
        return cache[0]
    return full


def _setting_digest(case, own):
    """The digest every harness setting of a stream case must deliver: the vector's own for
    a ``stream_digest``; for a ``stream_iter`` (whose vector holds the images' hashes, not
    their bytes), this package's, which the vector's batches pin."""
    if "sha256" in case["output"]:
        return lambda: case["output"]["sha256"]
    return lambda: own()["settings"][0]["sha256"]


def answer_key(doc, name):
    """Why ``doc`` is the vectors rather than a port's results (one line), or ``None``."""
    if doc == load(name):
        return (f"{name}: this is the vector file itself (the answer key), not a port's results: point check "
                f"at the files your port wrote")
    for k, case in enumerate(doc["cases"]):
        carried = [key for key in ("input", "pins") if key in case]
        if carried:
            return (f"{name}: cases[{k}] ({short(case['name'])}) carries the vectors' {' and '.join(carried)}: "
                    f"a copy of the answer key is not a port's results (write each case's name and output)")
    return None


def _check_file(name, doc, allow_missing, out):
    """(compared, failures) for one results document against vector file ``name``."""
    vectors = load(name)
    known = {case["name"] for case in vectors["cases"]}
    got, failed = {}, 0
    for case in doc["cases"]:
        if case["name"] in got:
            failed += 1
            print(f"  {name}:{short(case['name'])}: duplicate case name (each case once)", file=out)
        got.setdefault(case["name"], case.get("output"))
    unknown = [n for n in got if n not in known]
    for n in unknown[:5]:
        print(f"  {name}:{short(n)}: unknown case (no case of that name in the vectors: misspelled?)", file=out)
    if len(unknown) > 5:
        print(f"  {name}: ... and {len(unknown) - 5} more unknown cases", file=out)
    failed += len(unknown)
    passed = missing = differing = 0
    for case in vectors["cases"]:
        if case["name"] not in got:
            missing += 1
            if not allow_missing:
                print(f"  {name}:{case['name']}: missing", file=out)
            continue
        own = _own_output(case)
        found = differences(case["output"], got[case["name"]], full=own)
        if "harness" in case["input"] and not is_refusal(case["output"]):
            found += settings_differences(case, got[case["name"]], _setting_digest(case, own))
        if found:
            differing += 1
            print(f"  {name}:{case['name']} (pins {', '.join(case['pins'])}): {found[0]}"
                  + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""), file=out)
        else:
            passed += 1
    failed += differing
    print(f"{name} ({vectors['section']}): {passed} passed, {failed} failed, {missing} missing", file=out)
    return passed + differing, failed + (0 if allow_missing else missing)


def check(results, allow_missing=False, out=None):
    """Compare results documents ({file: doc}) with the vectors; returns the number of failures.

    A document may be a ``ResultsError`` (a file that could not be read): it is reported
    and counts as a failure. Nothing compared is a failure too: a port never conforms by
    handing in no case, or only misspelled ones."""
    out = sys.stdout if out is None else out
    failures = compared = 0
    for name in VECTOR_FILES:
        doc = results.get(name)
        if doc is None:
            if not allow_missing:
                failures += len(load(name)["cases"])
                print(f"{name}: MISSING (no results file)", file=out)
            continue
        try:
            if isinstance(doc, ResultsError):
                raise doc
            validate_results(doc, name)
        except ResultsError as error:
            failures += 1
            print(f"{error}", file=out)
            continue
        refused = answer_key(doc, name)
        if refused:
            failures += 1
            print(refused, file=out)
            continue
        done, failed = _check_file(name, doc, allow_missing, out)
        compared, failures = compared + done, failures + failed
    for name in sorted(set(results) - set(VECTOR_FILES)):
        failures += 1
        problem = results[name]
        print(problem if isinstance(problem, ResultsError) else
              f"{name}: not a vector file's name ({', '.join(VECTOR_FILES)})", file=out)
    print(f"compared {compared} cases", file=out)
    if compared == 0:
        print("nothing was compared: no results case matched a vector case", file=out)
        failures += 1
    return failures


# A results file is read only if it is a regular file (a link to one is followed), and
# only up to this many bytes and one more: a link to /dev/zero, a FIFO or a runaway port's
# output is refused in one line, never read whole or waited on.
RESULTS_BYTES = 256 << 20


def read_results_file(file) -> bytes:
    """The bytes of the results file ``file``, or ``ResultsError`` in one line: not a
    regular file (opened without blocking, then looked at), or larger than ``RESULTS_BYTES``."""
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ResultsError(f"{file}: not a regular file (a results file is a regular file of at most "
                               f"{RESULTS_BYTES} bytes)")
        parts, got = [], 0
        while got <= RESULTS_BYTES:
            part = os.read(fd, RESULTS_BYTES + 1 - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
    finally:
        os.close(fd)
    if got > RESULTS_BYTES:
        raise ResultsError(f"{file}: larger than the {RESULTS_BYTES} bytes a results file may hold")
    return b"".join(parts)


def _read_results(paths):
    """{file name: document or ResultsError} for every results file under ``paths``."""
    results, read = {}, {}
    for path in paths:
        path = Path(path)
        if not path.exists():
            results[path.name] = ResultsError(f"{path}: no such file or folder")
            continue
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        for file in files:
            if path.is_dir() and file.name not in VECTOR_FILES:
                continue
            if read.setdefault(file.name, file.resolve()) != file.resolve():
                # Two files answer for one vector file: neither is taken.
                results[file.name] = ResultsError(f"{file}: a second results file named {file.name}, beside "
                                                  f"{read[file.name]} (one per vector file: which is your port's?)")
                continue
            if file.name in results:     # the same file named twice
                continue
            try:
                results[file.name] = parse_results(read_results_file(file), str(file))
            except ResultsError as error:
                results[file.name] = error
            except OSError as error:
                results[file.name] = ResultsError(f"{file}: cannot be read: {error.strerror}")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="onemodel-cy conformance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list")
    export = commands.add_parser("export")
    export.add_argument("dir")
    run = commands.add_parser("run")
    run.add_argument("--out", default=None)
    checker = commands.add_parser("check")
    checker.add_argument("results", nargs="+")
    checker.add_argument("--allow-missing", action="store_true",
                         help="check only the files and cases present (comparing nothing still fails)")
    args = parser.parse_args(argv)

    if args.command == "list":
        print(f"vectors in {VECTORS_DIR}")
        for name in VECTOR_FILES:
            doc = load(name)
            pins = sorted({p for case in doc["cases"] for p in case["pins"]})
            print(f"  {name:16s} {doc['section']:8s} {len(doc['cases']):4d} cases, pins {' '.join(pins)}")
        return 0
    if args.command == "export":
        os.makedirs(args.dir, exist_ok=True)
        for name in (*VECTOR_FILES, "README.md"):
            shutil.copy(VECTORS_DIR / name, os.path.join(args.dir, name))
        print(f"wrote {len(VECTOR_FILES)} vector files and README.md to {args.dir}")
        return 0
    if args.command == "run":
        failures = check(run_self(args.out))
        print("onemodel_cy conforms" if failures == 0 else f"{failures} cases FAILED")
        return 1 if failures else 0
    results = _read_results(args.results)
    if not results:
        print(f"no results files named like the vectors ({', '.join(VECTOR_FILES)}) in {args.results}")
        return 1
    failures = check(results, allow_missing=args.allow_missing)
    print("conforms" if failures == 0 else f"{failures} failures: does NOT conform")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
