"""Conformance of ports: the known-answer vectors, and a checker of a port's results.

    onemodel-cy conformance list                 the vector files, their cases and what they pin
    onemodel-cy conformance export DIR           copy the vectors (and their format notes) to DIR
    onemodel-cy conformance run [--out DIR]      replay every vector with this package (and write
                                                 its results in the results format to DIR)
    onemodel-cy conformance check RESULTS...     check a port's results files or folders

A results file mirrors a vector file: ``{"cases": [{"name": ..., "output": {...}}, ...]}``
with the same file name (``rng.json``, ...), each output in the vectors' encoding. A case
whose input must be refused has output ``{"error": "<any name>"}``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import onemodel_cy
from onemodel_cy.conformance.codec import VECTOR_FILES, VECTORS_DIR, load
from onemodel_cy.conformance.replay import differences, replay


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


def check(results, allow_missing=False, out=sys.stdout):
    """Compare results documents ({file: doc}) with the vectors; returns the number of failures."""
    failures = 0
    for name in VECTOR_FILES:
        vectors = load(name)
        if name not in results:
            if not allow_missing:
                failures += len(vectors["cases"])
                print(f"{name}: MISSING (no results file)", file=out)
            continue
        got = {case["name"]: case.get("output") for case in results[name]["cases"]}
        passed = failed = missing = 0
        for case in vectors["cases"]:
            if case["name"] not in got:
                missing += 1
                if not allow_missing:
                    print(f"  {name}:{case['name']}: missing", file=out)
                continue
            found = differences(case["output"], got[case["name"]])
            if found:
                failed += 1
                print(f"  {name}:{case['name']} (pins {', '.join(case['pins'])}): {found[0]}"
                      + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""), file=out)
            else:
                passed += 1
        failures += failed + (0 if allow_missing else missing)
        print(f"{name} ({vectors['section']}): {passed} passed, {failed} failed, {missing} missing", file=out)
    return failures


def _read_results(paths):
    results = {}
    for path in paths:
        path = Path(path)
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        for file in files:
            if file.name in VECTOR_FILES:
                with open(file, encoding="utf-8") as fh:
                    results[file.name] = json.load(fh)
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
    checker.add_argument("--allow-missing", action="store_true", help="check only the cases present")
    args = parser.parse_args(argv)

    if args.command == "list":
        print(f"vectors in {VECTORS_DIR}")
        for name in VECTOR_FILES:
            doc = load(name)
            pins = sorted({p for case in doc["cases"] for p in case["pins"]})
            print(f"  {name:16s} {doc['section']:3s} {len(doc['cases']):4d} cases, pins {' '.join(pins)}")
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
    print("conforms" if failures == 0 else f"{failures} cases FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
