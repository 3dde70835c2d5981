/* test_admit.c: the admission policies (src/admit/admit.c) against a simulated
 * server whose step time is a + b x active plus noise and rare outliers.
 *
 * The simulator answers accepts the way mt-serve does (the session is
 * active at the next tick) and sends a new request every tick, faster
 * than capacity. Checks: metronome climbs to within a few percent of the
 * true N* (the largest level whose clean p99 stays under its ceiling:
 * probe x budget, the budget itself by default; margin x budget with the
 * probe off) and never above it, one admission at a time, never on a
 * stale signal;
 * it ignores outliers, follows a server that slows down, and unblocks on
 * a refusal; aimd oscillates around the wall; gradient stays bounded;
 * static caps; the options are checked.
 */
#include "admit/admit.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- a deterministic simulated server ---------------------------------- */

static uint64_t sim_seed;   /* MT_ADMIT_SEED overrides, to try others */

typedef struct sim {
    double a, b, rel_noise, abs_noise, outlier_p, outlier_x;
    double knee, knee_c;         /* + knee_c (x - knee)^2 past the knee: a
                                    machine that saturates, not a line */
    double period_ms;
    int    life;                 /* session life in ticks (0: forever) */
    int    stuck_at;             /* from this many sessions on, lateness never
                                    recovers (a server without catch-up) */
    int    hiccup_every;         /* every this many ticks the step takes */
    double hiccup_ms;            /* hiccup_ms more (a host hiccup) */
    uint64_t rng;
    int64_t tick, admitted, rejected;
    int    active, to_admit, refuse_next;
    int    born[4096];           /* tick each active session began */
    uint32_t next_id;
    double backlog;
    double last_late_ms;         /* the last tick's late_ms */
    /* what happened */
    int    max_active, accepts, rejects;
    int64_t last_accept_tick, min_gap;
    int    accepts_same_tick;
    int64_t accept_tick[4096];
} sim;

static double urand(sim *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (double)(s->rng >> 11) / 9007199254740992.0;
}

static double nrand(sim *s)
{
    double u1 = urand(s), u2 = urand(s);
    if (u1 < 1e-12)
        u1 = 1e-12;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static double true_step(const sim *s, int x)
{
    double over = s->knee_c > 0 && x > s->knee ? x - s->knee : 0;
    return s->a + s->b * x + s->knee_c * over * over;
}
static double true_sigma(const sim *s, int x)
{
    return s->rel_noise * true_step(s, x) + s->abs_noise;
}

/* The largest level whose clean p99 (2.33 sigma) stays under target. */
static int true_nstar(const sim *s, double target)
{
    int n = 0;
    for (int x = 1; x < 1000; x++)
        if (true_step(s, x) + 2.33 * true_sigma(s, x) <= target)
            n = x;
    return n;
}

static void sim_emit(void *ctx, uint32_t id, int accept, const char *reason)
{
    sim *s = ctx;
    (void)id;
    (void)reason;
    if (!accept) {
        s->rejects++;
        return;
    }
    s->accepts++;
    if (s->accepts <= 4096)
        s->accept_tick[s->accepts - 1] = s->tick;
    if (s->last_accept_tick >= 0) {
        int64_t gap = s->tick - s->last_accept_tick;
        if (gap < s->min_gap)
            s->min_gap = gap;
        if (gap == 0)
            s->accepts_same_tick++;
    }
    s->last_accept_tick = s->tick;
    s->to_admit++;
}

/* The simulated server a test asks for: a + b x ms a step; the others,
 * where zero, keep their defaults (noise 3% of the step + 0.2 ms, 1% of the
 * ticks outliers, no knee, sessions that stay, never stuck). */
typedef struct server {
    double a, b, rel_noise, outlier_p, knee, knee_c;
    int    life, stuck_at;
    int    hiccup_every;
    double hiccup_ms;
} server;

static void sim_init(sim *s, server sv)
{
    memset(s, 0, sizeof *s);
    s->a = sv.a;
    s->b = sv.b;
    s->rel_noise = sv.rel_noise > 0 ? sv.rel_noise : 0.03;
    s->abs_noise = 0.2;
    s->outlier_p = sv.outlier_p > 0 ? sv.outlier_p : 0.01;
    s->knee = sv.knee;
    s->knee_c = sv.knee_c;
    s->life = sv.life;
    s->stuck_at = sv.stuck_at;
    s->hiccup_every = sv.hiccup_every;
    s->hiccup_ms = sv.hiccup_ms;
    s->outlier_x = 4;
    s->period_ms = 80;
    s->rng = 0x9E3779B97F4A7C15ull ^ (sim_seed * 0x2545F4914F6CDD1Dull);
    for (int i = 0; i < 8; i++)
        (void)urand(s);
    s->next_id = 1;
    s->last_accept_tick = -1;
    s->min_gap = INT64_MAX;
}

/* One tick: admissions decided since the last tick take effect, sessions
 * past their life end, the batch is stepped, the record goes to the
 * controller, then one new request arrives. */
static void sim_tick(sim *s, mt_admit *a)
{
    while (s->to_admit > 0) {
        s->to_admit--;
        if (s->refuse_next) {
            s->refuse_next = 0;
            s->rejected++;
            continue;
        }
        if (s->active < 4096)
            s->born[s->active++] = (int)s->tick;
        s->admitted++;
    }
    if (s->life > 0) {
        int k = 0;
        for (int i = 0; i < s->active; i++)
            if (s->tick - s->born[i] < s->life)
                s->born[k++] = s->born[i];
        s->active = k;
    }
    if (s->active > s->max_active)
        s->max_active = s->active;
    mt_tick t;
    memset(&t, 0, sizeof t);
    t.tick = s->tick;
    t.t = s->tick * s->period_ms / 1000.0;
    t.active = s->active;
    t.stepped = s->active;
    double step = 0;
    if (s->active > 0) {
        step = true_step(s, s->active) + true_sigma(s, s->active) * nrand(s);
        if (step < 0.05)
            step = 0.05;
        if (urand(s) < s->outlier_p)
            step *= s->outlier_x;
        if (s->hiccup_every > 0 && s->tick % s->hiccup_every == s->hiccup_every - 1)
            step += s->hiccup_ms;
    }
    s->backlog += step - s->period_ms;
    if (s->backlog < 0)
        s->backlog = 0;
    t.step_ms = step;
    t.late_ms = s->active ? step * (0.5 + 0.5 * urand(s)) + s->backlog : 0;
    if (s->stuck_at && s->active >= s->stuck_at && s->tick % 200 > 20)
        t.late_ms += 90;     /* one frame behind, for good */
    s->last_late_ms = t.late_ms;
    t.p50_ms = s->active ? s->period_ms / 2 + step : 0;
    t.p99_ms = s->active ? s->period_ms + step : 0;
    t.admitted = s->admitted;
    t.rejected = s->rejected;
    t.met = 100;
    t.naive_met = 100;
    mt_admit_tick(a, &t);
    mt_admit_request(a, s->next_id++, t.t + 0.001);
    s->tick++;
}

static mt_admit *make(mt_admit_opts *o, sim *s)
{
    char err[256];
    mt_admit *a = NULL;
    if (mt_admit_create(o, sim_emit, s, &a, err, sizeof err) != 0) {
        tap_diag("create: %s", err);
        return NULL;
    }
    return a;
}

/* A fresh server sv under policy with the other options at their
 * defaults (the probe off with no_probe); the options stay in *o for the
 * checks. */
static mt_admit *start(sim *s, server sv, int policy, int no_probe, mt_admit_opts *o)
{
    sim_init(s, sv);
    mt_admit_opts_default(o);
    o->policy = policy;
    if (no_probe)
        o->probe = 0;
    /* These servers' outliers (1% of the ticks, or 5%, 4x as long: at the
     * wall a 200 ms overrun, 20 late ticks to drain) are hiccups no level
     * near the wall can drain within a tick, so with the headroom the
     * probe rightly stays at the margin's prediction; the runs check the
     * estimator against the clean p99's N*, and the headroom has tests of
     * its own (test_headroom). */
    o->headroom = 0;
    return make(o, s);
}

/* ticks ticks of the simulated server under the controller a */
static void sim_run(sim *s, mt_admit *a, int ticks)
{
    for (int i = 0; i < ticks; i++)
        sim_tick(s, a);
}

/* With the environment variable env set, a line of the controller's state
 * after tick i (to see how it moves when a check fails). */
static void sim_trace(const char *env, int i, const sim *s, mt_admit *a)
{
    if (!getenv(env))
        return;
    mt_admit_stats t;
    mt_admit_get_stats(a, &t);
    printf("# trace %d active %d limit %d m %.3f+%.4fx s %.3f+%.4fx lv %d resets %lld\n", i,
           s->active, mt_admit_limit(a), t.fit_a, t.fit_b, t.fit_sa, t.fit_sb, t.levels,
           (long long)t.resets);
}

/* sim_run, traced under env; the most sessions active after tick warm. */
static int sim_run_peak(sim *s, mt_admit *a, int ticks, int warm, const char *env)
{
    int peak = 0;
    for (int i = 0; i < ticks; i++) {
        sim_tick(s, a);
        sim_trace(env, i, s, a);
        if (i > warm && s->active > peak)
            peak = s->active;
    }
    return peak;
}

/* What metronome aims under (ms): the probe's ceiling, or the margin's
 * target with the probe off (admit.c's metronome_ceiling). */
static double ceiling_ms(const mt_admit_opts *o)
{
    return (o->probe > o->margin ? o->probe : o->margin) * o->budget_ms;
}

/* The N* the metronome policy should reach under the options o. */
static int nstar_of(const sim *s, const mt_admit_opts *o)
{
    return true_nstar(s, ceiling_ms(o));
}

/* The N* of the margin's prediction alone, where the probe starts. */
static int nmargin_of(const sim *s, const mt_admit_opts *o)
{
    return true_nstar(s, o->margin * o->budget_ms);
}

/* ---- tests -------------------------------------------------------------- */

/* Settles within 5% of N* (under the ceiling), never above it. With
 * short_probe, within 5% of the margin's N* at least: the probe takes
 * probe_ticks and more per level past the margin's prediction, one level
 * at a time, so a shallow slope (many levels between margin and budget)
 * is probed for longer than the run lasts. */
static void settles(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name,
                    int short_probe)
{
    double a0 = s->a, b0 = s->b;
    int nstar = nstar_of(s, o);
    int reached_at = -1;
    for (int i = 0; i < 3000; i++) {
        sim_tick(s, a);
        sim_trace("ADMIT_TRACE", i, s, a);
        if (reached_at < 0 && s->active >= 0.95 * nstar)
            reached_at = i;
    }
    tap_diag("%s: a=%.1f b=%.2f N*=%d reached %d (max %d) limit %d at tick %d",
             name, a0, b0, nstar, s->active, s->max_active, mt_admit_limit(a), reached_at);
    ok(s->max_active <= nstar, "metronome (%s): never above N* (max %d, N* %d)", name,
       s->max_active, nstar);
    int nmargin = nmargin_of(s, o);
    /* or one level under it: at a steep slope (4 ms a session against an
     * 80 ms budget) one level is 5%, and the last one is what the z
     * standard errors hold back */
    int want = short_probe ? nmargin : nstar;
    ok(s->active >= 0.95 * want || s->active >= want - 1,
       "metronome (%s): settles within 5%% (or a level) of N* (%d of %d; the margin's N* %d)",
       name, s->active, nstar, nmargin);
    ok(s->accepts_same_tick == 0 && s->min_gap >= o->settle_ticks,
       "metronome (%s): one admission at a time, >= %d ticks apart (min gap %lld)",
       name, o->settle_ticks, (long long)s->min_gap);
    mt_admit_stats st;
    mt_admit_get_stats(a, &st);
    tap_diag("  resets %lld", (long long)st.resets);
    tap_diag("  fit m = %.3f + %.4f x (true %.3f + %.4f x), s = %.3f + %.4f x (true %.3f + %.4f x)",
             st.fit_a, st.fit_b, a0, b0, st.fit_sa, st.fit_sb, s->abs_noise + s->rel_noise * a0,
             s->rel_noise * b0);
    ok(st.fit_b > 0.8 * b0 && st.fit_b < 1.5 * b0,
       "metronome (%s): learnt slope %.3f near the tail slope", name, st.fit_b);
}

static void converges(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    settles(s, a, o, name, 0);
}

static void converges_short(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    settles(s, a, o, name, 1);
}

static void ignores_outliers(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    int nstar = nstar_of(s, o), nmargin = nmargin_of(s, o);
    sim_run(s, a, 3000);
    tap_diag("outliers 5%%: N*=%d (the margin's %d) reached %d", nstar, nmargin, s->active);
    /* Measured against the margin's N*: a 4x step one tick in twenty is
     * real lateness (the backlog takes ticks to drain, longer the nearer
     * the wall), which rightly holds the probe back; what the test shows
     * is that the fit itself is not moved by the outliers. */
    ok(s->active >= 0.85 * nmargin && s->max_active <= nstar,
       "metronome: 5%% outliers barely move it (%d of N* %d, the margin's %d)", s->active,
       nstar, nmargin);
}

/* A server that saturates: the step grows faster than a line past a
 * knee, so the line fitted over the levels below is optimistic one step
 * up. The level now running is the evidence: the controller goes above
 * it only once the level's own p99 is known to be under the target, and
 * so stops at the wall the line cannot see. */
static void stops_at_knee(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    int nstar = nstar_of(s, o);
    sim_run(s, a, 4000);
    double target = ceiling_ms(o);
    double p99_max = true_step(s, s->max_active) + 2.33 * true_sigma(s, s->max_active);
    tap_diag("knee: N*=%d reached %d (max %d), accepts %d; clean p99 at the max %.2f ms, target %.1f",
             nstar, s->active, s->max_active, s->accepts, p99_max, target);
    /* Levels past N* here are 1% (51) and 5% (52) over the target: 51
     * cannot be told from one under it in a run of this length, and a
     * level looked at a few times with z = 2 passes by chance now and
     * then (over seeds 0..40: 38 stop at 51, 3 at 52). A line fitted
     * below the knee, without the level's own test, goes to 53 (9%). */
    ok(p99_max <= 1.06 * target && s->active >= 0.85 * nstar,
       "metronome: a server that saturates past a knee is approached, not passed (%d, max %d, N* %d, p99 at the max %.1f of %.1f ms)",
       s->active, s->max_active, nstar, p99_max, target);
}

static void follows_slowdown(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    sim_run(s, a, 1500);
    int before = mt_admit_limit(a);
    s->b *= 2;                  /* the server gets twice as slow per session */
    int nstar2 = nstar_of(s, o);
    int max_after = sim_run_peak(s, a, 2500, 1200, "ADMIT_TRACE2");
    tap_diag("slowdown: limit %d -> %d, new N* %d, active after %d", before,
             mt_admit_limit(a), nstar2, max_after);
    ok(mt_admit_limit(a) <= nstar2 && max_after <= nstar2,
       "metronome: follows a server that slows down (limit %d, N* %d)",
       mt_admit_limit(a), nstar2);
    /* useful: back at least near the margin's N* of the slower server
     * (the probe above it, one level per long look, is slower than this
     * test's sessions' lives) */
    int nmargin2 = nmargin_of(s, o);
    ok(mt_admit_limit(a) >= 0.8 * nmargin2,
       "metronome: and stays useful (limit %d, the margin's N* %d)", mt_admit_limit(a),
       nmargin2);
}

static void test_metronome_refusal(void)
{
    sim s;
    sim_init(&s, (server){ .a = 5, .b = 2 });
    mt_admit_opts o;
    mt_admit_opts_default(&o);
    o.stale_ticks = 1000;       /* only the refusal can unblock it */
    mt_admit *a = make(&o, &s);
    if (!a)
        return;
    sim_run(&s, a, 50);
    int acc = s.accepts;
    s.refuse_next = 1;          /* the server refuses what is accepted next */
    int64_t refused_tick = -1;
    for (int i = 0; i < 100 && refused_tick < 0; i++) {
        sim_tick(&s, a);
        if (s.rejected > 0)
            refused_tick = s.tick;
    }
    sim_run(&s, a, 2);
    tap_diag("refusal at tick %lld: accepts %d -> %d", (long long)refused_tick, acc, s.accepts);
    ok(refused_tick > 0 && s.accepts >= acc + 2,
       "metronome: a refusal by the server (rejected total) unblocks the wait");
    mt_admit_free(a);
}

static void caps_where_late(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    /* the compute says 27 fit, but from 12 sessions on the server falls a
     * frame behind and stays there: lateness born at a level caps it */
    int max_late = sim_run_peak(s, a, 3000, 1000, "ADMIT_TRACE");
    mt_admit_stats st;
    mt_admit_get_stats(a, &st);
    tap_diag("stuck at 12: limit %d, max active after warm-up %d, late levels %lld",
             mt_admit_limit(a), max_late, (long long)st.late_levels);
    ok(mt_admit_limit(a) <= 12 && max_late <= 13 && st.late_levels >= 1,
       "metronome: lateness born at a level caps the limit there, not at 26 (limit %d)",
       mt_admit_limit(a));
}

/* A long hiccup (2 s every 600 ticks, no other outliers) leaves a late
 * run of dozens of ticks at whatever level is running, but its backlog
 * drains: that is recovery, not a level that cannot keep up, so no level
 * is marked and the probe climbs as without it. Counting every late run
 * (before the drain was looked at) capped the level the first hiccup
 * fell on. */
static void test_draining_not_born_bad(void)
{
    sim s;
    mt_admit_opts o;
    server sv = { .a = 5, .b = 2, .outlier_p = 1e-9, .hiccup_every = 600, .hiccup_ms = 2000 };
    mt_admit *a = start(&s, sv, MT_POL_METRONOME, 0, &o);
    if (!a)
        return;
    int nstar = nstar_of(&s, &o);
    int peak = sim_run_peak(&s, a, 3000, 1500, "ADMIT_TRACE");
    mt_admit_stats st;
    mt_admit_get_stats(a, &st);
    tap_diag("2 s hiccups every 600 ticks: N*=%d, peak after warm-up %d, limit %d, late levels %lld",
             nstar, peak, mt_admit_limit(a), (long long)st.late_levels);
    ok(st.late_levels == 0 && peak >= 0.95 * nstar,
       "metronome: a hiccup's draining backlog marks no level (late levels %lld), the probe "
       "reaches N* (%d of %d)", (long long)st.late_levels, peak, nstar);
    mt_admit_free(a);
}

static void aimd_oscillates(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    /* aimd has no probe: its wall is the margin's */
    int nstar = nmargin_of(s, o);
    int prev = mt_admit_limit(a), dir = 0, turns = 0, above = 0;
    for (int i = 0; i < 6000; i++) {
        sim_tick(s, a);
        int l = mt_admit_limit(a);
        int d = l > prev ? 1 : l < prev ? -1 : 0;
        if (d && dir && d != dir)
            turns++;
        if (d)
            dir = d;
        prev = l;
        if (i > 1000 && s->active > nstar)
            above++;
    }
    tap_diag("aimd: N*=%d turns=%d ticks above N*=%d max %d", nstar, turns, above,
             s->max_active);
    ok(turns >= 4, "aimd: the limit oscillates (%d reversals)", turns);
    ok(above > 0, "aimd: and overshoots N* (%d ticks above)", above);
}

static void gradient_bounded(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name)
{
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < 4000; i++) {
        sim_tick(s, a);
        int l = mt_admit_limit(a);
        if (i > 1000) {
            if (l < lo) lo = l;
            if (l > hi) hi = l;
        }
    }
    tap_diag("gradient: limit in [%d, %d], max active %d, N* %d", lo, hi, s->max_active,
             nmargin_of(s, o));
    ok(hi > 1 && hi < 200, "gradient: the limit grows from 1 and stays bounded (%d..%d)",
       lo, hi);
}

/* The runs of one simulated server each under a controller with the
 * default options but the policy (and --probe 0 where no_probe is set):
 * each checks what it names. */
typedef void run_fn(sim *s, mt_admit *a, const mt_admit_opts *o, const char *name);
static const struct {
    const char *name;
    server sv;
    int policy;
    run_fn *run;
    int no_probe;
} runs[] = {
    /* the default (--probe 1): on to the budget, one level per long look */
    { "a=5 b=2", { .a = 5, .b = 2.0 }, MT_POL_METRONOME, converges, 0 },
    { "a=20 b=0.5", { .a = 20, .b = 0.5 }, MT_POL_METRONOME, converges_short, 0 },
    { "a=1 b=4", { .a = 1, .b = 4.0 }, MT_POL_METRONOME, converges, 0 },
    /* --probe 0: it stops where the margin puts it */
    { "a=5 b=2, no probe", { .a = 5, .b = 2.0 }, MT_POL_METRONOME, converges, 1 },
    { "a=20 b=0.5, no probe", { .a = 20, .b = 0.5 }, MT_POL_METRONOME, converges, 1 },
    { "a=1 b=4, no probe", { .a = 1, .b = 4.0 }, MT_POL_METRONOME, converges, 1 },
    /* one tick in twenty takes 4x as long */
    { "outliers", { .a = 4, .b = 1.2, .outlier_p = 0.05 }, MT_POL_METRONOME, ignores_outliers, 0 },
    { "knee", { .a = 6, .b = 0.8, .rel_noise = 0.08, .knee = 40, .knee_c = 0.06 },
      MT_POL_METRONOME, stops_at_knee, 0 },
    /* sessions leave: the limit can act */
    { "slowdown", { .a = 3, .b = 1.0, .life = 400 }, MT_POL_METRONOME, follows_slowdown, 0 },
    { "stuck", { .a = 5, .b = 2, .stuck_at = 12, .life = 300 }, MT_POL_METRONOME,
      caps_where_late, 0 },
    { "aimd", { .a = 3, .b = 1.5, .life = 300 }, MT_POL_AIMD, aimd_oscillates, 0 },
    { "gradient", { .a = 3, .b = 1.5, .life = 300 }, MT_POL_GRADIENT, gradient_bounded, 0 },
};

static void test_runs(void)
{
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        sim s;
        mt_admit_opts o;
        mt_admit *a = start(&s, runs[k].sv, runs[k].policy, runs[k].no_probe, &o);
        if (!a) {
            ok(0, "%s: the controller starts", runs[k].name);
            continue;
        }
        runs[k].run(&s, a, &o, runs[k].name);
        mt_admit_free(a);
    }
}

/* The longest run of consecutive ticks with late_ms over the budget in
 * ticks warm..ticks of s under a, as the bench counts them. */
static int longest_late_run(sim *s, mt_admit *a, int ticks, int warm, double budget)
{
    int run = 0, longest = 0;
    for (int i = 0; i < ticks; i++) {
        sim_tick(s, a);
        if (i < warm)
            continue;
        if (s->last_late_ms > budget) {
            if (++run > longest)
                longest = run;
        } else {
            run = 0;
        }
    }
    return longest;
}

/* A host with a 30 ms hiccup every 150 ticks (12 s), otherwise clean: the
 * statistics alone take the probe to the clean p99's N* (35-36 here), where
 * a hiccup overruns by 24 ms and the period drains 6 ms a tick: runs of
 * late ticks. With the headroom the probe stops where the tick after a
 * hiccup is back in budget (2 m + 30 <= 160: m <= 65, 31 sessions), and
 * the longest run is the hiccup's own tick. */
static void test_headroom(void)
{
    server sv = { .a = 2, .b = 2, .outlier_p = 1e-12, .hiccup_every = 150, .hiccup_ms = 30 };
    int level[2], longest[2];
    double hic = 0;
    int64_t holds = 0;
    for (int on = 0; on <= 1; on++) {
        sim s;
        mt_admit_opts o;
        mt_admit *a = start(&s, sv, MT_POL_METRONOME, 0, &o);
        if (!a) {
            ok(0, "headroom: the controller starts");
            return;
        }
        o.headroom = on;
        mt_admit_free(a);
        a = make(&o, &s);
        if (!a) {
            ok(0, "headroom: the controller starts");
            return;
        }
        longest[on] = longest_late_run(&s, a, 4000, 1500, o.budget_ms);
        level[on] = s.active;
        mt_admit_stats st;
        mt_admit_get_stats(a, &st);
        if (on) {
            hic = st.hiccup_ms;
            holds = st.headroom_holds;
        }
        tap_diag("headroom %s: settled %d, longest late run %d, hiccup %.1f ms, "
                 "period %.1f ms, holds %lld", on ? "on" : "off", s.active, longest[on],
                 st.hiccup_ms, st.period_ms, (long long)st.headroom_holds);
        mt_admit_free(a);
    }
    /* the largest level whose median leaves the drain: 2 m + h <= 160 */
    int nh = 0;
    sim ref;
    sim_init(&ref, sv);
    for (int x = 1; x < 100; x++)
        if (2 * true_step(&ref, x) + sv.hiccup_ms <= 160)
            nh = x;
    /* Past nh a hiccup's drain overruns the tick after it. Whether the
     * 26 hiccups of a run land on steps slow enough to show it is chance:
     * over MT_ADMIT_SEED 1-20 the longest run without the headroom was 1
     * to 4 (1 once), the level 35 or 36 every time. So the level is what
     * is asserted. With the headroom the level was 29 to 32: the
     * controller knows the median and the hiccup only from the ticks (it
     * measures the 30 ms hiccup as 41-47 ms). */
    ok(level[0] > nh, "headroom off: the probe goes past the drain's level, where a hiccup "
       "overruns the tick after it too (%d > %d; longest late run %d)", level[0], nh,
       longest[0]);
    ok(longest[1] <= 1, "headroom on: no run of late ticks after warm-up (longest %d, at %d)",
       longest[1], level[1]);
    ok(level[1] <= nh + 1 && level[1] >= nh - 2,
       "headroom on: settles near the drain's level (%d; %d - 2 to %d + 1)", level[1], nh, nh);
    /* the signal of a hiccup tick is the hiccup plus its own jitter (and,
     * in this simulator, the overrun it adds to its own late_ms) */
    ok(hic >= 0.9 * sv.hiccup_ms && hic < 2 * sv.hiccup_ms,
       "headroom: the hiccup measured from the ticks (%.1f ms; %.0f)", hic, sv.hiccup_ms);
    ok(holds >= 1, "headroom: the probe was held back (%lld)", (long long)holds);
}

static void test_static(void)
{
    sim s;
    sim_init(&s, (server){ .a = 3, .b = 1.5 });
    mt_admit_opts o;
    mt_admit_opts_default(&o);
    char err[128];
    ok(mt_admit_policy_parse("static:7", &o, err, sizeof err) == 0 && o.static_n == 7,
       "static:7 parses");
    mt_admit *a = make(&o, &s);
    if (!a)
        return;
    sim_run(&s, a, 200);
    is_int(s.max_active, 7, "static:7 caps at 7");
    is_int(mt_admit_limit(a), 7, "static:7 limit is 7");
    ok(s.rejects > 150, "static: the rest rejected (%d)", s.rejects);
    mt_admit_free(a);
}

/* mt_admit_reset: a controller that has run, reset, runs the same stream
 * to the same state as a new one (the fuzz harness reuses controllers). */
static void test_reset(void)
{
    static const int pols[] = {MT_POL_METRONOME, MT_POL_AIMD, MT_POL_GRADIENT};
    for (int k = 0; k < 3; k++) {
        sim s;
        mt_admit_opts o;
        mt_admit *a = start(&s, (server){ .a = 5, .b = 2 }, pols[k], 0, &o);
        mt_admit *b = start(&s, (server){ .a = 5, .b = 2 }, pols[k], 0, &o);
        if (!a || !b)
            return;
        sim_init(&s, (server){ .a = 9, .b = 3, .hiccup_every = 50, .hiccup_ms = 200 });
        sim_run(&s, a, 1500);      /* other history first */
        mt_admit_reset(a);
        sim_init(&s, (server){ .a = 5, .b = 2 });
        sim_run(&s, a, 1200);
        mt_admit_stats sa, sb;
        mt_admit_get_stats(a, &sa);
        int la = mt_admit_limit(a);
        sim_init(&s, (server){ .a = 5, .b = 2 });
        sim_run(&s, b, 1200);
        mt_admit_get_stats(b, &sb);
        ok(la == mt_admit_limit(b) && sa.ticks == sb.ticks && sa.requests == sb.requests &&
           sa.accepted == sb.accepted && sa.rejected == sb.rejected &&
           sa.levels == sb.levels && sa.resets == sb.resets && sa.fit_a == sb.fit_a &&
           sa.fit_b == sb.fit_b,
           "reset (policy %d): the same run as a new controller (limit %d = %d, "
           "accepted %lld = %lld)", pols[k], la, mt_admit_limit(b),
           (long long)sa.accepted, (long long)sb.accepted);
        mt_admit_free(a);
        mt_admit_free(b);
    }
}

static void test_hold(void)
{
    /* a request that arrives while metronome waits is held, then rejected
     * once hold_ms passes without a fresh signal */
    sim s;
    sim_init(&s, (server){ .a = 5, .b = 2 });
    mt_admit_opts o;
    mt_admit_opts_default(&o);
    o.hold_ms = 100;
    o.stale_ticks = 10000;
    mt_admit *a = make(&o, &s);
    if (!a)
        return;
    mt_admit_request(a, 1, 0);       /* no tick yet: accepted to learn */
    is_int(s.accepts, 1, "metronome: the first request is accepted (to learn)");
    mt_admit_request(a, 2, 0.01);
    is_int(s.accepts + s.rejects, 1, "metronome: the second is held while waiting");
    mt_tick t;
    memset(&t, 0, sizeof t);
    t.t = 0.2;                       /* the server never shows the admission */
    mt_admit_tick(a, &t);
    ok(s.rejects == 1 && s.accepts == 1, "metronome: held past --hold, then rejected");
    mt_admit_request(a, 3, 0.25);
    mt_admit_finish(a);
    is_int(s.rejects, 2, "finish: held requests are rejected");
    mt_admit_free(a);
}

static void test_opts(void)
{
    mt_admit_opts o;
    char err[128];
    mt_admit_opts_default(&o);
    ok(mt_admit_opts_check(&o, err, sizeof err) == 0, "defaults are valid");
    ok(mt_admit_policy_parse("nope", &o, err, sizeof err) != 0, "unknown policy refused");
    like(err, "unknown policy", "and says so");
    ok(mt_admit_policy_parse("static:x", &o, err, sizeof err) != 0, "static:x refused");
    ok(mt_admit_policy_parse("static:-1", &o, err, sizeof err) != 0, "static:-1 refused");
    mt_admit_opts_default(&o);
    o.margin = 1.5;
    ok(mt_admit_opts_check(&o, err, sizeof err) != 0, "margin 1.5 refused");
    like(err, "margin", "naming the margin");
    mt_admit_opts_default(&o);
    o.beta = 1;
    mt_admit *a = NULL;
    ok(mt_admit_create(&o, NULL, NULL, &a, err, sizeof err) != 0 && !a,
       "create refuses bad options");
    mt_tick t;
    memset(&t, 0, sizeof t);
    t.step_ms = 3;
    t.late_ms = 9;
    t.p99_ms = 90;
    mt_admit_opts_default(&o);
    is_near(mt_admit_signal_of(&o, &t), 9, 1e-9, "service signal = max(step, late)");
    o.signal = MT_SIG_P99;
    is_near(mt_admit_signal_of(&o, &t), 90, 1e-9, "p99 signal");
}

int main(void)
{
    if (getenv("MT_ADMIT_SEED"))
        sim_seed = strtoull(getenv("MT_ADMIT_SEED"), NULL, 10);
    test_opts();
    test_runs();
    test_headroom();
    test_metronome_refusal();
    test_draining_not_born_bad();
    test_hold();
    test_static();
    test_reset();
    return tap_done();
}
