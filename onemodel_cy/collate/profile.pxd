# Where a loader's time went: the counters every building thread of one process adds to.
from onemodel_cy.core.typedefs cimport i64

cdef extern from "pacing.h":
    long long clock_ns "om_clock_ns"() noexcept nogil


cdef class StageClock:
    # Nanoseconds (and batches) since the clock started or was reset, added under the
    # GIL by the thread that measured them (a consumer, a worker thread).
    cdef readonly i64 start_ns
    cdef readonly i64 batches           # handed to the consumer
    cdef readonly i64 build_ns          # building on the consumer thread
    cdef readonly i64 wait_ns           # the consumer inside an engine's take()
    cdef readonly i64 get_sample_ns     # Python stages, on every building thread of this process
    cdef readonly i64 transform_ns
    cdef readonly i64 augmentation_ns
    # The images copied into the batch (and staged, for a Python augmentation), and a
    # built-in transform's kernels.
    cdef readonly i64 copy_ns


cdef class ConsumerTimer:
    cdef StageClock clock
    cdef i64 mark                       # begin()'s reading
