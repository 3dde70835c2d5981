/* soak_classify.h: who decided a soak run, the model or the host, read
 * from the server's tick lines (mt-probe soak, examples/paper.sh).
 *
 * The model's collapse starts at pool exhaustion: the first tick with a
 * preemption, or with FILL sent while under 1% of the K/V pool is free
 * (sessions stalled for blocks). A stretch of FILL that starts while the
 * pool has room and the client's input is starved (a tick with sessions
 * active and no input frame read, within `starve_s` before the stretch or
 * inside it) is the host's: the client's frames arrived late and in a
 * burst, and the server answered the backlog with FILL. The host's stall
 * runs from the first of the starved ticks before that stretch to its last
 * FILL. Such a stall before the model's collapse (or in a run with none)
 * marks the run as disturbed by the host.
 */
#ifndef MT_PROBE_SOAK_CLASSIFY_H
#define MT_PROBE_SOAK_CLASSIFY_H

#include "wire/latline.h"

#include <stddef.h>
#include <stdint.h>

/* One tick line, as the classifier reads it. */
typedef struct mt_soak_tick {
    double  t;          /* model seconds since the load started */
    double  late_ms;    /* the server's lateness, model ms */
    int64_t in;         /* input frames read this tick */
    int64_t active;     /* admitted sessions */
    int64_t fill;       /* FILL frames sent this tick */
    int64_t preempted;  /* sessions preempted this tick */
    int64_t kv_used, kv_free;  /* K/V pool bytes */
} mt_soak_tick;

enum { MT_SOAK_HOST_KEEP = 8 };

typedef struct mt_soak_class {
    double  model_s;       /* pool exhaustion (the model's collapse), -1 */
    double  host_s;        /* first host stall before model_s: its first
                              starved tick, -1 */
    double  host_end_s;    /* its last FILL tick, -1 */
    int64_t host_free;     /* K/V bytes free at its first FILL */
    int     host_stretches;/* host stretches before model_s */
    /* the first MT_SOAK_HOST_KEEP of them, each as host_s, host_end_s
     * and host_free are for the first: a stall in start-up must not hide
     * a later one that a session's starvation falls in
     * (mt_soak_host_covering) */
    double  host_at[MT_SOAK_HOST_KEEP][3];   /* start, end, K/V bytes free */
    double  late_end_ms;   /* lateness at the last tick within the load */
    double  late_slope;    /* ms of lateness per s over 50%..95% of it */
    int     unbounded_late;/* slope >= 100 ms/s and lateness reached 1 s */
    double  first_late_s;  /* first tick 1 s late within the load, -1 */
} mt_soak_class;

/* Classifies ticks tk[0..n) (in time order; ticks before t = 0 are
 * ignored) of a load of duration_s. starve_s: how long before a FILL
 * stretch a starved tick still counts as its cause (the soak's starvation
 * threshold, 2 s). */
void mt_soak_classify(const mt_soak_tick *tk, size_t n, double duration_s,
                      double starve_s, mt_soak_class *c);

/* One tick line into *tk with t the server's own t (seconds since it
 * started; the caller moves and scales it); ll is scratch space. Returns
 * 0, 1 when the line is not a tick line, or -1 with err when it is a
 * malformed one. */
int mt_soak_tick_parse(mt_latline *ll, const char *line, size_t len,
                       mt_soak_tick *tk, char *err, size_t errlen);

/* The classifier's fields of a tick line already read into t (t as is:
 * the server's seconds and ms). */
void mt_soak_tick_from(const mt_tick *t, mt_soak_tick *tk);

/* The kept host stretch whose stall a starvation that began at onset_s
 * belongs to (it began at most starve_s before the stall's first starved
 * tick and before its end), or -1. */
int mt_soak_host_covering(const mt_soak_class *c, double onset_s, double starve_s);

#endif
