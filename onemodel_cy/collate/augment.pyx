"""§4 built-in augmentations behind one GIL-free kernel interface.

An :class:`Augmentation` carries an ``AugmentKernel`` (a C function and its float32
parameters, ``collate/augment.pxd``). The collator copies the kernel once, when it is built, and
runs it without the GIL, fused with the copy into the batch. Any other callable
``aug(image, rng)``, including a Python subclass of :class:`Augmentation` that defines
``__call__``, runs under the GIL on a staged scratch copy (D17).
"""
cimport cython
cimport numpy as cnp

from onemodel_cy.core.typedefs cimport u64
from onemodel_cy.core.rng cimport SampleRng, draw_single, draw_normal
from onemodel_cy.core.validate cimport as_float32, describe, is_planar_float32

cnp.import_array()


cdef class Augmentation:
    """Base of the augmentations with a GIL-free kernel; callable as ``aug(image, rng)``.

    The built-ins (:class:`GainOffset`, :class:`GaussianNoise`) fill the kernel. A Python
    subclass defines ``__call__(image, rng)`` and is run as Python code.
    """

    def __cinit__(self):
        self.kernel.run = NULL

    def __call__(self, image, SampleRng rng not None):
        """Edit ``image`` (writable, aligned, C-contiguous float32 ``[C, H, W]``) in place, drawing from ``rng``."""
        if self.kernel.run == NULL:
            raise NotImplementedError(f"{type(self).__name__} must define __call__(image, rng); only "
                                      f"an augmentation with a kernel runs without it")
        if not is_planar_float32(image, True):
            raise TypeError(f"{type(self).__name__} edits a writable, aligned, C-contiguous native float32 "
                            f"[C, H, W] array, received {describe(image)}")
        cdef cnp.ndarray array = image
        cdef Py_ssize_t rows = array.shape[0] * array.shape[1], width = array.shape[2]
        cdef float* data = <float*>cnp.PyArray_DATA(array)
        cdef u64 state = rng._state
        with nogil:
            self.kernel.run(self.kernel.params, data, width, data, width, rows, width, width, 0, &state, False)
        rng._state = state


cdef void gain_offset_rows(const float* params, const float* src, Py_ssize_t src_stride, float* dst,
                           Py_ssize_t dst_stride, Py_ssize_t rows, Py_ssize_t width, Py_ssize_t padded,
                           float pad, u64* state, bint streamed) noexcept nogil:
    cdef float one = 1.0, two = 2.0
    cdef float a = draw_single(state)
    cdef float b = draw_single(state)
    cdef float g = one + params[0] * (two * a - one)
    cdef float o = params[1] * (two * b - one)
    cdef Py_ssize_t r
    for r in range(rows):
        if streamed:
            store_row_streamed(src + r * src_stride, dst + r * dst_stride, width, padded, True, g, o, pad)
        else:
            store_row(src + r * src_stride, dst + r * dst_stride, width, padded, True, g, o, pad)


cdef void gaussian_noise_rows(const float* params, const float* src, Py_ssize_t src_stride, float* dst,
                              Py_ssize_t dst_stride, Py_ssize_t rows, Py_ssize_t width, Py_ssize_t padded,
                              float pad, u64* state, bint streamed) noexcept nogil:
    # Twelve draws per pixel make this compute-bound: plain stores (whatever `streamed` allows).
    cdef float sigma = params[0]
    cdef Py_ssize_t r, x
    cdef float* row
    for r in range(rows):
        row = dst + r * dst_stride
        for x in range(width):
            row[x] = src[r * src_stride + x] + sigma * draw_normal(state)
        for x in range(width, padded):
            row[x] = pad


@cython.final
cdef class GainOffset(Augmentation):
    """Per-image gain and offset: ``x * g + o`` in float32 (docs/contract.md).

    ``g = 1 + gain * (2a - 1)`` and ``o = offset * (2b - 1)`` from two ``next_single``
    draws ``a``, ``b``, each operation rounded to float32; then every pixel, in C, H, W
    order, becomes ``(x * g) + o`` with two roundings.

    Parameters
    ----------
    gain, offset : float
        Half-widths of the uniform gain and offset ranges (rounded to float32).
    """

    def __init__(self, gain=0.2, offset=0.1):
        if self._claimed:
            raise RuntimeError("GainOffset.__init__ was already called on this object (workers may be "
                               "using it); build a new one")
        self._claimed = True
        cdef float g = as_float32(gain, "gain"), o = as_float32(offset, "offset")
        self.kernel.params[0] = g
        self.kernel.params[1] = o
        self.kernel.run = gain_offset_rows

    @property
    def gain(self):
        return self.kernel.params[0]

    @property
    def offset(self):
        return self.kernel.params[1]

    def __repr__(self):
        return f"GainOffset(gain={self.gain!r}, offset={self.offset!r})"

    def __reduce__(self):
        return (GainOffset, (self.gain, self.offset))


@cython.final
cdef class GaussianNoise(Augmentation):
    """Additive noise: every pixel, in C, H, W order, becomes ``x + sigma * next_normal()`` in float32.

    Parameters
    ----------
    sigma : float
        Noise scale (rounded to float32).
    """

    def __init__(self, sigma=0.05):
        if self._claimed:
            raise RuntimeError("GaussianNoise.__init__ was already called on this object (workers may be "
                               "using it); build a new one")
        self._claimed = True
        self.kernel.params[0] = as_float32(sigma, "sigma")
        self.kernel.run = gaussian_noise_rows

    @property
    def sigma(self):
        return self.kernel.params[0]

    def __repr__(self):
        return f"GaussianNoise(sigma={self.sigma!r})"

    def __reduce__(self):
        return (GaussianNoise, (self.sigma,))
