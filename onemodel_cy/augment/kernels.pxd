# The pixel kernels of onemodel_cy.augment (docs/contract.md, "Text-line augmentations").
# A Step is one operation with every random parameter already drawn (ops.pyx plans it
# under no lock, from the sample's rng); `run_step` writes its pixels without the GIL.
from onemodel_cy.core.typedefs cimport u64

cdef enum:
    BORDER_REPLICATE = 0
    BORDER_CONSTANT = 1

# What a Step does; the numbers are not part of the contract.
cdef enum:
    K_RESIZE = 1        # 1-D linear resampling, horizontal to ow, then vertical to oh
    K_AFFINE = 2        # v[0..3] inverse matrix, v[4] shift; bilinear
    K_PERSPECTIVE = 3   # v[0..7] the square-to-quad coefficients a..h; bilinear
    K_ELASTIC = 4       # v[0] magnitude, ia cell, state: the nodes' draws; bilinear
    K_ERODE = 5         # ia x ib window minimum
    K_DILATE = 6        # ia x ib window maximum
    K_BLUR = 7          # v[0] sigma; separable Gaussian
    K_GAIN_OFFSET = 8   # v[0] gain, v[1] offset
    K_NOISE = 9         # v[0] sigma, state: one draw a pixel
    K_SPECKLE = 10      # v[0] sigma, state: one draw a pixel
    K_IMPULSE = 11      # v[0] amount, v[1] low, v[2] high, state: one draw a pixel
    K_INVERT = 12       # v[0] low + high

cdef struct Step:
    int kind
    int border          # BORDER_REPLICATE or BORDER_CONSTANT (geometric kernels)
    float fill          # the constant border's value
    float v[8]
    Py_ssize_t ia, ib
    u64 state           # the rng state before the kernel's own per-node or per-pixel draws
    Py_ssize_t c, h, w      # the input's shape
    Py_ssize_t oh, ow       # the output's height and width (same channels)

# Largest blur radius (a sigma of at most 8): the kernel's weights live on the stack.
cdef enum:
    MAX_RADIUS = 24

# Runs `step` from `src` ([c, h, w]) into `dst` ([c, oh, ow]); `tmp` holds c*h*ow floats
# (separable passes). In-place kinds (K_GAIN_OFFSET .. K_INVERT) accept src == dst.
# Returns 0, or -1 when a buffer could not be allocated.
cdef int run_step(const Step* step, const float* src, float* dst, float* tmp) noexcept nogil

# The contract's float32 functions (no library transcendental): exp(-t) for t >= 0, and
# sin/cos for |x| <= pi/4.
cdef float exp_neg(float t) noexcept nogil
cdef float sin_small(float x) noexcept nogil
cdef float cos_small(float x) noexcept nogil
cdef float fast_normal(u64* state) noexcept nogil
