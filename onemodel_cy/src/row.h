/* §4 row kernel: one batch row in one pass (pixels, optional gain/offset, padding).
   Pure C with no Python dependency, so it can be compiled, tested and benchmarked alone
   (benchmarks/bench_collate.py times it through the collator). */
#ifndef ONEMODEL_CY_ROW_H
#define ONEMODEL_CY_ROW_H
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
/* An AVX2 clone where the CPU has it, chosen at load time: no -march flag, and the
   same IEEE float32 multiply and add per lane (AVX2 alone brings no FMA). */
#define OM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define OM_CLONES
#endif

/* The pixels (x * g + o when scaling, two float32 roundings, never fused: the build uses
   -ffp-contract=off), then the padding. The plain copy is a loop too: inlined and
   vectorised it beats a memcpy call on rows of a few hundred bytes (measured with
   benchmarks/bench_collate.py). */
OM_CLONES static void om_store_row(const float* src, float* dst, ptrdiff_t width,
                                   ptrdiff_t padded, int scale, float g, float o, float pad) {
    ptrdiff_t x;
    if (scale) {
        for (x = 0; x < width; x++) dst[x] = src[x] * g + o;
    } else {
        for (x = 0; x < width; x++) dst[x] = src[x];
    }
    for (x = width; x < padded; x++) dst[x] = pad;
}
/* Ask for `bytes` bytes at `p` ahead of their use (a hint: it reads nothing). A batch
   gathers images from scattered places of a pack, and the hardware prefetchers only find
   each image's run after its first misses: the collator asks for the start of the next
   image while it converts the current one: its first lines start the hardware's stream
   prefetcher on the rest. Asking for the whole image stalls the core instead
   (docs/performance.md, "Measurements behind the code"). */
static void om_prefetch(const void* p, size_t bytes) {
#if defined(__GNUC__)
    const char* at = (const char*)p;
    size_t i;
    for (i = 0; i < bytes; i += 64) __builtin_prefetch(at + i, 0, 3);
#else
    (void)p; (void)bytes;
#endif
}
/* Ask, one line per 4 KiB page, for the `bytes` bytes at `p` that are about to be written
   with streaming stores. Streaming stores skip the cache but not the address translation:
   where the destination has 4 KiB pages (a process worker's shared memory when the
   kernel gives shared memory no huge pages), each page's first store waited for its page
   walk, a third of a float32 batch's time in a VM. Asking ahead does the walks while the
   previous image is written; on huge pages it changes nothing measurable
   (docs/performance.md, "Measurements behind the code"). */
static void om_prefetch_pages(void* p, size_t bytes) {
#if defined(__GNUC__)
    /* From the start of p's page, so that the range's last page is asked for too. */
    uintptr_t at = (uintptr_t)p & ~(uintptr_t)4095, end = (uintptr_t)p + bytes;
    for (; at < end; at += 4096) __builtin_prefetch((const void*)at, 1, 0);
#else
    (void)p; (void)bytes;
#endif
}

/* The kinds of pixels a packed view (and a slot of the slot table) can hold. */
enum { OM_PIXELS_FLOAT32 = 0, OM_PIXELS_GRAY8 = 1, OM_PIXELS_RGB8 = 2 };

/* §6 (the one home of its arithmetic: the collator and gray8_to_planar / rgb8_to_planar
   all convert through these kernels) fused with the padding: one image of 8-bit pixels,
   `channels` interleaved per pixel ([H, W] gray or [H, W, 3] RGB), rows `stride` bytes
   apart (>= width * channels; the caller validated every byte of the `height` rows), to
   planar float32 rows of `padded` floats (channel c, row y at dst + (c * height + y) *
   padded): p * scale[c] - bias[c], two float32 roundings (the build uses
   -ffp-contract=off), then `pad` up to `padded`. One pass over the pixels, no
   intermediate float32 image; only the `width * channels` bytes of each row are read. */
OM_CLONES static void om_convert_image(const unsigned char* src, ptrdiff_t channels, ptrdiff_t height,
                                       ptrdiff_t width, ptrdiff_t stride, float* dst, ptrdiff_t padded,
                                       const float* scale, const float* bias, float pad) {
    ptrdiff_t c, y, x;
    for (c = 0; c < channels; c++) {
        const float s = scale[c], b = bias[c];
        for (y = 0; y < height; y++) {
            const unsigned char* row = src + y * stride + c;
            float* out = dst + (c * height + y) * padded;
            if (channels == 1) {
                for (x = 0; x < width; x++) out[x] = (float)row[x] * s - b;
            } else {
                for (x = 0; x < width; x++) out[x] = (float)row[x * channels] * s - b;
            }
            for (x = width; x < padded; x++) out[x] = pad;
        }
    }
}

/* om_convert_image for one gray image with non-temporal (streaming) stores, for batches
   much larger than the caches: a plain store first reads each destination line from
   memory, a streaming store does not, so a batch that leaves the cache anyway is written
   faster; one that stays in cache is written slower (docs/performance.md, "Measurements
   behind the code"). Same
   float32 operations per lane: convert, multiply, subtract. Rows must be 32-byte aligned
   and `padded` a multiple of 8; om_convert_gray below checks, and chooses. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
__attribute__((target("avx2"))) static void om_convert_gray_streamed(
        const unsigned char* src, ptrdiff_t height, ptrdiff_t width, ptrdiff_t stride, float* dst,
        ptrdiff_t padded, float scale, float bias, float pad) {
    const __m256 s = _mm256_set1_ps(scale), b = _mm256_set1_ps(bias), p = _mm256_set1_ps(pad);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    ptrdiff_t y, x;
    for (y = 0; y < height; y++) {
        const unsigned char* row = src + y * stride;
        float* out = dst + y * padded;
        for (x = 0; x + 8 <= width; x += 8) {
            __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(row + x))));
            _mm256_stream_ps(out + x, _mm256_sub_ps(_mm256_mul_ps(v, s), b));
        }
        if (x < width) {        /* the last pixels and the first padding share 8 lanes */
            unsigned char tail[8] = {0};
            memcpy(tail, row + x, (size_t)(width - x));     /* never read past the row */
            __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)tail)));
            __m256i pixel = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(width - x)), lanes);
            v = _mm256_blendv_ps(p, _mm256_sub_ps(_mm256_mul_ps(v, s), b), _mm256_castsi256_ps(pixel));
            _mm256_stream_ps(out + x, v);
            x += 8;
        }
        for (; x < padded; x += 8) _mm256_stream_ps(out + x, p);
    }
}

/* om_convert_image for one gray image in 16-lane AVX-512 steps (F, BW and VL), with plain
   or, when `streamed`, streaming stores: the same float32 operations per lane (convert,
   multiply, subtract; the build uses -ffp-contract=off), the padding blended into the lanes
   past the row's last pixel. Masked loads never read past a row (masked-off lanes neither
   read nor fault); masked stores never write past `padded`. Streamed rows must be 32-byte
   aligned with `padded` a multiple of 8: a row that starts in the middle of a 64-byte line
   writes its first 8 lanes with one 32-byte store, the rest in whole lines. Its timings
   against the AVX2 kernel and the portable loop: docs/performance.md. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512 om_gray16(
        const unsigned char* row, ptrdiff_t left, __m512 s, __m512 b, __m512 p) {
    /* lanes [0, left) hold pixels (at most 16), the rest the padding */
    if (left <= 0) return p;
    __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, row)));
    return _mm512_mask_blend_ps(m, p, _mm512_sub_ps(_mm512_mul_ps(v, s), b));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void om_convert_gray_avx512(
        const unsigned char* src, ptrdiff_t height, ptrdiff_t width, ptrdiff_t stride, float* dst,
        ptrdiff_t padded, float scale, float bias, float pad, int streamed) {
    const __m512 s = _mm512_set1_ps(scale), b = _mm512_set1_ps(bias), p = _mm512_set1_ps(pad);
    ptrdiff_t y, x;
    for (y = 0; y < height; y++) {
        const unsigned char* row = src + y * stride;
        float* out = dst + y * padded;
        x = 0;
        if (streamed && ((size_t)out & 63) != 0) {
            _mm256_stream_ps(out, _mm512_castps512_ps256(om_gray16(row, width < 8 ? width : 8, s, b, p)));
            x = 8;
        }
        for (; x + 16 <= width; x += 16) {      /* whole steps of pixels */
            __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(row + x))));
            v = _mm512_sub_ps(_mm512_mul_ps(v, s), b);
            if (streamed) _mm512_stream_ps(out + x, v); else _mm512_storeu_ps(out + x, v);
        }
        for (; x < padded; x += 16) {           /* the last pixels, then the padding */
            __m512 v = om_gray16(row + x, width - x, s, b, p);
            if (padded - x >= 16) {
                if (streamed) _mm512_stream_ps(out + x, v); else _mm512_storeu_ps(out + x, v);
            } else if (streamed) {
                _mm256_stream_ps(out + x, _mm512_castps512_ps256(v));     /* 8 lanes left */
            } else {
                _mm512_mask_storeu_ps(out + x, (__mmask16)((1u << (padded - x)) - 1), v);
            }
        }
    }
}

/* om_store_row with streaming stores where the row allows (needs AVX2; the caller checks
   om_simd_level() >= 1 and fences before handing the batch over): for float32 batches much
   larger than the caches, as om_convert_gray_streamed is for gray ones. The lanes up to the
   first 32-byte boundary and after the last whole 8 are written one by one with plain
   stores; the 8 lanes that hold the last pixels and the first padding are computed one by
   one into an aligned buffer and streamed from it. Every pixel is the same float32
   operation as in om_store_row (x * g + o, two roundings, never fused: the build uses
   -ffp-contract=off, and _mm256_mul_ps / _mm256_add_ps are not contracted). */
__attribute__((target("avx2"))) static void om_store_row_streamed(
        const float* src, float* dst, ptrdiff_t width, ptrdiff_t padded, int scale, float g, float o,
        float pad) {
    const __m256 vg = _mm256_set1_ps(g), vo = _mm256_set1_ps(o), vp = _mm256_set1_ps(pad);
    ptrdiff_t x = 0, k;
    for (; x < padded && ((size_t)(dst + x) & 31) != 0; x++)
        dst[x] = x < width ? (scale ? src[x] * g + o : src[x]) : pad;
    for (; x + 8 <= width; x += 8) {
        __m256 v = _mm256_loadu_ps(src + x);
        if (scale) v = _mm256_add_ps(_mm256_mul_ps(v, vg), vo);
        _mm256_stream_ps(dst + x, v);
    }
    if (x < width && x + 8 <= padded) {     /* the last pixels and the first padding */
        float lanes[8] __attribute__((aligned(32)));
        for (k = 0; k < 8; k++)
            lanes[k] = x + k < width ? (scale ? src[x + k] * g + o : src[x + k]) : pad;
        _mm256_stream_ps(dst + x, _mm256_load_ps(lanes));
        x += 8;
    }
    for (; x + 8 <= padded; x += 8) _mm256_stream_ps(dst + x, vp);
    for (; x < padded; x++) dst[x] = x < width ? (scale ? src[x] * g + o : src[x]) : pad;
}

/* The widest kernel level this CPU runs: 2 AVX-512 (F, BW and VL), 1 AVX2, 0 neither. */
static int om_simd_level(void) {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        return 2;
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

/* Streaming stores are weakly ordered: fence them before the batch is handed over. */
static void om_stream_fence(void) { _mm_sfence(); }
#else
static int om_simd_level(void) { return 0; }
static void om_stream_fence(void) {}
static void om_store_row_streamed(const float* src, float* dst, ptrdiff_t width, ptrdiff_t padded, int scale,
                                  float g, float o, float pad) {
    om_store_row(src, dst, width, padded, scale, g, o, pad);   /* never asked for: no AVX2 */
}
#endif

/* One gray image (om_convert_image's arithmetic and padding, rows `stride` bytes apart)
   through the widest kernel the CPU has, up to level `cap` (om_simd_level; tests lower it
   to check every kernel on one machine). Returns 2 when it wrote with streaming stores (the caller fences before
   handing the batch over), 1 with plain SIMD stores, 0 when the portable loop wrote it.
   Streaming is used only when asked and the rows allow it (32-byte aligned, `padded` a
   nonzero multiple of 8); AVX2 has a streaming kernel only. */
static int om_convert_gray(const unsigned char* src, ptrdiff_t height, ptrdiff_t width, ptrdiff_t stride,
                           float* dst, ptrdiff_t padded, float scale, float bias, float pad, int streamed,
                           int cap) {
    int level = om_simd_level();
    if (level > cap) level = cap;
    streamed = streamed && padded >= 8 && padded % 8 == 0 && ((size_t)dst & 31) == 0;
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    if (level >= 2) {
        om_convert_gray_avx512(src, height, width, stride, dst, padded, scale, bias, pad, streamed);
        return streamed ? 2 : 1;
    }
    if (level >= 1 && streamed) {
        om_convert_gray_streamed(src, height, width, stride, dst, padded, scale, bias, pad);
        return 2;
    }
#endif
    (void)level; (void)streamed;    /* (without the SIMD kernels) */
    om_convert_image(src, 1, height, width, stride, dst, padded, &scale, &bias, pad);
    return 0;
}
#endif
