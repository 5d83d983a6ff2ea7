"""Fork scenarios for ``test_safety_fork.py``, each run in a fresh interpreter (a hang is then
the test's timeout, not a hung suite): ``python fork_scenarios.py SCENARIO KIND [METHOD]``.

KIND is the engine the parent's stream runs on: ``thread`` (thread workers, a Python
dataset), ``lane`` (the packed lane) or ``process`` (worker processes). Every batch either
process receives is compared, byte for byte, with ``loader.batch_at(g)`` built there.
Prints ``OK <what was checked>`` on success; any failure raises (exit code 1).

Scenarios:

* ``child`` METHOD (``fork`` or ``forkserver``): a multiprocessing child of that start
  method is handed the loader while the parent's stream is mid-way (workers live, steps
  built ahead); the child streams steps of its own (with ``fork`` it also goes on with the
  inherited stream), the parent goes on meanwhile and after the child has exited.
* ``os_fork_idle``: ``os.fork()``, the child touches nothing and exits through
  ``sys.exit`` (atexit runs); the parent's stream goes on.
* ``os_fork_uses``: ``os.fork()``, the child goes on with the inherited stream, starts a
  new one, closes the loader and exits through ``sys.exit``; the parent goes on.
* ``forsaken`` (KIND ``all``): after ``os.fork()`` every engine of the parent (one of each
  kind) is forsaken in the child: closed, fitting no loader, its shutdown returning at
  once; in the parent none is, and its streams go on.
* ``ended_engine`` (KIND ``all``): a process-mode stream that failed, its error kept (so
  its ended engine lives on), the user's files opened on the descriptor numbers it freed,
  lane engines parked after it; after ``os.fork()`` the child's files are all open and
  every engine is forsaken (before, the child closed the parent's freed numbers again,
  the user's files, and an EBADF stopped the hook before the lane engines).
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import onemodel_cy as om  # noqa: E402
from pipeline_parts import PyDataset  # noqa: E402

FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")
WAIT = 60.0     # seconds for a child; the test's own timeout is longer


def make_loader(kind):
    dataset = om.SyntheticLineImages(64, height=4, min_width=3, max_width=20, seed=3)
    if kind == "thread":
        dataset = PyDataset(dataset)        # no packed view: thread workers, not the lane
    sampler = om.ShuffledSampler(len(dataset), batch_size=4, seed=3)
    return om.DataLoader(dataset, sampler, om.ImageBatchCollator(width_multiple=4), seed=11, workers=2,
                         prefetch=4, timeout=30, worker_mode="process" if kind == "process" else "thread")


def check(batch, loader, g, who):
    """``batch`` is step ``g``, byte for byte as ``batch_at(g)`` builds it in this process."""
    if batch.global_step != g:
        raise AssertionError(f"{who}: expected global step {g}, received {batch.global_step}")
    expected = loader.batch_at(g)
    for field in FIELDS:
        a, b = getattr(batch, field), getattr(expected, field)
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            raise AssertionError(f"{who}: global step {g}: {field} differs from batch_at({g})")


def take(stream, loader, steps, who):
    for g in steps:
        with next(stream) as batch:
            check(batch, loader, g, who)


def engine_kind(stream):
    return type(stream._engine).__name__


def child_main(loader, inherited, report):
    """A multiprocessing child: the inherited stream (fork only), then a stream of its own."""
    try:
        if inherited is not None:
            take(inherited, loader, range(5, 9), "child, inherited stream")
            inherited.close()
        with loader.iter(20, 30) as stream:
            take(stream, loader, range(20, 30), "child, its own stream")
        loader.close()
        report.put("ok")
    except BaseException as exc:
        report.put(f"{type(exc).__name__}: {exc}")
        raise


def scenario_child(kind, method):
    loader = make_loader(kind)
    stream = loader.iter(0)
    take(stream, loader, range(5), "parent before the child")
    expected_engine = {"thread": "ThreadEngine", "lane": "LaneEngine", "process": "ProcessEngine"}[kind]
    if engine_kind(stream) != expected_engine:
        raise AssertionError(f"the parent's stream runs on {engine_kind(stream)}, expected {expected_engine}")
    ctx = multiprocessing.get_context(method)
    report = ctx.Queue()
    child = ctx.Process(target=child_main, args=(loader, stream if method == "fork" else None, report))
    child.start()
    take(stream, loader, range(5, 12), "parent while the child runs")
    answer = report.get(timeout=WAIT)
    child.join(WAIT)
    if answer != "ok" or child.exitcode != 0:
        raise AssertionError(f"the child reported {answer!r} and exited with {child.exitcode}")
    take(stream, loader, range(12, 20), "parent after the child exited")
    stream.close()
    with loader.iter(40, 44) as again:
        take(again, loader, range(40, 44), "parent, a new stream")
    loader.close()
    print(f"OK {kind} {method}: parent 0-19 and 40-43, child 20-29"
          f"{' and its inherited stream 5-8' if method == 'fork' else ''}")


def wait_for(pid):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    raise AssertionError(f"the forked child {pid} did not exit within {WAIT} s (hung)")


def scenario_os_fork(kind, uses):
    loader = make_loader(kind)
    stream = loader.iter(0)
    take(stream, loader, range(5), "parent before fork")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if uses:
                take(stream, loader, range(5, 9), "child, inherited stream")
                with loader.iter(30, 36) as own:
                    take(own, loader, range(30, 36), "child, its own stream")
                loader.close()
        except BaseException as exc:
            print(f"child: {type(exc).__name__}: {exc}", flush=True)
            code = 1
        sys.exit(code)      # through atexit, as a script that ends
    code = wait_for(pid)
    if code != 0:
        raise AssertionError(f"the forked child exited with {code}")
    take(stream, loader, range(5, 16), "parent after the child exited")
    stream.close()
    loader.close()
    print(f"OK {kind} os.fork ({'the child streams' if uses else 'the child touches nothing'}): parent 0-15")


def scenario_forsaken():
    loaders = [make_loader(kind) for kind in ("thread", "lane", "process")]
    streams = [loader.iter(0) for loader in loaders]
    for stream, loader in zip(streams, loaders):
        take(stream, loader, range(2), "parent before fork")
    engines = [stream._engine for stream in streams]
    pid = os.fork()
    if pid == 0:
        ok = all(e.forsaken and e.closed and not e.fits(loader, 2) and not loader.pacing.held
                 for e, loader in zip(engines, loaders))
        for engine in engines:
            engine.shutdown()       # returns at once: no join, no word to the parent's workers
        os._exit(0 if ok else 3)
    code = wait_for(pid)
    if code != 0:
        raise AssertionError(f"in the child, an engine was not forsaken (exit code {code})")
    if any(e.forsaken for e in engines):
        raise AssertionError("an engine of the parent is forsaken")
    for stream, loader in zip(streams, loaders):
        take(stream, loader, range(2, 6), "parent after the fork")
        stream.close()
        loader.close()
    print(f"OK forsaken: {', '.join(type(e).__name__ for e in engines)} in the child, none in the parent")


def scenario_ended_engine():
    from onemodel_cy.workers import registry
    from pipeline_parts import FailingDataset
    failing = om.DataLoader(FailingDataset(om.SyntheticLineImages(64, height=4, min_width=3, max_width=20, seed=3),
                                           bad_index=7),
                            om.SequentialSampler(64, 4), om.ImageBatchCollator(width_multiple=4), seed=11,
                            workers=2, prefetch=4, timeout=30, worker_mode="process")
    try:
        for batch in failing.iter(0, 5):
            batch.close()
        raise AssertionError("the failing dataset did not fail")
    except Exception as error:      # kept, as a logger or a retry loop keeps it
        kept = error
    files = [open(os.devnull) for _ in range(6)]
    lanes = [make_loader("lane") for _ in range(3)]
    for lane in lanes:
        with lane.iter(0, 3) as stream:         # closed: its engine parks in the loader
            take(stream, lane, range(3), "a lane stream")
    engines = list(registry._live_engines)
    kinds = sorted(type(e).__name__ for e in engines)
    if kinds.count("LaneEngine") != 3 or "ProcessEngine" not in kinds:
        raise AssertionError(f"live engines before the fork: {kinds}")
    pid = os.fork()
    if pid == 0:
        closed = []
        for f in files:
            try:
                os.fstat(f.fileno())
            except OSError:
                closed.append(f.fileno())
        unforsaken = [type(e).__name__ for e in engines if not e.forsaken]
        if closed or unforsaken:
            print(f"child: files closed behind its back {closed}, engines not forsaken {unforsaken}", flush=True)
            os._exit(3)
        with lanes[0].iter(10, 14) as stream:   # workers of the child's own
            take(stream, lanes[0], range(10, 14), "child, a parked lane's loader")
        os._exit(0)
    code = wait_for(pid)
    if code != 0:
        raise AssertionError(f"the child exited with {code}")
    for lane in lanes:
        lane.close()
    failing.close()
    del kept
    print(f"OK ended engine: {len(files)} files open in the child, {len(engines)} engines forsaken")


if __name__ == "__main__":
    scenario, kind = sys.argv[1], sys.argv[2]
    np.seterr(all="raise")
    if scenario == "child":
        scenario_child(kind, sys.argv[3])
    elif scenario == "os_fork_idle":
        scenario_os_fork(kind, uses=False)
    elif scenario == "os_fork_uses":
        scenario_os_fork(kind, uses=True)
    elif scenario == "forsaken":
        scenario_forsaken()
    elif scenario == "ended_engine":
        scenario_ended_engine()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
