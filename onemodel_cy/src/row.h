/* §4 row kernel: one batch row in one pass (pixels, optional gain/offset, padding).
   Pure C with no Python dependency, so it can be compiled, tested and benchmarked alone
   (benchmarks/bench_collate.py times it through the collator). */
#ifndef ONEMODEL_CY_ROW_H
#define ONEMODEL_CY_ROW_H
#include <stddef.h>

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
/* The kinds of pixels a packed view (and a slot of the slot table) can hold. */
enum { OM_PIXELS_FLOAT32 = 0, OM_PIXELS_GRAY8 = 1, OM_PIXELS_RGB8 = 2 };

/* §6 fused with the padding: one image of 8-bit pixels, `channels` interleaved per
   pixel ([H, W] gray or [H, W, 3] RGB, rows `width * channels` bytes apart), to planar
   float32 rows of `padded` floats (channel c, row y at dst + (c * height + y) * padded):
   p * scale[c] - bias[c], two float32 roundings exactly as gray8_to_planar and
   rgb8_to_planar compute them (the build uses -ffp-contract=off), then `pad` up to
   `padded`. One pass over the pixels, no intermediate float32 image. */
OM_CLONES static void om_convert_image(const unsigned char* src, ptrdiff_t channels, ptrdiff_t height,
                                       ptrdiff_t width, float* dst, ptrdiff_t padded,
                                       const float* scale, const float* bias, float pad) {
    ptrdiff_t c, y, x;
    for (c = 0; c < channels; c++) {
        const float s = scale[c], b = bias[c];
        for (y = 0; y < height; y++) {
            const unsigned char* row = src + y * width * channels + c;
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
   faster (measured alone: batch 128 of 32 x 256 rows with six batches alive, 149 against
   236 us; at batch 32, which stays in cache, it is slower, 40 against 31 us). Same
   float32 operations per lane: convert, multiply, subtract. om_convert_streamed writes
   nothing and returns 0 unless the CPU has AVX2, the image is gray, the rows are 32-byte
   aligned and `padded` is a multiple of 8; the caller then uses om_convert_image. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
__attribute__((target("avx2"))) static void om_convert_gray_streamed(
        const unsigned char* src, ptrdiff_t height, ptrdiff_t width, float* dst, ptrdiff_t padded,
        float scale, float bias, float pad) {
    const __m256 s = _mm256_set1_ps(scale), b = _mm256_set1_ps(bias), p = _mm256_set1_ps(pad);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    ptrdiff_t y, x;
    for (y = 0; y < height; y++) {
        const unsigned char* row = src + y * width;
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

static int om_convert_streamed(const unsigned char* src, ptrdiff_t channels, ptrdiff_t height,
                               ptrdiff_t width, float* dst, ptrdiff_t padded,
                               const float* scale, const float* bias, float pad) {
    if (channels != 1 || padded % 8 != 0 || ((size_t)dst & 31) != 0 || !__builtin_cpu_supports("avx2"))
        return 0;
    om_convert_gray_streamed(src, height, width, dst, padded, scale[0], bias[0], pad);
    return 1;
}

/* Streaming stores are weakly ordered: fence them before the batch is handed over. */
static void om_stream_fence(void) { _mm_sfence(); }
#else
static int om_convert_streamed(const unsigned char* src, ptrdiff_t channels, ptrdiff_t height,
                               ptrdiff_t width, float* dst, ptrdiff_t padded,
                               const float* scale, const float* bias, float pad) {
    (void)src; (void)channels; (void)height; (void)width; (void)dst; (void)padded;
    (void)scale; (void)bias; (void)pad;
    return 0;
}
static void om_stream_fence(void) {}
#endif
#endif
