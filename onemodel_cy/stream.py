"""§1 streams: ``BatchStream``, the iterator a training loop consumes.

A stream walks global steps ``[start_g, stop_g)`` in order. It builds a step itself with
the loader's pipeline (0 workers, or the first step while workers start) or takes it from
a worker engine (``onemodel_cy.workers``: threads, the packed lane or processes), which it
acquires from the loader when it starts and gives back (parked) or ends when it closes.
``workers/registry.py`` tells an engine's lifetime, ``workers/window.pyx`` its window.

Over a dataset that reads ahead (``Pipeline.reads_ahead``: a pack fetched sample by sample,
``data/packs/exact.py``) the stream also asks, through the pipeline, for the samples of the
steps after the one it hands out (``READ_AHEAD`` beyond the engine's prefetch), so that
they are on their way before any worker needs them.
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from onemodel_cy.collate.profile import ConsumerTimer
from onemodel_cy.core.validate import G_END, check_global_step
from onemodel_cy.data.waits import WaitBound, bounded
from onemodel_cy.workers.registry import acquire_engine, release_engine

if TYPE_CHECKING:
    from onemodel_cy.collate.batch import ImageBatch

__all__ = ["BatchStream"]

READ_AHEAD = 16         # steps past the engine's window whose samples a remote pack fetches ahead


class BatchStream:
    """Batches of global steps ``[start_g, stop_g)`` in order; an iterator and a context manager.

    ``next_g`` is the global step the next ``next()`` returns. ``state_dict()`` is the
    checkpoint; resume it with ``load_state_dict`` or ``loader.iter(state=...)``, which
    check the pipeline (``loader.iter(start_g=next_g)`` starts at the step unchecked).
    ``len(stream)`` is the number of batches still to come when the stream has a
    ``stop_g`` (so progress bars show a total); an endless stream has no length.
    ``close()`` (also on leaving ``with``, or when the stream is dropped) gives its worker
    threads back to the loader, parked for the next stream, which starts at once on them
    (``persistent_workers=True``, the default); with ``persistent_workers=False``, or after
    an error, it ends and joins them. The loader's threads end with ``loader.close()``, on
    leaving ``with loader:``, or when the loader is collected.
    """

    def __init__(self, loader, start_g: int = 0, stop_g: "int | None" = None, *,
                 _epoch_pass: bool = False) -> None:
        self.loader = loader
        start = check_global_step(start_g, "start_g", end_ok=True)
        stop = None if stop_g is None else check_global_step(stop_g, "stop_g", end_ok=True)
        if stop is not None and stop < start:
            raise ValueError(f"stop_g must be >= start_g = {start}, received {stop}")
        self.stop_g = stop
        self._epoch_pass = _epoch_pass    # a pass of `for batch in loader`: prefetch on past its end
        self._engine = None
        self._workspace = None
        self._timer = ConsumerTimer(loader._clock)
        self._guard = threading.Lock()    # orders the consumer's taking against a close from elsewhere
        self._taking = False              # the consumer is in engine.take() or building what it left
        self._busy = False                # a thread is inside __next__ (a stream has one consumer)
        self._pid = os.getpid()           # the process whose engine this is (fork: see _after_fork)
        self._reads_ahead = loader._pipeline.reads_ahead()
        self._restart(start)

    def _restart(self, start):
        self._closed = False
        self.next_g = start
        self._ahead_g = start             # the first step whose samples were not yet asked for ahead
        if self._workspace is None:
            self._workspace = self.loader._pipeline.workspace(self.loader.pacing, self.loader._clock)
        # A pass of `for batch in loader` prefetches past its end: the next pass adopts those.
        limit = None if self._epoch_pass and self.loader.persistent_workers else self.stop_g
        # The registry keeps this stream's engine when it fits, else the loader's parked one,
        # else starts one (None with 0 workers); the engine's window knows whether the
        # consumer builds ``start`` itself (a new engine's first step, while its workers start).
        held, self._engine = self._engine, None
        with bounded(self._bound(start)):      # a packed lane prepares its first steps here
            self._engine = acquire_engine(self.loader, self.loader._stream_workers(), start, limit, held)

    def _bound(self, g):
        """The bound on the consumer's own waits for remote samples while it brings step ``g``
        (``data/waits.py``): the loader's ``timeout``, as its waits for a worker; None
        without one."""
        timeout = self.loader.timeout
        return None if timeout is None else WaitBound(timeout, g)

    def __iter__(self) -> "BatchStream":
        return self

    def __len__(self) -> int:
        """Batches still to come: ``stop_g - next_g`` (0 once closed)."""
        if self.stop_g is None:
            raise TypeError("an endless stream (stop_g=None) has no len(); give loader.iter() a stop_g")
        return 0 if self._closed else self.stop_g - self.next_g

    def __bool__(self) -> bool:
        return True     # a stream is an object, not a container: `if stream:` must not call len()

    def __next__(self) -> "ImageBatch":
        if self._pid != os.getpid():
            self._after_fork()
            if not self._closed:
                self._restart(self.next_g)
        # One consumer: the step is read, built or taken, and counted only by the thread
        # that holds _busy; a second thread is refused before it reads anything, and the
        # first one's stream goes on.
        with self._guard:
            if self._busy:
                raise RuntimeError(f"BatchStream.__next__ was called from two threads at once (at global "
                                   f"step {self.next_g}); a stream has one consumer: give each thread its own "
                                   f"stream (loader.iter)")
            self._busy = True
        try:
            return self._next_batch()
        finally:
            self._busy = False

    def _next_batch(self):
        """(The thread holding ``_busy``.) Build or take step ``next_g``, then count it."""
        g = self.next_g
        if self._closed or g >= (G_END if self.stop_g is None else self.stop_g):
            self.close()
            raise StopIteration
        if self._reads_ahead:
            self._read_ahead(g)
        try:
            with self._guard:       # against a close() from another thread (see _end)
                if self._closed:
                    raise StopIteration
                engine = self._engine
                self._taking = engine is not None
            timer = self._timer            # where the time went (loader.profile())
            timer.begin()
            try:
                if self.loader.timeout is None:         # no bound: no context on the per-batch path
                    batch = self._take_or_build(g, engine, timer)
                else:
                    # The loader's timeout bounds the consumer's own waits for a remote pack's
                    # samples too (building this step, the lane preparing the next ones).
                    with bounded(self._bound(g)):
                        batch = self._take_or_build(g, engine, timer)
            finally:
                self._taking = False
        except BaseException:
            self._end(failed=True)
            raise
        self.next_g = g + 1
        return batch

    def _take_or_build(self, g, engine, timer):
        # None: 0 workers, or a step the engine's window left to the consumer.
        batch = None if engine is None else engine.take(g, self.loader.timeout)
        if batch is None:
            batch = self.loader._pipeline.build(g, self._workspace)
            timer.built()
            if engine is not None:
                engine.skip(g)
        else:
            timer.waited()
        return batch

    def _read_ahead(self, g):
        """Ask the dataset, through the pipeline, for the samples of steps up to ``READ_AHEAD``
        past the engine's window, each step once. A step whose indices cannot be computed (a sampler
        that raises) ends the read-ahead: its build reports the error at its step."""
        end = g + self.loader.prefetch + READ_AHEAD
        if self.stop_g is not None:
            end = min(end, self.stop_g)
        h = max(self._ahead_g, g)
        try:
            while h < end:
                self.loader._pipeline.read_ahead(h)
                h += 1
        except Exception:
            h = G_END
        self._ahead_g = h

    def _after_fork(self):
        """In a child made by ``fork``, from a parent whose stream this was: its engine
        belongs to the parent (``registry.py`` made it inert in the child, and a lock of
        this stream may have been held by a parent's thread that does not exist here). The
        stream goes on from ``next_g`` with an engine of this process's own, as a stream
        of this loader started here would (``__next__`` restarts it)."""
        self._pid = os.getpid()
        self._guard = threading.Lock()
        self._taking = self._busy = False
        self._engine = None

    def close(self) -> None:
        """Stop the stream (idempotent). Its worker threads go back to the loader, parked
        for the next stream (``persistent_workers=True``, the default), or end and are joined
        (``persistent_workers=False``, or when the stream ended in an error)."""
        self._end(failed=False)

    def _end(self, failed):
        if self._pid != os.getpid():
            self._after_fork()
        with self._guard:
            self._closed = True
            engine, self._engine = self._engine, None
            taking = self._taking
        if self._reads_ahead:
            self.loader._pipeline.stop_read_ahead()
        if engine is None:
            return
        if failed or taking:
            # A consumer waiting in take() on another thread wakes only when the engine
            # closes: parking would leave it waiting on an engine the next stream adopts
            # (or skipping, after building the step take left to it, in that engine's window).
            engine.shutdown()
            return
        completed_pass = self._epoch_pass and self.next_g == self.stop_g
        release_engine(self.loader, engine, self.next_g, completed_pass)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def state_dict(self) -> "dict[str, Any]":
        """The whole resume state: the next global step, and the pipeline it belongs to
        (the form of ``DataLoader.state_dict()``)."""
        return self.loader._state(self.next_g)

    def load_state_dict(self, state: "dict[str, Any]") -> None:
        """Continue from ``state["next_g"]``; refuses a state saved by a different pipeline,
        accepts one saved at another world size, worker count or prefetch (elastic resume,
        see ``DataLoader.load_state_dict``)."""
        start = self.loader._checked_next_g(state)
        if self.stop_g is not None and start > self.stop_g:
            raise ValueError(f"next_g {start} lies beyond this stream's stop_g {self.stop_g}")
        self._restart(start)

    def __repr__(self):
        engine = self._engine
        return (f"BatchStream(next_g={self.next_g}, stop_g={self.stop_g}, "
                f"workers={0 if engine is None else len(engine.threads)}, closed={self._closed})")
