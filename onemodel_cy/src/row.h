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
#endif
