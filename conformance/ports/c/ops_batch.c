/* The §4, §6, dataset and §1 ops of the vectors: collate, gray8/rgb8, synthetic, stream. */
#include "input.h"

#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { const char *why_ = (expr); if (why_) return why_; } while (0)

/* An explicit sample of a collate case: {"image": {shape, values_f32}, "target", "label"}. */
static const char *sample_from_json(const Json *spec, Sample *s)
{
    const Json *image = need(spec, "image"), *shape = need(image, "shape");
    const Json *values = need(image, "values_f32"), *target = need(spec, "target");
    uint64_t dims[3], label;
    if (array_len(shape) != 3) return "a sample image must be [C, H, W]";
    for (int k = 0; k < 3; k++) TRY(as_u64(json_at(shape, (size_t)k), &dims[k]));
    s->c = (size_t)dims[0]; s->h = (size_t)dims[1]; s->w = (size_t)dims[2];
    if (array_len(values) != s->c * s->h * s->w) return "values_f32 does not match the shape";
    s->image = malloc(array_len(values) * sizeof(float) + 1);
    for (size_t i = 0; i < array_len(values); i++) {
        uint32_t bits = (uint32_t)strtoul(json_at(values, i)->text + 2, NULL, 16);
        memcpy(&s->image[i], &bits, sizeof bits);
    }
    s->target_len = array_len(target);
    s->target = malloc(s->target_len * sizeof(int32_t) + 1);
    for (size_t i = 0; i < s->target_len; i++) s->target[i] = (int32_t)as_mod64(json_at(target, i));
    TRY(as_u64(need(spec, "label"), &label));
    s->label = (int32_t)label;
    return NULL;
}

static const char *collate_samples(const Json *in, Sample *samples, int64_t *indices, size_t count)
{
    const Json *idx = need(in, "indices"), *explicit = json_get(in, "samples");
    Synthetic d;
    if (!explicit) TRY(synthetic_from_json(need(in, "dataset"), &d));
    else if (array_len(explicit) != count) return "as many samples as indices are needed";
    for (size_t k = 0; k < count; k++) {
        uint64_t i;
        TRY(as_u64(json_at(idx, k), &i));
        indices[k] = (int64_t)i;
        TRY(explicit ? sample_from_json(json_at(explicit, k), &samples[k]) : synthetic_sample(&d, i, &samples[k]));
    }
    return NULL;
}

const char *op_collate(const Json *in, Out *o)
{
    Collator col;
    Batch batch;
    uint64_t epoch, step, first_slot, seed = as_mod64(need(in, "seed"));
    size_t count = array_len(need(in, "indices"));
    TRY(collator_from_json(in, &col));
    TRY(as_u64(need(in, "epoch"), &epoch));
    TRY(as_u64(need(in, "step"), &step));
    TRY(as_u64(need(in, "slot_offset"), &first_slot));
    Sample *samples = calloc(count + 1, sizeof *samples);
    int64_t *indices = calloc(count + 1, sizeof *indices);
    const char *why = collate_samples(in, samples, indices, count);
    if (!why) why = collate(&col, samples, indices, count, seed, epoch, step, first_slot, &batch);
    if (!why) {
        out_printf(o, "{");
        out_batch_fields(o, &batch);
        out_printf(o, "}");
        batch_free(&batch);
    }
    for (size_t k = 0; k < count; k++) sample_free(&samples[k]);     /* calloc'd: unread ones are empty */
    free(samples);
    free(indices);
    return why;
}

/* gray8 (one mean and std) or rgb8 (three of each); scale and bias are written too. */
const char *op_planar(const Json *in, Out *o)
{
    size_t channels = strcmp(need(in, "op")->text, "gray8") ? 3 : 1;
    uint64_t height, width, stride;
    double mean[3], std[3];
    const Json *src = need(in, "src");
    TRY(as_u64(need(in, "height"), &height));
    TRY(as_u64(need(in, "width"), &width));
    TRY(as_u64(need(in, "stride"), &stride));
    for (size_t c = 0; c < channels; c++) {
        mean[c] = as_f64(channels == 1 ? need(in, "mean") : json_at(need(in, "mean"), c));
        std[c] = as_f64(channels == 1 ? need(in, "std") : json_at(need(in, "std"), c));
    }
    if (height > (1u << 24) || width > (1u << 24)) return "the image is too large";
    size_t len = array_len(src);
    uint8_t *bytes = malloc(len + 1);
    float *out = malloc(channels * height * width * sizeof(float) + 1);
    const char *why = NULL;
    for (size_t i = 0; i < len && !why; i++) {
        uint64_t b;
        why = as_u64(json_at(src, i), &b);
        if (!why && b > 255) why = "a byte must lie in [0, 255]";
        if (!why) bytes[i] = (uint8_t)b;
    }
    if (!why) why = u8_to_planar(bytes, len, channels, height, width, stride, mean, std, out);
    if (why) {
        free(bytes);
        free(out);
        return why;
    }
    size_t shape[3] = { channels, height, width };
    out_printf(o, "{\"planar\": ");
    out_f32_array(o, out, shape, 3);
    out_printf(o, ", \"scale\": %s", channels == 3 ? "[" : "");
    for (size_t c = 0; c < channels; c++) {
        float scale, bias;
        planar_constants(mean[c], std[c], &scale, &bias);
        out_printf(o, c ? ", " : "");
        out_f32_bits(o, scale);
    }
    out_printf(o, "%s, \"bias\": %s", channels == 3 ? "]" : "", channels == 3 ? "[" : "");
    for (size_t c = 0; c < channels; c++) {
        float scale, bias;
        planar_constants(mean[c], std[c], &scale, &bias);
        out_printf(o, c ? ", " : "");
        out_f32_bits(o, bias);
    }
    out_printf(o, "%s}", channels == 3 ? "]" : "");
    free(bytes);
    free(out);
    return NULL;
}

void out_sample(Out *o, uint64_t i, const Sample *s)
{
    size_t shape[3] = { s->c, s->h, s->w };
    out_printf(o, "{\"i\": ");
    out_u64(o, i);
    out_printf(o, ", \"image\": ");
    out_f32_array(o, s->image, shape, 3);
    out_printf(o, ", \"label\": %ld, \"target\": [", (long)s->label);
    for (size_t t = 0; t < s->target_len; t++) out_printf(o, "%s%ld", t ? ", " : "", (long)s->target[t]);
    out_printf(o, "], \"width\": %zu}", s->w);
}

const char *op_synthetic(const Json *in, Out *o)
{
    Synthetic d;
    const Json *idx = need(in, "indices");
    TRY(synthetic_from_json(need(in, "params"), &d));
    out_printf(o, "{\"samples\": [");
    for (size_t k = 0; k < array_len(idx); k++) {
        uint64_t i;
        Sample s;
        TRY(as_u64(json_at(idx, k), &i));
        TRY(synthetic_sample(&d, i, &s));
        out_printf(o, "%s", k ? ", " : "");
        out_sample(o, i, &s);
        sample_free(&s);
    }
    out_printf(o, "]}");
    return NULL;
}
