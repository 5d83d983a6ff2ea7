"""The task board of process workers (``worker_mode="process"``, §1): who builds which step.

The consumer posts every step of its window on a board in shared memory; a worker that
is free takes the posted step with the lowest global step, whichever worker it is. A
compare-and-swap marks the entry with the worker's number, so two workers never take one
step, and the steps a dead worker held are known from their marks. Why pull instead of
handing each step to a worker in turn: when one core is slowed for a while (a shared
machine), the steps of the window that worker would have been handed go to the other
one instead of waiting behind it; and a busy worker learns its next step with no system
call.

Waiting: a worker that finds nothing posted counts itself among the sleepers, looks once
more, and only then sleeps on the doorbell (a pipe); the consumer writes a byte to the
doorbell for each post made while someone sleeps. With sequentially consistent atomics on
both sides either the worker's second look finds the post or the consumer sees the
sleeper, so no post is missed; a byte nobody needed costs one spurious wake-up.

Layout (64-bit words in one shared segment): a header line (stopping, sleepers, entry
count), then one 64-byte line per entry: state, task, global step, slot, segment version,
size hint. States: FREE, POSTED, or CLAIMED + k (taken by worker k). Only the consumer
posts, revokes and frees; only workers claim.
"""
cimport cython
from libc.stdint cimport int64_t

from onemodel_cy.workers.shmring cimport Segment
from onemodel_cy.core.validate cimport as_size

cdef extern from *:
    """
    #include <stdint.h>
    static inline int64_t om_board_load(int64_t* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline void om_board_store(int64_t* p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    static inline int64_t om_board_add(int64_t* p, int64_t d) { return __atomic_add_fetch(p, d, __ATOMIC_SEQ_CST); }
    static inline int om_board_cas(int64_t* p, int64_t expected, int64_t desired) {
        return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    """
    int64_t load "om_board_load"(int64_t* p) noexcept nogil
    void store "om_board_store"(int64_t* p, int64_t v) noexcept nogil
    int64_t add "om_board_add"(int64_t* p, int64_t d) noexcept nogil
    bint cas "om_board_cas"(int64_t* p, int64_t expected, int64_t desired) noexcept nogil

cdef enum:
    WORDS = 8               # per line: the header and each entry are one 64-byte line
    STOPPING = 0            # header words
    SLEEPERS = 1
    COUNT = 2
    STATE = 0               # entry words
    TASK = 1
    STEP = 2
    SLOT = 3
    VERSION = 4
    HINT = 5
    FREE = 0                # entry states
    POSTED = 1
    CLAIMED = 2

MAX_ENTRIES = 1 << 16


def board_bytes(entries):
    """The bytes of a board of ``entries`` entries."""
    return 8 * WORDS * (1 + as_size(entries, "entries", 1, MAX_ENTRIES))


@cython.final
@cython.auto_pickle(False)
cdef class TaskBoard:
    """A board over one shared :class:`~onemodel_cy.workers.shmring.Segment` (see the module)."""
    cdef Segment segment        # holds the mapping while the board lives
    cdef int64_t* words
    cdef readonly Py_ssize_t entries

    def __init__(self, Segment segment not None, entries=None):
        """The consumer makes the board with its ``entries`` (on a new, zeroed segment: all
        entries free); a worker opens it with None and reads the count, which it checks
        against the segment's size before it trusts it."""
        if self.words != NULL:
            raise RuntimeError("TaskBoard.__init__ was already called on this board")
        cdef int64_t* words = <int64_t*>segment.addr
        cdef Py_ssize_t lines = <Py_ssize_t>(segment.size // (8 * WORDS))
        if words == NULL or lines < 2:
            raise ValueError(f"a task board needs a mapped segment of at least {2 * 8 * WORDS} bytes, "
                             f"not {segment!r}")
        if entries is not None:
            needed = board_bytes(entries)
            if needed > segment.size:
                raise ValueError(f"a board of {entries} entries needs {needed} bytes, the segment has {segment.size}")
            store(&words[COUNT], entries)
        cdef int64_t count = load(&words[COUNT])
        if not 1 <= count < lines:
            raise ValueError(f"a task board of {segment.size} bytes cannot hold the {count} entries it says it has")
        self.segment = segment
        self.words = words
        self.entries = count

    @staticmethod
    def create(entries):
        """A new board of ``entries`` free entries in a new segment."""
        return TaskBoard(Segment.create(board_bytes(entries)), entries)

    @property
    def fd(self):
        """The segment's descriptor (to hand to a worker), -1 once closed."""
        return self.segment.fd

    def close_fd(self):
        self.segment.close_fd()

    cdef inline int64_t* entry(self, Py_ssize_t k) noexcept:
        return self.words + WORDS * (1 + k)

    cdef inline int64_t* checked_entry(self, object k) except NULL:
        cdef Py_ssize_t i = as_size(k, "entry")
        if not i < self.entries:
            raise IndexError(f"entry {i} of a task board of {self.entries}")
        return self.entry(i)

    cdef Py_ssize_t free_entry(self) noexcept:
        """The first free entry, or -1."""
        cdef Py_ssize_t k
        for k in range(self.entries):
            if load(&self.entry(k)[STATE]) == FREE:
                return k
        return -1

    # -- the consumer's side -------------------------------------------------------------

    def post(self, int64_t task, int64_t g, int64_t slot, int64_t version, int64_t hint):
        """Post step ``g`` in a free entry: (the entry, whether a worker sleeps)."""
        cdef Py_ssize_t k = self.free_entry()
        if k < 0:
            raise RuntimeError(f"all {self.entries} entries of the task board are in use")
        cdef int64_t* e = self.entry(k)
        store(&e[TASK], task)
        store(&e[STEP], g)
        store(&e[SLOT], slot)
        store(&e[VERSION], version)
        store(&e[HINT], hint)
        store(&e[STATE], POSTED)
        return k, load(&self.words[SLEEPERS]) > 0

    def has_room(self):
        """Whether an entry is free for a post."""
        return self.free_entry() >= 0

    def revoke(self, k):
        """Take back a posted entry no worker has claimed: True, or False when one has."""
        return cas(&self.checked_entry(k)[STATE], POSTED, FREE)

    def free(self, k):
        """The entry's step was answered (or its worker is gone): the entry is free again."""
        store(&self.checked_entry(k)[STATE], FREE)

    def claimant(self, k):
        """The number of the worker holding the entry, or -1."""
        cdef int64_t state = load(&self.checked_entry(k)[STATE])
        return state - CLAIMED if state >= CLAIMED else -1

    def stop(self):
        """Tell every worker to take nothing more."""
        store(&self.words[STOPPING], 1)

    # -- a worker's side -----------------------------------------------------------------

    def claim(self, int worker):
        """Take the posted step with the lowest global step for ``worker``: (entry, task, g,
        slot, version, hint), or None when nothing is posted."""
        cdef Py_ssize_t k, best
        cdef int64_t g, best_g = 0
        cdef int64_t* e
        if worker < 0:
            raise ValueError(f"worker numbers start at 0, not {worker}")
        while True:
            best = -1
            for k in range(self.entries):
                e = self.entry(k)
                if load(&e[STATE]) == POSTED:
                    g = load(&e[STEP])     # a hint: the entry may change until the swap below
                    if best < 0 or g < best_g:
                        best, best_g = k, g
            if best < 0:
                return None
            e = self.entry(best)
            if cas(&e[STATE], POSTED, CLAIMED + worker):     # ours: the consumer leaves it alone now
                return best, load(&e[TASK]), load(&e[STEP]), load(&e[SLOT]), load(&e[VERSION]), load(&e[HINT])

    def sleeping(self, int delta):
        """A worker starts (+1) or stops (-1) sleeping; the new count."""
        return add(&self.words[SLEEPERS], delta)

    @property
    def sleepers(self):
        return load(&self.words[SLEEPERS])

    @property
    def stopping(self):
        return load(&self.words[STOPPING]) != 0

    def __repr__(self):
        return f"TaskBoard(entries={self.entries}, sleepers={self.sleepers})"
