"""Concern: the public API (docs/guide.md, "Public API"); no spec section.

The guide's "Public API" section says what is kept stable and what may move. These tests
read that section and compare it with the package, so the two cannot drift apart:

* the names listed under ``onemodel_cy`` are exactly ``onemodel_cy.__all__`` (and each
  exists);
* each other public module's names are exactly its ``__all__``;
* the commands listed are exactly those ``onemodel-cy --help`` and ``onemodel-cy
  conformance --help`` offer;
* every subpackage and module of the package is either public or named as internal;
* the examples import only public modules.
"""
from __future__ import annotations

import ast
import glob
import importlib
import os
import re

import pytest

import onemodel_cy as om
from onemodel_cy.cli import main

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLIC_MODULES = {"onemodel_cy", "onemodel_cy.interop", "onemodel_cy.show", "onemodel_cy.augment"}


def section():
    """{subsection title: its text} of the guide's "Public API" section."""
    with open(os.path.join(CHECKOUT, "docs", "guide.md"), encoding="utf-8") as fh:
        text = fh.read()
    start = text.index("\n## Public API\n")
    end = text.index("\n## ", start + 1)
    parts = re.split(r"^### (.+)$", text[start:end], flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


def identifiers(text):
    return [s for s in re.findall(r"`([^`\n]+)`", text) if re.fullmatch(r"[A-Za-z_]\w*", s)]


def test_the_names_listed_for_onemodel_cy_are_exactly_its_all():
    """Concern: public API. The section's list of ``onemodel_cy``'s names is its
    ``__all__``: a name exported but not listed, or listed but not exported, fails."""
    listed = [name for name in identifiers(section()["`onemodel_cy`"]) if name != "__all__"]
    assert len(listed) == len(set(listed)), f"listed twice: {sorted(n for n in listed if listed.count(n) > 1)}"
    assert len(om.__all__) == len(set(om.__all__)), "onemodel_cy.__all__ names something twice"
    assert set(listed) == set(om.__all__), (f"exported, not in the guide: {sorted(set(om.__all__) - set(listed))}; "
                                            f"in the guide, not exported: {sorted(set(listed) - set(om.__all__))}")
    assert all(hasattr(om, name) for name in om.__all__)


def test_the_vocabulary_helpers_are_public_where_users_look():
    """Concern: public API. The vocabulary convention's helpers are reached from the top
    level (the module that holds them may move)."""
    from onemodel_cy.data import vocabulary
    assert (om.decode, om.check_same, om.BLANK) == (vocabulary.decode, vocabulary.check_same, vocabulary.BLANK)
    dataset = om.SyntheticTextLines(4, seed=0)
    assert om.decode(dataset.get_sample(0).target, dataset.vocabulary) == dataset.decode(dataset.get_sample(0).target)
    assert om.check_same(dataset, om.SyntheticTextLines(2, seed=1)) == dataset.vocabulary
    assert dataset.vocabulary[0] == om.BLANK


def module_bullets(text):
    """{module: [names]} of bullets ``- `module` (...): `a`, `b`...`` (the names after the colon)."""
    found = {}
    for bullet in re.split(r"^- ", text, flags=re.M)[1:]:
        head, _, names = bullet.partition(": ")
        found[re.search(r"`([^`\n]+)`", head).group(1)] = identifiers(names)
    return found


def test_each_other_public_module_lists_exactly_its_all():
    """Concern: public API. Each public module the section lists gives exactly its
    ``__all__``, and the section lists every public module."""
    listed = module_bullets(section()["The other public modules"])
    assert set(listed) == PUBLIC_MODULES - {"onemodel_cy"}
    for name, names in listed.items():
        module = importlib.import_module(name)
        assert sorted(names) == sorted(module.__all__), name


def help_choices(capsys, argv):
    with pytest.raises(SystemExit):
        main(argv)
    usage = capsys.readouterr().out
    return set(re.search(r"\{([\w,]+)\}", usage).group(1).split(","))


def test_the_commands_listed_are_exactly_the_command_lines(capsys):
    """Concern: public API. The commands the section names are the ones ``--help``
    offers, for ``onemodel-cy`` and for ``onemodel-cy conformance``."""
    listed = set(identifiers(section()["The command line"]))
    commands = help_choices(capsys, ["--help"])
    conformance = help_choices(capsys, ["conformance", "--help"])
    offered = commands | conformance
    assert listed == offered, (f"offered, not in the guide: {sorted(offered - listed)}; "
                               f"in the guide, not offered: {sorted(listed - offered)}")


def test_every_module_of_the_package_is_public_or_named_internal():
    """Concern: public API. A new subpackage or top-level module is classified: public
    (listed above) or named in "Internal: may move"."""
    internal = section()["Internal: may move"]
    named = set(re.findall(r"`(?:onemodel_cy)?\.?(\w+)`", internal))
    package = os.path.join(CHECKOUT, "onemodel_cy")
    modules = {os.path.splitext(n)[0] for n in os.listdir(package) if n.endswith(".py")}
    modules |= {n for n in os.listdir(package) if os.path.isfile(os.path.join(package, n, "__init__.py"))}
    modules -= {"__init__", "__main__"} | {m.rpartition(".")[2] for m in PUBLIC_MODULES}
    assert modules, "the package was not read"
    assert not modules - named, f"neither public nor named internal in docs/guide.md: {sorted(modules - named)}"


def test_the_examples_import_only_public_modules():
    """Concern: public API. What the examples show a user is what stays: they import
    ``onemodel_cy`` and its public modules only."""
    imported = {}
    for path in sorted(glob.glob(os.path.join(CHECKOUT, "examples", "*.py"))):
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "onemodel_cy":
                    imported.setdefault(name, []).append(os.path.basename(path))
    assert imported, "the examples were not read"
    assert set(imported) <= PUBLIC_MODULES, {m: f for m, f in imported.items() if m not in PUBLIC_MODULES}
