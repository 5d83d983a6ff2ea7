/* The JSON reader and the output writers declared in json.h. The reader accepts RFC 8259
 * JSON; it is only ever given the exported vector files, so it stops at the first error. */
#include "json.h"
#include "port.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s, *end;
    const char *error;
} Parser;

static void *xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return q;
}

static void skip_space(Parser *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t'))
        p->s++;
}

static int parse_value(Parser *p, Json *v, int depth);

/* UTF-8 bytes of one code point */
static size_t utf8(unsigned cp, char *buf)
{
    if (cp < 0x80) { buf[0] = (char)cp; return 1; }
    if (cp < 0x800) { buf[0] = (char)(0xC0 | cp >> 6); buf[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        buf[0] = (char)(0xE0 | cp >> 12); buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    buf[0] = (char)(0xF0 | cp >> 18); buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

static int hex4(Parser *p, unsigned *cp)
{
    *cp = 0;
    for (int k = 0; k < 4; k++, p->s++) {
        char c = p->s < p->end ? *p->s : 0;
        unsigned d = (c >= '0' && c <= '9') ? (unsigned)(c - '0') : (c >= 'a' && c <= 'f') ? (unsigned)(c - 'a' + 10)
                   : (c >= 'A' && c <= 'F') ? (unsigned)(c - 'A' + 10) : 16u;
        if (d == 16) { p->error = "bad \\u escape"; return 0; }
        *cp = *cp * 16 + d;
    }
    return 1;
}

/* One escape after the backslash, appended to buf as UTF-8. */
static int parse_escape(Parser *p, char *buf, size_t *n)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *hit = (p->s < p->end) ? strchr(from, *p->s) : NULL;
    if (hit && *p->s) { buf[(*n)++] = to[hit - from]; p->s++; return 1; }
    if (p->s >= p->end || *p->s != 'u') { p->error = "bad escape"; return 0; }
    p->s++;
    unsigned cp, low;
    if (!hex4(p, &cp)) return 0;
    if (cp >= 0xD800 && cp < 0xDC00) {     /* a surrogate pair */
        if (p->end - p->s < 2 || p->s[0] != '\\' || p->s[1] != 'u') { p->error = "lone surrogate"; return 0; }
        p->s += 2;
        if (!hex4(p, &low)) return 0;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    *n += utf8(cp, buf + *n);
    return 1;
}

static int parse_string(Parser *p, char **out)
{
    p->s++;                                    /* the opening quote */
    size_t cap = 16, n = 0;
    char *buf = xrealloc(NULL, cap);
    while (p->s < p->end && *p->s != '"') {
        if (n + 5 > cap) buf = xrealloc(buf, cap *= 2);
        if (*p->s == '\\') {
            p->s++;
            if (!parse_escape(p, buf, &n)) { free(buf); return 0; }
        } else if ((unsigned char)*p->s < 0x20) {
            p->error = "control character in a string"; free(buf); return 0;
        } else {
            buf[n++] = *p->s++;
        }
    }
    if (p->s >= p->end) { p->error = "unterminated string"; free(buf); return 0; }
    p->s++;
    buf[n] = 0;
    *out = buf;
    return 1;
}

static int parse_number(Parser *p, Json *v)
{
    const char *start = p->s;
    if (p->s < p->end && *p->s == '-') p->s++;
    while (p->s < p->end && strchr("0123456789.eE+-", *p->s)) p->s++;
    if (p->s == start) { p->error = "unexpected character"; return 0; }
    v->type = J_NUMBER;
    v->len = (size_t)(p->s - start);
    v->text = xrealloc(NULL, v->len + 1);
    memcpy(v->text, start, v->len);
    v->text[v->len] = 0;
    return 1;
}

/* An array (object = 0) or an object (object = 1): items, with keys for an object. */
static int parse_container(Parser *p, Json *v, int object, int depth)
{
    char close = object ? '}' : ']';
    size_t cap = 0;
    v->type = object ? J_OBJECT : J_ARRAY;
    p->s++;
    skip_space(p);
    if (p->s < p->end && *p->s == close) { p->s++; return 1; }
    for (;;) {
        if (v->len == cap) {
            cap = cap ? cap * 2 : 4;
            v->items = xrealloc(v->items, cap * sizeof *v->items);
            if (object) v->keys = xrealloc(v->keys, cap * sizeof *v->keys);
        }
        skip_space(p);
        if (object) {
            if (p->s >= p->end || *p->s != '"') { p->error = "expected a key"; return 0; }
            if (!parse_string(p, &v->keys[v->len])) return 0;
            skip_space(p);
            if (p->s >= p->end || *p->s != ':') { p->error = "expected ':'"; return 0; }
            p->s++;
        }
        if (!parse_value(p, &v->items[v->len], depth + 1)) return 0;
        v->len++;
        skip_space(p);
        if (p->s < p->end && *p->s == ',') { p->s++; continue; }
        if (p->s < p->end && *p->s == close) { p->s++; return 1; }
        p->error = object ? "expected ',' or '}'" : "expected ',' or ']'";
        return 0;
    }
}

static int literal(Parser *p, const char *word, JsonType type, Json *v)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n)) { p->error = "unexpected character"; return 0; }
    p->s += n;
    v->type = type;
    return 1;
}

static int parse_value(Parser *p, Json *v, int depth)
{
    memset(v, 0, sizeof *v);
    if (depth > 64) { p->error = "nested too deeply"; return 0; }
    skip_space(p);
    if (p->s >= p->end) { p->error = "unexpected end"; return 0; }
    switch (*p->s) {
    case '{': return parse_container(p, v, 1, depth);
    case '[': return parse_container(p, v, 0, depth);
    case '"': v->type = J_STRING; return parse_string(p, &v->text);
    case 't': return literal(p, "true", J_TRUE, v);
    case 'f': return literal(p, "false", J_FALSE, v);
    case 'n': return literal(p, "null", J_NULL, v);
    default: return parse_number(p, v);
    }
}

static void free_items(Json *v)
{
    size_t items = v->type == J_ARRAY || v->type == J_OBJECT ? v->len : 0;     /* a string's len is its length */
    for (size_t i = 0; i < items; i++) {
        free_items(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->text);
}

void json_free(Json *root)
{
    if (!root) return;
    free_items(root);
    free(root);
}

/* The whole file is read and parsed; json_free releases the tree. */
Json *json_parse_file(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, err_size, "cannot open %s", path); return NULL; }
    size_t cap = 1 << 16, n = 0, got;
    char *text = xrealloc(NULL, cap);
    while ((got = fread(text + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap) text = xrealloc(text, cap *= 2);
    fclose(f);
    Parser p = { text, text + n, NULL };
    Json *root = xrealloc(NULL, sizeof *root);
    if (parse_value(&p, root, 0)) {
        skip_space(&p);
        if (p.s != p.end) p.error = "trailing characters";
    }
    if (p.error) snprintf(err, err_size, "%s: %s at byte %ld", path, p.error, (long)(p.s - text));
    free(text);              /* the tree holds copies of its strings */
    if (p.error) {
        json_free(root);
        return NULL;
    }
    return root;
}

const Json *json_get(const Json *object, const char *key)
{
    if (!object || object->type != J_OBJECT) return NULL;
    for (size_t i = 0; i < object->len; i++)
        if (!strcmp(object->keys[i], key)) return &object->items[i];
    return NULL;
}

const Json *json_at(const Json *array, size_t i)
{
    return (array && array->type == J_ARRAY && i < array->len) ? &array->items[i] : NULL;
}

/* Decimal digits with an optional '-', from a string or a number; any size is accepted,
 * reduced mod 2^64, and flagged when it does not fit in 64 bits. */
int json_integer(const Json *v, Integer *out)
{
    if (!v || (v->type != J_STRING && v->type != J_NUMBER)) return 0;
    const char *s = v->text;
    memset(out, 0, sizeof *out);
    if (*s == '-') { out->negative = 1; s++; }
    if (!*s) return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        uint64_t digit = (uint64_t)(*s - '0'), m = out->magnitude_mod;
        if (m > (UINT64_MAX - digit) / 10) out->too_big = 1;
        out->magnitude_mod = m * 10 + digit;
    }
    return 1;
}

/* ---------------------------------------------------------------- output */

static void out_reserve(Out *o, size_t extra)
{
    if (o->len + extra + 1 > o->cap) {
        while (o->len + extra + 1 > o->cap) o->cap = o->cap ? o->cap * 2 : 4096;
        o->data = xrealloc(o->data, o->cap);
    }
}

void out_printf(Out *o, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(NULL, 0, fmt, args);
    va_end(args);
    out_reserve(o, (size_t)n);
    va_start(args, fmt);
    vsnprintf(o->data + o->len, (size_t)n + 1, fmt, args);
    va_end(args);
    o->len += (size_t)n;
}

void out_string(Out *o, const char *s)
{
    out_printf(o, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') out_printf(o, "\\%c", c);
        else if (c < 0x20) out_printf(o, "\\u%04x", c);
        else out_printf(o, "%c", c);
    }
    out_printf(o, "\"");
}

void out_u64(Out *o, uint64_t v)
{
    out_printf(o, "\"%llu\"", (unsigned long long)v);
}

void out_f32_bits(Out *o, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    out_printf(o, "\"0x%08lx\"", (unsigned long)bits);
}

void out_f64_bits(Out *o, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    out_printf(o, "\"0x%016llx\"", (unsigned long long)bits);
}

void out_f32_array(Out *o, const float *data, const size_t *shape, size_t ndim)
{
    out_f32_array_values(o, data, shape, ndim, 1);
}

void out_f32_array_values(Out *o, const float *data, const size_t *shape, size_t ndim, int values)
{
    size_t count = 1;
    out_printf(o, "{\"shape\": [");
    for (size_t k = 0; k < ndim; k++) {
        out_printf(o, "%s%zu", k ? ", " : "", shape[k]);
        count *= shape[k];
    }
    /* the digest covers the little-endian bytes whatever the host's byte order */
    unsigned char *bytes = xrealloc(NULL, count * 4);
    for (size_t i = 0; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, &data[i], sizeof bits);
        for (int b = 0; b < 4; b++) bytes[4 * i + b] = (unsigned char)(bits >> (8 * b));
    }
    char hex[65];
    sha256_hex(bytes, count * 4, hex);
    free(bytes);
    out_printf(o, "], \"sha256\": \"%s\"", hex);
    if (!values) {
        out_printf(o, "}");
        return;
    }
    out_printf(o, ", \"values_f32\": [");
    for (size_t i = 0; i < count; i++) {
        if (i) out_printf(o, ", ");
        out_f32_bits(o, data[i]);
    }
    out_printf(o, "]}");
}
