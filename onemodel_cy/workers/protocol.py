"""§1 what every worker engine answers: the ``Engine`` protocol, and what engines share.

A stream (``onemodel_cy.stream.BatchStream``) drives one engine at a time; the registry
(``registry.py``) chooses, keeps, fits or replaces, and ends them. Three engines implement
the protocol:

* ``threads.ThreadEngine``: worker threads running the pipeline's ``build``;
* ``lane.LaneEngine``: the packed lane, for a pipeline that ``splits()``: the consumer
  prepares each step, worker threads fill it without the GIL;
* ``processes.ProcessEngine``: worker processes (``worker_mode="process"``) building into
  shared memory from a task board.

Each owns a :class:`~onemodel_cy.workers.window.StepWindow` (which steps, in what order,
and which one is the consumer's to build) and adds only its mechanism (who builds, where
a batch lives, how a waiter wakes). What they do alike with their window, ``skip``,
``reposition`` and ``park``, is written once, in ``window.EngineBase``.

Closing comes in two steps: ``signal_close`` marks the engine closed and wakes every
waiter without waiting for anything (it may run at interpreter exit, or on a thread that
must not block); ``shutdown`` does that, then waits for the workers at most
``join_timeout`` seconds in all (``DataLoader(join_timeout=...)``, ``DEFAULT_JOIN_TIMEOUT``)
and reports a worker still inside user code then with a ``StuckWorkerWarning``: a thread
is left to end by itself; a process, which can be ended and so gets at most 2 s of the
wait (``processes._STOP_WAIT``), is terminated.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import weakref

    from onemodel_cy.collate.batch import ImageBatch
    from onemodel_cy.collate.pipeline import Pipeline
    from onemodel_cy.workers.window import StepWindow

__all__ = ["Engine", "StuckWorkerWarning", "DEFAULT_JOIN_TIMEOUT", "MAX_WORKERS", "MAX_PREFETCH"]

DEFAULT_JOIN_TIMEOUT = 10.0  # seconds, in all, to wait for workers finishing the batches they build
                             # (DataLoader's join_timeout)
# The largest worker count and window a DataLoader takes. Far past any use (each step of the
# window is a whole batch held in memory), and what the process engine's task board holds
# (prefetch + 2 * workers entries, at most 65,536); refused when the loader is made, not
# when a stream first needs the memory.
MAX_WORKERS = 1024
MAX_PREFETCH = 4096


class StuckWorkerWarning(UserWarning):
    """A worker was still inside dataset, transform or augmentation code (or a fill) when
    closing its stream stopped waiting for it (``DataLoader(join_timeout=...)``). A
    ``UserWarning``, so Python shows it by default (a ``ResourceWarning`` would be hidden)."""


@runtime_checkable
class Engine(Protocol):
    """A loader's workers and the ring they fill; serves one stream at a time.

    Driven by the consumer's thread; ``shutdown`` (and ``signal_close``) may come from any
    thread. Holds its loader weakly (``owner``), so a dropped loader is collected and ends
    its engines.
    """

    workers: int            # how many workers it was started with
    prefetch: int           # the window's depth
    persistent: bool        # parked between streams (persistent_workers) rather than ended
    join_timeout: float     # seconds, in all, shutdown waits for its workers (DataLoader's join_timeout)
    owner: "weakref.ref[Any]"
    pipeline: "Pipeline"
    window: "StepWindow"
    threads: list           # its worker threads or processes (for repr and the tests)
    closed: bool            # set by signal_close (and forsake): it serves nothing more
    forsaken: bool          # in a child made by fork: the engine is the parent's (forsake)

    def fits(self, loader: Any, workers: int) -> bool:
        """Whether it can serve ``loader``'s next stream with ``workers`` workers: the
        same pipeline, kind, worker count and prefetch, every worker alive."""

    def take(self, g: int, timeout: "float | None") -> "ImageBatch | None":
        """Step ``g``'s batch, waiting for it; None when ``g`` is the consumer's to build
        (the step the window claimed for it, ``window.local``: the first of a new or
        repositioned engine), which the consumer then builds and hands to ``skip``. Raises
        its build's exception, StopIteration once closed, TimeoutError after ``timeout``
        seconds (None: wait while a worker lives)."""

    def skip(self, g: int) -> None:
        """The consumer built step ``g``, which ``take`` left to it: move the window on."""

    def reposition(self, start: int, limit: "int | None") -> bool:
        """Serve steps ``[start, limit)``; True when ``start`` is the consumer's to build."""

    def park(self, next_g: int, keep_prefetching: bool) -> None:
        """The stream closed at ``next_g``: keep what was built for a stream resuming there."""

    def idle(self) -> bool:
        """Every live worker waits for a step, with nothing handed out or being built."""

    def signal_close(self) -> None:
        """Mark closed and wake every waiter (a consumer in ``take``, sleeping workers),
        and never wait: no join, no lock a worker may hold while it builds. Idempotent;
        does nothing once forsaken. Runs at interpreter exit (``registry.py``) and first
        in ``shutdown``."""

    def shutdown(self) -> None:
        """``signal_close``, then end the workers, waiting for them at most
        ``join_timeout`` seconds in all; a worker still inside user code then is named in
        a ``StuckWorkerWarning`` (a thread is left to end by itself, a process is
        terminated). Idempotent. Does nothing once forsaken."""

    def forsake(self) -> None:
        """(In a child made by ``fork``, on its only thread, before anything else runs.)
        The engine belongs to the parent, whose workers it shares: mark it closed and let
        go of this process's copies of what the parent's workers watch, without a lock
        (one may be held by a thread that does not exist here) and without a word to the
        workers. From then on ``fits`` is False and ``shutdown`` does nothing."""
