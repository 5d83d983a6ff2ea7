cimport numpy as cnp
from onemodel_cy.core.typedefs cimport i64, i32

cdef class Sample:
    cdef readonly object image     # float32 ndarray [C, H, W]
    cdef readonly object target    # int32 ndarray [L], values >= 0
    cdef readonly object label     # int in int32 range
    cdef bint _initialised         # set last by __init__ (image, target and label all valid)
    cdef bint _claimed             # set first by __init__: a second __init__ is refused

# A dataset's packed images, read by the loader's fetch step without the GIL: pointers
# into storage the dataset owns and has sealed (read-only, never re-allocated while the
# dataset lives). Image i is shapes[3i:3i+3] = (C, H, W) at pixels + pixel_offsets[i];
# its target is targets[target_offsets[i]:target_offsets[i+1]].
cdef extern from "row.h":
    enum:
        PIXELS_FLOAT32 "OM_PIXELS_FLOAT32"
        PIXELS_GRAY8 "OM_PIXELS_GRAY8"
        PIXELS_RGB8 "OM_PIXELS_RGB8"

# `kind` says what the pixels are: PIXELS_FLOAT32 planar float32 at `pixels`, or
# PIXELS_GRAY8 / PIXELS_RGB8 8-bit pixels at `bytes` ([H, W] or [H, W, 3] interleaved),
# which the collator converts as §6 does with the float32 constants at `convert`
# (scale[0..2], then bias[0..2]: D15) while it copies them into the batch.
cdef struct PackedImages:
    Py_ssize_t count
    int kind
    const float* pixels
    const unsigned char* bytes
    const float* convert
    const i64* pixel_offsets
    const i64* shapes
    const i32* targets
    const i64* target_offsets
    const i32* labels


cdef class PackedSource:
    # Base of every dataset that offers a packed view; `packed_view` fills `view` and
    # returns True, or returns False when the view would not match get_sample (a
    # subclass overriding get_sample).
    cdef bint packed_view(self, PackedImages* view) except -1
    # The fetch step read `nbytes` of the view's pixels (a memory-mapped source may give
    # pages back; called holding the GIL, after each gather).
    cdef int pixels_read(self, Py_ssize_t nbytes) except -1
    # Before the fetch step reads the pixels of indices[lo:hi] (holding the GIL): a source
    # whose pixels are fetched on demand (a remote pack) makes them present.
    cdef int ensure_samples(self, object indices, Py_ssize_t lo, Py_ssize_t hi) except -1
    # Read-ahead, reached through Pipeline.reads_ahead/read_ahead/stop_read_ahead (the stream
    # calls them holding the GIL): whether the source reads ahead (asked once per stream);
    # start bringing the samples of `indices` (a coming step's) without waiting for them,
    # their step's ensure_samples still makes them present; drop what is still queued (a
    # stream that ends). The base never reads ahead.
    cdef bint reads_ahead(self) except -1
    cdef int read_ahead(self, object indices) except -1
    cdef int stop_read_ahead(self) except -1


cdef class ArrayImageDataset(PackedSource):
    # Packed storage, so that the collator gathers without the GIL or a Python object per sample.
    cdef readonly Py_ssize_t count
    cdef cnp.ndarray _pixels           # float32, every image C-contiguous, back to back
    cdef cnp.ndarray _pixel_offsets    # int64 [count]: first pixel of each image
    cdef cnp.ndarray _shapes           # int64 [count, 3]: C, H, W
    cdef cnp.ndarray _targets          # int32, every target back to back
    cdef cnp.ndarray _target_offsets   # int64 [count + 1]
    cdef cnp.ndarray _labels           # int32 [count]
    cdef bint _initialised             # storage filled by __init__ (sealed: never writable again)
    cdef bint _claimed                 # set first by __init__: a second __init__ is refused

    cdef int begin_init(self) except -1
    cdef _pack(self, list samples)
    cdef _set_storage(self, pixels, pixel_offsets, shapes, targets, target_offsets, labels)
    cpdef Sample get_sample(self, index)
