/* The C port's driver: replays every exported vector file and writes a results file of the
 * same name for `onemodel-cy conformance check`.
 *
 *     port VECTORS_DIR RESULTS_DIR      (RESULTS_DIR is created if it does not exist)
 */
#define _POSIX_C_SOURCE 200809L     /* mkdir */
#include "input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const FILES[] = { "rng.json", "permutation.json", "samplers.json", "collate.json",
                                     "image.json", "synthetic.json", "stream.json", "textlines.json",
                                     "augment.json" };

static const struct { const char *name; Op run; } OPS[] = {
    { "draws", op_draws }, { "sequence", op_sequence }, { "mix", op_mix }, { "derive", op_derive },
    { "table", op_table }, { "points", op_points }, { "sampler", op_sampler },
    { "sampler_error", op_sampler_error }, { "collate", op_collate }, { "gray8", op_planar },
    { "rgb8", op_planar }, { "synthetic", op_synthetic }, { "stream", op_stream },
    { "mixing_pick", op_mixing_pick }, { "stream_iter", op_stream_iter }, { "stream_digest", op_stream_digest },
    { "textlines", op_textlines }, { "augment", op_augment }, { "augment_function", op_augment_function },
};

static Op find_op(const char *name)
{
    for (size_t k = 0; k < sizeof OPS / sizeof *OPS; k++)
        if (!strcmp(OPS[k].name, name)) return OPS[k].run;
    return NULL;
}

/* One case: {"name": ..., "output": ...}, or nothing (and a note) for an op this port lacks. */
static int replay_case(const Json *c, Out *out, int first)
{
    const Json *name = need(c, "name"), *input = need(c, "input");
    current_case = name->text;
    Op run = find_op(need(input, "op")->text);
    if (!run) {
        fprintf(stderr, "case %s: op %s is not implemented by this port\n", name->text, need(input, "op")->text);
        return 0;
    }
    Out o = { 0 };
    const char *refused = run(input, &o);
    out_printf(out, "%s\n{\"name\": ", first ? "" : ",");
    out_string(out, name->text);
    if (refused) {                        /* the input is refused: say why */
        out_printf(out, ", \"output\": {\"error\": ");
        out_string(out, refused);
        out_printf(out, "}}");
    } else {
        out_printf(out, ", \"output\": %.*s}", (int)o.len, o.data);
    }
    free(o.data);
    return 1;
}

static int replay_file(const char *vectors, const char *results, const char *file)
{
    char path[4096], err[4200];
    snprintf(path, sizeof path, "%s/%s", vectors, file);
    Json *doc = json_parse_file(path, err, sizeof err);
    if (!doc) { fprintf(stderr, "%s\n", err); return 1; }
    const Json *cases = need(doc, "cases"), *section = json_get(doc, "section");
    Out out = { 0 };
    out_printf(&out, "{\"section\": ");
    out_string(&out, section && section->type == J_STRING ? section->text : "");
    out_printf(&out, ", \"cases\": [");
    int written = 0;
    for (size_t k = 0; k < array_len(cases); k++)
        written += replay_case(json_at(cases, k), &out, written == 0);
    out_printf(&out, "\n]}\n");
    snprintf(path, sizeof path, "%s/%s", results, file);
    FILE *f = fopen(path, "wb");
    int written_out = f && fwrite(out.data, 1, out.len, f) == out.len;
    if (f && fclose(f)) written_out = 0;
    if (!written_out) fprintf(stderr, "cannot write %s\n", path);
    if (written_out) printf("%s: %d of %zu cases written\n", file, written, array_len(cases));
    free(out.data);
    json_free(doc);
    return written_out ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s VECTORS_DIR RESULTS_DIR\n", argv[0]);
        return 2;
    }
    if (mkdir(argv[2], 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create the results folder %s: %s\n", argv[2], strerror(errno));
        return 2;
    }
    int failed = 0;
    for (size_t k = 0; k < sizeof FILES / sizeof *FILES; k++)
        failed |= replay_file(argv[1], argv[2], FILES[k]);
    return failed;
}
