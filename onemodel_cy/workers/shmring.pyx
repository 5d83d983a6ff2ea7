"""Shared memory for process workers: the ring a stream's batches are built in (§1, §5).

A :class:`Segment` is one mapping of an anonymous shared-memory file (``memfd_create``
on Linux; elsewhere a temporary file unlinked as soon as it is open). It has no name in
``/dev/shm`` or anywhere else, so nothing can be left behind when a process dies, however
it dies: the memory goes when the last process mapping it has exited or unmapped it.
The file descriptor travels between processes over the worker's socket (``SCM_RIGHTS``).

Two pools, both :class:`~onemodel_cy.collate.bufferpool.BufferPool` subclasses, so a batch over
shared memory is an ordinary :class:`ImageBatch` whose arrays are views of a ``Block``:

* :class:`ShmRing`, the consumer's side: ring slots, each one segment. ``batch(slot,
  ...)`` wraps the segment a worker has just filled in a ``Block``; when that block dies
  (the batch and every view and tensor of it are gone) the slot goes back to the free
  list, and only then may a worker be handed it again. So a batch a user still holds is
  never overwritten, exactly as with the pool (§5).
* :class:`ShmPool`, a worker's side: the collator rents the batch's block from it; it
  hands out the target slot's segment when the batch fits, else private memory (the
  worker then grows the slot: :func:`copy_block` into a larger new segment).
"""
cimport cython
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset

import os
import tempfile

from onemodel_cy.collate.bufferpool cimport BufferPool, Block, RawBlock
from onemodel_cy.collate.batch cimport BatchLayout, ImageBatch, plan_layout, batch_in_block
from onemodel_cy.core.validate cimport as_index, as_size, checked_mul

cdef extern from "<sys/mman.h>" nogil:
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void* addr, size_t length)
    int madvise(void* addr, size_t length, int advice)
    int PROT_READ, PROT_WRITE, MAP_SHARED
    void* MAP_FAILED

cdef extern from *:
    """
    #include <sys/mman.h>
    #ifdef MADV_HUGEPAGE
    #define OM_MADV_HUGEPAGE MADV_HUGEPAGE
    #else
    #define OM_MADV_HUGEPAGE -1
    #endif
    """
    int OM_MADV_HUGEPAGE

PAGE = 4096
HUGE = 2 << 20


def shared_huge_pages():
    """Whether the kernel gives shared memory transparent huge pages where asked (Linux's
    ``shmem_enabled``; segments ask with ``madvise``). Many systems say "never": a
    segment then lies on 4 KiB pages, and the collator asks for its pages ahead
    (``Block.small_pages``)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled", encoding="ascii") as f:
            setting = f.read()
    except (OSError, ValueError):
        return False
    return setting[setting.find("[") + 1:setting.find("]")] in ("always", "within_size", "advise", "force")


cdef bint SHARED_HUGE_PAGES = shared_huge_pages()


def segment_size(nbytes):
    """The capacity a new segment gets for ``nbytes``: whole pages, whole 2 MiB huge pages
    from 2 MiB on (what the pool's own large blocks are aligned to)."""
    cdef Py_ssize_t n = as_size(nbytes, "nbytes")
    unit = HUGE if n >= HUGE else PAGE
    return max(unit, -(-n // unit) * unit)


def new_memory_fd(nbytes):
    """A file descriptor of ``nbytes`` of anonymous shared memory, named nowhere."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("onemodel_cy-ring", os.MFD_CLOEXEC)
    else:       # no memfd: a temporary file, unlinked at once (it lives while open or mapped)
        fd, path = tempfile.mkstemp(prefix="onemodel_cy-ring-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.unlink(path)
    try:
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


@cython.final
@cython.auto_pickle(False)
cdef class Segment:
    """One shared mapping of ``size`` bytes. ``fd`` stays open (to hand to another
    process) until ``close_fd()``; the mapping lives until the segment is collected.
    (Its fields are declared in shmring.pxd.)"""

    def __cinit__(self):
        self.addr = NULL
        self.fd = -1

    def __init__(self, fd, size):
        if self.addr != NULL:
            raise RuntimeError("Segment.__init__ was already called on this segment")
        cdef Py_ssize_t n = as_size(size, "size", 1)
        cdef int handle = as_index(fd, "fd")
        cdef void* p
        try:        # a mapping past the file's end would fault (SIGBUS) where it is read
            actual = os.fstat(handle).st_size
        except BaseException:
            os.close(handle)
            raise
        if n > actual:
            os.close(handle)
            raise ValueError(f"a mapping of {n} bytes was asked of a shared-memory file of {actual} bytes")
        with nogil:
            p = mmap(NULL, <size_t>n, PROT_READ | PROT_WRITE, MAP_SHARED, handle, 0)
        if p == MAP_FAILED:
            os.close(handle)
            raise MemoryError(f"cannot map {n} bytes of shared memory (fd {handle})")
        if OM_MADV_HUGEPAGE >= 0 and <size_t>n >= HUGE:
            madvise(p, <size_t>n, OM_MADV_HUGEPAGE)    # advice only
        self.addr = <char*>p
        self.size = <size_t>n
        self.fd = handle

    @staticmethod
    def create(nbytes):
        """A new segment of at least ``nbytes`` (see :func:`segment_size`)."""
        size = segment_size(nbytes)
        return Segment(new_memory_fd(size), size)

    def close_fd(self):
        """Close the descriptor; the mapping stays valid."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.addr != NULL:
            munmap(self.addr, self.size)
            self.addr = NULL
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __repr__(self):
        return f"<Segment {self.size} bytes>"


def copy_block(ImageBatch batch not None, Segment segment not None):
    """Copy ``batch``'s whole block into ``segment`` (a worker growing its slot)."""
    cdef Block block = batch.images.base
    if block.nbytes > segment.size:
        raise ValueError(f"a block of {block.nbytes} bytes does not fit a segment of {segment.size}")
    with nogil:
        memcpy(segment.addr, block.data, block.nbytes)


@cython.final
@cython.no_gc_clear     # blocks give their slot back through this object: never cleared first
@cython.auto_pickle(False)
cdef class ShmRing(BufferPool):
    """The consumer's ring of shared slots; a slot is free again when its batch's block dies.

    Slots are numbered from 0; ``new_slot()`` adds one (without memory: the first worker
    it is handed to gives it a segment). Only the consumer's thread calls the methods;
    blocks may die on any thread (under the GIL), and only append to ``free``.
    """
    cdef list segments          # slot -> Segment or None
    cdef RawBlock** headers     # slot -> its block header (size_class holds the slot number)
    cdef Py_ssize_t count, room
    cdef readonly list free     # free slots, most recently freed last
    cdef list held              # slot -> a batch (its block) lives in it
    cdef readonly bint closed   # the engine ended: a slot is unmapped once no batch holds it
    cdef readonly Py_ssize_t delivered

    def __cinit__(self):
        self.segments = []
        self.free = []
        self.held = []
        self.headers = NULL
        self.count = self.room = 0

    def __dealloc__(self):
        cdef Py_ssize_t k
        for k in range(self.count):
            free(self.headers[k])
        free(self.headers)

    def new_slot(self):
        """Add a slot (no memory yet) and return its number; it is not put on ``free``."""
        cdef RawBlock** grown
        cdef RawBlock* header = <RawBlock*>malloc(sizeof(RawBlock))
        if header == NULL:
            raise MemoryError("cannot add a ring slot")
        memset(header, 0, sizeof(RawBlock))
        cdef Py_ssize_t room = max(8, 2 * self.room)
        if self.count == self.room:
            grown = <RawBlock**>realloc_headers(self.headers, checked_mul(room, sizeof(RawBlock*), "the ring"))
            if grown == NULL:
                free(header)
                raise MemoryError("cannot add a ring slot")
            self.headers = grown
            self.room = room
        header.size_class = <int>self.count
        self.headers[self.count] = header
        self.segments.append(None)
        self.held.append(False)
        self.count += 1
        return self.count - 1

    @property
    def slots(self):
        return self.count

    def segment(self, slot):
        return self.segments[slot]

    def adopt(self, slot, Segment segment not None):
        """Slot ``slot`` (not held by any batch) now lives in ``segment``; the old one is unmapped."""
        self.segments[slot] = segment

    def release(self, slot):
        """A slot a worker filled that became no batch (a stale or failed build)."""
        self.free.append(slot)

    def close(self):
        """The engine ended: close every segment's descriptor and unmap every slot no batch
        holds; a slot a batch holds is unmapped when that batch dies. So a batch kept past
        the end keeps its own slot mapped, not the ring."""
        cdef Py_ssize_t k
        self.closed = True
        for k in range(self.count):
            segment = self.segments[k]
            if segment is not None:
                segment.close_fd()
                if not self.held[k]:
                    self.segments[k] = None

    def batch(self, slot, n, channels, height, padded, total_targets, epoch, step, global_step):
        """The ImageBatch a worker built into ``slot``, as views of its segment; refuses a
        report whose layout does not fit the segment."""
        cdef Py_ssize_t k = as_index(slot, "slot")
        if not k < self.count or self.segments[k] is None:
            raise RuntimeError(f"a worker reported slot {k}, which has no shared memory")
        cdef Segment segment = self.segments[k]
        cdef BatchLayout layout
        plan_layout(&layout, as_size(n, "n", 1), as_size(channels, "channels", 1), as_size(height, "height", 1),
                    as_size(padded, "padded", 1), as_size(total_targets, "total_targets"))
        if <size_t>layout.nbytes > segment.size:
            raise RuntimeError(f"a worker reported a batch of {layout.nbytes} bytes in a slot of {segment.size}")
        cdef Block block = Block.__new__(Block)
        block.pool = self
        block.nbytes = layout.nbytes
        block.data = segment.addr
        self.held[k] = True
        block.raw = self.headers[k]      # last: from here on, the block's death frees the slot
        self.delivered += 1
        return batch_in_block(block, &layout, epoch, step, global_step)

    cdef Block rent(self, size_t nbytes):
        raise TypeError("a ShmRing hands out only the batches workers built (ShmRing.batch)")

    cdef void give_back(self, RawBlock* raw) noexcept:
        cdef Py_ssize_t k = raw.size_class
        self.held[k] = False
        if self.closed:
            self.segments[k] = None     # its last batch is gone: unmapped
        else:
            self.free.append(k)

    def __repr__(self):
        return f"ShmRing(slots={self.count}, free={len(self.free)})"


cdef extern from "<stdlib.h>" nogil:
    void* realloc_headers "realloc"(void* p, size_t n)


@cython.final
@cython.auto_pickle(False)
cdef class ShmPool(BufferPool):
    """A worker's batch pool: the next rent gets the target segment when the batch fits,
    else private memory (``last_shared`` tells which). One rent per target."""
    cdef Segment target
    cdef RawBlock shared_header     # the header of blocks over the target: nothing to give back
    cdef readonly bint last_shared

    def __cinit__(self):
        self.target = None
        memset(&self.shared_header, 0, sizeof(RawBlock))

    def aim(self, Segment segment):
        """The segment the next batch is built in (None: private memory)."""
        self.target = segment
        self.last_shared = False

    cdef Block rent(self, size_t nbytes):
        cdef Segment segment = self.target
        cdef Block block
        self.target = None
        if segment is None or nbytes > segment.size:
            self.last_shared = False
            return BufferPool.rent(self, nbytes)
        block = Block.__new__(Block)
        block.pool = self
        block.nbytes = nbytes
        block.data = segment.addr
        block.raw = &self.shared_header
        block.small_pages = not SHARED_HUGE_PAGES
        self.last_shared = True
        return block

    cdef void give_back(self, RawBlock* raw) noexcept:
        if raw != &self.shared_header:
            BufferPool.give_back(self, raw)
