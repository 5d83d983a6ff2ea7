"""§5 BufferPool: the memory batches are built in, reused without being overwritten.

A rented :class:`Block` owns raw memory; every array handed to a user is a view whose
base is that block. The memory goes back to the pool only when the block itself is
destroyed, that is when no array, view, tensor or batch refers to it any more. So memory
a caller still holds is never reused, and two live batches never share memory; a batch
that is closed (or simply dropped) recycles its memory at once.

Free blocks wait in per-size-class lists (4 classes per power of two, so a block of the
request's own class has at most 25 % slack). A request whose class is empty borrows the
smallest larger free block rather than allocating; a small batch then holds a larger
block while it lives. The pool keeps at most ``max_bytes`` of free memory; blocks
returned beyond that are freed. Memory in use is bounded by what the caller keeps alive.

The other memory home, sealed storage that a kernel reads without the GIL, is
``core/sealed.pyx``; both get their raw memory from ``src/block_alloc.h``.

Neither a pool nor a block pickles (they are process-local memory): pickling one is a
``TypeError``.
"""
cimport cython
cimport numpy as cnp
from libc.stdint cimport uintptr_t

from onemodel_cy.core.validate cimport as_size, checked_add

cnp.import_array()

cdef extern from "block_alloc.h":
    void* block_alloc "om_block_alloc"(size_t nbytes) noexcept nogil
    void block_free "om_block_free"(void* block) noexcept nogil

DEFAULT_MAX_BYTES = 256 << 20

# Room for the header and for aligning the data to POOL_ALIGN bytes.
cdef size_t OVERHEAD = sizeof(RawBlock) + POOL_ALIGN


cdef size_t LARGEST = (<size_t>1) << 48     # far beyond any batch; keeps the class arithmetic exact


cdef inline int class_of(size_t nbytes, size_t* rounded) noexcept nogil:
    """Size class index and the rounded capacity: 4 KiB minimum, then quarter steps per power of two.

    -1 for ``nbytes > LARGEST``: below that bound every product and sum here (and
    ``OVERHEAD + capacity``) is exact, so callers refuse larger requests first.
    """
    cdef size_t top = 4096
    cdef int power = 12
    if nbytes > LARGEST:
        return -1
    if nbytes <= 4096:
        rounded[0] = 4096
        return 0
    while top * 2 < nbytes:
        top *= 2
        power += 1
    # nbytes in (top, 2*top]: round up to a multiple of top/4.
    cdef size_t quarter = top // 4
    cdef size_t quarters = (nbytes + quarter - 1) // quarter     # 5..8
    rounded[0] = quarters * quarter
    return 1 + (power - 12) * 4 + <int>(quarters - 5)


@cython.auto_pickle(False)      # process-local memory: pickling is refused (TypeError)
cdef class BufferPool:
    """Recycles batch memory (§5).

    Parameters
    ----------
    max_bytes : int, default 256 MiB
        Most free memory the pool keeps for reuse; memory returned beyond it is freed.

    Notes
    -----
    Thread-safe: blocks are rented by worker threads and come back from whichever
    thread drops the last reference.
    """

    def __cinit__(self):
        cdef int i
        for i in range(POOL_CLASSES):
            self._free[i] = NULL
            self._free_count[i] = 0
            self._class_in_use[i] = 0

    def __init__(self, max_bytes=DEFAULT_MAX_BYTES):
        if self._initialised:
            raise RuntimeError("BufferPool.__init__ was already called on this pool; build a new BufferPool")
        self.max_bytes = <size_t>as_size(max_bytes, "max_bytes")
        self._initialised = True

    def __dealloc__(self):
        cdef int i
        cdef RawBlock* raw
        for i in range(POOL_CLASSES):
            while self._free[i] != NULL:
                raw = self._free[i]
                self._free[i] = raw.next
                block_free(raw)

    def __repr__(self):
        return f"BufferPool(max_bytes={self.max_bytes})"

    cdef Block rent(self, size_t nbytes):
        cdef size_t capacity
        cdef int size_class = class_of(nbytes, &capacity)
        if size_class < 0:
            raise MemoryError(f"a batch buffer of {nbytes} bytes is beyond what the pool serves ({LARGEST})")
        # The block object first: once it holds the memory, its destruction returns it,
        # whatever fails afterwards.
        cdef Block block = Block.__new__(Block)
        block.pool = self
        block.nbytes = nbytes
        cdef RawBlock* raw = NULL
        cdef int c = size_class
        with self._mutex:
            # The request's own class first, else the smallest larger free block: batches
            # of varying width then never miss once the window is held in the largest class.
            while c < POOL_CLASSES and self._free[c] == NULL:
                c += 1
            if c < POOL_CLASSES:
                raw = self._free[c]
                self._free[c] = raw.next
                self._free_count[c] -= 1
                self._bytes_held -= raw.capacity
                self._hits += 1
            else:
                self._misses += 1
        if raw == NULL:
            raw = <RawBlock*>block_alloc(OVERHEAD + capacity)
            if raw == NULL:
                raise MemoryError(f"cannot allocate a batch buffer of {capacity} bytes")
            raw.capacity = capacity
            raw.size_class = size_class
        raw.next = NULL
        with self._mutex:
            self._blocks_in_use += 1
            self._class_in_use[raw.size_class] += 1
            self._bytes_in_use += raw.capacity
        block.raw = raw
        block.data = <char*>((<uintptr_t>raw + sizeof(RawBlock) + POOL_ALIGN - 1)
                             // POOL_ALIGN * POOL_ALIGN)
        return block

    cdef void give_back(self, RawBlock* raw) noexcept:
        cdef bint keep
        with self._mutex:
            self._blocks_in_use -= 1
            self._class_in_use[raw.size_class] -= 1
            self._bytes_in_use -= raw.capacity
            keep = self._bytes_held + raw.capacity <= self.max_bytes
            if keep:
                raw.next = self._free[raw.size_class]
                self._free[raw.size_class] = raw
                self._free_count[raw.size_class] += 1
                self._bytes_held += raw.capacity
                self._released += 1
            else:
                self._dropped += 1
        if not keep:
            block_free(raw)

    def reserve(self, nbytes, count):
        """Make sure the pool owns ``count`` blocks that fit ``nbytes`` (of its size class
        or larger), counting those in use, by allocating free ones within ``max_bytes``;
        free blocks too small for ``nbytes`` are given up first when ``max_bytes`` is in
        the way. Returns how many blocks it allocated. The loader reserves its whole
        prefetch window at the largest batch size it has seen; smaller batches borrow
        those blocks, so steady state never misses.

        Each block is checked against ``max_bytes`` and added under the pool's mutex, in
        one step: streams sharing a pool and reserving at once never exceed it together.
        """
        cdef size_t size = <size_t>as_size(nbytes, "nbytes", 0, <Py_ssize_t>LARGEST)
        cdef Py_ssize_t wanted = as_size(count, "count")
        cdef size_t capacity
        cdef int size_class = class_of(size, &capacity)
        cdef Py_ssize_t added = 0
        cdef int status
        while True:
            with self._mutex:
                status = self.reserve_one(size_class, capacity, wanted)
            if status == 0:
                return added
            if status < 0:
                raise MemoryError(f"cannot allocate a batch buffer of {capacity} bytes")
            added += status - 1

    cdef int reserve_one(self, int size_class, size_t capacity, Py_ssize_t wanted) noexcept nogil:
        """One step of ``reserve`` (call with the mutex held): 0 when done, 1 after giving
        up a smaller free block, 2 after adding a block, -1 when the allocation failed."""
        cdef RawBlock* smaller
        cdef RawBlock* raw
        if self.blocks_fitting(size_class) >= wanted:
            return 0
        if self._bytes_held + capacity > self.max_bytes:
            # Give up smaller free blocks only when that makes room.
            if self._bytes_held - self.free_bytes_below(size_class) + capacity > self.max_bytes:
                return 0
            smaller = self.pop_free_below(size_class)
            self._dropped += 1
            block_free(smaller)
            return 1
        raw = <RawBlock*>block_alloc(OVERHEAD + capacity)
        if raw == NULL:
            return -1
        raw.capacity = capacity
        raw.size_class = size_class
        raw.next = self._free[size_class]
        self._free[size_class] = raw
        self._free_count[size_class] += 1
        self._bytes_held += capacity
        self._reserved += 1
        return 2

    cdef Py_ssize_t blocks_fitting(self, int size_class) noexcept nogil:
        """Blocks of ``size_class`` or larger, free or in use (call with the mutex held)."""
        cdef Py_ssize_t total = 0
        cdef int c
        for c in range(size_class, POOL_CLASSES):
            total += self._free_count[c] + self._class_in_use[c]
        return total

    cdef size_t free_bytes_below(self, int size_class) noexcept nogil:
        """Bytes held in free blocks of classes below ``size_class`` (call with the mutex held)."""
        cdef size_t total = 0
        cdef int c
        for c in range(size_class):
            if self._free[c] != NULL:
                total += <size_t>self._free_count[c] * self._free[c].capacity
        return total

    cdef RawBlock* pop_free_below(self, int size_class) noexcept nogil:
        """Take one free block of a class below ``size_class`` off its list, or NULL
        (call with the mutex held)."""
        cdef int c
        cdef RawBlock* raw
        for c in range(size_class):
            raw = self._free[c]
            if raw != NULL:
                self._free[c] = raw.next
                self._free_count[c] -= 1
                self._bytes_held -= raw.capacity
                return raw
        return NULL

    def stats(self):
        """Counters: ``hits`` and ``misses`` of rent, ``returned`` and ``dropped``
        (freed because the pool was full) blocks, ``reserved`` blocks allocated ahead by
        ``reserve``, ``bytes_held`` free for reuse, ``blocks_in_use`` and ``bytes_in_use``
        still referenced somewhere."""
        with self._mutex:
            return {
                "hits": self._hits,
                "misses": self._misses,
                "reserved": self._reserved,
                "returned": self._released,
                "dropped": self._dropped,
                "bytes_held": self._bytes_held,
                "blocks_in_use": self._blocks_in_use,
                "bytes_in_use": self._bytes_in_use,
            }

    def clear(self):
        """Free all memory held for reuse (blocks in use are unaffected)."""
        cdef int i
        cdef RawBlock* raw
        cdef RawBlock* chain
        for i in range(POOL_CLASSES):
            with self._mutex:
                chain = self._free[i]
                self._free[i] = NULL
                self._free_count[i] = 0
                while chain != NULL:
                    self._bytes_held -= chain.capacity
                    raw = chain
                    chain = chain.next
                    block_free(raw)


@cython.final
@cython.auto_pickle(False)      # process-local memory: pickling is refused (TypeError)
@cython.freelist(64)
# no_gc: a Block refers only to its pool, which refers to nothing: no cycle, and no
# tp_clear that could drop the pool before __dealloc__ gives memory back
@cython.no_gc
cdef class Block:
    def __dealloc__(self):
        if self.raw != NULL:
            self.pool.give_back(self.raw)
            self.raw = NULL


@cython.final
cdef class PoolWindow:
    """The prefetch window of one stream in a pool: the one home of the window policy.

    A stream keeps at most ``count`` batches alive at once (its ring slots, one per
    worker, the consumer's). ``fit(nbytes)``, called with each batch's size by the thread
    that built it, has the pool hold ``count`` blocks of the largest size seen so far;
    smaller batches borrow those blocks, so steady state never misses, whatever the
    widths. The blocks are reserved as the stream reaches them: one more than the batches
    built so far, up to ``count``, so a deep window over a short stream holds blocks for
    the batches it builds, not for its depth. Reserving is only a head start: when the
    pool cannot (``max_bytes``, memory), ``rent`` allocates what it must.

    Parameters
    ----------
    pool : BufferPool
    count : int
        Batches alive at once.
    """
    cdef readonly BufferPool pool
    cdef readonly Py_ssize_t count
    cdef readonly size_t reserved       # the largest batch size the window is held at
    cdef readonly Py_ssize_t fitted     # batches fitted so far, counted up to ``count``
    cdef cython.pymutex _mutex
    cdef bint _claimed

    def __init__(self, BufferPool pool not None, count):
        if self._claimed:
            raise RuntimeError("PoolWindow.__init__ was already called on this object (workers may be "
                               "using it); build a new one")
        self._claimed = True
        self.pool = pool
        self.count = as_size(count, "count")
        self.reserved = 0
        self.fitted = 0

    def __reduce__(self):
        raise TypeError("a PoolWindow belongs to one stream of one process and cannot be pickled")

    @staticmethod
    def for_stream(BufferPool pool not None, prefetch, workers):
        """The window of a stream with ``prefetch`` ring slots and ``workers`` workers: at
        most that many batches wait in the ring, one more is being built by each worker,
        and one is the consumer's."""
        return PoolWindow(pool, checked_add(checked_add(as_size(prefetch, "prefetch"),
                                                        as_size(workers, "workers"), "the window"),
                                            1, "the window"))

    def fit(self, nbytes):
        """Hold the window at ``nbytes`` if that is the largest batch size seen."""
        cdef size_t size = as_size(nbytes, "nbytes")
        cdef Py_ssize_t wanted
        if size <= self.reserved and self.fitted == self.count:    # the steady state: no lock taken
            return
        with self._mutex:
            if self.fitted < self.count:
                self.fitted += 1
            wanted = min(self.fitted + 1, self.count)
            size = max(size, self.reserved)
        try:
            self.pool.reserve(size, wanted)
        except MemoryError:
            pass                         # only a head start: rent allocates what it must
        with self._mutex:
            if size > self.reserved:
                self.reserved = size
