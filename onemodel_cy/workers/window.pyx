"""§1 the step window: which steps an engine may have built, and in what order it hands them out.

One object per engine, the same for the thread workers, the packed lane and the worker
processes; each engine adds only its mechanism (who builds, where the batch lives, how a
waiter wakes). The window is the range of global steps ``[next_take, end())``:

* ``next_take``: the step the consumer takes next; ``next_out``: the next step to hand
  to a worker. Steps are handed out in order, at most ``prefetch`` ahead of
  ``next_take``, so step ``g`` can own ring slot ``g % prefetch``.
* ``limit``: hand out nothing at or past it (None: endless, up to the last global step,
  ``2**63 - 1``), the stream's ``stop_g`` or, once a stream parked, where it stopped
  handing out.
* ``failed_at``: the lowest step whose build raised; nothing past it is handed out, so
  the stream ends at that step with its error.
* ``local``: a step claimed for the consumer to build itself (the first step of a new
  or repositioned engine, built while no worker has it yet). It is the one record of
  that claim: an engine's ``take(g)`` answers None for it, and ``skip`` moves past it
  once the consumer built it.

``reposition`` (a stream starts) and ``park`` (a stream closed) are the two moves of a
kept engine. When the window must move elsewhere, they call ``drop(start)``, which
empties the engine's own ring and then calls ``moved(start)``. Not thread-safe: each
engine calls it under its own lock, through ``EngineBase`` below, the one home of the
engines' ``skip``, ``reposition`` and ``park``.
"""
from onemodel_cy.core.validate import G_END as _G_END     # (private here: the stub lists the API)


cdef class StepWindow:
    """The window of an engine serving steps from ``start``; ``local_first``: the consumer
    builds ``start`` itself (a new engine, whose workers are not running yet). Its steps
    are Python integers; none at or past ``G_END`` (2**63) is handed out."""

    def __init__(self, prefetch, start, limit, local_first):
        if prefetch < 1 or start < 0:
            raise ValueError(f"need prefetch >= 1 and start >= 0, received prefetch={prefetch}, start={start}")
        self.prefetch = prefetch
        self._next_take = start
        self._next_out = start + 1 if local_first else start
        self._local = start if local_first else None
        self._limit = limit
        self._failed_at = None

    @property
    def next_take(self):
        """The step the consumer takes next."""
        return self._next_take

    @property
    def next_out(self):
        """The next step to hand to a worker."""
        return self._next_out

    @property
    def local(self):
        """The step claimed for the consumer to build itself, or None."""
        return self._local

    @property
    def limit(self):
        """Nothing at or past it is handed out (None: endless)."""
        return self._limit

    @property
    def failed_at(self):
        """The lowest step whose build raised, or None."""
        return self._failed_at

    cpdef object end(self):
        """One past the last step that may be handed out now."""
        end = min(self._next_take + self.prefetch, _G_END)
        if self._limit is not None and self._limit < end:
            end = self._limit
        if self._failed_at is not None and self._failed_at + 1 < end:
            end = self._failed_at + 1
        return end

    cpdef bint has_room(self) except -1:
        """Whether ``next_out`` may be handed out now."""
        return self._next_out < self.end()

    cpdef object hand_out(self):
        """The next step to build (the caller checked ``has_room`` and, where building it
        may fail before any worker has it, prepared it first)."""
        g = self._next_out
        self._next_out = g + 1
        return g

    cpdef bint exhausted(self) except -1:
        """Every step before the limit is handed out and none failed: a bounded stream's
        workers that are not kept between streams may end."""
        return self._limit is not None and self._next_out >= self._limit and self._failed_at is None

    cpdef took(self, object g):
        """The consumer took step ``g`` (its batch, or its error)."""
        self._next_take = g + 1

    cpdef failed(self, object g):
        """Step ``g``'s build raised: the stream ends there."""
        if self._failed_at is None or g < self._failed_at:
            self._failed_at = g

    cpdef bint skip(self, object g) except -1:
        """The consumer built step ``g``, claimed for it, itself: move on. False when that
        claim is gone (the stream was closed meanwhile from another thread)."""
        if self._local is None or self._local != g:
            return False
        self._local = None
        self._next_take = g + 1
        if self._next_out < g + 1:
            self._next_out = g + 1
        return True

    cpdef moved(self, object start):
        """The engine emptied its ring: the window stands at ``start``, nothing handed out."""
        self._next_take = self._next_out = start
        self._local = None
        self._failed_at = None

    def reposition(self, start, limit, drop):
        """Serve a stream of steps ``[start, limit)``: keep what was built when already at
        ``start``, else ``drop(start)``. True when no worker has ``start`` yet: it is then
        claimed for the consumer to build (its first batch waits for no worker)."""
        if start != self._next_take:
            drop(start)
        local = self._next_out == start and self._failed_at is None
        if local:
            self._next_out = start + 1
            self._local = start
        self._limit = limit
        return local

    def park(self, next_g, keep_prefetching, drop):
        """The stream closed at ``next_g``: keep what was built for a stream resuming there.
        A completed epoch pass goes on handing out (its next steps are known); any other
        stream's steps stop at what was handed out. A step claimed for the consumer but
        not delivered would leave a hole no worker fills, and a stream that stopped
        elsewhere left the window behind: both ``drop(next_g)``."""
        if self._local is not None or next_g != self._next_take:
            drop(next_g)
        if keep_prefetching:
            self._limit = None
        elif self._failed_at is None:
            self._limit = self._next_out

    def __repr__(self):
        return (f"StepWindow(next_take={self.next_take}, next_out={self.next_out}, local={self.local}, "
                f"limit={self.limit}, failed_at={self.failed_at}, prefetch={self.prefetch})")


class EngineBase:
    """``skip``, ``reposition`` and ``park``: what every engine does with its window, once.

    Each is the ``StepWindow``'s rule made under the engine's lock, then the workers let
    at the steps it opened. An engine gives:

    * ``window``, its ``StepWindow``, and ``_state``, the reentrant lock its window and
      ring change under;
    * ``_drop(start)`` (under ``_state``, when the window must stand elsewhere): empty the
      ring, discard the builds in flight, ``window.moved(start)``; returns the batches the
      ring held, which are closed here once the lock is let go, before the refill;
    * ``_refill()`` (under ``_state``): let the workers at the window's steps (wake them,
      or post the steps), unless the engine is closed.

    A Python class (compiled here, so its functions carry their signatures): ``ThreadEngine``
    and ``ProcessEngine`` inherit it; ``LaneEngine``, a cdef class, cannot inherit a Python
    class and takes the three functions as class attributes. A cdef base for all three
    was the other way, and the worse one: a Python class deriving from a cdef class loses
    CPython's specialised instance-attribute reads (about three times slower on 3.11),
    which the Python engines' ``take`` makes on every step. None of the three moves is on
    a step's path: a stream calls them when it starts, when it closes, and after building
    the step ``take`` left to it.
    """

    def skip(self, g):
        """The consumer built step ``g``, which ``take`` left to it: move the window on. (A
        claim that is gone, the stream closed meanwhile from another thread, moves nothing.)"""
        with self._state:
            if self.window.skip(g):
                self._refill()

    def reposition(self, start, limit):
        """Serve steps ``[start, limit)``, keeping what was built when the window already
        stands at ``start``; True when ``start`` is the consumer's to build."""
        return _move(self, self.window.reposition, start, limit)

    def park(self, next_g, keep_prefetching):
        """The stream closed at ``next_g``: keep what was built for a stream resuming there
        (``StepWindow.park`` says when it is dropped instead)."""
        _move(self, self.window.park, next_g, keep_prefetching)


def _move(engine, move, at, argument):
    """``move(at, argument, drop)`` on ``engine``'s window under its lock; the batches a drop
    took from the ring are closed once the lock is let go, and before the refill, so that
    the new steps may be built in their blocks."""
    dropped = []
    with engine._state:
        answer = move(at, argument, lambda start: dropped.extend(engine._drop(start)))
    try:
        close_batches(dropped)
    finally:
        with engine._state:
            engine._refill()
    return answer


def close_batches(batches):
    """Close every batch of ``batches`` (None: an empty slot): what an engine's ring held."""
    for batch in batches:
        if batch is not None:
            batch.close()
