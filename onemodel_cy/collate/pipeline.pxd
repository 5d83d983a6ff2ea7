# §1 the recipe: global step g -> this rank's batch, whole or split in two (collate/pipeline.pyx).
from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.collate.augment cimport AugmentKernel
from onemodel_cy.collate.batch cimport BatchLayout
from onemodel_cy.collate.collator cimport SlotJob, Workspace, fill_batch
from onemodel_cy.collate.transform cimport TransformRun, run_transform

# A step prepared under the GIL: everything its GIL-free fill reads. The slot table (jobs)
# and a built-in transform's plan live in the workspace, the pixels in the dataset; they
# stay put until the batch is handed out (the engine holds the workspace and the pipeline
# meanwhile).
cdef struct Prepared:
    const SlotJob* jobs
    Py_ssize_t n, first_slot
    char* data
    BatchLayout layout
    const AugmentKernel* kernel
    const TransformRun* transform   # NULL: no transform
    float pad
    u64 seed, epoch, step
    int failed                      # set by fill: a transform's kernel could not allocate (build it whole)


# The second half of a split build: the slots' built-in transform, then the batch's
# columns and images, without the GIL. A failed transform leaves the batch unwritten and
# `failed` set: whoever hands it out builds the step whole instead (Pipeline.build), which
# raises the error.
cdef inline void fill(Prepared* p) noexcept nogil:
    p.failed = p.transform != NULL and run_transform(p.transform) < 0
    if not p.failed:
        fill_batch(p.jobs, p.n, p.data, &p.layout, p.kernel, p.seed, p.epoch, p.step, p.first_slot, p.pad)


cdef class Pipeline:
    cdef readonly object dataset, sampler, collator, transform, seed
    cdef readonly Py_ssize_t lo, hi         # this rank's slot range
    cdef u64 seed64

    cdef object prepare(self, i64 g, Workspace ws, Prepared* out)
