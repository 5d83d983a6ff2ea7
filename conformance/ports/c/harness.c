/* The worker/prefetch harness of the stream cases (docs/conformance.md, "The harness"):
 * one rank's stream over global steps [start, stop) built by `workers` threads at most
 * `prefetch` steps ahead of the consumer, delivered in step order. With 0 workers every
 * step is built on the caller's thread when it is asked for. §1 says the batches do not
 * depend on the setting; the stream ops run every setting a case asks for and report
 * each one's digest, so that `check` sees the claim. */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { EMPTY, BUILDING, READY };

typedef struct {
    int state;
    Built built;
} Slot;

struct Prefetcher {
    BuildFn build;
    void *ctx;
    uint64_t next_to_build, next_to_take, stop;
    size_t workers, prefetch;
    int ending;
    Slot *slots;             /* step g lives in slots[g % prefetch] */
    pthread_t *threads;
    size_t started;
    pthread_mutex_t mutex;
    pthread_cond_t changed;
};

static void build_into(Prefetcher *p, uint64_t g, Built *out)
{
    memset(out, 0, sizeof *out);
    out->g = g;
    out->why = p->build(p->ctx, g, &out->batch, &out->epoch, &out->step);
}

/* A worker claims the next step once its slot is free (the consumer took the step
 * `prefetch` before it), builds it without the lock, and posts it. */
static void *work(void *arg)
{
    Prefetcher *p = arg;
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        /* next_to_build - next_to_take, never next_to_take + prefetch: steps run up to 2^64 - 1. */
        while (!p->ending && !(p->next_to_build < p->stop && p->next_to_build - p->next_to_take < p->prefetch))
            pthread_cond_wait(&p->changed, &p->mutex);
        if (p->ending) break;
        uint64_t g = p->next_to_build++;
        Slot *slot = &p->slots[g % p->prefetch];
        slot->state = BUILDING;
        pthread_mutex_unlock(&p->mutex);
        Built built;
        build_into(p, g, &built);
        pthread_mutex_lock(&p->mutex);
        slot->built = built;
        slot->state = READY;
        pthread_cond_broadcast(&p->changed);
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

Prefetcher *prefetcher_start(BuildFn build, void *ctx, uint64_t start, uint64_t stop, size_t workers,
                             size_t prefetch)
{
    Prefetcher *p = calloc(1, sizeof *p);
    p->build = build;
    p->ctx = ctx;
    p->next_to_build = p->next_to_take = start;
    p->stop = stop;
    p->workers = workers;
    p->prefetch = prefetch ? prefetch : 1;
    p->slots = calloc(p->prefetch, sizeof *p->slots);
    p->threads = calloc(workers ? workers : 1, sizeof *p->threads);
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->changed, NULL);
    for (; p->started < workers; p->started++)
        if (pthread_create(&p->threads[p->started], NULL, work, p) != 0) break;
    return p;
}

int prefetcher_next(Prefetcher *p, Built *out)
{
    if (p->next_to_take >= p->stop) return 0;
#ifdef BUG_WINDOW_DROPS_TAIL
    if (p->started && p->stop - p->next_to_take < p->prefetch) return 0;
#endif
    if (p->started == 0) {                      /* 0 workers: built here, when asked for */
        build_into(p, p->next_to_take++, out);
        return 1;
    }
    pthread_mutex_lock(&p->mutex);
    Slot *slot = &p->slots[p->next_to_take % p->prefetch];
    while (slot->state != READY || slot->built.g != p->next_to_take)
        pthread_cond_wait(&p->changed, &p->mutex);
    *out = slot->built;
    slot->state = EMPTY;
    p->next_to_take++;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->mutex);
    return 1;
}

void prefetcher_end(Prefetcher *p)
{
    pthread_mutex_lock(&p->mutex);
    p->ending = 1;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->mutex);
    for (size_t k = 0; k < p->started; k++) pthread_join(p->threads[k], NULL);
    for (size_t k = 0; k < p->prefetch; k++)    /* built ahead, never taken (a run ended by an error) */
        if (p->slots[k].state == READY && !p->slots[k].built.why) batch_free(&p->slots[k].built.batch);
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->changed);
    free(p->slots);
    free(p->threads);
    free(p);
}

const char *settings_from_json(const Json *in, Setting *out, size_t *count)
{
    const Json *harness = json_get(in, "harness");
    *count = 0;
    if (!harness) {
        out[(*count)++] = (Setting){ 0, 1 };
        return NULL;
    }
    const Json *workers = need(harness, "workers"), *prefetch = need(harness, "prefetch");
    for (size_t w = 0; w < array_len(workers); w++) {
        for (size_t k = 0; k < array_len(prefetch); k++) {
            uint64_t nw, np;
            const char *why = as_u64(json_at(workers, w), &nw);
            if (!why) why = as_u64(json_at(prefetch, k), &np);
            if (why) return why;
            if (nw > MAX_WORKERS || np < 1 || np > MAX_PREFETCH) return "a harness setting this port cannot run";
            if (*count == MAX_SETTINGS) return "more harness settings than this port runs";
            out[(*count)++] = (Setting){ (size_t)nw, (size_t)np };
        }
    }
    return NULL;
}

void out_settings(Out *o, const Setting *settings, size_t count, char hex[][65], const Out *errors)
{
    out_printf(o, ", \"settings\": [");
    for (size_t k = 0; k < count; k++) {
        out_printf(o, "%s{\"workers\": ", k ? ", " : "");
        out_u64(o, settings[k].workers);
        out_printf(o, ", \"prefetch\": ");
        out_u64(o, settings[k].prefetch);
        out_printf(o, ", \"sha256\": \"%s\"", hex[k]);
        if (errors) out_printf(o, ", \"error_at\": [%.*s]", (int)errors[k].len, errors[k].data ? errors[k].data : "");
        out_printf(o, "}");
    }
    out_printf(o, "]");
}
