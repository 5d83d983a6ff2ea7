# §4 collation: the slot table, the per-worker workspace, and the collator.
cimport numpy as cnp
from onemodel_cy.core.typedefs cimport u64, i64, i32
from onemodel_cy.collate.augment cimport AugmentKernel
from onemodel_cy.collate.bufferpool cimport BufferPool, Block
from onemodel_cy.collate.batch cimport BatchLayout, ImageBatch
from onemodel_cy.collate.pacing cimport Pacing
from onemodel_cy.collate.profile cimport StageClock

# One slot of a batch: where its pixels and target are, and its int32 columns.
ctypedef struct SlotJob:
    const float* pixels     # C-contiguous [C, H, W], aligned (kind PIXELS_FLOAT32)
    const unsigned char* bytes  # 8-bit [H, W] or [H, W, 3] (kind PIXELS_GRAY8 / PIXELS_RGB8)
    const float* convert    # §6 scale[3] then bias[3] in float32, for 8-bit pixels
    int kind                # data/datasets.pxd PIXELS_*: a packed view's kind, else float32
    const i32* target
    Py_ssize_t width
    Py_ssize_t target_length
    i32 label
    i64 index


cdef class Workspace:
    # What one building thread reuses from batch to batch (§5): the batch's index array,
    # the slot table, what it points into, and the augmentation's staging scratch.
    cdef readonly cnp.ndarray indices  # int64 [batch_size], filled by the sampler
    cdef readonly Pacing pacing        # shared by one loader's workers, or None
    cdef readonly StageClock clock     # the loader's time counters (DataLoader.profile), or None
    cdef SlotJob* jobs
    cdef Py_ssize_t capacity
    cdef Block scratch                 # staging of a batch's images, reused while nobody else holds it
    cdef BufferPool scratch_pool       # private: staging never counts against the batches' window
    cdef list held                     # slot j's sample, while the slot table points into it
    cdef list keep                     # contiguous copies the slot table points into
    cdef bint busy                     # a collation is using it (refuses re-entrant use)
    cdef object transforms             # collate/transform.pyx's TransformScratch, made on first use

    cdef SlotJob* reserve(self, Py_ssize_t n) except NULL
    cdef void let_go(self, Py_ssize_t n, bint* baton)
    cdef float* stage(self, Py_ssize_t floats) except NULL


cdef int fill_slot(Workspace ws, Py_ssize_t j, object item, i64 index, Py_ssize_t first_slot,
                   Py_ssize_t* shape) except -1


cdef class ImageBatchCollator:
    cdef readonly Py_ssize_t width_multiple
    cdef readonly float pad_value
    cdef readonly object augmentation
    cdef readonly BufferPool pool
    cdef AugmentKernel _kernel          # the augmentation's GIL-free kernel (run NULL: none)
    cdef bint _python_augmentation
    # A built-in augmentation (onemodel_cy.augment): the fetch step plans and runs it with the
    # transform (collate/transform.pyx), without the GIL; None otherwise.
    cdef readonly object program
    cdef bint _claimed                  # __init__ ran: a second one is refused
    cdef object _local                  # per-thread default workspace of direct calls

    cdef Workspace claim_workspace(self, Workspace ws)
    cdef Block plan(self, const SlotJob* jobs, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                    BatchLayout* layout, Py_ssize_t* total_width)

    cdef ImageBatch assemble(self, Workspace ws, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                             u64 seed, u64 epoch, u64 step, object epoch_value, object step_value,
                             object global_step, Py_ssize_t first_slot, bint augmented, bint* baton)
    cdef augment_staged(self, Workspace ws, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                        Py_ssize_t total_width, u64 seed, u64 epoch, u64 step, Py_ssize_t first_slot,
                        bint* baton, object epoch_value, object step_value, object global_step)
    cdef augment_slot(self, Workspace ws, SlotJob* job, Py_ssize_t channels, Py_ssize_t height,
                      u64 seed, u64 epoch, u64 step, Py_ssize_t slot)


# A planned batch's columns and images, without the GIL (not for a Python augmentation).
cdef void fill_batch(const SlotJob* jobs, Py_ssize_t n, char* data, const BatchLayout* layout,
                     const AugmentKernel* kernel, u64 seed, u64 epoch, u64 step, Py_ssize_t first_slot,
                     float pad) noexcept nogil


# "global step g (epoch e, step s)", or "epoch e, step s" without a global step: the words
# every error note of a build uses (the fetch step's and the augmentation's).
cdef str step_name(global_step, epoch, step)
