"""§1 streams: the worker engine (threads + prefetch ring) and ``BatchStream``.

The loader's threads are created in one place, ``_Engine.__init__``. Workers only decide
*when* a step is built, never *what* it contains: a batch is a function of the global
step alone (``DataLoader._build``), so the stream is the same for any number of workers,
any prefetch depth, any timing, any resume point, and whether an engine was adopted.

Ring discipline (§1): step ``g`` lives in slot ``g % prefetch``. Under the engine's one
lock, a worker claims the next step ``g`` only while ``g < next_take + prefetch`` (where
``next_take`` is the step the consumer takes next), so two live steps never share a slot.
Waits are on two conditions of that lock: workers wait for room, the consumer waits for
its step. Closing notifies both, so a close takes effect at once (no polling).

Engines outlive streams in one case: a pass of ``for batch in loader`` that runs to its
end hands its engine back to the loader, still prefetching past the epoch's end (the
next epoch's steps are known: they are a function of g). The next stream starting where
it stopped adopts it, prefetched batches included; one starting elsewhere resets it
(same threads, ring emptied, repositioned). Other streams end their threads on close;
a bounded stream's workers end by themselves once its last step is claimed.

Start-up: a stream that needs new threads does not wait for them to start (a bare helper
thread starts the first worker, each worker the next) and builds its first step on the
consumer meanwhile.
"""
from __future__ import annotations

import _thread
import atexit
import threading
import time
import warnings
import weakref

from onemodel_cy._bufferpool import PoolWindow
from onemodel_cy._validate import check_integer

__all__ = ["BatchStream"]

_JOIN_TIMEOUT = 10.0    # seconds, in all, to wait for workers finishing the batches they build


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
        self.prefetch = loader.prefetch
        self.workers = workers
        # Reentrant: the cycle collector may run a loader's __del__ (which closes this
        # engine) on a worker thread that holds the lock.
        self.lock = threading.RLock()
        self.room = threading.Condition(self.lock)      # workers wait here for a claimable step
        self.ready = threading.Condition(self.lock)     # the consumer waits here for its step
        self.steps = [-1] * self.prefetch               # slot k holds step steps[k] (or -1)
        self.batches = [None] * self.prefetch
        self.errors = [None] * self.prefetch
        self.next_take = start
        self.next_claim = start + 1 if local_first else start   # the consumer builds `start` itself
        self.limit = limit            # claim nothing at or beyond (None: endless)
        self.failed_at = None         # the step whose build raised, if any
        self.generation = 0           # bumped by reset: builds of an older one are discarded
        self.closed = False
        self.alive = workers
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
                self.ready.notify_all()     # a consumer waiting on no worker at all must know
            return

    # -- workers' side -----------------------------------------------------------------

    def claim(self):
        """The next step to build and the generation it belongs to; None once closed, or
        once a bounded stream's steps are all claimed (an engine that keeps prefetching
        has no bound; one whose build failed waits for its close)."""
        with self.lock:
            while True:
                if self.closed:
                    return None
                g = self.next_claim
                if self.limit is not None and g >= self.limit:
                    if self.failed_at is None:
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
                self.ready.notify()
        if stale and batch is not None:
            batch.close()

    def worker_ended(self):
        with self.lock:
            self.alive -= 1
            self.ready.notify_all()

    # -- the consumer's side -------------------------------------------------------------

    def take(self, g, timeout):
        """Step g's batch, waiting for it; raises its build's exception, StopIteration once
        closed, TimeoutError after ``timeout`` seconds (None: wait while a worker lives)."""
        k = g % self.prefetch
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.steps[k] != g:
                if self.closed:             # closed from another thread while we waited
                    raise StopIteration
                if self.alive == 0:
                    raise RuntimeError(f"every worker thread ended before building step {g}")
                if deadline is None:
                    self.ready.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no batch for step {g} after {timeout} s (DataLoader timeout)")
                    self.ready.wait(left)
            batch, error = self.batches[k], self.errors[k]
            self.steps[k], self.batches[k], self.errors[k] = -1, None, None
            self.next_take = g + 1
            self.room.notify()
        if error is not None:
            raise error
        return batch

    def skip(self, g):
        """The consumer built step g itself: move the window on."""
        with self.lock:
            self.next_take = g + 1
            self.room.notify()

    def fits(self, workers, prefetch):
        with self.lock:
            return (not self.closed and self.alive == workers == self.workers
                    and prefetch == self.prefetch)

    def reposition(self, start, limit):
        """Serve a stream of steps [start, limit): adopt the ring as it stands when it is
        already at ``start`` (its prefetched batches included), else empty it and move it."""
        with self.lock:
            stale = []
            if start != self.next_take:
                self.generation += 1           # builds in flight are discarded on delivery
                stale, self.batches = self.batches, [None] * self.prefetch
                self.steps = [-1] * self.prefetch
                self.errors = [None] * self.prefetch
                self.next_claim = self.next_take = start
                self.failed_at = None
            self.limit = limit
            if self.failed_at is not None:     # a pending error still ends the stream at its step
                self.limit = self.failed_at + 1 if limit is None else min(limit, self.failed_at + 1)
            self.room.notify_all()
        _close_all(stale)

    def signal_close(self):
        """Mark closed and wake every waiter (workers end, a waiting consumer stops)."""
        with self.lock:
            self.closed = True
            stale, self.batches = self.batches, [None] * self.prefetch
            self.steps = [-1] * self.prefetch
            self.room.notify_all()
            self.ready.notify_all()
        return stale

    def shutdown(self):
        """End the threads: wake them, then join them (a build in progress runs to its end).
        Called on one of its own workers (a loader's __del__), it only wakes them: that
        worker may hold the lock the others need to end."""
        _close_all(self.signal_close())
        current = threading.current_thread()
        if current in self.threads:
            return
        with self.start_lock:   # a start in progress completes; none follows (closed is set)
            pass
        deadline = time.monotonic() + _JOIN_TIMEOUT
        started = [t for t in self.threads if t.ident is not None]   # none starts after close
        for thread in started:
            if thread is not current and thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in started if t.is_alive() and t is not current]
        if stuck:
            warnings.warn(f"onemodel_cy: {stuck} still inside dataset/transform code {_JOIN_TIMEOUT} s after "
                          f"close(); they end when that call returns (daemon threads)", ResourceWarning,
                          stacklevel=3)


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
    """An engine for a stream of steps [start, limit) and whether it is new: the loader's
    idle one (adopted, or reset when it stands elsewhere), else a new one, whose first
    step the consumer builds itself while the threads start."""
    with _handover:
        engine, loader._idle_engine = loader._idle_engine, None
    if engine is not None:
        if _fits(engine, loader, workers):
            engine.reposition(start, limit)
            return engine, False
        engine.shutdown()
    return _engine_class(loader)(loader, workers, start, limit, local_first=True), True


# -- worker_mode="process": the engine lives in onemodel_cy._procs ----------------------

def _engine_class(loader):
    if loader.worker_mode == "process":
        from onemodel_cy._procs import ProcessEngine
        return ProcessEngine
    return _Engine


def _fits(engine, loader, workers):
    """Whether ``engine`` can serve ``loader``'s next stream: same kind, workers and prefetch."""
    return (getattr(engine, "mode", "thread") == loader.worker_mode
            and engine.fits(workers, loader.prefetch))


def release_engine(loader, engine):
    """Keep ``engine`` idle in the loader (prefetching on), or end it if the loader has one."""
    with _handover:
        if loader._idle_engine is None and engine.fits(engine.workers, loader.prefetch):
            with engine.lock:
                engine.limit = None if engine.failed_at is None else engine.failed_at + 1
                engine.room.notify_all()
            loader._idle_engine = engine
            return
    engine.shutdown()


def close_engines(loader):
    """End every engine of ``loader``: the idle one and those of its open streams."""
    with _handover:
        idle, loader._idle_engine = loader._idle_engine, None
    if idle is not None:
        idle.shutdown()
    for engine in list(_live_engines):
        if engine.owner() is loader:
            engine.shutdown()


class BatchStream:
    """Batches of global steps ``[start_g, stop_g)`` in order; an iterator and a context manager.

    ``next_g`` is the global step the next ``next()`` returns: pass it to
    ``loader.iter(start_g=...)`` to resume. ``close()`` (also on leaving ``with``, or
    when the stream is dropped) ends every worker thread of the stream. (The one exception
    is a completed pass of ``for batch in loader``: its workers stay with the loader for the
    next pass, until ``loader.close()`` or until the loader is collected.)
    """

    def __init__(self, loader, start_g=0, stop_g=None, *, _persistent=False):
        self.loader = loader
        start = check_integer(start_g, "start_g", 0)
        stop = None if stop_g is None else check_integer(stop_g, "stop_g", start)
        self.stop_g = stop
        self._persistent = _persistent    # a pass of `for batch in loader`: keep the engine after it
        self._engine = None
        self._workspace = None
        self._local = None                # a step the consumer builds itself (a new engine's first)
        self._restart(start)

    def _restart(self, start):
        self._closed = False
        self.next_g = start
        if start != self._local:          # a pending local first step stays the consumer's
            self._local = None
        if self._workspace is None:
            self._workspace = self.loader._workspace()
        workers = self.loader._stream_workers()
        if workers == 0:
            self._engine = self._local = None
            return
        # A pass of `for batch in loader` prefetches past its end: the next pass adopts those.
        limit = None if self._persistent else self.stop_g
        engine = self._engine
        if engine is not None and _fits(engine, self.loader, workers):
            engine.reposition(start, limit)
        else:
            self._engine = None
            if engine is not None:
                engine.shutdown()
            self._engine, fresh = acquire_engine(self.loader, workers, start, limit)
            # New threads take a while to start (and the first of them to build its first
            # batch): the consumer builds that first step in the meantime.
            self._local = start if fresh else None

    def __iter__(self):
        return self

    def __next__(self):
        g = self.next_g
        if self._closed or (self.stop_g is not None and g >= self.stop_g):
            self.close()
            raise StopIteration
        try:
            engine = self._engine
            if engine is None:
                batch = self.loader._build(g, self._workspace)
            elif g == self._local:
                self._local = None
                batch = self.loader._build(g, self._workspace)
                engine.skip(g)
            else:
                batch = engine.take(g, self.loader.timeout)
        except BaseException:
            self.close()
            raise
        self.next_g = g + 1
        return batch

    def close(self):
        """Stop the stream: end and join its worker threads (idempotent). A completed pass of
        ``for batch in loader`` hands them to the loader instead."""
        self._closed = True
        engine, self._engine = self._engine, None
        if engine is None:
            return
        if self._persistent and self.next_g == self.stop_g:
            release_engine(self.loader, engine)
        else:
            engine.shutdown()

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

    @property
    def next_step(self) -> int:
        """Deprecated name of ``next_g`` (the global step, not a step in the epoch)."""
        warnings.warn("BatchStream.next_step is deprecated: use next_g (the global step)",
                      DeprecationWarning, stacklevel=2)
        return self.next_g

    def state_dict(self) -> dict:
        """The whole resume state: the next global step, and the pipeline it belongs to."""
        return {"next_g": self.next_g, "fingerprint": self.loader.fingerprint()}

    def load_state_dict(self, state: dict):
        """Continue from ``state["next_g"]``; refuses a state saved by a different pipeline.
        (A state saved before the rename, with ``"next_step"``, is read the same way.)"""
        if isinstance(state, dict) and "next_g" not in state and "next_step" in state:
            state = {**state, "next_g": state["next_step"]}
        if not isinstance(state, dict) or "next_g" not in state:
            raise TypeError(f"state must be a dict from state_dict(), received {state!r}")
        fingerprint = state.get("fingerprint")
        if fingerprint is not None and fingerprint != self.loader.fingerprint():
            raise ValueError(f"refusing to resume: the state was saved by a different pipeline\n"
                             f"  saved:   {fingerprint}\n  current: {self.loader.fingerprint()}")
        start = check_integer(state["next_g"], "next_g", 0)
        if self.stop_g is not None and start > self.stop_g:
            raise ValueError(f"next_g {start} lies beyond this stream's stop_g {self.stop_g}")
        self._restart(start)

    def __repr__(self):
        engine = self._engine
        return (f"BatchStream(next_g={self.next_g}, stop_g={self.stop_g}, "
                f"workers={0 if engine is None else len(engine.threads)}, closed={self._closed})")
