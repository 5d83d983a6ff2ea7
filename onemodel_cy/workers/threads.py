"""§1 thread workers: threads running the pipeline's ``build``, and the ring they fill.

One engine of ``protocol.Engine`` (the registry chooses it, keeps it between streams and
ends it). Its threads are created in one place, ``ThreadEngine.__init__``. Workers only
decide *when* a step is built, never *what* it contains (``Pipeline.build``).

Ring discipline (§1): the engine's ``StepWindow`` hands steps out in order, at most
``prefetch`` ahead of the step the consumer takes next, so step ``g`` owns slot
``g % prefetch`` and two live steps never share one. Under the engine's one lock, a worker
claims the window's next step, or waits for room on a condition of that lock. The
consumer waits for its step on the slot's own ``ready`` lock, held while the slot is empty
and released by the worker that fills it: one C-level acquire and release per batch on
the hand-off that paces the whole stream, no Python-level wait. Closing (and the last
worker ending) releases the ready lock of every empty slot and notifies the condition,
so it takes effect at once (no polling).

A stream ending in an error ends the threads. With ``persistent_workers=False`` every
stream ends its threads on close, and a bounded stream's workers end by themselves once
its last step is claimed.

Start-up: a stream that needs new threads does not wait for them to start (a bare helper
thread starts the first worker, each worker the next) and builds its first step on the
consumer meanwhile.
"""
from __future__ import annotations

import _thread
import sys
import threading
import time
import warnings
import weakref

from onemodel_cy.collate.bufferpool import PoolWindow
from onemodel_cy.data.waits import WaitBound, bounded
from onemodel_cy.workers.protocol import StuckWorkerWarning
from onemodel_cy.workers.window import EngineBase, StepWindow, close_batches

__all__ = ["ThreadEngine"]


class ThreadEngine(EngineBase):
    """A loader's worker threads and the ring they fill; serves one stream at a time.

    Holds the loader only weakly, so a loader that is dropped is collected and its
    ``__del__`` ends the threads; the pipeline it builds, strongly. ``skip``,
    ``reposition`` and ``park`` are ``EngineBase``'s, over ``_drop`` and ``_refill``.
    """

    def __init__(self, loader, workers, start, limit):
        self.owner = weakref.ref(loader)
        self.pipeline = loader._pipeline
        self.persistent = loader.persistent_workers   # park at the limit instead of ending
        self.prefetch = loader.prefetch
        self.workers = workers
        # Reentrant: the cycle collector may run a loader's __del__ (which closes this
        # engine) on a worker thread that holds the lock.
        self._state = threading.RLock()
        self.room = threading.Condition(self._state)      # workers wait here for a claimable step
        # Slot k's ready lock is released exactly while the slot holds a delivered step, or
        # once the engine is over (closed, or no worker left), to wake the consumer.
        self.ready = [threading.Lock() for _ in range(self.prefetch)]
        for lock in self.ready:
            lock.acquire()
        self.steps = [-1] * self.prefetch               # slot k holds step steps[k] (or -1)
        self.batches = [None] * self.prefetch
        self.errors = [None] * self.prefetch
        self.window = StepWindow(self.prefetch, start, limit, True)    # the consumer builds `start`
        self.generation = 0           # bumped by _drop: builds of an older one are discarded
        self.closed = self.forsaken = False
        self.alive = workers
        self.waiting = 0              # workers waiting in claim for room (idle() counts them)
        self.join_timeout = loader.join_timeout
        # Each worker's waits for a remote pack's samples, called off when the engine closes
        # (data/waits.py): closing joins a worker at once, whatever the server does.
        self.bounds = [WaitBound() for _ in range(workers)]
        # Batches alive at once: the ring's slots, one per worker, the consumer's.
        self.pool_window = PoolWindow.for_stream(loader.collator.pool, self.prefetch, workers)
        self.threads = [threading.Thread(target=_work, name=f"onemodel_cy-worker-{k}",
                                         args=(self, k, self.pipeline.workspace(loader.pacing, loader._clock)),
                                         daemon=True)
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
            with self._state:
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
        window = self.window
        with self._state:
            while True:
                if self.closed:
                    return None
                if window.has_room():
                    return window.hand_out(), self.generation
                if window.exhausted() and not self.persistent:
                    return None     # the stream's last step is claimed: end now, so close joins at once
                self.waiting += 1
                try:
                    self.room.wait()
                finally:
                    self.waiting -= 1

    def deliver(self, g, generation, batch, error):
        """Leave step g's batch (or exception) in its slot, unless a reset or close made it stale."""
        with self._state:
            stale = generation != self.generation or self.closed
            if not stale:
                k = g % self.prefetch
                self.steps[k], self.batches[k], self.errors[k] = g, batch, error
                if error is not None:     # hand out nothing more: the stream ends at g
                    self.window.failed(g)
                self.ready[k].release()
        if stale and batch is not None:
            batch.close()

    def worker_ended(self):
        with self._state:
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
        """Step g's batch, waiting for it; None when g is the consumer's to build (then
        ``skip``); raises its build's exception, StopIteration once closed, TimeoutError
        after ``timeout`` seconds (None: wait while a worker lives)."""
        if g == self.window.local:
            return None                 # claimed for the consumer: no worker builds it
        k = g % self.prefetch
        ready = self.ready[k]
        got = ready.acquire() if timeout is None else ready.acquire(True, timeout)
        with self._state:
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
            self.window.took(g)
            self.room.notify()
        if error is not None:
            raise error
        return batch

    def fits(self, loader, workers):
        if self.forsaken:
            return False
        with self._state:
            return (not self.closed and loader.worker_mode == "thread" and loader._pipeline is self.pipeline
                    and self.alive == workers == self.workers and loader.prefetch == self.prefetch)

    def idle(self):
        with self._state:
            return self.waiting == self.alive and not self.window.has_room()

    def _refill(self):
        """(Under the lock; EngineBase.) The window moved: wake the workers waiting for room."""
        self.room.notify_all()

    def _drop(self, start):
        """(Under the lock; EngineBase.) Discard the ring and every build in flight; stand at
        ``start``. Returns the discarded batches, for the caller to close outside the lock."""
        self.generation += 1           # builds in flight are discarded on delivery
        for k, step in enumerate(self.steps):
            if step != -1:
                self.ready[k].acquire(False)    # delivered, not taken: the slot is empty again
        stale, self.batches = self.batches, [None] * self.prefetch
        self.steps = [-1] * self.prefetch
        self.errors = [None] * self.prefetch
        self.window.moved(start)
        return stale

    def _close(self):
        """Mark closed and wake every waiter; returns the ring's batches, to be closed."""
        with self._state:
            self.closed = True
            stale, self.batches = self.batches, [None] * self.prefetch
            self.steps = [-1] * self.prefetch
            self.room.notify_all()
            self._wake_consumer()
        for bound in self.bounds:
            bound.call_off()
        return stale

    def signal_close(self):
        """Mark closed, wake every waiter, close the ring's batches; waits for no worker (the
        lock it takes is held only between builds, never across one)."""
        if not self.forsaken:
            close_batches(self._close())

    def forsake(self):
        """(After fork, in the child: see ``protocol.Engine.forsake``.) No thread of it runs
        here; its ring's batches are this process's copies, left to the collector."""
        self.forsaken = self.closed = True

    def shutdown(self):
        """End the threads: ``signal_close``, then join them, ``join_timeout`` seconds in all (a
        build in progress runs to its end; a thread still in one then is named in a
        ``StuckWorkerWarning`` and left to end by itself). Called on one of its own workers
        (a loader's __del__), it only wakes them: that worker may hold the lock the others
        need to end."""
        if self.forsaken:
            return
        self.signal_close()
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


def _work(engine, k, workspace):
    """A worker: claim the next step inside the window, build it, leave it in its slot."""
    try:
        with bounded(engine.bounds[k]):
            while True:
                claimed = engine.claim()
                if claimed is None or engine.owner() is None:
                    return
                g, generation = claimed
                try:
                    batch, error = engine.pipeline.build(g, workspace), None
                    # By the worker that built it, so the consumer allocates nothing for it.
                    engine.pool_window.fit(batch.nbytes)
                except BaseException as exc:  # delivered to the consumer at step g
                    batch, error = None, exc
                engine.deliver(g, generation, batch, error)
                del batch, error
    finally:
        engine.worker_ended()
