/* §1 the stream ops: a loader (dataset, sampler, transform, collator, seed) serving rank r
 * of w its share of the global batch at global step g. `stream` asks for single steps in
 * any order; `stream_iter` runs the loader from a start step (a fresh run or a resume) to a
 * stop step, and a failing dataset ends the run at the step that needed the failing
 * sample; `stream_digest` hashes a long run. The last two run under every worker/prefetch
 * setting their case asks for (harness.c) and report each setting's digest. */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { const char *why_ = (expr); if (why_) return why_; } while (0)

/* The sampler caches its epoch's plan: worker threads ask it one at a time. */
static pthread_mutex_t sampler_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    Synthetic dataset;
    Sampler sampler;
    Collator collator;
    Augment transform;       /* gain_offset_copy: GainOffset on a copy, stream 0; or AUG_NONE */
    AugOp program;           /* a transform of kind augment (docs/contract.md's augmentations) */
    int has_program;
    uint64_t seed, world;
    uint64_t first_step;     /* the step the loader was started (or resumed) at */
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
    const Json *spec = need(in, "loader");
    memset(l, 0, sizeof *l);
    TRY(synthetic_from_json(need(in, "dataset"), &l->dataset));
    TRY(sampler_from_json(need(in, "sampler"), &l->sampler));
    TRY(collator_from_json(spec, &l->collator));
    const Json *transform = need(spec, "transform");
    int program = transform->type != J_NULL && !strcmp(need(transform, "kind")->text, "augment");
    if (!program) TRY(augment_from_json(transform, &l->transform));
    l->seed = as_mod64(need(spec, "seed"));
    TRY(as_u64(need(in, "world_size"), &l->world));
    TRY(check_ranks(l));
    if (program) TRY(aug_from_json(need(transform, "op"), &l->program));
    l->has_program = program;
    return NULL;
}

static void loader_free(Loader *l)
{
    sampler_free(&l->sampler);
    if (l->has_program) aug_free(&l->program);
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
        if (l->has_program) {     /* a new image, maybe of another shape: the sample takes it */
#ifdef BUG_SLOT_PER_RANK
            Rng rng = { derive(l->seed, epoch, step, slot - lo, STREAM_TRANSFORM) };
#else
            Rng rng = { derive(l->seed, epoch, step, slot, STREAM_TRANSFORM) };
#endif
            Image img = { s->c, s->h, s->w, s->image };
            const char *why = aug_apply(&l->program, &img, &rng);
            s->image = img.px;
            s->c = img.c; s->h = img.h; s->w = img.w;
            TRY(why);
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
    pthread_mutex_lock(&sampler_lock);
    const char *refused = sampler_indices(&l->sampler, *epoch, *step, indices, &count);
    pthread_mutex_unlock(&sampler_lock);
    TRY(refused);
    uint64_t lo = rank * per, hi = (lo + per < count) ? lo + per : count;
    if (lo >= hi) return "this rank has no sample in the batch";
    Sample *samples = calloc(hi - lo, sizeof *samples);
    int64_t *kept = calloc(hi - lo, sizeof *kept);
    const char *why = fetch(l, indices, lo, hi, *epoch, *step, samples, kept);
#ifdef BUG_SLOT_PER_RANK
    uint64_t first_slot = 0;
#else
    uint64_t first_slot = lo;      /* D14: the slot is the position in the global batch */
#endif
    if (!why) why = collate(&l->collator, samples, kept, hi - lo, l->seed, *epoch, *step, first_slot, out);
    for (uint64_t k = 0; k < hi - lo; k++) sample_free(&samples[k]);
    free(samples); free(kept); free(indices);
    return why;
}

static void out_rank_batch(Out *o, const Batch *b, uint64_t g, uint64_t rank, uint64_t epoch, uint64_t step)
{
    out_printf(o, "{");
    out_batch_fields(o, b);
    out_printf(o, ", \"g\": ");
    out_u64(o, g);
    out_printf(o, ", \"rank\": ");
    out_u64(o, rank);
    out_printf(o, ", \"epoch\": ");
    out_u64(o, epoch);
    out_printf(o, ", \"step\": ");
    out_u64(o, step);
    out_printf(o, "}");
}

const char *op_stream(const Json *in, Out *o)
{
    Loader l;
    const Json *steps = need(in, "steps");
    TRY(loader_from_json(in, &l));
    if (array_len(steps) > 0) TRY(as_u64(json_at(steps, 0), &l.first_step));
    out_printf(o, "{\"steps_per_epoch\": ");
    out_u64(o, l.sampler.steps_per_epoch);
    out_printf(o, ", \"batches\": [");
    for (size_t k = 0; k < array_len(steps); k++) {
        uint64_t g, epoch, step;
        TRY(as_u64(json_at(steps, k), &g));
        for (uint64_t rank = 0; rank < l.world; rank++) {
            Batch b;
            TRY(rank_batch(&l, g, rank, &epoch, &step, &b));
            out_printf(o, (k || rank) ? ", " : "");
            out_rank_batch(o, &b, g, rank, epoch, step);
            batch_free(&b);
        }
    }
    out_printf(o, "]}");
    loader_free(&l);
    return NULL;
}

/* The 32-byte digests of the batches one setting delivered, in delivery order. */
typedef struct {
    unsigned char *data;
    size_t len, cap;
} Digests;

static void digests_add(Digests *d, const unsigned char digest[32])
{
    if (d->len + 32 > d->cap) {
        d->cap = d->cap ? 2 * d->cap : 1024;
        d->data = realloc(d->data, d->cap);
    }
    memcpy(d->data + d->len, digest, 32);
    d->len += 32;
}

static void batch_sha256(const Batch *b, unsigned char digest[32]);

typedef struct { Loader *loader; uint64_t rank; } RankOfLoader;

static const char *build_rank_batch(void *ctx, uint64_t g, Batch *out, uint64_t *epoch, uint64_t *step)
{
    RankOfLoader *r = ctx;
    return rank_batch(r->loader, g, r->rank, epoch, step, out);
}

/* One rank's run from start (the loader's first step) to stop under one setting: its
 * batches in step order, then "error_at": the step whose sample failed (after which
 * nothing is delivered), also appended to `errors`; each batch's digest into `digests`. */
static const char *iter_run(Loader *l, uint64_t start, uint64_t stop, uint64_t rank, Setting setting,
                            Out *o, Digests *digests, Out *errors)
{
    const char *why = NULL;
    uint64_t failed_at = 0;
    RankOfLoader ctx = { l, rank };
    l->first_step = start;
    out_printf(o, "{\"start_g\": ");
    out_u64(o, start);
    out_printf(o, ", \"stop_g\": ");
    out_u64(o, stop);
    out_printf(o, ", \"rank\": ");
    out_u64(o, rank);
    out_printf(o, ", \"batches\": [");
    Prefetcher *p = prefetcher_start(build_rank_batch, &ctx, start, stop, setting.workers, setting.prefetch);
    Built b;
    for (int first = 1; prefetcher_next(p, &b); first = 0) {
        if (b.why) {
            why = b.why;
            failed_at = b.g;
            break;
        }
        unsigned char digest[32];
        batch_sha256(&b.batch, digest);
        digests_add(digests, digest);
        out_printf(o, first ? "" : ", ");
        out_rank_batch(o, &b.batch, b.g, rank, b.epoch, b.step);
        batch_free(&b.batch);
    }
    prefetcher_end(p);
    if (why && why != DATASET_FAILURE) return why;
    out_printf(o, "], \"error_at\": ");
    out_printf(errors, errors->len ? ", " : "");
    if (why) {
        out_u64(o, failed_at);
        out_u64(errors, failed_at);
    } else {
        out_printf(o, "null");
        out_printf(errors, "null");
    }
    out_printf(o, "}");
    return NULL;
}

/* Every run and rank under each setting asked; the runs written are the first setting's,
 * and each setting's digest and errors go in "settings". */
const char *op_stream_iter(const Json *in, Out *o)
{
    Loader l;
    Setting settings[MAX_SETTINGS];
    size_t count;
    const Json *runs = need(in, "runs");
    TRY(loader_from_json(in, &l));
    TRY(settings_from_json(in, settings, &count));
    char hex[MAX_SETTINGS][65];
    Out errors[MAX_SETTINGS];
    memset(errors, 0, sizeof errors);
    out_printf(o, "{\"steps_per_epoch\": ");
    out_u64(o, l.sampler.steps_per_epoch);
    out_printf(o, ", \"runs\": [");
    for (size_t s = 0; s < count; s++) {
        Out scratch = { 0 };
        Out *written = s == 0 ? o : &scratch;
        Digests digests = { 0 };
        for (size_t k = 0; k < array_len(runs); k++) {
            uint64_t start, stop;
            TRY(as_u64(need(json_at(runs, k), "start_g"), &start));
            TRY(as_u64(need(json_at(runs, k), "stop_g"), &stop));
            for (uint64_t rank = 0; rank < l.world; rank++) {
                out_printf(written, (k || rank) ? ", " : "");
                TRY(iter_run(&l, start, stop, rank, settings[s], written, &digests, &errors[s]));
            }
        }
        sha256_hex(digests.data ? digests.data : (unsigned char *)"", digests.len, hex[s]);
        free(digests.data);
        free(scratch.data);
    }
    out_printf(o, "]");
    out_settings(o, settings, count, hex, errors);
    out_printf(o, "}");
    for (size_t s = 0; s < count; s++) free(errors[s].data);
    loader_free(&l);
    return NULL;
}

static unsigned char *put_le32(unsigned char *dst, const void *values, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t v;
        memcpy(&v, (const char *)values + 4 * i, 4);
        for (int b = 0; b < 4; b++) *dst++ = (unsigned char)(v >> (8 * b));
    }
    return dst;
}

/* The digest of one batch: its six arrays' little-endian bytes, in the contract's order. */
static void batch_sha256(const Batch *b, unsigned char digest[32])
{
    size_t cells = b->b * b->c * b->h * b->wp, bytes = 4 * (cells + 4 * b->b + b->targets_len);
    unsigned char *buf = malloc(bytes + 1), *p = buf;
    p = put_le32(p, b->images, cells);
    p = put_le32(p, b->widths, b->b);
    p = put_le32(p, b->targets, b->targets_len);
    p = put_le32(p, b->target_lengths, b->b);
    p = put_le32(p, b->labels, b->b);
    put_le32(p, b->indices, b->b);
    sha256(buf, bytes, digest);
    free(buf);
}

/* Rank 0 from start_g to stop_g under each setting asked: each step's batch digest and the
 * digest of them all (the first setting's written out), and every setting's digest. */
const char *op_stream_digest(const Json *in, Out *o)
{
    Loader l;
    uint64_t start, stop;
    Setting settings[MAX_SETTINGS];
    size_t count;
    TRY(loader_from_json(in, &l));
    TRY(as_u64(need(in, "start_g"), &start));
    TRY(as_u64(need(in, "stop_g"), &stop));
    TRY(settings_from_json(in, settings, &count));
    if (stop < start || stop - start > (1u << 24)) return "stop_g must lie in [start_g, start_g + 2^24]";
    char hex[MAX_SETTINGS][65];
    RankOfLoader ctx = { &l, 0 };
    l.first_step = start;
    for (size_t s = 0; s < count; s++) {
        Digests digests = { 0 };
        Prefetcher *p = prefetcher_start(build_rank_batch, &ctx, start, stop, settings[s].workers,
                                         settings[s].prefetch);
        Built b;
        const char *why = NULL;
        while (!why && prefetcher_next(p, &b)) {
            why = b.why;
            if (why) break;
            unsigned char digest[32];
            batch_sha256(&b.batch, digest);
            digests_add(&digests, digest);
            batch_free(&b.batch);
        }
        prefetcher_end(p);
        TRY(why);
        sha256_hex(digests.data ? digests.data : (unsigned char *)"", digests.len, hex[s]);
        if (s == 0) {
            out_printf(o, "{\"steps_per_epoch\": ");
            out_u64(o, l.sampler.steps_per_epoch);
            out_printf(o, ", \"step_sha256\": [");
            for (size_t k = 0; k < digests.len / 32; k++) {
                out_printf(o, "%s\"", k ? ", " : "");
                for (int i = 0; i < 32; i++) out_printf(o, "%02x", digests.data[32 * k + i]);
                out_printf(o, "\"");
            }
            out_printf(o, "], \"sha256\": \"%s\"", hex[0]);
        }
        free(digests.data);
    }
    out_settings(o, settings, count, hex, NULL);
    out_printf(o, "}");
    loader_free(&l);
    return NULL;
}
