# §3 samplers: the base and its cdef interface, shared with the table samplers (tablesamplers.pyx).
cimport numpy as cnp

from onemodel_cy.core.typedefs cimport u64, i64


cdef class Sampler:
    cdef Py_ssize_t _batch_size
    cdef Py_ssize_t _steps_per_epoch
    cdef bint _initialised          # set last by a built-in constructor
    cdef bint _claimed              # set first by a built-in constructor: a second __init__ is refused
    cdef bint _python               # ``indices`` is a Python override: use it

    cdef bint built_in(self) noexcept
    cdef int begin_init(self) except -1
    cdef int check_ready(self) except -1
    cdef Py_ssize_t batch_length_of(self, Py_ssize_t step) noexcept nogil
    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1
    cdef Py_ssize_t checked_step(self, object epoch, object step, Py_ssize_t steps) except -1
    cdef Py_ssize_t native_step(self, object epoch, object step) except -1
    cdef cnp.ndarray python_indices(self, object epoch, object step)


cdef Py_ssize_t positive_int(object value, str name) except -1
cdef int exact_type_only(object obj, type cls) except -1
