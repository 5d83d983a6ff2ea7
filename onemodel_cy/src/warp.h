/* The row loops of onemodel_cy.augment's kernels (docs/contract.md, "Text-line
   augmentations": Affine, Perspective, Elastic and their bilinear sampling; the noise
   draws; the blur's taps; Stretch's horizontal pass), for augment/kernels.pyx. Pure C,
   no Python; the rng's om_fmix64 and OM_GOLDEN_GAMMA come from core/rng.pxd.

   Each is compiled at up to four SIMD levels (src/warp_level.h, included once per level):
   0 scalar C, 1 SSE2, 2 AVX2, 3 AVX-512 (F, DQ, BW, VL), the levels above the build's as
   whole functions with a target attribute, and om_warp_level picks one per kernel call
   from the CPU, up to a cap (tests lower it to run every level on one machine). All the
   levels give the same bits.

   A warp's row is done in chunks of OM_WARP_CHUNK pixels: first the chunk's source
   coordinates (simple loops the compiler vectorises), then the sampling, 4, 8 or 16
   pixels at a time (a scalar loop for the rest). SIMD float32 add, sub,
   mul and div and the int/float conversions round each lane exactly like the scalar
   instructions, and the build uses -ffp-contract=off, so nothing is fused: every step is
   the contract's expression in its order. A term is taken out of the pixel loop only
   where it is one operation on row-constant operands (the same float32 value); no sum
   is made incremental. The neighbours of a pixel near the edge are read at clamped
   indices whatever the border: the clamped pixel is the replicated border's value, and
   the constant border then puts `fill` where an index was outside. */
#ifndef ONEMODEL_CY_WARP_H
#define ONEMODEL_CY_WARP_H
#include <stddef.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>
#define OM_WARP_WIDE 1      /* the AVX2 and AVX-512 levels */
#else
#define OM_WARP_WIDE 0
#endif

/* Why whole functions per level: the first AVX2 clone of the row loops called the SSE2
   sampler per chunk, paid the SSE/AVX transition on every call and took twice as long
   (measured). */

enum { OM_WARP_CHUNK = 64 };

/* The contract's interpolation of the four neighbours. */
static inline float om_lerp2(float p00, float p01, float p10, float p11, float fx, float fy) {
    const float top = p00 + fx * (p01 - p00);
    const float bottom = p10 + fx * (p11 - p10);
    return top + fy * (bottom - top);
}

/* One sample whose floors (x0, y0) and fractions are known, at any position: the
   neighbours at clamped indices (the replicated border's pixels), `fill` for an index
   outside under the constant border. */
static inline float om_sample_any(const float* plane, ptrdiff_t h, ptrdiff_t w, int constant, float fill,
                                  ptrdiff_t x0, ptrdiff_t y0, float fx, float fy) {
    const ptrdiff_t xa = x0 < 0 ? 0 : (x0 >= w ? w - 1 : x0), xb = x0 + 1 >= w ? w - 1 : (x0 + 1 < 0 ? 0 : x0 + 1);
    const ptrdiff_t ya = y0 < 0 ? 0 : (y0 >= h ? h - 1 : y0), yb = y0 + 1 >= h ? h - 1 : (y0 + 1 < 0 ? 0 : y0 + 1);
    const float* top = plane + ya * w;
    const float* bottom = plane + yb * w;
    float p00 = top[xa], p01 = top[xb], p10 = bottom[xa], p11 = bottom[xb];
    if (constant) {
        const int in_xa = x0 >= 0 && x0 < w, in_xb = x0 + 1 >= 0 && x0 + 1 < w;
        const int in_ya = y0 >= 0 && y0 < h, in_yb = y0 + 1 >= 0 && y0 + 1 < h;
        p00 = in_xa && in_ya ? p00 : fill;
        p01 = in_xb && in_ya ? p01 : fill;
        p10 = in_xa && in_yb ? p10 : fill;
        p11 = in_xb && in_yb ? p11 : fill;
    }
    return om_lerp2(p00, p01, p10, p11, fx, fy);
}

/* A coordinate kept to [-2, high] (NaN becomes -2: it fails s >= -2), then floored:
   truncation, one less where it went up (exact for |s| < 2^31); *fraction = s - floor. */
static inline ptrdiff_t om_floor_kept(float s, float high, float* fraction) {
    const float low = -2.0f, one = 1.0f;
    float t;
    if (!(s >= low)) s = low;
    if (s > high) s = high;
    t = (float)(int)s;
    if (t > s) t = t - one;
    *fraction = s - t;
    return (ptrdiff_t)t;
}


#define OM_L(name) name##_0
#define OM_TARGET
#define OM_LEVEL 0
#include "warp_level.h"
#undef OM_L
#undef OM_TARGET
#undef OM_LEVEL
#if defined(__SSE2__)
#define OM_L(name) name##_1
#define OM_TARGET
#define OM_LEVEL 1
#include "warp_level.h"
#undef OM_L
#undef OM_TARGET
#undef OM_LEVEL
#endif
#if OM_WARP_WIDE
#define OM_L(name) name##_2
#define OM_TARGET __attribute__((target("avx2")))
#define OM_LEVEL 2
#include "warp_level.h"
#undef OM_L
#undef OM_TARGET
#undef OM_LEVEL
#define OM_L(name) name##_3
#define OM_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#define OM_LEVEL 3
#include "warp_level.h"
#undef OM_L
#undef OM_TARGET
#undef OM_LEVEL
#endif

/* The widest level this CPU runs: 3 AVX-512 (F, DQ, BW and VL), 2 AVX2, 1 SSE2, 0 none. */
static int om_warp_cpu_level(void) {
#if OM_WARP_WIDE
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        return 3;
    if (__builtin_cpu_supports("avx2"))
        return 2;
#endif
#if defined(__SSE2__)
    return 1;
#else
    return 0;
#endif
}

/* The level a kernel call runs at: the CPU's, at most `cap`. */
static inline int om_warp_level(int cpu, int cap) { return cpu < cap ? cpu : cap; }

/* A plane of h * w pixels, at level 2 or 3, computes the pixels' offsets and the floors
   plus one (up to w + 2 and h + 2) as int. */
static inline int om_warp_plane_level(int level, ptrdiff_t h, ptrdiff_t w) {
    return level > 1 && (h > 0x7fffffff / (w > 0 ? w : 1) || h > 0x7fff0000 || w > 0x7fff0000) ? 1 : level;
}


/* A kernel's function at `level`. */
#define OM_PICK(level, name, args) do { \
    if (OM_WARP_WIDE && (level) >= 3) OM_CALL3(name, args); \
    else if (OM_WARP_WIDE && (level) == 2) OM_CALL2(name, args); \
    else if ((level) == 1) OM_CALL1(name, args); \
    else name##_0 args; } while (0)
#if OM_WARP_WIDE
#define OM_CALL3(name, args) name##_3 args
#define OM_CALL2(name, args) name##_2 args
#else
#define OM_CALL3(name, args) name##_0 args
#define OM_CALL2(name, args) name##_0 args
#endif
#if defined(__SSE2__)
#define OM_CALL1(name, args) name##_1 args
#else
#define OM_CALL1(name, args) name##_0 args
#endif

static void om_affine_plane(const float* src, ptrdiff_t h, ptrdiff_t w, float* dst, ptrdiff_t oh, ptrdiff_t ow,
                            const float* m, float shift, int constant, float fill, int level) {
    level = om_warp_plane_level(level, h, w);
    OM_PICK(level, om_affine_plane, (src, h, w, dst, oh, ow, m, shift, constant, fill));
}

static void om_perspective_plane(const float* src, ptrdiff_t h, ptrdiff_t w, float* dst, const float* k,
                                 int constant, float fill, int level) {
    level = om_warp_plane_level(level, h, w);
    OM_PICK(level, om_perspective_plane, (src, h, w, dst, k, constant, fill));
}

static void om_elastic(const float* src, ptrdiff_t c, ptrdiff_t h, ptrdiff_t w, float* dst, const float* nodes,
                       ptrdiff_t nx, const int* column_node, const float* column_fraction, const int* row_node,
                       const float* row_fraction, int constant, float fill, int level) {
    level = om_warp_plane_level(level, h, w);
    OM_PICK(level, om_elastic, (src, c, h, w, dst, nodes, nx, column_node, column_fraction, row_node,
                                row_fraction, constant, fill));
}

static void om_noise(const float* src, float* dst, ptrdiff_t n, uint64_t state, int kind, float a, float b,
                     float c, float half_a, float scale, int level) {
    OM_PICK(level, om_noise, (src, dst, n, state, kind, a, b, c, half_a, scale));
}

static void om_blur_taps(const float* const* rows, const float* weights, ptrdiff_t r, float* out, ptrdiff_t w,
                         int level) {
    OM_PICK(level, om_blur_taps, (rows, weights, r, out, w));
}

static void om_resize_rows(const float* src, float* dst, ptrdiff_t rows, ptrdiff_t w, ptrdiff_t ow, const int* i0,
                           const int* i1, const float* f, int level) {
    OM_PICK(level, om_resize_rows, (src, dst, rows, w, ow, i0, i1, f));
}
#endif
