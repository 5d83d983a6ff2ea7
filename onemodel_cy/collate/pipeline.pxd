# §1 the recipe: global step g -> this rank's batch, whole or split in two (collate/pipeline.pyx).
from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.collate.augment cimport AugmentKernel
from onemodel_cy.collate.batch cimport BatchLayout
from onemodel_cy.collate.collator cimport SlotJob, Workspace, fill_batch

# A step prepared under the GIL: everything its GIL-free fill reads. The slot table (jobs)
# lives in the workspace and the pixels in the dataset; both stay put until the batch is
# handed out (the engine holds the workspace and the pipeline meanwhile).
cdef struct Prepared:
    const SlotJob* jobs
    Py_ssize_t n, first_slot
    char* data
    BatchLayout layout
    const AugmentKernel* kernel
    float pad
    u64 seed, epoch, step


# The second half of a split build: the batch's columns and images, without the GIL.
cdef inline void fill(const Prepared* p) noexcept nogil:
    fill_batch(p.jobs, p.n, p.data, &p.layout, p.kernel, p.seed, p.epoch, p.step, p.first_slot, p.pad)


cdef class Pipeline:
    cdef readonly object dataset, sampler, collator, transform, seed
    cdef readonly Py_ssize_t lo, hi         # this rank's slot range
    cdef u64 seed64

    cdef object prepare(self, i64 g, Workspace ws, Prepared* out)
