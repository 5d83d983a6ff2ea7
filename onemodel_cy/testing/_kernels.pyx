"""The gray 8-bit conversion kernels of ``src/row.h``, callable on any buffer (tests only).

The loader reaches them only through a pack's memory map, whose neighbours in the address
space a test cannot choose; this entry lets a test put an image right before a page it
made unreadable, to prove that no kernel reads past an image's last pixel.
"""
cimport numpy as cnp
import numpy as np

from onemodel_cy._row cimport convert_image, convert_gray_simd, stream_fence
from onemodel_cy._validate cimport as_size, checked_mul

cnp.import_array()


def convert_gray8(const unsigned char[::1] pixels not None, height, width, padded, float scale, float bias,
                  float pad, bint streamed, cap):
    """``height`` rows of ``width`` pixels read from ``pixels`` (exactly height * width
    bytes) into float32 [height, padded] through the kernel the collator would choose at
    level ``cap``; returns (the rows, the kernel's answer: 2 streamed, 1 plain SIMD, 0 the
    portable loop)."""
    cdef Py_ssize_t h = as_size(height, "height"), w = as_size(width, "width"), p = as_size(padded, "padded")
    if pixels.shape[0] != checked_mul(h, w, "height * width") or w > p or w == 0 or h == 0:
        raise ValueError(f"need len(pixels) == height * width, height > 0 and 0 < width <= padded, received "
                         f"{pixels.shape[0]} bytes, height {h}, width {w}, padded {p}")
    # 64-byte aligned rows when padded allows (np.empty gives at least 16): a view of a larger block.
    cdef cnp.ndarray block = np.empty(checked_mul(h, p, "height * padded") + 16, dtype=np.float32)
    cdef Py_ssize_t shift = (-(<size_t>cnp.PyArray_DATA(block)) % 64) // 4
    out = block[shift:shift + h * p].reshape(h, p)
    cdef float* dst = <float*>cnp.PyArray_DATA(out)
    cdef int level = as_size(cap, "cap"), wrote
    with nogil:
        wrote = convert_gray_simd(&pixels[0], h, w, dst, p, scale, bias, pad, streamed, level)
        if wrote == 0:
            convert_image(&pixels[0], 1, h, w, dst, p, &scale, &bias, pad)
        if wrote == 2:
            stream_fence()
    return out, wrote
