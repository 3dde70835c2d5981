/* quality.h: the quality-under-the-bound experiments of `mt-probe quality`.
 *
 * Runs the C decoder (token adapter) of a byte-level model over a text
 * stream under one KV policy and prints perplexity by position bucket, and
 * the repetition and distinct-n of free generation from a prompt. See
 * mt-probe(1), section QUALITY, and bench/RESULTS.md. The command line is
 * read in src/cmd/quality_cmd.c.
 */
#ifndef MT_PROBE_QUALITY_H
#define MT_PROBE_QUALITY_H

#include <stddef.h>
#include <stdint.h>

#include "decode/kv.h"

typedef enum mt_quality_policy {
    MT_QUALITY_FULL, MT_QUALITY_WINDOW, MT_QUALITY_WINDOW_SINK, MT_QUALITY_RECOMPUTE
} mt_quality_policy;

/* "full", "window", "window+sink", "recompute", by mt_quality_policy;
 * NULL-terminated. */
extern const char *const mt_quality_policy_names[];

typedef struct mt_quality_opts {
    const char *model, *text, *per_position, *gen_prompt, *gen_out;
    mt_quality_policy pol;
    int         sink, window;   /* -1: default */
    mt_rope_mode rope;
    int         ctx;            /* 0: from config.json */
    int         length;         /* positions per stream; 0: 8 T */
    int         streams;
    int         offset;         /* first byte of the first stream */
    int         buckets;
    int         chunk, max_chunks, chunk_stride;
    int         gen_tokens;     /* 0: 4 T */
    uint64_t    seed;
    double      temperature;
    int         threads;
    int         tsv;
    int         gen_only;       /* --text only as the generation reference */
    int         progress;       /* progress line on stderr (a terminal) */
} mt_quality_opts;

/* The defaults of `mt-probe quality` (policy window+sink, 1 stream, ...). */
void mt_quality_opts_default(mt_quality_opts *o);

/* Loads o->model and runs what the options ask (stream, chunked and/or
 * generation), printing the result lines on stdout. 0, or -1 with err.
 * The caller has checked the combination (a model; text or a prompt). */
int mt_quality_run(const mt_quality_opts *o, char *err, size_t errlen);

#endif
