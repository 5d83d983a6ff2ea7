# Pacing of worker threads that share the GIL: the Python-stage baton (src/pacing.h).
cdef extern from "pacing.h":
    bint baton_try "om_baton_try"(int* baton) noexcept nogil
    void baton_release "om_baton_release"(int* baton) noexcept nogil
    bint baton_take "om_baton_take"(int* baton, long long max_ns) noexcept nogil


cdef class Pacing:
    cdef int baton                      # 1 while a thread runs the Python stage of a batch
    cdef readonly long long wait_ns     # longest spin for the baton before going ahead
    cdef readonly Py_ssize_t stage_parts
    cdef readonly bint enabled
    cdef bint _claimed                  # __init__ ran: a second one is refused

    cdef inline bint take(self) noexcept nogil:
        """Take the baton (True), or give up after ``wait_ns`` (False)."""
        if not self.enabled:
            return False
        return baton_take(&self.baton, self.wait_ns)

    cdef inline bint try_take(self) noexcept nogil:
        """Take the baton if it is free at once (no spinning)."""
        return self.enabled and baton_try(&self.baton)

    cdef inline void give_back(self, bint* held) noexcept nogil:
        """Release the baton if ``held``; clears ``held``."""
        if held[0]:
            baton_release(&self.baton)
            held[0] = False
