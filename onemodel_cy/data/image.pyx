"""§6 image helpers: 8-bit pixels to planar float32, ``p * scale - bias`` with two roundings (D15).

The pixels are converted by the collator's own kernels (``src/row.h``, declared in
``data/row.pxd``: ``om_convert_gray`` for gray, ``om_convert_image`` for RGB), the one home of
§6's arithmetic; this module checks the arguments, computes the float32 constants and
hands the kernel the source's row stride.

Errors follow the package rule: a source or ``out`` of the wrong dtype, number of
dimensions or memory layout (not C-contiguous, misaligned, read-only) is a ``TypeError``;
a shape, size or constant out of range is a ``ValueError``. Every size of a raw buffer is
computed with overflow-checked arithmetic before any pixel is read.
"""
cimport numpy as cnp
import numpy as np

from onemodel_cy.core.validate cimport as_size, describe, checked_mul, checked_add
from onemodel_cy.data.row cimport convert_image, convert_gray, simd_level

cnp.import_array()


cdef object channel_constants(values, Py_ssize_t channels, str name):
    """``values`` (a number or one per channel) rounded to float32 (D15)."""
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.size == 1:
        array = np.repeat(array, channels)
    if array.size != channels:
        raise ValueError(f"{name} must be one number or {channels} numbers, received {values!r}")
    with np.errstate(over="ignore"):      # an overflow is reported just below
        rounded = array.astype(np.float32)
    if not np.all(np.isfinite(rounded)):
        raise ValueError(f"{name} must be finite in float32, received {values!r}")
    return rounded


cdef tuple source_layout(src, Py_ssize_t channels, width, height, stride):
    """An array whose data pointer is the first pixel, with (height, width, row stride in bytes)."""
    if isinstance(src, np.ndarray) and width is None and height is None and stride is None:
        return array_layout(src, channels)
    if width is None or height is None:
        raise ValueError("a raw buffer needs width= and height= (and stride= in bytes if rows are padded)")
    cdef Py_ssize_t w = as_size(width, "width", 1), h = as_size(height, "height", 1)
    cdef Py_ssize_t row = checked_mul(w, channels, "a row of the raw buffer (width * channels)")
    cdef Py_ssize_t s = row if stride is None else as_size(stride, "stride")
    if s < row:
        raise ValueError(f"stride must be >= width * {channels} = {row} bytes, received {s}")
    flat = np.frombuffer(src, dtype=np.uint8)
    # (h - 1) * stride + row, checked: a wrapped size would pass the length check below.
    cdef Py_ssize_t need = checked_add(checked_mul(h - 1, s, "the raw buffer's size"), row,
                                       "the raw buffer's size")
    if flat.shape[0] < need:
        raise ValueError(f"src holds {flat.shape[0]} bytes; width={w}, height={h}, stride={s} need {need}")
    return flat, h, w, s


cdef tuple array_layout(src, Py_ssize_t channels):
    """A uint8 ``[H, W]`` (gray) or ``[H, W, 3]`` (RGB) array, made C-contiguous if its rows are not.

    Read through numpy's C fields, never through Python attributes: an ndarray subclass
    may report any ``shape`` or ``strides`` it likes."""
    expected = 2 if channels == 1 else 3
    want = "[H, W]" if channels == 1 else "[H, W, 3]"
    cdef cnp.ndarray array = <cnp.ndarray>src
    if cnp.PyArray_TYPE(array) != cnp.NPY_UINT8 or cnp.PyArray_NDIM(array) != expected:
        raise TypeError(f"src must be a uint8 array {want}, received {describe(src)}")
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(array)
    cdef cnp.npy_intp* strides = cnp.PyArray_STRIDES(array)
    if channels == 3 and dims[2] != 3:
        raise ValueError(f"src must be a uint8 array {want}, received shape={tuple(dims[k] for k in range(3))}")
    if (strides[1] != channels or (channels == 3 and strides[2] != 1)
            or strides[0] < dims[1] * channels):
        array = np.ascontiguousarray(array)
        dims = cnp.PyArray_DIMS(array)
        strides = cnp.PyArray_STRIDES(array)
    # The array's data pointer is the first pixel; rows are strides[0] bytes apart.
    return array, dims[0], dims[1], strides[0]


cdef cnp.ndarray output_of(out, Py_ssize_t channels, Py_ssize_t h, Py_ssize_t w):
    """``out`` checked (through numpy's C fields), or a new ``[channels, h, w]`` float32 array."""
    checked_mul(checked_mul(checked_mul(channels, h, "the output's size"), w, "the output's size"),
                sizeof(float), "the output's size")
    if out is None:
        return np.empty((channels, h, w), dtype=np.float32)
    want = f"a writable, aligned, C-contiguous native float32 array of shape {(channels, h, w)}"
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be {want}, received {describe(out)}")
    cdef cnp.ndarray array = <cnp.ndarray>out
    if (cnp.PyArray_TYPE(array) != cnp.NPY_FLOAT32 or cnp.PyArray_NDIM(array) != 3
            or not cnp.PyArray_ISNOTSWAPPED(array) or not cnp.PyArray_IS_C_CONTIGUOUS(array)
            or not cnp.PyArray_ISALIGNED(array) or not cnp.PyArray_ISWRITEABLE(array)):
        # A misaligned float32 view is refused rather than written (misaligned stores).
        raise TypeError(f"out must be {want}, received {describe(out)}")
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(array)
    if dims[0] != channels or dims[1] != h or dims[2] != w:
        raise ValueError(f"out must be {want}, received shape={(dims[0], dims[1], dims[2])}")
    return array


cdef cnp.ndarray to_planar(src, Py_ssize_t channels, mean, std, width, height, stride, out):
    flat, h, w, s = source_layout(src, channels, width, height, stride)
    means = channel_constants(mean, channels, "mean")
    stds = channel_constants(std, channels, "std")
    if np.any(stds == 0):
        raise ValueError(f"std must be non-zero, received {std!r}")
    cdef cnp.ndarray result = output_of(out, channels, h, w)
    cdef float scales[3]
    cdef float biases[3]
    cdef float one = 1.0, full = 255.0, s32, m32
    cdef Py_ssize_t c, rows = h, cols = w, row_stride = s
    for c in range(channels):
        s32 = stds[c]
        m32 = means[c]
        scales[c] = one / (full * s32)      # D15: float32, one rounding per operation
        biases[c] = m32 / s32
        if scales[c] - scales[c] != 0 or biases[c] - biases[c] != 0:     # inf or nan in float32
            raise ValueError(f"mean {means[c]!r} and std {stds[c]!r} (channel {c}) give a scale "
                             f"{scales[c]!r} and bias {biases[c]!r} in float32; both must be finite")
    # The kernel reads (rows - 1) * row_stride + cols * channels bytes from the first pixel
    # (source_layout checked that the buffer or array holds them) and writes the
    # [channels, rows, cols] float32 output (output_of checked its size and layout) with
    # padded = cols, so no padding is stored. Gray runs at the CPU's widest level with plain
    # stores: the caller reads the image next.
    cdef const unsigned char* pixels = <const unsigned char*>cnp.PyArray_DATA(flat)
    cdef float* dst = <float*>cnp.PyArray_DATA(result)
    with nogil:
        if channels == 1:
            convert_gray(pixels, rows, cols, row_stride, dst, cols, scales[0], biases[0], 0, False,
                         simd_level())
        else:
            convert_image(pixels, channels, rows, cols, row_stride, dst, cols, scales, biases, 0)
    return result


def gray8_to_planar(src, mean, std, *, width=None, height=None, stride=None, out=None):
    """Gray 8-bit pixels to float32 ``[1, H, W]``: ``p * (1 / (255 * std)) - mean / std`` (§6, D15, D16).

    Parameters
    ----------
    src : uint8 ndarray ``[H, W]`` or any bytes-like buffer
        With a buffer, give ``width``, ``height`` and (for padded rows) ``stride`` in bytes.
    mean, std : float
        Rounded to float32 before use.
    out : float32 ndarray ``[1, H, W]``, optional
        Written in place and returned; must be writable, aligned and C-contiguous (a
        misaligned view, e.g. float32 at an odd address, is refused with ``TypeError``).
    """
    return to_planar(src, 1, mean, std, width, height, stride, out)


def rgb8_to_planar(src, mean, std, *, width=None, height=None, stride=None, out=None):
    """Interleaved RGB 8-bit pixels to planar float32 ``[3, H, W]``, per channel as in §6 (D15, D16).

    Parameters
    ----------
    src : uint8 ndarray ``[H, W, 3]`` or any bytes-like buffer
        With a buffer, give ``width``, ``height`` and ``stride`` (bytes per row, >= 3 * width).
    mean, std : float or three floats
        Per channel (R, G, B), rounded to float32 before use.
    out : float32 ndarray ``[3, H, W]``, optional
        Written in place and returned; must be writable, aligned and C-contiguous
        (``TypeError`` otherwise, ``ValueError`` for another shape).
    """
    return to_planar(src, 3, mean, std, width, height, stride, out)
