/* §3 the four samplers, each a pure function of (epoch, step-in-epoch). */
#include "port.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(BUG_SHUFFLED_INVERSE) || defined(BUG_BUCKET_INVERSE)
uint64_t keyed_permutation_inverse(uint64_t x, uint64_t n, uint64_t key);
#endif

/* D10: a source takes part when its share and its size are both positive. */
static int eligible(const Source *src)
{
    return src->share > 0.0 && src->size > 0;
}

/* D10: total and cumulative bounds in float64, left to right, over eligible sources. */
static const char *mixing_check(Sampler *s)
{
    double total = 0.0;
    int any = 0;
    for (size_t i = 0; i < s->n_sources; i++) {
        const Source *src = &s->sources[i];
        if (!(src->share >= 0.0) || isinf(src->share)) return "a share must be finite and >= 0";
        if (src->size > 0 && src->start > UINT64_MAX - (src->size - 1)) return "start + size - 1 does not fit in 64 bits";
        if (eligible(src)) { total += src->share; any = 1; }
    }
    if (!any) return "no source has share > 0 and size > 0";
    if (s->steps_per_epoch < 1) return "steps_per_epoch must be >= 1";
    double c = 0.0;
    for (size_t i = 0; i < s->n_sources; i++) {
        if (eligible(&s->sources[i])) c += s->sources[i].share / total;
        s->cumulative[i] = c;      /* an ineligible source keeps its neighbour's bound; unused */
    }
    return NULL;
}

const char *sampler_check(Sampler *s)
{
    if (s->batch_size < 1) return "batch_size must be >= 1";
    switch (s->kind) {
    case SEQUENTIAL:
    case SHUFFLED:
        if (s->n < 1) return "n must be >= 1";
        /* D8: without drop-last the last batch is short */
        s->steps_per_epoch = s->drop_last ? s->n / s->batch_size
                                          : s->n / s->batch_size + (s->n % s->batch_size != 0);
        break;
    case MIXING:
        return mixing_check(s);
    case BUCKETED:
        if (s->n >= ((uint64_t)1 << 32)) return "there must be fewer than 2^32 lengths";
        for (uint64_t i = 0; i < s->n; i++)
            if (s->lengths[i] >= ((uint64_t)1 << 31)) return "a length must lie in [0, 2^31)";
        if (s->pool_batches < 1) return "pool_batches must be >= 1";
        s->steps_per_epoch = s->n / s->batch_size;     /* D11: always drop-last */
        break;
    }
    if (s->steps_per_epoch == 0) return "n is smaller than batch_size with drop-last: no batch";
    return NULL;
}

size_t mixing_pick(const Sampler *s, double u)
{
    size_t last = 0;
    for (size_t i = 0; i < s->n_sources; i++) {
        if (!eligible(&s->sources[i])) continue;
        last = i;
#ifdef BUG_MIXING_GE
        if (s->cumulative[i] >= u) return i;
#else
        if (s->cumulative[i] > u) return i;
#endif
    }
#ifdef BUG_MIXING_LITERAL_LAST
    last = s->n_sources - 1;
#endif
    return last;            /* D10: the last eligible source */
}

/* D10: slot j draws u, picks a source with it, then draws the index within the source. */
uint64_t mixing_slot(const Sampler *s, uint64_t epoch, uint64_t step, uint64_t j, size_t *source)
{
    Rng rng = { derive(s->seed, epoch, step, j, STREAM_MIXING) };
    *source = mixing_pick(s, next_double(&rng));
    const Source *src = &s->sources[*source];
    return src->start + next_int(&rng, src->size);
}

static int by_bucket_key(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* D11: the epoch's plan, S batches of B indices, stored at the step that serves each. */
static void bucketed_plan(Sampler *s, uint64_t epoch)
{
    uint64_t S = s->steps_per_epoch, B = s->batch_size, used = S * B;
    uint64_t order_key = derive(s->seed, epoch, 0, 0, STREAM_BUCKET_ORDER);
    uint64_t place_key = derive(s->seed, epoch, 1, 0, STREAM_BUCKET_PLACE);
    uint64_t *keys = malloc(used * sizeof *keys);
    for (uint64_t p = 0; p < used; p++) {
        uint64_t index = keyed_permutation(p, s->n, order_key);
        keys[p] = (s->lengths[index] << 32) | index;    /* unique, so any sort agrees */
    }
    uint64_t pool = (s->pool_batches > S) ? used : B * s->pool_batches;
    for (uint64_t first = 0; first < used; first += pool)
        qsort(keys + first, (used - first < pool) ? used - first : pool, sizeof *keys, by_bucket_key);
    s->plan = realloc(s->plan, used * sizeof *s->plan);
    for (uint64_t t = 0; t < S; t++) {
#ifdef BUG_BUCKET_INVERSE
        uint64_t step = keyed_permutation_inverse(t, S, place_key);
#else
        uint64_t step = keyed_permutation(t, S, place_key);
#endif
        for (uint64_t i = 0; i < B; i++)
            s->plan[step * B + i] = keys[t * B + i] & 0xFFFFFFFFu;
    }
    free(keys);
    s->plan_epoch = epoch;
    s->plan_valid = 1;
}

static uint64_t shuffled_index(const Sampler *s, uint64_t epoch, uint64_t p)
{
    uint64_t key = derive(s->seed, epoch, 0, 0, STREAM_SHUFFLE);
#ifdef BUG_SHUFFLED_INVERSE
    return keyed_permutation_inverse(p, s->n, key);
#else
    return keyed_permutation(p, s->n, key);      /* D7: perm, not its inverse */
#endif
}

/* The dataset indices of (epoch, step); out holds batch_size entries. */
const char *sampler_indices(Sampler *s, uint64_t epoch, uint64_t step, uint64_t *out, size_t *count)
{
    uint64_t B = s->batch_size;
    if (step >= s->steps_per_epoch) return "step must be < steps_per_epoch";
    *count = 0;
    if (s->kind == SEQUENTIAL || s->kind == SHUFFLED) {
        for (uint64_t p = step * B; p < step * B + B && p < s->n; p++)
            out[(*count)++] = (s->kind == SEQUENTIAL) ? p : shuffled_index(s, epoch, p);
    } else if (s->kind == MIXING) {
        size_t source;
        for (uint64_t j = 0; j < B; j++) out[(*count)++] = mixing_slot(s, epoch, step, j, &source);
    } else {
        if (!s->plan_valid || s->plan_epoch != epoch) bucketed_plan(s, epoch);
        memcpy(out, s->plan + step * B, B * sizeof *out);
        *count = B;
    }
    return NULL;
}

void sampler_free(Sampler *s)
{
    free(s->sources); free(s->cumulative); free(s->lengths); free(s->plan);
    memset(s, 0, sizeof *s);
}
