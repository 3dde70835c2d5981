/* soak.c: the collapse soak (mt-probe soak).
 *
 * Each run starts its own mt-serve (fork/exec, a private socket, stopped by
 * its pid), so no run inherits another's state, plays one seeded workload
 * (probe_workload.c) against it through the shared client library
 * (client.h), reads the server's tick lines from its stdout, and says
 * whether the run collapsed. Configurations (e.g. --kv window, --kv full)
 * play the same seeds, so their rows compare the same sessions.
 *
 * Collapsed (by the model) means any of, the time to collapse being the
 * first that holds, in seconds since the load started, the same clock as
 * the prediction (mt_predict_one of the run's seed):
 *   - the K/V pool ran out: a preemption, or FILL with the pool exhausted
 *     (soak_classify.c reads it from the server's tick lines);
 *   - the server's lateness grew without bound: over the second half of
 *     the load its least-squares slope is at least 100 ms per second and
 *     it reached 1 s;
 *   - an admitted session went starve_s (2 s) or more without a real
 *     (non-FILL) output frame (silence sent on time is not service), from
 *     the last real frame before the gap, unless the gap began within a
 *     host stall (the client's input starved, then FILL with the pool's
 *     room; soak_classify.h): then the host starved it, not the model.
 * A run with a host stretch before its collapse (or in a run with none) is
 * marked disturbed by the host, with the stretch's times: its figures say
 * more about this machine than about the model.
 *
 * With a time scale K (simulated devices only), the server runs K times
 * faster than real time and so does everything here: arrivals, the client's
 * frame clock, the starvation threshold. Every time measured is multiplied
 * back by K, so rows, thresholds and predictions are all in model time and
 * a scaled run is read exactly like an unscaled one.
 */
#include "util/clock.h"
#include "util/errmsg.h"
#include "util/stats.h"
#include "util/units.h"
#include "probe/probe.h"
#include "probe/progress.h"
#include "probe/soak_classify.h"
#include "probe/spawn.h"
#include "client/client.h"
#include "wire/latline.h"
#include "decode/kv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- one run ------------------------------------------------------------- */

typedef struct tick_rec {
    mt_soak_tick k;          /* t: the server's t; late_ms: real ms */
    uint64_t recv;           /* when we read it */
    double   naive_ms, met, naive_met;
} tick_rec;

typedef struct soak_sess {
    int64_t  frames;
    uint64_t last_real;     /* 0 until accepted */
    int      accepted;
    double   max_gap_s;
} soak_sess;

typedef struct soak_ctx {
    const mt_soak_opts *o;
    mt_probe_source    *src;
    mt_workload         w;
    soak_sess          *s;
    uint64_t            t0, starve_ns;
    double              k;              /* time scale: model s per real s */
    double              onset_s;        /* first starvation onset */
    double              max_gap_s;
    uint64_t            real, fills;
    mt_pctl             rtt;
    tick_rec           *tk;
    size_t              ntk, captk;
    FILE               *tick_log;
    mt_latline          ll;
    char                src_err[256];
} soak_ctx;

static void note_gap(soak_ctx *x, soak_sess *s, uint64_t now)
{
    if (!s->last_real || now <= s->last_real)
        return;
    double gap = (double)(now - s->last_real) / 1e9 * x->k;
    if (gap > s->max_gap_s)
        s->max_gap_s = gap;
    if (gap > x->max_gap_s)
        x->max_gap_s = gap;
    if (now - s->last_real >= x->starve_ns && x->onset_s < 0 &&
        s->last_real >= x->t0)
        x->onset_s = (double)(s->last_real - x->t0) / 1e9 * x->k;
    else if (now - s->last_real >= x->starve_ns && x->onset_s < 0)
        x->onset_s = 0;
}

static int cb_accept(void *user, int idx, const mt_hello *fmt, char *reason,
                     size_t reasonlen)
{
    soak_ctx *x = user;
    if (mt_probe_source_prepare(x->src, (int)fmt->sample_rate, reason,
                                reasonlen))
        return -1;
    x->s[idx].accepted = 1;
    x->s[idx].last_real = mt_clock_ns();
    return 0;
}

static int cb_next(void *user, int idx, uint32_t seq, int16_t *pcm,
                   size_t samples)
{
    soak_ctx *x = user;
    if ((int64_t)seq >= x->s[idx].frames)
        return MT_NEXT_END;
    mt_probe_source_frame(x->src, idx, seq, pcm, samples);
    return MT_NEXT_FRAME;
}

static void cb_frame(void *user, const mt_client_result *r, const int16_t *pcm,
                     size_t samples)
{
    soak_ctx *x = user;
    soak_sess *s = &x->s[r->idx];
    (void)pcm;
    (void)samples;
    if (r->fill) {
        x->fills++;
        note_gap(x, s, r->t_recv);
    } else {
        x->real++;
        note_gap(x, s, r->t_recv);
        s->last_real = r->t_recv;
        mt_pctl_add(&x->rtt, r->rtt_ms > 0 ? (uint64_t)(r->rtt_ms * 1e6) : 0);
    }
}

static void on_tick_line(void *user, const char *line, size_t len)
{
    soak_ctx *x = user;
    char e[256];
    mt_tick t;
    if (x->tick_log)
        fprintf(x->tick_log, "%.*s\n", (int)len, line);
    if (mt_latline_parse(line, len, 0, &x->ll, e, sizeof e) ||
        strcmp(mt_latline_kind(&x->ll), "tick") ||
        mt_tick_from_line(&x->ll, 0, &t, e, sizeof e))
        return;
    if (x->ntk == x->captk) {
        size_t nc = x->captk ? x->captk * 2 : 1024;
        tick_rec *n = realloc(x->tk, nc * sizeof *n);
        if (!n)
            return;
        x->tk = n;
        x->captk = nc;
    }
    tick_rec *r = &x->tk[x->ntk++];
    mt_soak_tick_from(&t, &r->k);
    r->recv = mt_clock_ns();
    r->naive_ms = t.naive_ms;
    r->met = t.met;
    r->naive_met = t.naive_met;
}

/* Tick time -> seconds since the load started. Lines reach us through a
 * pipe within a few ms; the most prompt line fixes the offset. */
static double tick_offset(const soak_ctx *x)
{
    double off = INFINITY;
    for (size_t i = 0; i < x->ntk; i++) {
        double o = ((double)x->tk[i].recv - (double)x->t0) / 1e9 - x->tk[i].k.t;
        if (o < off)
            off = o;
    }
    return isfinite(off) ? off : 0;
}

/* The run's verdict from its ticks (model time) and the client's first
 * starvation (x->onset_s). */
static void classify_ticks(const soak_ctx *x, mt_soak_run *run)
{
    double off = tick_offset(x);
    mt_soak_tick *k = calloc(x->ntk + 1, sizeof *k);
    mt_soak_class c;
    size_t n = 0;
    if (k)
        for (size_t i = 0; i < x->ntk; i++) {
            k[n] = x->tk[i].k;
            k[n].t = (x->tk[i].k.t + off) * x->k;
            k[n].late_ms = x->tk[i].k.late_ms * x->k;
            n++;
        }
    mt_soak_classify(k, n, x->o->duration_s, x->o->starve_s, &c);
    free(k);
    run->overflow_s = c.model_s;
    run->late_end_ms = c.late_end_ms;
    run->late_slope = c.late_slope;
    run->unbounded_late = c.unbounded_late;
    double on = x->onset_s;
    /* the host's: the gap began (its last real frame) at most starve_s
     * before the client's input stopped in a stall, and before that stall
     * ended; the row then names that stall, else the first */
    int hs = mt_soak_host_covering(&c, on, x->o->starve_s);
    int host_starved = hs >= 0;
    run->host_s = hs >= 0 ? c.host_at[hs][0] : c.host_s;
    run->host_end_s = hs >= 0 ? c.host_at[hs][1] : c.host_end_s;
    run->host_free = hs >= 0 ? (int64_t)c.host_at[hs][2] : c.host_free;
    run->host_disturbed = c.host_s >= 0;
    run->starve_onset_s = x->onset_s;
    if (c.model_s >= 0)
        run->collapse_s = c.model_s;
    else if (c.unbounded_late && c.first_late_s >= 0)
        run->collapse_s = c.first_late_s;
    else if (on >= 0 && !host_starved)
        run->collapse_s = on;
    else
        run->collapse_s = -1;
    if (!k)
        snprintf(run->note, sizeof run->note, "out of memory: ticks unread");
}

/* Finds "--key VALUE" or "--key=VALUE" in a configuration's arguments. */
static const char *find_arg(const mt_soak_config *c, const char *key,
                            const char *alt)
{
    size_t kl = strlen(key);
    for (int i = 0; i < c->nargs; i++) {
        const char *a = c->args[i];
        if ((!strcmp(a, key) || (alt && !strcmp(a, alt))) && i + 1 < c->nargs)
            return c->args[i + 1];
        if (!strncmp(a, key, kl) && a[kl] == '=')
            return a + kl + 1;
    }
    return NULL;
}

static int is_full(const mt_soak_config *c)
{
    const char *kv = find_arg(c, "--kv", NULL);
    return kv && !strcmp(kv, "full");
}

/* Fills the run's identity and the context's clocks, makes the seeded
 * workload, and asks for the run's prediction (full pools only). */
static int run_prepare(soak_ctx *x, const mt_soak_opts *o, int ci, int ri,
                       mt_probe_source *src, const mt_predict_params *pred,
                       int pred_ok, double period, mt_soak_run *run,
                       char *err, size_t errlen)
{
    char e[256];
    memset(run, 0, sizeof *run);
    run->cfg = ci;
    run->run = ri;
    run->seed = o->seed + (uint64_t)ri;
    run->collapse_s = -1;
    run->overflow_s = -1;
    run->predicted_s = -1;
    run->starve_onset_s = -1;
    run->host_s = run->host_end_s = -1;
    x->o = o;
    x->src = src;
    x->onset_s = -1;
    x->k = o->time_scale > 0 ? o->time_scale : 1;
    x->starve_ns = (uint64_t)(o->starve_s / x->k * 1e9);
    mt_pctl_reset(&x->rtt);
    if (mt_workload_make(&o->arrivals, &o->lengths, o->duration_s, period,
                         run->seed, o->max_sessions, &x->w, err, errlen))
        return -1;
    x->s = mt_calloc_or_err((size_t)x->w.n + 1, sizeof *x->s, err, errlen, NULL);
    if (!x->s)
        return -1;
    for (int i = 0; i < x->w.n; i++)
        x->s[i].frames = x->w.s[i].frames;
    run->sessions = x->w.n;
    if (pred_ok && is_full(&o->cfg[ci])) {
        mt_predict_run pr;
        if (mt_predict_one(pred, run->seed, &pr, e, sizeof e) == 0)
            run->predicted_s = pr.overflow_s;
    }
    return 0;
}

/* Starts the configuration's mt-serve, with --time-scale K when scaled.
 * The argument vector is returned in *args_out for the caller to free;
 * it points into kbuf, which must live as long. */
static int start_server(soak_ctx *x, const mt_soak_config *c, const char *sock,
                        const char *log, mt_spawn_proc *sp, char ***args_out,
                        char kbuf[32], char *err, size_t errlen)
{
    return mt_spawn_start_scaled(sp, x->o->serve_bin, c->args, c->nargs, x->k,
                                 sock, log, args_out, kbuf, err, errlen);
}

static int soak_client_new(soak_ctx *x, double period, mt_client **cl,
                           char *err, size_t errlen)
{
    static const mt_client_callbacks cb = {cb_accept, cb_next, cb_frame, NULL, NULL, NULL};
    mt_client_config cc;
    mt_spawn_client_config(&cc, x->w.n + 1, period * 1e9, x->k, &cb, x);
    return mt_client_new(&cc, cl, err, errlen);
}

static void show_progress(soak_ctx *x, mt_progress *pg, int ci, int ri,
                          uint64_t now)
{
    const mt_soak_opts *o = x->o;
    /* Runs done before this one, plus this one's share of its
     * duration: the estimate of time left scales by it. */
    double in_run = ((double)now - (double)x->t0) / 1e9 * x->k / o->duration_s;
    in_run = in_run < 0 ? 0 : in_run > 1 ? 1 : in_run;
    char detail[160];
    snprintf(detail, sizeof detail, "%s, real %llu, fill %llu, "
             "max gap %.1f s", o->cfg[ci].label, (unsigned long long)x->real,
             (unsigned long long)x->fills, x->max_gap_s);
    mt_progress_show(pg, now, 0, "run", (double)(ri * o->ncfg + ci) + in_run,
                     (double)o->runs * o->ncfg, detail);
}

/* Lets the server settle, schedules every session, and drives the client
 * until all sessions end (or the run is given up). Stops the server on
 * every path. */
static int play_load(soak_ctx *x, mt_client *cl, mt_spawn_proc *sp,
                     const char *sock, mt_progress *pg, int ci, int ri,
                     char *err, size_t errlen)
{
    const mt_soak_opts *o = x->o;
    /* Let the server print its first ticks before the load starts. */
    uint64_t settle = mt_clock_ns() + 300000000ull;
    while (mt_clock_ns() < settle) {
        mt_spawn_poll_lines(sp, on_tick_line, x);
        mt_sleep_s(0.02);
    }
    x->t0 = mt_clock_ns() + 100000000ull;
    for (int i = 0; i < x->w.n; i++)
        if (mt_client_add_unix(cl, sock, x->t0 + (uint64_t)(x->w.s[i].start_s /
                                                              x->k * 1e9),
                               err, errlen) < 0) {
            mt_spawn_stop(sp, 2.0, on_tick_line, x);
            return -1;
        }
    uint64_t t_end = x->t0 + (uint64_t)(o->duration_s / x->k * 1e9);
    uint64_t t_give_up = t_end + 15000000000ull;
    int stopped = 0;
    for (;;) {
        uint64_t now = mt_clock_ns();
        int left = mt_client_run(cl, now + 20000000ull, err, errlen);
        if (left < 0) {
            mt_spawn_stop(sp, 2.0, on_tick_line, x);
            return -1;
        }
        mt_spawn_poll_lines(sp, on_tick_line, x);
        now = mt_clock_ns();
        for (int i = 0; i < x->w.n; i++) {
            const mt_client_stats *st = mt_client_session_stats(cl, i);
            if (st && st->state == MT_CS_STREAMING && x->s[i].accepted)
                note_gap(x, &x->s[i], now);
        }
        if (left == 0)
            break;
        if (o->stop && *o->stop) {
            mt_client_stop(cl);
            mt_spawn_stop(sp, 2.0, on_tick_line, x);
            mt_set_err(err, errlen, "interrupted");
            return -1;
        }
        if (!stopped && now > t_end + 3000000000ull) {
            mt_client_stop(cl);      /* a stalled server: end every input */
            stopped = 1;
        }
        if (now > t_give_up)
            break;
        show_progress(x, pg, ci, ri, now);
    }
    mt_spawn_stop(sp, 3.0, on_tick_line, x);
    return 0;
}

static void collect_results(soak_ctx *x, mt_client *cl, mt_soak_run *run)
{
    mt_client_totals tot;
    mt_client_totals_get(cl, &tot);
    for (int i = 0; i < x->w.n; i++) {
        const mt_client_stats *st = mt_client_session_stats(cl, i);
        if (!st)
            continue;
        if (st->state == MT_CS_REJECTED)
            run->rejected++;
        else if (st->state == MT_CS_FAILED) {
            run->failed++;
            if (!run->note[0])
                snprintf(run->note, sizeof run->note, "%.80s", st->reason);
        }
        if (st->t_accept)
            run->accepted++;
    }
    run->real = x->real;
    run->fills = x->fills;
    run->missing = tot.missing;
    run->max_starve_s = x->max_gap_s;
    run->p99_ms = (double)mt_pctl_quantile(&x->rtt, 0.99) / 1e6;
    classify_ticks(x, run);
    run->collapsed = run->collapse_s >= 0;
}

static void write_series(const soak_ctx *x, FILE *series)
{
    double off = tick_offset(x);
    fprintf(series, "# t late_ms naive_ms met naive_met\n");
    for (size_t i = 0; i < x->ntk; i++) {
        double t = (x->tk[i].k.t + off) * x->k;
        if (t < -1 || t > x->o->duration_s + 2)
            continue;
        fprintf(series, "%.3f %.2f %.3f %.2f %.2f\n", t,
                x->tk[i].k.late_ms * x->k, x->tk[i].naive_ms * x->k,
                x->tk[i].met, x->tk[i].naive_met);
    }
}

static int run_one(const mt_soak_opts *o, int ci, int ri, const char *tmpdir,
                   mt_probe_source *src, const mt_predict_params *pred,
                   int pred_ok, mt_soak_run *run, FILE *series,
                   mt_progress *pg, char *err, size_t errlen)
{
    soak_ctx *x = calloc(1, sizeof *x);
    mt_client *cl = NULL;
    char **args = NULL;
    mt_spawn_proc sp;
    char sock[512], log[512], tl[1024], kbuf[32];
    int rc = -1;
    if (!x) {
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    double period = pred->period_s > 0 ? pred->period_s : 0.08;
    if (run_prepare(x, o, ci, ri, src, pred, pred_ok, period, run,
                    err, errlen))
        goto out;
    snprintf(sock, sizeof sock, "%s/serve-%d-%d.sock", tmpdir, ci, ri);
    snprintf(log, sizeof log, "%s/serve-%d-%d.log", tmpdir, ci, ri);
    if (o->data_dir) {
        snprintf(tl, sizeof tl, "%s/ticks-c%d-r%02d.log", o->data_dir, ci, ri);
        x->tick_log = fopen(tl, "w");
    }
    if (start_server(x, &o->cfg[ci], sock, log, &sp, &args, kbuf,
                     err, errlen))
        goto out;
    if (soak_client_new(x, period, &cl, err, errlen)) {
        mt_spawn_stop(&sp, 2.0, on_tick_line, x);
        goto out;
    }
    if (play_load(x, cl, &sp, sock, pg, ci, ri, err, errlen))
        goto out;
    collect_results(x, cl, run);
    if (series)
        write_series(x, series);
    rc = 0;
out:
    if (x->tick_log)
        fclose(x->tick_log);
    free(args);
    mt_client_free(cl);
    mt_workload_free(&x->w);
    free(x->s);
    free(x->tk);
    free(x);
    return rc;
}

static double median_of(double *v, int n)
{
    return n ? mt_stats_percentile(v, (size_t)n, 0.5) : -1;
}

/* A time in seconds, or "-" when there is none (< 0). */
static const char *fmt_s(char *b, size_t n, double s)
{
    if (s >= 0)
        snprintf(b, n, "%.1f", s);
    else
        snprintf(b, n, "-");
    return b;
}

static void print_row(FILE *out, const mt_soak_opts *o, const mt_soak_run *r)
{
    char pred[16], coll[16], ovf[16], stv[16], host[16], hend[16];
    char note[320] = "";  /* the stall text (about 110 bytes) and r->note (96) */
    if (r->host_disturbed)
        snprintf(note, sizeof note, "host stall %s-%s s with %.1f GB of the "
                 "pool free, client input starved%s%s",
                 fmt_s(host, sizeof host, r->host_s),
                 fmt_s(hend, sizeof hend, r->host_end_s),
                 (double)r->host_free / 1e9, r->note[0] ? "; " : "", r->note);
    else
        snprintf(note, sizeof note, "%s", r->note);
    fprintf(out, "%-20s %3d %6llu %5d %5d %5d %8llu %7llu %7.1f %9.0f %8.0f "
            "%8s %8s %8s %8s %8s  %s%s%s\n", o->cfg[r->cfg].label, r->run,
            (unsigned long long)r->seed, r->sessions, r->accepted, r->rejected,
            (unsigned long long)r->real, (unsigned long long)r->fills,
            r->max_starve_s, r->late_end_ms, r->late_slope,
            fmt_s(pred, sizeof pred, r->predicted_s),
            fmt_s(coll, sizeof coll, r->collapse_s),
            fmt_s(ovf, sizeof ovf, r->overflow_s),
            fmt_s(stv, sizeof stv, r->starve_onset_s),
            fmt_s(host, sizeof host, r->host_s),
            r->collapsed ? "COLLAPSED" : "ok", note[0] ? "  # " : "", note);
    fflush(out);
}

/* Prediction parameters of one configuration: shape from -m (already in
 * o->pred), pool from --kv-mem, bound from --sink/--window. Returns whether
 * a prediction can be made. */
static int predict_params_for(const mt_soak_opts *o, const mt_soak_config *cfg,
                              mt_predict_params *pp)
{
    *pp = o->pred;
    pp->arrivals = o->arrivals;
    pp->lengths = o->lengths;
    pp->duration_s = o->duration_s;
    pp->max_sessions = o->max_sessions;
    pp->seed = o->seed;
    const char *v;
    uint64_t b;
    long n;
    pp->pool_bytes = MT_KV_DEFAULT_BUDGET;   /* mt-serve's default */
    if ((v = find_arg(cfg, "--kv-mem", NULL)) &&
        !mt_parse_bytes(v, &b, NULL, 0))
        pp->pool_bytes = b;
    if ((v = find_arg(cfg, "--sink", NULL))) {
        if (mt_parse_int(v, 0, INT_MAX, "--sink", &n, NULL, 0) != 0)
            return 0;
        pp->sink = (int)n;
    }
    if ((v = find_arg(cfg, "--window", NULL))) {
        if (mt_parse_int(v, 0, INT_MAX, "--window", &n, NULL, 0) != 0)
            return 0;
        pp->window = (int)n;
    }
    return pp->pool_bytes > 0 && mt_predict_position_bytes(pp) > 0;
}

static void print_header(FILE *out, const mt_soak_opts *o, const char *a,
                         const char *l)
{
    fprintf(out, "# soak: %d runs x %d configurations, %.0f s each, arrivals "
            "%s, lengths %s, seeds %llu..%llu; collapsed (by the model, at "
            "coll_s) = the pool exhausted (ovf_s), lateness growing without "
            "bound, or a session %.1f s without a real frame (starve_s) the "
            "host did not cause; host_s = a host stall (FILL while the pool "
            "had room and the client's input starved)\n",
            o->runs, o->ncfg, o->duration_s, a, l,
            (unsigned long long)o->seed,
            (unsigned long long)(o->seed + (uint64_t)o->runs - 1), o->starve_s);
    if (o->time_scale > 0 && o->time_scale != 1)
        fprintf(out, "# time-scaled x%g: servers and clients ran at %g times "
                "real time; every time below is model time\n",
                o->time_scale, o->time_scale);
    fprintf(out, "%-20s %3s %6s %5s %5s %5s %8s %7s %7s %9s %8s %8s %8s %8s "
            "%8s %8s  %s\n", "# config", "run", "seed", "sess", "acc", "rej",
            "real", "fill", "gap_s", "late_ms", "slope", "pred_s", "coll_s",
            "ovf_s", "starve_s", "host_s", "verdict");
    fflush(out);
}

/* The summary of one configuration (index c), prediction beside
 * measurement; *pred_med_all gets the predicted median overflow time when
 * the configuration has a full pool. */
static int print_config_summary(FILE *out, const mt_soak_opts *o, int c,
                                const mt_soak_run *runs, int nr,
                                mt_predict_params *pp, int pred_ok,
                                double *pred_med_all, char *err, size_t errlen)
{
    const mt_soak_config *cfg = &o->cfg[c];
    int n = 0, coll = 0, rej = 0, host = 0;
    double *m = calloc((size_t)o->runs + 1, sizeof *m);
    double *p = calloc((size_t)o->runs + 1, sizeof *p);
    int nm = 0;
    if (!m || !p) {
        free(m);
        free(p);
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (int k = 0; k < nr; k++) {
        if (runs[k].cfg != c)
            continue;
        n++;
        coll += runs[k].collapsed;
        rej += runs[k].rejected;
        host += runs[k].host_disturbed;
        if (runs[k].collapsed && runs[k].collapse_s >= 0 &&
            runs[k].predicted_s >= 0) {
            m[nm] = runs[k].collapse_s;
            p[nm] = runs[k].predicted_s;
            nm++;
        }
    }
    fprintf(out, "%-20s collapsed %d of %d runs (by the model); %d of %d "
            "runs disturbed by the host; %d sessions refused in all\n",
            cfg->label, coll, n, host, n, rej);
    if (pred_ok) {
        mt_predict_result pr;
        char e[256];
        pp->samples = 400;
        if (!mt_predict(pp, &pr, e, sizeof e)) {
            if (is_full(cfg)) {
                fprintf(out, "%-20s predicted: pool overflows in %.0f%% of "
                        "seeds (%.1f of %d runs), median at %.1f s "
                        "(p10 %.1f, p90 %.1f)\n", cfg->label,
                        100 * pr.p_overflow, pr.p_overflow * n, n,
                        pr.t_p50, pr.t_p10, pr.t_p90);
                *pred_med_all = pr.t_p50;
            } else {
                fprintf(out, "%-20s predicted: bounded capacity %d "
                        "sessions, %.1f refusals per run, no overflow\n",
                        cfg->label, pr.capacity, pr.rejected_mean);
            }
        }
    }
    if (nm) {
        double mm = median_of(m, nm), pm = median_of(p, nm);
        fprintf(out, "%-20s time to collapse: measured median %.1f s, "
                "predicted median %.1f s over the same %d seeds: %+.0f%%"
                "%s\n", cfg->label, mm, pm, nm,
                pm > 0 ? 100.0 * (mm - pm) / pm : 0.0,
                pm > 0 && fabs(mm - pm) <= 0.2 * pm ? " (within 20%)" :
                " (outside 20%)");
    }
    free(m);
    free(p);
    return 0;
}

static void remove_run_files(const mt_soak_opts *o, const char *tmpdir, int rc)
{
    /* Remove what the runs left (logs of servers, sockets). */
    for (int c = 0; c < o->ncfg; c++)
        for (int r = 0; r < o->runs; r++) {
            char p[600];
            snprintf(p, sizeof p, "%s/serve-%d-%d.log", tmpdir, c, r);
            if (rc && o->data_dir) {
                char q[1200];
                snprintf(q, sizeof q, "%s/serve-c%d-r%02d.log",
                         o->data_dir, c, r);
                rename(p, q);
            }
            unlink(p);
            snprintf(p, sizeof p, "%s/serve-%d-%d.sock", tmpdir, c, r);
            unlink(p);
        }
    rmdir(tmpdir);
}

static int plot_runs(const mt_soak_opts *o, const mt_plot_series *ser, int nr,
                     double pred_med_all, const char *a, const char *l,
                     char *err, size_t errlen)
{
    const char **labels = mt_calloc_or_err((size_t)o->ncfg + 1, sizeof *labels, err, errlen, NULL);
    if (!labels)
        return -1;
    for (int c = 0; c < o->ncfg; c++)
        labels[c] = o->cfg[c].label;
    char title[256];
    snprintf(title, sizeof title, "Collapse soak: %d runs per "
             "configuration, %.0f s, arrivals %s, lengths %s", o->runs,
             o->duration_s, a, l);
    int prc = mt_plot_soak(o->plot, ser, nr, labels, o->ncfg,
                           pred_med_all,
                           (o->pred.period_s > 0 ? o->pred.period_s
                                                 : 0.08) * 1000,
                           o->duration_s, title, err, errlen);
    free(labels);
    return prc;
}

/* After the runs (nr of them, fewer when interrupted): the summary per
 * configuration, prediction beside measurement, and the host's
 * disturbances. *pred_med_all: the prediction the plot draws. 0, or -1. */
static int print_summary(FILE *out, const mt_soak_opts *o, const mt_soak_run *runs, int nr,
                         mt_predict_params *pp, const int *pok, double *pred_med_all,
                         char *err, size_t errlen)
{
    if (o->stop && *o->stop)
        fprintf(out, "#\n# interrupted after %d of %d runs: the summary and "
                "the plot are of those\n", nr, o->runs * o->ncfg);
    fprintf(out, "#\n# summary\n");
    for (int c = 0; c < o->ncfg; c++)
        if (print_config_summary(out, o, c, runs, nr, &pp[c], pok[c],
                                 pred_med_all, err, errlen))
            return -1;
    int disturbed = 0;
    for (int k = 0; k < nr; k++)
        disturbed += runs[k].host_disturbed;
    if (disturbed)
        fprintf(out, "%d of %d runs disturbed by the host: rerun on a "
                "quieter machine\n", disturbed, nr);
    else
        fprintf(out, "0 of %d runs disturbed by the host\n", nr);
    fflush(out);
    return 0;
}

int mt_soak(const mt_soak_opts *o, FILE *out, mt_soak_run **runs_out,
            int *nruns_out, char *err, size_t errlen)
{
    char tmpl[] = "/tmp/mt-probe-soak.XXXXXX";
    char *tmpdir;
    mt_probe_source src;
    int total = o->runs * o->ncfg, nr = 0, rc = -1;
    mt_soak_run *runs = calloc((size_t)total + 1, sizeof *runs);
    mt_plot_series *ser = calloc((size_t)total + 1, sizeof *ser);
    char (*paths)[1024] = calloc((size_t)total + 1, sizeof *paths);
    mt_predict_params *pp = calloc((size_t)o->ncfg + 1, sizeof *pp);
    int *pok = calloc((size_t)o->ncfg + 1, sizeof *pok);
    *runs_out = NULL;
    *nruns_out = 0;
    if (!runs || !ser || !paths || !pp || !pok) {
        mt_set_err(err, errlen, "out of memory");
        goto done0;
    }
    if (!(tmpdir = mkdtemp(tmpl))) {
        mt_set_err(err, errlen, "mkdtemp: %s", strerror(errno));
        goto done0;
    }
    if (mt_probe_source_open(&src, o->audio, err, errlen))
        goto done1;
    for (int c = 0; c < o->ncfg; c++)
        pok[c] = predict_params_for(o, &o->cfg[c], &pp[c]);
    char a[64], l[64];
    mt_arrivals_format(&o->arrivals, a, sizeof a);
    mt_lengths_format(&o->lengths, l, sizeof l);
    print_header(out, o, a, l);
    mt_progress pg;
    mt_progress_start(&pg, o->progress != NULL, o->progress, "soak", mt_clock_ns());
    for (int r = 0; r < o->runs; r++)
        for (int c = 0; c < o->ncfg; c++) {
            FILE *series = NULL;
            int k = nr;
            snprintf(paths[k], sizeof paths[k], "%s/series-c%d-r%02d.dat",
                     o->data_dir ? o->data_dir : tmpdir, c, r);
            series = fopen(paths[k], "w");
            if (run_one(o, c, r, tmpdir, &src, &pp[c], pok[c], &runs[k],
                        series, &pg, err, errlen)) {
                mt_progress_clear(&pg);
                if (series)
                    fclose(series);
                if (o->stop && *o->stop && nr > 0)
                    goto interrupted;   /* the summary of the runs finished */
                goto done2;
            }
            if (series)
                fclose(series);
            mt_progress_clear(&pg);
            print_row(out, o, &runs[k]);
            ser[k].path = paths[k];
            ser[k].cfg = c;
            ser[k].collapsed = runs[k].collapsed;
            nr++;
        }
interrupted:;
    double pred_med_all = -1;
    if (print_summary(out, o, runs, nr, pp, pok, &pred_med_all, err, errlen))
        goto done2;
    if (o->plot && plot_runs(o, ser, nr, pred_med_all, a, l, err, errlen))
        goto done2;
    rc = 0;
done2:
    mt_probe_source_free(&src);
done1:
    if (!o->data_dir)
        for (int k = 0; k < total; k++)
            if (paths[k][0])
                unlink(paths[k]);
    remove_run_files(o, tmpdir, rc);
done0:
    free(ser);
    free(paths);
    free(pp);
    free(pok);
    if (rc) {
        free(runs);
        return -1;
    }
    *runs_out = runs;
    *nruns_out = nr;
    return 0;
}
