/* test_soak_classify.c: the soak's classifier (probe/soak_classify.c) fed
 * tick lines as mt-serve writes them: a host stall while the pool has room
 * (client input starved, then a burst answered with FILL) is the host's,
 * with its time; a run that reaches pool exhaustion is the model's
 * collapse at the exhaustion time; both in one run keep both times. */
#include "tap.h"
#include "probe/soak_classify.h"

#include <stdio.h>
#include <string.h>

#define PERIOD 0.08
#define NT     500            /* 40 s of ticks */
#define POOL   100000000000LL /* 100 GB */

typedef struct spec {
    double stall_from, stall_to; /* client input starved (in=0), -1 none */
    double fill_from, fill_to;   /* FILL sent, -1 none */
    double full_at;              /* kv_free under 1% from here, -1 none */
    double preempt_at;           /* first preemption, -1 none */
    double stall2_from, stall2_to, fill2_from, fill2_to; /* a second stall; 0 none */
} spec;

static mt_soak_tick ticks[NT];
static mt_latline ll;

/* The tick line of tick i of a run shaped by sp, as mt-serve writes it. */
static void line_of(const spec *sp, int i, char *buf, size_t n)
{
    double t = i * PERIOD;
    long long active = 40, in = active, fill = 0, pre = 0;
    long long used = (long long)(t / 40.0 * 0.6 * (double)POOL);
    if (sp->stall_from >= 0 && t >= sp->stall_from && t < sp->stall_to)
        in = 0;
    if (sp->stall_to >= 0 && t >= sp->stall_to && t < sp->stall_to + PERIOD)
        in = 300;                    /* the burst */
    if (sp->fill_from >= 0 && t >= sp->fill_from && t <= sp->fill_to)
        fill = 25;
    if (sp->stall2_to > 0 && t >= sp->stall2_from && t < sp->stall2_to)
        in = 0;
    if (sp->stall2_to > 0 && t >= sp->stall2_to && t < sp->stall2_to + PERIOD)
        in = 300;
    if (sp->fill2_to > 0 && t >= sp->fill2_from && t <= sp->fill2_to)
        fill = 25;
    if (sp->full_at >= 0 && t >= sp->full_at)
        used = POOL - POOL / 1000;
    if (sp->preempt_at >= 0 && t >= sp->preempt_at && t < sp->preempt_at + PERIOD)
        pre = 1;
    snprintf(buf, n, "tick=%d t=%.3f active=%lld stepped=%lld step_ms=4.000 "
             "late_ms=%.3f p50_ms=40.000 p99_ms=79.000 in=%lld out=%lld "
             "fill=%lld kv_used=%lld kv_free=%lld pending=0 admitted=%lld "
             "rejected=0 preempted=%lld naive_ms=4.000 naive_met=100.0 "
             "met=%.1f miss=0", i, t, active, active, fill ? 400.0 : 2.0, in,
             active - fill, fill, used, POOL - used, active, pre,
             fill ? 40.0 : 100.0);
}

/* Feeds the run's lines through the parser, then the classifier. */
static int classify(const spec *sp, mt_soak_class *c)
{
    char buf[1024], err[256];
    for (int i = 0; i < NT; i++) {
        line_of(sp, i, buf, sizeof buf);
        if (mt_soak_tick_parse(&ll, buf, strlen(buf), &ticks[i], err,
                               sizeof err) != 0) {
            tap_diag("tick %d: %s", i, err);
            return -1;
        }
    }
    mt_soak_classify(ticks, NT, 40.0, 2.0, c);
    return 0;
}

int main(void)
{
    mt_soak_class c;
    char err[256];

    /* the host: input starved 5.0..5.6 s, the burst answered with FILL
     * 5.68..6.4 s, the pool 93% free */
    spec host = {5.0, 5.6, 5.68, 6.4, -1, -1, 0, 0, 0, 0};
    ok(classify(&host, &c) == 0, "host stall: every line parsed");
    ok(c.host_s >= 0, "host stall: flagged host-disturbed");
    is_near(c.host_s, 5.04, 1e-6, "host stall: its start, 5.04 s, the "
            "first tick without input");
    is_near(c.host_end_s, 6.4, 1e-6, "host stall: its end, 6.4 s");
    ok(c.host_free > POOL / 2, "host stall: the pool had room (%.1f GB free)",
       (double)c.host_free / 1e9);
    is_near(c.model_s, -1, 0, "host stall: no collapse by the model");

    /* the model: the pool exhausted at 20 s (FILL from then on), the first
     * preemption at 22 s; the client's input on time throughout */
    spec model = {-1, -1, 20.0, 40.0, 20.0, 22.0, 0, 0, 0, 0};
    ok(classify(&model, &c) == 0, "exhaustion: every line parsed");
    is_near(c.model_s, 20.0, 1e-6, "exhaustion: collapsed by the model at "
            "its exhaustion time, 20 s");
    is_near(c.host_s, -1, 0, "exhaustion: not host-disturbed");

    /* a preemption alone marks the exhaustion */
    spec pre = {-1, -1, -1, -1, -1, 17.6, 0, 0, 0, 0};
    ok(classify(&pre, &c) == 0, "preemption: parsed");
    is_near(c.model_s, 17.6, 1e-6, "a first preemption at 17.6 s is the "
            "model's time");

    /* the busy machine: a host stall at 5.0 s, then the pool at 30 s:
     * both times, and the collapse is the model's at 30 s */
    spec both = {5.0, 5.6, 5.68, 6.4, 30.0, -1, 0, 0, 0, 0};
    both.fill_to = 6.4;
    ok(classify(&both, &c) == 0, "both: every line parsed");
    is_near(c.host_s, 5.04, 1e-6, "both: the host stall at 5.04 s");
    is_near(c.model_s, -1, 0, "both: no FILL at exhaustion, no preemption: "
            "not yet the model's");
    both.fill_to = 40.0;
    both.fill_from = 5.68;
    ok(classify(&both, &c) == 0, "both, FILL on to the end: parsed");
    is_near(c.host_s, 5.04, 1e-6, "both: the host stall still at 5.04 s");
    is_near(c.model_s, 30.0, 1e-6, "both: the model's collapse at 30 s");

    /* FILL with room while the input is on time: late steps, not the
     * host's stall and not the pool's exhaustion */
    spec slow = {-1, -1, 10.0, 12.0, -1, -1, 0, 0, 0, 0};
    ok(classify(&slow, &c) == 0, "slow steps: parsed");
    ok(c.host_s < 0 && c.model_s < 0,
       "FILL with input on time and room in the pool: neither host nor "
       "pool (host %.2f, model %.2f)", c.host_s, c.model_s);

    /* a starved tick long (over starve_s) before the FILL is not its cause */
    spec far = {5.0, 5.6, 9.0, 9.8, -1, -1, 0, 0, 0, 0};
    ok(classify(&far, &c) == 0, "far: parsed");
    ok(c.host_s < 0, "input starved 3.4 s before the FILL: not the FILL's "
       "cause");

    /* two host stalls, one in start-up (0.2..0.6 s, as a loaded host
     * starts the clients late) and the one a session starved in (5.0 s):
     * the second must not be hidden by the first (probe_soak_host once
     * booked its 2.5 s SIGSTOP as the model's collapse behind a start-up
     * stall at 0.0-0.5 s) */
    spec two = {0.2, 0.6, 0.68, 1.0, -1, -1, 5.0, 5.6, 5.68, 6.4};
    ok(classify(&two, &c) == 0, "two stalls: every line parsed");
    is_int(c.host_stretches, 2, "two stalls: both found");
    is_near(c.host_s, 0.24, 1e-6, "two stalls: the first at 0.24 s");
    int hs = mt_soak_host_covering(&c, 5.0, 2.0);
    is_int(hs, 1, "a starvation from 5.0 s: the second stall's");
    is_near(hs >= 0 ? c.host_at[hs][0] : -1, 5.04, 1e-6, "its start, 5.04 s");
    is_near(hs >= 0 ? c.host_at[hs][1] : -1, 6.4, 0.05, "its end, near 6.4 s");
    is_int(mt_soak_host_covering(&c, 0.3, 2.0), 0, "a starvation from 0.3 s: the first's");
    is_int(mt_soak_host_covering(&c, 20.0, 2.0), -1, "a starvation from 20 s: neither");

    /* lateness growing without bound over the second half */
    for (int i = 0; i < NT; i++) {
        memset(&ticks[i], 0, sizeof ticks[i]);
        ticks[i].t = i * PERIOD;
        ticks[i].late_ms = ticks[i].t > 20 ? (ticks[i].t - 20) * 200 : 1;
    }
    mt_soak_classify(ticks, NT, 40.0, 2.0, &c);
    ok(c.unbounded_late, "lateness 200 ms/s from 20 s: unbounded (slope %.0f)",
       c.late_slope);
    is_near(c.first_late_s, 25.04, 0.05, "first 1 s late near 25 s");

    /* lines that are not ticks, and broken ones */
    is_int(mt_soak_tick_parse(&ll, "request session=1", 17, &ticks[0], err,
                              sizeof err), 1, "a request line: not a tick");
    is_int(mt_soak_tick_parse(&ll, "tick=1 t=x", 10, &ticks[0], err,
                              sizeof err), -1, "a broken tick line: an error");
    like(err, "t", "the error names the key");
    return tap_done();
}
