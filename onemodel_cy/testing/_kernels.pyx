"""The gray 8-bit conversion kernels of ``src/row.h``, callable on any buffer (tests only).

The loader reaches them only through a pack's memory map, whose neighbours in the address
space a test cannot choose; this entry lets a test put an image right before a page it
made unreadable, to prove that no kernel reads past an image's last pixel.
"""
cimport numpy as cnp
import numpy as np

from onemodel_cy.data.row cimport convert_gray, stream_fence
from onemodel_cy.core.validate cimport as_size, checked_mul

cnp.import_array()


cdef unsigned int SENTINEL = 0x7FC0DEAD     # a NaN no kernel writes


def convert_gray8(const unsigned char[::1] pixels not None, height, width, padded, float scale, float bias,
                  float pad, bint streamed, cap, misalign=0):
    """``height`` rows of ``width`` pixels read from ``pixels`` (exactly height * width
    bytes) into float32 [height, padded] through the kernel the collator would choose at
    level ``cap``; returns (the rows, the kernel's answer: 2 streamed, 1 plain SIMD, 0 the
    portable loop). The rows start ``misalign`` floats (0-15) past a 64-byte boundary, in a
    block whose other floats hold a sentinel: a write outside the rows raises
    AssertionError."""
    cdef Py_ssize_t h = as_size(height, "height"), w = as_size(width, "width"), p = as_size(padded, "padded")
    cdef Py_ssize_t skew = as_size(misalign, "misalign")
    if pixels.shape[0] != checked_mul(h, w, "height * width") or w > p or w == 0 or h == 0 or skew > 15:
        raise ValueError(f"need len(pixels) == height * width, height > 0, 0 < width <= padded and "
                         f"misalign <= 15, received {pixels.shape[0]} bytes, height {h}, width {w}, "
                         f"padded {p}, misalign {skew}")
    cdef Py_ssize_t floats = checked_mul(h, p, "height * padded")
    cdef cnp.ndarray block = np.full(floats + 64, SENTINEL, dtype=np.uint32).view(np.float32)
    cdef Py_ssize_t start = (-(<size_t>cnp.PyArray_DATA(block)) % 64) // 4 + 16 + skew
    out = block[start:start + floats].reshape(h, p)
    cdef float* dst = <float*>cnp.PyArray_DATA(out)
    cdef int level = as_size(cap, "cap"), wrote
    with nogil:
        wrote = convert_gray(&pixels[0], h, w, w, dst, p, scale, bias, pad, streamed, level)
        if wrote == 2:
            stream_fence()
    bits = block.view(np.uint32)
    if (bits[:start] != SENTINEL).any() or (bits[start + floats:] != SENTINEL).any():
        raise AssertionError(f"the kernel (level {cap}, streamed {streamed}, answer {wrote}) wrote outside "
                             f"its {h} x {p} rows")
    return out, wrote
