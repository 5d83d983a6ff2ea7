/* §1 the stream op: a loader (dataset, sampler, transform, collator, seed) serving rank r of
 * w its share of the global batch at each global step g, in random access. */
#include "input.h"

#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { const char *why_ = (expr); if (why_) return why_; } while (0)

typedef struct {
    Synthetic dataset;
    Sampler sampler;
    Collator collator;
    Augment transform;       /* gain_offset_copy: GainOffset on a copy, stream 0; or AUG_NONE */
    uint64_t seed, world, first_step;
} Loader;

/* Ranks (docs/contract.md): B divisible by w; the last rank must have a slot in every batch. */
static const char *check_ranks(const Loader *l)
{
    const Sampler *s = &l->sampler;
    if (l->world < 1) return "world_size must be >= 1";
    if (s->batch_size % l->world) return "batch_size is not divisible by world_size";
    if ((s->kind == SEQUENTIAL || s->kind == SHUFFLED) && !s->drop_last) {
        uint64_t last = s->n - (s->steps_per_epoch - 1) * s->batch_size;
        if (last <= (l->world - 1) * (s->batch_size / l->world))
            return "the last rank would get no sample of the short last batch";
    }
    return NULL;
}

static const char *loader_from_json(const Json *in, Loader *l)
{
    const Json *spec = need(in, "loader"), *transform = need(spec, "transform"), *steps = need(in, "steps");
    const Json *start = json_get(in, "start_step");
    memset(l, 0, sizeof *l);
    TRY(synthetic_from_json(need(in, "dataset"), &l->dataset));
    TRY(sampler_from_json(need(in, "sampler"), &l->sampler));
    TRY(collator_from_json(spec, &l->collator));
    TRY(augment_from_json(transform, &l->transform));
    l->seed = as_mod64(need(spec, "seed"));
    TRY(as_u64(need(in, "world_size"), &l->world));
    /* the step the loader was started (or resumed) at */
    if (start || array_len(steps) > 0) TRY(as_u64(start ? start : json_at(steps, 0), &l->first_step));
    return check_ranks(l);
}

/* The samples of slots [lo, hi) of the global batch, each through the transform with the
 * rng of its global slot. */
static const char *fetch(const Loader *l, const uint64_t *indices, uint64_t lo, uint64_t hi,
                         uint64_t epoch, uint64_t step, Sample *samples, int64_t *kept)
{
    for (uint64_t slot = lo; slot < hi; slot++) {
        Sample *s = &samples[slot - lo];
        TRY(synthetic_sample(&l->dataset, indices[slot], s));
        kept[slot - lo] = (int64_t)indices[slot];
        if (l->transform.kind != AUG_NONE) {
#ifdef BUG_SLOT_PER_RANK
            Rng rng = { derive(l->seed, epoch, step, slot - lo, STREAM_TRANSFORM) };
#else
            Rng rng = { derive(l->seed, epoch, step, slot, STREAM_TRANSFORM) };
#endif
            augment_apply(&l->transform, s->image, s->c * s->h * s->w, &rng);
        }
    }
    return NULL;
}

static const char *rank_batch(Loader *l, uint64_t g, uint64_t rank, uint64_t *epoch, uint64_t *step, Batch *out)
{
    uint64_t S = l->sampler.steps_per_epoch, B = l->sampler.batch_size, per = B / l->world;
    *epoch = g / S;              /* §1: epoch and step come from g alone */
    *step = g % S;
#ifdef BUG_EPOCH_FROM_RESUME
    *epoch -= l->first_step / S;
#endif
    uint64_t *indices = malloc(B * sizeof *indices);
    size_t count;
    TRY(sampler_indices(&l->sampler, *epoch, *step, indices, &count));
    uint64_t lo = rank * per, hi = (lo + per < count) ? lo + per : count;
    if (lo >= hi) return "this rank has no sample in the batch";
    Sample *samples = calloc(hi - lo, sizeof *samples);
    int64_t *kept = calloc(hi - lo, sizeof *kept);
    const char *why = fetch(l, indices, lo, hi, *epoch, *step, samples, kept);
#ifdef BUG_SLOT_PER_RANK
    lo = 0;
#endif
    if (!why) why = collate(&l->collator, samples, kept, hi - lo, l->seed, *epoch, *step, lo, out);
    for (uint64_t k = 0; k < hi - lo; k++) sample_free(&samples[k]);
    free(samples); free(kept); free(indices);
    return why;
}

const char *op_stream(const Json *in, Out *o)
{
    Loader l;
    const Json *steps = need(in, "steps");
    TRY(loader_from_json(in, &l));
    out_printf(o, "{\"steps_per_epoch\": ");
    out_u64(o, l.sampler.steps_per_epoch);
    out_printf(o, ", \"batches\": [");
    for (size_t k = 0; k < array_len(steps); k++) {
        uint64_t g, epoch, step;
        TRY(as_u64(json_at(steps, k), &g));
        for (uint64_t rank = 0; rank < l.world; rank++) {
            Batch b;
            TRY(rank_batch(&l, g, rank, &epoch, &step, &b));
            out_printf(o, "%s{", (k || rank) ? ", " : "");
            out_batch_fields(o, &b);
            out_printf(o, ", \"g\": ");
            out_u64(o, g);
            out_printf(o, ", \"rank\": ");
            out_u64(o, rank);
            out_printf(o, ", \"epoch\": ");
            out_u64(o, epoch);
            out_printf(o, ", \"step\": ");
            out_u64(o, step);
            out_printf(o, "}");
            batch_free(&b);
        }
    }
    out_printf(o, "]}");
    return NULL;
}
