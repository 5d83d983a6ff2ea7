# §4 augmentations: the small GIL-free kernel interface the built-ins implement.
from onemodel_cy.core.typedefs cimport u64

cdef extern from "row.h":
    void store_row "om_store_row"(const float* src, float* dst, Py_ssize_t width, Py_ssize_t padded,
                                  bint scale, float g, float o, float pad) noexcept nogil
    void store_row_streamed "om_store_row_streamed"(const float* src, float* dst, Py_ssize_t width,
                                                    Py_ssize_t padded, bint scale, float g, float o,
                                                    float pad) noexcept nogil

# Read `rows` rows of `width` pixels from `src` (rows `src_stride` apart), write the
# augmented pixels to `dst` (rows `dst_stride` apart) followed by `pad` up to `padded`,
# drawing from `state`. src == dst with padded == width edits in place; both routes run
# the same float32 operations in the same order, so fusing the copy changes no bit.
# `streamed`: the kernel may write `dst` with streaming stores (the caller checked that the
# CPU has AVX2 and fences before the batch is handed over); the same bytes either way.
ctypedef void (*rows_kernel)(const float* params, const float* src, Py_ssize_t src_stride,
                             float* dst, Py_ssize_t dst_stride, Py_ssize_t rows, Py_ssize_t width,
                             Py_ssize_t padded, float pad, u64* state, bint streamed) noexcept nogil

cdef struct AugmentKernel:
    rows_kernel run         # NULL: no GIL-free kernel (the augmentation is Python code)
    float params[4]


cdef class Augmentation:
    cdef AugmentKernel kernel   # filled once by the constructor; copied by the collator
    cdef bint _claimed          # a built-in's __init__ ran: a second one is refused
