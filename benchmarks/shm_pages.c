/* Streaming float32 batches into 4 KiB pages against huge pages, with and without asking
   for the next image's pages ahead (src/row.h om_prefetch_pages; docs/performance.md,
   "Measurements behind the code").

   Build and run (Linux, x86-64 with AVX2):
       gcc -O2 -mavx2 -o /tmp/shm_pages benchmarks/shm_pages.c
       for i in 1 2 3 4 5; do for m in thp memfd; do for p in 0 1; do /tmp/shm_pages $m $p; done; done; done

   A batch is the §7 workload's shape: 128 images of 32 rows, widths 64-256 drawn from
   2,048 images scattered in a 42 MB source on huge pages, padded to 256 floats, written
   with streaming stores (GainOffset's arithmetic) into one of 12 destinations of 4 MiB:
   private memory on transparent huge pages ("thp", the pool's blocks) or a shared memfd
   mapping ("memfd", a process worker's ring slot; 4 KiB pages unless the kernel's
   shmem_enabled allows huge ones). Prints the best of 5 rounds of 400 batches. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define DEST_BYTES (4u << 20)
#define DESTS 12
#define IMAGES 2048
#define BATCH 128
#define HEIGHT 32
#define PADDED 256

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void store_row(const float* src, float* dst, int width) {
    const __m256 g = _mm256_set1_ps(1.1f), o = _mm256_set1_ps(0.1f);
    int x = 0;
    for (; x + 8 <= width; x += 8)
        _mm256_stream_ps(dst + x, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(src + x), g), o));
    for (; x + 8 <= PADDED; x += 8) _mm256_stream_ps(dst + x, _mm256_setzero_ps());
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s thp|memfd 0|1 (ask for the next image's pages)\n", argv[0]);
        return 2;
    }
    int shared = strcmp(argv[1], "memfd") == 0, ahead = atoi(argv[2]);
    float* dests[DESTS];
    for (int d = 0; d < DESTS; d++) {
        void* p;
        if (shared) {
            int fd = memfd_create("shm_pages", 0);
            if (fd < 0 || ftruncate(fd, DEST_BYTES)) return 1;
            p = mmap(NULL, DEST_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED) return 1;
        } else {
            p = aligned_alloc(1 << 21, DEST_BYTES);
            if (!p) return 1;
        }
        madvise(p, DEST_BYTES, MADV_HUGEPAGE);       /* what the pool and the ring both ask */
        memset(p, 1, DEST_BYTES);
        dests[d] = p;
    }
    int widths[IMAGES];
    size_t starts[IMAGES], total = 0;
    srand(1);
    for (int i = 0; i < IMAGES; i++) {
        widths[i] = 64 + rand() % 193;
        starts[i] = total;
        total += (size_t)HEIGHT * widths[i];
    }
    size_t source_bytes = (total * sizeof(float) + (1u << 21)) & ~((size_t)(1u << 21) - 1);
    float* source = aligned_alloc(1 << 21, source_bytes);
    if (!source) return 1;
    madvise(source, source_bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < total; i++) source[i] = (float)(i % 251);
    double best = 1e9;
    for (int round = 0; round < 5; round++) {
        double t = now();
        for (int k = 0; k < 400; k++) {
            float* dst = dests[k % DESTS];
            for (int j = 0; j < BATCH; j++) {
                int i = rand() % IMAGES;
                float* image = dst + (size_t)j * HEIGHT * PADDED;
                if (ahead && j + 1 < BATCH)     /* the next image's pages: one line each */
                    for (size_t b = 0; b < HEIGHT * PADDED * sizeof(float); b += 4096)
                        __builtin_prefetch((char*)(image + HEIGHT * PADDED) + b, 1, 0);
                for (int y = 0; y < HEIGHT; y++) store_row(source + starts[i] + (size_t)y * widths[i], image + y * PADDED, widths[i]);
            }
            _mm_sfence();
        }
        t = now() - t;
        if (t < best) best = t;
    }
    printf("%-5s ahead %d: %.0f us a batch\n", shared ? "memfd" : "thp", ahead, best / 400 * 1e6);
    return 0;
}
