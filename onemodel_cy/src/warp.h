/* The geometric kernels of onemodel_cy.augment (docs/contract.md, "Text-line
   augmentations": Affine, Perspective, Elastic and their bilinear sampling), for
   augment/kernels.pyx. Pure C, no Python.

   A row is done in chunks of OM_WARP_CHUNK pixels: first the chunk's source coordinates
   (simple loops the compiler vectorises), then the sampling, four pixels at a time with
   SSE2 (a scalar loop for the rest, and where SSE2 is missing). SIMD float32 add, sub,
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
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* No AVX2 clone (as src/row.h has): a clone of the row loops calling the SSE2 sampler
   paid the SSE/AVX transition on every chunk and took twice as long (measured). */

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

/* Bilinear sampling of `plane` (h x w) at the n points (sx[i], sy[i]), into out[i]. */
static inline void om_bilinear_chunk(const float* plane, ptrdiff_t h, ptrdiff_t w, int constant, float fill,
                                     const float* sx, const float* sy, int n, float* out) {
    const float high_x = (float)(w + 1), high_y = (float)(h + 1);
    int i = 0;
#if defined(__SSE2__)
    /* Four pixels at a time. The same steps as om_floor_kept: MAXPS(s, low) is
       s > low ? s : low, so NaN gives low; MINPS(s, high) is s < high ? s : high;
       CVTTPS2DQ truncates as (int)s does; t - (t > s ? 1 : 0) subtracts 0 (exact) or 1.
       When all four have their neighbours inside the plane (most pixels of a warp), each
       pixel's two pairs (p00, p01) and (p10, p11) are two 8-byte loads, and the
       interpolation is om_lerp2's, four lanes at once; otherwise each pixel goes through
       om_sample_any. */
    const __m128 low = _mm_set1_ps(-2.0f), hx = _mm_set1_ps(high_x), hy = _mm_set1_ps(high_y);
    const __m128 ones = _mm_set1_ps(1.0f);
    const __m128i below_x = _mm_set1_epi32(w - 1 > 0x7fffffff ? 0x7fffffff : (int)(w - 1));
    const __m128i below_y = _mm_set1_epi32(h - 1 > 0x7fffffff ? 0x7fffffff : (int)(h - 1));
    const __m128i minus_one = _mm_set1_epi32(-1);
    for (; i + 4 <= n; i += 4) {
        int xs[4], ys[4], k;
        float fxs[4], fys[4];
        __m128 s = _mm_min_ps(_mm_max_ps(_mm_loadu_ps(sx + i), low), hx);
        __m128 t = _mm_cvtepi32_ps(_mm_cvttps_epi32(s));
        t = _mm_sub_ps(t, _mm_and_ps(_mm_cmpgt_ps(t, s), ones));
        const __m128i x0 = _mm_cvttps_epi32(t);
        const __m128 fx = _mm_sub_ps(s, t);
        s = _mm_min_ps(_mm_max_ps(_mm_loadu_ps(sy + i), low), hy);
        t = _mm_cvtepi32_ps(_mm_cvttps_epi32(s));
        t = _mm_sub_ps(t, _mm_and_ps(_mm_cmpgt_ps(t, s), ones));
        const __m128i y0 = _mm_cvttps_epi32(t);
        const __m128 fy = _mm_sub_ps(s, t);
        /* 0 <= x0 < w - 1 and 0 <= y0 < h - 1 */
        const __m128i inside = _mm_and_si128(
            _mm_and_si128(_mm_cmpgt_epi32(x0, minus_one), _mm_cmpgt_epi32(below_x, x0)),
            _mm_and_si128(_mm_cmpgt_epi32(y0, minus_one), _mm_cmpgt_epi32(below_y, y0)));
        _mm_storeu_si128((__m128i*)xs, x0);
        _mm_storeu_si128((__m128i*)ys, y0);
        if (_mm_movemask_epi8(inside) == 0xffff) {
            const float* a0 = plane + (ptrdiff_t)ys[0] * w + xs[0];
            const float* a1 = plane + (ptrdiff_t)ys[1] * w + xs[1];
            const float* a2 = plane + (ptrdiff_t)ys[2] * w + xs[2];
            const float* a3 = plane + (ptrdiff_t)ys[3] * w + xs[3];
            const __m128 top01 = _mm_loadh_pi(_mm_loadl_pi(ones, (const __m64*)a0), (const __m64*)a1);
            const __m128 top23 = _mm_loadh_pi(_mm_loadl_pi(ones, (const __m64*)a2), (const __m64*)a3);
            const __m128 bot01 = _mm_loadh_pi(_mm_loadl_pi(ones, (const __m64*)(a0 + w)), (const __m64*)(a1 + w));
            const __m128 bot23 = _mm_loadh_pi(_mm_loadl_pi(ones, (const __m64*)(a2 + w)), (const __m64*)(a3 + w));
            const __m128 p00 = _mm_shuffle_ps(top01, top23, _MM_SHUFFLE(2, 0, 2, 0));
            const __m128 p01 = _mm_shuffle_ps(top01, top23, _MM_SHUFFLE(3, 1, 3, 1));
            const __m128 p10 = _mm_shuffle_ps(bot01, bot23, _MM_SHUFFLE(2, 0, 2, 0));
            const __m128 p11 = _mm_shuffle_ps(bot01, bot23, _MM_SHUFFLE(3, 1, 3, 1));
            const __m128 top = _mm_add_ps(p00, _mm_mul_ps(fx, _mm_sub_ps(p01, p00)));
            const __m128 bottom = _mm_add_ps(p10, _mm_mul_ps(fx, _mm_sub_ps(p11, p10)));
            _mm_storeu_ps(out + i, _mm_add_ps(top, _mm_mul_ps(fy, _mm_sub_ps(bottom, top))));
        } else {
            _mm_storeu_ps(fxs, fx);
            _mm_storeu_ps(fys, fy);
            for (k = 0; k < 4; k++)
                out[i + k] = om_sample_any(plane, h, w, constant, fill, xs[k], ys[k], fxs[k], fys[k]);
        }
    }
#endif
    for (; i < n; i++) {
        float fx, fy;
        const ptrdiff_t x0 = om_floor_kept(sx[i], high_x, &fx), y0 = om_floor_kept(sy[i], high_y, &fy);
        out[i] = om_sample_any(plane, h, w, constant, fill, x0, y0, fx, fy);
    }
}

/* Affine: output (x, y) samples sx = ((m00*dx + m01*dy) + f32(W)*0.5) - 0.5, sy likewise,
   dx = (f32(x) + 0.5) - f32(W')*0.5, dy = ((f32(y) + 0.5) - f32(H)*0.5) - t. m01*dy and
   m11*dy are row-constant products. One plane, src h x w to dst oh x ow. */
static void om_affine_plane(const float* src, ptrdiff_t h, ptrdiff_t w, float* dst, ptrdiff_t oh,
                                           ptrdiff_t ow, const float* m, float shift, int constant, float fill) {
    float sx[OM_WARP_CHUNK], sy[OM_WARP_CHUNK];
    const float half = 0.5f, m00 = m[0], m01 = m[1], m10 = m[2], m11 = m[3];
    const float out_cx = (float)ow * half, out_cy = (float)oh * half;
    const float in_cx = (float)w * half, in_cy = (float)h * half;
    ptrdiff_t y, start;
    int i, n;
    for (y = 0; y < oh; y++) {
        const float dy = (((float)y + half) - out_cy) - shift, ry0 = m01 * dy, ry1 = m11 * dy;
        for (start = 0; start < ow; start += n) {
            n = ow - start < OM_WARP_CHUNK ? (int)(ow - start) : OM_WARP_CHUNK;
            for (i = 0; i < n; i++) {
                const float dx = ((float)((int)start + i) + half) - out_cx;
                sx[i] = ((m00 * dx + ry0) + in_cx) - half;
                sy[i] = ((m10 * dx + ry1) + in_cy) - half;
            }
            om_bilinear_chunk(src, h, w, constant, fill, sx, sy, n, dst + y * ow + start);
        }
    }
}

/* Perspective: u = (f32(x) + 0.5) * (1/f32(W)), v likewise, q = (g*u + h*v) + 1,
   sx = ((a*u + b*v) + c)/q - 0.5, sy = ((d*u + e*v) + f)/q - 0.5; h*v, b*v and e*v are
   row-constant products. k holds a .. h. The shape is kept. */
static void om_perspective_plane(const float* src, ptrdiff_t h, ptrdiff_t w, float* dst,
                                                const float* k, int constant, float fill) {
    float sx[OM_WARP_CHUNK], sy[OM_WARP_CHUNK];
    const float half = 0.5f, one = 1.0f;
    const float a = k[0], b = k[1], c = k[2], d = k[3], e = k[4], f = k[5], g = k[6], hh = k[7];
    const float inv_w = one / (float)w, inv_h = one / (float)h;
    ptrdiff_t y, start;
    int i, n;
    for (y = 0; y < h; y++) {
        const float v = ((float)y + half) * inv_h, hv = hh * v, bv = b * v, ev = e * v;
        for (start = 0; start < w; start += n) {
            n = w - start < OM_WARP_CHUNK ? (int)(w - start) : OM_WARP_CHUNK;
            for (i = 0; i < n; i++) {
                const float u = ((float)((int)start + i) + half) * inv_w;
                const float q = (g * u + hv) + one;
                sx[i] = ((a * u + bv) + c) / q - half;
                sy[i] = ((d * u + ev) + f) / q - half;
            }
            om_bilinear_chunk(src, h, w, constant, fill, sx, sy, n, dst + y * w + start);
        }
    }
}

/* Elastic: pixel (x, y) samples (f32(x) + dx, f32(y) + dy), (dx, dy) the bilinear blend of
   its cell's four nodes (`nodes`: nx by ny, dx and dy interleaved). Column x's node index
   and fraction are column_node[x] and column_fraction[x] (the index never decreases along
   a row); row y's are row_node[y] and row_fraction[y]. Within a row, the columns of one
   cell share the nodes, so each run of them is one loop over the fractions with the
   nodes and their differences (n01 - n00 and n11 - n10, the contract's own subtractions)
   as constants. Each displacement serves every one of the c planes. */
static void om_elastic(const float* src, ptrdiff_t c, ptrdiff_t h, ptrdiff_t w, float* dst,
                                      const float* nodes, ptrdiff_t nx, const int* column_node,
                                      const float* column_fraction, const int* row_node, const float* row_fraction,
                                      int constant, float fill) {
    float sx[OM_WARP_CHUNK], sy[OM_WARP_CHUNK];
    ptrdiff_t y, start, ch;
    int i, n;
    for (y = 0; y < h; y++) {
        const float* row0 = nodes + 2 * row_node[y] * nx;
        const float* row1 = row0 + 2 * nx;
        const float fy = row_fraction[y], fyy = (float)y;
        for (start = 0; start < w; start += n) {
            n = w - start < OM_WARP_CHUNK ? (int)(w - start) : OM_WARP_CHUNK;
            for (i = 0; i < n;) {
                const int cell = column_node[start + i];
                const float* n0 = row0 + 2 * cell;
                const float* n1 = row1 + 2 * cell;
                const float ax = n0[0], dax = n0[2] - n0[0], bx = n1[0], dbx = n1[2] - n1[0];
                const float ay = n0[1], day = n0[3] - n0[1], by = n1[1], dby = n1[3] - n1[1];
                const float* fraction = column_fraction + start;
                int end = i + 1, k;
                while (end < n && column_node[start + end] == cell)
                    end++;
                for (k = i; k < end; k++) {
                    const float fx = fraction[k];
                    const float top_x = ax + fx * dax, bottom_x = bx + fx * dbx;
                    const float top_y = ay + fx * day, bottom_y = by + fx * dby;
                    sx[k] = (float)((int)start + k) + (top_x + fy * (bottom_x - top_x));
                    sy[k] = fyy + (top_y + fy * (bottom_y - top_y));
                }
                i = end;
            }
            for (ch = 0; ch < c; ch++)
                om_bilinear_chunk(src + ch * h * w, h, w, constant, fill, sx, sy, n, dst + (ch * h + y) * w + start);
        }
    }
}
#endif
