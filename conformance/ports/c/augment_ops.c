/* The vectors' augment and augment_function ops, and reading a transform spec (the vectors'
 * README: a tree of {"kind": ...} objects) into an AugOp, with the bounds docs/contract.md
 * gives under "Arguments": a value out of them is refused when the operation is built. */
#include "input.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { const char *why_ = (expr); if (why_) return why_; } while (0)

enum { WIDTH_LIMIT = 1 << 20, HEIGHT_LIMIT = 1 << 16, VALUES_LIMIT = 1 << 16 };

/* A float64 argument rounded to float32, finite and in [lo, hi] once rounded. */
static const char *real(const Json *v, float lo, float hi, float *out)
{
    float f = (float)as_f64(v);
    if (!isfinite(f) || f < lo || f > hi) return "a float argument out of its bounds (or not finite in float32)";
    *out = f;
    return NULL;
}

static const char *range(const Json *v, float lo, float hi, float *out)
{
    if (array_len(v) != 2) return "a range is a pair";
    TRY(real(json_at(v, 0), lo, hi, &out[0]));
    TRY(real(json_at(v, 1), lo, hi, &out[1]));
    return out[0] <= out[1] ? NULL : "a range needs low <= high";
}

static const char *integer(const Json *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    TRY(as_u64(v, out));
    return *out >= lo && *out <= hi ? NULL : "an integer argument out of its bounds";
}

static const char *border(const Json *spec, AugOp *op)
{
    const char *name = need(spec, "border")->text;
    if (!name || (strcmp(name, "replicate") && strcmp(name, "constant"))) return "border must be replicate or constant";
    op->constant = !strcmp(name, "constant");
    return real(need(spec, "fill"), -INFINITY, INFINITY, &op->fill);
}

static const char *build(const Json *spec, AugOp *op);

static const char *children(const Json *list, AugOp *op)
{
    op->children = calloc(array_len(list) + 1, sizeof *op->children);
    for (size_t k = 0; k < array_len(list); k++) {
        op->n_children = k + 1;                         /* counted before it is built: freed on error */
        TRY(build(json_at(list, k), &op->children[k]));
    }
    return NULL;
}

/* D10: the cumulative bounds of float64 weights, left to right. */
static const char *one_of(const Json *spec, AugOp *op)
{
    const Json *weights = need(spec, "weights");
    TRY(children(need(spec, "ops"), op));
    if (op->n_children == 0) return "OneOf needs at least one operation";
    if (array_len(weights) != op->n_children) return "OneOf needs one weight per operation";
    op->bounds = calloc(op->n_children, sizeof *op->bounds);
    double total = 0.0, bound = 0.0;
    for (size_t k = 0; k < op->n_children; k++) {
        double w = as_f64(json_at(weights, k));
#ifdef BUG_ONE_OF_WEIGHTS_F32
        w = (double)(float)w;                           /* rounded like every other float argument */
#endif
        if (!isfinite(w) || !(w > 0.0)) return "a weight must be finite and > 0";
        op->bounds[k] = w;
        total += w;
    }
    for (size_t k = 0; k < op->n_children; k++) {
        bound += op->bounds[k] / total;
        op->bounds[k] = bound;
    }
    return NULL;
}

static const char *window(const Json *spec, AugOp *op)
{
    const Json *size = need(spec, "size");
    if (array_len(size) != 2) return "size is [width, height]";
    TRY(integer(json_at(size, 0), 1, 31, &op->ia));
    return integer(json_at(size, 1), 1, 31, &op->ib);
}

static const char *build(const Json *spec, AugOp *op)
{
    static const struct { const char *name; enum AugKind kind; } KINDS[] = {
        { "compose", A_COMPOSE }, { "random_apply", A_RANDOM_APPLY }, { "one_of", A_ONE_OF },
        { "resize_height", A_RESIZE_HEIGHT }, { "stretch", A_STRETCH }, { "affine", A_AFFINE },
        { "perspective", A_PERSPECTIVE }, { "elastic", A_ELASTIC }, { "erode", A_ERODE }, { "dilate", A_DILATE },
        { "gaussian_blur", A_BLUR }, { "brightness_contrast", A_BRIGHTNESS_CONTRAST },
        { "gaussian_noise", A_GAUSSIAN_NOISE }, { "speckle_noise", A_SPECKLE_NOISE },
        { "impulse_noise", A_IMPULSE_NOISE }, { "invert", A_INVERT },
    };
    const char *name = need(spec, "kind")->text;
    size_t k = 0;
    while (k < sizeof KINDS / sizeof *KINDS && strcmp(KINDS[k].name, name ? name : "")) k++;
    if (k == sizeof KINDS / sizeof *KINDS) return "an unknown augmentation kind";
    op->kind = KINDS[k].kind;
    switch (op->kind) {
    case A_COMPOSE:
        return children(need(spec, "ops"), op);
    case A_RANDOM_APPLY:
        op->children = calloc(1, sizeof *op->children);
        op->n_children = 1;
        TRY(build(need(spec, "op"), op->children));
        return real(need(spec, "p"), 0.0f, 1.0f, &op->p);
    case A_ONE_OF:
        return one_of(spec, op);
    case A_RESIZE_HEIGHT: {
        const Json *most = need(spec, "max_width");
        TRY(integer(need(spec, "height"), 1, HEIGHT_LIMIT, &op->ia));
        op->ib = WIDTH_LIMIT;
        return most->type == J_NULL ? NULL : integer(most, 1, WIDTH_LIMIT, &op->ib);
    }
    case A_STRETCH:
        return range(need(spec, "scale"), 1.0f / 64, 64.0f, op->f);
    case A_AFFINE:
        TRY(real(need(spec, "rotate"), 0.0f, 45.0f, &op->f[0]));
        TRY(real(need(spec, "shear"), 0.0f, 1.0f, &op->f[1]));
        TRY(range(need(spec, "scale"), 1.0f / 16, 16.0f, &op->f[2]));
        TRY(real(need(spec, "shift"), 0.0f, 4096.0f, &op->f[4]));
        return border(spec, op);
    case A_PERSPECTIVE:
        TRY(real(need(spec, "jitter"), 0.0f, 0.5f, &op->f[0]));
        return border(spec, op);
    case A_ELASTIC:
        TRY(range(need(spec, "magnitude"), 0.0f, 64.0f, op->f));
        TRY(integer(need(spec, "cell"), 1, 4096, &op->ia));
        return border(spec, op);
    case A_ERODE: case A_DILATE:
        return window(spec, op);
    case A_BLUR:
        return range(need(spec, "sigma"), 0.0f, 8.0f, op->f);
    case A_BRIGHTNESS_CONTRAST:
        TRY(range(need(spec, "gain"), 0.0f, 1e6f, op->f));
        return range(need(spec, "offset"), -1e6f, 1e6f, &op->f[2]);
    case A_GAUSSIAN_NOISE: case A_SPECKLE_NOISE:
        return range(need(spec, "sigma"), 0.0f, 1e6f, op->f);
    case A_IMPULSE_NOISE:
        TRY(range(need(spec, "amount"), 0.0f, 1.0f, op->f));
        TRY(real(need(spec, "low"), -INFINITY, INFINITY, &op->f[2]));
        return real(need(spec, "high"), -INFINITY, INFINITY, &op->f[3]);
    case A_INVERT: {
        TRY(real(need(spec, "low"), -INFINITY, INFINITY, &op->f[0]));
        TRY(real(need(spec, "high"), -INFINITY, INFINITY, &op->f[1]));
        float total = op->f[0] + op->f[1];
        return isfinite(total) ? NULL : "Invert's low + high must be finite in float32";
    }
    }
    return NULL;
}

const char *aug_from_json(const Json *spec, AugOp *op)
{
    memset(op, 0, sizeof *op);
    const char *why = build(spec, op);
    if (why) aug_free(op);
    return why;
}

/* An input image: {"shape", "values_f32"}, or {"shape", "singles_state"} whose pixels are the
 * next_single() draws of that state in C order. */
static const char *image_from_json(const Json *spec, Image *img)
{
    const Json *shape = need(spec, "shape"), *values = json_get(spec, "values_f32");
    uint64_t d[3];
    if (array_len(shape) != 3) return "an image is [C, H, W]";
    for (size_t k = 0; k < 3; k++) {
        TRY(as_u64(json_at(shape, k), &d[k]));
        if (d[k] < 1 || d[k] > (1u << 28)) return "every dimension of an image must lie in [1, 2^28]";
    }
    if (d[1] * d[2] > (1u << 28) || d[0] * d[1] * d[2] > (1u << 28)) return "the image is too large for this port";
    size_t count = (size_t)(d[0] * d[1] * d[2]);
    img->c = (size_t)d[0]; img->h = (size_t)d[1]; img->w = (size_t)d[2];
    if (values && array_len(values) != count) return "values_f32 does not match the shape";
    img->px = malloc(count * sizeof(float));
    Rng rng = { values ? 0 : as_mod64(need(spec, "singles_state")) };
    for (size_t i = 0; i < count; i++) {
        if (values) {
            uint32_t bits = (uint32_t)strtoul(json_at(values, i)->text + 2, NULL, 16);
            memcpy(&img->px[i], &bits, sizeof bits);
        } else {
            img->px[i] = next_single(&rng);
        }
    }
    return NULL;
}

const char *op_augment(const Json *in, Out *o)
{
    AugOp op;
    Image img = { 0, 0, 0, NULL };
    TRY(aug_from_json(need(in, "transform"), &op));
    Rng rng = { as_mod64(need(in, "state")) };
    const char *why = image_from_json(need(in, "image"), &img);
    if (!why) why = aug_apply(&op, &img, &rng);
    if (!why) {
        size_t shape[3] = { img.c, img.h, img.w };
        out_printf(o, "{\"image\": ");
        out_f32_array_values(o, img.px, shape, 3, img.c * img.h * img.w <= VALUES_LIMIT);
        out_printf(o, ", \"state_after\": ");
        out_u64(o, rng.state);
        out_printf(o, "}");
    }
    aug_free(&op);
    free(img.px);
    return why;
}

const char *op_augment_function(const Json *in, Out *o)
{
    const char *name = need(in, "function")->text;
    if (!strcmp(name, "normal")) {
        Rng rng = { as_mod64(need(in, "state")) };
        uint64_t count;
        TRY(as_u64(need(in, "count"), &count));
        out_printf(o, "{\"values\": [");
        for (uint64_t k = 0; k < count; k++) {
            out_printf(o, k ? ", " : "");
            out_f32_bits(o, aug_normal(&rng));
        }
        out_printf(o, "], \"state_after\": ");
        out_u64(o, rng.state);
        out_printf(o, "}");
        return NULL;
    }
    float (*function)(float) = !strcmp(name, "sin") ? aug_sin : !strcmp(name, "cos") ? aug_cos
                             : !strcmp(name, "expneg") ? aug_expneg : NULL;
    if (!function) return "an unknown function";
    const Json *x = need(in, "x");
    out_printf(o, "{\"values\": [");
    for (size_t k = 0; k < array_len(x); k++) {
        uint32_t bits = (uint32_t)strtoul(json_at(x, k)->text + 2, NULL, 16);
        float v;
        memcpy(&v, &bits, sizeof v);
        out_printf(o, k ? ", " : "");
        out_f32_bits(o, function(v));
    }
    out_printf(o, "]}");
    return NULL;
}
