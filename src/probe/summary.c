/* summary.c: percentiles and counts from latency lines (mt-probe
 * summarize).
 *
 * Reads any logfmt record stream the suite prints: mt-serve's tick lines,
 * mt-replay's client lines, per-frame lines. Every numeric key of every
 * record kind gets count / mean / p50 / p90 / p99 / max, and a sum where
 * its values add up (summable: counts, not levels, times or ids) (exact
 * percentiles: values are kept, 8 bytes each, which is fine for the hours
 * of lines a run prints). For tick records it adds the verdict the project
 * exists to show: frames served for real vs filled with silence, and the
 * truthful deadline figure beside the naive one.
 */
#include "util/errmsg.h"
#include "util/grow.h"
#include "util/stats.h"
#include "probe/probe.h"
#include "wire/latline.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SUM_MAX_KINDS 32

typedef struct sum_key {
    char    name[MT_LL_KEY_MAX + 1];
    double *v;
    size_t  n, cap;
} sum_key;

typedef struct sum_kind {
    char     name[MT_LL_KEY_MAX + 1];
    long     records;
    sum_key  key[MT_LL_MAX_PAIRS];
    int      nkeys;
} sum_kind;

struct mt_summary {
    sum_kind kind[SUM_MAX_KINDS];
    int      nkinds;
    long     records, bad, other_kinds_dropped;
    /* tick records */
    long     ticks;
    double   t_first, t_last;
    int64_t  in, out, fill, preempted, admitted, rejected;
    int64_t  active_max, kv_used_max;
    double   met_sum, naive_met_sum;
    long     met_n;
    mt_latline ll;      /* big: kept here, not on the stack */
};

int mt_summary_new(mt_summary **out, char *err, size_t errlen)
{
    *out = mt_calloc_or_err(1, sizeof **out, err, errlen, "summarize");
    return *out ? 0 : -1;
}

void mt_summary_free(mt_summary *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nkinds; i++)
        for (int k = 0; k < s->kind[i].nkeys; k++)
            free(s->kind[i].key[k].v);
    free(s);
}

long mt_summary_bad_lines(const mt_summary *s) { return s->bad; }
long mt_summary_records(const mt_summary *s) { return s->records; }

static int parse_num(const char *v, double *out)
{
    char *end;
    if (!*v)
        return -1;
    double d = strtod(v, &end);
    if (*end || !isfinite(d))
        return -1;
    *out = d;
    return 0;
}

static int push(sum_key *k, double v)
{
    if (mt_grow(&k->v, &k->cap, k->n + 1, sizeof *k->v, 256) != 0)
        return -1;
    k->v[k->n++] = v;
    return 0;
}

int mt_summary_add_line(mt_summary *s, const char *line, size_t len,
                        long lineno, int strict, char *err, size_t errlen)
{
    char e[256];
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len || line[i] == '#')
        return 0;                       /* blank lines and comments */
    if (mt_latline_parse(line, len, lineno, &s->ll, e, sizeof e)) {
        s->bad++;
        if (strict) {
            mt_set_err(err, errlen, "%s", e);
            return -1;
        }
        return 0;
    }
    const char *kn = mt_latline_kind(&s->ll);
    if (!*kn)
        return 0;
    sum_kind *kind = NULL;
    for (int k = 0; k < s->nkinds; k++)
        if (!strcmp(s->kind[k].name, kn)) {
            kind = &s->kind[k];
            break;
        }
    if (!kind) {
        if (s->nkinds == SUM_MAX_KINDS) {
            s->other_kinds_dropped++;
            return 0;
        }
        kind = &s->kind[s->nkinds++];
        snprintf(kind->name, sizeof kind->name, "%s", kn);
    }
    kind->records++;
    s->records++;
    for (int p = 0; p < s->ll.n; p++) {
        double v;
        if (parse_num(s->ll.pair[p].val, &v))
            continue;
        sum_key *k = NULL;
        for (int j = 0; j < kind->nkeys; j++)
            if (!strcmp(kind->key[j].name, s->ll.pair[p].key)) {
                k = &kind->key[j];
                break;
            }
        if (!k) {
            if (kind->nkeys == MT_LL_MAX_PAIRS)
                continue;
            k = &kind->key[kind->nkeys++];
            snprintf(k->name, sizeof k->name, "%s", s->ll.pair[p].key);
        }
        if (push(k, v)) {
            mt_set_err(err, errlen, "summarize: out of memory");
            return -1;
        }
    }
    if (!strcmp(kn, "tick")) {
        mt_tick t;
        if (mt_tick_from_line(&s->ll, lineno, &t, e, sizeof e)) {
            s->bad++;
            if (strict) {
                mt_set_err(err, errlen, "%s", e);
                return -1;
            }
            return 0;
        }
        if (!s->ticks)
            s->t_first = t.t;
        s->t_last = t.t;
        s->ticks++;
        s->in += t.in;
        s->out += t.out;
        s->fill += t.fill;
        s->preempted += t.preempted;
        s->admitted = t.admitted;
        s->rejected = t.rejected;
        if (t.active > s->active_max)
            s->active_max = t.active;
        if (t.kv_used > s->kv_used_max)
            s->kv_used_max = t.kv_used;
        if (t.in + t.out + t.fill > 0 || t.active > 0) {
            s->met_sum += t.met;
            s->naive_met_sum += t.naive_met;
            s->met_n++;
        }
    }
    return 0;
}

int mt_summary_read(mt_summary *s, FILE *in, int strict,
                    const volatile sig_atomic_t *stop, char *err, size_t errlen)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while (!(stop && *stop) && (n = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if (mt_summary_add_line(s, line, (size_t)n, lineno, strict, err, errlen)) {
            rc = -1;
            break;
        }
    }
    if (!rc && ferror(in) && !(stop && *stop && errno == EINTR)) {
        mt_set_err(err, errlen, "read error: %s", strerror(errno));
        rc = -1;
    }
    free(line);
    return rc;
}

/* Whether a key's values add up to something: the per-record counts of
 * frames (a tick's in, out, fill, miss, preempted; a session's sent,
 * received, ...), not levels or totals so far (kv_used, active, admitted),
 * times, rates, sizes or ids (*_ms, met, rate, pid), nor the running
 * totals of replay_tick and replay_summary. */
static int summable(const char *kind, const char *key)
{
    static const char *const counts[] = {
        "in", "out", "fill", "miss", "preempted", "sent", "received",
        "filled", "late", "missing", "frames", "lines_dropped", NULL };
    if (!strcmp(kind, "replay_tick") || !strcmp(kind, "replay_summary"))
        return 0;
    for (int i = 0; counts[i]; i++)
        if (!strcmp(key, counts[i]))
            return 1;
    return 0;
}

static void num(FILE *out, double v, int tsv)
{
    if (isnan(v))
        fprintf(out, tsv ? "\t-" : " %10s", "-");
    else if ((v == floor(v) && fabs(v) < 1e15) || (fabs(v) >= 1e6 && fabs(v) < 1e10))
        fprintf(out, tsv ? "\t%.0f" : " %10.0f", v);   /* counts and bytes: whole */
    else if (fabs(v) >= 1e6 || (v != 0 && fabs(v) < 0.01))
        fprintf(out, tsv ? "\t%.6g" : " %10.4g", v);
    else if (v == floor(v))
        fprintf(out, tsv ? "\t%.0f" : " %10.0f", v);
    else
        fprintf(out, tsv ? "\t%.3f" : " %10.2f", v);
}

void mt_summary_print(FILE *out, const mt_summary *s, int format,
                      const char *only_kind)
{
    int tsv = format == MT_SUM_TSV;
    int kw = 4, yw = 3;
    for (int i = 0; i < s->nkinds; i++) {
        if (only_kind && strcmp(only_kind, s->kind[i].name))
            continue;
        if ((int)strlen(s->kind[i].name) > kw)
            kw = (int)strlen(s->kind[i].name);
        for (int j = 0; j < s->kind[i].nkeys; j++)
            if ((int)strlen(s->kind[i].key[j].name) > yw)
                yw = (int)strlen(s->kind[i].key[j].name);
    }
    if (tsv)
        fprintf(out, "kind\tkey\tcount\tmean\tp50\tp90\tp99\tmax\tsum\n");
    else
        fprintf(out, "%-*s %-*s %8s %10s %10s %10s %10s %10s %10s\n", kw,
                "kind", yw, "key", "count", "mean", "p50", "p90", "p99", "max",
                "sum");
    for (int i = 0; i < s->nkinds; i++) {
        const sum_kind *k = &s->kind[i];
        if (only_kind && strcmp(only_kind, k->name))
            continue;
        for (int j = 0; j < k->nkeys; j++) {
            const sum_key *key = &k->key[j];
            /* The record's own counter and clock are not measurements. */
            if (!strcmp(key->name, k->name) || !strcmp(key->name, "t") ||
                !strcmp(key->name, "session"))
                continue;
            double sum = 0;
            for (size_t x = 0; x < key->n; x++)
                sum += key->v[x];
            if (tsv)
                fprintf(out, "%s\t%s\t%zu", k->name, key->name, key->n);
            else
                fprintf(out, "%-*s %-*s %8zu", kw, k->name, yw, key->name,
                        key->n);
            num(out, key->n ? sum / (double)key->n : NAN, tsv);
            num(out, mt_stats_percentile(key->v, key->n, 0.50), tsv);
            num(out, mt_stats_percentile(key->v, key->n, 0.90), tsv);
            num(out, mt_stats_percentile(key->v, key->n, 0.99), tsv);
            num(out, mt_stats_percentile(key->v, key->n, 1.0), tsv);
            num(out, summable(k->name, key->name) ? sum : NAN, tsv);
            fputc('\n', out);
        }
    }
    if (s->ticks && !tsv && (!only_kind || !strcmp(only_kind, "tick"))) {
        int64_t answered = s->out + s->fill;
        fprintf(out, "\n# %ld ticks over %.1f s; most sessions at once %lld; "
                "admitted %lld, rejected %lld\n", s->ticks,
                s->t_last - s->t_first, (long long)s->active_max,
                (long long)s->admitted, (long long)s->rejected);
        fprintf(out, "# frames: in %lld, real out %lld, FILL (silence) %lld "
                "= %.1f%% of answers; preemptions %lld; kv peak %lld bytes\n",
                (long long)s->in, (long long)s->out, (long long)s->fill,
                answered ? 100.0 * (double)s->fill / (double)answered : 0.0,
                (long long)s->preempted, (long long)s->kv_used_max);
        if (s->met_n)
            fprintf(out, "# deadlines met: truthful %.1f%%  |  naive %.1f%% "
                    "(FILL counted as met)\n", s->met_sum / (double)s->met_n,
                    s->naive_met_sum / (double)s->met_n);
    }
    if (s->bad && !tsv)
        fprintf(out, "# %ld malformed line%s skipped\n", s->bad,
                s->bad == 1 ? "" : "s");
}
