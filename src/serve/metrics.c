/* metrics.c: the Prometheus registry and its text exposition (see
 * metrics.h). */
#define _GNU_SOURCE
#include "serve/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

/* the bucket bounds as multiples of the frame period: fine around P, where
 * a tick turns from on time to late */
static const double bucket_frac[MT_METRICS_NBUCKET] = {
    1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 3.0 / 4, 7.0 / 8, 1.0,
    9.0 / 8, 5.0 / 4, 3.0 / 2, 2.0, 3.0, 4.0, 8.0,
};

typedef struct histo {
    uint64_t n[MT_METRICS_NBUCKET + 1]; /* per bucket, not cumulative;
                                           [NBUCKET]: above the last */
    double   sum;
    uint64_t count;
} histo;

struct mt_metrics {
    pthread_mutex_t mu;
    mt_metrics_info info;
    char            kv_policy[16], model[64], version[32];
    double          le[MT_METRICS_NBUCKET];
    /* sums over the tick records */
    uint64_t ticks, late_ticks, in, out, fill, miss, preempted;
    /* totals the records carry */
    uint64_t admitted, refused, shed, ended;
    /* the last record */
    int64_t  live, pending, limit, kv_used, kv_free;
    int      has_limit;
    char     device[MT_TICK_DEVICE_MAX];
    histo    step, late;
};

void mt_metrics_buckets(double frame_s, double le[MT_METRICS_NBUCKET])
{
    for (int i = 0; i < MT_METRICS_NBUCKET; i++)
        le[i] = frame_s * bucket_frac[i];
}

int mt_metrics_create(const mt_metrics_info *info, mt_metrics **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    if (!(info->frame_s > 0) || info->block_bytes < 0 || info->blocks_total < 0) {
        mt_set_err(err, errlen, "metrics: no frame period or a negative pool size");
        return -1;
    }
    mt_metrics *m = mt_calloc_or_err(1, sizeof *m, err, errlen, NULL);
    if (!m)
        return -1;
    int e = pthread_mutex_init(&m->mu, NULL);
    if (e != 0) {
        mt_set_err(err, errlen, "pthread_mutex_init: %s", strerror(e));
        free(m);
        return -1;
    }
    m->info = *info;
    snprintf(m->kv_policy, sizeof m->kv_policy, "%s", info->kv_policy ? info->kv_policy : "");
    snprintf(m->model, sizeof m->model, "%s", info->model ? info->model : "");
    snprintf(m->version, sizeof m->version, "%s", info->version ? info->version : "");
    m->info.kv_policy = m->info.model = m->info.version = NULL;
    mt_metrics_buckets(info->frame_s, m->le);
    *out = m;
    return 0;
}

void mt_metrics_free(mt_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void observe(histo *h, const double *le, double v)
{
    int i = 0;
    while (i < MT_METRICS_NBUCKET && v > le[i])
        i++;
    h->n[i]++;
    h->sum += v;
    h->count++;
}

static uint64_t nonneg(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

/* a total from a record, never going back (a counter is monotone) */
static void total(uint64_t *c, int64_t v)
{
    if (v > 0 && (uint64_t)v > *c)
        *c = (uint64_t)v;
}

void mt_metrics_tick(void *ctx, const mt_tick *t)
{
    mt_metrics *m = ctx;
    double step = t->step_ms / 1e3, late = t->late_ms / 1e3;
    pthread_mutex_lock(&m->mu);
    m->ticks++;
    m->late_ticks += late > m->info.frame_s;
    m->in += nonneg(t->in);
    m->out += nonneg(t->out);
    m->fill += nonneg(t->fill);
    m->miss += nonneg(t->miss);
    m->preempted += nonneg(t->preempted);
    total(&m->admitted, t->admitted);
    total(&m->refused, t->rejected);
    total(&m->shed, t->shed);
    /* every admitted session is live until it ends */
    total(&m->ended, t->admitted - t->active);
    m->live = t->active;
    m->pending = t->pending;
    m->has_limit = t->has_limit;
    m->limit = t->limit;
    m->kv_used = t->kv_used;
    m->kv_free = t->kv_free;
    snprintf(m->device, sizeof m->device, "%s", t->device);
    observe(&m->step, m->le, step >= 0 ? step : 0);
    observe(&m->late, m->le, late >= 0 ? late : 0);
    pthread_mutex_unlock(&m->mu);
}

/* ---- the exposition -------------------------------------------------------- */

typedef struct out {
    char  *buf;
    size_t cap, len;
    int    overflow;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    if (o->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->cap - o->len) {
        o->overflow = 1;
        return;
    }
    o->len += (size_t)n;
}

static void head(out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(out *o, const char *name, const char *help, uint64_t v)
{
    head(o, name, "counter", help);
    put(o, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(out *o, const char *name, const char *help, double v)
{
    head(o, name, "gauge", help);
    put(o, "%s %.9g\n", name, v);
}

static void histogram(out *o, const char *name, const char *help,
                      const histo *h, const double *le)
{
    head(o, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < MT_METRICS_NBUCKET; i++) {
        cum += h->n[i];
        put(o, "%s_bucket{le=\"%.6g\"} %llu\n", name, le[i], (unsigned long long)cum);
    }
    put(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    put(o, "%s_sum %.9g\n", name, h->sum);
    put(o, "%s_count %llu\n", name, (unsigned long long)h->count);
}

/* A label value: backslash, double quote and newline escaped. */
static void label(out *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            put(o, "\\%c", *v);
        else if (*v == '\n')
            put(o, "\\n");
        else
            put(o, "%c", *v);
    }
}

long mt_metrics_render(mt_metrics *m, char *buf, size_t cap, char *err,
                       size_t errlen)
{
    out o = {.buf = buf, .cap = cap};
    if (cap == 0) {
        mt_set_err(err, errlen, "metrics: no buffer");
        return -1;
    }
    buf[0] = '\0';
    pthread_mutex_lock(&m->mu);
    const mt_metrics_info *in = &m->info;
    head(&o, "metronome_info", "gauge", "What this mt-serve serves (the value is 1).");
    put(&o, "metronome_info{version=\"");
    label(&o, m->version);
    put(&o, "\",model=\"");
    label(&o, m->model);
    put(&o, "\",kv_policy=\"");
    label(&o, m->kv_policy);
    put(&o, "\",device=\"");
    label(&o, m->device);
    put(&o, "\"} 1\n");
    gauge(&o, "metronome_frame_period_seconds", "The tick period: one frame per session per tick.",
          in->frame_s);
    gauge(&o, "metronome_deadline_seconds", "An output is due this long after its input arrived.",
          in->deadline_s);
    counter(&o, "metronome_ticks_total", "Tick records written (one per tick; this scrape covers the first N).",
            m->ticks);
    histogram(&o, "metronome_step_seconds", "Compute time of a tick's steps and prefills (step_ms): the naive figure.",
              &m->step, m->le);
    histogram(&o, "metronome_tick_lateness_seconds", "Age at a tick's end of the oldest input not yet answered with real audio (late_ms): the truthful figure.",
              &m->late, m->le);
    counter(&o, "metronome_late_ticks_total", "Ticks whose lateness exceeded one frame period.",
            m->late_ticks);
    counter(&o, "metronome_frames_in_total", "Input frames read.", m->in);
    counter(&o, "metronome_frames_out_total", "Real output frames sent.", m->out);
    counter(&o, "metronome_frames_fill_total", "FILL (silence) frames sent for inputs past their deadline.",
            m->fill);
    counter(&o, "metronome_frames_missed_total", "Input frames that ended as counted misses.", m->miss);
    counter(&o, "metronome_sessions_admitted_total", "Sessions admitted.", m->admitted);
    counter(&o, "metronome_sessions_refused_total", "Sessions refused admission.", m->refused);
    counter(&o, "metronome_sessions_shed_total", "Admitted sessions ended by a controller's shed line.",
            m->shed);
    counter(&o, "metronome_sessions_ended_total", "Admitted sessions that ended, for any reason.",
            m->ended);
    counter(&o, "metronome_sessions_preempted_total", "Sessions preempted for KV blocks (full policy).",
            m->preempted);
    gauge(&o, "metronome_sessions_live", "Admitted sessions not yet ended.", (double)m->live);
    gauge(&o, "metronome_sessions_pending", "Sessions waiting for admission.", (double)m->pending);
    if (m->has_limit)
        gauge(&o, "metronome_sessions_limit", "The session count published to HAProxy's agent-check (maxconn).",
              (double)m->limit);
    int64_t bb = in->block_bytes;
    gauge(&o, "metronome_kv_pool_blocks_used", "KV pool blocks in use.",
          bb > 0 ? (double)((m->kv_used + bb - 1) / bb) : 0);
    gauge(&o, "metronome_kv_pool_blocks", "KV pool blocks in all.", (double)in->blocks_total);
    gauge(&o, "metronome_kv_used_bytes", "KV pool bytes in use.", (double)m->kv_used);
    gauge(&o, "metronome_kv_free_bytes", "KV pool bytes free.", (double)m->kv_free);
    gauge(&o, "metronome_kv_session_bound_bytes", "KV bytes one bounded session holds for its life (0: unbounded policy).",
          (double)in->session_bound);
    pthread_mutex_unlock(&m->mu);
    if (o.overflow) {
        mt_set_err(err, errlen, "metrics: the exposition does not fit %zu bytes", cap);
        return -1;
    }
    return (long)o.len;
}
