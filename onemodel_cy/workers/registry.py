"""§1 which engine a stream gets, the engine a loader keeps between streams, and their ends.

Engines belong to the loader, not to one stream (``persistent_workers=True``, the
default). A stream that closes hands its engine back (``release_engine``): it is parked
in ``loader._idle_engine`` with whatever it built for the stream's next steps; the next
stream adopts it (``acquire_engine``), repositioned when it starts elsewhere. Whether a
kept engine fits the new stream (the same pipeline, kind, worker count and prefetch,
every worker alive), or is ended and replaced, is decided here, in ``acquire_engine``,
for the stream's own engine and the loader's parked one alike. A stream that ends in an
error ends its engine. ``loader.close()`` (``close_engines``), collecting
the loader, and interpreter exit end them all.

Fork: an engine belongs to the process that made it. In a child made by ``os.fork`` (or
multiprocessing's "fork" start method) every live engine is forsaken at once
(``os.register_at_fork``): it is closed without a word to the parent's workers, and the
child's exit, its garbage collection or its ``loader.close()`` touch nothing of the
parent's. A stream or loader used in the child starts workers of the child's own
(``BatchStream._after_fork``); batches are the same by §1.
"""
from __future__ import annotations

import atexit
import os
import threading
import weakref

from onemodel_cy.workers.threads import ThreadEngine

__all__ = ["engine_class", "acquire_engine", "release_engine", "discard_idle_engine", "close_engines"]

_live_engines: "weakref.WeakSet" = weakref.WeakSet()
_handover = threading.Lock()     # guards every loader's ``_idle_engine``


@atexit.register
def _close_all_engines():
    """At interpreter exit, close every engine without waiting for any worker
    (``signal_close``): a thread stuck in user code must not hold up the exit (worker
    threads are daemons), and worker processes, also daemons, are ended by
    multiprocessing's own exit handler."""
    for engine in list(_live_engines):
        engine.signal_close()


def _forsake_in_child():
    """(After fork, in the child.) Every engine so far is the parent's; the hand-over lock,
    and a loader's Python-stage baton, may have been held by one of the parent's threads,
    which do not exist here."""
    global _live_engines, _handover
    engines, _live_engines = list(_live_engines), weakref.WeakSet()
    _handover = threading.Lock()
    for engine in engines:      # each of them, whatever another's forsake raised
        try:
            engine.forsake()
        except Exception as error:      # (an at-fork hook's exception is only printed)
            _report_after_fork(engine, error)
    for engine in engines:
        loader = engine.owner()
        if loader is not None:
            loader.pacing.forsake_holder()


def _report_after_fork(engine, error):
    """Say on stderr that forsaking ``engine`` in a forked child failed (it is marked
    forsaken all the same: each engine sets that first)."""
    import sys
    print(f"onemodel_cy: after fork, forsaking {type(engine).__name__} raised {type(error).__name__}: {error}",
          file=sys.stderr)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forsake_in_child)


def engine_class(loader):
    """Process workers when asked for; else the packed lane when every build of the
    pipeline can take its GIL-free split; else thread workers. The other two engines are
    imported when first chosen: a 0-worker or thread-only program never loads the process
    engine (multiprocessing, sockets, shared memory), which a platform may lack."""
    if loader.worker_mode == "process":
        from onemodel_cy.workers.processes import ProcessEngine
        return ProcessEngine
    if loader._pipeline.splits():
        from onemodel_cy.workers.lane import LaneEngine
        return LaneEngine
    return ThreadEngine


def acquire_engine(loader, workers, start, limit, held=None):
    """The engine for a stream of steps [start, limit) with ``workers`` workers (None for
    0: the consumer builds every step): ``held`` (the stream's own engine, when it
    restarts) if it fits, else the loader's parked engine if it fits, else a new one.
    Whether the consumer builds ``start`` itself is the engine's window's to know
    (``take`` answers None for it): so for a new engine, whose workers are still
    starting, and for a kept one with nothing built there."""
    engine = _fitted(held, loader, workers, start, limit)
    if engine is None:
        with _handover:
            idle, loader._idle_engine = loader._idle_engine, None
        engine = _fitted(idle, loader, workers, start, limit)
    if engine is None and workers:
        engine = engine_class(loader)(loader, workers, start, limit)
        _live_engines.add(engine)
    return engine


def _fitted(engine, loader, workers, start, limit):
    """``engine`` repositioned at ``start`` when it fits ``loader``'s stream of ``workers``
    workers (the same pipeline, kind, worker count and prefetch, every worker alive); else
    it is ended, and the answer is None."""
    if engine is None:
        return None
    if workers and engine.fits(loader, workers):
        engine.reposition(start, limit)
        return engine
    engine.shutdown()
    return None


def release_engine(loader, engine, next_g, completed_pass):
    """Park ``engine`` in the loader for the next stream, or end it: when it is not
    persistent, when the loader already keeps one, or when it no longer fits the
    loader's settings."""
    with _handover:
        if engine.persistent and loader._idle_engine is None and engine.fits(loader, engine.workers):
            try:
                engine.park(next_g, keep_prefetching=completed_pass)
            except BaseException:       # (Ctrl-C while parking) an engine nobody holds must end
                engine.shutdown()
                raise
            loader._idle_engine = engine
            return
    engine.shutdown()


def discard_idle_engine(loader):
    """End the engine ``loader`` keeps parked, if any."""
    with _handover:
        idle, loader._idle_engine = loader._idle_engine, None
    if idle is not None:
        idle.shutdown()


def close_engines(loader):
    """End every engine of ``loader``: the idle one and those of its open streams."""
    discard_idle_engine(loader)
    for engine in list(_live_engines):
        if engine.owner() is loader:
            engine.shutdown()
