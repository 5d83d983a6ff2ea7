"""The parts of ``docs/conformance.md`` that describe the kit itself, written from the kit.

Counts, file lists, the ops of each file, the harness settings, the mutations of the C
port and the §7 timing drifted when they were typed by hand; here they are read off the
vectors, ``mutations.h`` and the checker, and written between the page's markers

    <!-- kit:NAME -->
    ...
    <!-- /kit:NAME -->

Run ``python spec_tests/generate_kit_docs.py`` to rewrite them, ``--check`` to exit 1
when the page is stale (``test_conformance_docs.py`` does the same).
"""
from __future__ import annotations

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOC = os.path.join(ROOT, "docs", "conformance.md")
MUTATIONS_H = os.path.join(ROOT, "conformance", "ports", "c", "mutations.h")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from onemodel_cy.conformance.codec import VECTOR_FILES, load  # noqa: E402
from onemodel_cy.conformance.harness import asked  # noqa: E402


def _files() -> str:
    rows = ["| file | section | cases | ops | readings and sections pinned |", "| --- | --- | --- | --- | --- |"]
    total = 0
    for name in VECTOR_FILES:
        doc = load(name)
        ops = sorted({case["input"]["op"] for case in doc["cases"]})
        pins = sorted({p for case in doc["cases"] for p in case["pins"]}, key=_pin_order)
        total += len(doc["cases"])
        rows.append(f"| `{name}` | {doc['section']} | {len(doc['cases'])} | {', '.join(f'`{op}`' for op in ops)} "
                    f"| {', '.join(pins)} |")
    return (f"The kit is {len(VECTOR_FILES)} vector files holding {total} cases "
            f"(`onemodel-cy conformance list` prints the same):\n\n" + "\n".join(rows))


def _pin_order(pin: str):
    if pin.startswith("D"):
        return (1, int(pin[1:]), "")
    if pin.startswith("§"):
        return (0, int(pin[1:]), "")
    return (2, 0, pin)


def _results_files() -> str:
    return ", ".join(f"`{name}`" for name in VECTOR_FILES)


def _harness() -> str:
    lines = []
    for name in VECTOR_FILES:
        seen = {}
        for case in load(name)["cases"]:
            if "harness" in case["input"]:
                settings = asked(case["input"])
                key = (case["input"]["op"], tuple(settings))
                seen.setdefault(key, []).append(case["name"])
        for (op, settings), cases in seen.items():
            workers = sorted({w for w, _ in settings})
            prefetch = sorted({p for _, p in settings})
            lines.append(f"* `{op}` ({len(cases)} case{'s' if len(cases) > 1 else ''} of `{name}`): `workers` ∈ "
                         f"{{{', '.join(map(str, workers))}}} × `prefetch` ∈ {{{', '.join(map(str, prefetch))}}}, "
                         f"{len(settings)} settings")
    return "\n".join(lines)


def _section7() -> str:
    case = next(c for c in load("stream.json")["cases"] if c["name"] == "section7_two_epochs_digest")
    inp, ds, sampler = case["input"], case["input"]["dataset"], case["input"]["sampler"]
    steps = int(inp["stop_g"]) - int(inp["start_g"])
    return (f"`SyntheticLineImages` of {int(ds['count']):,} images (height {ds['height']}, widths "
            f"{ds['min_width']}–{ds['max_width']}, {ds['channels']} channel, seed {ds['seed']}), "
            f"`ShuffledSampler({sampler['n']}, {sampler['batch_size']}, seed {sampler['seed']}, drop_last)` "
            f"({case['output']['steps_per_epoch']} steps an epoch), global steps {inp['start_g']}–"
            f"{int(inp['stop_g']) - 1} ({steps} batches), rank 0 of 1. Expected run time, as the case's own "
            f"informative `expected_seconds` says: {case['output']['expected_seconds']}.")


def mutations() -> list:
    """(flag, reading, what) of every bug in the C port's mutations.h."""
    text = open(MUTATIONS_H, encoding="utf-8").read()
    found = []
    for match in re.finditer(r"^ \*   (BUG_\w+)\s+(\S+)\s+(.*?)(?=^ \*   BUG_|^ \*/)", text, re.M | re.S):
        flag, reading, what = match.groups()
        found.append((flag, reading, " ".join(line.strip(" *") for line in what.splitlines()).strip()))
    return found


def _mutations() -> str:
    rows = ["| flag | rule | the bug |", "| --- | --- | --- |"]
    rows += [f"| `{flag}` | {reading} | {what} |" for flag, reading, what in mutations()]
    return "\n".join(rows)


def _with_values(node) -> bool:
    if isinstance(node, dict):
        return "values_f32" in node or any(_with_values(v) for v in node.values())
    return isinstance(node, list) and any(_with_values(v) for v in node)


def _full_arrays() -> str:
    """The cases whose vectors carry an array's values, not only its hash."""
    listed = []
    for name in VECTOR_FILES:
        cases = [case["name"] for case in load(name)["cases"] if _with_values(case["output"])]
        if cases:
            listed.append(f"`{name}`: " + ", ".join(f"`{case}`" for case in cases))
    return "; ".join(listed) + "."


BLOCKS = {"files": _files, "results-files": _results_files, "harness": _harness, "section7": _section7,
          "mutations": _mutations, "full-arrays": _full_arrays}


def render(text: str) -> str:
    """``text`` with every block between its markers written anew."""
    for name, make in BLOCKS.items():
        pattern = re.compile(rf"(<!-- kit:{name} -->)\n.*?(<!-- /kit:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"docs/conformance.md has no <!-- kit:{name} --> ... <!-- /kit:{name} --> block")
        text = pattern.sub(lambda m: f"{m.group(1)}\n{make()}\n{m.group(2)}", text)
    return text


def main(argv) -> int:
    with open(DOC, encoding="utf-8") as fh:
        old = fh.read()
    new = render(old)
    if "--check" in argv:
        if new != old:
            print("docs/conformance.md is stale: run python spec_tests/generate_kit_docs.py")
            return 1
        return 0
    if new != old:
        with open(DOC, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(new)
    print(f"docs/conformance.md: {'rewritten' if new != old else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
