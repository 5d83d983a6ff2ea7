# §5 buffer pool: raw memory recycled when the last Python reference to it goes away.
cimport cython
cimport numpy as cnp
from onemodel_cy.core.typedefs cimport u64

cdef enum:
    POOL_CLASSES = 256
    POOL_ALIGN = 64

cdef struct RawBlock:
    RawBlock* next          # free-list link while the block is free
    size_t capacity         # usable bytes after the header
    int size_class

cdef class BufferPool:
    cdef cython.pymutex _mutex
    cdef RawBlock* _free[POOL_CLASSES]
    cdef readonly size_t max_bytes
    cdef size_t _bytes_held, _bytes_in_use
    cdef Py_ssize_t _hits, _misses, _released, _dropped, _blocks_in_use, _reserved
    cdef Py_ssize_t _free_count[POOL_CLASSES]     # blocks waiting in each class
    cdef Py_ssize_t _class_in_use[POOL_CLASSES]   # blocks of each class held by callers
    cdef bint _initialised
    cdef Block rent(self, size_t nbytes)
    cdef void give_back(self, RawBlock* raw) noexcept
    cdef Py_ssize_t blocks_fitting(self, int size_class) noexcept nogil
    cdef size_t free_bytes_below(self, int size_class) noexcept nogil
    cdef RawBlock* pop_free_below(self, int size_class) noexcept nogil
    cdef int reserve_one(self, int size_class, size_t capacity, Py_ssize_t wanted) noexcept nogil

cdef class Block:
    """One rented allocation; when the last reference goes, its memory returns to the pool."""
    cdef BufferPool pool
    cdef RawBlock* raw
    cdef char* data            # 64-byte aligned start of usable memory
    cdef readonly size_t nbytes
    cdef bint small_pages       # lies on 4 KiB pages (collator.copy_images asks for them ahead)
