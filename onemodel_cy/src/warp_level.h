/* The row loops of src/warp.h at one SIMD level, included once per level by warp.h with
   OM_LEVEL (0 scalar, 1 SSE2, 2 AVX2, 3 AVX-512), OM_L(name) (the level's name for a
   function) and OM_TARGET (its target attribute) defined. Every function here is whole at
   its level (the row loops and the sampling compiled together, so that an AVX2 or
   AVX-512 function never calls SSE-encoded code in a loop: no SSE/AVX transitions), and
   every level computes each output with the same float32 operations in the same order:
   SIMD add, sub, mul, div, min, max and the int/float conversions round each lane exactly
   like the scalar instructions, integer lanes wrap like C's uint64_t, and the build uses
   -ffp-contract=off (nothing fused, at any level). No include guard: meant to be included
   several times. */

/* ---- a float vector of OMV_N lanes (blur) ----------------------------------------- */
#undef OMV_N
#undef omv
#undef omv_zero
#undef omv_set1
#undef omv_load
#undef omv_store
#undef omv_add
#undef omv_mul
#if OM_LEVEL == 3
#define OMV_N 16
#define omv __m512
#define omv_zero() _mm512_setzero_ps()
#define omv_set1(x) _mm512_set1_ps(x)
#define omv_load(p) _mm512_loadu_ps(p)
#define omv_store(p, v) _mm512_storeu_ps((p), (v))
#define omv_add(a, b) _mm512_add_ps((a), (b))
#define omv_mul(a, b) _mm512_mul_ps((a), (b))
#elif OM_LEVEL == 2
#define OMV_N 8
#define omv __m256
#define omv_zero() _mm256_setzero_ps()
#define omv_set1(x) _mm256_set1_ps(x)
#define omv_load(p) _mm256_loadu_ps(p)
#define omv_store(p, v) _mm256_storeu_ps((p), (v))
#define omv_add(a, b) _mm256_add_ps((a), (b))
#define omv_mul(a, b) _mm256_mul_ps((a), (b))
#elif OM_LEVEL == 1
#define OMV_N 4
#define omv __m128
#define omv_zero() _mm_setzero_ps()
#define omv_set1(x) _mm_set1_ps(x)
#define omv_load(p) _mm_loadu_ps(p)
#define omv_store(p, v) _mm_storeu_ps((p), (v))
#define omv_add(a, b) _mm_add_ps((a), (b))
#define omv_mul(a, b) _mm_mul_ps((a), (b))
#else
#define OMV_N 1
#define omv float
#define omv_zero() 0.0f
#define omv_set1(x) (x)
#define omv_load(p) (*(p))
#define omv_store(p, v) (*(p) = (v))
#define omv_add(a, b) ((a) + (b))
#define omv_mul(a, b) ((a) * (b))
#endif

/* Bilinear sampling of `plane` (h x w) at the n points (sx[i], sy[i]), into out[i]. The
   SIMD levels take 4, 8 or 16 pixels at a time: the same steps as om_floor_kept (MAXPS(s,
   low) is s > low ? s : low, so NaN gives low; MINPS(s, high) is s < high ? s : high;
   CVTTPS2DQ truncates as (int)s does; t - (t > s ? 1 : 0) subtracts 0 (exact) or 1). When
   all the lanes have their four neighbours inside the plane (most pixels of a warp), each
   pixel's two pairs (p00, p01) and (p10, p11) are two 8-byte loads at y0 * w + x0 (an
   int: the caller keeps h * w below 2^31 at levels 2 and 3) and the interpolation is
   om_lerp2's, every lane at once; otherwise, at level 1 each pixel goes through
   om_sample_any, and at levels 2 and 3 the lanes do what it does: the four neighbours
   gathered at clamped indices, `fill` blended in where an index was outside under the
   constant border (a chunk of a line's first or last rows, or of a canvas grown by a
   shear, is often partly outside: one pixel at a time, those chunks took most of a
   warp's time). The rest, and level 0, one pixel at a time. */
OM_TARGET static void OM_L(om_bilinear_chunk)(const float* plane, ptrdiff_t h, ptrdiff_t w, int constant,
                                              float fill, const float* sx, const float* sy, int n, float* out) {
    const float high_x = (float)(w + 1), high_y = (float)(h + 1);
    int i = 0;
#if OM_LEVEL == 1
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
#elif OM_LEVEL == 2
    const __m256 low = _mm256_set1_ps(-2.0f), hx = _mm256_set1_ps(high_x), hy = _mm256_set1_ps(high_y);
    const __m256 ones = _mm256_set1_ps(1.0f);
    const __m256i below_x = _mm256_set1_epi32(w - 1 > 0x7fffffff ? 0x7fffffff : (int)(w - 1));
    const __m256i below_y = _mm256_set1_epi32(h - 1 > 0x7fffffff ? 0x7fffffff : (int)(h - 1));
    const __m256i minus_one = _mm256_set1_epi32(-1), width = _mm256_set1_epi32((int)w);
    const __m256i height = _mm256_set1_epi32((int)h);
    for (; i + 8 <= n; i += 8) {
        int xs[8];
        __m256 s = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(sx + i), low), hx);
        __m256 t = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(s));
        t = _mm256_sub_ps(t, _mm256_and_ps(_mm256_cmp_ps(t, s, _CMP_GT_OQ), ones));
        const __m256i x0 = _mm256_cvttps_epi32(t);
        const __m256 fx = _mm256_sub_ps(s, t);
        s = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(sy + i), low), hy);
        t = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(s));
        t = _mm256_sub_ps(t, _mm256_and_ps(_mm256_cmp_ps(t, s, _CMP_GT_OQ), ones));
        const __m256i y0 = _mm256_cvttps_epi32(t);
        const __m256 fy = _mm256_sub_ps(s, t);
        const __m256i inside = _mm256_and_si256(
            _mm256_and_si256(_mm256_cmpgt_epi32(x0, minus_one), _mm256_cmpgt_epi32(below_x, x0)),
            _mm256_and_si256(_mm256_cmpgt_epi32(y0, minus_one), _mm256_cmpgt_epi32(below_y, y0)));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(inside)) == 0xff) {
            _mm256_storeu_si256((__m256i*)xs, _mm256_add_epi32(_mm256_mullo_epi32(y0, width), x0));
            const float* a0 = plane + xs[0];
            const float* a1 = plane + xs[1];
            const float* a2 = plane + xs[2];
            const float* a3 = plane + xs[3];
            const float* a4 = plane + xs[4];
            const float* a5 = plane + xs[5];
            const float* a6 = plane + xs[6];
            const float* a7 = plane + xs[7];
            const __m128 z = _mm_setzero_ps();
            /* lanes 0-3 from pixels 0, 1 | 4, 5 and 2, 3 | 6, 7: the in-lane shuffles then
               give pixels 0-3 | 4-7 in order */
            const __m256 top_a = _mm256_insertf128_ps(_mm256_castps128_ps256(
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)a0), (const __m64*)a1)),
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)a4), (const __m64*)a5), 1);
            const __m256 top_b = _mm256_insertf128_ps(_mm256_castps128_ps256(
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)a2), (const __m64*)a3)),
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)a6), (const __m64*)a7), 1);
            const __m256 bot_a = _mm256_insertf128_ps(_mm256_castps128_ps256(
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)(a0 + w)), (const __m64*)(a1 + w))),
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)(a4 + w)), (const __m64*)(a5 + w)), 1);
            const __m256 bot_b = _mm256_insertf128_ps(_mm256_castps128_ps256(
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)(a2 + w)), (const __m64*)(a3 + w))),
                _mm_loadh_pi(_mm_loadl_pi(z, (const __m64*)(a6 + w)), (const __m64*)(a7 + w)), 1);
            const __m256 p00 = _mm256_shuffle_ps(top_a, top_b, _MM_SHUFFLE(2, 0, 2, 0));
            const __m256 p01 = _mm256_shuffle_ps(top_a, top_b, _MM_SHUFFLE(3, 1, 3, 1));
            const __m256 p10 = _mm256_shuffle_ps(bot_a, bot_b, _MM_SHUFFLE(2, 0, 2, 0));
            const __m256 p11 = _mm256_shuffle_ps(bot_a, bot_b, _MM_SHUFFLE(3, 1, 3, 1));
            const __m256 top = _mm256_add_ps(p00, _mm256_mul_ps(fx, _mm256_sub_ps(p01, p00)));
            const __m256 bottom = _mm256_add_ps(p10, _mm256_mul_ps(fx, _mm256_sub_ps(p11, p10)));
            _mm256_storeu_ps(out + i, _mm256_add_ps(top, _mm256_mul_ps(fy, _mm256_sub_ps(bottom, top))));
        } else {
            /* om_sample_any on 8 lanes (as at level 3) */
            const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
            const __m256i x1 = _mm256_add_epi32(x0, one), y1 = _mm256_add_epi32(y0, one);
            const __m256i xa = _mm256_min_epi32(_mm256_max_epi32(x0, zero), below_x);
            const __m256i xb = _mm256_min_epi32(_mm256_max_epi32(x1, zero), below_x);
            const __m256i ya = _mm256_mullo_epi32(_mm256_min_epi32(_mm256_max_epi32(y0, zero), below_y), width);
            const __m256i yb = _mm256_mullo_epi32(_mm256_min_epi32(_mm256_max_epi32(y1, zero), below_y), width);
            __m256 p00 = _mm256_i32gather_ps(plane, _mm256_add_epi32(ya, xa), 4);
            __m256 p01 = _mm256_i32gather_ps(plane, _mm256_add_epi32(ya, xb), 4);
            __m256 p10 = _mm256_i32gather_ps(plane, _mm256_add_epi32(yb, xa), 4);
            __m256 p11 = _mm256_i32gather_ps(plane, _mm256_add_epi32(yb, xb), 4);
            if (constant) {
                const __m256 f = _mm256_set1_ps(fill);
                const __m256i in_xa = _mm256_and_si256(_mm256_cmpgt_epi32(x0, minus_one), _mm256_cmpgt_epi32(width, x0));
                const __m256i in_xb = _mm256_and_si256(_mm256_cmpgt_epi32(x1, minus_one), _mm256_cmpgt_epi32(width, x1));
                const __m256i in_ya = _mm256_and_si256(_mm256_cmpgt_epi32(y0, minus_one), _mm256_cmpgt_epi32(height, y0));
                const __m256i in_yb = _mm256_and_si256(_mm256_cmpgt_epi32(y1, minus_one), _mm256_cmpgt_epi32(height, y1));
                p00 = _mm256_blendv_ps(f, p00, _mm256_castsi256_ps(_mm256_and_si256(in_xa, in_ya)));
                p01 = _mm256_blendv_ps(f, p01, _mm256_castsi256_ps(_mm256_and_si256(in_xb, in_ya)));
                p10 = _mm256_blendv_ps(f, p10, _mm256_castsi256_ps(_mm256_and_si256(in_xa, in_yb)));
                p11 = _mm256_blendv_ps(f, p11, _mm256_castsi256_ps(_mm256_and_si256(in_xb, in_yb)));
            }
            const __m256 top = _mm256_add_ps(p00, _mm256_mul_ps(fx, _mm256_sub_ps(p01, p00)));
            const __m256 bottom = _mm256_add_ps(p10, _mm256_mul_ps(fx, _mm256_sub_ps(p11, p10)));
            _mm256_storeu_ps(out + i, _mm256_add_ps(top, _mm256_mul_ps(fy, _mm256_sub_ps(bottom, top))));
        }
    }
#elif OM_LEVEL == 3
    const __m512 low = _mm512_set1_ps(-2.0f), hx = _mm512_set1_ps(high_x), hy = _mm512_set1_ps(high_y);
    const __m512 ones = _mm512_set1_ps(1.0f);
    const __m512i below_x = _mm512_set1_epi32(w - 1 > 0x7fffffff ? 0x7fffffff : (int)(w - 1));
    const __m512i below_y = _mm512_set1_epi32(h - 1 > 0x7fffffff ? 0x7fffffff : (int)(h - 1));
    const __m512i minus_one = _mm512_set1_epi32(-1), width = _mm512_set1_epi32((int)w);
    const __m512i height = _mm512_set1_epi32((int)h);
    /* the pairs of pixels 0-15, loaded as 64-bit lanes (p, p + 1), then split into the
       even (left) and odd (right) floats in pixel order */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (; i + 16 <= n; i += 16) {
        __m512 s = _mm512_min_ps(_mm512_max_ps(_mm512_loadu_ps(sx + i), low), hx);
        __m512 t = _mm512_cvtepi32_ps(_mm512_cvttps_epi32(s));
        t = _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask(t, s, _CMP_GT_OQ), t, ones);
        const __m512i x0 = _mm512_cvttps_epi32(t);
        const __m512 fx = _mm512_sub_ps(s, t);
        s = _mm512_min_ps(_mm512_max_ps(_mm512_loadu_ps(sy + i), low), hy);
        t = _mm512_cvtepi32_ps(_mm512_cvttps_epi32(s));
        t = _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask(t, s, _CMP_GT_OQ), t, ones);
        const __m512i y0 = _mm512_cvttps_epi32(t);
        const __m512 fy = _mm512_sub_ps(s, t);
        const __mmask16 inside = _mm512_cmpgt_epi32_mask(x0, minus_one) & _mm512_cmpgt_epi32_mask(below_x, x0)
                                 & _mm512_cmpgt_epi32_mask(y0, minus_one) & _mm512_cmpgt_epi32_mask(below_y, y0);
        if (inside == 0xffff) {
            const __m512i at = _mm512_add_epi32(_mm512_mullo_epi32(y0, width), x0);
            const __m512i at_lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at));
            const __m512i at_hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1));
            const __m512d top_lo = _mm512_i64gather_pd(at_lo, (const void*)plane, 4);
            const __m512d top_hi = _mm512_i64gather_pd(at_hi, (const void*)plane, 4);
            const __m512d bot_lo = _mm512_i64gather_pd(at_lo, (const void*)(plane + w), 4);
            const __m512d bot_hi = _mm512_i64gather_pd(at_hi, (const void*)(plane + w), 4);
            const __m512 tl = _mm512_castpd_ps(top_lo), th = _mm512_castpd_ps(top_hi);
            const __m512 bl = _mm512_castpd_ps(bot_lo), bh = _mm512_castpd_ps(bot_hi);
            const __m512 p00 = _mm512_permutex2var_ps(tl, even, th);
            const __m512 p01 = _mm512_permutex2var_ps(tl, odd, th);
            const __m512 p10 = _mm512_permutex2var_ps(bl, even, bh);
            const __m512 p11 = _mm512_permutex2var_ps(bl, odd, bh);
            const __m512 top = _mm512_add_ps(p00, _mm512_mul_ps(fx, _mm512_sub_ps(p01, p00)));
            const __m512 bottom = _mm512_add_ps(p10, _mm512_mul_ps(fx, _mm512_sub_ps(p11, p10)));
            _mm512_storeu_ps(out + i, _mm512_add_ps(top, _mm512_mul_ps(fy, _mm512_sub_ps(bottom, top))));
        } else {
            /* om_sample_any on 16 lanes: the neighbours gathered at clamped indices, `fill`
               where an index was outside under the constant border, then the same lerp */
            const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
            const __m512i x1 = _mm512_add_epi32(x0, one), y1 = _mm512_add_epi32(y0, one);
            const __m512i xa = _mm512_min_epi32(_mm512_max_epi32(x0, zero), below_x);
            const __m512i xb = _mm512_min_epi32(_mm512_max_epi32(x1, zero), below_x);
            const __m512i ya = _mm512_mullo_epi32(_mm512_min_epi32(_mm512_max_epi32(y0, zero), below_y), width);
            const __m512i yb = _mm512_mullo_epi32(_mm512_min_epi32(_mm512_max_epi32(y1, zero), below_y), width);
            __m512 p00 = _mm512_i32gather_ps(_mm512_add_epi32(ya, xa), plane, 4);
            __m512 p01 = _mm512_i32gather_ps(_mm512_add_epi32(ya, xb), plane, 4);
            __m512 p10 = _mm512_i32gather_ps(_mm512_add_epi32(yb, xa), plane, 4);
            __m512 p11 = _mm512_i32gather_ps(_mm512_add_epi32(yb, xb), plane, 4);
            if (constant) {
                const __m512 f = _mm512_set1_ps(fill);
                const __mmask16 in_xa = _mm512_cmpgt_epi32_mask(x0, minus_one) & _mm512_cmpgt_epi32_mask(width, x0);
                const __mmask16 in_xb = _mm512_cmpgt_epi32_mask(x1, minus_one) & _mm512_cmpgt_epi32_mask(width, x1);
                const __mmask16 in_ya = _mm512_cmpgt_epi32_mask(y0, minus_one) & _mm512_cmpgt_epi32_mask(height, y0);
                const __mmask16 in_yb = _mm512_cmpgt_epi32_mask(y1, minus_one) & _mm512_cmpgt_epi32_mask(height, y1);
                p00 = _mm512_mask_blend_ps(in_xa & in_ya, f, p00);
                p01 = _mm512_mask_blend_ps(in_xb & in_ya, f, p01);
                p10 = _mm512_mask_blend_ps(in_xa & in_yb, f, p10);
                p11 = _mm512_mask_blend_ps(in_xb & in_yb, f, p11);
            }
            const __m512 top = _mm512_add_ps(p00, _mm512_mul_ps(fx, _mm512_sub_ps(p01, p00)));
            const __m512 bottom = _mm512_add_ps(p10, _mm512_mul_ps(fx, _mm512_sub_ps(p11, p10)));
            _mm512_storeu_ps(out + i, _mm512_add_ps(top, _mm512_mul_ps(fy, _mm512_sub_ps(bottom, top))));
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
OM_TARGET static void OM_L(om_affine_plane)(const float* src, ptrdiff_t h, ptrdiff_t w, float* dst, ptrdiff_t oh,
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
            OM_L(om_bilinear_chunk)(src, h, w, constant, fill, sx, sy, n, dst + y * ow + start);
        }
    }
}

/* Perspective: u = (f32(x) + 0.5) * (1/f32(W)), v likewise, q = (g*u + h*v) + 1,
   sx = ((a*u + b*v) + c)/q - 0.5, sy = ((d*u + e*v) + f)/q - 0.5; h*v, b*v and e*v are
   row-constant products. k holds a .. h. The shape is kept. */
OM_TARGET static void OM_L(om_perspective_plane)(const float* src, ptrdiff_t h, ptrdiff_t w, float* dst,
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
            OM_L(om_bilinear_chunk)(src, h, w, constant, fill, sx, sy, n, dst + y * w + start);
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
OM_TARGET static void OM_L(om_elastic)(const float* src, ptrdiff_t c, ptrdiff_t h, ptrdiff_t w, float* dst,
                                       const float* nodes, ptrdiff_t nx, const int* column_node,
                                       const float* column_fraction, const int* row_node,
                                       const float* row_fraction, int constant, float fill) {
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
                OM_L(om_bilinear_chunk)(src + ch * h * w, h, w, constant, fill, sx, sy, n,
                                        dst + (ch * h + y) * w + start);
        }
    }
}

/* The noise kinds, one SplitMix64 draw a pixel in pixel order (the state incremented by
   the golden gamma before each draw, the finaliser om_fmix64): the loops have no carried
   dependence but the state's own increment, so the compiler vectorises them at each
   level (the 64-bit multiplies as 32-bit partial products with SSE2 and AVX2, VPMULLQ
   with AVX-512DQ), every lane the same integers as the scalar steps. A normal is the
   draw's four 16-bit parts summed (an int below 2^18), less 131070, times `scale`; a
   uniform is its top 24 bits (through int: the same exact float) times 2^-24.
   kind 0 noise: src + a * normal; 1 speckle: src + src * (a * normal); 2 impulse:
   b where u < half_a, else c where u < a, else src. */
OM_TARGET static void OM_L(om_noise)(const float* src, float* dst, ptrdiff_t n, uint64_t state, int kind,
                                     float a, float b, float c, float half_a, float scale) {
    const float centre = 131070.0f, unit = 5.9604644775390625e-08f;
    ptrdiff_t i;
    if (kind == 0) {
        for (i = 0; i < n; i++) {
            const uint64_t u = om_fmix64(state + (uint64_t)(i + 1) * OM_GOLDEN_GAMMA);
            const int total = (int)((u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48));
            dst[i] = src[i] + a * (((float)total - centre) * scale);
        }
    } else if (kind == 1) {
        for (i = 0; i < n; i++) {
            const uint64_t u = om_fmix64(state + (uint64_t)(i + 1) * OM_GOLDEN_GAMMA);
            const int total = (int)((u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48));
            dst[i] = src[i] + src[i] * (a * (((float)total - centre) * scale));
        }
    } else {
        for (i = 0; i < n; i++) {
            const uint64_t z = om_fmix64(state + (uint64_t)(i + 1) * OM_GOLDEN_GAMMA);
            const float u = (float)(int)(z >> 40) * unit;
            dst[i] = u < half_a ? b : (u < a ? c : src[i]);
        }
    }
}

/* The blur's passes: out[x] = sum over k = -r .. r of weights[|k|] * rows[k][x], from 0,
   k ascending, for x in [0, w). Each pixel's sum is kept in a register across the taps (two
   vectors at a time), so every pixel still adds its terms from 0 in k order. rows[k] is a
   pointer per tap (for the row pass, the padded row shifted by k; for the column pass,
   the clamped row y + k). */
OM_TARGET static void OM_L(om_blur_taps)(const float* const* rows, const float* weights, ptrdiff_t r,
                                         float* out, ptrdiff_t w) {
    ptrdiff_t x = 0, k;
    for (; x + 2 * OMV_N <= w; x += 2 * OMV_N) {
        omv s0 = omv_zero(), s1 = omv_zero();
        for (k = -r; k <= r; k++) {
            const omv wk = omv_set1(weights[k < 0 ? -k : k]);
            const float* p = rows[k + r] + x;
            s0 = omv_add(s0, omv_mul(wk, omv_load(p)));
            s1 = omv_add(s1, omv_mul(wk, omv_load(p + OMV_N)));
        }
        omv_store(out + x, s0);
        omv_store(out + x + OMV_N, s1);
    }
    for (; x < w; x++) {
        float s = 0.0f;
        for (k = -r; k <= r; k++)
            s = s + weights[k < 0 ? -k : k] * rows[k + r][x];
        out[x] = s;
    }
}

/* Stretch's horizontal pass: row r of `rows`, each w to ow samples, out[x] = a + f * (b -
   a), a = row[i0[x]], b = row[i1[x]] (the per-column tables, built once a call). */
OM_TARGET static void OM_L(om_resize_rows)(const float* src, float* dst, ptrdiff_t rows, ptrdiff_t w, ptrdiff_t ow,
                                           const int* i0, const int* i1, const float* f) {
    ptrdiff_t r, x;
    for (r = 0; r < rows; r++) {
        const float* row = src + r * w;
        float* out = dst + r * ow;
        for (x = 0; x < ow; x++) {
            const float a = row[i0[x]], b = row[i1[x]];
            out[x] = a + f[x] * (b - a);
        }
    }
}
