/* §4 collation (ImageBatchCollator) and the package's two built-in augmentations
 * (docs/contract.md). Every float operation is a single float32 operation. */
#include "port.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

Augment make_gain_offset(double gain, double offset)
{
    Augment a = { AUG_GAIN_OFFSET, (float)gain, (float)offset, 0.0f };
    return a;
}

Augment make_gaussian_noise(double sigma)
{
    Augment a = { AUG_GAUSSIAN_NOISE, 0.0f, 0.0f, (float)sigma };
    return a;
}

/* Edits count pixels (one sample, C, H, W order) in place with the sample's rng. */
void augment_apply(const Augment *aug, float *pixels, size_t count, Rng *rng)
{
    if (aug->kind == AUG_GAIN_OFFSET) {
        float a = next_single(rng), b = next_single(rng);
        float g = 1.0f + aug->gain * (2.0f * a - 1.0f);
        float o = aug->offset * (2.0f * b - 1.0f);
        for (size_t i = 0; i < count; i++)
            pixels[i] = pixels[i] * g + o;          /* two roundings: never fused */
    } else if (aug->kind == AUG_GAUSSIAN_NOISE) {
        for (size_t i = 0; i < count; i++)
            pixels[i] = pixels[i] + aug->sigma * next_normal(rng);
    }
}

/* The float64 pad value as the float32 the batch holds: the nearest float32. */
float pad_value_f32(double pad)
{
    float f = (float)pad;             /* C rounds a conversion to the nearest, ties to even */
#ifdef BUG_PAD_TRUNCATE
    if (fabs((double)f) > fabs(pad)) f = nextafterf(f, 0.0f);
#endif
    return f;
}

/* Sizes that cannot overflow once checked: every product is checked against SIZE_MAX. */
static int mul_ok(size_t a, size_t b, size_t *out)
{
    if (a && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static const char *batch_alloc(Batch *out, const Sample *samples, size_t count, uint64_t m)
{
    size_t max_w = 0, cells, plane;
    for (size_t k = 0; k < count; k++) {
        if (samples[k].c != samples[0].c || samples[k].h != samples[0].h)
            return "the samples of a batch must share C and H";
        if (samples[k].w > max_w) max_w = samples[k].w;
        out->targets_len += samples[k].target_len;
    }
    /* D13: Wp = ceil(max W / m) * m */
    uint64_t wp = (max_w / m + (max_w % m != 0)) * m;
    if (wp < max_w || wp > SIZE_MAX) return "the padded width does not fit in memory";
    out->b = count; out->c = samples[0].c; out->h = samples[0].h; out->wp = (size_t)wp;
    if (!mul_ok(out->c, out->h, &plane) || !mul_ok(plane, out->wp, &cells) || !mul_ok(cells, count, &cells)
        || cells > SIZE_MAX / sizeof(float))
        return "the batch does not fit in memory";
    out->images = malloc(cells * sizeof(float) + 1);
    out->widths = malloc(count * sizeof(int32_t));
    out->target_lengths = malloc(count * sizeof(int32_t));
    out->labels = malloc(count * sizeof(int32_t));
    out->indices = malloc(count * sizeof(int32_t));
    out->targets = malloc(out->targets_len * sizeof(int32_t) + 1);
    return NULL;
}

/* One sample into batch row k: augmented on a contiguous scratch copy with the rng of its
 * global slot (stream 1), then copied to the left of its rows, the rest padded. */
static void place_sample(const Collator *col, const Sample *s, Batch *out, size_t k, Rng *rng)
{
    size_t n = s->c * s->h * s->w;
    float *scratch = malloc(n * sizeof(float) + 1);
    memcpy(scratch, s->image, n * sizeof(float));
    if (col->augment.kind != AUG_NONE) augment_apply(&col->augment, scratch, n, rng);
    float *dst = out->images + k * out->c * out->h * out->wp;
    for (size_t row = 0; row < s->c * s->h; row++) {
        memcpy(dst + row * out->wp, scratch + row * s->w, s->w * sizeof(float));
        for (size_t x = s->w; x < out->wp; x++) dst[row * out->wp + x] = col->pad_value;
    }
    free(scratch);
}

const char *collate(const Collator *col, const Sample *samples, const int64_t *indices, size_t count,
                    uint64_t seed, uint64_t epoch, uint64_t step, uint64_t first_slot, Batch *out)
{
    memset(out, 0, sizeof *out);
    if (count == 0) return "a batch needs at least one sample";
    if (col->width_multiple < 1) return "width_multiple must be >= 1";
    const char *err = batch_alloc(out, samples, count, col->width_multiple);
    if (err) return err;
    size_t t = 0;
    for (size_t k = 0; k < count; k++) {
#ifdef BUG_AUGMENT_STREAM_0
        Rng rng = { derive(seed, epoch, step, first_slot + k, STREAM_TRANSFORM) };
#else
        Rng rng = { derive(seed, epoch, step, first_slot + k, STREAM_AUGMENT) };
#endif
        place_sample(col, &samples[k], out, k, &rng);
        out->widths[k] = (int32_t)samples[k].w;
        out->target_lengths[k] = (int32_t)samples[k].target_len;
        out->labels[k] = samples[k].label;
        out->indices[k] = (int32_t)indices[k];
        memcpy(out->targets + t, samples[k].target, samples[k].target_len * sizeof(int32_t));
        t += samples[k].target_len;
    }
    return NULL;
}

void batch_free(Batch *b)
{
    free(b->images); free(b->widths); free(b->target_lengths);
    free(b->labels); free(b->indices); free(b->targets);
    memset(b, 0, sizeof *b);
}
