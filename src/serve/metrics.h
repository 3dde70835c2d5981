/* metrics.h: mt-serve's Prometheus metrics: a registry fed by the engine's
 * tick records and written in Prometheus' text exposition format (0.0.4).
 *
 * Every figure comes from the tick records the latency lines are made
 * from, so a scrape and the lines never disagree: the counters are the
 * sums (frames, late ticks) or the totals (sessions) of the records seen
 * so far, the gauges are the last record's, and metronome_ticks_total
 * says how many records a scrape covers. One mutex: a scrape is one
 * consistent snapshot, taken between two ticks.
 *
 * Histograms have buckets at fractions and multiples of the frame period
 * P (P/16 .. 8P), so the frame budget is a bucket boundary.
 */
#ifndef MT_METRICS_H
#define MT_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "wire/latline.h"

#define MT_METRICS_NBUCKET 14

/* What does not change while the server runs. */
typedef struct mt_metrics_info {
    double      frame_s;        /* tick period (seconds) */
    double      deadline_s;     /* an output is due this long after its
                                   input (seconds) */
    int64_t     blocks_total;   /* KV pool blocks */
    int64_t     block_bytes;    /* bytes of one block */
    int64_t     session_bound;  /* window policy: bytes one session holds;
                                   0 under the full policy */
    const char *kv_policy;      /* "window" or "full" */
    const char *model;          /* model name */
    const char *version;
} mt_metrics_info;

typedef struct mt_metrics mt_metrics;

int  mt_metrics_create(const mt_metrics_info *info, mt_metrics **out,
                       char *err, size_t errlen);
void mt_metrics_free(mt_metrics *m);

/* One tick record into the registry (ctx is the mt_metrics): the
 * engine's tick callback. Thread-safe. */
void mt_metrics_tick(void *ctx, const mt_tick *t);

/* The exposition into buf (cap bytes, NUL-terminated). Returns its length,
 * or -1 with err when cap is too small (MT_METRICS_TEXT_MAX always does). */
#define MT_METRICS_TEXT_MAX (32 * 1024)
long mt_metrics_render(mt_metrics *m, char *buf, size_t cap, char *err,
                       size_t errlen);

/* The bucket upper bounds (seconds) for a frame period of frame_s. */
void mt_metrics_buckets(double frame_s, double le[MT_METRICS_NBUCKET]);

#endif
