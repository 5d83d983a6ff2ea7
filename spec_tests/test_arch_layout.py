"""Concern: the package's structure (docs/architecture.md); §1 the step window every engine shares.

* The import graph of the package's own modules has no cycle, lazy imports included
  (``import_graph.py``, which also runs as a command).
* ``import onemodel_cy`` loads neither the conformance checker nor its replay.
* The three worker engines answer one protocol (``workers/protocol.py``): every member,
  on a live engine of each kind; ``take(g)`` leaves the step the window claimed for the
  consumer to it (None); ``registry.acquire_engine`` keeps an engine that fits and ends
  and replaces one that does not; ``signal_close`` never waits, even for a worker stuck
  in user code, and closing then waits ``join_timeout``, on threads and processes alike.
* The window (``workers/window.pyx``): steps are handed out in order, never past the
  consumer's step plus ``prefetch``, the limit, or a failed step; moves behave as §1 says.
* The file table of ``docs/architecture.md`` lists exactly the package's modules.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

import onemodel_cy as om
import import_graph
from harness import _guard  # noqa: F401  (autouse: no worker may outlive a test)
from harness import assert_no_workers, assert_stream_is_batch_at, drain_ok
from onemodel_cy.workers.lane import LaneEngine
from onemodel_cy.workers.processes import ProcessEngine
from onemodel_cy.workers.protocol import Engine
from onemodel_cy.workers.registry import acquire_engine, release_engine
from onemodel_cy.workers.threads import ThreadEngine
from onemodel_cy.workers.window import StepWindow
from pipeline_parts import PyDataset, StuckDataset


def test_the_import_graph_has_no_cycle():
    edges = import_graph.graph(import_graph_root())
    assert "onemodel_cy.workers.registry" in edges and edges["onemodel_cy.stream"], "the graph read nothing"
    assert import_graph.cycles(edges) == []


def test_the_import_graph_finds_a_cycle_hidden_in_a_function(tmp_path):
    """The checker itself: a lazy import that closes a loop is a cycle."""
    package = tmp_path / "onemodel_cy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from onemodel_cy.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from onemodel_cy import a\n    return a\n")
    assert import_graph.cycles(import_graph.graph(str(tmp_path))) == [["onemodel_cy.a", "onemodel_cy.b"]]


def import_graph_root():
    import os
    return os.path.dirname(os.path.dirname(os.path.abspath(om.__file__)))


def test_importing_the_package_leaves_the_checker_out():
    code = ("import sys, onemodel_cy; print(sorted(m for m in sys.modules if m.startswith("
            "('onemodel_cy.conformance.checker', 'onemodel_cy.conformance.replay'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded


MEMBERS = [name for name in dir(Engine) if not name.startswith("_")] + list(Engine.__annotations__)


@pytest.mark.parametrize("kind", ["thread", "lane", "process"])
def test_every_engine_answers_the_protocol(kind):
    ds = om.SyntheticLineImages(24, 3, 1, 9, seed=4)
    dataset = PyDataset(ds) if kind == "thread" else ds
    loader = om.DataLoader(dataset, om.ShuffledSampler(24, 4, 2), om.ImageBatchCollator(), seed=5, workers=2,
                           worker_mode="process" if kind == "process" else "thread")
    expected = {"thread": ThreadEngine, "lane": LaneEngine, "process": ProcessEngine}[kind]
    with loader.iter(0, 3) as stream:
        list(stream)
    engine = loader._idle_engine
    assert type(engine) is expected
    assert isinstance(engine, Engine)
    missing = [name for name in MEMBERS if not hasattr(engine, name)]
    assert not missing, f"{expected.__name__} lacks {missing}"
    assert engine.fits(loader, 2) and not engine.fits(loader, 3)
    assert isinstance(engine.window, StepWindow) and engine.pipeline is loader._pipeline
    loader.close()
    assert_no_workers()


def _loader_of(kind, dataset=None, **kw):
    ds = om.SyntheticLineImages(24, 3, 1, 9, seed=4) if dataset is None else dataset
    if kind == "thread" and dataset is None:
        ds = PyDataset(ds)
    return om.DataLoader(ds, om.SequentialSampler(len(ds), 2), om.ImageBatchCollator(), seed=5, workers=2,
                         worker_mode="process" if kind == "process" else "thread", **kw)


@pytest.mark.parametrize("kind", ["thread", "lane", "process"])
def test_take_leaves_the_consumer_its_step_and_acquire_fits_or_replaces(kind):
    """The step a new (or moved) engine's window claims for the consumer is the window's
    alone to know: ``take`` answers None for it, the consumer builds it and ``skip``s it,
    and the workers' steps follow. ``acquire_engine`` keeps the stream's own engine, or
    the loader's parked one, when it fits (repositioned), ends and replaces one that no
    longer fits, and ends them all for 0 workers."""
    loader = _loader_of(kind)
    engine = acquire_engine(loader, 2, 5, 9)
    try:
        assert engine.window.local == 5 and engine.take(5, None) is None
        first = loader.batch_at(5)
        engine.skip(5)
        assert engine.window.local is None
        assert_stream_is_batch_at([first] + [engine.take(g, None) for g in range(6, 9)], loader, range(5, 9),
                                  f"{kind}: the consumer's step, then the workers'")
        assert acquire_engine(loader, 2, 0, None, engine) is engine, "a held engine that fits is kept"
        assert engine.window.local == 0 and engine.take(0, None) is None, "moved: the consumer builds 0"
        release_engine(loader, engine, 0, False)
        assert loader._idle_engine is engine
        assert acquire_engine(loader, 2, 3, None) is engine and loader._idle_engine is None
        loader.prefetch = 3                     # the kept engine no longer fits
        replaced = acquire_engine(loader, 2, 3, None, engine)
        assert replaced is not engine and engine.closed and type(replaced) is type(engine)
        assert replaced.window.local == 3 and replaced.prefetch == 3
        assert acquire_engine(loader, 0, 3, None, replaced) is None and replaced.closed
        engine = replaced
    finally:
        engine.shutdown()
        loader.close()
    assert_no_workers()


def _wait_until(condition, what, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_signal_close_never_waits_for_a_stuck_process_and_close_honours_join_timeout():
    """Protocol: ``signal_close`` marks the engine closed and wakes, and waits for nothing
    (the worker building step 3 sleeps for 60 s in ``get_sample``); the close that follows
    waits ``join_timeout`` (0.3 s, not the 2 s processes get at most), names the stuck
    worker in a ``StuckWorkerWarning`` and terminates it."""
    sampler = om.SequentialSampler(40, 2)
    dataset = StuckDataset(PyDataset(om.SyntheticLineImages(40, 3, 1, 9, seed=4)), int(sampler.indices(0, 3)[0]), 60)
    loader = om.DataLoader(dataset, sampler, om.ImageBatchCollator(), seed=5, workers=2, worker_mode="process",
                           join_timeout=0.3)
    stream = loader.iter()
    drain_ok(stream, 3)
    engine = stream._engine

    def claimed():
        task = engine.dispatched.get(3)
        return task is not None and engine.board.claimant(engine.tasks[task][2]) >= 0
    _wait_until(claimed, "no worker took step 3")
    t0 = time.monotonic()
    engine.signal_close()
    took = time.monotonic() - t0
    assert took < 0.5, f"signal_close took {took:.2f} s"
    assert engine.closed and any(w.process.is_alive() for w in engine.pool), "signal_close ended the workers"
    t0 = time.monotonic()
    with pytest.warns(om.StuckWorkerWarning, match=r"0\.3 s after close\(\).*join_timeout"):
        with pytest.raises(StopIteration):
            next(stream)            # the consumer sees the close; the stream's end shuts the engine down
    closed = time.monotonic() - t0
    assert closed < 1.5, f"close took {closed:.2f} s with join_timeout=0.3"
    loader.close()
    assert_no_workers("after the stuck worker was terminated")


class _Blocking(PyDataset):
    """(Threads.) The read of ``index`` waits until ``release`` is set."""

    def __init__(self, inner, index):
        super().__init__(inner)
        self.index, self.entered, self.release = index, threading.Event(), threading.Event()

    def get_sample(self, index):
        if index == self.index:
            self.entered.set()
            self.release.wait(30)
        return self.inner.get_sample(index)


def test_signal_close_never_waits_for_a_stuck_thread_and_close_honours_join_timeout():
    """The same on worker threads: ``signal_close`` returns at once while a worker sits in
    ``get_sample``; the close waits ``join_timeout`` and warns, leaving the thread to end."""
    sampler = om.SequentialSampler(40, 2)
    dataset = _Blocking(om.SyntheticLineImages(40, 3, 1, 9, seed=4), int(sampler.indices(0, 3)[0]))
    loader = om.DataLoader(dataset, sampler, om.ImageBatchCollator(), seed=5, workers=2, join_timeout=0.3,
                           worker_mode="thread")
    stream = loader.iter()
    engine = stream._engine
    try:
        drain_ok(stream, 3)
        assert dataset.entered.wait(10), "no worker reached the blocking read"
        t0 = time.monotonic()
        engine.signal_close()
        took = time.monotonic() - t0
        assert took < 0.5 and engine.closed, f"signal_close took {took:.2f} s"
        t0 = time.monotonic()
        with pytest.warns(om.StuckWorkerWarning, match=r"0\.3 s after close\(\).*join_timeout"):
            with pytest.raises(StopIteration):
                next(stream)
        closed = time.monotonic() - t0
        assert closed < 2, f"close took {closed:.2f} s with join_timeout=0.3"
    finally:
        dataset.release.set()
    # A thread the engine had not started when it closed never starts (threads.py starts
    # them from a helper, so that a stream does not wait for them): only started ones join.
    for thread in engine.threads:
        if thread.ident is not None:
            thread.join(10)
    loader.close()
    assert_no_workers("after the blocking read returned")


# ---------------------------------------------------------------- the window

operations = st.lists(st.one_of(
    st.tuples(st.just("hand_out"), st.integers(0, 3)),
    st.tuples(st.just("take"), st.integers(0, 3)),
    st.tuples(st.just("fail"), st.integers(0, 6)),
    st.tuples(st.just("skip"), st.just(0)),
    st.tuples(st.just("reposition"), st.integers(0, 40), st.one_of(st.none(), st.integers(0, 50))),
    st.tuples(st.just("park"), st.booleans()),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(prefetch=st.integers(1, 5), start=st.integers(0, 20), limit=st.one_of(st.none(), st.integers(0, 40)),
       ops=operations)
def test_the_window_hands_out_steps_in_order_and_inside_its_bounds(prefetch, start, limit, ops):
    """§1: an engine builds only steps in [next_take, next_take + prefetch), before the limit,
    and none past a failed step; one move of the window later, it hands out from its new
    position on, in order, skipping only the step claimed for the consumer."""
    window = StepWindow(prefetch, start, limit, True)
    assert (window.local, window.next_out, window.next_take) == (start, start + 1, start)
    handed = []         # handed out since the last move, in order, with the local step first
    drops = []
    expect_next = start + 1

    def drop(at):
        drops.append(at)
        window.moved(at)

    for op in ops:
        if op[0] == "hand_out":
            for _ in range(op[1]):
                if not window.has_room():
                    break
                g = window.hand_out()
                assert g == expect_next, f"handed out {g}, expected {expect_next}"
                assert window.next_take <= g < window.next_take + prefetch
                assert window.limit is None or g < window.limit
                assert window.failed_at is None or g <= window.failed_at
                expect_next = g + 1
                handed.append(g)
        elif op[0] == "take":
            for _ in range(op[1]):
                g = window.next_take
                if g >= window.next_out or g == window.local:
                    break           # not built yet, or the consumer's own (skip)
                window.took(g)
        elif op[0] == "fail":
            if window.next_out > window.next_take:
                g = window.next_take + op[1] % (window.next_out - window.next_take)
                window.failed(g)
                assert window.failed_at <= g
                assert window.end() <= window.failed_at + 1
        elif op[0] == "skip":
            local = window.local
            assert window.skip(-5) is False
            if local is not None:
                assert window.skip(local) and window.next_take == local + 1 and window.local is None
        elif op[0] == "reposition":
            _, at, new_limit = op
            before = (window.next_take, window.next_out, window.failed_at)
            drops.clear()
            local = window.reposition(at, new_limit, drop)
            assert drops == ([] if at == before[0] else [at])
            assert window.limit == new_limit
            if local:
                assert window.local == at and window.next_out == at + 1
            else:
                assert drops == [] and (window.next_out != at or window.failed_at is not None)
            expect_next = window.next_out
        else:
            keep = op[1]
            at = window.next_take
            local_before, out_before, failed_before = window.local, window.next_out, window.failed_at
            drops.clear()
            window.park(at, keep, drop)
            assert drops == ([at] if local_before is not None else [])
            if keep:
                assert window.limit is None
            elif (failed_before if not drops else None) is None:
                assert window.limit == (at if drops else out_before)
            expect_next = window.next_out
        assert window.next_take <= window.next_out or window.local == window.next_take - 1


def test_a_window_refuses_what_no_stream_has():
    with pytest.raises(ValueError, match="prefetch"):
        StepWindow(0, 0, None, True)
    with pytest.raises(ValueError, match="start"):
        StepWindow(2, -1, None, False)
    window = StepWindow(2, 5, 7, False)
    assert [window.hand_out() for _ in range(2)] == [5, 6] and not window.has_room() and window.exhausted()
    window.failed(6)
    assert not window.exhausted(), "a failed stream's workers wait for its close"


# ---------------------------------------------------------------- the file table

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(CHECKOUT, "onemodel_cy")
MODULE_SUFFIXES = (".py", ".pyx", ".pxd", ".h")     # a .pyi is the stub beside its module


def table_names(text):
    """The paths (relative to ``onemodel_cy/``) that the file column of the table under
    "The tree" names: ``a/b.pxd/.pyx`` is two files, a folder (``a/``) its ``__init__.py``
    when it is a package, a shell pattern (``*.pyi``) left as it is."""
    section = text[text.index("## The tree"):]
    section = section[:section.index("\n## ", 1)]
    names = set()
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or cells[1].strip() in ("file", "---"):
            continue
        for span in re.findall(r"`([^`]+)`", cells[1]):
            several = re.fullmatch(r"(.+?)((?:\.\w+)(?:/\.\w+)+)", span)
            if several:
                names.update(several.group(1) + suffix for suffix in several.group(2).split("/"))
            else:
                names.add(span)
    return names


def tree_modules():
    """Every module file under ``onemodel_cy/``: .py, .pyx, .pxd and the C headers."""
    found = set()
    for folder, _, files in os.walk(PACKAGE_DIR):
        found.update(os.path.relpath(os.path.join(folder, name), PACKAGE_DIR).replace(os.sep, "/")
                     for name in files if name.endswith(MODULE_SUFFIXES))
    return found


def test_the_architecture_table_lists_exactly_the_modules_of_the_tree():
    """Concern: the layout (docs/architecture.md, "The tree"). Every module of the package
    is named in the table, and every file or folder the table names exists, so the table
    cannot drift from the tree (a subpackage's row, ``**`core/`**``, stands for its
    ``__init__.py``)."""
    with open(os.path.join(CHECKOUT, "docs", "architecture.md"), encoding="utf-8") as fh:
        named = table_names(fh.read())
    assert len(named) > 40, f"the table was not read: {sorted(named)}"
    covered = set()
    missing = []
    for name in sorted(named):
        path = os.path.join(PACKAGE_DIR, *name.rstrip("/").split("/"))
        if any(ch in name for ch in "*?["):
            continue
        if name.endswith("/"):
            if not os.path.isdir(path):
                missing.append(name)
            elif os.path.isfile(os.path.join(path, "__init__.py")):
                covered.add(name + "__init__.py")
        elif os.path.isfile(path):
            covered.add(name)
        else:
            missing.append(name)
    assert not missing, f"docs/architecture.md names files that are not in onemodel_cy/: {missing}"
    unlisted = sorted(tree_modules() - covered)
    assert not unlisted, f"modules of onemodel_cy/ that docs/architecture.md's table does not name: {unlisted}"
