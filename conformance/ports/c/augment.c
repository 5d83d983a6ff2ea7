/* The text-line augmentations of docs/contract.md ("Text-line augmentations"): the contract's
 * float32 functions, bilinear sampling and 1-D resampling, the thirteen operations and
 * Compose / RandomApply / OneOf. Every float step below is one float32 operation, in the
 * text's order (-ffp-contract=off keeps a*b+c two roundings); no libm transcendental. */
#include "port.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { WIDTH_LIMIT = 1 << 20, MAX_RADIUS = 24 };
static const size_t MAX_PIXELS = (size_t)1 << 28;     /* this port's own memory bound */

static float bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* ------------------------------------------------------------------ the contract's functions */

float aug_sin(float x)                 /* |x| <= pi/4 */
{
    float x2 = x * x, q = bits(0x3638ef1d);                       /* 1/9! */
#ifdef BUG_SIN_SHORT
    q = -bits(0x39500d01);                                         /* the x^9 term left out */
#else
    q = q * x2 - bits(0x39500d01);                                 /* 1/7! */
#endif
    q = q * x2 + bits(0x3c088889);                                 /* 1/5! */
    q = q * x2 - bits(0x3e2aaaab);                                 /* 1/3! */
    q = q * x2 + 1.0f;
    return x * q;
}

float aug_cos(float x)                 /* |x| <= pi/4 */
{
    float x2 = x * x, q = -bits(0x3493f27e);                      /* 1/10! */
    q = q * x2 + bits(0x37d00d01);                                 /* 1/8! */
    q = q * x2 - bits(0x3ab60b61);                                 /* 1/6! */
    q = q * x2 + bits(0x3d2aaaab);                                 /* 1/4! */
    q = q * x2 - bits(0x3f000000);                                 /* 1/2! */
    q = q * x2 + 1.0f;
    return q;
}

float aug_expneg(float t)              /* exp(-t), t >= 0 */
{
#ifndef BUG_EXPNEG_NO_CUTOFF
    if (!(t <= 87.0f)) return 0.0f;                                /* NaN too */
#endif
    static const uint32_t c[] = { 0x3ab60b61, 0x3c088889, 0x3d2aaaab, 0x3e2aaaab, 0x3f000000, 0x3f800000,
                                  0x3f800000 };                    /* 1/6! .. 1/2!, 1, 1 */
    float s = t * bits(0x3b800000), q = bits(0x39500d01);          /* t * 2^-8; 1/7! */
    for (int k = 0; k < 7; k++) q = bits(c[k]) - s * q;
    for (int k = 0; k < 8; k++) q = q * q;
    return q;
}

float aug_normal(Rng *rng)
{
    uint64_t u = next_u64(rng);
    uint64_t n = (u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48);    /* exact */
    float centred = (float)n - 131070.0f;
    return centred * bits(0x37ddb3d7);
}

/* U(lo, hi) = f32(lo + f32(f32(hi - lo) * u)) */
static float uniform(float lo, float hi, Rng *rng)
{
    float u = next_single(rng), span = hi - lo, scaled = span * u;
    return lo + scaled;
}

/* A geometric output width: floor(f32(v + 0.5)) kept to [1, 2^20]. */
static size_t out_width(float v)
{
#ifdef BUG_WIDTH_TRUNCATES
    float r = floorf(v);
#else
    float r = floorf(v + 0.5f);
#endif
    if (!(r >= 1.0f)) return 1;
    if (r >= (float)WIDTH_LIMIT) return WIDTH_LIMIT;
    return (size_t)r;
}

/* ------------------------------------------------------------------ sampling */

static size_t clamp_index(long long i, size_t n)
{
    return i < 0 ? 0 : ((unsigned long long)i >= n ? n - 1 : (size_t)i);
}

/* A coordinate kept to [-2, n + 1]; NaN becomes -2. */
static float keep(float s, size_t n)
{
    float high = (float)(n + 1);
    if (!(s >= -2.0f)) return -2.0f;
    return s > high ? high : s;
}

typedef struct {
    const float *plane;
    size_t h, w;
    int constant;
    float fill;
} Plane;

static float pixel(const Plane *p, long long x, long long y)
{
    if (p->constant && (x < 0 || y < 0 || (unsigned long long)x >= p->w || (unsigned long long)y >= p->h))
        return p->fill;
    return p->plane[clamp_index(y, p->h) * p->w + clamp_index(x, p->w)];
}

static float bilinear(const Plane *p, float sx, float sy)
{
    sx = keep(sx, p->w);
    sy = keep(sy, p->h);
    float x0f = floorf(sx), y0f = floorf(sy), fx = sx - x0f, fy = sy - y0f;
    long long x0 = (long long)x0f, y0 = (long long)y0f;
    float p00 = pixel(p, x0, y0), p01 = pixel(p, x0 + 1, y0), p10 = pixel(p, x0, y0 + 1), p11 = pixel(p, x0 + 1, y0 + 1);
#ifdef BUG_BILINEAR_COLUMNS_FIRST
    float left = p00 + fy * (p10 - p00), right = p01 + fy * (p11 - p01);
    return left + fx * (right - left);
#else
    float top = p00 + fx * (p01 - p00), bottom = p10 + fx * (p11 - p10);
    return top + fy * (bottom - top);
#endif
}

/* 1-D linear resampling of n samples (stride `step`) to m (stride `out_step`); copies when m = n. */
static void resample(const float *v, size_t n, size_t step, float *out, size_t m, size_t out_step)
{
#ifndef BUG_RESAMPLE_NO_COPY
    if (m == n) {
        for (size_t k = 0; k < n; k++) out[k * out_step] = v[k * step];
        return;
    }
#endif
    float scale = (float)n / (float)m;
    for (size_t k = 0; k < m; k++) {
        float s = keep(((float)k + 0.5f) * scale - 0.5f, n), i = floorf(s), f = s - i;
        float a = v[clamp_index((long long)i, n) * step], b = v[clamp_index((long long)i + 1, n) * step];
        out[k * out_step] = a + f * (b - a);
    }
}

/* ------------------------------------------------------------------ operations */

/* A new image of the same channels and the given size, or NULL when it is too large. */
static float *new_pixels(size_t c, size_t h, size_t w)
{
    if (h > MAX_PIXELS / w || c > MAX_PIXELS / (h * w)) return NULL;
    return malloc(c * h * w * sizeof(float));
}

static void replace(Image *img, float *px, size_t h, size_t w)
{
    free(img->px);
    img->px = px;
    img->h = h;
    img->w = w;
}

static const char TOO_LARGE[] = "the augmented image is too large for this port";

/* Rows first (W to ow), then columns (H to oh). */
static const char *resize(Image *img, size_t oh, size_t ow)
{
    size_t c = img->c, h = img->h, w = img->w;
    float *rows = new_pixels(c, h, ow), *out = rows ? new_pixels(c, oh, ow) : NULL;
    if (!out) { free(rows); return TOO_LARGE; }
    for (size_t r = 0; r < c * h; r++) resample(img->px + r * w, w, 1, rows + r * ow, ow, 1);
    for (size_t ch = 0; ch < c; ch++)
        for (size_t x = 0; x < ow; x++)
            resample(rows + ch * h * ow + x, h, ow, out + ch * oh * ow + x, oh, ow);
    free(rows);
    replace(img, out, oh, ow);
    return NULL;
}

static size_t resized_width(size_t h, size_t w, uint64_t height, uint64_t most)
{
    uint64_t q = w / h, r = w % h;          /* (w * height + h div 2) div h, without overflow */
    if (q >= most) return (size_t)most;
    uint64_t width = q * height + (r * height + h / 2) / h;
    return (size_t)(width < 1 ? 1 : (width > most ? most : width));
}

static const char *affine(const AugOp *op, Image *img, Rng *rng)
{
    float a = uniform(-op->f[0], op->f[0], rng), s = uniform(-op->f[1], op->f[1], rng);
    float k = uniform(op->f[2], op->f[3], rng), t = uniform(-op->f[4], op->f[4], rng);
    float theta = a * bits(0x3c8efa35), sn = aug_sin(theta), cs = aug_cos(theta), inv = 1.0f / k;
    float m00 = inv * (cs + s * sn), m01 = inv * (sn - s * cs), m10 = -(inv * sn), m11 = inv * cs;
    size_t h = img->h, w = img->w, ow = out_width((float)w + ceilf(fabsf(s) * (float)h));
    float *out = new_pixels(img->c, h, ow);
    if (!out) return TOO_LARGE;
    for (size_t ch = 0; ch < img->c; ch++) {
        Plane p = { img->px + ch * h * w, h, w, op->constant, op->fill };
        for (size_t y = 0; y < h; y++)
            for (size_t x = 0; x < ow; x++) {
                float dx = ((float)x + 0.5f) - (float)ow * 0.5f, dy = (((float)y + 0.5f) - (float)h * 0.5f) - t;
                float sx = ((m00 * dx + m01 * dy) + (float)w * 0.5f) - 0.5f;
                float sy = ((m10 * dx + m11 * dy) + (float)h * 0.5f) - 0.5f;
                out[(ch * h + y) * ow + x] = bilinear(&p, sx, sy);
            }
    }
    replace(img, out, h, ow);
    return NULL;
}

static const char *perspective(const AugOp *op, Image *img, Rng *rng)
{
    size_t h = img->h, w = img->w;
    float fw = (float)w, fh = (float)h, j = op->f[0] * fh, d[8];
    for (int k = 0; k < 8; k++) d[k] = uniform(-j, j, rng);
    float x0 = 0.0f + d[0], y0 = 0.0f + d[1], x1 = fw + d[2], y1 = 0.0f + d[3];
    float x2 = fw + d[4], y2 = fh + d[5], x3 = 0.0f + d[6], y3 = fh + d[7];
    float sx_ = ((x0 - x1) + x2) - x3, sy_ = ((y0 - y1) + y2) - y3;
    float dx1 = x1 - x2, dx2 = x3 - x2, dy1 = y1 - y2, dy2 = y3 - y2, den = dx1 * dy2 - dx2 * dy1, g = 0.0f, hh = 0.0f;
    if (den != 0.0f) {
        g = (sx_ * dy2 - dx2 * sy_) / den;
        hh = (dx1 * sy_ - sx_ * dy1) / den;
    }
    float a = (x1 - x0) + g * x1, b = (x3 - x0) + hh * x3, c = x0, dd = (y1 - y0) + g * y1, e = (y3 - y0) + hh * y3;
    float f = y0, iw = 1.0f / fw, ih = 1.0f / fh;
    float *out = new_pixels(img->c, h, w);
    if (!out) return TOO_LARGE;
    for (size_t ch = 0; ch < img->c; ch++) {
        Plane p = { img->px + ch * h * w, h, w, op->constant, op->fill };
        for (size_t y = 0; y < h; y++)
            for (size_t x = 0; x < w; x++) {
                float u = ((float)x + 0.5f) * iw, v = ((float)y + 0.5f) * ih, q = (g * u + hh * v) + 1.0f;
                float sx = ((a * u + b * v) + c) / q - 0.5f, sy = ((dd * u + e * v) + f) / q - 0.5f;
                out[(ch * h + y) * w + x] = bilinear(&p, sx, sy);
            }
    }
    replace(img, out, h, w);
    return NULL;
}

static const char *elastic(const AugOp *op, Image *img, Rng *rng)
{
    size_t h = img->h, w = img->w, cell = (size_t)op->ia, nx = w / cell + 2, ny = h / cell + 2;
    float m = uniform(op->f[0], op->f[1], rng), span = m + m;
    float *nodes = new_pixels(2, ny, nx), *out = nodes ? new_pixels(img->c, h, w) : NULL;
    if (!out) { free(nodes); return TOO_LARGE; }
    for (size_t k = 0; k < 2 * nx * ny; k++) {      /* rows of nodes, left to right, dx then dy */
        float scaled = span * next_single(rng);
        nodes[k] = -m + scaled;
    }
    float inv = 1.0f / (float)cell;
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            float tx = ((float)x + 0.5f) * inv, ty = ((float)y + 0.5f) * inv;
            size_t i = (size_t)floorf(tx), jj = (size_t)floorf(ty);
            if (i > nx - 2) i = nx - 2;
            if (jj > ny - 2) jj = ny - 2;
            float fx = tx - (float)i, fy = ty - (float)jj, shift[2];
            for (int axis = 0; axis < 2; axis++) {
                const float *n0 = nodes + 2 * (jj * nx + i) + axis, *n1 = n0 + 2 * nx;
                float top = n0[0] + fx * (n0[2] - n0[0]), bottom = n1[0] + fx * (n1[2] - n1[0]);
                shift[axis] = top + fy * (bottom - top);
            }
            for (size_t ch = 0; ch < img->c; ch++) {
                Plane p = { img->px + ch * h * w, h, w, op->constant, op->fill };
                out[(ch * h + y) * w + x] = bilinear(&p, (float)x + shift[0], (float)y + shift[1]);
            }
        }
    free(nodes);
    replace(img, out, h, w);
    return NULL;
}

/* The minimum (maximum) of a line's samples at clamp(k - (size-1) div 2 + j), j = 0 .. size-1;
 * only a strictly smaller (larger) value replaces the best. */
static void extreme_line(const float *v, size_t n, size_t step, float *out, size_t size, int maximum)
{
    for (size_t k = 0; k < n; k++) {
        long long first = (long long)k - (long long)((size - 1) / 2);
        float best = v[clamp_index(first, n) * step];
        for (size_t j = 1; j < size; j++) {
            float value = v[clamp_index(first + (long long)j, n) * step];
            if (maximum ? value > best : value < best) best = value;
        }
        out[k * step] = best;
    }
}

/* The blur's normalised weights n_0 .. n_r; returns r. */
static size_t blur_weights(float sigma, float *n)
{
#ifdef BUG_BLUR_RADIUS_DOUBLE
    double three = ceil(3.0 * (double)sigma);
#else
    float three = ceilf(3.0f * sigma);
#endif
    size_t r = three > MAX_RADIUS ? MAX_RADIUS : (size_t)three;
    if (r == 0) {
        n[0] = 1.0f;
        return 0;
    }
    float d = (2.0f * sigma) * sigma, total;
    for (size_t k = 0; k <= r; k++) n[k] = aug_expneg((float)(k * k) / d);
    total = n[r];                                      /* k = -r, then -r+1 .. r, left to right */
    for (long long k = -(long long)r + 1; k <= (long long)r; k++) total = total + n[k < 0 ? -k : k];
    for (size_t k = 0; k <= r; k++) n[k] = n[k] / total;
    return r;
}

static void blur_line(const float *v, size_t len, size_t step, float *out, const float *n, size_t r)
{
    for (size_t x = 0; x < len; x++) {
        float acc = 0.0f;
#ifdef BUG_BLUR_SUM_PAIRS
        acc = acc + n[0] * v[x * step];               /* the centre first, then each pair -k, +k */
        for (size_t k = 1; k <= r; k++) {
            acc = acc + n[k] * v[clamp_index((long long)x - (long long)k, len) * step];
            acc = acc + n[k] * v[clamp_index((long long)(x + k), len) * step];
        }
#else
        for (long long k = -(long long)r; k <= (long long)r; k++)
            acc = acc + n[k < 0 ? -k : k] * v[clamp_index((long long)x + k, len) * step];
#endif
        out[x * step] = acc;
    }
}

/* Erode, dilate, blur: rows into a scratch image, then columns into the image. */
static const char *separable(const AugOp *op, Image *img, Rng *rng)
{
    size_t c = img->c, h = img->h, w = img->w, r = 0;
    float n[MAX_RADIUS + 1], *tmp = new_pixels(c, h, w);
    if (!tmp) return TOO_LARGE;
    if (op->kind == A_BLUR) r = blur_weights(uniform(op->f[0], op->f[1], rng), n);
    int maximum = op->kind == A_DILATE;
    for (size_t row = 0; row < c * h; row++) {
        if (op->kind == A_BLUR) blur_line(img->px + row * w, w, 1, tmp + row * w, n, r);
        else extreme_line(img->px + row * w, w, 1, tmp + row * w, (size_t)op->ia, maximum);
    }
    for (size_t ch = 0; ch < c; ch++)
        for (size_t x = 0; x < w; x++) {
            const float *column = tmp + ch * h * w + x;
            if (op->kind == A_BLUR) blur_line(column, h, w, img->px + ch * h * w + x, n, r);
            else extreme_line(column, h, w, img->px + ch * h * w + x, (size_t)op->ib, maximum);
        }
    free(tmp);
    return NULL;
}

/* In place, pixels in C, H, W order. */
static void photometric(const AugOp *op, Image *img, Rng *rng)
{
    size_t count = img->c * img->h * img->w;
    float *px = img->px;
    if (op->kind == A_INVERT) {
        float total = op->f[0] + op->f[1];
        for (size_t i = 0; i < count; i++) px[i] = total - px[i];
        return;
    }
    float a = uniform(op->f[0], op->f[1], rng);
    if (op->kind == A_BRIGHTNESS_CONTRAST) {
        float o = uniform(op->f[2], op->f[3], rng);
        for (size_t i = 0; i < count; i++) px[i] = px[i] * a + o;
    } else if (op->kind == A_GAUSSIAN_NOISE) {
        for (size_t i = 0; i < count; i++) px[i] = px[i] + a * aug_normal(rng);
    } else if (op->kind == A_SPECKLE_NOISE) {
        for (size_t i = 0; i < count; i++) {
            float noise = a * aug_normal(rng);
            px[i] = px[i] + px[i] * noise;
        }
    } else {                                            /* A_IMPULSE_NOISE */
        float half = a * 0.5f;
        for (size_t i = 0; i < count; i++) {
            float u = next_single(rng);
            px[i] = u < half ? op->f[2] : (u < a ? op->f[3] : px[i]);
        }
    }
}

/* ------------------------------------------------------------------ composition */

const char *aug_apply(const AugOp *op, Image *img, Rng *rng)
{
    const char *why = NULL;
    switch (op->kind) {
    case A_COMPOSE:
        for (size_t k = 0; k < op->n_children && !why; k++) why = aug_apply(&op->children[k], img, rng);
        return why;
    case A_RANDOM_APPLY: {
        float u = next_single(rng);
#ifdef BUG_RANDOM_APPLY_LE
        return u <= op->p ? aug_apply(op->children, img, rng) : NULL;
#else
        return u < op->p ? aug_apply(op->children, img, rng) : NULL;
#endif
    }
    case A_ONE_OF: {
        double u = next_double(rng);
        size_t k = 0;
#ifdef BUG_ONE_OF_GE
        while (k + 1 < op->n_children && !(op->bounds[k] >= u)) k++;
#else
        while (k + 1 < op->n_children && !(op->bounds[k] > u)) k++;    /* D10: else the last */
#endif
        return aug_apply(&op->children[k], img, rng);
    }
    case A_RESIZE_HEIGHT:
        return resize(img, (size_t)op->ia, resized_width(img->h, img->w, op->ia, op->ib));
    case A_STRETCH:
        return resize(img, img->h, out_width((float)img->w * uniform(op->f[0], op->f[1], rng)));
    case A_AFFINE:
        return affine(op, img, rng);
    case A_PERSPECTIVE:
        return perspective(op, img, rng);
    case A_ELASTIC:
        return elastic(op, img, rng);
    case A_ERODE: case A_DILATE: case A_BLUR:
        return separable(op, img, rng);
    default:
        photometric(op, img, rng);
        return NULL;
    }
}

void aug_free(AugOp *op)
{
    for (size_t k = 0; k < op->n_children; k++) aug_free(&op->children[k]);
    free(op->children);
    free(op->bounds);
    memset(op, 0, sizeof *op);
}
