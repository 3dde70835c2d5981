/* admit.c: the admission policies behind mt-admit (see admit.h).
 *
 * Why per-level robust statistics: with a bounded KV cache the step time
 * of a batch is close to affine in its size (weights read once per step,
 * attention and MLP work per session), so the signal at concurrency x is
 * a + b x plus noise and the occasional outlier (a page fault, a noisy
 * neighbour, a catch-up round). A median and MAD per level ignore the
 * outliers; a ring per level with an age limit forgets old behaviour; a
 * weighted affine fit over the level estimates, with its standard error,
 * extrapolates to the largest level that stays under the target, and the
 * uncertainty shrinks as the controller climbs and observes more levels.
 */
#include "util/errmsg.h"
#include "admit/admit.h"
#include "util/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 256          /* samples kept per level */
#define QUEUE_MAX 1024    /* held requests */
#define MIN_LEVEL_N 4     /* samples before a level counts in the fit */
#define HICCUP_RING 1024  /* hiccups kept: a falling sequence (hiccup_add) */
#define DRAIN_SPAN 8      /* ticks over which a late run's draining is seen */
/* The statistics of a level's samples, robust estimates of a roughly
 * normal latency (median and MAD; Rousseeuw & Croux 1993 for the factors):
 *   sigma         = MAD_TO_SIGMA x MAD x the small-sample factor (mad_small_n)
 *   var(median)   = VAR_MEDIAN x sigma^2 / n       (pi/2: the median's
 *                                                    efficiency for a normal)
 *   var(sigma)    = VAR_MAD_SIGMA x sigma^2 / n    (a MAD-based sigma's)
 * and a spread never under SIGMA_FLOOR_REL x median + SIGMA_FLOOR_MS
 * (timings are quantised: a level of identical samples is not certain). */
#define MAD_TO_SIGMA    1.4826
#define VAR_MEDIAN      1.5708
#define VAR_MAD_SIGMA   1.36
#define SIGMA_FLOOR_REL 0.01
#define SIGMA_FLOOR_MS  0.02
/* The fitted lines are only a model: this share of the prediction is
 * added as model error (metronome_predict). */
#define MODEL_ERR_REL   0.015
/* A change point (metronome_change): the recent median is further from the
 * line than CHANGE_SE standard errors plus CHANGE_REL of the prediction. */
#define CHANGE_SE       4.0
#define CHANGE_REL      0.1
/* A late run is draining when its lateness falls by DRAIN_FRAC of the
 * budget a tick on average over DRAIN_SPAN ticks (late_run_add). */
#define DRAIN_FRAC      0.05
/* gradient: the most one update may cut the limit by (x 0.5). */
#define GRADIENT_MIN    0.5
#define LATE_RUN 25       /* ticks of lateness born at a level, without
                             recovery, that mark the level as too many (a
                             hiccup's backlog drains sooner below the wall;
                             a run draining at 5% of the budget a tick or
                             more is recovery: late_run_add) */

typedef struct level {
    float   y[RING];
    float   sig[RING];  /* the tick's signal (lateness included), for the probe */
    int64_t tick[RING];
    int     n, head;
    /* the going-above test (metronome_predict): its last verdict, and the
     * sample count and tick it was taken at */
    int     above_ok, above_n;
    double  above_ms;       /* the estimate that verdict was taken on */
    int64_t above_tick;
    /* the probe's test (metronome_probe), looked at the same way; with
     * the median of the level's signal and its standard error then, for
     * the headroom test (taken at every tick: the hiccups change) */
    int     probe_ok, probe_n;
    int64_t probe_tick;
    double  probe_med, probe_med_se;
    int     held_back;      /* the headroom test holds the probe back */
} level;

typedef struct held {
    uint32_t id;
    double   t;
} held;

struct mt_admit {
    mt_admit_opts o;
    mt_admit_emit_fn emit;
    void   *ctx;
    mt_admit_stats st;
    int     have_tick;
    mt_tick last;
    double  now;            /* server seconds, from the lines */
    int     limit;
    int     inflight;       /* accepts not yet visible in a tick */
    held    q[QUEUE_MAX];
    int     nq;
    /* metronome */
    level  *lv;             /* [MT_ADMIT_MAX_LEVEL + 1] */
    int     lv_top;         /* highest level with a sample: the scans stop
                               there (each level is a page of its own) */
    int     waiting;        /* an accept not yet confirmed by the ticks */
    uint32_t wait_id;
    int64_t wait_admitted;  /* server's admitted total before the accept */
    int64_t wait_rejected;
    int64_t wait_since;     /* tick count at the accept */
    int     settle_left;    /* ticks still to observe at the new level */
    int     hard_cap;       /* lowest level seen over the target, or 0 */
    int     why;            /* what holds the limit where it is (WHY_*) */
    double  why_ms;         /* WHY_MODEL: the prediction for limit + 1;
                               WHY_SEEN: the level's measured p99 estimate */
    int64_t reset_tick;     /* samples before this tick are forgotten */
    int     behind;         /* the last tick's lateness was over budget */
    int64_t *born_bad;      /* [level]: tick at which lateness over budget
                               was born at that level (held LATE_RUN ticks), or 0 */
    int     level_clean;    /* the current level has had lateness in budget */
    int     late_run;       /* consecutive late ticks at the current level */
    float   late_hist[DRAIN_SPAN];  /* the run's last late_ms, a ring */
    struct line_fit_s { double A, B, sw, xbar, sxx, chi; int k, prop; } fit_m;
    /* hiccups: a tick's signal over its level's median, born on a tick
     * in budget; only those no later one is as large as (a falling
     * sequence, oldest first, in a ring): its first is the largest of the
     * window */
    float   hic[HICCUP_RING];
    int64_t hic_tick[HICCUP_RING];
    int     hic_n, hic_first;
    int     have_first;     /* the first tick line (period estimate) */
    int64_t first_tick;
    double  first_t;
    /* aimd, gradient */
    int     since_update;
    double  interval_max, interval_sum;
    int     interval_n;
    double  glimit;         /* gradient: real-valued limit */
    double *mins;           /* gradient: per-interval medians, a ring */
    int     nmins, mins_head, mins_cap;
    int     cooldown;
};

void mt_admit_opts_default(mt_admit_opts *o)
{
    memset(o, 0, sizeof *o);
    o->policy = MT_POL_METRONOME;
    o->signal = MT_SIG_SERVICE;
    o->budget_ms = 80;
    o->margin = 0.8;
    o->hold_ms = 1000;
    o->max_limit = MT_ADMIT_MAX_LEVEL;
    o->settle_ticks = 6;
    o->stale_ticks = 40;
    o->forget_ticks = 3000;
    o->z = 2.0;
    o->quantile_z = 2.33;
    o->probe = 1.0;
    o->probe_ticks = 48;
    o->headroom = 1;
    o->interval_ticks = 12;
    o->beta = 0.7;
    o->initial = 1;
    o->tolerance = 2.0;
    o->long_ticks = 600;
    o->smoothing = 0.2;
    o->queue = -1;
    o->static_n = 0;
}

const char *mt_admit_policy_name(mt_admit_policy p)
{
    switch (p) {
    case MT_POL_METRONOME: return "metronome";
    case MT_POL_AIMD: return "aimd";
    case MT_POL_GRADIENT: return "gradient";
    case MT_POL_STATIC: return "static";
    }
    return "?";
}

int mt_admit_policy_parse(const char *s, mt_admit_opts *o, char *err, size_t errlen)
{
    if (!strcmp(s, "metronome")) { o->policy = MT_POL_METRONOME; return 0; }
    if (!strcmp(s, "aimd")) { o->policy = MT_POL_AIMD; return 0; }
    if (!strcmp(s, "gradient")) { o->policy = MT_POL_GRADIENT; return 0; }
    if (!strncmp(s, "static:", 7)) {
        char *end;
        long n = strtol(s + 7, &end, 10);
        if (end == s + 7 || *end || n < 0 || n > MT_ADMIT_MAX_LEVEL) {
            mt_set_err(err, errlen, "policy '%s': static:N needs N in 0..%d", s,
                     MT_ADMIT_MAX_LEVEL);
            return -1;
        }
        o->policy = MT_POL_STATIC;
        o->static_n = (int)n;
        return 0;
    }
    mt_set_err(err, errlen, "unknown policy '%s' (metronome, aimd, gradient, static:N)", s);
    return -1;
}

int mt_admit_opts_check(const mt_admit_opts *o, char *err, size_t errlen)
{
#define BAD(cond, ...) do { if (cond) { mt_set_err(err, errlen, __VA_ARGS__); return -1; } } while (0)
    BAD(!(o->budget_ms > 0 && o->budget_ms < 1e6), "budget must be > 0 ms");
    BAD(!(o->margin > 0 && o->margin <= 1), "margin must be in (0, 1]");
    BAD(!(o->hold_ms >= 0 && o->hold_ms < 1e7), "hold must be >= 0 ms");
    BAD(o->max_limit < 0 || o->max_limit > MT_ADMIT_MAX_LEVEL, "max limit must be 0..%d",
        MT_ADMIT_MAX_LEVEL);
    BAD(o->settle_ticks < 1 || o->settle_ticks > 10000, "settle ticks must be 1..10000");
    BAD(o->stale_ticks < 1 || o->stale_ticks > 100000, "stale ticks must be 1..100000");
    BAD(o->forget_ticks < 1, "forget ticks must be >= 1");
    BAD(!(o->z >= 0 && o->z <= 20), "z must be in 0..20");
    BAD(!(o->quantile_z >= 0 && o->quantile_z <= 20), "quantile z must be in 0..20");
    BAD(!(o->probe >= 0 && o->probe <= 1), "probe must be in [0, 1]");
    BAD(o->probe_ticks < MIN_LEVEL_N || o->probe_ticks > 100000,
        "probe ticks must be %d..100000", MIN_LEVEL_N);
    BAD(o->headroom != 0 && o->headroom != 1, "headroom must be 0 or 1");
    BAD(o->interval_ticks < 1 || o->interval_ticks > 100000, "interval must be 1..100000 ticks");
    BAD(!(o->beta > 0 && o->beta < 1), "beta must be in (0, 1)");
    BAD(o->initial < 0 || o->initial > MT_ADMIT_MAX_LEVEL, "initial limit out of range");
    BAD(!(o->tolerance >= 1 && o->tolerance <= 100), "tolerance must be in 1..100");
    BAD(o->long_ticks < 1 || o->long_ticks > 1000000, "long window must be 1..1000000 ticks");
    BAD(!(o->smoothing > 0 && o->smoothing <= 1), "smoothing must be in (0, 1]");
    BAD(o->queue > MT_ADMIT_MAX_LEVEL, "queue allowance out of range");
    BAD(o->static_n < 0 || o->static_n > MT_ADMIT_MAX_LEVEL, "static N out of range");
#undef BAD
    return 0;
}

double mt_admit_signal_of(const mt_admit_opts *o, const mt_tick *t)
{
    if (o->signal == MT_SIG_P99)
        return t->p99_ms;
    return t->step_ms > t->late_ms ? t->step_ms : t->late_ms;
}

/* The limit a policy starts from. */
static void start_limit(mt_admit *a)
{
    const mt_admit_opts *o = &a->o;
    switch (o->policy) {
    case MT_POL_STATIC: a->limit = o->static_n; break;
    case MT_POL_AIMD:
    case MT_POL_GRADIENT: a->limit = o->initial; a->glimit = o->initial; break;
    case MT_POL_METRONOME: a->limit = 1; break;   /* one, to start learning */
    }
    if (a->limit > o->max_limit)
        a->limit = o->max_limit;
}

int mt_admit_create(const mt_admit_opts *o, mt_admit_emit_fn emit, void *ctx,
                    mt_admit **out, char *err, size_t errlen)
{
    *out = NULL;
    if (mt_admit_opts_check(o, err, errlen) != 0)
        return -1;
    mt_admit *a = mt_calloc_or_err(1, sizeof *a, err, errlen, NULL);
    if (!a)
        return -1;
    a->o = *o;
    a->emit = emit;
    a->ctx = ctx;
    a->lv = calloc(MT_ADMIT_MAX_LEVEL + 1, sizeof *a->lv);
    a->born_bad = calloc(MT_ADMIT_MAX_LEVEL + 1, sizeof *a->born_bad);
    a->mins_cap = o->long_ticks / o->interval_ticks + 1;
    a->mins = calloc((size_t)a->mins_cap, sizeof *a->mins);
    if (!a->lv || !a->mins || !a->born_bad) {
        mt_admit_free(a);
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    start_limit(a);
    *out = a;
    return 0;
}

void mt_admit_reset(mt_admit *a)
{
    mt_admit_opts o = a->o;
    mt_admit_emit_fn emit = a->emit;
    void *ctx = a->ctx;
    level *lv = a->lv;
    int64_t *born_bad = a->born_bad;
    double *mins = a->mins;
    int mins_cap = a->mins_cap;
    /* levels above lv_top were never written */
    memset(lv, 0, (size_t)(a->lv_top + 1) * sizeof *lv);
    memset(born_bad, 0, (MT_ADMIT_MAX_LEVEL + 1) * sizeof *born_bad);
    memset(mins, 0, (size_t)mins_cap * sizeof *mins);
    memset(a, 0, sizeof *a);
    a->o = o;
    a->emit = emit;
    a->ctx = ctx;
    a->lv = lv;
    a->born_bad = born_bad;
    a->mins = mins;
    a->mins_cap = mins_cap;
    start_limit(a);
}

void mt_admit_free(mt_admit *a)
{
    if (!a)
        return;
    free(a->lv);
    free(a->born_bad);
    free(a->mins);
    free(a);
}

/* ---- metronome: per-level robust estimates and the affine fit ---------- */

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* Median and sigma (MAD x 1.4826, with the small-sample correction of
 * Croux and Rousseeuw, floored) of a level over its samples that are
 * younger than forget_ticks and not older than the last change point;
 * with recent > 0 only the newest `recent` of them. Returns the count. */
/* The least spread a level of median m is taken to have. */
static double sigma_floor(double m) { return SIGMA_FLOOR_REL * m + SIGMA_FLOOR_MS; }

static int level_est_of(const mt_admit *a, const level *l, int recent, int of_sig,
                        double *med, double *sigma)
{
    float v[RING];
    int n = 0;
    for (int k = 0; k < l->n; k++) {
        int i = (l->head - 1 - k + RING) % RING;     /* newest first */
        if (a->st.ticks - l->tick[i] > a->o.forget_ticks || l->tick[i] < a->reset_tick)
            break;
        v[n++] = of_sig ? l->sig[i] : l->y[i];
        if (recent > 0 && n == recent)
            break;
    }
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    double m = mt_stats_median_sorted(v, (size_t)n);
    for (int i = 0; i < n; i++)
        v[i] = (float)fabs(v[i] - m);
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    /* the MAD's small-sample correction factors (Croux & Rousseeuw 1992),
     * n / (n - 0.8) beyond */
    static const double mad_small_n[10] = {0, 0, 1.196, 1.495, 1.363, 1.206, 1.200,
                                           1.140, 1.129, 1.107};
    double c = n < 10 ? mad_small_n[n] : (double)n / (n - 0.8);
    double s = MAD_TO_SIGMA * c * mt_stats_median_sorted(v, (size_t)n);
    double floor_s = sigma_floor(m);
    *med = m;
    *sigma = s > floor_s ? s : floor_s;
    return n;
}

/* level_est_of over what the model learns (step_ms, or p99_ms) */
static int level_est(const mt_admit *a, const level *l, int recent, double *med,
                     double *sigma)
{
    return level_est_of(a, l, recent, 0, med, sigma);
}

static void level_add(mt_admit *a, int x, double y, double sig)
{
    if (x < 1 || x > MT_ADMIT_MAX_LEVEL || !isfinite(y) || !isfinite(sig))
        return;
    level *l = &a->lv[x];
    if (x > a->lv_top)
        a->lv_top = x;
    l->y[l->head] = (float)y;
    l->sig[l->head] = (float)sig;
    l->tick[l->head] = a->st.ticks;
    l->head = (l->head + 1) % RING;
    if (l->n < RING)
        l->n++;
}

/* A weighted least-squares line y ~ A + B x with known variances; chi is
 * the residual scale (>= 1) that widens the error when the line misfits. */
/* struct line_fit_s (declared in struct mt_admit): prop: one level, or
 * levels too close, a line through the origin */
typedef struct line_fit_s line_fit;

static void fit_line(const double *x, const double *y, const double *var, int k,
                     line_fit *f)
{
    memset(f, 0, sizeof *f);
    f->chi = 1;
    f->k = k;
    if (k == 0)
        return;
    double swx = 0, swy = 0;
    for (int i = 0; i < k; i++) {
        double w = 1 / var[i];
        f->sw += w; swx += w * x[i]; swy += w * y[i];
    }
    f->xbar = swx / f->sw;
    double ybar = swy / f->sw, sxy = 0;
    for (int i = 0; i < k; i++) {
        double w = 1 / var[i];
        f->sxx += w * (x[i] - f->xbar) * (x[i] - f->xbar);
        sxy += w * (x[i] - f->xbar) * (y[i] - ybar);
    }
    /* levels too close together to fix a slope (relative to their own
     * noise) fall back to the steepest line an affine y with A >= 0 can
     * have: through the origin; conservative */
    double slope_se = f->sxx > 0 ? 1 / sqrt(f->sxx) : INFINITY;
    if (k < 2 || f->sxx <= 0 || (f->xbar > 0 && slope_se * f->xbar > ybar)) {
        f->prop = 1;
        f->B = ybar / f->xbar;
        f->A = 0;
        return;
    }
    f->B = sxy / f->sxx;
    f->A = ybar - f->B * f->xbar;
    if (f->B < 0) {     /* noise: latency does not fall with load */
        f->B = 0;
        f->A = ybar;
    }
    if (k > 2) {
        double r2 = 0;
        for (int i = 0; i < k; i++) {
            double r = y[i] - (f->A + f->B * x[i]);
            r2 += r * r / var[i];
        }
        f->chi = r2 / (k - 2);
        if (f->chi < 1)
            f->chi = 1;
    }
}

static double fit_at(const line_fit *f, double x) { return f->A + f->B * x; }

static double fit_var(const line_fit *f, double x)
{
    if (f->k == 0)
        return 0;
    double v = f->chi / f->sw;
    double d = x - f->xbar;
    if (f->prop)     /* the slope is as uncertain as the mean, relatively */
        return v + d * d * v / (f->xbar * f->xbar);
    return v + f->chi * d * d / f->sxx;
}

#define FIT_MAX 256

/* The variance of the fitted slope B (0 before a fit). */
static double fit_slope_var(const line_fit *f)
{
    if (!(f->k > 0 && f->sw > 0))
        return 0;
    return f->prop ? f->chi / f->sw / (f->xbar * f->xbar)
                   : (f->sxx > 0 ? f->chi / f->sxx : 0);
}

/* The tick period (ms), from the lines' own tick numbers and times: a
 * tick that starts late (after an overrun) keeps its slot's number, so
 * the ratio over the whole run is the period whatever the delays; the
 * budget until two ticks are known. */
static double tick_period_ms(const mt_admit *a)
{
    if (a->have_first && a->have_tick && a->last.tick > a->first_tick &&
        a->last.t > a->first_t)
        return 1000 * (a->last.t - a->first_t) / (double)(a->last.tick - a->first_tick);
    return a->o.budget_ms;
}

/* The largest hiccup (ms) of the last forget_ticks ticks, 0 if none. */
static double hiccup_max(mt_admit *a)
{
    while (a->hic_n > 0 && a->st.ticks - a->hic_tick[a->hic_first] > a->o.forget_ticks) {
        a->hic_first = (a->hic_first + 1) % HICCUP_RING;
        a->hic_n--;
    }
    return a->hic_n > 0 ? a->hic[a->hic_first] : 0;
}

/* The headroom test of the probe: going from x to x + 1 is kept only if
 * the tick after the largest recent hiccup would still be in the ceiling
 * at x + 1. Why: a tick that runs past the period delays the next one by
 * the overrun, and ticks drain that delay at P - m a tick (P the period,
 * m the level's median step); the delay shows in late_ms. A hiccup of h
 * over the median, at a level whose median is m, overruns by m + h - P;
 * the next tick then ends at about m + (m + h - P). Kept under the
 * ceiling, a hiccup costs at most the one tick it happened in; past it,
 * the late ticks run on for (m + h - P) / (P - m) ticks (at m = 73 of 80
 * ms a 30 ms hiccup is 4 late ticks in a row). The statistical test
 * (metronome_probe) says the next level's p99 fits; this one says the
 * next level leaves room to recover from what this host has been seen to
 * do, measured, not assumed: h is the largest hiccup of the recent ticks,
 * P comes from the tick lines, m from the level now running plus the
 * fitted slope, with z standard errors of both. */
static int headroom_ok(mt_admit *a, const level *l, const line_fit *fm, double ceiling)
{
    if (!a->o.headroom)
        return 1;
    double slope_var = fit_slope_var(fm);
    double m1 = l->probe_med + fm->B +
                a->o.z * sqrt(l->probe_med_se * l->probe_med_se + slope_var);
    double period = tick_period_ms(a), h = hiccup_max(a);
    double carry = m1 + h - period;
    return m1 + (carry > 0 ? carry : 0) <= ceiling;
}

/* The probe: may the controller go from level x to x + 1, above what the
 * margin allows? The margin is what a line extrapolated over levels far
 * below may be trusted with; near the wall the level now running is the
 * better evidence, and one level up is what the fitted slope of p99 in n
 * (slope of the median plus qz x slope of the spread) adds to it. So: x's
 * own p99 estimate (median + qz sigma, sigma never under the fitted
 * spread) plus that slope, plus z standard errors of both, under the
 * ceiling (probe x budget). The level's estimate is of the signal itself
 * (lateness included), not of the compute the line models: near the wall
 * a tick-batched server's frames wait on the tick before theirs, and that
 * wait is what the budget is about. Only on a long look (probe_ticks samples:
 * the standard error shrinks as 1/sqrt(n), so the last levels before
 * the wall are told apart from it), and looked at again only when the
 * count has doubled or a ring of new samples came, as the going-above
 * test: a test repeated every tick would pass by chance. */
static int metronome_probe(mt_admit *a, int x, const line_fit *fm, const line_fit *fs,
                           double ceiling)
{
    level *l = &a->lv[x];
    double m, s, qz = a->o.quantile_z;
    int n = level_est_of(a, l, 0, 1, &m, &s);
    if (n < l->probe_n)              /* forgotten, or a change point */
        l->probe_n = 0;
    if (n >= a->o.probe_ticks &&
        (l->probe_n == 0 || n >= 2 * l->probe_n || a->st.ticks - l->probe_tick >= RING)) {
        double sf = fit_at(fs, x);
        if (s < sf)
            s = sf;
        double se2 = s * s * (VAR_MEDIAN + qz * qz * VAR_MAD_SIGMA) / n;
        double slope = fm->B + qz * (fs->B > 0 ? fs->B : 0);
        double slope_var = fit_slope_var(fm);
        int was = l->probe_n > 0 && l->probe_ok;
        l->probe_ok = m + qz * s + slope + a->o.z * sqrt(se2 + slope_var) <= ceiling;
        l->probe_n = n;
        l->probe_tick = a->st.ticks;
        l->probe_med = m;
        l->probe_med_se = s * sqrt(VAR_MEDIAN / n);
        if (l->probe_ok && !was)
            a->st.probes++;
    }
    if (!(l->probe_n > 0 && l->probe_ok))
        return 0;
    if (!headroom_ok(a, l, fm, ceiling)) {
        if (!l->held_back)
            a->st.headroom_holds++;
        l->held_back = 1;
        return 0;
    }
    l->held_back = 0;
    return 1;
}

/* What holds the metronome's limit where it is, for the refusal's
 * reason: still learning (one level at a time, each measured before the
 * next), the model's prediction for one more, a level measured over the
 * ceiling, the level now running measured too near the target, or the
 * configured maximum. */
enum { WHY_LEARNING, WHY_MODEL, WHY_SEEN, WHY_NEAR, WHY_MAX };

/* The ceiling the probe climbs to (ms): probe x budget, or the margin's
 * target when the probe is off. */
static double metronome_ceiling(const mt_admit *a)
{
    double p = a->o.probe > a->o.margin ? a->o.probe : a->o.margin;
    return p * a->o.budget_ms;
}

/* The levels seen with enough samples, as points for the fits: level x,
 * its sample count, median m and spread s (MAD sigma), with their
 * variances. */
typedef struct level_pts {
    double xs[FIT_MAX], ms[FIT_MAX], mv[FIT_MAX], ss[FIT_MAX], sv[FIT_MAX];
    int    ns[FIT_MAX];
    int    k;
} level_pts;

/* Gathers the levels into pt and returns the lowest level seen over the
 * ceiling, directly (its m + qz s) or by lateness born there; 0: none. */
static int gather_levels(mt_admit *a, double ceiling, level_pts *pt)
{
    int k = 0, cap = 0;
    for (int x = 1; x <= a->lv_top && k < FIT_MAX; x++) {
        if (!a->lv[x].n)
            continue;
        double m, s;
        int n = level_est(a, &a->lv[x], 0, &m, &s);
        if (n < MIN_LEVEL_N)
            continue;
        if (m + a->o.quantile_z * s > ceiling && (!cap || x < cap))
            cap = x;     /* direct evidence beats any extrapolation */
        pt->xs[k] = x;
        pt->ns[k] = n;
        pt->ms[k] = m;
        pt->mv[k] = VAR_MEDIAN * s * s / n;
        pt->ss[k] = s;
        pt->sv[k] = VAR_MAD_SIGMA * s * s / n;
        k++;
    }
    pt->k = k;
    /* lateness born at a level (not inherited from a higher one) is
     * direct evidence too: that level cannot keep up, whatever its mean
     * compute says (e.g. a server that cannot catch up after a hiccup) */
    for (int x = 1; x <= MT_ADMIT_MAX_LEVEL; x++) {
        int64_t b = a->born_bad[x];
        if (b > 0 && b >= a->reset_tick && a->st.ticks - b <= a->o.forget_ticks) {
            if (!cap || x < cap)
                cap = x;
            break;
        }
    }
    return cap;
}

/* Fits the median line fm and the spread line fs over pt (k >= 1).
 * Weights from each level's own noisy sigma would favour the levels
 * that happened to look quiet (biasing both lines low): fit the
 * spread with count weights first, then weight both fits by the
 * spread that line gives. */
static void fit_levels(level_pts *pt, line_fit *fm, line_fit *fs)
{
    int k = pt->k;
    for (int i = 0; i < k; i++)
        pt->sv[i] = 1.0 / (double)pt->ns[i];
    fit_line(pt->xs, pt->ss, pt->sv, k, fs);
    for (int i = 0; i < k; i++) {
        double sf = fit_at(fs, pt->xs[i]);
        double fl = sigma_floor(pt->ms[i]);
        if (sf < fl)
            sf = fl;
        pt->sv[i] = VAR_MAD_SIGMA * sf * sf / pt->ns[i];
        pt->mv[i] = VAR_MEDIAN * sf * sf / pt->ns[i];
    }
    fit_line(pt->xs, pt->ss, pt->sv, k, fs);
    fit_line(pt->xs, pt->ms, pt->mv, k, fm);
}

/* The largest level whose predicted p99, with z standard errors of the
 * fits and the model's own error, stays under target (a->why says what
 * stopped it). */
static int largest_under(mt_admit *a, const line_fit *fm, const line_fit *fs, double target)
{
    double qz = a->o.quantile_z;
    int best = 0;
    a->why = WHY_MAX;
    for (int x = 1; x <= a->o.max_limit; x++) {
        double s = fit_at(fs, x);
        double floor_s = sigma_floor(fit_at(fm, x));
        if (s < floor_s)
            s = floor_s;
        double me = MODEL_ERR_REL * fit_at(fm, x);
        double pred = fit_at(fm, x) + qz * s +
                      a->o.z * sqrt(fit_var(fm, x) + qz * qz * fit_var(fs, x) + me * me);
        if (pred > target) {
            a->why = WHY_MODEL;
            a->why_ms = pred;
            break;
        }
        best = x;
    }
    return best;
}

/* The level now running (xa) is direct evidence too, and the line's
 * extrapolation one step up is only as good as it: go above it only
 * once its own p99 estimate, with that estimate's standard error
 * (median and MAD sigma of its n samples), is under the target. Far
 * below the target a few ticks show that; near it the level is held
 * until it has enough ticks to tell. A test repeated at every tick
 * would pass by chance sooner or later (the estimate wanders, and one
 * lucky stretch is enough), so the verdict is taken again only when
 * the level's sample count has doubled since the last one, or a whole
 * ring of new samples has come: a handful of looks per level. Returns
 * best, or xa where the level is held. */
static int hold_at_running(mt_admit *a, int best, int xa, const line_fit *fs, double target)
{
    double qz = a->o.quantile_z;
    level *l = &a->lv[xa];
    double m, s;
    int n = level_est(a, l, 0, &m, &s);
    if (n < l->above_n)          /* forgotten, or a change point */
        l->above_n = 0;
    if (n >= MIN_LEVEL_N &&
        (l->above_n == 0 || n >= 2 * l->above_n || a->st.ticks - l->above_tick >= RING)) {
        /* a few ticks can look tight by chance: the spread is never
         * taken under what the line fitted over all levels says */
        double sf = fit_at(fs, xa);
        if (s < sf)
            s = sf;
        double se = s * sqrt((VAR_MEDIAN + qz * qz * VAR_MAD_SIGMA) / n);
        l->above_ms = m + qz * s + a->o.z * se;
        l->above_ok = l->above_ms <= target;
        l->above_n = n;
        l->above_tick = a->st.ticks;
    }
    if (l->above_n == 0 || !l->above_ok) {
        best = xa;
        a->why = l->above_n == 0 ? WHY_LEARNING : WHY_NEAR;
        a->why_ms = l->above_ms;
    }
    return best;
}

/* Fits the median m(x) and the spread s(x) of the signal over the levels,
 * then returns the largest x whose m + qz s, plus z standard errors of
 * that estimate, stays under margin x budget; never at or above a level
 * already seen over the ceiling (probe x budget). From there, the probe
 * (metronome_probe) goes on one level at a time. */
static int metronome_predict(mt_admit *a)
{
    double target = a->o.margin * a->o.budget_ms;
    double ceiling = metronome_ceiling(a);
    level_pts pt;
    int cap = gather_levels(a, ceiling, &pt);
    a->st.levels = pt.k;
    a->hard_cap = cap;
    a->why = WHY_LEARNING;
    if (pt.k == 0)
        return 1;                /* nothing learnt: one session to learn from */
    line_fit fm, fs;
    fit_levels(&pt, &fm, &fs);
    a->fit_m = fm;
    a->st.fit_a = fm.A;
    a->st.fit_b = fm.B;
    a->st.fit_sa = fs.A;
    a->st.fit_sb = fs.B;
    int best = largest_under(a, &fm, &fs, target);
    if (cap && best >= cap) {
        best = cap - 1;
        a->why = WHY_SEEN;
        a->why_ms = ceiling;
    }
    int xa = a->have_tick ? (int)a->last.active : 0;
    if (best > xa && xa >= 1 && xa <= MT_ADMIT_MAX_LEVEL)
        best = hold_at_running(a, best, xa, &fs, target);
    if (ceiling > target && best <= xa && xa >= 1 && xa < MT_ADMIT_MAX_LEVEL &&
        xa + 1 <= a->o.max_limit && (!cap || xa + 1 < cap) &&
        metronome_probe(a, xa, &fm, &fs, ceiling))
        best = xa + 1;
    return best;
}

/* A change point: the newest samples of the current level disagree with
 * what the fit says about it (the server got slower or faster, another
 * tenant arrived): everything learnt before them is forgotten. */
static void metronome_change(mt_admit *a, int x)
{
    enum { RECENT = 24 };
    if (x < 1 || x > MT_ADMIT_MAX_LEVEL || a->st.levels < 2 || a->fit_m.k < 2)
        return;
    double m, s;
    if (level_est(a, &a->lv[x], RECENT, &m, &s) < RECENT)
        return;
    double pred = fit_at(&a->fit_m, x);
    double tol = CHANGE_SE * sqrt(VAR_MEDIAN * s * s / RECENT + fit_var(&a->fit_m, x)) +
                 CHANGE_REL * pred;
    if (fabs(m - pred) > tol) {
        a->reset_tick = a->st.ticks - RECENT + 1;
        a->st.resets++;
    }
}

/* What the model learns per level: the tick's compute time (a function of
 * the batch alone; lateness also carries the history of past overloads,
 * which would teach the model that a level is slow when only the backlog
 * of an earlier one is draining), or p99_ms with --signal p99. */
static double model_y(const mt_admit *a, const mt_tick *t)
{
    return a->o.signal == MT_SIG_P99 ? t->p99_ms : t->step_ms;
}

/* A hiccup: how far the signal of tick t (level x) went over the level's
 * median. Only on a tick whose predecessor was in budget: a delay carried
 * from an earlier tick (or an overload's growing backlog) is that tick's
 * hiccup, not a new one. */
static void hiccup_add(mt_admit *a, int x, double sig, int prev_behind)
{
    if (prev_behind || x < 1 || x > MT_ADMIT_MAX_LEVEL)
        return;
    double m, s;
    if (level_est_of(a, &a->lv[x], 0, 1, &m, &s) < MIN_LEVEL_N || !(sig > m))
        return;
    float h = (float)(sig - m);
    /* an older hiccup no larger than this one can never be the largest
     * again: dropped from the newest end (so the first stays the largest) */
    while (a->hic_n > 0 &&
           a->hic[(a->hic_first + a->hic_n - 1) % HICCUP_RING] <= h)
        a->hic_n--;
    if (a->hic_n == HICCUP_RING)     /* full: the smallest (newest) goes */
        a->hic_n--;
    int i = (a->hic_first + a->hic_n) % HICCUP_RING;
    a->hic[i] = h;
    a->hic_tick[i] = a->st.ticks;
    a->hic_n++;
}

/* One more late tick in the current level's run; returns the run's length.
 * A run whose lateness is draining (down by at least DRAIN_SPAN x DRAIN_FRAC
 * of the budget over the last DRAIN_SPAN ticks: a hiccup's backlog going) is
 * recovery, not a level that cannot keep up: it starts the count again.
 * A server that cannot catch up stays late without that fall. */
static int late_run_add(mt_admit *a, double late_ms)
{
    int i = a->late_run % DRAIN_SPAN;
    if (a->late_run >= DRAIN_SPAN &&
        late_ms < a->late_hist[i] - DRAIN_SPAN * DRAIN_FRAC * a->o.budget_ms) {
        a->late_run = 0;
        i = 0;
    }
    a->late_hist[i] = (float)late_ms;
    return ++a->late_run;
}

static void metronome_tick(mt_admit *a, const mt_tick *t, double y)
{
    int prev_behind = a->behind;
    a->behind = t->late_ms > a->o.budget_ms;
    if (!a->have_first) {
        a->have_first = 1;
        a->first_tick = t->tick;
        a->first_t = t->t;
    }
    int xa = (int)t->active;
    if (!a->have_tick || a->last.active != t->active) {
        a->level_clean = !a->behind;
        a->late_run = 0;
    } else if (!a->behind) {
        a->level_clean = 1;
        a->late_run = 0;
    } else if (a->level_clean && late_run_add(a, t->late_ms) >= LATE_RUN && xa >= 1 &&
               xa <= MT_ADMIT_MAX_LEVEL) {
        a->born_bad[xa] = a->st.ticks;
        a->st.late_levels++;
        a->level_clean = 0;
    }
    double sig = y;
    y = model_y(a, t);
    int x = (int)(t->stepped >= t->active ? t->active : t->stepped);
    int transient = a->have_tick && a->last.active != t->active;
    if (t->stepped > 0 && !transient) {
        hiccup_add(a, x, sig, prev_behind);
        level_add(a, x, y, sig);
    }
    a->st.hiccup_ms = hiccup_max(a);
    a->st.period_ms = tick_period_ms(a);
    if (a->waiting) {
        int shown = t->admitted > a->wait_admitted && t->stepped >= t->active;
        int refused = t->rejected > a->wait_rejected && t->admitted <= a->wait_admitted;
        if (refused || a->st.ticks - a->wait_since > a->o.stale_ticks) {
            a->waiting = 0;
        } else if (shown || a->settle_left < a->o.settle_ticks) {
            /* count ticks of the new level (or whatever it is now) */
            if (--a->settle_left <= 0)
                a->waiting = 0;
        }
    }
    if (t->stepped > 0 && !transient)
        metronome_change(a, x);
    a->limit = metronome_predict(a);
}

/* ---- aimd and gradient -------------------------------------------------- */

static void aimd_tick(mt_admit *a, const mt_tick *t, double y)
{
    double thr = a->o.margin * a->o.budget_ms;
    if (a->cooldown > 0)
        a->cooldown--;
    if (y > thr && a->cooldown == 0) {
        int l = (int)floor(a->limit * a->o.beta);
        a->limit = l < 1 ? 1 : l;
        a->cooldown = a->o.interval_ticks;
        a->since_update = 0;
        a->interval_max = 0;
        return;
    }
    if (y > a->interval_max)
        a->interval_max = y;
    if (++a->since_update >= a->o.interval_ticks) {
        if (a->interval_max <= thr && t->active + 1 >= a->limit &&
            a->limit < a->o.max_limit)
            a->limit++;
        a->since_update = 0;
        a->interval_max = 0;
    }
}

static void gradient_tick(mt_admit *a, const mt_tick *t, double y)
{
    if (t->stepped <= 0)
        return;              /* an idle tick says nothing about latency */
    a->interval_sum += y;
    if (y > a->interval_max)
        a->interval_max = y;
    a->interval_n++;
    if (++a->since_update < a->o.interval_ticks)
        return;
    double recent = a->interval_sum / a->interval_n;
    a->mins[a->mins_head] = recent;
    a->mins_head = (a->mins_head + 1) % a->mins_cap;
    if (a->nmins < a->mins_cap)
        a->nmins++;
    double mn = recent;
    for (int i = 0; i < a->nmins; i++)
        if (a->mins[i] < mn)
            mn = a->mins[i];
    double grad = mn * a->o.tolerance / (recent > 1e-6 ? recent : 1e-6);
    if (grad > 1) grad = 1;
    if (grad < GRADIENT_MIN) grad = GRADIENT_MIN;
    double queue = a->o.queue >= 0 ? a->o.queue : sqrt(a->glimit);
    double next = a->glimit * grad + queue;
    /* the limit only grows when it is in use (Gradient2's app-limited rule) */
    if (next > a->glimit && t->active + 1 < (int64_t)a->glimit)
        next = a->glimit;
    a->glimit = (1 - a->o.smoothing) * a->glimit + a->o.smoothing * next;
    if (a->glimit < 1) a->glimit = 1;
    if (a->glimit > a->o.max_limit) a->glimit = a->o.max_limit;
    a->limit = (int)floor(a->glimit);
    a->since_update = 0;
    a->interval_sum = 0;
    a->interval_max = 0;
    a->interval_n = 0;
}

/* ---- requests ----------------------------------------------------------- */

static void answer(mt_admit *a, uint32_t id, int accept, const char *reason)
{
    if (accept)
        a->st.accepted++;
    else
        a->st.rejected++;
    if (a->emit)
        a->emit(a->ctx, id, accept, reason);
}

/* 1 accept, 0 reject (reason filled), -1 hold. */
static int decide(mt_admit *a, char *reason, size_t cap)
{
    int64_t active = a->have_tick ? a->last.active : 0;
    if (a->o.policy == MT_POL_METRONOME) {
        if (a->waiting) {
            snprintf(reason, cap, "waiting for the last admission to show");
            return -1;
        }
        if (a->behind) {
            snprintf(reason, cap, "server running late (frames %.1f ms past "
                     "their deadline); retry later", a->last.late_ms);
            return 0;
        }
        if (active + a->inflight < a->limit)
            return 1;
        const char *s = a->limit == 1 ? "" : "s";
        if (a->why == WHY_LEARNING)
            snprintf(reason, cap, "warming up: admitting one at a time, %d "
                     "session%s measured so far; retry later", a->limit, s);
        else if (a->why == WHY_MODEL)
            /* rounded apart (the prediction up, the target down), so that a
             * prediction just past the target never reads as equal to it */
            snprintf(reason, cap, "server at its admission limit (%d session%s; "
                     "the model puts %d at %.1f ms, past the %.1f ms target); "
                     "retry later", a->limit, s, a->limit + 1,
                     ceil(a->why_ms * 10.0 - 1e-6) / 10.0,
                     floor(a->o.margin * a->o.budget_ms * 10.0 + 1e-6) / 10.0);
        else if (a->why == WHY_MAX)
            snprintf(reason, cap, "server at its admission limit (%d session%s, "
                     "the configured maximum); retry later", a->limit, s);
        else if (a->why == WHY_NEAR)
            snprintf(reason, cap, "server at its admission limit (%d session%s; "
                     "measured at %.1f ms with its error, too near the %.1f ms "
                     "target for one more); retry later", a->limit, s, a->why_ms,
                     a->o.margin * a->o.budget_ms);
        else
            snprintf(reason, cap, "server at its admission limit (%d session%s; "
                     "%d were measured past %.1f ms); retry later", a->limit, s,
                     a->limit + 1, a->why_ms);
        return 0;
    }
    if (active + a->inflight < a->limit)
        return 1;
    snprintf(reason, cap, "server at its admission limit (%d session%s, %s "
             "policy); retry later", a->limit, a->limit == 1 ? "" : "s",
             mt_admit_policy_name(a->o.policy));
    return 0;
}

static void do_accept(mt_admit *a, uint32_t id)
{
    a->inflight++;
    if (a->o.policy == MT_POL_METRONOME) {
        a->waiting = 1;
        a->wait_id = id;
        a->wait_admitted = a->have_tick ? a->last.admitted : 0;
        a->wait_rejected = a->have_tick ? a->last.rejected : 0;
        a->wait_since = a->st.ticks;
        a->settle_left = a->o.settle_ticks;
    }
    answer(a, id, 1, NULL);
}

static void serve_queue(mt_admit *a)
{
    int keep = 0;
    for (int i = 0; i < a->nq; i++) {
        char reason[160];
        int d = decide(a, reason, sizeof reason);
        if (d == 1) {
            do_accept(a, a->q[i].id);
        } else if (d == 0) {
            answer(a, a->q[i].id, 0, reason);
        } else if ((a->now - a->q[i].t) * 1000 >= a->o.hold_ms) {
            /* Sessions that arrive together wait for the effect of the
             * one admitted before them; this one waited its --hold. */
            char why[160];
            snprintf(why, sizeof why, "warming up: still measuring the session "
                     "admitted just before (waited %.0f ms); retry later",
                     a->o.hold_ms);
            answer(a, a->q[i].id, 0, why);
        } else {
            a->q[keep++] = a->q[i];
        }
    }
    a->nq = keep;
    a->st.held = a->nq;
}

void mt_admit_request(mt_admit *a, uint32_t id, double t)
{
    a->st.requests++;
    if (t >= 0 && t > a->now)
        a->now = t;
    if (a->nq >= QUEUE_MAX) {
        char why[96];
        snprintf(why, sizeof why, "admission queue full (%d sessions waiting); "
                 "retry later", QUEUE_MAX);
        answer(a, id, 0, why);
        return;
    }
    a->q[a->nq].id = id;
    a->q[a->nq].t = t >= 0 ? t : a->now;
    a->nq++;
    serve_queue(a);
}

void mt_admit_tick(mt_admit *a, const mt_tick *t)
{
    double y = mt_admit_signal_of(&a->o, t);
    a->st.ticks++;
    if (t->t > a->now)
        a->now = t->t;
    a->st.active = t->active;
    a->st.signal_ms = y;
    if (t->stepped > 0 && y > a->o.budget_ms)
        a->st.violations++;
    a->inflight = 0;     /* the server admits before its next tick */
    switch (a->o.policy) {
    case MT_POL_METRONOME: metronome_tick(a, t, y); break;
    case MT_POL_AIMD: aimd_tick(a, t, y); break;
    case MT_POL_GRADIENT: gradient_tick(a, t, y); break;
    case MT_POL_STATIC: break;
    }
    if (a->limit > a->o.max_limit)
        a->limit = a->o.max_limit;
    a->last = *t;
    a->have_tick = 1;
    serve_queue(a);
}

void mt_admit_server_verdict(mt_admit *a, uint32_t id, int accepted)
{
    if (!accepted && a->waiting && a->wait_id == id) {
        a->waiting = 0;
        if (a->inflight > 0)
            a->inflight--;
        serve_queue(a);
    }
}

void mt_admit_finish(mt_admit *a)
{
    for (int i = 0; i < a->nq; i++)
        answer(a, a->q[i].id, 0, "controller input ended");
    a->nq = 0;
    a->st.held = 0;
}

int mt_admit_limit(const mt_admit *a)
{
    return a->limit;
}

void mt_admit_get_stats(const mt_admit *a, mt_admit_stats *s)
{
    *s = a->st;
    s->waiting = a->waiting;
}

void mt_admit_status(const mt_admit *a, char *buf, size_t cap)
{
    mt_ll_writer w;
    mt_ll_begin(&w, buf, cap);
    mt_ll_flag(&w, "admit_status");
    mt_ll_str(&w, "policy", mt_admit_policy_name(a->o.policy));
    mt_ll_int(&w, "ticks", a->st.ticks);
    mt_ll_int(&w, "active", a->st.active);
    mt_ll_int(&w, "limit", a->limit);
    mt_ll_f(&w, "signal_ms", a->st.signal_ms, 3);
    mt_ll_int(&w, "requests", a->st.requests);
    mt_ll_int(&w, "accepted", a->st.accepted);
    mt_ll_int(&w, "rejected", a->st.rejected);
    mt_ll_int(&w, "held", a->nq);
    mt_ll_int(&w, "violations", a->st.violations);
    if (a->o.policy == MT_POL_METRONOME) {
        mt_ll_f(&w, "fit_a", a->st.fit_a, 3);
        mt_ll_f(&w, "fit_b", a->st.fit_b, 4);
        mt_ll_int(&w, "levels", a->st.levels);
        mt_ll_int(&w, "waiting", a->waiting);
        mt_ll_int(&w, "cap", a->hard_cap);
        mt_ll_int(&w, "resets", a->st.resets);
        mt_ll_int(&w, "late_levels", a->st.late_levels);
        mt_ll_int(&w, "probes", a->st.probes);
        mt_ll_f(&w, "hiccup_ms", a->st.hiccup_ms, 1);
        mt_ll_int(&w, "headroom_holds", a->st.headroom_holds);
    }
    if (mt_ll_end(&w) < 0 && cap)
        snprintf(buf, cap, "admit_status overflow");
}
