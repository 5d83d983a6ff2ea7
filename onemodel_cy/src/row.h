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
#endif
