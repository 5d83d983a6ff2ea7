"""The pixel kernels of :mod:`onemodel_cy.augment`, without the GIL.

Each kernel is the contract's text (docs/contract.md, "Text-line augmentations") written
in C: one float32 operation per line of the text, in its order, never fused (setup.py
builds with ``-ffp-contract=off``). Every float constant is a typed float32 variable so
that C never promotes a step to double. ``spec_tests/reference.py`` is the same text in
pure Python, and the tests compare the two bit for bit.
"""
from libc.math cimport ceilf
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

from onemodel_cy.core.typedefs cimport u64, u32
from onemodel_cy.core.rng cimport draw_u64, draw_single

cdef extern from *:
    """
    #include <string.h>
    #include <stdint.h>
    static inline float om_f32_bits(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }
    """
    float f32_bits "om_f32_bits"(u32 bits) noexcept nogil

cdef extern from "warp.h" nogil:
    int warp_cpu_level "om_warp_cpu_level"()
    int warp_level "om_warp_level"(int cpu, int cap)
    void om_affine_plane(const float* src, Py_ssize_t h, Py_ssize_t w, float* dst, Py_ssize_t oh, Py_ssize_t ow,
                         const float* m, float shift, int constant, float fill, int level)
    void om_perspective_plane(const float* src, Py_ssize_t h, Py_ssize_t w, float* dst, const float* k,
                              int constant, float fill, int level)
    void om_elastic(const float* src, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, float* dst, const float* nodes,
                    Py_ssize_t nx, const int* column_node, const float* column_fraction, const int* row_node,
                    const float* row_fraction, int constant, float fill, int level)
    void om_noise(const float* src, float* dst, Py_ssize_t n, u64 state, int kind, float a, float b, float c,
                  float half_a, float scale, int level)
    void om_blur_taps(const float* const* rows, const float* weights, Py_ssize_t r, float* out, Py_ssize_t w,
                      int level)
    void om_resize_rows(const float* src, float* dst, Py_ssize_t rows, Py_ssize_t w, Py_ssize_t ow, const int* i0,
                        const int* i1, const float* f, int level)

# The SIMD level of the row loops in src/warp.h (0 scalar, 1 SSE2, 2 AVX2, 3 AVX-512): the
# CPU's, at most `simd_cap`, which tests lower to run every level on one machine. Every
# level gives the same bits.
cdef int cpu_level = warp_cpu_level()
cdef int simd_cap = 3


cdef inline int level() noexcept nogil:
    return warp_level(cpu_level, simd_cap)


def simd_kernels(cap=None):
    """The widest level of the augmentation kernels' row loops this CPU runs (0 scalar C,
    1 SSE2, 2 AVX2, 3 AVX-512; not the collator's numbering), and with ``cap`` lower it
    (for tests: every level gives the same bits): returns the previous cap."""
    global simd_cap
    if cap is None:
        return cpu_level
    cap = int(cap)
    if cap < 0:
        raise ValueError(f"cap must be >= 0, received {cap}")
    previous, simd_cap = simd_cap, min(cap, 3)
    return previous


# The contract's constants, by their float32 bits.
cdef float INV_2 = f32_bits(0x3f000000)           # 1/2
cdef float INV_6 = f32_bits(0x3e2aaaab)           # 1/3!
cdef float INV_24 = f32_bits(0x3d2aaaab)          # 1/4!
cdef float INV_120 = f32_bits(0x3c088889)         # 1/5!
cdef float INV_720 = f32_bits(0x3ab60b61)         # 1/6!
cdef float INV_5040 = f32_bits(0x39500d01)        # 1/7!
cdef float INV_40320 = f32_bits(0x37d00d01)       # 1/8!
cdef float INV_362880 = f32_bits(0x3638ef1d)      # 1/9!
cdef float INV_3628800 = f32_bits(0x3493f27e)     # 1/10!
cdef float NORMAL_SCALE = f32_bits(0x37ddb3d7)    # 1 / the sd of four 16-bit uniforms summed
cdef float EXP_SCALE = f32_bits(0x3b800000)       # 2^-8
cdef float EXP_LIMIT = f32_bits(0x42ae0000)       # 87


cdef float exp_neg(float t) noexcept nogil:
    """exp(-t) for t >= 0: a degree-7 Taylor polynomial of exp(-t/256), squared 8 times."""
    cdef float one = 1.0, q, s
    cdef int _k
    if not t <= EXP_LIMIT:
        return 0.0
    s = t * EXP_SCALE
    q = INV_5040
    q = INV_720 - s * q
    q = INV_120 - s * q
    q = INV_24 - s * q
    q = INV_6 - s * q
    q = INV_2 - s * q
    q = one - s * q
    q = one - s * q
    for _k in range(8):
        q = q * q
    return q


cdef float sin_small(float x) noexcept nogil:
    """sin(x) for |x| <= pi/4: x(1 - x^2/3! + x^4/5! - x^6/7! + x^8/9!) by Horner in x^2."""
    cdef float one = 1.0
    cdef float x2 = x * x
    cdef float q = INV_362880
    q = q * x2 - INV_5040
    q = q * x2 + INV_120
    q = q * x2 - INV_6
    q = q * x2 + one
    return x * q


cdef float cos_small(float x) noexcept nogil:
    """cos(x) for |x| <= pi/4: 1 - x^2/2! + x^4/4! - ... - x^10/10!, by Horner in x^2."""
    cdef float one = 1.0
    cdef float x2 = x * x
    cdef float q = -INV_3628800
    q = q * x2 + INV_40320
    q = q * x2 - INV_720
    q = q * x2 + INV_24
    q = q * x2 - INV_2
    q = q * x2 + one
    return q


cdef inline float normal_of(u64 u) noexcept nogil:
    """One draw's normal: its four 16-bit parts summed (an integer), centred and scaled to
    unit sd. The sum (< 2^18) goes to float through int: the same exact value as from u64,
    without the unsigned conversion's branch."""
    cdef int total = <int>((u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48))
    cdef float centre = 131070.0
    return (<float>total - centre) * NORMAL_SCALE


cdef float fast_normal(u64* state) noexcept nogil:
    """The contract's normal(): one draw."""
    return normal_of(draw_u64(state))


# ---- sampling -------------------------------------------------------------------------------

cdef inline Py_ssize_t clamp_index(Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    return 0 if i < 0 else (n - 1 if i >= n else i)


cdef inline float floor_exact(float s) noexcept nogil:
    # floor(s) for |s| < 2^31, without a libm call (baseline x86-64 has no rounding
    # instruction): truncate, then step down when truncation went up. Exact.
    cdef float t = <float><int>s
    return t - <float>1.0 if t > s else t


cdef inline float clamp_coordinate(float s, Py_ssize_t n) noexcept nogil:
    # Far outside the image every neighbour is the border's: clamping there changes no
    # value and keeps the index in range. NaN (a division by zero) counts as far outside.
    cdef float low = -2.0
    cdef float high = <float>(n + 1)
    if not s >= low:
        return low
    if s > high:
        return high
    return s


# ---- geometric ------------------------------------------------------------------------------


cdef inline float line_position(Py_ssize_t k, float scale) noexcept nogil:
    # Output sample k's centre in source coordinates: (k + 1/2) * (n / m) - 1/2.
    cdef float half = 0.5
    return (<float>k + half) * scale - half


cdef int resize_rows(const float* src, float* dst, Py_ssize_t rows, Py_ssize_t w, Py_ssize_t ow) noexcept nogil:
    """Every row from w to ow samples: a + f * (b - a) between the two nearest (replicated).
    Each column's two indices and fraction are computed once, then the rows one after the
    other (src/warp.h). Returns -1 when the tables could not be allocated."""
    cdef float scale = <float>w / <float>ow
    cdef Py_ssize_t x, i0
    cdef float s, f
    cdef int* index = <int*>malloc(2 * ow * sizeof(int) + ow * sizeof(float))
    if index == NULL:
        return -1
    cdef int* index1 = index + ow
    cdef float* fraction = <float*>(index + 2 * ow)
    for x in range(ow):
        s = clamp_coordinate(line_position(x, scale), w)
        f = floor_exact(s)
        i0 = <Py_ssize_t>f
        fraction[x] = s - f
        index1[x] = <int>clamp_index(i0 + 1, w)
        index[x] = <int>clamp_index(i0, w)
    om_resize_rows(src, dst, rows, w, ow, index, index1, fraction, level())
    free(index)
    return 0


cdef void resize_columns(const float* src, float* dst, Py_ssize_t h, Py_ssize_t oh, Py_ssize_t w) noexcept nogil:
    """One channel's columns from h to oh samples, as resize_rows does along rows."""
    cdef float scale = <float>h / <float>oh
    cdef Py_ssize_t y, x, i0
    cdef float s, f
    cdef const float* top
    cdef const float* bottom
    for y in range(oh):
        s = clamp_coordinate(line_position(y, scale), h)
        f = floor_exact(s)
        i0 = <Py_ssize_t>f
        f = s - f
        top = src + clamp_index(i0, h) * w
        bottom = src + clamp_index(i0 + 1, h) * w
        for x in range(w):
            dst[y * w + x] = top[x] + f * (bottom[x] - top[x])


cdef int resize(const Step* st, const float* src, float* dst, float* tmp) noexcept nogil:
    """Horizontal pass (w -> ow, into tmp), then vertical (h -> oh); a pass whose size does
    not change is a copy."""
    cdef Py_ssize_t ch, c = st.c, h = st.h, w = st.w, oh = st.oh, ow = st.ow
    if ow != w:
        if resize_rows(src, tmp if oh != h else dst, c * h, w, ow) != 0:
            return -1
    elif oh == h:
        memcpy(dst, src, c * h * w * sizeof(float))
        return 0
    else:
        memcpy(tmp, src, c * h * w * sizeof(float))
    if oh != h:
        for ch in range(c):
            resize_columns(tmp + ch * h * ow, dst + ch * oh * ow, h, oh, ow)
    return 0


cdef void affine(const Step* st, const float* src, float* dst) noexcept nogil:
    """Each output pixel's centre, relative to the output's centre and less the shift,
    through the inverse matrix, plus the input's centre: bilinear there (src/warp.h)."""
    cdef Py_ssize_t ch, h = st.h, w = st.w, oh = st.oh, ow = st.ow
    cdef int at = level()
    for ch in range(st.c):
        om_affine_plane(src + ch * h * w, h, w, dst + ch * oh * ow, oh, ow, st.v, st.v[4],
                        st.border == BORDER_CONSTANT, st.fill, at)


cdef void perspective(const Step* st, const float* src, float* dst) noexcept nogil:
    """Output pixel centre (u, v) in the unit square, mapped to the source quad:
    X = (a u + b v + c) / (g u + h v + 1), Y = (d u + e v + f) / (g u + h v + 1) (src/warp.h)."""
    cdef Py_ssize_t ch, h = st.h, w = st.w
    cdef int at = level()
    for ch in range(st.c):
        om_perspective_plane(src + ch * h * w, h, w, dst + ch * h * w, st.v, st.border == BORDER_CONSTANT,
                             st.fill, at)


cdef int elastic(const Step* st, const float* src, float* dst) noexcept nogil:
    """A grid of nodes every `cell` pixels, each moved by (U(-m, m), U(-m, m)) drawn row by
    row; a pixel's displacement is the bilinear blend of its cell's four nodes (src/warp.h)."""
    cdef Py_ssize_t cell = st.ia, nx = st.w // cell + 2, ny = st.h // cell + 2, h = st.h, w = st.w
    # The nodes (dx, dy interleaved), then each column's and row's fraction; then each
    # column's and row's node index.
    cdef float* nodes = <float*>malloc((nx * ny * 2 + w + h) * sizeof(float))
    if nodes == NULL:
        return -1
    cdef float* column_fraction = nodes + nx * ny * 2
    cdef float* row_fraction = column_fraction + w
    cdef int* column_node = <int*>malloc((w + h) * sizeof(int))
    if column_node == NULL:
        free(nodes)
        return -1
    cdef int* row_node = column_node + w
    cdef u64 state = st.state
    cdef float m = st.v[0], span = st.v[0] + st.v[0]
    cdef Py_ssize_t k
    for k in range(nx * ny * 2):
        nodes[k] = -m + span * draw_single(&state)
    node_fractions(w, cell, nx, column_node, column_fraction)
    node_fractions(h, cell, ny, row_node, row_fraction)
    om_elastic(src, st.c, h, w, dst, nodes, nx, column_node, column_fraction, row_node, row_fraction,
               st.border == BORDER_CONSTANT, st.fill, level())
    free(column_node)
    free(nodes)
    return 0


cdef void node_fractions(Py_ssize_t n, Py_ssize_t cell, Py_ssize_t nodes, int* index, float* fraction) noexcept nogil:
    """Pixel k's cell along one axis: t = (f32(k) + 0.5) * (1/f32(cell)), i = min(floor(t),
    nodes - 2), its fraction t - i."""
    cdef float half = 0.5, inv_cell = <float>1.0 / <float>cell, t
    cdef Py_ssize_t k, i
    for k in range(n):
        t = (<float>k + half) * inv_cell
        i = min(<Py_ssize_t>floor_exact(t), nodes - 2)
        index[k] = <int>i
        fraction[k] = t - <float>i


# ---- morphology and blur --------------------------------------------------------------------

cdef void pad_row(const float* row, Py_ssize_t w, Py_ssize_t before, Py_ssize_t after, float* out) noexcept nogil:
    """`row` with its first pixel repeated `before` times ahead and its last `after` times
    behind (the replicated border), so that the window loops below index without clamping."""
    cdef Py_ssize_t k
    for k in range(before):
        out[k] = row[0]
    memcpy(out + before, row, w * sizeof(float))
    for k in range(after):
        out[before + w + k] = row[w - 1]


cdef void keep_extreme(float* best, const float* values, Py_ssize_t n, bint maximum) noexcept nogil:
    # best[x] replaced only by a strictly smaller (larger) value, as the contract's scan does.
    cdef Py_ssize_t x
    cdef float v, b
    if maximum:
        for x in range(n):
            v, b = values[x], best[x]
            best[x] = v if v > b else b
    else:
        for x in range(n):
            v, b = values[x], best[x]
            best[x] = v if v < b else b


cdef int window_extreme(const Step* st, const float* src, float* dst, float* tmp, bint maximum) noexcept nogil:
    """Minimum (or maximum) over the window [x - (kw-1)//2, x + kw//2] x [y - (kh-1)//2,
    y + kh//2], replicated at the border: rows first into tmp, then columns. Each pixel's
    candidates are taken in window order, k = 0 first, as the contract scans them."""
    cdef Py_ssize_t kw = st.ia, kh = st.ib, h = st.h, w = st.w
    cdef Py_ssize_t ch, y, k, lo_x = (kw - 1) // 2, lo_y = (kh - 1) // 2
    cdef float* padded = <float*>malloc((w + kw) * sizeof(float))
    if padded == NULL:
        return -1
    cdef float* out
    for ch in range(st.c):
        for y in range(h):
            pad_row(src + (ch * h + y) * w, w, lo_x, kw - 1 - lo_x, padded)
            out = tmp + (ch * h + y) * w
            memcpy(out, padded, w * sizeof(float))
            for k in range(1, kw):
                keep_extreme(out, padded + k, w, maximum)
        for y in range(h):
            out = dst + (ch * h + y) * w
            memcpy(out, tmp + (ch * h + clamp_index(y - lo_y, h)) * w, w * sizeof(float))
            for k in range(1, kh):
                keep_extreme(out, tmp + (ch * h + clamp_index(y - lo_y + k, h)) * w, w, maximum)
    free(padded)
    return 0


cdef Py_ssize_t blur_weights(float sigma, float* weights) noexcept nogil:
    """The normalised weights n_0 .. n_r of radius r = ceil(3 sigma); returns r."""
    cdef float three = 3.0, two = 2.0
    cdef Py_ssize_t r = <Py_ssize_t>ceilf(three * sigma), k
    if r > MAX_RADIUS:
        r = MAX_RADIUS
    if r == 0:
        weights[0] = 1.0
        return 0
    cdef float d = (two * sigma) * sigma, total
    for k in range(r + 1):
        weights[k] = exp_neg(<float>(k * k) / d)
    total = weights[r]                      # k = -r, then k = -r+1 .. r, left to right
    for k in range(-r + 1, r + 1):
        total = total + weights[k if k >= 0 else -k]
    for k in range(r + 1):
        weights[k] = weights[k] / total
    return r


cdef int blur(const Step* st, const float* src, float* dst, float* tmp) noexcept nogil:
    """Rows, then columns: sum over k = -r .. r of n_|k| * p(clamp(x + k)), from 0, left to
    right (src/warp.h's om_blur_taps: each pixel adds its terms in k order)."""
    cdef float weights[MAX_RADIUS + 1]
    cdef const float* rows[2 * MAX_RADIUS + 1]
    cdef Py_ssize_t r = blur_weights(st.v[0], weights)
    cdef Py_ssize_t ch, y, k, h = st.h, w = st.w
    cdef int at = level()
    cdef float* padded = <float*>malloc((w + 2 * r + 1) * sizeof(float))
    if padded == NULL:
        return -1
    for k in range(2 * r + 1):
        rows[k] = padded + k
    for ch in range(st.c):
        for y in range(h):
            pad_row(src + (ch * h + y) * w, w, r, r, padded)
            om_blur_taps(rows, weights, r, tmp + (ch * h + y) * w, w, at)
        for y in range(h):
            for k in range(-r, r + 1):
                rows[k + r] = tmp + (ch * h + clamp_index(y + k, h)) * w
            om_blur_taps(rows, weights, r, dst + (ch * h + y) * w, w, at)
        for k in range(2 * r + 1):
            rows[k] = padded + k
    free(padded)
    return 0


# ---- photometric, in place ------------------------------------------------------------------

cdef void photometric(const Step* st, const float* src, float* dst) noexcept nogil:
    cdef Py_ssize_t i, n = st.c * st.h * st.w
    cdef float a = st.v[0], b = st.v[1], c = st.v[2], half_amount = st.v[0] * <float>0.5
    # The noise kinds draw in src/warp.h's om_noise: normal_of and draw_single's steps, one
    # draw a pixel in pixel order, vectorised.
    if st.kind == K_GAIN_OFFSET:
        for i in range(n):
            dst[i] = src[i] * a + b
    elif st.kind == K_NOISE:
        om_noise(src, dst, n, st.state, 0, a, b, c, half_amount, NORMAL_SCALE, level())
    elif st.kind == K_SPECKLE:
        om_noise(src, dst, n, st.state, 1, a, b, c, half_amount, NORMAL_SCALE, level())
    elif st.kind == K_IMPULSE:
        om_noise(src, dst, n, st.state, 2, a, b, c, half_amount, NORMAL_SCALE, level())
    elif st.kind == K_INVERT:
        for i in range(n):
            dst[i] = a - src[i]


cdef int run_step(const Step* step, const float* src, float* dst, float* tmp) noexcept nogil:
    cdef int kind = step.kind
    if kind == K_RESIZE:
        return resize(step, src, dst, tmp)
    elif kind == K_AFFINE:
        affine(step, src, dst)
    elif kind == K_PERSPECTIVE:
        perspective(step, src, dst)
    elif kind == K_ELASTIC:
        return elastic(step, src, dst)
    elif kind == K_ERODE or kind == K_DILATE:
        return window_extreme(step, src, dst, tmp, kind == K_DILATE)
    elif kind == K_BLUR:
        return blur(step, src, dst, tmp)
    else:
        photometric(step, src, dst)
    return 0


# ---- the contract's functions, for the conformance kit ---------------------------------------

def contract_function(str name, values):
    """``name`` (``"sin"``, ``"cos"`` or ``"expneg"``) of each float32 in ``values``, as the
    kernels compute it: a new float32 array. The conformance kit's ``augment_function``
    cases replay it (``onemodel_cy/conformance/augment.py``); no kernel calls it."""
    import numpy as np
    cdef float[::1] x = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    out = np.empty(x.shape[0], dtype=np.float32)
    cdef float[::1] y = out
    cdef Py_ssize_t k, n = x.shape[0]
    cdef int which = {"sin": 0, "cos": 1, "expneg": 2}.get(name, -1)
    if which < 0:
        raise ValueError(f"the contract's functions are 'sin', 'cos' and 'expneg', received {name!r}")
    for k in range(n):
        y[k] = sin_small(x[k]) if which == 0 else (cos_small(x[k]) if which == 1 else exp_neg(x[k]))
    return out


def contract_normals(u64 state, Py_ssize_t count):
    """``count`` draws of the contract's ``normal()`` from ``SampleRng(state)``: (a float32
    array, the state after them). For the conformance kit, as ``contract_function``."""
    import numpy as np
    if count < 0:
        raise ValueError(f"count must be >= 0, received {count}")
    out = np.empty(count, dtype=np.float32)
    cdef float[::1] y = out
    cdef Py_ssize_t k
    for k in range(count):
        y[k] = fast_normal(&state)
    return out, state
