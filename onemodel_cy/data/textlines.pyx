"""``SyntheticTextLines``: a learnable built-in dataset of bitmap-font text lines.

Each sample draws its target symbols as glyphs of a 5x7 bitmap font (the hexadecimal
digits), left to right, with jitter in spacing, baseline and stroke intensity, plus
uniform noise over the whole line, all from two ``derive`` streams (§2). Unlike
``SyntheticLineImages`` the pixels depend on the targets, so a model can learn to read
them. ``docs/contract.md`` ("The built-in dataset SyntheticTextLines") defines every
draw and every float32 operation, so that a port regenerates every pixel.

Everything is generated once, at construction, into the sealed packed storage of
:class:`ArrayImageDataset`: the loader gathers batches of it without the GIL.
"""
cimport cython
cimport numpy as cnp
import numpy as np

from onemodel_cy.core.typedefs cimport u64, i64, i32
from onemodel_cy.core.validate cimport as_size, as_u64, as_float32, mul_overflows, add_overflows
from onemodel_cy.core.sealed cimport sealed_empty, sealed_vector
from onemodel_cy.core.rng cimport derive_seed, draw_int, draw_single
from onemodel_cy.data.datasets cimport ArrayImageDataset
from onemodel_cy.data.vocabulary import decode as _decode, with_blank as _with_blank

cnp.import_array()

cdef enum:
    LAYOUT_STREAM = 4   # the two streams of this dataset, beside those of §2
    PIXEL_STREAM = 5

#: The two streams of this dataset (its layout, then its pixels), beside those of §2.
STREAM_TEXT_LAYOUT = LAYOUT_STREAM
STREAM_TEXT_PIXELS = PIXEL_STREAM

#: The glyphs of the font, in symbol order: target id ``t`` (1-based) is ``GLYPHS[t - 1]``.
GLYPHS = "0123456789ABCDEF"

cdef enum:
    GLYPH_W = 5         # glyph size in font pixels (each is drawn ``scale`` times larger)
    GLYPH_H = 7
    MAX_HEIGHT = 4096   # limits that keep every size product far inside 64 bits
    MAX_SCALE = 64      # (the totals are still checked)
    MAX_LENGTH = 4096

#: Glyph size in font pixels (each is drawn ``scale`` times larger).
GLYPH_WIDTH = GLYPH_W
GLYPH_HEIGHT = GLYPH_H

#: The 5x7 font: one tuple of seven rows per glyph, top row first; bit 4 (value 16) of a
#: row is its leftmost column, bit 0 its rightmost.
FONT = (
    (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E),   # 0
    (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),   # 1
    (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F),   # 2
    (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),   # 3
    (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02),   # 4
    (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),   # 5
    (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E),   # 6
    (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),   # 7
    (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E),   # 8
    (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),   # 9
    (0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),   # A
    (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),   # B
    (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E),   # C
    (0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C),   # D
    (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F),   # E
    (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10),   # F
)

# The font as C data, filled once from FONT when the module loads.
cdef unsigned char FONT_ROWS[16][7]


cdef void load_font():
    cdef int g, r
    for g in range(16):
        for r in range(GLYPH_H):
            FONT_ROWS[g][r] = FONT[g][r]


load_font()

cdef float INK_BASE = 0.5     # stroke intensity lies in [INK_BASE, INK_BASE + INK_SPAN)
cdef float INK_SPAN = 0.5
cdef float HALF = 0.5


cdef struct Layout:
    i64 length          # number of glyphs L (also the label)
    i64 width           # image width in pixels


cdef struct Geometry:
    i64 height, min_length, max_length, num_symbols, scale


cdef Layout draw_layout(u64* state, const Geometry* geo, i32* symbols, i64* xs, i64* ys,
                        float* inks) noexcept nogil:
    """Every draw of a sample's layout stream, in the contract's order: its length and width.

    With NULL outputs the symbols and glyph parameters are drawn and dropped (pass 1
    only needs the width and length, but must consume the same draws)."""
    cdef i64 s = geo.scale, k, length, x, gap, y
    cdef i32 t
    cdef float ink
    cdef Layout out
    length = geo.min_length + <i64>draw_int(state, <u64>(geo.max_length - geo.min_length + 1))
    for k in range(length):
        t = 1 + <i32>draw_int(state, <u64>geo.num_symbols)
        if symbols != NULL:
            symbols[k] = t
    x = s                       # left margin of one font pixel
    for k in range(length):
        gap = <i64>draw_int(state, <u64>(2 * s + 1))
        y = <i64>draw_int(state, <u64>(geo.height - GLYPH_H * s + 1))
        ink = INK_BASE + INK_SPAN * draw_single(state)
        if k > 0:
            x = x + (GLYPH_W + 1) * s     # the previous glyph and one font pixel of space
        x = x + gap
        if xs != NULL:
            xs[k], ys[k], inks[k] = x, y, ink
    out.length = length
    out.width = x + (GLYPH_W + 1) * s + <i64>draw_int(state, <u64>(2 * s + 1))
    return out


cdef void render(float* px, u64 state, i64 height, i64 width, i64 scale, float noise, i64 length,
                 const i32* symbols, const i64* xs, const i64* ys, const float* inks) noexcept nogil:
    """The pixels: noise over the whole line (``0 + v``, in row-major order), then each
    glyph's ink added to the pixels its bitmap covers (glyphs never overlap)."""
    cdef i64 p, k, r, c, yy, xx, n = height * width
    cdef unsigned char bits
    cdef float v, ink
    for p in range(n):
        v = noise * (draw_single(&state) - HALF)
        # The contract's f32(ink + v) with ink = 0: a -0.0 noise value becomes +0.0 (no
        # compiler folds 0 + v to v without -fno-signed-zeros; the no_noise vector pins it).
        px[p] = <float>0.0 + v
    for k in range(length):
        ink = inks[k]
        for r in range(GLYPH_H * scale):
            bits = FONT_ROWS[symbols[k] - 1][r // scale]
            yy = ys[k] + r
            for c in range(GLYPH_W * scale):
                if bits & (16 >> (c // scale)):
                    xx = xs[k] + c
                    # ink + (0 + v) equals ink + v: they differ only in the sign of a zero v.
                    px[yy * width + xx] = ink + px[yy * width + xx]


@cython.auto_pickle(False)
cdef class SyntheticTextLines(ArrayImageDataset):
    """Lines of hexadecimal glyphs a model can learn to read (docs/contract.md).

    Sample ``i`` is ``[1, height, W_i]`` float32: ``L`` glyphs of the 5x7 font
    ``FONT``, each ``scale`` times larger, placed left to right with jittered gaps,
    baseline and stroke intensity, over uniform noise of amplitude ``noise``. Its target
    is the glyphs' symbol ids (``1 .. num_symbols``, 0 is left for the CTC blank), its
    label is ``L``. Everything comes from ``SampleRng(derive(seed, 0, i, 0, 4))`` (the
    layout) and ``SampleRng(derive(seed, 0, i, 0, 5))`` (the pixels).

    Parameters
    ----------
    count : int
        Number of samples, >= 1.
    height : int, default 24
        Image height, from ``7 * scale`` to 4096.
    min_length, max_length : int, default 1 and 6
        The number of glyphs of a line, ``1 <= min_length <= max_length <= 4096``.
    num_symbols : int, default 10
        Size of the alphabet, 1 to 16: the first ``num_symbols`` glyphs of ``GLYPHS``.
    scale : int, default 2
        Pixels per font pixel, 1 to 64.
    noise : float, default 0.5
        Amplitude of the uniform noise (rounded to float32), finite and >= 0.
    seed : int
        Dataset seed, reduced mod 2**64.

    Attributes
    ----------
    vocabulary : tuple of str
        ``vocabulary[t]`` is the character of target id ``t``; ``vocabulary[0]`` is
        ``"<blank>"``.
    """
    cdef readonly Py_ssize_t height, min_length, max_length, num_symbols, scale
    cdef readonly float noise
    cdef readonly u64 seed

    def __init__(self, count, height=24, min_length=1, max_length=6, num_symbols=10, scale=2,
                 noise=0.5, seed=0):
        self.begin_init()
        cdef Geometry geo
        cdef Py_ssize_t n = as_size(count, "count", 1, (1 << 31) - 1)
        geo.scale = as_size(scale, "scale", 1, MAX_SCALE)
        geo.height = as_size(height, "height", GLYPH_H * geo.scale, MAX_HEIGHT)
        geo.min_length = as_size(min_length, "min_length", 1, MAX_LENGTH)
        geo.max_length = as_size(max_length, "max_length", geo.min_length, MAX_LENGTH)
        geo.num_symbols = as_size(num_symbols, "num_symbols", 1, len(GLYPHS))
        cdef float amplitude = as_float32(noise, "noise")
        if not amplitude >= 0:
            raise ValueError(f"noise must be >= 0, received {noise!r}")
        self._generate(n, &geo, amplitude, as_u64(seed, "seed"))
        self.height, self.min_length, self.max_length = geo.height, geo.min_length, geo.max_length
        self.num_symbols, self.scale, self.noise = geo.num_symbols, geo.scale, amplitude

    @property
    def vocabulary(self):
        """``Vocabulary("0123...")``: the character of each target id, blank first (``data/vocabulary.py``)."""
        return _with_blank(GLYPHS[:self.num_symbols])

    def decode(self, target):
        """The text of ``target`` (target ids) under :attr:`vocabulary`."""
        return _decode(target, self.vocabulary)

    def __repr__(self):
        return (f"SyntheticTextLines(count={self.count}, height={self.height}, min_length={self.min_length}, "
                f"max_length={self.max_length}, num_symbols={self.num_symbols}, scale={self.scale}, "
                f"noise={self.noise!r}, seed={self.seed})")

    def __reduce__(self):
        if not self._initialised:
            raise RuntimeError("this SyntheticTextLines was never initialised (its __init__ did not run)")
        return (SyntheticTextLines, (self.count, self.height, self.min_length, self.max_length,
                                     self.num_symbols, self.scale, self.noise, self.seed))

    cdef _generate(self, Py_ssize_t n, Geometry* geo, float noise, u64 seed):
        # Pass 1 (layouts, symbols drawn and dropped): widths, lengths and offsets, every
        # sum checked. Pass 2: the same draws again into the storage, then the pixels.
        cdef cnp.npy_intp dims[2]
        dims[0], dims[1] = n, 3
        cdef cnp.ndarray shapes = sealed_empty(2, dims, cnp.NPY_INT64)
        cdef cnp.ndarray target_offsets = sealed_vector(n + 1, cnp.NPY_INT64)
        cdef cnp.ndarray pixel_offsets = sealed_vector(n, cnp.NPY_INT64)
        cdef cnp.ndarray labels = sealed_vector(n, cnp.NPY_INT32)
        cdef i64[:, ::1] shape_view = shapes
        cdef i64[::1] toff = target_offsets, poff = pixel_offsets
        cdef i32[::1] lview = labels
        cdef Py_ssize_t i, npix, total = 0, targets_total = 0
        cdef u64 state
        cdef Layout layout
        cdef bint overflow = False
        with nogil:
            toff[0] = 0
            for i in range(n):
                state = derive_seed(seed, 0, <u64>i, 0, LAYOUT_STREAM)
                layout = draw_layout(&state, geo, NULL, NULL, NULL, NULL)
                shape_view[i, 0], shape_view[i, 1], shape_view[i, 2] = 1, geo.height, layout.width
                poff[i] = total
                lview[i] = <i32>layout.length
                if (mul_overflows(geo.height, layout.width, &npix) or add_overflows(total, npix, &total)
                        or add_overflows(targets_total, layout.length, &targets_total)):
                    overflow = True
                    break
                toff[i + 1] = targets_total
        if overflow:
            raise ValueError(f"SyntheticTextLines of count={n}, height={geo.height}, max_length="
                             f"{geo.max_length}, scale={geo.scale} does not fit in memory: its pixel "
                             f"count exceeds 2**63 - 1")
        cdef cnp.ndarray targets = sealed_vector(targets_total, cnp.NPY_INT32)
        cdef cnp.ndarray pixels = sealed_vector(total, cnp.NPY_FLOAT32)   # MemoryError if it cannot be had
        self._fill(n, geo, noise, seed, targets, pixels, shape_view, toff, poff)
        self.seed = seed
        self._set_storage(pixels, pixel_offsets, shapes, targets, target_offsets, labels)

    cdef _fill(self, Py_ssize_t n, const Geometry* geo, float noise, u64 seed, cnp.ndarray targets,
               cnp.ndarray pixels, i64[:, ::1] shape_view, i64[::1] toff, i64[::1] poff):
        """Pass 2: each sample's symbols into ``targets``, its pixels into ``pixels``."""
        cdef i64[::1] xs = np.empty(geo.max_length, dtype=np.int64)
        cdef i64[::1] ys = np.empty(geo.max_length, dtype=np.int64)
        cdef float[::1] inks = np.empty(geo.max_length, dtype=np.float32)
        cdef i32* tv = <i32*>cnp.PyArray_DATA(targets)
        cdef float* px = <float*>cnp.PyArray_DATA(pixels)
        cdef Py_ssize_t i
        cdef u64 state
        with nogil:
            for i in range(n):
                state = derive_seed(seed, 0, <u64>i, 0, LAYOUT_STREAM)
                draw_layout(&state, geo, tv + toff[i], &xs[0], &ys[0], &inks[0])
                render(px + poff[i], derive_seed(seed, 0, <u64>i, 0, PIXEL_STREAM), geo.height,
                       shape_view[i, 2], geo.scale, noise, toff[i + 1] - toff[i], tv + toff[i],
                       &xs[0], &ys[0], &inks[0])
