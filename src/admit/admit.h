/* admit.h: admission-control policies for mt-admit, as a small library.
 *
 * A controller is fed mt-serve's tick records (mt_admit_tick) and session
 * requests (mt_admit_request); it answers each request with accept or
 * reject through a callback, possibly later (a request may be held until
 * the signal is fresh, never past hold_ms). All time comes from the lines
 * themselves (the `t` keys, server seconds), so a recorded log replays
 * with the same decisions, and unit tests drive it with synthetic traces.
 *
 * The signal every policy watches, per tick, is the tick's service
 * latency: max(step_ms, late_ms) by default (the compute of the tick, or
 * how far the oldest unanswered frame has fallen behind, whichever is
 * worse), or p99_ms (per-frame arrival-to-ready latency) with
 * MT_SIG_P99. Policies:
 *
 *   metronome  learns the tick's compute time (step_ms; p99_ms with
 *              MT_SIG_P99) as a function of active sessions, online
 *              (robust per-level median/MAD over a forgetting window with
 *              change-point resets, weighted affine fits of median and
 *              spread with their standard errors), predicts the largest N
 *              whose p99 upper bound stays under margin x budget, admits
 *              one session at a time and only once the previous admission
 *              shows in the ticks; then probes on, one level at a time
 *              and only on a level's own long evidence (probe_ticks
 *              samples), while that level's own p99 of the signal plus the
 *              fitted slope of p99 in n stays under probe x budget, and
 *              (headroom) while the next level's median step, plus the
 *              delay the largest recent hiccup would carry into the
 *              tick after it, stays under it too;
 *              lateness over budget blocks admissions, and lateness born
 *              at a level that does not recover caps the limit below
 *              that level.
 *   aimd       limit +1 per interval without violation, x beta on one.
 *   gradient   limit x (min latency x tolerance / recent latency) + queue
 *              allowance, smoothed (Netflix concurrency-limits Gradient2,
 *              Envoy adaptive concurrency).
 *   static     a fixed limit.
 *
 * Library code: never prints, never exits.
 */
#ifndef MT_ADMIT_H
#define MT_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "wire/latline.h"

typedef enum mt_admit_policy {
    MT_POL_METRONOME = 0,
    MT_POL_AIMD,
    MT_POL_GRADIENT,
    MT_POL_STATIC,
} mt_admit_policy;

typedef enum mt_admit_signal { MT_SIG_SERVICE = 0, MT_SIG_P99 = 1 } mt_admit_signal;

#define MT_ADMIT_MAX_LEVEL 1024   /* largest concurrency a policy considers */

typedef struct mt_admit_opts {
    mt_admit_policy policy;
    mt_admit_signal signal;
    double budget_ms;      /* latency budget (80) */
    double margin;         /* policies aim under margin x budget (0.8) */
    double hold_ms;        /* longest a request waits for a fresh signal (1000) */
    int    max_limit;      /* never above this (MT_ADMIT_MAX_LEVEL) */
    /* metronome */
    int    settle_ticks;   /* ticks of the new level before the next accept (6) */
    int    stale_ticks;    /* give up waiting for an admission to show (40) */
    int    forget_ticks;   /* samples older than this are forgotten (3000) */
    double z;              /* uncertainty: standard errors added (2.0) */
    double quantile_z;     /* per-level tail: median + qz x sigma (2.33 ~ p99) */
    double probe;          /* ceiling of the probe above the margin, x budget
                              (1.0); <= margin: no probe */
    int    probe_ticks;    /* samples of a level before probing above it (48) */
    int    headroom;       /* 1: the probe keeps the headroom to drain the
                              largest recent hiccup within a tick (1) */
    /* aimd */
    int    interval_ticks; /* aimd/gradient update period (12) */
    double beta;           /* aimd decrease factor (0.7) */
    int    initial;        /* aimd/gradient initial limit (1) */
    /* gradient */
    double tolerance;      /* latency inflation tolerated (2.0) */
    int    long_ticks;     /* window of the minimum latency (600) */
    double smoothing;      /* limit smoothing (0.2) */
    int    queue;          /* queue allowance; <0: sqrt(limit) (-1) */
    /* static */
    int    static_n;
} mt_admit_opts;

void mt_admit_opts_default(mt_admit_opts *o);
/* "metronome", "aimd", "gradient", "static:N". 0, or -1 with err. */
int  mt_admit_policy_parse(const char *s, mt_admit_opts *o, char *err, size_t errlen);
const char *mt_admit_policy_name(mt_admit_policy p);
/* Checks every field's range. 0, or -1 with err naming the field. */
int  mt_admit_opts_check(const mt_admit_opts *o, char *err, size_t errlen);

/* Called once per decision. reason is NULL for an accept. */
typedef void (*mt_admit_emit_fn)(void *ctx, uint32_t id, int accept, const char *reason);

typedef struct mt_admit mt_admit;

int  mt_admit_create(const mt_admit_opts *o, mt_admit_emit_fn emit, void *ctx,
                     mt_admit **out, char *err, size_t errlen);
void mt_admit_free(mt_admit *a);
/* a as mt_admit_create made it, with the same options and callback, its
 * buffers kept (for callers that run many short streams: the fuzz
 * harness). */
void mt_admit_reset(mt_admit *a);

/* A tick record: updates the policy, then answers held requests. */
void mt_admit_tick(mt_admit *a, const mt_tick *t);
/* A session waiting for admission, at server time t (seconds; <0: the last
 * tick's time). Answered at once or held. */
void mt_admit_request(mt_admit *a, uint32_t id, double t);
/* The server's own verdict line (`admit session=ID verdict=...`): an
 * accepted session the server then refused unblocks the wait at once. */
void mt_admit_server_verdict(mt_admit *a, uint32_t id, int accepted);
/* End of input: every held request is rejected. */
void mt_admit_finish(mt_admit *a);

/* Current concurrency limit (the estimate of how many sessions fit). */
int  mt_admit_limit(const mt_admit *a);

typedef struct mt_admit_stats {
    int64_t ticks, requests, accepted, rejected, held;
    int64_t active;          /* last tick's active */
    int64_t violations;      /* ticks whose signal exceeded the budget */
    double  signal_ms;       /* last tick's signal */
    double  fit_a, fit_b;    /* metronome: median signal ~ a + b x active (ms) */
    double  fit_sa, fit_sb;  /* metronome: its spread (sigma) ~ sa + sb x active */
    int     levels;          /* metronome: levels with enough samples */
    int     waiting;         /* metronome: waiting for the last accept */
    int64_t resets;          /* metronome: change points (data forgotten) */
    int64_t late_levels;     /* metronome: lateness born at a level (caps) */
    int64_t probes;          /* metronome: levels gone above the margin's
                                prediction by the probe */
    double  hiccup_ms;       /* metronome: largest recent hiccup (a tick's
                                signal over its level's median, born on a
                                tick in budget) */
    double  period_ms;       /* metronome: the tick period, from the lines */
    int64_t headroom_holds;  /* metronome: probes the statistics allowed and
                                the hiccup headroom held back */
} mt_admit_stats;

void mt_admit_get_stats(const mt_admit *a, mt_admit_stats *s);
/* One status line (logfmt, no newline) for stderr. */
void mt_admit_status(const mt_admit *a, char *buf, size_t cap);

/* The signal of one tick for options o (exposed for tests and the bench). */
double mt_admit_signal_of(const mt_admit_opts *o, const mt_tick *t);

#endif
