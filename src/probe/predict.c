/* predict.c: the analytic model of the KV wall (mt-probe predict).
 *
 * Unbounded ("full") policy: every live session holds one cache position
 * per frame it has sent, in blocks of `block` positions, so the pool's
 * demand at time t is  sum over live sessions of ceil(age_frames / block)
 * blocks. The pool overflows the first time that sum exceeds the pool's
 * blocks; from there the server must preempt or stall, which is the start
 * of the collapse. Bounded ("window") policy: each session takes the fixed
 * bound ceil((S+W)/block) blocks for its whole life, so the pool holds
 * `capacity` sessions and an arrival beyond that is refused (a loss
 * system), never an overflow.
 *
 * Two estimates: a mean-field closed form (the expected demand of a
 * stationary arrival process started empty, E U(t) = lambda * int_0^t
 * S(u) u du / period, S the length survival function; solved for the time
 * it reaches the pool), and a Monte Carlo over seeded workloads (the very
 * generator the soak plays, so a soak run of seed s is predicted by
 * mt_predict_one(s)). The model assumes the server keeps pace with the
 * frame clock until the pool is full: compute limits are the sweep's job.
 */
#include "util/errmsg.h"
#include "util/stats.h"
#include "probe/probe.h"
#include "model/model.h"
#include "model/kyutai_lm.h"
#include "decode/step.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

uint64_t mt_predict_position_bytes(const mt_predict_params *p)
{
    if (p->position_bytes)
        return p->position_bytes;
    mt_config c = { .layers = p->layers, .kv_heads = p->kv_heads, .head_dim = p->head_dim };
    return mt_decoder_position_bytes(&c, (size_t)(p->elem_bytes ? p->elem_bytes : 4));
}

static int check(const mt_predict_params *p, char *err, size_t errlen)
{
    if (!mt_predict_position_bytes(p)) {
        mt_set_err(err, errlen, "predict: model shape unknown (give -m MODEL or "
                "--layers/--kv-heads/--head-dim)");
        return -1;
    }
    if (!p->pool_bytes) {
        mt_set_err(err, errlen, "predict: pool size unknown (--kv-mem BYTES)");
        return -1;
    }
    if (p->block <= 0 || !(p->period_s > 0) || !(p->duration_s > 0)) {
        mt_set_err(err, errlen, "predict: block, period and duration must be "
                "positive");
        return -1;
    }
    return 0;
}

static uint64_t pool_blocks(const mt_predict_params *p)
{
    return p->pool_bytes / (mt_predict_position_bytes(p) * (uint64_t)p->block);
}

static uint64_t bound_blocks(const mt_predict_params *p)
{
    uint64_t pos = (uint64_t)(p->sink + p->window);
    return (pos + (uint64_t)p->block - 1) / (uint64_t)p->block;
}

int mt_predict_one(const mt_predict_params *p, uint64_t seed,
                   mt_predict_run *run, char *err, size_t errlen)
{
    mt_workload w;
    memset(run, 0, sizeof *run);
    run->seed = seed;
    run->overflow_s = -1;
    if (check(p, err, errlen))
        return -1;
    if (mt_workload_make(&p->arrivals, &p->lengths, p->duration_s, p->period_s,
                         seed, p->max_sessions, &w, err, errlen))
        return -1;
    run->sessions = w.n;
    uint64_t pb = pool_blocks(p);
    int64_t ticks = (int64_t)ceil(p->duration_s / p->period_s);
    /* Unbounded: demand at each frame tick. Sessions are in start order,
     * so the live ones are a sliding range [lo, hi). */
    int lo = 0, hi = 0;
    double peak = 0;
    for (int64_t k = 0; k <= ticks; k++) {
        double t = (double)k * p->period_s;
        while (hi < w.n && w.s[hi].start_s <= t + 1e-12)
            hi++;
        uint64_t blocks = 0;
        int live = 0;
        for (int j = lo; j < hi; j++) {
            int64_t age = (int64_t)floor((t - w.s[j].start_s) / p->period_s
                                         + 1e-9) + 1;
            if (age > w.s[j].frames)
                continue;               /* ended */
            live++;
            blocks += ((uint64_t)age + (uint64_t)p->block - 1) /
                      (uint64_t)p->block;
        }
        while (lo < hi && (int64_t)floor((t - w.s[lo].start_s) / p->period_s
                                         + 1e-9) + 1 > w.s[lo].frames)
            lo++;                       /* a prefix that has ended for good
                                           (only when the oldest ended) */
        if (live > run->peak_live)
            run->peak_live = live;
        double fill = pb ? (double)blocks / (double)pb : INFINITY;
        if (fill > peak)
            peak = fill;
        if (blocks > pb && run->overflow_s < 0)
            run->overflow_s = t;
    }
    run->peak_fill = peak;
    /* Bounded: a loss system with `capacity` servers. */
    uint64_t bb = bound_blocks(p);
    int cap = bb ? (int)(pb / bb) : 0;
    /* Departures are only known for admitted sessions: process arrivals in
     * order and keep the end times of the admitted in a small array. */
    double *ends = malloc(sizeof *ends * (size_t)(w.n + 1));
    if (!ends) {
        mt_workload_free(&w);
        mt_set_err(err, errlen, "predict: out of memory");
        return -1;
    }
    int held = 0;
    for (int i = 0; i < w.n; i++) {
        double t = w.s[i].start_s;
        for (int j = 0; j < held;) {
            if (ends[j] <= t)
                ends[j] = ends[--held];
            else
                j++;
        }
        if (held < cap) {
            ends[held++] = t + (double)w.s[i].frames * p->period_s;
            if (held > run->peak_admitted)
                run->peak_admitted = held;
        } else {
            run->rejected++;
        }
    }
    free(ends);
    mt_workload_free(&w);
    return 0;
}

/* Survival function of the length law. */
static double survival(const mt_lengths *l, double u)
{
    switch (l->kind) {
    case MT_LEN_FIXED: return u < l->a ? 1.0 : 0.0;
    case MT_LEN_UNIFORM:
        if (u < l->a) return 1.0;
        if (u >= l->b) return 0.0;
        return (l->b - u) / (l->b - l->a);
    case MT_LEN_EXP: return exp(-u / l->a);
    default:
        if (u <= 0) return 1.0;
        if (l->b == 0) return u < l->a ? 1.0 : 0.0;
        return 0.5 * erfc((log(u) - log(l->a)) / (l->b * M_SQRT2));
    }
}

/* Mean-field expected demand in bytes at time t of an arrival process of
 * rate lambda started empty: lambda * int_0^t S(u) (u/period + block/2)
 * du positions (half a block of rounding per live session). */
static double mean_demand(const mt_predict_params *p, double lambda, double t)
{
    int n = 2000;
    double h = t / n, acc = 0;
    for (int i = 0; i < n; i++) {
        double u = (i + 0.5) * h;
        acc += survival(&p->lengths, u) * (u / p->period_s + p->block / 2.0);
    }
    return lambda * acc * h * (double)mt_predict_position_bytes(p);
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int mt_predict(const mt_predict_params *p, mt_predict_result *r,
               char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (check(p, err, errlen))
        return -1;
    r->position_bytes = mt_predict_position_bytes(p);
    r->pool_blocks = pool_blocks(p);
    r->bound_bytes = bound_blocks(p) * (uint64_t)p->block * r->position_bytes;
    r->capacity = r->bound_bytes ? (int)(r->pool_blocks / bound_blocks(p)) : 0;
    double lambda = p->arrivals.kind == MT_ARR_BURST ? 0 : p->arrivals.rate;
    double el = mt_lengths_mean(&p->lengths);
    r->mean_live = lambda * el;
    r->mean_positions = lambda * mt_lengths_mean_sq(&p->lengths) / 2 / p->period_s;
    r->steady_fill = (r->mean_positions + r->mean_live * p->block / 2.0) *
                     (double)r->position_bytes / (double)p->pool_bytes;
    r->fill_time_s = -1;
    if (lambda > 0) {
        double pool = (double)r->pool_blocks * p->block * (double)r->position_bytes;
        double hi = p->duration_s;
        if (mean_demand(p, lambda, hi) >= pool) {
            double lo = 0;
            for (int i = 0; i < 50; i++) {
                double mid = (lo + hi) / 2;
                if (mean_demand(p, lambda, mid) >= pool)
                    hi = mid;
                else
                    lo = mid;
            }
            r->fill_time_s = hi;
        }
    }
    int n = p->samples > 0 ? p->samples : 1000;
    double *t = malloc(sizeof *t * (size_t)n);
    if (!t) {
        mt_set_err(err, errlen, "predict: out of memory");
        return -1;
    }
    double rej = 0;
    r->samples = n;
    for (int i = 0; i < n; i++) {
        mt_predict_run run;
        if (mt_predict_one(p, p->seed + (uint64_t)i, &run, err, errlen)) {
            free(t);
            return -1;
        }
        if (run.overflow_s >= 0)
            t[r->overflowed++] = run.overflow_s;
        rej += run.rejected;
    }
    r->rejected_mean = rej / n;
    r->p_overflow = (double)r->overflowed / n;
    r->t_p10 = r->t_p50 = r->t_p90 = -1;
    if (r->overflowed) {
        qsort(t, (size_t)r->overflowed, sizeof *t, dcmp);
        r->t_p10 = mt_stats_percentile(t, (size_t)r->overflowed, 0.10);
        r->t_p50 = mt_stats_percentile(t, (size_t)r->overflowed, 0.50);
        r->t_p90 = mt_stats_percentile(t, (size_t)r->overflowed, 0.90);
    }
    free(t);
    return 0;
}

static void fmt_bytes(char *b, size_t n, double v)
{
    if (v >= 1024.0 * 1024 * 1024)
        snprintf(b, n, "%.2f GiB", v / (1024.0 * 1024 * 1024));
    else if (v >= 1024.0 * 1024)
        snprintf(b, n, "%.2f MiB", v / (1024.0 * 1024));
    else if (v >= 1024.0)
        snprintf(b, n, "%.1f KiB", v / 1024.0);
    else
        snprintf(b, n, "%.0f B", v);
}

static void fmt_t(char *b, size_t n, double t)
{
    if (t < 0)
        snprintf(b, n, "never");
    else
        snprintf(b, n, "%.1f s", t);
}

void mt_predict_print(FILE *out, const mt_predict_params *p,
                      const mt_predict_result *r)
{
    char a[64], l[64], b1[32], b2[32], b3[32], t1[24], t2[24], t3[24], t4[24];
    mt_arrivals_format(&p->arrivals, a, sizeof a);
    mt_lengths_format(&p->lengths, l, sizeof l);
    fmt_bytes(b1, sizeof b1, (double)r->position_bytes);
    fmt_bytes(b2, sizeof b2, (double)p->pool_bytes);
    fmt_bytes(b3, sizeof b3, (double)r->bound_bytes);
    fprintf(out, "# predict: layers=%d kv_heads=%d head_dim=%d elem=%d\n",
            p->layers, p->kv_heads, p->head_dim, p->elem_bytes);
    fprintf(out, "kv bytes per position\t%s (%llu)\n", b1,
            (unsigned long long)r->position_bytes);
    fprintf(out, "pool\t%s = %llu blocks of %d positions\n", b2,
            (unsigned long long)r->pool_blocks, p->block);
    fprintf(out, "load\tarrivals %s, lengths %s, %.0f s, frame %.0f ms\n",
            a, l, p->duration_s, p->period_s * 1000);
    fprintf(out, "mean live sessions\t%.1f\n", r->mean_live);
    fprintf(out, "unbounded steady demand\t%.2f x pool%s\n", r->steady_fill,
            r->steady_fill >= 1 ? " (overflows for sure)" :
            " (overflows only on fluctuations)");
    fmt_t(t1, sizeof t1, r->fill_time_s);
    fprintf(out, "unbounded mean-field fill time\t%s\n", t1);
    fmt_t(t2, sizeof t2, r->t_p10);
    fmt_t(t3, sizeof t3, r->t_p50);
    fmt_t(t4, sizeof t4, r->t_p90);
    fprintf(out, "unbounded overflow within run\t%d of %d seeds (%.0f%%)\n",
            r->overflowed, r->samples, 100.0 * r->p_overflow);
    fprintf(out, "unbounded time to overflow\tmedian %s (p10 %s, p90 %s)\n",
            t3, t2, t4);
    fprintf(out, "bounded per-session bound\t%s (sink %d + window %d)\n", b3,
            p->sink, p->window);
    if (p->session_extra_bytes) {
        char b4[32];
        fmt_bytes(b4, sizeof b4, (double)p->session_extra_bytes);
        fprintf(out, "per-session besides K/V\t%s (Kyutai depformer K/V and token rings, host)\n",
                b4);
    }
    fprintf(out, "bounded capacity\t%d sessions\n", r->capacity);
    fprintf(out, "bounded refusals per run\t%.1f (mean), never an overflow\n",
            r->rejected_mean);
}

int mt_predict_shape_from_model(mt_predict_params *p, const char *spec,
                                char *err, size_t errlen)
{
    if (mt_kyutai_is_kyutai(spec)) {
        /* Kyutai's LM: the temporal transformer holds the bounded K/V;
         * one position per 80 ms frame */
        mt_kyutai_lm *lm = NULL;
        if (mt_kyutai_load(spec, MT_MODEL_SHAPE_ONLY, &lm, err, errlen))
            return -1;
        p->layers = lm->temporal->cfg.layers;
        p->kv_heads = lm->temporal->cfg.kv_heads;
        p->head_dim = lm->temporal->cfg.head_dim;
        p->period_s = (double)lm->temporal->cfg.frame_samples / lm->temporal->cfg.sample_rate;
        p->session_extra_bytes = mt_kyutai_session_bytes(&lm->kc);
        mt_kyutai_free(lm);
        return 0;
    }
    mt_model *m = NULL;
    if (mt_model_load(spec, MT_MODEL_SHAPE_ONLY, &m, err, errlen))
        return -1;
    p->layers = m->cfg.layers;
    p->kv_heads = m->cfg.kv_heads;
    p->head_dim = m->cfg.head_dim;
    if (m->cfg.sample_rate > 0 && m->cfg.frame_samples > 0)
        p->period_s = (double)m->cfg.frame_samples / m->cfg.sample_rate;
    mt_model_free(m);
    return 0;
}
