/* soak_classify.c: the soak's verdict from tick lines: the model's
 * collapse (pool exhaustion) apart from the host's stalls (see
 * soak_classify.h). Pure: no I/O, no clock, so a test feeds it lines. */
#include "probe/soak_classify.h"

#include <string.h>

/* Under 1% of the pool free: exhausted (sessions wait for blocks). */
static int pool_exhausted(const mt_soak_tick *r)
{
    int64_t pool = r->kv_used + r->kv_free;
    return pool > 0 && (double)r->kv_free < 0.01 * (double)pool;
}

static int starved(const mt_soak_tick *r)
{
    return r->active > 0 && r->in == 0;
}

/* Fills c->model_s: the first preemption, or FILL sent with the pool
 * exhausted. */
static void find_model(const mt_soak_tick *tk, size_t n, mt_soak_class *c)
{
    c->model_s = -1;
    for (size_t i = 0; i < n; i++) {
        const mt_soak_tick *r = &tk[i];
        if (r->t < 0)
            continue;
        if (r->preempted > 0 || (r->fill > 0 && pool_exhausted(r))) {
            c->model_s = r->t;
            return;
        }
    }
}

/* Fills the host fields: stretches of FILL ticks (gaps under starve_s
 * merge) before model_s, caused by a starved tick from starve_s before
 * their start to their end. The stall starts at the first tick of the
 * run of starved ticks that cause names (the client's input stopped
 * there) and ends at the stretch's last FILL. Before model_s the pool has
 * room: FILL with it exhausted would be model_s itself. */
static void find_host(const mt_soak_tick *tk, size_t n, double starve_s,
                      mt_soak_class *c)
{
    c->host_s = c->host_end_s = -1;
    c->host_free = 0;
    c->host_stretches = 0;
    size_t i = 0;
    while (i < n) {
        if (tk[i].t < 0 || tk[i].fill <= 0) {
            i++;
            continue;
        }
        if (c->model_s >= 0 && tk[i].t >= c->model_s)
            break;
        size_t a = i, b = i;    /* the stretch: FILL ticks tk[a..b] */
        for (size_t j = i + 1; j < n && tk[j].t - tk[b].t < starve_s; j++)
            if (tk[j].fill > 0) {
                if (c->model_s >= 0 && tk[j].t >= c->model_s)
                    break;
                b = j;
            }
        size_t cause = n;       /* the first starved tick found */
        for (size_t j = a + 1; j-- > 0 && tk[a].t - tk[j].t <= starve_s;)
            if (starved(&tk[j]) && tk[j].t >= 0) {
                cause = j;
                break;
            }
        for (size_t j = a; j <= b && cause == n; j++)
            if (starved(&tk[j]))
                cause = j;
        if (cause < n) {
            while (cause > 0 && starved(&tk[cause - 1]) && tk[cause - 1].t >= 0)
                cause--;
            if (c->host_s < 0) {
                c->host_s = tk[cause].t;
                c->host_end_s = tk[b].t;
                c->host_free = tk[a].kv_free;
            }
            if (c->host_stretches < MT_SOAK_HOST_KEEP) {
                c->host_at[c->host_stretches][0] = tk[cause].t;
                c->host_at[c->host_stretches][1] = tk[b].t;
                c->host_at[c->host_stretches][2] = (double)tk[a].kv_free;
            }
            c->host_stretches++;
        }
        i = b + 1;
    }
}

int mt_soak_host_covering(const mt_soak_class *c, double onset_s, double starve_s)
{
    int n = c->host_stretches < MT_SOAK_HOST_KEEP ? c->host_stretches : MT_SOAK_HOST_KEEP;
    for (int i = 0; onset_s >= 0 && i < n; i++)
        if (onset_s >= c->host_at[i][0] - starve_s && onset_s <= c->host_at[i][1])
            return i;
    return -1;
}

/* Lateness over the load: its end value, the least-squares slope over
 * 50%..95% of it, and whether it grew without bound. */
static void find_late(const mt_soak_tick *tk, size_t n, double D,
                      mt_soak_class *c)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, maxlate = 0;
    long m = 0;
    c->late_end_ms = 0;
    c->first_late_s = -1;
    for (size_t i = 0; i < n; i++) {
        double t = tk[i].t, l = tk[i].late_ms;
        if (t < 0)
            continue;
        if (t <= D)
            c->late_end_ms = l;
        if (t >= 0.5 * D && t <= 0.95 * D) {
            sx += t;
            sy += l;
            sxx += t * t;
            sxy += t * l;
            m++;
            if (l > maxlate)
                maxlate = l;
        }
        if (c->first_late_s < 0 && l >= 1000 && t <= D)
            c->first_late_s = t;
    }
    c->late_slope = 0;
    if (m >= 3) {
        double den = (double)m * sxx - sx * sx;
        if (den > 0)
            c->late_slope = ((double)m * sxy - sx * sy) / den;
    }
    c->unbounded_late = c->late_slope >= 100.0 && maxlate >= 1000.0;
}

void mt_soak_classify(const mt_soak_tick *tk, size_t n, double duration_s,
                      double starve_s, mt_soak_class *c)
{
    memset(c, 0, sizeof *c);
    find_model(tk, n, c);
    find_host(tk, n, starve_s, c);
    find_late(tk, n, duration_s, c);
}

int mt_soak_tick_parse(mt_latline *ll, const char *line, size_t len,
                       mt_soak_tick *tk, char *err, size_t errlen)
{
    mt_tick t;
    if (mt_latline_parse(line, len, 0, ll, err, errlen))
        return -1;
    if (strcmp(mt_latline_kind(ll), "tick"))
        return 1;
    if (mt_tick_from_line(ll, 0, &t, err, errlen))
        return -1;
    mt_soak_tick_from(&t, tk);
    return 0;
}

void mt_soak_tick_from(const mt_tick *t, mt_soak_tick *tk)
{
    tk->t = t->t;
    tk->late_ms = t->late_ms;
    tk->in = t->in;
    tk->active = t->active;
    tk->fill = t->fill;
    tk->preempted = t->preempted;
    tk->kv_used = t->kv_used;
    tk->kv_free = t->kv_free;
}
