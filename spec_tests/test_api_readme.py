"""The README's Python snippets run as copied: each ```python block is cut out of README.md
and run by a fresh interpreter in an empty folder (the checkpoint snippet twice: the second
run resumes where the first saved). A snippet added to the README is run here without
being named. The same holds for the pages of ``PAGES`` (docs/augment.md).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch  # noqa: F401  (the README's snippets use torch; CI leaves this file out where torch is not installed)

from harness import ROOT


PAGES = ["README.md", "docs/augment.md"]      # the pages whose every ```python block runs here


def readme_snippets(page="README.md"):
    with open(os.path.join(ROOT, page), encoding="utf-8") as readme:
        text = readme.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def page_snippets():
    """(page, index, code) of every snippet of every page of PAGES."""
    return [(page, k, code) for page in PAGES for k, code in enumerate(readme_snippets(page))]


def run(code, folder):
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the snippet failed:\n{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def test_the_readme_has_the_snippets_this_file_expects():
    snippets = readme_snippets()
    assert len(snippets) >= 2, "README.md lost its Use and Checkpoints snippets"
    assert any("load_state_dict" in s for s in snippets)


def test_the_augment_page_has_its_snippets():
    snippets = readme_snippets("docs/augment.md")
    assert len(snippets) >= 4, "docs/augment.md lost its snippets (transform, augmentation, composition, determinism)"
    assert any("text_lines()" in s for s in snippets) and any("state=checkpoint" in s for s in snippets)


@pytest.mark.parametrize("page, index, code", page_snippets(), ids=[f"{p}:{k}" for p, k, _ in page_snippets()])
def test_a_readme_snippet_runs_as_copied(page, index, code, tmp_path):
    first = run(code, tmp_path)
    if "load_state_dict" not in code:
        return
    # The checkpoint snippet: the first run starts at 0 and saves; the second resumes
    # at the step after the last save, not at 0.
    assert "starting at global step 0" in first, first
    second = run(code, tmp_path)
    resumed = int(re.search(r"starting at global step (\d+)", second).group(1))
    assert resumed > 0, second
