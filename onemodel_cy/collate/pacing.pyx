"""How worker threads that share the GIL take turns for the Python parts of a batch.

The loader owns one :class:`Pacing` and hands it to every worker's workspace; the
collator and the fetch step only take and give back its baton (``src/pacing.h`` explains
why a baton helps). A collation without a pacing object (``collate`` called directly, or
0 workers) takes no baton and stages its Python augmentation in one part.
"""
from onemodel_cy.core.validate cimport as_index


cdef class Pacing:
    """The Python-stage baton shared by one loader's workers.

    Parameters
    ----------
    enabled : bool, default True
        False turns the baton off (every worker runs its Python stage at once).
    wait_ns : int, default 1_000_000
        How long a worker spins for the baton before going ahead without it: longer
        than the Python stage of a typical batch, so that the baton is rarely given up
        (docs/performance.md, "Measurements behind the code").
    stage_parts : int, default 2
        A Python augmentation stages and augments a batch in this many parts: with two,
        the Python and the copy phases of two workers come out of similar length and
        interleave (docs/performance.md, "Measurements behind the code").
    """

    def __init__(self, enabled=True, wait_ns=1_000_000, stage_parts=2):
        if self._claimed:
            raise RuntimeError("Pacing.__init__ was already called on this object (workers may be "
                               "using it); build a new one")
        self._claimed = True
        wait = as_index(wait_ns, "wait_ns")
        parts = as_index(stage_parts, "stage_parts")
        if not 0 <= wait <= 10**9:
            raise ValueError(f"wait_ns must be an integer in [0, 10**9], received {wait}")
        if not 1 <= parts <= 64:
            raise ValueError(f"stage_parts must be an integer in [1, 64], received {parts}")
        self.enabled = bool(enabled)
        self.wait_ns = wait
        self.stage_parts = parts
        self.baton = 0

    @property
    def held(self):
        """True while some thread holds the baton."""
        return self.baton != 0

    def forsake_holder(self):
        """(After fork, in the child.) A baton held by one of the parent's threads, which do
        not exist here, is free: else each worker of the child would wait ``wait_ns`` for
        it at every Python stage."""
        self.baton = 0

    def __repr__(self):
        return f"Pacing(enabled={self.enabled}, wait_ns={self.wait_ns}, stage_parts={self.stage_parts})"

    def __reduce__(self):
        return (Pacing, (self.enabled, self.wait_ns, self.stage_parts))
