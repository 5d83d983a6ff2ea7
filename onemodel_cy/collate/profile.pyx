"""Where a loader's time went: the counters behind ``DataLoader.profile()``.

One :class:`StageClock` per loader, in each process. The consumer adds the time it spent
building batches itself and waiting in an engine's ``take``; every thread that builds
with the loader's workspaces (the consumer, worker threads) adds the time of its Python
stages (``get_sample``, the transform, a Python augmentation) and of its copies. Always
on: a clock read costs tens of nanoseconds, and a batch takes a few (around its
``get_sample`` loop, each staging part's augmentation calls and each copy; two a sample
only with a transform, to tell it from ``get_sample``), and the consumer's stopwatch two
(docs/performance.md, "Where the time went"). A worker process keeps its own figures;
the consumer sees only its waits. The sums are added under the GIL by the thread that
measured them (on a free-threaded build two threads may lose an addition: the figures
are a report, nothing depends on them).
"""


cdef class StageClock:
    """The counters of one loader in this process (``DataLoader.profile()`` reads them)."""

    def __cinit__(self):
        self.start_ns = clock_ns()

    def reset(self):
        """Start the figures afresh, from now."""
        self.batches = self.build_ns = self.wait_ns = 0
        self.get_sample_ns = self.transform_ns = self.augmentation_ns = self.copy_ns = 0
        self.start_ns = clock_ns()

    def now_ns(self):
        """The clock's reading now (monotonic nanoseconds, the same clock as ``start_ns``)."""
        return clock_ns()

    def __reduce__(self):
        return (StageClock, ())     # another process starts its own figures


cdef class ConsumerTimer:
    """One stream's stopwatch over its consumer's ``next()``: ``begin()``, then
    ``built()`` after building a batch itself or ``waited()`` after taking one from an
    engine, adds that time and the batch to ``clock``. (Its own object so that two
    streams of one loader on two threads keep apart; and calls that return nothing,
    so that timing a batch allocates nothing on the consumer.)"""

    def __init__(self, StageClock clock not None):
        self.clock = clock

    def begin(self):
        self.mark = clock_ns()

    def built(self):
        self.clock.build_ns += clock_ns() - self.mark
        self.clock.batches += 1

    def waited(self):
        self.clock.wait_ns += clock_ns() - self.mark
        self.clock.batches += 1

    def __reduce__(self):
        raise TypeError("a ConsumerTimer belongs to one stream and cannot be pickled")
