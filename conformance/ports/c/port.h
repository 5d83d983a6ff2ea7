/* A port of the OneModel data stream, written from the data-loading text (§1-§4, §6)
 * and the project's readings D1-D17 (docs/contract.md), not from the package's source.
 *
 * Every function here is a plain C99 function on plain values. Arithmetic on uint64_t
 * wraps mod 2^64 as the text requires; float is IEEE-754 binary32 and every float
 * operation is one rounded operation (build with -ffp-contract=off so that the compiler
 * never fuses a multiply and an add).
 *
 * The deliberate bugs used by the mutation tests are listed in mutations.h.
 */
#ifndef PORT_H
#define PORT_H

#include <stddef.h>
#include <stdint.h>

#include "mutations.h"

/* ------------------------------------------------------------------ §2 random numbers */

typedef struct { uint64_t state; } Rng;        /* D2: the state is stored as given */

uint64_t mix(uint64_t x);                        /* D1 */
uint64_t derive(uint64_t seed, uint64_t epoch, uint64_t step, uint64_t slot, uint64_t stream);
uint64_t next_u64(Rng *rng);
float next_single(Rng *rng);
double next_double(Rng *rng);
uint64_t next_int(Rng *rng, uint64_t n);        /* D4: the caller checks 1 <= n */
float next_normal(Rng *rng);                     /* D5 */

/* the streams of §2 and docs/contract.md */
enum { STREAM_TRANSFORM = 0, STREAM_AUGMENT = 1, STREAM_SYNTH_LABEL = 2, STREAM_SYNTH_PIXELS = 3,
       STREAM_SHUFFLE = 101, STREAM_MIXING = 102, STREAM_BUCKET_ORDER = 103, STREAM_BUCKET_PLACE = 104 };

/* ------------------------------------------------------------------ §3 permutation */

/* Position p of the keyed permutation of [0, n). n <= 1 gives 0; otherwise the caller
 * checks p < n (D6). */
uint64_t keyed_permutation(uint64_t p, uint64_t n, uint64_t key);

/* ------------------------------------------------------------------ §3 samplers */

enum SamplerKind { SEQUENTIAL, SHUFFLED, MIXING, BUCKETED };

typedef struct {
    uint64_t start, size;
    double share;
} Source;

typedef struct {
    enum SamplerKind kind;
    uint64_t n, batch_size, seed, steps_per_epoch;
    int drop_last;
    /* mixing: the sources and the cumulative bound of each (only eligible ones are used) */
    Source *sources;
    double *cumulative;
    size_t n_sources;
    /* bucketed */
    uint64_t *lengths, pool_batches;
    uint64_t *plan;          /* the epoch's batches, S*B indices, step-major */
    uint64_t plan_epoch;
    int plan_valid;
} Sampler;

/* Each returns NULL on success, or a static message saying why the input is refused. */
const char *sampler_check(Sampler *s);
void sampler_free(Sampler *s);
const char *sampler_indices(Sampler *s, uint64_t epoch, uint64_t step, uint64_t *out, size_t *count);
/* D10: the source (an index into s->sources) that a draw u picks. */
size_t mixing_pick(const Sampler *s, double u);
/* The index of slot j of (epoch, step) of a mixing sampler, and the source it came from. */
uint64_t mixing_slot(const Sampler *s, uint64_t epoch, uint64_t step, uint64_t j, size_t *source);

/* ------------------------------------------------------------------ §4 samples and collation */

typedef struct {
    size_t c, h, w;
    float *image;            /* planar [c, h, w] */
    int32_t *target;
    size_t target_len;
    int32_t label;
} Sample;

enum AugmentKind { AUG_NONE, AUG_GAIN_OFFSET, AUG_GAUSSIAN_NOISE };

typedef struct {
    enum AugmentKind kind;
    float gain, offset, sigma;     /* rounded to float32 when built (docs/contract.md) */
} Augment;

Augment make_gain_offset(double gain, double offset);
Augment make_gaussian_noise(double sigma);
void augment_apply(const Augment *aug, float *pixels, size_t count, Rng *rng);

typedef struct {
    size_t b, c, h, wp;
    float *images;           /* [b, c, h, wp] */
    int32_t *widths, *target_lengths, *labels, *indices, *targets;
    size_t targets_len;
} Batch;

typedef struct {
    uint64_t width_multiple;
    float pad_value;
    Augment augment;
} Collator;

float pad_value_f32(double pad);
const char *collate(const Collator *col, const Sample *samples, const int64_t *indices, size_t count,
                    uint64_t seed, uint64_t epoch, uint64_t step, uint64_t first_slot, Batch *out);
void batch_free(Batch *b);

/* ------------------------------------------------------------------ the synthetic dataset */

typedef struct {
    uint64_t count, height, min_width, max_width, channels, seed;
    int fails;               /* the vectors' failing dataset: get_sample(fails_at) raises */
    uint64_t fails_at;
} Synthetic;

/* What synthetic_sample returns for the failing index: a dataset error (§1: delivered at
 * its step, then the stream ends), not a refused input. */
extern const char DATASET_FAILURE[];

const char *synthetic_check(const Synthetic *d);
const char *synthetic_sample(const Synthetic *d, uint64_t i, Sample *out);
void sample_free(Sample *s);

/* ------------------------------------------------------------------ §6 image helpers */

/* D15: the float32 constants of one channel. */
void planar_constants(double mean, double std, float *scale, float *bias);
/* §6, D16: channels 1 (gray8) or 3 (rgb8, interleaved) into planar [channels, h, w]. */
const char *u8_to_planar(const uint8_t *src, size_t src_len, size_t channels, size_t height, size_t width,
                         size_t stride, const double *mean, const double *std, float *out);

/* ------------------------------------------------------------------ text-line augmentations */

/* docs/contract.md, "Text-line augmentations": a float32 image [c, h, w] (every dimension at
 * least 1) and the operations that draw from one Rng. */
typedef struct {
    size_t c, h, w;
    float *px;               /* planar [c, h, w]; malloc'd, replaced by an operation that reshapes */
} Image;

enum AugKind { A_COMPOSE, A_RANDOM_APPLY, A_ONE_OF, A_RESIZE_HEIGHT, A_STRETCH, A_AFFINE, A_PERSPECTIVE,
               A_ELASTIC, A_ERODE, A_DILATE, A_BLUR, A_BRIGHTNESS_CONTRAST, A_GAUSSIAN_NOISE, A_SPECKLE_NOISE,
               A_IMPULSE_NOISE, A_INVERT };

/* One operation with its arguments rounded to float32 (OneOf's weights stay float64). */
typedef struct AugOp {
    enum AugKind kind;
    struct AugOp *children;  /* compose, one_of: the operations; random_apply: the one operation */
    size_t n_children;
    double *bounds;          /* one_of: D10's cumulative bound of each child */
    float p;                 /* random_apply */
    float f[6];              /* the float arguments in constructor order, a range as two */
    int constant;            /* the border: 1 constant (outside pixels are `fill`), 0 replicate */
    float fill;
    uint64_t ia, ib;         /* resize_height: height, max width; elastic: cell; erode/dilate: kw, kh */
} AugOp;

/* The contract's functions. */
float aug_sin(float x);
float aug_cos(float x);
float aug_expneg(float t);
float aug_normal(Rng *rng);

/* Runs `op` on `img` (its pixels may be replaced), drawing from `rng`; NULL, or why it
 * could not (an image too large for this port). */
const char *aug_apply(const AugOp *op, Image *img, Rng *rng);
void aug_free(AugOp *op);   /* frees what op holds, not op itself */

/* ------------------------------------------------------------------ SHA-256 of the float arrays */

void sha256(const void *data, size_t len, unsigned char digest[32]);
void sha256_hex(const void *data, size_t len, char hex[65]);

#endif
