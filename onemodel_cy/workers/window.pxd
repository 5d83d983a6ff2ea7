# §1 the step window every worker engine shares (window.pyx).

cdef class StepWindow:
    cdef readonly object prefetch
    # Python integers (None: none); global steps lie in [0, 2**63).
    cdef object _next_take, _next_out, _local, _limit, _failed_at

    cpdef object end(self)
    cpdef bint has_room(self) except -1
    cpdef object hand_out(self)
    cpdef bint exhausted(self) except -1
    cpdef took(self, object g)
    cpdef failed(self, object g)
    cpdef bint skip(self, object g) except -1
    cpdef moved(self, object start)
