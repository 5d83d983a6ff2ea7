/* A small JSON reader (a tree of values; numbers are kept as their text, so that no
 * 64-bit integer ever passes through a double) and an output buffer with the writers
 * of the vectors' encoding. */
#ifndef JSON_H
#define JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { J_NULL, J_FALSE, J_TRUE, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT } JsonType;

typedef struct Json {
    JsonType type;
    char *text;               /* J_STRING: the decoded string; J_NUMBER: the number as written */
    size_t len;               /* J_ARRAY / J_OBJECT: number of items */
    struct Json *items;       /* J_ARRAY / J_OBJECT: the items */
    char **keys;              /* J_OBJECT: the key of each item */
} Json;

/* The parsed file, or NULL with a message in err (which names the byte offset). */
Json *json_parse_file(const char *path, char *err, size_t err_size);
void json_free(Json *root);
const Json *json_get(const Json *object, const char *key);      /* NULL if absent */
const Json *json_at(const Json *array, size_t i);

/* An integer written as a decimal string or a JSON number, as the vectors do. */
typedef struct {
    int negative, too_big;    /* too_big: |value| >= 2^64 */
    uint64_t magnitude_mod;   /* |value| mod 2^64 */
} Integer;
int json_integer(const Json *v, Integer *out);                    /* 0 if v is not an integer */

/* ---------------------------------------------------------------- output */

typedef struct {
    char *data;
    size_t len, cap;
} Out;

void out_printf(Out *o, const char *fmt, ...);
void out_string(Out *o, const char *s);          /* a JSON string, escaped */
void out_u64(Out *o, uint64_t v);                /* a decimal string: "123" */
void out_f32_bits(Out *o, float f);              /* "0x3f800000" */
void out_f64_bits(Out *o, double d);             /* "0x3ff0000000000000" */
/* {"shape": [...], "sha256": "...", "values_f32": [...]} of a C-order float32 array */
void out_f32_array(Out *o, const float *data, const size_t *shape, size_t ndim);
/* the same, with values_f32 only when `values` (a large array is written by its hash alone) */
void out_f32_array_values(Out *o, const float *data, const size_t *shape, size_t ndim, int values);

#endif
