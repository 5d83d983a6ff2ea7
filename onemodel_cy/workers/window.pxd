# §1 the step window every worker engine shares (window.pyx).
from onemodel_cy.core.typedefs cimport i64

cdef class StepWindow:
    cdef readonly i64 prefetch
    cdef i64 _next_take, _next_out, _local, _limit, _failed_at     # -1: none

    cpdef i64 end(self)
    cpdef bint has_room(self)
    cpdef i64 hand_out(self) except -1
    cpdef bint exhausted(self)
    cpdef void took(self, i64 g)
    cpdef void failed(self, i64 g)
    cpdef bint skip(self, i64 g)
    cpdef void moved(self, i64 start)
