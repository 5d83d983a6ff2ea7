/* The package's learnable dataset SyntheticTextLines (docs/contract.md, its section) and the
 * vectors' `textlines` op. Sample i is a pure function of (seed, i): a layout rng on stream 4
 * places glyphs of a 5x7 font left to right; a pixel rng on stream 5 adds noise, row by row. */
#include "input.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { const char *why_ = (expr); if (why_) return why_; } while (0)

enum { STREAM_TEXT_LAYOUT = 4, STREAM_TEXT_PIXELS = 5 };

static const char GLYPHS[] = "0123456789ABCDEF";     /* symbol s (1-based) draws GLYPHS[s - 1] */

/* contract.md's font: seven rows top to bottom, bit 4 the leftmost of five columns. */
static const unsigned char FONT[16][7] = {
    { 0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E },   /* 0 */
    { 0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E },   /* 1 */
    { 0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F },   /* 2 */
    { 0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E },   /* 3 */
    { 0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02 },   /* 4 */
    { 0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E },   /* 5 */
    { 0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E },   /* 6 */
    { 0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08 },   /* 7 */
    { 0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E },   /* 8 */
    { 0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C },   /* 9 */
    { 0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11 },   /* A */
    { 0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E },   /* B */
    { 0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E },   /* C */
    { 0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C },   /* D */
    { 0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F },   /* E */
    { 0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10 },   /* F */
};

typedef struct {
    uint64_t height, min_length, max_length, num_symbols, scale, seed;
    float noise;                                      /* rounded to float32 first */
} TextLines;

static const char *textlines_from_json(const Json *p, TextLines *t)
{
    TRY(as_u64(need(p, "height"), &t->height));
    TRY(as_u64(need(p, "min_length"), &t->min_length));
    TRY(as_u64(need(p, "max_length"), &t->max_length));
    TRY(as_u64(need(p, "num_symbols"), &t->num_symbols));
    TRY(as_u64(need(p, "scale"), &t->scale));
    t->seed = as_mod64(need(p, "seed"));              /* D3: the seed is reduced mod 2^64 */
    double noise = as_f64(need(p, "noise"));
    t->noise = (float)noise;
#ifdef BUG_TEXTLINES_NO_UPPER_BOUNDS
    const uint64_t most_scale = UINT64_MAX / 7, most_height = UINT64_MAX, most_length = UINT64_MAX;
#else
    const uint64_t most_scale = 64, most_height = 4096, most_length = 4096;
#endif
    if (t->scale < 1 || t->scale > most_scale) return "scale must lie in [1, 64]";
    if (t->height < 7 * t->scale || t->height > most_height) return "height must lie in [7 * scale, 4096]";
    if (t->min_length < 1 || t->max_length < t->min_length || t->max_length > most_length)
        return "need 1 <= min_length <= max_length <= 4096";
    if (t->num_symbols < 1 || t->num_symbols > 16) return "num_symbols must lie in [1, 16]";
#ifdef BUG_NOISE_CHECKED_IN_DOUBLE
    if (!isfinite(noise) || noise < 0) return "noise must be finite and >= 0";
#else
    if (!isfinite(t->noise) || t->noise < 0) return "noise must be finite and >= 0";   /* f32(noise), as the contract says */
#endif
    return NULL;
}

/* One glyph's place: left column, top row, ink level. */
typedef struct { uint64_t x, y; float ink; } Place;

static const char *textlines_sample(const TextLines *t, uint64_t i, Sample *out)
{
    const uint64_t s = t->scale, h = t->height;
    Rng r = { derive(t->seed, 0, i, 0, STREAM_TEXT_LAYOUT) };
    uint64_t length = t->min_length + next_int(&r, t->max_length - t->min_length + 1);
    out->target = malloc(length * sizeof(int32_t));
    Place *places = malloc(length * sizeof(Place));
    for (uint64_t k = 0; k < length; k++) out->target[k] = (int32_t)(1 + next_int(&r, t->num_symbols));
    uint64_t x = s;
    for (uint64_t k = 0; k < length; k++) {
        uint64_t gap = next_int(&r, 2 * s + 1);
        uint64_t y = next_int(&r, h - 7 * s + 1);
        float half = 0.5f, u = next_single(&r);
        float scaled = half * u;                      /* each operation rounded to float32 */
        float ink = half + scaled;
        x += (k > 0 ? 6 * s : 0) + gap;
        places[k] = (Place){ x, y, ink };
    }
    uint64_t w = x + 6 * s + next_int(&r, 2 * s + 1);
    if (w > (1u << 28) || h * w > (1u << 28)) { free(places); return "image too large for this port"; }

    float *image = calloc((size_t)(h * w), sizeof(float));
    for (uint64_t k = 0; k < length; k++) {
        const unsigned char *rows = FONT[out->target[k] - 1];
        for (uint64_t yy = 0; yy < 7 * s; yy++)
            for (uint64_t xx = 0; xx < 5 * s; xx++)
                if ((rows[yy / s] >> (4 - xx / s)) & 1)
                    image[(places[k].y + yy) * w + places[k].x + xx] = places[k].ink;
    }
    free(places);
    Rng p = { derive(t->seed, 0, i, 0, STREAM_TEXT_PIXELS) };
    for (uint64_t k = 0; k < h * w; k++) {            /* row by row: one next_single per pixel */
        float centred = next_single(&p) - 0.5f;
        float v = t->noise * centred;
        image[k] = image[k] + v;
    }
    out->image = image;
    out->c = 1; out->h = (size_t)h; out->w = (size_t)w;
    out->target_len = (size_t)length;
    out->label = (int32_t)length;                     /* the label is the line's length */
    return NULL;
}

const char *op_textlines(const Json *in, Out *o)
{
    TextLines t;
    const Json *idx = need(in, "indices");
    TRY(textlines_from_json(need(in, "params"), &t));
    out_printf(o, "{\"samples\": [");
    for (size_t k = 0; k < array_len(idx); k++) {
        uint64_t i;
        Sample smp;
        TRY(as_u64(json_at(idx, k), &i));
        TRY(textlines_sample(&t, i, &smp));
        out_printf(o, "%s", k ? ", " : "");
        out_sample(o, i, &smp);
        sample_free(&smp);
    }
    out_printf(o, "], \"vocabulary\": [\"<blank>\"");
    for (uint64_t s = 0; s < t.num_symbols; s++) out_printf(o, ", \"%c\"", GLYPHS[s]);
    out_printf(o, "]}");
    return NULL;
}
