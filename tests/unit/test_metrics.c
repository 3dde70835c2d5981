/* test_metrics.c: the Prometheus registry (src/serve/metrics.c): the
 * counters are the sums and totals of the tick records fed in, the
 * histograms' buckets are cumulative with the frame period a boundary,
 * label values are escaped, and a buffer too small is an error. */
#include "serve/metrics.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char text[MT_METRICS_TEXT_MAX];

/* the value of the sample line "name value" (name with its labels) */
static double sample(const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

static void render(mt_metrics *m)
{
    char err[160];
    long n = mt_metrics_render(m, text, sizeof text, err, sizeof err);
    if (n < 0)
        tap_diag("render: %s", err);
}

static mt_tick tick(int64_t k, double step_ms, double late_ms)
{
    mt_tick t;
    memset(&t, 0, sizeof t);
    t.tick = k;
    t.step_ms = step_ms;
    t.late_ms = late_ms;
    snprintf(t.device, sizeof t.device, "cpu");
    return t;
}

int main(void)
{
    mt_metrics_info info = {
        .frame_s = 0.08, .deadline_s = 0.16, .blocks_total = 100, .block_bytes = 1000,
        .session_bound = 17000, .kv_policy = "window", .model = "a\"b\\c\nd",
        .version = "9.9",
    };
    mt_metrics *m = NULL;
    char err[160];
    ok(mt_metrics_create(&info, &m, err, sizeof err) == 0 && m, "created");
    mt_metrics_info bad = info;
    bad.frame_s = 0;
    mt_metrics *m2 = NULL;
    ok(mt_metrics_create(&bad, &m2, err, sizeof err) == -1 && !m2 && err[0],
       "no frame period refused");

    double le[MT_METRICS_NBUCKET];
    mt_metrics_buckets(0.08, le);
    int has_p = 0;
    for (int i = 0; i < MT_METRICS_NBUCKET; i++)
        has_p |= le[i] == 0.08;
    ok(has_p, "the frame period is a bucket boundary");

    /* three ticks: on time, exactly at the period, late */
    mt_tick t = tick(0, 10, 5);
    t.in = 3; t.out = 2; t.fill = 0; t.miss = 0;
    t.admitted = 2; t.active = 2; t.pending = 1; t.rejected = 1; t.shed = 0;
    t.kv_used = 2500; t.kv_free = 97500; t.has_limit = 1; t.limit = 5;
    mt_metrics_tick(m, &t);
    t = tick(1, 80, 80);
    t.in = 2; t.out = 3; t.fill = 1; t.miss = 2; t.preempted = 1;
    t.admitted = 3; t.active = 1; t.rejected = 1; t.shed = 1;
    t.kv_used = 1000; t.has_limit = 1; t.limit = 4;
    mt_metrics_tick(m, &t);
    t = tick(5, 200, 700);
    t.in = 1; t.out = 1; t.admitted = 3; t.active = 2; t.rejected = 2; t.shed = 1;
    t.kv_used = 1001; t.has_limit = 1; t.limit = 3;
    mt_metrics_tick(m, &t);
    render(m);

    is_near(sample("metronome_ticks_total"), 3, 0, "ticks counted");
    is_near(sample("metronome_frames_in_total"), 6, 0, "in summed");
    is_near(sample("metronome_frames_out_total"), 6, 0, "out summed");
    is_near(sample("metronome_frames_fill_total"), 1, 0, "fill summed");
    is_near(sample("metronome_frames_missed_total"), 2, 0, "miss summed");
    is_near(sample("metronome_sessions_preempted_total"), 1, 0, "preempted summed");
    is_near(sample("metronome_late_ticks_total"), 1, 0,
            "late ticks: over the period only (80 ms at a period of 80 ms is on time)");
    is_near(sample("metronome_sessions_admitted_total"), 3, 0, "admitted: the last total");
    is_near(sample("metronome_sessions_refused_total"), 2, 0, "refused: the last total");
    is_near(sample("metronome_sessions_shed_total"), 1, 0, "shed: the last total");
    is_near(sample("metronome_sessions_ended_total"), 2, 0,
            "ended: admitted less live, never going back (3-1, then 3-2)");
    is_near(sample("metronome_sessions_live"), 2, 0, "live: the last record's");
    is_near(sample("metronome_sessions_limit"), 3, 0, "limit: the last record's");
    is_near(sample("metronome_kv_pool_blocks_used"), 2, 0, "blocks used rounded up (1001 B)");
    is_near(sample("metronome_kv_pool_blocks"), 100, 0, "blocks in all");
    is_near(sample("metronome_kv_session_bound_bytes"), 17000, 0, "session bound");
    is_near(sample("metronome_frame_period_seconds"), 0.08, 1e-12, "period");
    is_near(sample("metronome_step_seconds_bucket{le=\"0.005\"}"), 0, 0, "step: none under P/16");
    is_near(sample("metronome_step_seconds_bucket{le=\"0.01\"}"), 1, 0,
            "step: a value on a bound is in that bucket (10 ms, le=0.01)");
    is_near(sample("metronome_step_seconds_bucket{le=\"0.08\"}"), 2, 0, "step: cumulative at P");
    is_near(sample("metronome_step_seconds_bucket{le=\"0.16\"}"), 2, 0, "step: 200 ms is above 2P");
    is_near(sample("metronome_step_seconds_bucket{le=\"0.24\"}"), 3, 0, "step: ... and under 3P");
    is_near(sample("metronome_step_seconds_bucket{le=\"+Inf\"}"), 3, 0, "step: +Inf holds all");
    is_near(sample("metronome_step_seconds_count"), 3, 0, "step: count");
    is_near(sample("metronome_step_seconds_sum"), 0.29, 1e-9, "step: sum in seconds");
    is_near(sample("metronome_tick_lateness_seconds_bucket{le=\"0.64\"}"), 2, 0,
            "lateness: 700 ms above 8P");
    is_near(sample("metronome_tick_lateness_seconds_bucket{le=\"+Inf\"}"), 3, 0,
            "lateness: +Inf");
    like(text, "metronome_info{version=\"9.9\",model=\"a\\\"b\\\\c\\nd\",kv_policy=\"window\",device=\"cpu\"} 1",
         "info labels escaped");
    like(text, "# TYPE metronome_frames_in_total counter\n", "counter typed");
    like(text, "# TYPE metronome_step_seconds histogram\n", "histogram typed");

    /* totals never go back (a counter is monotone) */
    t = tick(6, 1, 1);
    t.admitted = 1; t.active = 1; t.rejected = 0; t.shed = -1;
    mt_metrics_tick(m, &t);
    render(m);
    is_near(sample("metronome_sessions_admitted_total"), 3, 0, "a smaller total keeps the counter");
    is_near(sample("metronome_sessions_shed_total"), 1, 0, "shed -1 (absent) keeps it");

    char small[64];
    ok(mt_metrics_render(m, small, sizeof small, err, sizeof err) == -1 && err[0],
       "a buffer too small: -1 with a message");
    mt_metrics_free(m);
    return tap_done();
}
