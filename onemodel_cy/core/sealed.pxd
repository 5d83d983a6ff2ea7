# Sealed memory: storage behind read-only arrays that no Python code can make writeable (sealed.pyx).
cimport numpy as cnp


cdef class SealedMemory:
    """The base of a sealed array: memory (or an array) behind read-only arrays that
    exposes no buffer and no attribute, so numpy can never make them writeable again."""
    cdef void* data            # owned memory (the pool's block allocator), or NULL when sealing ``owner``
    cdef object owner          # the array whose memory a sealed view shows, or None

cdef cnp.ndarray sealed_empty(int ndim, cnp.npy_intp* dims, int typenum)
cdef cnp.ndarray sealed_vector(Py_ssize_t n, int typenum)
cdef cnp.ndarray sealed_copy(object array, int typenum, str name)
cdef cnp.ndarray sealed_view(cnp.ndarray array)
cdef bint is_sealed(object array)
cdef void seal(cnp.ndarray array) noexcept
