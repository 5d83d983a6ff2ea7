/* The §2 and §3 ops of the vectors: draws, sequence, mix, derive, table, points,
 * sampler, sampler_error. */
#include "input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { const char *why_ = (expr); if (why_) return why_; } while (0)

/* One draw of `method` written in the vectors' encoding (integers as decimal strings,
 * singles as float32 bits, doubles as float64 bits). */
static const char *draw(Rng *rng, const char *method, const Json *n_arg, Out *o)
{
    if (!strcmp(method, "next_u64")) {
        out_u64(o, next_u64(rng));
    } else if (!strcmp(method, "next_single")) {
        out_f32_bits(o, next_single(rng));
    } else if (!strcmp(method, "next_double")) {
        out_f64_bits(o, next_double(rng));
    } else if (!strcmp(method, "next_normal")) {
        out_f32_bits(o, next_normal(rng));
    } else if (!strcmp(method, "next_int")) {
        uint64_t n;
        TRY(as_u64(n_arg, &n));
        if (n == 0) return "next_int needs 1 <= n < 2^64";     /* D4 */
        out_u64(o, next_int(rng, n));
    } else {
        fprintf(stderr, "case %s: unknown method %s\n", current_case, method);
        exit(2);
    }
    return NULL;
}

const char *op_draws(const Json *in, Out *o)
{
    Rng rng = { as_mod64(need(in, "state")) };
    const char *method = need(in, "method")->text;
    uint64_t count;
    TRY(as_u64(need(in, "count"), &count));
    out_printf(o, "{\"values\": [");
    for (uint64_t k = 0; k < count; k++) {
        if (k) out_printf(o, ", ");
        TRY(draw(&rng, method, json_get(in, "n"), o));
    }
    out_printf(o, "], \"state_after\": ");
    out_u64(o, rng.state);
    out_printf(o, "}");
    return NULL;
}

const char *op_sequence(const Json *in, Out *o)
{
    Rng rng = { as_mod64(need(in, "state")) };
    const Json *calls = need(in, "calls");
    out_printf(o, "{\"values\": [");
    for (size_t k = 0; k < array_len(calls); k++) {
        const Json *call = json_at(calls, k);
        if (k) out_printf(o, ", ");
        TRY(draw(&rng, json_at(call, 0)->text, json_at(call, 1), o));
    }
    out_printf(o, "], \"state_after\": ");
    out_u64(o, rng.state);
    out_printf(o, "}");
    return NULL;
}

const char *op_mix(const Json *in, Out *o)
{
    const Json *x = need(in, "x");
    out_printf(o, "{\"values\": [");
    for (size_t k = 0; k < array_len(x); k++) {
        if (k) out_printf(o, ", ");
        out_u64(o, mix(as_mod64(json_at(x, k))));
    }
    out_printf(o, "]}");
    return NULL;
}

const char *op_derive(const Json *in, Out *o)
{
    const Json *args = need(in, "args");
    out_printf(o, "{\"values\": [");
    for (size_t k = 0; k < array_len(args); k++) {
        const Json *a = json_at(args, k);
        if (array_len(a) != 5) return "derive takes five arguments";
        if (k) out_printf(o, ", ");
        out_u64(o, derive(as_mod64(json_at(a, 0)), as_mod64(json_at(a, 1)), as_mod64(json_at(a, 2)),
                          as_mod64(json_at(a, 3)), as_mod64(json_at(a, 4))));
    }
    out_printf(o, "]}");
    return NULL;
}

const char *op_table(const Json *in, Out *o)
{
    uint64_t n, key = as_mod64(need(in, "key"));
    TRY(as_u64(need(in, "n"), &n));
    out_printf(o, "{\"table\": [");
    for (uint64_t p = 0; p < n; p++) {
        if (p) out_printf(o, ", ");
        out_u64(o, keyed_permutation(p, n, key));
    }
    out_printf(o, "]}");
    return NULL;
}

const char *op_points(const Json *in, Out *o)
{
    uint64_t n, p, key = as_mod64(need(in, "key"));
    const Json *ps = need(in, "p");
    TRY(as_u64(need(in, "n"), &n));
    out_printf(o, "{\"values\": [");
    for (size_t k = 0; k < array_len(ps); k++) {
        TRY(as_u64(json_at(ps, k), &p));
        if (n >= 2 && p >= n) return "p must lie in [0, n)";       /* D6 */
        if (k) out_printf(o, ", ");
        out_u64(o, keyed_permutation(p, n, key));
    }
    out_printf(o, "]}");
    return NULL;
}

/* D10: "cumulative": the bounds of the eligible sources, float64 bits. */
static void out_cumulative(Out *o, const Sampler *s)
{
    out_printf(o, ", \"cumulative\": [");
    for (size_t i = 0, first = 1; i < s->n_sources; i++)
        if (s->sources[i].share > 0.0 && s->sources[i].size > 0) {
            out_printf(o, first ? "" : ", ");
            out_f64_bits(o, s->cumulative[i]);
            first = 0;
        }
    out_printf(o, "]");
}

const char *op_sampler(const Json *in, Out *o)
{
    Sampler s;
    const Json *epochs = need(in, "epochs");
    TRY(sampler_from_json(need(in, "sampler"), &s));
    uint64_t *batch = malloc(s.batch_size * sizeof *batch);
    out_printf(o, "{\"steps_per_epoch\": ");
    out_u64(o, s.steps_per_epoch);
    out_printf(o, ", \"batch_size\": ");
    out_u64(o, s.batch_size);
    if (s.kind == MIXING) out_cumulative(o, &s);
    out_printf(o, ", \"epochs\": [");
    for (size_t e = 0; e < array_len(epochs); e++) {
        uint64_t epoch;
        TRY(as_u64(json_at(epochs, e), &epoch));
        out_printf(o, "%s{\"epoch\": ", e ? ", " : "");
        out_u64(o, epoch);
        out_printf(o, ", \"batches\": [");
        for (uint64_t step = 0; step < s.steps_per_epoch; step++) {
            size_t count;
            TRY(sampler_indices(&s, epoch, step, batch, &count));
            out_printf(o, "%s[", step ? ", " : "");
            for (size_t i = 0; i < count; i++) {
                if (i) out_printf(o, ", ");
                out_u64(o, batch[i]);
            }
            out_printf(o, "]");
        }
        out_printf(o, "]}");
    }
    out_printf(o, "]}");
    free(batch);
    sampler_free(&s);
    return NULL;
}

/* The sampler, or the one call, must be refused: a port that accepts says so. */
const char *op_sampler_error(const Json *in, Out *o)
{
    Sampler s;
    TRY(sampler_from_json(need(in, "sampler"), &s));
    const Json *call = json_get(in, "call");
    const char *why = NULL;
    if (call) {
        uint64_t epoch, step;
        size_t count;
        why = as_u64(need(call, "epoch"), &epoch);
        if (!why) why = as_u64(need(call, "step"), &step);
        if (!why) {
            uint64_t *batch = malloc(s.batch_size * sizeof *batch);
            why = sampler_indices(&s, epoch, step, batch, &count);
            free(batch);
        }
    }
    sampler_free(&s);
    if (!why) out_printf(o, "{\"accepted\": true}");
    return why;
}

/* D10 one pick at a time: a mixing sampler of batch 1 and 1 step per epoch, with each
 * pick's seed; the source it picked and the index it drew. */
const char *op_mixing_pick(const Json *in, Out *o)
{
    Sampler s;
    const Json *picks = need(in, "picks");
    memset(&s, 0, sizeof s);
    s.kind = MIXING;
    s.batch_size = s.steps_per_epoch = 1;
    const char *why = sources_from_json(need(in, "sources"), &s);
    if (!why) why = sampler_check(&s);
    if (why) {
        sampler_free(&s);
        return why;
    }
    size_t n = array_len(picks), *sources = malloc((n + 1) * sizeof *sources);
    uint64_t *indices = malloc((n + 1) * sizeof *indices);
    for (size_t k = 0; k < n; k++) {
        s.seed = as_mod64(need(json_at(picks, k), "seed"));
        indices[k] = mixing_slot(&s, 0, 0, 0, &sources[k]);
    }
    out_printf(o, "{\"sources\": [");
    for (size_t k = 0; k < n; k++) out_printf(o, "%s\"%zu\"", k ? ", " : "", sources[k]);
    out_printf(o, "], \"indices\": [");
    for (size_t k = 0; k < n; k++) {
        out_printf(o, k ? ", " : "");
        out_u64(o, indices[k]);
    }
    out_printf(o, "]");
    out_cumulative(o, &s);
    out_printf(o, "}");
    free(sources);
    free(indices);
    sampler_free(&s);
    return NULL;
}
