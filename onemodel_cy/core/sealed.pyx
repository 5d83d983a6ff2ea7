"""Sealed memory: storage a kernel reads without the GIL, in arrays no Python code can make writeable again.

Packed datasets, sampler tables and a sample's target live in arrays whose base is a
:class:`SealedMemory`: it exposes no buffer and no attribute, so numpy can never switch
them back to writeable, and the values checked when they were filled are the values a
GIL-free kernel reads (docs/safety.md). The raw memory comes from ``src/block_alloc.h``,
as the batch pool's does. A ``SealedMemory`` does not pickle (process-local memory).
"""
cimport cython
cimport numpy as cnp
import numpy as np
from libc.string cimport memcpy

from onemodel_cy.core.validate cimport checked_mul

cnp.import_array()

cdef extern from "block_alloc.h":
    void* block_alloc "om_block_alloc"(size_t nbytes) noexcept nogil
    void block_free "om_block_free"(void* block) noexcept nogil


@cython.final
@cython.auto_pickle(False)
cdef class SealedMemory:
    """Memory behind sealed read-only arrays (made only by this module's helpers).

    numpy lets an array be made writeable again only when its final base offers a
    writable buffer; this base offers no buffer and no attribute, so arrays over it stay
    read-only for good, and the values checked when they were filled are the values a
    GIL-free kernel reads.
    """

    def __cinit__(self):
        self.data = NULL
        self.owner = None

    def __init__(self):
        raise TypeError("SealedMemory cannot be built from Python; it backs the package's read-only arrays")

    def __dealloc__(self):
        if self.data != NULL:
            block_free(self.data)
            self.data = NULL

    def __repr__(self):
        return "<SealedMemory>"


cdef cnp.ndarray sealed_vector(Py_ssize_t n, int typenum):
    """``sealed_empty`` of one dimension: ``n`` items of ``typenum``."""
    cdef cnp.npy_intp dims[1]
    dims[0] = n
    return sealed_empty(1, dims, typenum)


cdef cnp.ndarray sealed_empty(int ndim, cnp.npy_intp* dims, int typenum):
    """A new C-contiguous array of ``dims`` over fresh sealed memory, still writable: fill
    it, then ``seal`` it before any Python code sees it. ``ValueError`` when the size does
    not fit, ``MemoryError`` when it cannot be allocated."""
    cdef Py_ssize_t nbytes = cnp.PyArray_DescrFromType(typenum).itemsize
    cdef int k
    for k in range(ndim):
        nbytes = checked_mul(nbytes, dims[k], "a sealed array's size")
    cdef SealedMemory memory = SealedMemory.__new__(SealedMemory)
    # Like batch memory: 2 MiB aligned with huge pages when large (a dataset's pixels are
    # read by every batch; without them the gather pays a TLB miss per 4 KiB), else
    # pointer-aligned from PyMem_RawMalloc (16 bytes), enough for every dtype stored here.
    memory.data = block_alloc(<size_t>nbytes if nbytes > 0 else 1)
    if memory.data == NULL:
        raise MemoryError(f"cannot allocate {nbytes} bytes of storage")
    cdef cnp.ndarray array = cnp.PyArray_SimpleNewFromData(ndim, dims, typenum, memory.data)
    cnp.set_array_base(array, memory)
    return array


cdef void seal(cnp.ndarray array) noexcept:
    """Clear ``writeable`` on an array over sealed memory: from then on it is read-only for good."""
    cnp.PyArray_CLEARFLAGS(array, cnp.NPY_ARRAY_WRITEABLE)


cdef cnp.ndarray sealed_copy(object array, int typenum, str name):
    """A sealed C-contiguous copy of ``array`` (already of the right kind), read-only."""
    cdef cnp.ndarray source = np.asarray(array)
    cdef cnp.ndarray out = sealed_empty(cnp.PyArray_NDIM(source), cnp.PyArray_DIMS(source), typenum)
    if (cnp.PyArray_TYPE(source) == typenum and cnp.PyArray_IS_C_CONTIGUOUS(source)
            and cnp.PyArray_ISNOTSWAPPED(source)):
        memcpy(cnp.PyArray_DATA(out), cnp.PyArray_DATA(source), cnp.PyArray_NBYTES(out))   # a target per sample
    else:
        out[...] = source
    seal(out)
    return out


cdef cnp.ndarray sealed_view(cnp.ndarray array):
    """A read-only view of ``array``'s memory (same shape, strides, native dtype) that cannot
    be made writeable: its base is a :class:`SealedMemory` holding ``array``."""
    cdef SealedMemory memory = SealedMemory.__new__(SealedMemory)
    memory.owner = array
    cdef cnp.ndarray view = cnp.PyArray_New(np.ndarray, cnp.PyArray_NDIM(array), cnp.PyArray_DIMS(array),
                                            cnp.PyArray_TYPE(array), cnp.PyArray_STRIDES(array),
                                            cnp.PyArray_DATA(array), 0, 0, None)
    cnp.set_array_base(view, memory)
    return view


cdef bint is_sealed(object array):
    """Whether ``array`` is read-only over memory a SealedMemory owns (numpy points a view's
    base at the first array that owns its memory, here the sealed array itself)."""
    if type(array) is not np.ndarray or cnp.PyArray_ISWRITEABLE(<cnp.ndarray>array):
        return False
    base = cnp.get_array_base(<cnp.ndarray>array)
    if type(base) is np.ndarray and not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>base):
        base = cnp.get_array_base(<cnp.ndarray>base)
    # Only memory the SealedMemory owns is sealed: a sealed *view* (owner set) is read-only
    # for its holder, but the caller who owns the memory can still write it.
    return type(base) is SealedMemory and (<SealedMemory>base).owner is None
