/* Reading the vectors' inputs (README of the vectors: "Encodings") and writing outputs. */
#ifndef INPUT_H
#define INPUT_H

#include "json.h"
#include "port.h"

/* The case being replayed, named in every message about a malformed vector. */
extern const char *current_case;

const Json *need(const Json *object, const char *key);          /* exits if the key is absent */
size_t array_len(const Json *v);                                 /* exits if v is not an array */
/* D3: seeds, rng states, keys and Derive's arguments are reduced mod 2^64. */
uint64_t as_mod64(const Json *v);
/* A count, size, position, epoch or step: refused when negative or >= 2^64. */
const char *as_u64(const Json *v, uint64_t *out);
double as_f64(const Json *v);                                    /* "0x" + 16 hex digits of the bits */
int as_bool(const Json *v);

const char *sampler_from_json(const Json *spec, Sampler *s);     /* built and checked */
const char *sources_from_json(const Json *list, Sampler *s);     /* a mixing sampler's sources */
const char *synthetic_from_json(const Json *spec, Synthetic *d);
const char *augment_from_json(const Json *spec, Augment *a);     /* null gives AUG_NONE */
const char *collator_from_json(const Json *spec, Collator *c);   /* width_multiple, pad_value, augmentation */

void out_sample(Out *o, uint64_t i, const Sample *s);               /* {"i", "image", "label", "target", "width"} */
void out_batch_fields(Out *o, const Batch *b);                   /* "images": ..., ..., "indices": [...] */

/* The ops, each writing one case's output object or returning why the input is refused. */
typedef const char *(*Op)(const Json *input, Out *o);
const char *op_draws(const Json *in, Out *o);
const char *op_sequence(const Json *in, Out *o);
const char *op_mix(const Json *in, Out *o);
const char *op_derive(const Json *in, Out *o);
const char *op_table(const Json *in, Out *o);
const char *op_points(const Json *in, Out *o);
const char *op_sampler(const Json *in, Out *o);
const char *op_sampler_error(const Json *in, Out *o);
const char *op_mixing_pick(const Json *in, Out *o);
const char *op_collate(const Json *in, Out *o);
const char *op_planar(const Json *in, Out *o);
const char *op_synthetic(const Json *in, Out *o);
const char *op_stream(const Json *in, Out *o);
const char *op_stream_iter(const Json *in, Out *o);
const char *op_stream_digest(const Json *in, Out *o);
const char *op_textlines(const Json *in, Out *o);
const char *op_augment(const Json *in, Out *o);
const char *op_augment_function(const Json *in, Out *o);

/* A transform spec (the vectors' README) built and checked; a refused one holds nothing. */
const char *aug_from_json(const Json *spec, AugOp *op);

#endif
