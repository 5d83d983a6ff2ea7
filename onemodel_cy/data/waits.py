"""How long a thread building a step may wait for samples that are not here yet (a pack at
a URL fetched sample by sample, ``packs/exact.py``), and how that wait is ended early
(issue 36, item 13).

The loader's ``timeout`` bounds the consumer's wait for one batch. The consumer waits in
two ways: for a worker (each engine's ``take``), and for a remote pack's samples while it
builds or prepares a step itself (the first step of every stream, every step at 0
workers, every preparation of the packed lane). The stream puts the second kind under the
same bound (``bounded``); ``RemoteSamples.ensure`` asks ``current()`` and, once the time
is up, stops waiting and raises :class:`WaitTimeout` naming the step and the timeout. The
fetch itself goes on (it is bounded by its own retry policy) and what it brings is in the
cache for the next try.

A worker thread's waits are not timed (its consumer's ``take`` is), but they are called
off when its engine closes (``WaitBound.call_off``), so that closing a stream joins the
worker at once instead of waiting for a slow server.

A thread-local, not an argument: the wait happens deep in the fetch step
(``PackedSource.ensure_samples``), under every route's build, and only a remote pack
reads it.
"""
from __future__ import annotations

import contextlib
import threading
import time

__all__ = ["WaitBound", "WaitTimeout", "WaitCalledOff", "bounded", "current"]

_local = threading.local()


class WaitTimeout(TimeoutError):
    """The loader's ``timeout`` passed while its consumer waited for a remote pack's samples."""


class WaitCalledOff(RuntimeError):
    """The engine a worker thread belongs to closed while the worker waited for samples."""


class WaitBound:
    """The bound on one thread's waits: a deadline (``timeout`` seconds from now, for step
    ``step``; none when ``timeout`` is None) and a flag another thread may set to end the
    wait under way and every later one (``call_off``)."""

    __slots__ = ("timeout", "step", "deadline", "called_off", "_woken", "_lock")

    def __init__(self, timeout=None, step=None):
        self.timeout, self.step = timeout, step
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.called_off = False
        self._woken = None          # the event of the wait under way
        self._lock = threading.Lock()

    def call_off(self) -> None:
        """End the wait under way (and any later one) now; from any thread."""
        with self._lock:
            self.called_off = True
            if self._woken is not None:
                self._woken.set()

    def wait(self, future, what: str):
        """``future.result()`` (a ``concurrent.futures.Future``) once it is done; else,
        when the deadline passes first, ``WaitTimeout``, and when the wait is called off,
        ``WaitCalledOff``, each saying ``what`` was awaited. The future is left running."""
        woken = threading.Event()
        future.add_done_callback(lambda _: woken.set())
        with self._lock:
            if self.called_off:
                woken.set()
            self._woken = woken
        try:
            woken.wait(None if self.deadline is None else max(0.0, self.deadline - time.monotonic()))
        finally:
            with self._lock:
                self._woken = None
        if future.done():
            return future.result()
        if self.called_off:
            raise WaitCalledOff(f"the loader's workers were closed while {what}")
        raise WaitTimeout(f"no batch for step {self.step} after {self.timeout} s (DataLoader timeout): {what}")


def current():
    """The calling thread's bound, or None (wait as long as the fetch's retry policy lets it)."""
    return getattr(_local, "bound", None)


@contextlib.contextmanager
def bounded(bound):
    """Put the calling thread's waits under ``bound`` (a ``WaitBound``; None: no bound)
    until the block ends."""
    outer = getattr(_local, "bound", None)
    _local.bound = bound
    try:
        yield bound
    finally:
        _local.bound = outer
