"""Concern: the documents name what exists (docs/architecture.md, "Rules"); no spec section.

Modules were renamed and moved more than once, and a document that still names the old
file, module or line misleads the next reader. These tests read the documents and the
package's own comments and check every reference against the tree:

* every path in ``docs/*.md`` and ``README.md`` (in a code span or as a link target) names
  a file or folder of the checkout, and ``path:line`` / ``path:first-last`` a line inside
  that file;
* every path a comment or docstring of the package names (``workers/window.pyx``,
  ``onemodel_cy/src/lane.h``, ``_lane.pyx``) exists, and no ``_module.Name`` names a
  module that is gone (``_bufferpool.SealedMemory``);
* every site a table of ``docs/memory-audit.md`` names (a function, or ``Class.method``)
  is defined in the file its row or section names.

The tree is the checkout these tests live in.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import re

import pytest

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_DIRS = {".git", "build", "dist", "__pycache__", ".hypothesis", ".pytest_cache", ".ruff_cache"}

# Names the documents use for a user's own files or for what a command writes, not for a
# file of this repository: each is written out here, so that nothing else slips through.
NOT_IN_THE_TREE = {
    "labels.txt", "test/labels.txt", "test/", "batch.png",       # guide.md, README: the user's data
    "results/rng.json", "port_rng.py",                           # conformance.md: a port's files
    "decisions.md",                                              # the spec's readings, beside the text
    "FOLDER/",                                                   # packed-format.md: the cache folder
    "build/cython/", "fuzz/artifacts/",                          # written by the build and the fuzzers
}

# Stale names in files that other changes of issue 34 rewrite (workers/, stream.py); each
# must still be there, so that this list is emptied as they are fixed.
KNOWN_STALE: set = set()

CODE_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".h", ".c", ".md", ".json")
# The folders a path in a document or a comment may start with.
ROOTS = {"onemodel_cy", "core", "data", "collate", "workers", "conformance", "testing", "src", "docs",
         "spec_tests", "benchmarks", "fuzz", "examples", "vectors"}
TOKEN = re.compile(r"(?<![\w./-])((?:\.\./|\./)?[\w*-]+(?:(?:\.|/\.?)[\w*-]+)*/?)(?::(\d+)(?:-(\d+))?)?")


def _tree():
    files = set()
    for folder, dirs, names in os.walk(CHECKOUT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        rel = os.path.relpath(folder, CHECKOUT).replace(os.sep, "/")
        files.update(name if rel == "." else f"{rel}/{name}" for name in names)
    folders = {"/".join(f.split("/")[:k]) for f in files for k in range(1, f.count("/") + 1)}
    return files, folders


FILES, FOLDERS = _tree()
MODULES = {os.path.splitext(os.path.basename(p))[0] for p in FILES}
MODULE_ATTRIBUTE = re.compile(r"(?<![\w.])(_[a-z]\w*)\.(?!(?:pyx|pxd|pyi|py|h|c)\b)[A-Za-z_]")


def resolve(token, beside):
    """The file or folder of the tree ``token`` names, read from the folder ``beside`` (a
    document's or a module's), or as the end of a path (``collate/fetch.pyx`` is
    ``onemodel_cy/collate/fetch.pyx``); None when nothing matches."""
    token = token.rstrip(".")
    wanted = token.rstrip("/")
    if token.startswith(("../", "./")):
        wanted = os.path.normpath(os.path.join(beside, wanted)).replace(os.sep, "/")
        return wanted if wanted in FILES or wanted in FOLDERS else None
    pool = FOLDERS if token.endswith("/") else FILES | FOLDERS
    if any(ch in wanted for ch in "*?["):
        hit = [p for p in FILES if fnmatch.fnmatch(p, wanted) or fnmatch.fnmatch(p, "*/" + wanted)]
        return hit[0] if hit else None
    for candidate in (os.path.normpath(os.path.join(beside, wanted)).replace(os.sep, "/"), wanted):
        if candidate in pool:
            return candidate
    hit = sorted(p for p in pool if p.endswith("/" + wanted))
    return hit[0] if hit else None


def _expand(token):
    """``core/rng.pxd/.pyx`` names two files."""
    several = re.fullmatch(r"(.+?)((?:\.\w+)(?:/\.\w+)+)", token)
    return [several.group(1) + s for s in several.group(2).split("/")] if several else [token]


def is_path(token):
    if token.startswith(".") and not token.startswith(("../", "./")):
        return False                    # a suffix (".npy") or a relative module
    if "/" in token.rstrip("/"):
        return token.lstrip("./").split("/")[0] in ROOTS or token.startswith(("../", "./"))
    if token.endswith("/"):
        return token.rstrip("/") in ROOTS
    return token.endswith(CODE_SUFFIXES)


def line_count(path):
    with open(os.path.join(CHECKOUT, path), encoding="utf-8", errors="replace") as fh:
        return sum(1 for _ in fh)


def check_reference(token, first, last, beside, where):
    """A problem with one reference, or None."""
    for name in _expand(token):
        if name in NOT_IN_THE_TREE:
            continue
        found = resolve(name, beside)
        if found is None:
            return f"{where}: {name} is not in the tree"
        if first is not None:
            end = int(last or first)
            if found not in FILES:
                return f"{where}: {name}:{first} gives a line of a folder"
            if not 1 <= int(first) <= end <= line_count(found):
                return f"{where}: {name}:{first}{'-' + last if last else ''} lies past its {line_count(found)} lines"
    return None


DOCUMENTS = sorted(glob.glob(os.path.join(CHECKOUT, "docs", "*.md"))) + [os.path.join(CHECKOUT, "README.md")]


def document_references(path):
    """(token, first line, last line) of every path in a code span or link of ``path``."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    found = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for m in TOKEN.finditer(span):
            if is_path(m.group(1)):
                found.append(m.groups())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        target = target.split("#")[0]
        if target and not re.match(r"[a-z]+:", target):
            found.append((target, None, None))
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: os.path.relpath(p, CHECKOUT))
def test_every_path_in_a_document_names_a_file_of_the_tree(document):
    """Concern: documents. A path, ``path:line`` or link in a document names a file (or
    folder) that exists, and a line number one inside that file."""
    beside = os.path.relpath(os.path.dirname(document), CHECKOUT)
    references = document_references(document)
    where = os.path.relpath(document, CHECKOUT)
    problems = [p for token, first, last in references
                if (p := check_reference(token, first, last, beside, where))]
    with open(document, encoding="utf-8") as fh:
        spans = " ".join(re.findall(r"`([^`\n]+)`", fh.read()))
    problems += [f"{where}: {name}.... names a module that the tree does not have"
                 for name in MODULE_ATTRIBUTE.findall(spans) if name not in MODULES]
    assert not problems, "\n".join(problems)


SOURCES = sorted(p for p in FILES if p.startswith("onemodel_cy/") and p.endswith((".py", ".pyx", ".pxd", ".pyi", ".h")))
SOURCE_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w.-]*|_[a-z]\w*\.(?:pyx|pxd|pyi|py|h|c)\b)(?::(\d+)(?:-(\d+))?)?")


def source_problems(path, text):
    """(problem, stale name) of each path and ``_module.Name`` of one source file that names
    nothing of the tree."""
    problems = []
    beside = os.path.dirname(path)
    for m in SOURCE_PATH.finditer(text):
        token = m.group(1).rstrip(".")
        if "/" in token and token.split("/")[0] not in ROOTS:
            continue                    # a fraction, a unit (bytes/s), a URL's tail
        problem = check_reference(token, m.group(2), m.group(3), beside, path)
        if problem:
            problems.append((problem, token))
    for m in MODULE_ATTRIBUTE.finditer(text):
        name = m.group(1)
        bound = re.search(rf"(?:\bas\s+|\bimport\s+|^\s*(?:def|class|cdef class)\s+|^\s*(?:global\s+)?){name}\b"
                          rf"(?!\.)", text, re.M)
        if name not in MODULES and not bound:
            problems.append((f"{path}: {m.group(0)}... names a module {name} that the tree does not have", name))
    return problems


def test_every_path_and_module_a_comment_names_exists():
    """Concern: documents. A module's comments and docstrings name files and modules of
    the tree as they are now: no path to a moved file, no ``_module.Name`` of a module that
    was renamed."""
    problems, stale_seen = [], set()
    for path in SOURCES:
        with open(os.path.join(CHECKOUT, path), encoding="utf-8") as fh:
            text = fh.read()
        for problem, name in source_problems(path, text):
            if (path, name) in KNOWN_STALE:
                stale_seen.add((path, name))
            else:
                problems.append(problem)
    assert not problems, "\n".join(problems)
    fixed = KNOWN_STALE - stale_seen
    assert not fixed, f"fixed since: remove them from KNOWN_STALE: {sorted(fixed)}"


def test_the_checks_catch_an_old_name():
    """The checkers themselves, on the names this test was written for."""
    assert check_reference("onemodel_cy/_lane.pyx", None, None, ".", "x")
    assert check_reference("collate/collator.pyx", "99999", None, "docs", "x")
    assert check_reference("core/rng.pxd/.pyx", None, None, "docs", "x") is None
    assert check_reference("../examples/README.md", None, None, "docs", "x") is None
    text = "sealed (``_bufferpool.SealedMemory``); import numpy as _np\n_np.zeros(1)\n"
    assert [name for _, name in source_problems("onemodel_cy/x.pyx", text)] == ["_bufferpool"]


# ---------------------------------------------------------------- the memory audit

DEFINITION = r"^[^\n#=]*\b(?:def|cdef|cpdef|static|void|int|bint)\b[^\n=]*?[\s*]{name}\s*\("
CLASS = r"^\s*(?:cdef\s+)?class\s+{name}\b"


def defines(text, name):
    """Whether ``text`` defines function ``name``, or for ``A.b`` a class ``A`` with a
    method ``b`` (in the class's body: up to the next statement at the margin)."""
    owner, _, member = name.rpartition(".")
    if owner:
        header = re.search(CLASS.format(name=re.escape(owner)), text, re.M)
        if not header:
            return False
        text = text[header.end():]
        end = re.search(r"^\S", text[text.index("\n") + 1:] + "\nend", re.M)
        text = text[:text.index("\n") + 1 + end.start()]
    return bool(re.search(DEFINITION.format(name=re.escape(member)), text, re.M))


def audit_sites():
    """(section files, row files, names) of every row of docs/memory-audit.md's tables."""
    with open(os.path.join(CHECKOUT, "docs", "memory-audit.md"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    section, rows = [], []
    for line in lines:
        if line.startswith("## "):
            section = [s for s in re.findall(r"`([^`]+)`", line) if "/" in s]
        elif line.startswith("| ") and section and not line.startswith(("| Site", "|---")):
            spans = re.findall(r"`([^`]+)`", line.split("|")[1])
            files = [s for s in spans if "/" in s]
            names = [s for s in spans if "/" not in s and re.fullmatch(r"[A-Za-z_]\w*(?:\.\w+)?", s)]
            rows.append((section, files, names))
    return rows


def test_every_site_of_the_memory_audit_is_defined_where_it_says():
    """Concern: documents. The audit names each site by function or ``Class.method``, not by
    line number; each is defined in the file its row names (or, when the row names none,
    in one of its section's files)."""
    rows = audit_sites()
    assert len(rows) > 40, "the audit's tables were not read"
    problems = []
    for section, files, names in rows:
        texts = []
        for f in files or section:
            path = os.path.join(CHECKOUT, "onemodel_cy", f)
            if not os.path.isfile(path):
                problems.append(f"{f} is not a file of onemodel_cy/")
                continue
            with open(path, encoding="utf-8") as fh:
                texts.append(fh.read())
        problems += [f"{name} (in {files or section})" for name in names
                     if not any(defines(text, name) for text in texts)]
    assert not problems, f"docs/memory-audit.md names sites that are not defined there: {problems}"
