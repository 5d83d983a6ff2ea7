"""Concern: type stubs (DESIGN: ``.pyi`` stubs for compiled modules); no spec section.

The shipped type stubs (``onemodel_cy/<module>.pyi``) describe the compiled API.

Type checkers cannot see inside the Cython extension modules, so they read the stubs
beside them instead. A stub that lags the ``.pyx`` (a method added, an argument renamed,
a keyword-only marker moved) silently misleads every user's type checker and IDE. These
tests parse each stub with :mod:`ast` and compare it with the built module: the names it
defines, the members of its classes, and the parameters of every function and method
against the signature Cython embeds as the first line of ``__doc__``
(``embedsignature=True``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import types

import pytest

import onemodel_cy

COMPILED = ["core.validate", "core.rng", "core.permute", "core.samplers", "core.tablesamplers", "core.sealed",
            "data.datasets", "data.image", "data.textlines", "data.packs.reader", "data.packs.pixelmap",
            "collate.bufferpool", "collate.pacing", "collate.profile", "collate.augment", "collate.batch",
            "collate.collator", "collate.transform", "collate.fetch", "collate.pipeline",
            "workers.window", "workers.lane", "workers.shmring", "workers.taskboard",
            "augment.kernels", "augment.program", "testing._alloccount"]
PACKAGE_DIR = os.path.dirname(os.path.abspath(onemodel_cy.__file__))

# Dunder methods that are part of the API when a class defines them (all others, such as
# __repr__, __reduce__ and Cython's __reduce_cython__/__setstate_cython__, are not checked).
API_DUNDERS = {"__init__", "__call__", "__len__", "__enter__", "__exit__", "__iter__",
               "__getitem__"}

# Py_TPFLAGS_BASETYPE: clear on types that cannot be subclassed (``@cython.final``).
TPFLAGS_BASETYPE = 1 << 10

modules = pytest.mark.parametrize("name", COMPILED)


# ---------------------------------------------------------------- reading the stubs

def _flatten(body):
    """Statements of a stub body, looking inside ``if`` blocks (e.g. version checks)."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _flatten(node.body)
            yield from _flatten(node.orelse)
        else:
            yield node


def _defined(body) -> dict[str, list[ast.stmt]]:
    """Names a stub body defines (functions, overloads, classes, variables), in order."""
    names: dict[str, list[ast.stmt]] = {}
    for node in _flatten(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.setdefault(node.target.id, []).append(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.setdefault(target.id, []).append(node)
    return names


def stub_path(name: str) -> str:
    """The ``.pyi`` of module ``onemodel_cy.<name>`` (a dotted name lives in a subpackage)."""
    return os.path.join(PACKAGE_DIR, *name.split(".")) + ".pyi"


@functools.lru_cache(maxsize=None)
def stub_of(name: str) -> dict[str, list[ast.stmt]]:
    path = stub_path(name)
    with open(path, encoding="utf-8") as fh:
        return _defined(ast.parse(fh.read(), filename=path).body)


def stub_classes(name: str) -> dict[str, ast.ClassDef]:
    return {n: nodes[0] for n, nodes in stub_of(name).items() if isinstance(nodes[0], ast.ClassDef)}


def _decorators(node) -> set[str]:
    out = set()
    for d in node.decorator_list:
        if isinstance(d, ast.Call):
            d = d.func
        if isinstance(d, ast.Name):
            out.add(d.id)
        elif isinstance(d, ast.Attribute):
            out.add(d.attr)
    return out


def _is_property(node) -> bool:
    return bool(_decorators(node) & {"property", "setter", "getter", "deleter", "cached_property"})


def is_public(name: str) -> bool:
    return not name.startswith("_")


def stub_functions(name: str):
    """(label, runtime owner or None, function name, [FunctionDef, ...]) for every stubbed
    module function and class method (properties excluded)."""
    found = []
    for fname, nodes in stub_of(name).items():
        defs = [n for n in nodes if isinstance(n, ast.FunctionDef)]
        if defs:
            found.append((fname, None, fname, defs))
    for cname, cls in stub_classes(name).items():
        for mname, nodes in _defined(cls.body).items():
            defs = [n for n in nodes if isinstance(n, ast.FunctionDef) and not _is_property(n)]
            if defs:
                found.append((f"{cname}.{mname}", cname, mname, defs))
    return found


def stub_params(node: ast.FunctionDef, method: bool) -> list[tuple[str, ast.expr | None]]:
    """Parameters of a stub definition as (token, default): ``name``, ``*name``, ``*`` (the
    keyword-only marker) or ``**name``; the first parameter of a method is left out."""
    a = node.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [(p.arg, d) for p, d in zip(positional, defaults)]
    if method and not _decorators(node) & {"staticmethod"}:
        params = params[1:]
    if a.vararg is not None:
        params.append(("*" + a.vararg.arg, None))
    elif a.kwonlyargs:
        params.append(("*", None))
    params += [(p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg is not None:
        params.append(("**" + a.kwarg.arg, None))
    return params


# ---------------------------------------------------------------- reading the runtime

def runtime(name: str):
    return importlib.import_module(f"onemodel_cy.{name}")


def _split_top_level(text: str) -> list[str]:
    parts, depth, quote, current = [], 0, None, []
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def embedded_params(doc: str | None, name: str) -> list[tuple[str, str | None]] | None:
    """The parameters in the first line of a Cython ``__doc__``, ``[Class.]name(...)``, as
    (token, default text or None), leniently: C types, annotations and ``self`` dropped.
    None when the doc carries no signature for ``name``."""
    if not doc:
        return None
    first = doc.lstrip().splitlines()[0]
    head, paren, _ = first.partition("(")
    if not paren or head.rpartition(".")[2] != name:
        return None
    depth, end = 0, None
    for i, ch in enumerate(first[len(head):]):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            end = len(head) + i
            break
    if end is None:
        return None
    params = []
    for part in _split_top_level(first[len(head) + 1:end]):
        default = None
        eq = part.find("=")
        if eq >= 0:
            part, default = part[:eq].strip(), part[eq + 1:].strip()
        part = part.split(":")[0].strip()
        for suffix in (" not None", " or None"):
            if part.endswith(suffix):
                part = part[:-len(suffix)].strip()
        token = part.split()[-1]                      # "SampleRng rng" -> "rng"; "*", "*exc" kept
        params.append((token, default))
    if params and params[0][0] == "self":
        params = params[1:]
    return params


def runtime_signature(mod, owner: str | None, fname: str):
    """(embedded parameters or None, runtime object) of a module function or a method."""
    if owner is None:
        obj = getattr(mod, fname)
        return embedded_params(obj.__doc__, fname), obj
    cls = getattr(mod, owner)
    definer = next((k for k in cls.__mro__ if fname in k.__dict__), None)
    assert definer is not None, f"{mod.__name__}.{owner}.{fname} does not exist at runtime"
    obj = definer.__dict__[fname]
    if fname == "__init__":
        # Cython embeds the __init__ signature in the class docstring: "Class(args)".
        return embedded_params(definer.__doc__, definer.__name__), obj
    return embedded_params(obj.__doc__, fname), obj


def _literal(text_or_node):
    try:
        return True, ast.literal_eval(text_or_node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


# ---------------------------------------------------------------- the tests

def test_py_typed_marker_ships():
    """Concern: type stubs. PEP 561: without ``py.typed`` type checkers ignore the
    package's stubs entirely."""
    assert os.path.isfile(os.path.join(PACKAGE_DIR, "py.typed"))


@modules
def test_every_compiled_module_has_a_stub(name):
    """Concern: type stubs. Each extension module has a ``.pyi`` beside it that parses;
    without one, a type checker sees the module as untyped (or missing)."""
    assert os.path.isfile(stub_path(name)), f"{name}.pyi is missing"
    assert stub_of(name), f"{name}.pyi defines nothing"


@modules
def test_stub_names_exist_at_runtime(name):
    """Concern: type stubs. (a) Every public name a stub defines exists in the compiled
    module, so the stub never promises a function, class or constant that importing
    would not find."""
    mod = runtime(name)
    missing = [n for n in stub_of(name) if is_public(n) and not hasattr(mod, n)]
    missing += [n for n in stub_classes(name) if not is_public(n) and not hasattr(mod, n)]
    assert not missing, f"{name}.pyi defines names absent at runtime: {missing}"


@modules
def test_runtime_classes_and_functions_are_stubbed(name):
    """Concern: type stubs. (b) Every public class and function the compiled module
    defines (its ``__module__`` is the module) appears in the stub, so no part of the API
    is invisible to type checkers."""
    mod = runtime(name)
    stubbed = stub_of(name)
    missing = [n for n, obj in vars(mod).items()
               if is_public(n) and (isinstance(obj, type) or callable(obj))
               and getattr(obj, "__module__", None) == mod.__name__ and n not in stubbed]
    assert not missing, f"{name}.pyi lacks runtime classes/functions: {missing}"


@modules
def test_runtime_constants_are_stubbed(name):
    """Concern: type stubs. Every public module-level value (``STREAMS``,
    ``BUILT_WITH_CHECKS``, ``DEFAULT_MAX_BYTES``, ``BUILTIN_AUGMENTATIONS``...) appears
    in the stub; imported modules are not part of the API and are ignored."""
    mod = runtime(name)
    stubbed = stub_of(name)
    missing = [n for n, obj in vars(mod).items()
               if is_public(n) and not isinstance(obj, types.ModuleType)
               and not isinstance(obj, type) and not callable(obj) and n not in stubbed]
    assert not missing, f"{name}.pyi lacks runtime constants: {missing}"


@modules
def test_stub_class_members_exist_at_runtime(name):
    """Concern: type stubs. (c, stub -> runtime) Every method, property and attribute a
    stub class declares exists on the runtime class, so attribute access the stub allows
    does not fail."""
    mod = runtime(name)
    problems = []
    for cname, cls in stub_classes(name).items():
        rt = getattr(mod, cname, None)
        if rt is None:
            problems.append(f"class {cname} missing at runtime")
            continue
        for member in _defined(cls.body):
            if (is_public(member) or member in API_DUNDERS) and not hasattr(rt, member):
                problems.append(f"{cname}.{member}")
    assert not problems, f"{name}.pyi declares members absent at runtime: {problems}"


@modules
def test_runtime_class_members_are_stubbed(name):
    """Concern: type stubs. (c, runtime -> stub) Every public method, property and attribute
    a runtime class defines in its own ``__dict__`` (plus ``__init__``, ``__call__``,
    ``__len__``, ``__enter__``, ``__exit__``, ``__iter__``, ``__getitem__``) is declared on
    the same class in the stub, so a new method or ``cdef readonly``/``public`` attribute
    cannot ship unstubbed."""
    mod = runtime(name)
    stubbed = stub_classes(name)
    problems = []
    for cname, rt in vars(mod).items():
        if not (is_public(cname) or cname in stubbed) or not isinstance(rt, type):
            continue
        if rt.__module__ != mod.__name__:
            continue
        if cname not in stubbed:
            problems.append(f"class {cname}")
            continue
        declared = _defined(stubbed[cname].body)
        for member in rt.__dict__:
            if (is_public(member) or member in API_DUNDERS) and member not in declared:
                problems.append(f"{cname}.{member}")
    assert not problems, f"{name}.pyi lacks runtime members: {problems}"


@modules
def test_stub_class_bases_and_finality_match_runtime(name):
    """Concern: type stubs. Stub classes have the runtime's base classes (so
    ``isinstance`` narrowing and inherited members are right) and are ``@final`` exactly
    when the compiled type cannot be subclassed (``@cython.final``)."""
    mod = runtime(name)
    problems = []
    for cname, cls in stub_classes(name).items():
        rt = getattr(mod, cname, None)
        if rt is None:
            continue          # reported by test_stub_names_exist_at_runtime
        stub_bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in cls.bases]
        runtime_bases = [b.__name__ for b in rt.__bases__ if b is not object]
        if stub_bases != runtime_bases:
            problems.append(f"{cname}: stub bases {stub_bases}, runtime {runtime_bases}")
        stub_final = "final" in _decorators(cls)
        runtime_final = not rt.__flags__ & TPFLAGS_BASETYPE
        if stub_final != runtime_final:
            problems.append(f"{cname}: @final in stub is {stub_final}, runtime final is {runtime_final}")
    assert not problems, "; ".join(problems)


@modules
def test_parameter_names_match_embedded_signatures(name):
    """Concern: type stubs. (d) Every stubbed function and method has the parameter names,
    in order, of the runtime signature Cython embeds in ``__doc__`` (``self`` ignored),
    including the keyword-only marker ``*`` and ``*args``/``**kwargs``: a renamed or
    missing argument in the stub would make type checkers reject valid keyword calls or
    accept invalid ones. Slot wrappers without an embedded signature (``__len__``,
    ``__getitem__``...) are the only ones skipped."""
    mod = runtime(name)
    problems = []
    for label, owner, fname, defs in stub_functions(name):
        if not hasattr(mod, owner or fname):
            continue          # reported by test_stub_names_exist_at_runtime
        if owner is not None and not hasattr(getattr(mod, owner), fname):
            continue          # reported by test_stub_class_members_exist_at_runtime
        expected, obj = runtime_signature(mod, owner, fname)
        if expected is None:
            if isinstance(obj, types.WrapperDescriptorType) and fname != "__init__":
                continue
            problems.append(f"{label}: no embedded signature at runtime to check against")
            continue
        want = [token for token, _ in expected]
        for node in defs:
            got = [token for token, _ in stub_params(node, method=owner is not None)]
            if got != want:
                problems.append(f"{label} (line {node.lineno}): stub {got}, runtime {want}")
    assert not problems, f"{name}.pyi signatures differ from runtime:\n  " + "\n  ".join(problems)


@modules
def test_defaults_match_embedded_signatures(name):
    """Concern: type stubs. Stub parameters have defaults exactly where the runtime does
    (an ``@overload`` may leave some out, but every runtime default is in some overload),
    and literal defaults agree: the stub must not make an optional argument required or a
    required one optional."""
    mod = runtime(name)
    problems = []
    for label, owner, fname, defs in stub_functions(name):
        if not hasattr(mod, owner or fname) or (owner is not None
                                                and not hasattr(getattr(mod, owner), fname)):
            continue
        expected, _ = runtime_signature(mod, owner, fname)
        if expected is None:
            continue          # covered by test_parameter_names_match_embedded_signatures
        runtime_defaults = {t: d for t, d in expected if d is not None}
        overloaded = any("overload" in _decorators(node) for node in defs)
        covered = set()
        for node in defs:
            stub_defaults = {t: d for t, d in stub_params(node, method=owner is not None)
                             if d is not None}
            covered |= set(stub_defaults)
            extra = set(stub_defaults) - set(runtime_defaults)
            if extra:
                problems.append(f"{label} (line {node.lineno}): defaults in stub only: {sorted(extra)}")
            if not overloaded and set(runtime_defaults) - set(stub_defaults):
                problems.append(f"{label} (line {node.lineno}): runtime defaults missing from stub: "
                                f"{sorted(set(runtime_defaults) - set(stub_defaults))}")
            for token, node_default in stub_defaults.items():
                if token not in runtime_defaults:
                    continue
                ok_stub, stub_value = _literal(node_default)
                ok_rt, rt_value = _literal(runtime_defaults[token])
                if ok_stub and ok_rt and (stub_value != rt_value or type(stub_value) is not type(rt_value)):
                    problems.append(f"{label}: default of {token} is {stub_value!r} in stub, "
                                    f"{rt_value!r} at runtime")
        if overloaded and set(runtime_defaults) - covered:
            problems.append(f"{label}: runtime defaults in no overload: "
                            f"{sorted(set(runtime_defaults) - covered)}")
    assert not problems, f"{name}.pyi defaults differ from runtime:\n  " + "\n  ".join(problems)


def test_package_stub_names_exactly_the_public_api():
    """Concern: type stubs. ``onemodel_cy/__init__.pyi`` names every entry of ``__all__`` and
    nothing that is not exported, so a type checker sees the public API (DESIGN: the API by name,
    with ``__all__``)."""
    path = os.path.join(PACKAGE_DIR, "__init__.pyi")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=path)
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    names -= {"__version__", "__all__"}
    assert names == set(onemodel_cy.__all__), (sorted(names - set(onemodel_cy.__all__)),
                                               sorted(set(onemodel_cy.__all__) - names))
