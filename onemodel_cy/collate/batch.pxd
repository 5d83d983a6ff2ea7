# §4 ImageBatch and the layout of its one pooled block (§5).
cimport numpy as cnp
from onemodel_cy.collate.bufferpool cimport Block

cdef struct BatchLayout:
    Py_ssize_t n, channels, height, padded, total_targets
    Py_ssize_t image_bytes      # images at offset 0, rounded up to the pool alignment
    Py_ssize_t column_bytes     # each int32 [n] column, rounded up likewise
    Py_ssize_t targets_at       # widths, target_lengths, labels, indices, then the targets
    Py_ssize_t nbytes           # the whole block
    bint small_pages            # the block lies on 4 KiB pages (set by the collator's plan)

cdef int plan_layout(BatchLayout* layout, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                     Py_ssize_t padded, Py_ssize_t total_targets) except -1


cdef class ImageBatch:
    cdef object _images, _widths, _targets, _target_lengths, _labels, _indices
    cdef Py_ssize_t _nbytes
    cdef readonly object epoch, step, global_step

    cdef _check_open(self)


cdef ImageBatch batch_in_block(Block block, const BatchLayout* layout, object epoch, object step,
                               object global_step)
