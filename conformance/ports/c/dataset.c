/* The package's synthetic dataset SyntheticLineImages (docs/contract.md): sample i is a
 * pure function of (seed, i), from two rngs, streams 2 and 3. */
#include "port.h"

#include <stdlib.h>
#include <string.h>

const char DATASET_FAILURE[] = "the dataset failed";

const char *synthetic_check(const Synthetic *d)
{
    if (d->height < 1 || d->channels < 1 || d->min_width < 1)
        return "height, channels and min_width must be >= 1";
    if (d->max_width < d->min_width) return "max_width must be >= min_width";
    if (d->max_width > (1u << 30) || d->height > (1u << 20) || d->channels > 64)
        return "image sizes out of range";
    return NULL;
}

const char *synthetic_sample(const Synthetic *d, uint64_t i, Sample *out)
{
    if (i >= d->count) return "index out of range";
    if (d->fails && i == d->fails_at) return DATASET_FAILURE;
    Rng g = { derive(d->seed, 0, i, 0, STREAM_SYNTH_LABEL) };
    uint64_t width = d->min_width + next_int(&g, d->max_width - d->min_width + 1);
    uint64_t per_16 = width / 16;
    uint64_t target_len = 1 + next_int(&g, per_16 > 1 ? per_16 : 1);
    out->target = malloc(target_len * sizeof(int32_t));
    for (uint64_t k = 0; k < target_len; k++)
        out->target[k] = (int32_t)(1 + next_int(&g, 95));   /* 0 is the CTC blank */
    out->target_len = (size_t)target_len;
    out->label = (int32_t)next_int(&g, 10);

    out->c = (size_t)d->channels; out->h = (size_t)d->height; out->w = (size_t)width;
    size_t n = out->c * out->h * out->w;
    out->image = malloc(n * sizeof(float) + 1);
    Rng p = { derive(d->seed, 0, i, 0, STREAM_SYNTH_PIXELS) };
    for (size_t k = 0; k < n; k++) out->image[k] = next_single(&p);
    return NULL;
}

void sample_free(Sample *s)
{
    free(s->image);
    free(s->target);
    memset(s, 0, sizeof *s);
}
