/* Decoding the vectors' inputs into the port's values, and the batch writer. */
#include "input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *current_case = "?";

static void malformed(const char *what, const char *key)
{
    fprintf(stderr, "case %s: %s%s%s\n", current_case, what, key ? " " : "", key ? key : "");
    exit(2);
}

const Json *need(const Json *object, const char *key)
{
    const Json *v = json_get(object, key);
    if (!v) malformed("the input has no field", key);
    return v;
}

size_t array_len(const Json *v)
{
    if (!v || v->type != J_ARRAY) malformed("expected an array", NULL);
    return v->len;
}

uint64_t as_mod64(const Json *v)
{
    Integer i;
    if (!json_integer(v, &i)) malformed("expected an integer", NULL);
    return i.negative ? 0 - i.magnitude_mod : i.magnitude_mod;     /* two's complement */
}

const char *as_u64(const Json *v, uint64_t *out)
{
    Integer i;
    if (!json_integer(v, &i)) malformed("expected an integer", NULL);
    if (i.negative && (i.magnitude_mod || i.too_big)) return "a negative count, size, position or step";
    if (i.too_big) return "an integer >= 2^64";
    *out = i.magnitude_mod;
    return NULL;
}

double as_f64(const Json *v)
{
    if (!v || v->type != J_STRING || strncmp(v->text, "0x", 2)) malformed("expected float64 bits", NULL);
    uint64_t bits = strtoull(v->text + 2, NULL, 16);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

int as_bool(const Json *v)
{
    if (!v || (v->type != J_TRUE && v->type != J_FALSE)) malformed("expected true or false", NULL);
    return v->type == J_TRUE;
}

#define TRY(expr) do { const char *why_ = (expr); if (why_) return why_; } while (0)

const char *sources_from_json(const Json *list, Sampler *s)
{
    s->n_sources = array_len(list);
    s->sources = calloc(s->n_sources + 1, sizeof *s->sources);
    s->cumulative = calloc(s->n_sources + 1, sizeof *s->cumulative);
    for (size_t i = 0; i < s->n_sources; i++) {
        const Json *src = json_at(list, i);
        TRY(as_u64(need(src, "start"), &s->sources[i].start));
        TRY(as_u64(need(src, "size"), &s->sources[i].size));
        s->sources[i].share = as_f64(need(src, "share"));
    }
    return NULL;
}

static const char *sampler_fields(const Json *spec, Sampler *s);

/* The sampler a vector's spec describes; a refused one is freed (nothing to release). */
const char *sampler_from_json(const Json *spec, Sampler *s)
{
    const char *why = sampler_fields(spec, s);
    if (why) sampler_free(s);
    return why;
}

static const char *sampler_fields(const Json *spec, Sampler *s)
{
    const char *kind = need(spec, "kind")->text;
    memset(s, 0, sizeof *s);
    TRY(as_u64(need(spec, "batch_size"), &s->batch_size));
    if (!strcmp(kind, "sequential") || !strcmp(kind, "shuffled")) {
        s->kind = !strcmp(kind, "sequential") ? SEQUENTIAL : SHUFFLED;
        TRY(as_u64(need(spec, "n"), &s->n));
        s->drop_last = as_bool(need(spec, "drop_last"));
        if (s->kind == SHUFFLED) s->seed = as_mod64(need(spec, "seed"));
    } else if (!strcmp(kind, "mixing")) {
        s->kind = MIXING;
        s->seed = as_mod64(need(spec, "seed"));
        TRY(as_u64(need(spec, "steps_per_epoch"), &s->steps_per_epoch));
        TRY(sources_from_json(need(spec, "sources"), s));
    } else if (!strcmp(kind, "bucketed")) {
        const Json *lengths = need(spec, "lengths");
        s->kind = BUCKETED;
        s->seed = as_mod64(need(spec, "seed"));
        TRY(as_u64(need(spec, "pool_batches"), &s->pool_batches));
        s->n = array_len(lengths);
        s->lengths = calloc(s->n + 1, sizeof *s->lengths);
        for (uint64_t i = 0; i < s->n; i++) TRY(as_u64(json_at(lengths, i), &s->lengths[i]));
    } else {
        malformed("unknown sampler kind", kind);
    }
    return sampler_check(s);
}

const char *synthetic_from_json(const Json *spec, Synthetic *d)
{
    const Json *count = json_get(spec, "count");
    d->count = UINT64_MAX;                 /* the synthetic op's params carry no count */
    if (count) TRY(as_u64(count, &d->count));
    TRY(as_u64(need(spec, "height"), &d->height));
    TRY(as_u64(need(spec, "min_width"), &d->min_width));
    TRY(as_u64(need(spec, "max_width"), &d->max_width));
    TRY(as_u64(need(spec, "channels"), &d->channels));
    d->seed = as_mod64(need(spec, "seed"));
    d->fails = json_get(spec, "fails_at") != NULL;
    if (d->fails) TRY(as_u64(json_get(spec, "fails_at"), &d->fails_at));
    return synthetic_check(d);
}

const char *augment_from_json(const Json *spec, Augment *a)
{
    memset(a, 0, sizeof *a);
    if (!spec || spec->type == J_NULL) return NULL;
    const char *kind = need(spec, "kind")->text;
    if (!strcmp(kind, "gain_offset") || !strcmp(kind, "gain_offset_copy"))
        *a = make_gain_offset(as_f64(need(spec, "gain")), as_f64(need(spec, "offset")));
    else if (!strcmp(kind, "gaussian_noise"))
        *a = make_gaussian_noise(as_f64(need(spec, "sigma")));
    else
        malformed("unknown augmentation kind", kind);
    return NULL;
}

const char *collator_from_json(const Json *spec, Collator *c)
{
    TRY(as_u64(need(spec, "width_multiple"), &c->width_multiple));
    c->pad_value = pad_value_f32(as_f64(need(spec, "pad_value")));
    return augment_from_json(need(spec, "augmentation"), &c->augment);
}

static void out_int32s(Out *o, const char *name, const int32_t *v, size_t n)
{
    out_printf(o, "\"%s\": [", name);
    for (size_t i = 0; i < n; i++) out_printf(o, "%s%ld", i ? ", " : "", (long)v[i]);
    out_printf(o, "]");
}

void out_batch_fields(Out *o, const Batch *b)
{
    size_t shape[4] = { b->b, b->c, b->h, b->wp };
    out_printf(o, "\"images\": ");
    out_f32_array(o, b->images, shape, 4);
    out_printf(o, ", ");
    out_int32s(o, "widths", b->widths, b->b);
    out_printf(o, ", ");
    out_int32s(o, "targets", b->targets, b->targets_len);
    out_printf(o, ", ");
    out_int32s(o, "target_lengths", b->target_lengths, b->b);
    out_printf(o, ", ");
    out_int32s(o, "labels", b->labels, b->b);
    out_printf(o, ", ");
    out_int32s(o, "indices", b->indices, b->b);
}
