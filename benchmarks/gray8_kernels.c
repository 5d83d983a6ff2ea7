/* The gray 8-bit conversion kernels of src/row.h, timed alone: what the comments there quote.

   gcc -O2 -ftree-vectorize -fvect-cost-model=dynamic -ffp-contract=off -I onemodel_cy/src \
       benchmarks/gray8_kernels.c -o /tmp/gray8 && /tmp/gray8       (setup.py's flags)

   A pack-like source: 3,000 gray images of 32 rows, widths 38-260, stored one after the
   other and read in a shuffled order; each batch is written into one of 3 buffers in
   turn (a consumer holding 2 batches while the next is built), rows padded to 264
   floats. Before each repetition 64 MB are written so that the source starts out of the
   caches, as a pack's pages are after the rest of a training step. Prints the best and
   the mean of 7 repetitions (one pass over the images each) of every configuration:
   the portable loop (om_convert_image); the kernel the collator runs at each level
   (om_convert_gray: streaming stores for batches of 2 MiB or more, which at the
   AVX2 level is its only kernel); AVX-512 with plain stores at every size; and the
   AVX-512 level with the next image prefetched whole or by its first 512 bytes. */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { IMAGES = 3000, HEIGHT = 32, PADDED = 264, REPEATS = 7 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct config { const char* name; int cap, stream, prefetch; };

int main(void) {
    static const struct config configs[] = {
        {"portable loop", 0, 0, 0},
        {"AVX2 level (streams >= 2 MiB)", 1, 1, 0},
        {"AVX-512, plain stores", 2, 0, 0},
        {"AVX-512 level (streams >= 2 MiB)", 2, 1, 0},
        {"AVX-512 level + prefetch whole next image", 2, 1, -1},
        {"AVX-512 level + prefetch first 512 bytes", 2, 1, 512},
    };
    static const int batches[] = {32, 128};
    int widths[IMAGES], order[IMAGES];
    size_t offsets[IMAGES], total = 0;
    srand(1);
    for (int i = 0; i < IMAGES; i++) {
        widths[i] = 38 + rand() % 223;
        offsets[i] = total;
        total += (size_t)HEIGHT * widths[i];
        order[i] = i;
    }
    for (int i = IMAGES - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    unsigned char* pack = malloc(total);
    char* flush = malloc(64 << 20);
    float* buffers[3];
    size_t largest = (size_t)128 * HEIGHT * PADDED * sizeof(float);
    if (pack == NULL || flush == NULL) return 1;
    for (size_t i = 0; i < total; i++) pack[i] = (unsigned char)rand();
    for (int k = 0; k < 3; k++) {
        buffers[k] = aligned_alloc(64, largest);
        if (buffers[k] == NULL) return 1;
        memset(buffers[k], 0, largest);
    }
    const float scale = 1.0f / (255.0f * 0.25f), bias = 0.5f / 0.25f;
    printf("CPU kernel level: %d (2 AVX-512, 1 AVX2, 0 portable)\n", om_simd_level());
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        int batch = batches[b], steps = IMAGES / batch;
        int big = (size_t)batch * HEIGHT * PADDED * sizeof(float) >= (2u << 20);
        for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
            const struct config* cf = &configs[c];
            double best = 1e30, sum = 0;
            for (int rep = 0; rep < REPEATS; rep++) {
                memset(flush, rep, 64 << 20);
                double start = now();
                for (int s = 0; s < steps; s++) {
                    float* out = buffers[s % 3];
                    for (int j = 0; j < batch; j++) {
                        int i = order[s * batch + j];
                        if (cf->prefetch && j + 1 < batch) {
                            size_t next = (size_t)HEIGHT * widths[order[s * batch + j + 1]];
                            om_prefetch(pack + offsets[order[s * batch + j + 1]],
                                        cf->prefetch < 0 || next < (size_t)cf->prefetch ? next : (size_t)cf->prefetch);
                        }
                        float* dst = out + (size_t)j * HEIGHT * PADDED;
                        om_convert_gray(pack + offsets[i], HEIGHT, widths[i], widths[i], dst, PADDED, scale, bias, 0.0f,
                                        cf->stream && big, cf->cap);
                    }
                    om_stream_fence();
                }
                double us = (now() - start) / steps * 1e6;
                best = us < best ? us : best;
                sum += us;
            }
            printf("batch %3d  %-42s best %6.1f  mean %6.1f us a batch\n", batch, cf->name, best, sum / REPEATS);
        }
    }
    return 0;
}
