"""§1 the worker engine: threads, the prefetch ring, and who keeps an engine between streams.

``BatchStream`` (``_stream.py``) drives an engine; the process engine (``_procs.py``) and
the packed lane (``_lane.pyx``, thread workers that never take the GIL, for a dataset
with a packed view) have the same interface.

The loader's threads are created in one place, ``_Engine.__init__``. Workers only decide
*when* a step is built, never *what* it contains: a batch is a function of the global
step alone (``DataLoader._build``), so the stream is the same for any number of workers,
any prefetch depth, any timing, any resume point, and whether an engine was adopted.

Ring discipline (§1): step ``g`` lives in slot ``g % prefetch``. Under the engine's one
lock, a worker claims the next step ``g`` only while ``g < next_take + prefetch`` (where
``next_take`` is the step the consumer takes next), so two live steps never share a slot.
Workers wait for room on a condition of that lock. The consumer waits for its step on the
slot's own ``ready`` lock, held while the slot is empty and released by the worker that
fills it: one C-level acquire and release per batch on the hand-off that paces the whole
stream, no Python-level wait. Closing (and the last worker ending) releases the ready lock
of every empty slot and notifies the condition, so it takes effect at once (no polling).

Engines belong to the loader, not to one stream (``persistent_workers=True``, the
default). A stream that closes hands its engine back to the loader, its threads parked
(waiting on a condition: no CPU) with whatever they built for it still in the ring; the
next stream adopts it: at the step where the engine stands it takes those batches, elsewhere
the ring is emptied and repositioned (same threads). A pass of ``for batch in loader`` that
runs to its end goes further: its engine keeps prefetching past the epoch's end, since the
next epoch's steps are known (they are a function of g). A stream that ends in an error
ends its threads. With ``persistent_workers=False`` every stream ends its threads on close,
and a bounded stream's workers end by themselves once its last step is claimed.
``loader.close()`` (or leaving ``with loader:``) and collecting the loader end them all.

Start-up: a stream that needs new threads does not wait for them to start (a bare helper
thread starts the first worker, each worker the next) and builds its first step on the
consumer meanwhile.
"""
from __future__ import annotations

import _thread
import atexit
import sys
import threading
import time
import warnings
import weakref

from onemodel_cy._bufferpool import PoolWindow

__all__ = ["StuckWorkerWarning", "DEFAULT_JOIN_TIMEOUT", "acquire_engine", "release_engine",
           "discard_idle_engine", "close_engines"]

DEFAULT_JOIN_TIMEOUT = 10.0  # seconds, in all, to wait for workers finishing the batches they build
                             # (DataLoader's join_timeout)


class StuckWorkerWarning(UserWarning):
    """A worker thread was still inside dataset, transform or augmentation code when closing
    its stream stopped waiting for it (``DataLoader(join_timeout=...)``). A ``UserWarning``,
    so Python shows it by default (a ``ResourceWarning`` would be hidden)."""


def _close_all(batches):
    for batch in batches:
        if batch is not None:
            batch.close()


class _Engine:
    """A loader's worker threads and the ring they fill; serves one stream at a time.

    Holds the loader only weakly (workers look it up for each build), so a loader that is
    dropped is collected and its ``__del__`` ends the threads.
    """

    def __init__(self, loader, workers, start, limit, local_first=False):
        self.owner = weakref.ref(loader)
        self.persistent = loader.persistent_workers   # park at the limit instead of ending
        self.prefetch = loader.prefetch
        self.workers = workers
        # Reentrant: the cycle collector may run a loader's __del__ (which closes this
        # engine) on a worker thread that holds the lock.
        self.lock = threading.RLock()
        self.room = threading.Condition(self.lock)      # workers wait here for a claimable step
        # Slot k's ready lock is released exactly while the slot holds a delivered step, or
        # once the engine is over (closed, or no worker left), to wake the consumer.
        self.ready = [threading.Lock() for _ in range(self.prefetch)]
        for lock in self.ready:
            lock.acquire()
        self.steps = [-1] * self.prefetch               # slot k holds step steps[k] (or -1)
        self.batches = [None] * self.prefetch
        self.errors = [None] * self.prefetch
        self.next_take = start
        self.next_claim = start + 1 if local_first else start   # the consumer builds `start` itself
        self.local_claim = start if local_first else None        # a step claimed for the consumer
        self.limit = limit            # claim nothing at or beyond (None: endless)
        self.failed_at = None         # the step whose build raised, if any
        self.generation = 0           # bumped by reset: builds of an older one are discarded
        self.closed = False
        self.alive = workers
        self.join_timeout = getattr(loader, "join_timeout", DEFAULT_JOIN_TIMEOUT)
        # Batches alive at once: the ring's slots, one per worker, the consumer's.
        self.window = PoolWindow.for_stream(loader.collator.pool, self.prefetch, workers)
        _live_engines.add(self)
        self.threads = [threading.Thread(target=_work, name=f"onemodel_cy-worker-{k}",
                                         args=(self, k, loader._workspace()), daemon=True)
                        for k in range(workers)]
        # Thread.start() waits until the new thread runs, and then for the GIL, which the
        # workers already building hold: up to milliseconds per thread on the consumer.
        # So a bare helper thread starts the workers one after another (start_all); the
        # consumer waits for none, and each worker claims its first step as soon as it
        # runs. Starts happen under start_lock (not the ring's lock, so they hold up no
        # take()); shutdown waits on it.
        self.start_lock = threading.Lock()
        _thread.start_new_thread(self.start_all, ())

    def start_all(self):
        """Start every worker, unless the engine is closed (then none of the rest starts)."""
        for k, thread in enumerate(self.threads):
            with self.start_lock:
                if not self.closed:
                    try:
                        thread.start()
                        continue
                    except RuntimeError:    # "can't start new thread": the rest never run
                        pass
            with self.lock:
                self.alive -= len(self.threads) - k
                if self.alive == 0:         # a consumer waiting on no worker at all must know
                    self._wake_consumer()
            return

    # -- workers' side -----------------------------------------------------------------

    def claim(self):
        """The next step to build and the generation it belongs to; None once closed, or,
        for an engine that is not persistent, once a bounded stream's steps are all claimed
        (a persistent engine parks there until the next stream moves its limit; one whose
        build failed waits for its close)."""
        with self.lock:
            while True:
                if self.closed:
                    return None
                g = self.next_claim
                if self.limit is not None and g >= self.limit:
                    if self.failed_at is None and not self.persistent:
                        return None     # the stream's last step is claimed: end now, so close joins at once
                elif g < self.next_take + self.prefetch:
                    self.next_claim = g + 1
                    return g, self.generation
                self.room.wait()

    def deliver(self, g, generation, batch, error):
        """Leave step g's batch (or exception) in its slot, unless a reset or close made it stale."""
        with self.lock:
            stale = generation != self.generation or self.closed
            if not stale:
                k = g % self.prefetch
                self.steps[k], self.batches[k], self.errors[k] = g, batch, error
                if error is not None:     # claim nothing more: the stream ends at g
                    self.failed_at = g
                    self.limit = g + 1 if self.limit is None else min(self.limit, g + 1)
                self.ready[k].release()
        if stale and batch is not None:
            batch.close()

    def worker_ended(self):
        with self.lock:
            self.alive -= 1
            if self.alive == 0:
                self._wake_consumer()

    def _wake_consumer(self):
        """(Under the lock; the engine is over.) Release the ready lock of every empty slot,
        so a consumer waiting on one, or arriving later, sees the end instead of waiting."""
        for k, lock in enumerate(self.ready):
            if self.steps[k] == -1 and lock.locked():
                lock.release()

    # -- the consumer's side -------------------------------------------------------------

    def take(self, g, timeout):
        """Step g's batch, waiting for it; raises its build's exception, StopIteration once
        closed, TimeoutError after ``timeout`` seconds (None: wait while a worker lives)."""
        k = g % self.prefetch
        ready = self.ready[k]
        got = ready.acquire() if timeout is None else ready.acquire(True, timeout)
        with self.lock:
            if not got:
                got = ready.acquire(False)      # delivered just as the wait timed out
            if self.steps[k] != g:
                if got:
                    ready.release()             # the end stays visible to whoever asks next
                if self.closed:                 # closed from another thread while we waited
                    raise StopIteration
                if self.alive == 0:
                    raise RuntimeError(f"every worker thread ended before building step {g}")
                if not got:
                    raise TimeoutError(f"no batch for step {g} after {timeout} s (DataLoader timeout)")
                raise RuntimeError(f"ring slot {k} holds step {self.steps[k]}, expected {g}")   # never
            batch, error = self.batches[k], self.errors[k]
            self.steps[k], self.batches[k], self.errors[k] = -1, None, None
            self.next_take = g + 1
            self.room.notify()
        if error is not None:
            raise error
        return batch

    def skip(self, g):
        """The consumer built step g, claimed for it, itself: move the window on. (Nothing,
        when that claim is gone: the stream was closed meanwhile from another thread.)"""
        with self.lock:
            if self.local_claim == g:
                self.local_claim = None
                self.next_take = g + 1
                self.room.notify()

    def fits(self, workers, prefetch):
        with self.lock:
            return (not self.closed and self.alive == workers == self.workers
                    and prefetch == self.prefetch)

    def reposition(self, start, limit):
        """Serve a stream of steps [start, limit): adopt the ring as it stands when it is
        already at ``start`` (its prefetched batches included), else empty it and move it.

        Returns True when no worker has claimed ``start`` yet: it is then the consumer's to
        build (claimed for it here), so the stream's first batch waits for no worker."""
        with self.lock:
            stale = []
            if start != self.next_take:
                stale = self._empty(start)
            local = self.next_claim == start and self.failed_at is None
            if local:
                self.next_claim = start + 1
                self.local_claim = start
            self.limit = limit
            if self.failed_at is not None:     # a pending error still ends the stream at its step
                self.limit = self.failed_at + 1 if limit is None else min(limit, self.failed_at + 1)
            self.room.notify_all()
        _close_all(stale)
        return local

    def _empty(self, start):
        """(Under the lock.) Discard the ring and every build in flight; stand at ``start``.
        Returns the discarded batches, for the caller to close outside the lock."""
        self.generation += 1           # builds in flight are discarded on delivery
        for k, step in enumerate(self.steps):
            if step != -1:
                self.ready[k].acquire(False)    # delivered, not taken: the slot is empty again
        stale, self.batches = self.batches, [None] * self.prefetch
        self.steps = [-1] * self.prefetch
        self.errors = [None] * self.prefetch
        self.next_claim = self.next_take = start
        self.local_claim = None
        self.failed_at = None
        return stale

    def park(self, next_g, keep_prefetching):
        """The stream this engine served closed at ``next_g``: keep what the ring holds for a
        stream resuming there. A completed epoch pass goes on prefetching; any other stream's
        workers claim nothing more (its caller bounded it). A step claimed for the consumer
        but not delivered (never built, or closed from another thread while it was built)
        would leave a hole that no worker fills: then the ring starts afresh at ``next_g``."""
        with self.lock:
            stale = []
            if self.local_claim is not None or next_g != self.next_take:
                stale = self._empty(next_g)
            if keep_prefetching:
                self.limit = None if self.failed_at is None else self.failed_at + 1
            elif self.failed_at is None:
                self.limit = self.next_claim
            self.room.notify_all()
        _close_all(stale)

    def signal_close(self):
        """Mark closed and wake every waiter (workers end, a waiting consumer stops)."""
        with self.lock:
            self.closed = True
            stale, self.batches = self.batches, [None] * self.prefetch
            self.steps = [-1] * self.prefetch
            self.room.notify_all()
            self._wake_consumer()
        return stale

    def shutdown(self):
        """End the threads: wake them, then join them (a build in progress runs to its end).
        Called on one of its own workers (a loader's __del__), it only wakes them: that
        worker may hold the lock the others need to end."""
        _close_all(self.signal_close())
        current = threading.current_thread()
        if current in self.threads or sys.is_finalizing():
            # At interpreter exit (a parked engine collected with its loader) other threads
            # no longer run: joining them, or taking a lock one of them holds, would hang.
            return
        with self.start_lock:   # a start in progress completes; none follows (closed is set)
            pass
        deadline = time.monotonic() + self.join_timeout
        started = [t for t in self.threads if t.ident is not None]   # none starts after close
        for thread in started:
            if thread is not current and thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in started if t.is_alive() and t is not current]
        if stuck:
            warnings.warn(f"onemodel_cy: {stuck} still inside dataset/transform/augmentation code "
                          f"{self.join_timeout} s after close() (DataLoader join_timeout); they end when "
                          f"that call returns (daemon threads)", StuckWorkerWarning, stacklevel=3)


_live_engines: "weakref.WeakSet[_Engine]" = weakref.WeakSet()


@atexit.register
def _close_all_engines():
    for engine in list(_live_engines):
        engine.signal_close()


def _work(engine, k, workspace):
    """A worker: claim the next step inside the window, build it, leave it in its slot."""
    try:
        while True:
            claimed = engine.claim()
            if claimed is None:
                return
            g, generation = claimed
            loader = engine.owner()
            if loader is None:
                return
            try:
                batch, error = loader._build(g, workspace), None
                # By the worker that built it, so the consumer allocates nothing for it.
                engine.window.fit(batch.nbytes)
            except BaseException as exc:  # delivered to the consumer at step g
                batch, error = None, exc
            del loader      # if it was the last reference, the loader's __del__ closes this engine
            engine.deliver(g, generation, batch, error)
            del batch, error
    finally:
        engine.worker_ended()


_handover = threading.Lock()     # guards every loader's ``_idle_engine``


def acquire_engine(loader, workers, start, limit):
    """An engine for a stream of steps [start, limit), and whether the consumer builds
    ``start`` itself: the loader's idle engine (adopted, or reset when it stands
    elsewhere), else a new one, whose first step the consumer builds while its threads start."""
    with _handover:
        engine, loader._idle_engine = loader._idle_engine, None
    if engine is not None:
        if _fits(engine, loader, workers):
            return engine, engine.reposition(start, limit)
        engine.shutdown()
    return _engine_class(loader)(loader, workers, start, limit, local_first=True), True


# -- the other engines: worker_mode="process" (onemodel_cy._procs), and the packed lane
# (onemodel_cy._lane), whose threads never take the GIL ---------------------------------

def _engine_class(loader):
    if loader.worker_mode == "process":
        from onemodel_cy._procs import ProcessEngine
        return ProcessEngine
    from onemodel_cy._lane import LaneEngine, lane_fits
    if lane_fits(loader):       # every build gathers from a packed view: workers need no GIL
        return LaneEngine
    return _Engine


def _fits(engine, loader, workers):
    """Whether ``engine`` can serve ``loader``'s next stream: same kind, workers and prefetch."""
    return (getattr(engine, "mode", "thread") == loader.worker_mode
            and engine.fits(workers, loader.prefetch))


def release_engine(loader, engine, next_g, completed_pass):
    """Park ``engine`` in the loader for the next stream (see ``_Engine.park``), or end it:
    when it is not persistent, when the loader already keeps one, or when it no longer fits
    the loader's settings."""
    with _handover:
        if (engine.persistent and loader._idle_engine is None
                and _fits(engine, loader, engine.workers)):
            engine.park(next_g, keep_prefetching=completed_pass)
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
