"""The import graph of the package's own modules, lazy imports included, and its cycles.

Run: ``python spec_tests/import_graph.py`` (from the repository root) prints the number of
modules and edges, each cycle, and exits 1 when there is one. ``test_arch_layout.py``
asserts there is none.

Every ``import`` and ``cimport`` statement of every ``.py``, ``.pyx`` and ``.pxd`` file is
read as text, wherever it stands (inside a function too), so an import deferred to break
a cycle still counts as an edge. ``from P import name`` is an edge to ``P.name`` when that
is a module, else to ``P``; an edge to ``P.x`` is one to each enclosing subpackage too
(importing it runs their ``__init__`` first), except the importer's own (already running).
An edge to an enclosing package (a submodule that imports
``onemodel_cy``) counts like any other: the package's ``__init__`` imports most modules.
"""
from __future__ import annotations

import os
import re
import sys

PACKAGE = "onemodel_cy"
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n#]+)|c?import[ \t]+([^\n#]+))",
                     re.M)


def _module_name(root, path):
    name = os.path.splitext(os.path.relpath(path, root))[0].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def graph(root="."):
    """{module: set of the package's modules it imports}."""
    files = {}
    for folder, _, names in os.walk(os.path.join(root, PACKAGE)):
        for name in names:
            if name.endswith((".py", ".pyx", ".pxd")):
                path = os.path.join(folder, name)
                files.setdefault(_module_name(root, path), []).append(path)
    edges = {module: set() for module in files}
    for module, paths in files.items():
        for path in paths:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            for source, names, plain in _IMPORT.findall(text):
                if source:
                    subs = [f"{source}.{n}" for n in re.split(r"[\s,()]+", names)
                            if n and f"{source}.{n}" in files]
                    targets = subs or [source]
                else:
                    targets = [part.split()[0] for part in plain.split(",") if part.strip()]
                for target in targets:
                    # Importing P.x runs P's __init__ first: an edge to each enclosing
                    # subpackage too (the root's is left out: it imports nearly everything).
                    parts = target.split(".")
                    enclosing = [".".join(parts[:depth]) for depth in range(2, len(parts))]
                    if target in files and target != module:
                        edges[module].add(target)
                    edges[module].update(name for name in enclosing
                                         if name in files and not module.startswith(name + "."))
    return edges


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main():
    edges = graph()
    found = cycles(edges)
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} import edges (lazy imports included), "
          f"{len(found)} cycles")
    for component in found:
        print("cycle:", " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
