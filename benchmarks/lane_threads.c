/* A GIL-free worker engine with workers/threads.py's ring discipline against 0 workers: do worker
   threads that never take the GIL speed up batches of tens of microseconds on this machine,
   or does the hand-off across cores eat it (benchmarks/wakeup_latency.c)?

   gcc -O2 -ftree-vectorize -fvect-cost-model=dynamic -ffp-contract=off -pthread \
       -I onemodel_cy/src benchmarks/lane_threads.c -o /tmp/lane && /tmp/lane [prefetch] [batches]
                                                    (setup.py's flags; defaults 4 and 12000)

   gray8_kernels.c's source: 3,000 gray images of 32 rows, widths 38-260, one after the
   other. Step g converts images order[(g*B + j) % 3000] (a fixed shuffled order) with the
   collator's om_convert_gray (next image's first 512 bytes prefetched, streaming stores
   from 2 MiB) into a float32 block, rows padded with 0 to the widest width rounded up to 8.
   The ring: step g lives in slot g % prefetch; under one mutex a worker claims step g only
   while g < next_take + prefetch (else it sleeps on the room condition) and pops a block
   from the free list, builds without the lock, leaves it in its slot and wakes the
   consumer. The consumer takes steps in order, keeps its last 2 batches and frees a block
   when it drops it. All prefetch + 2 + 3 blocks (of batch 128) are allocated up front; the
   consumer reads one float of a batch, no more: the engine's rate alone.

   Configurations (0 workers: the consumer builds each step itself, no threads, no locks):
     cond  every delivery and take under the mutex, always signalled (as workers/threads.py does);
     spin N  the consumer spins on its slot's atomic flag, and a worker on a full window,
           up to N us (_mm_pause, sched_yield every 16, so a thread sharing the core runs)
           before sleeping on the condition as in cond;
     flag  a worker delivers with an atomic store and locks to signal only if the consumer
           said it sleeps on that slot; room is signalled only if a worker sleeps;
     spin 50+flag  both.
   Checks first that every configuration builds 0 workers' bytes at each of 1,000 steps at
   batch 32 and 250 at 128 (a hash of each block; "same bytes: yes"), then times `batches`
   steps at batch 32 and a quarter as many at 128, in 7 interleaved rounds. Prints the
   median and min-max batches/s, the ratio to 0 workers (of the medians, and the median
   of each round's ratio to that round's 0 workers) and, per batch, the
   process's context switches (getrusage), how often the consumer and the workers slept on
   a condition and how often the consumer found its batch delivered on arrival. */
#define _GNU_SOURCE
#include "row.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { IMAGES = 3000, HEIGHT = 32, MAX_BATCH = 128, MAX_PADDED = 264, ROUNDS = 7, MAX_SLOTS = 64,
       MAX_BLOCKS = MAX_SLOTS + 8, CHECK_STEPS = 1000 };

static unsigned char* pack;
static int widths[IMAGES], order[IMAGES];
static size_t offsets[IMAGES];
static const float SCALE = 1.0f / (255.0f * 0.25f), BIAS = 0.5f / 0.25f;

struct mode { const char* name; int workers, spin_us, flag; };    /* spin_us 0: no spinning */
struct slot { atomic_int full; long step; int padded; float* block; pthread_cond_t ready; };
struct ring {
    const struct mode* mode;
    int prefetch, batch, nfree, workers_waiting;            /* the last two under the lock */
    long limit, worker_sleeps, consumer_sleeps, arrived;    /* worker_sleeps under the lock */
    long switches;                                          /* the process's, in the run */
    atomic_long next_claim, next_take;                      /* written under the lock */
    atomic_int consumer_waiting;                            /* slot + 1 the consumer sleeps on */
    int done;
    pthread_mutex_t lock;
    pthread_cond_t room;
    float* free_list[MAX_BLOCKS];
    struct slot slots[MAX_SLOTS];
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Step g into `block` as the collator lays it out; returns the padded width. */
static int build(long g, int b, float* block) {
    int padded = 0, fence = 0;
    for (int j = 0; j < b; j++)
        if (widths[order[(g * b + j) % IMAGES]] > padded) padded = widths[order[(g * b + j) % IMAGES]];
    padded = (padded + 7) / 8 * 8;
    int streamed = (size_t)b * HEIGHT * padded * sizeof(float) >= (2u << 20);
    for (int j = 0; j < b; j++) {
        int i = order[(g * b + j) % IMAGES];
        if (j + 1 < b) {
            int n = order[(g * b + j + 1) % IMAGES];
            size_t bytes = (size_t)HEIGHT * widths[n];
            om_prefetch(pack + offsets[n], bytes < 512 ? bytes : 512);
        }
        fence |= om_convert_gray(pack + offsets[i], HEIGHT, widths[i], widths[i], block + (size_t)j * HEIGHT * padded,
                                 padded, SCALE, BIAS, 0.0f, streamed, 2) == 2;
    }
    if (fence) om_stream_fence();
    return padded;
}

static uint64_t hash_block(const float* block, int b, int padded) {
    const uint64_t* w = (const uint64_t*)block;        /* (padded is even) */
    uint64_t h = 1469598103934665603u ^ (uint64_t)padded;
    for (size_t i = 0; i < (size_t)b * HEIGHT * padded / 2; i++) h = (h ^ w[i]) * 1099511628211u;
    return h;
}

static int slot_full(struct ring* r, long g) { return atomic_load(&r->slots[g % r->prefetch].full); }
static int has_room(struct ring* r, long g) {
    (void)g;
    long c = atomic_load(&r->next_claim);
    return c >= r->limit || c < atomic_load(&r->next_take) + r->prefetch;
}

/* Spin until done(r, g) or the mode's spin_us pass; 1 when done. */
static int spin(int (*done)(struct ring*, long), struct ring* r, long g) {
    double until = now() + r->mode->spin_us * 1e-6;
    for (int i = 1;; i++) {
        if (done(r, g)) return 1;
        _mm_pause();
        if (i % 16 == 0) {
            if (now() > until) return done(r, g);
            sched_yield();
        }
    }
}

/* Under the lock: the next step inside the window and a free block; -1 at the end. */
static long claim(struct ring* r, float** block) {
    int spun = 0;
    for (;;) {
        long g = atomic_load(&r->next_claim);
        if (g >= r->limit || r->done) return -1;
        if (g < atomic_load(&r->next_take) + r->prefetch) {
            if (r->nfree == 0) { fprintf(stderr, "free list empty at step %ld\n", g); abort(); }
            *block = r->free_list[--r->nfree];
            atomic_store(&r->next_claim, g + 1);
            return g;
        }
        if (r->mode->spin_us && !spun) {
            spun = 1;
            pthread_mutex_unlock(&r->lock);
            spin(has_room, r, 0);
            pthread_mutex_lock(&r->lock);
            continue;
        }
        r->worker_sleeps++;
        r->workers_waiting++;
        pthread_cond_wait(&r->room, &r->lock);
        r->workers_waiting--;
    }
}

static void deliver(struct ring* r, long g, float* block, int padded) {
    int k = (int)(g % r->prefetch);
    struct slot* s = &r->slots[k];
    if (!r->mode->flag) pthread_mutex_lock(&r->lock);
    s->step = g, s->padded = padded, s->block = block;
    atomic_store(&s->full, 1);          /* seq_cst: then read consumer_waiting (flag) */
    if (!r->mode->flag) {
        pthread_cond_signal(&s->ready);
        pthread_mutex_unlock(&r->lock);
    } else if (atomic_load(&r->consumer_waiting) == k + 1) {
        pthread_mutex_lock(&r->lock);   /* the consumer holds it until it sleeps: no lost wake-up */
        pthread_cond_signal(&s->ready);
        pthread_mutex_unlock(&r->lock);
    }
}

static void* work(void* arg) {
    struct ring* r = arg;
    for (;;) {
        float* block;
        pthread_mutex_lock(&r->lock);
        long g = claim(r, &block);
        pthread_mutex_unlock(&r->lock);
        if (g < 0) return NULL;
        deliver(r, g, block, build(g, r->batch, block));
    }
}

/* Step g's block, waiting for it; `dropped` (the batch of step g - 2) goes back to the free list. */
static float* take(struct ring* r, long g, float* dropped, int* padded) {
    int k = (int)(g % r->prefetch);
    struct slot* s = &r->slots[k];
    int got = atomic_load(&s->full);
    r->arrived += got;
    if (!got && r->mode->spin_us) spin(slot_full, r, g);
    pthread_mutex_lock(&r->lock);
    if (!atomic_load(&s->full)) {
        atomic_store(&r->consumer_waiting, k + 1);     /* seq_cst: then read full again */
        while (!atomic_load(&s->full)) {
            r->consumer_sleeps++;
            pthread_cond_wait(&s->ready, &r->lock);
        }
        atomic_store(&r->consumer_waiting, 0);
    }
    if (s->step != g) { fprintf(stderr, "slot %d holds step %ld, expected %ld\n", k, s->step, g); abort(); }
    float* block = s->block;        /* (the consumer wraps it) */
    *padded = s->padded;
    atomic_store(&s->full, 0);
    if (dropped != NULL) r->free_list[r->nfree++] = dropped;
    atomic_store(&r->next_take, g + 1);
    if (!r->mode->flag || r->workers_waiting > 0) pthread_cond_signal(&r->room);
    pthread_mutex_unlock(&r->lock);
    return block;
}

/* One run of `steps` steps with `prefetch` slots; fills sums (when not NULL) with each
   block's hash. Returns the seconds the consumer took for all of them. */
static double run(struct ring* r, const struct mode* m, int prefetch, int b, long steps,
                  float** blocks, int nblocks, uint64_t* sums) {
    pthread_t threads[8];
    float* held[2] = {NULL, NULL};
    volatile float sink = 0;
    memset(r, 0, sizeof *r);
    r->mode = m, r->prefetch = prefetch, r->batch = b, r->limit = steps;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->room, NULL);
    for (int k = 0; k < prefetch; k++) pthread_cond_init(&r->slots[k].ready, NULL);
    for (int k = 0; k < nblocks; k++) r->free_list[r->nfree++] = blocks[k];
    struct rusage before, after;        /* (RUSAGE_SELF counts the threads that ended) */
    getrusage(RUSAGE_SELF, &before);
    double start = now();
    for (int t = 0; t < m->workers; t++)
        if (pthread_create(&threads[t], NULL, work, r) != 0) { perror("pthread_create"); exit(1); }
    for (long g = 0; g < steps; g++) {
        int padded;
        float* block;       /* step g's: it drops step g - 2's */
        if (m->workers == 0) {
            block = r->free_list[--r->nfree];
            padded = build(g, b, block);
            if (held[g & 1] != NULL) r->free_list[r->nfree++] = held[g & 1];
        } else {
            block = take(r, g, held[g & 1], &padded);
        }
        held[g & 1] = block;
        sink += block[0];
        if (sums != NULL) sums[g] = hash_block(block, b, padded);
    }
    double seconds = now() - start;
    pthread_mutex_lock(&r->lock);
    r->done = 1;
    pthread_cond_broadcast(&r->room);
    pthread_mutex_unlock(&r->lock);
    for (int t = 0; t < m->workers; t++) pthread_join(threads[t], NULL);
    getrusage(RUSAGE_SELF, &after);
    r->switches = after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw - before.ru_nivcsw;
    pthread_cond_destroy(&r->room);
    for (int k = 0; k < prefetch; k++) pthread_cond_destroy(&r->slots[k].ready);
    pthread_mutex_destroy(&r->lock);
    (void)sink;
    return seconds;
}

static int compare_doubles(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static void make_pack(void) {
    size_t total = 0;
    srand(1);
    for (int i = 0; i < IMAGES; i++) {
        widths[i] = 38 + rand() % 223, offsets[i] = total, order[i] = i;
        total += (size_t)HEIGHT * widths[i];
    }
    for (int i = IMAGES - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    pack = malloc(total);
    if (pack == NULL) { perror("malloc"); exit(1); }
    for (size_t i = 0; i < total; i++) pack[i] = (unsigned char)rand();
}

static const struct mode modes[] = {
    {"0 workers", 0, 0, 0}, {"1 worker, cond", 1, 0, 0}, {"2 workers, cond", 2, 0, 0},
    {"2 workers, spin 50us", 2, 50, 0}, {"2 workers, spin 15us", 2, 15, 0}, {"2 workers, flag", 2, 0, 1},
    {"2 workers, spin 50+flag", 2, 50, 1},
};
enum { MODES = sizeof modes / sizeof modes[0] };
static const int batches[] = {32, 128};
static struct ring ring;

/* Whether every configuration builds, step by step, the blocks 0 workers builds. */
static int same_bytes(int prefetch, float** blocks, int nblocks) {
    static uint64_t want[CHECK_STEPS], got[CHECK_STEPS];
    int same = 1;
    for (int bi = 0; bi < 2; bi++) {
        long n = CHECK_STEPS / (batches[bi] / 32);
        run(&ring, &modes[0], prefetch, batches[bi], n, blocks, nblocks, want);
        for (int c = 1; c < MODES; c++) {
            run(&ring, &modes[c], prefetch, batches[bi], n, blocks, nblocks, got);
            for (long g = 0; g < n; g++)
                if (got[g] != want[g]) {
                    if (same) printf("differs: %s, batch %d, step %ld\n", modes[c].name, batches[bi], g);
                    same = 0;
                }
        }
    }
    return same;
}

int main(int argc, char** argv) {
    int prefetch = argc > 1 ? atoi(argv[1]) : 4;
    long steps32 = argc > 2 ? atol(argv[2]) : 12000;
    if (prefetch < 1 || prefetch > MAX_SLOTS || steps32 < 4) { fprintf(stderr, "prefetch 1-%d, batches >= 4\n", MAX_SLOTS); return 2; }
    int nblocks = prefetch + 2 + 3;     /* the window, one per worker, the consumer's 2 and the one it takes */
    float* blocks[MAX_BLOCKS];
    size_t largest = (size_t)MAX_BATCH * HEIGHT * MAX_PADDED * sizeof(float);
    make_pack();
    for (int k = 0; k < nblocks; k++) {
        blocks[k] = aligned_alloc(64, largest);
        if (blocks[k] == NULL) { perror("aligned_alloc"); return 1; }
        memset(blocks[k], 0, largest);
    }
    int same = same_bytes(prefetch, blocks, nblocks);
    printf("CPU kernel level %d, prefetch %d, %d blocks; same bytes: %s\n",
           om_simd_level(), prefetch, nblocks, same ? "yes" : "NO");
    if (!same) return 1;
    static double rate[2][MODES][ROUNDS], ratio[2][MODES][ROUNDS];     /* ratio: to the round's 0 workers */
    static long sleeps[2][MODES][4];    /* consumer's, workers', batches ready on arrival, switches */
    for (int round = 0; round < ROUNDS; round++)
        for (int bi = 0; bi < 2; bi++)
            for (int c = 0; c < MODES; c++) {
                long n = steps32 / (batches[bi] / 32);
                rate[bi][c][round] = n / run(&ring, &modes[c], prefetch, batches[bi], n, blocks, nblocks, NULL);
                sleeps[bi][c][0] += ring.consumer_sleeps;
                sleeps[bi][c][1] += ring.worker_sleeps;
                sleeps[bi][c][2] += ring.arrived;
                sleeps[bi][c][3] += ring.switches;
                ratio[bi][c][round] = rate[bi][c][round] / rate[bi][0][round];
            }
    for (int bi = 0; bi < 2; bi++) {
        double n = (double)(steps32 / (batches[bi] / 32)), base = 0;
        printf("batch %d, %.0f batches a run, %d rounds: batches/s median (min-max), ratio to 0 workers\n"
               "  (of the medians; median of the rounds'), per batch: context switches, consumer's and\n"
               "  workers' sleeps, share of batches ready on arrival\n", batches[bi], n, ROUNDS);
        for (int c = 0; c < MODES; c++) {
            double *v = rate[bi][c], *q = ratio[bi][c];
            qsort(v, ROUNDS, sizeof *v, compare_doubles);
            qsort(q, ROUNDS, sizeof *q, compare_doubles);
            if (c == 0) base = v[ROUNDS / 2];
            printf("  %-23s %6.0f (%5.0f-%-5.0f) %5.2fx %5.2fx  %5.2f", modes[c].name, v[ROUNDS / 2], v[0],
                   v[ROUNDS - 1], v[ROUNDS / 2] / base, q[ROUNDS / 2], sleeps[bi][c][3] / (n * ROUNDS));
            if (c > 0)
                printf(" %6.3f %6.3f %5.2f", sleeps[bi][c][0] / (n * ROUNDS), sleeps[bi][c][1] / (n * ROUNDS),
                       sleeps[bi][c][2] / (n * ROUNDS));
            printf("\n");
        }
    }
    return 0;
}
