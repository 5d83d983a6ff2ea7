cimport cython


# One mapping of anonymous shared memory (see shmring.pyx); the task board maps its
# segment through it.
@cython.final
cdef class Segment:
    cdef char* addr
    cdef readonly size_t size
    cdef readonly int fd
