/* workload.c: seeded session workloads for mt-probe (arrival process,
 * session lengths). Durations are read by util/units.c.
 *
 * Why one generator: the soak plays a workload against a real server and
 * predict runs the same workload through the analytic model, so "predicted
 * vs measured" compares the same sessions, not two draws of one
 * distribution. The generator is util/rng.h (xoshiro256** seeded by
 * splitmix64): fast, and identical on
 * every machine (no libc rand()).
 */
#include "util/errmsg.h"
#include "util/units.h"
#include "probe/probe.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- specs --------------------------------------------------------------- */

int mt_arrivals_parse(const char *s, mt_arrivals *a, char *err, size_t errlen)
{
    const char *colon = s ? strchr(s, ':') : NULL;
    char *end;
    memset(a, 0, sizeof *a);
    if (!colon) {
        mt_set_err(err, errlen,
                "bad arrivals '%s' (poisson:RATE, even:RATE, burst:N)",
                s ? s : "");
        return -1;
    }
    size_t k = (size_t)(colon - s);
    double v = strtod(colon + 1, &end);
    if (end == colon + 1 || *end || !isfinite(v) || v <= 0) {
        mt_set_err(err, errlen, "bad arrivals '%s': need a positive number", s);
        return -1;
    }
    if (k == 7 && !strncmp(s, "poisson", 7)) {
        a->kind = MT_ARR_POISSON;
        a->rate = v;
    } else if (k == 4 && !strncmp(s, "even", 4)) {
        a->kind = MT_ARR_EVEN;
        a->rate = v;
    } else if (k == 5 && !strncmp(s, "burst", 5)) {
        if (v != floor(v) || v > 100000) {
            mt_set_err(err, errlen, "bad arrivals '%s': burst needs a count", s);
            return -1;
        }
        a->kind = MT_ARR_BURST;
        a->count = (int)v;
    } else {
        mt_set_err(err, errlen,
                "unknown arrivals '%s' (poisson:RATE, even:RATE, burst:N)", s);
        return -1;
    }
    return 0;
}

int mt_lengths_parse(const char *s, mt_lengths *l, char *err, size_t errlen)
{
    char kind[16], p1[32] = "", p2[32] = "";
    const char *c1 = s ? strchr(s, ':') : NULL;
    memset(l, 0, sizeof *l);
    if (!c1 || (size_t)(c1 - s) >= sizeof kind) {
        mt_set_err(err, errlen,
                "bad lengths '%s' (fixed:30s, uniform:10s:60s, exp:20s, "
                "lognormal:20s:0.5)", s ? s : "");
        return -1;
    }
    memcpy(kind, s, (size_t)(c1 - s));
    kind[c1 - s] = 0;
    const char *c2 = strchr(c1 + 1, ':');
    size_t n1 = c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
    if (n1 >= sizeof p1 || (c2 && strlen(c2 + 1) >= sizeof p2)) {
        mt_set_err(err, errlen, "bad lengths '%s'", s);
        return -1;
    }
    memcpy(p1, c1 + 1, n1);
    p1[n1] = 0;
    if (c2)
        strcpy(p2, c2 + 1);
    int two = 0;
    if (!strcmp(kind, "fixed"))
        l->kind = MT_LEN_FIXED;
    else if (!strcmp(kind, "uniform"))
        l->kind = MT_LEN_UNIFORM, two = 1;
    else if (!strcmp(kind, "exp"))
        l->kind = MT_LEN_EXP;
    else if (!strcmp(kind, "lognormal"))
        l->kind = MT_LEN_LOGNORMAL, two = 1;
    else {
        mt_set_err(err, errlen, "unknown lengths '%s' (fixed, uniform, exp, "
                "lognormal)", s);
        return -1;
    }
    if (two != (c2 != NULL)) {
        mt_set_err(err, errlen, "lengths '%s': %s takes %s", s, kind,
                two ? "two parameters" : "one parameter");
        return -1;
    }
    if (mt_parse_duration(p1, 1, &l->a, err, errlen) || l->a <= 0) {
        if (l->a <= 0)
            mt_set_err(err, errlen, "lengths '%s': must be positive", s);
        return -1;
    }
    if (two) {
        if (l->kind == MT_LEN_UNIFORM) {
            if (mt_parse_duration(p2, 1, &l->b, err, errlen))
                return -1;
            if (l->b < l->a) {
                mt_set_err(err, errlen, "lengths '%s': max below min", s);
                return -1;
            }
        } else {
            char *end;
            l->b = strtod(p2, &end);
            if (end == p2 || *end || !isfinite(l->b) || l->b < 0 || l->b > 5) {
                mt_set_err(err, errlen, "lengths '%s': sigma must be 0..5", s);
                return -1;
            }
        }
    }
    return 0;
}

double mt_lengths_mean(const mt_lengths *l)
{
    switch (l->kind) {
    case MT_LEN_FIXED: return l->a;
    case MT_LEN_UNIFORM: return (l->a + l->b) / 2;
    case MT_LEN_EXP: return l->a;
    default: return l->a * exp(l->b * l->b / 2);
    }
}

double mt_lengths_mean_sq(const mt_lengths *l)
{
    switch (l->kind) {
    case MT_LEN_FIXED: return l->a * l->a;
    case MT_LEN_UNIFORM:
        return (l->a * l->a + l->a * l->b + l->b * l->b) / 3;
    case MT_LEN_EXP: return 2 * l->a * l->a;
    default: return l->a * l->a * exp(2 * l->b * l->b);
    }
}

void mt_arrivals_format(const mt_arrivals *a, char *buf, size_t n)
{
    if (a->kind == MT_ARR_BURST)
        snprintf(buf, n, "burst:%d", a->count);
    else
        snprintf(buf, n, "%s:%g", a->kind == MT_ARR_POISSON ? "poisson" : "even",
                 a->rate);
}

void mt_lengths_format(const mt_lengths *l, char *buf, size_t n)
{
    switch (l->kind) {
    case MT_LEN_FIXED: snprintf(buf, n, "fixed:%gs", l->a); break;
    case MT_LEN_UNIFORM: snprintf(buf, n, "uniform:%gs:%gs", l->a, l->b); break;
    case MT_LEN_EXP: snprintf(buf, n, "exp:%gs", l->a); break;
    default: snprintf(buf, n, "lognormal:%gs:%g", l->a, l->b); break;
    }
}

static double draw_length(const mt_lengths *l, mt_rng *r)
{
    switch (l->kind) {
    case MT_LEN_FIXED: return l->a;
    case MT_LEN_UNIFORM: return l->a + (l->b - l->a) * mt_rng_uniform(r);
    case MT_LEN_EXP: return -l->a * log(1.0 - mt_rng_uniform(r));
    default: return l->a * exp(l->b * mt_rng_normal(r));
    }
}

int mt_workload_make(const mt_arrivals *a, const mt_lengths *l,
                     double duration_s, double period_s, uint64_t seed,
                     int max_sessions, mt_workload *w, char *err, size_t errlen)
{
    mt_rng r;
    int cap = 64;
    memset(w, 0, sizeof *w);
    if (!(period_s > 0) || !(duration_s > 0)) {
        mt_set_err(err, errlen, "workload: duration and period must be positive");
        return -1;
    }
    w->duration_s = duration_s;
    w->period_s = period_s;
    w->s = malloc(sizeof *w->s * (size_t)cap);
    if (!w->s) {
        mt_set_err(err, errlen, "workload: out of memory");
        return -1;
    }
    /* Two streams from one seed: arrivals and lengths never shift each
     * other, so changing the length law keeps the same arrival times. */
    mt_rng ra, rl;
    mt_rng_seed(&r, seed);
    mt_rng_seed(&ra, mt_rng_next(&r));
    mt_rng_seed(&rl, mt_rng_next(&r));
    double t = 0;
    for (int i = 0;; i++) {
        if (max_sessions > 0 && w->n >= max_sessions)
            break;
        if (a->kind == MT_ARR_BURST) {
            if (i >= a->count)
                break;
            t = 0;
        } else if (a->kind == MT_ARR_EVEN) {
            t = i / a->rate;
        } else {
            t += -log(1.0 - mt_rng_uniform(&ra)) / a->rate;
        }
        if (t >= duration_s)
            break;
        double len = draw_length(l, &rl);
        if (len < l->min_s)
            len = l->min_s;
        if (t + len > duration_s)
            len = duration_s - t;
        int64_t frames = (int64_t)floor(len / period_s + 1e-9);
        if (frames < 1)
            frames = 1;
        if (w->n == cap) {
            cap *= 2;
            mt_wl_session *ns = realloc(w->s, sizeof *ns * (size_t)cap);
            if (!ns) {
                mt_workload_free(w);
                mt_set_err(err, errlen, "workload: out of memory");
                return -1;
            }
            w->s = ns;
        }
        w->s[w->n].start_s = t;
        w->s[w->n].frames = frames;
        w->n++;
    }
    return 0;
}

void mt_workload_free(mt_workload *w)
{
    free(w->s);
    w->s = NULL;
    w->n = 0;
}
