/* The worker/prefetch harness of the stream cases: a rank's stream built ahead by threads. */
#ifndef HARNESS_H
#define HARNESS_H

#include "input.h"

enum { MAX_WORKERS = 64, MAX_PREFETCH = 1024, MAX_SETTINGS = 64 };

/* One (workers, prefetch) pair of a case's input.harness. */
typedef struct { size_t workers, prefetch; } Setting;

/* The settings a case asks for (every workers x prefetch pair), or (0, 1) without a harness. */
const char *settings_from_json(const Json *in, Setting *out, size_t *count);

/* One step as built: its batch, or why it could not be (a dataset failure). */
typedef struct {
    Batch batch;
    uint64_t g, epoch, step;
    const char *why;
} Built;

/* Builds the batch at global step g; called from worker threads, so it must be safe to
 * call concurrently for different steps. */
typedef const char *(*BuildFn)(void *ctx, uint64_t g, Batch *out, uint64_t *epoch, uint64_t *step);

typedef struct Prefetcher Prefetcher;
Prefetcher *prefetcher_start(BuildFn build, void *ctx, uint64_t start, uint64_t stop, size_t workers,
                             size_t prefetch);
/* The next step in order (1), or 0 past the last; the caller owns out->batch unless out->why. */
int prefetcher_next(Prefetcher *p, Built *out);
/* Stops and joins the workers and frees what they built ahead and nobody took. */
void prefetcher_end(Prefetcher *p);

/* ", \"settings\": [...]": each setting with the hex digest of what it delivered and, for
 * stream_iter (errors != NULL), its runs' error_at values as written in errors[k]. */
void out_settings(Out *o, const Setting *settings, size_t count, char hex[][65], const Out *errors);

#endif
