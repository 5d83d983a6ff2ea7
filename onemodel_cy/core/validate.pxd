# Every argument check of the package, and overflow-checked size arithmetic (one home).
#
# One rule for exception types, everywhere:
#   TypeError   the wrong kind of object: not an integer, not an array, wrong dtype,
#               wrong number of dimensions, memory layout not accepted;
#   ValueError  the right kind with a value out of range: a negative size, a shape that
#               does not match, a size product that does not fit in memory;
#   IndexError  a dataset index out of range;
#   RuntimeError an object used in a state it cannot serve: never initialised,
#               initialised twice, a workspace already in use.
from onemodel_cy.core.typedefs cimport u64

cdef extern from "checked.h":
    bint mul_overflows "om_mul_overflow"(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) noexcept nogil
    bint add_overflows "om_add_overflow"(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) noexcept nogil

cdef object as_index(object value, str name)
cdef u64 as_u64(object value, str name) except? 0
cdef u64 as_count(object value, str name, u64 minimum=*) except? 0
cdef Py_ssize_t as_size(object value, str name, Py_ssize_t minimum=*, Py_ssize_t maximum=*) except? -1
cdef float as_float32(object value, str name) except? -1
cdef str describe(object obj)
# An aligned, C-contiguous, native float32 [C, H, W] ndarray (and writable when asked):
# what a GIL-free image kernel may read (numpy's C fields, never Python attributes).
cdef bint is_planar_float32(object image, bint writable)
cdef object as_integer_vector(object value, str name)
cdef double as_real(object value, str name) except? -1
cdef Py_ssize_t checked_mul(Py_ssize_t a, Py_ssize_t b, str what) except? -1
cdef Py_ssize_t checked_add(Py_ssize_t a, Py_ssize_t b, str what) except? -1
# error.add_note(note) (PEP 678), also on Python 3.10, which has no add_note.
cdef int add_note(object error, str note) except -1
