# §1 a built-in transform (onemodel_cy.augment) over the slot table: planned under the GIL,
# run without it (collate/transform.pyx).
from onemodel_cy.core.typedefs cimport u64
from onemodel_cy.augment.kernels cimport Step
from onemodel_cy.collate.collator cimport SlotJob, Workspace

# One slot's planned transform.
cdef struct SlotRun:
    SlotJob source          # the slot as gathered: its input (the job is then pointed at `out`)
    Py_ssize_t first, count  # its steps: steps[first : first + count]
    float* out              # its output, in the staging buffer (NULL: no step ran, the job is unchanged)

# Everything run_transform reads: the slots, their steps and the buffers, all owned by
# the workspace's TransformScratch, which nobody changes until the workspace is let go.
cdef struct TransformRun:
    const SlotRun* slots
    Py_ssize_t n
    const Step* steps
    float* buffers          # run_steps' three buffers of `size` floats, then an 8-bit input's conversion
    Py_ssize_t size


cdef class TransformScratch:
    cdef TransformRun run
    cdef SlotRun* slots
    cdef Step* steps
    cdef float* staged
    cdef float* buffers
    cdef Py_ssize_t slot_capacity, step_capacity, staged_capacity, buffer_capacity

    cdef int grow(self, Py_ssize_t slots, Py_ssize_t steps, Py_ssize_t staged, Py_ssize_t buffers) except -1


# Plan the built-in `transform` (stream 0) then the collator's built-in `augmentation`
# (stream 1, keeping the shape), either None, for the n slots of ws's table (C and H in
# `shape`, updated to the outputs'), each slot's rngs derive(seed, epoch, step,
# first_slot + j, stream) (D17); point each slot that runs a step at its output. Raises on
# outputs of different H, or sizes past memory; the run is valid until the workspace is
# let go.
cdef const TransformRun* plan_transform(Workspace ws, object transform, object augmentation, Py_ssize_t n,
                                        Py_ssize_t* shape, u64 seed, u64 epoch, u64 step,
                                        Py_ssize_t first_slot) except NULL

# Write every planned slot's output; 0, or -1 when a kernel could not allocate its memory.
cdef int run_transform(const TransformRun* run) noexcept nogil
