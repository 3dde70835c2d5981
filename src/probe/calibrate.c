/* calibrate.c: `mt-probe calibrate` (calibrate.h): times a real backend's
 * steps over a grid of batch sizes and cache lengths, fits the simulated
 * device's cost model to the medians, prints every point's residual, and
 * writes a profile whose figures say they were fitted, on what and when.
 *
 * Bare (the default) times a decoder alone in this process. --served times
 * the step where it runs: it sweeps a real mt-serve with mt-probe's paced
 * clients (sweep.c) and reads each tick's stepped batch and step time
 * (calibrate_ticks.c). On a host whose cores the step shares with the
 * clients, the I/O thread and the ticker, the served step is the longer
 * one, and the one a simulation of that host's serving must reproduce.
 *
 * The cache is not computed for the grid: a session is given its blocks
 * and its length set, so a step reads as many K/V positions as a real
 * session of that length would (what a step costs does not depend on what
 * the cache holds). The cost model's terms come from backend_sim.c itself
 * (mt_sim_step_cost with unit rates), so the fit and the simulator can
 * never disagree on what bytes and flops a step has. The command line is
 * read in src/cmd/calibrate_cmd.c. */
#define _GNU_SOURCE
#include "probe/calibrate.h"
#include "probe/calibrate_frame.h"
#include "model/kyutai_lm.h"
#include "probe/probe.h"
#include "decode/backend_sim.h"
#include "decode/decoder.h"
#include "decode/kv.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/errmsg.h"
#include "wire/latline.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    return (double)mt_clock_ns() * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- the fit ---------------------------------------------------------------- */

static double model_at(const mt_calib_point *p, const double *x)
{
    double tm = p->bytes / exp(x[0]), tf = p->flops / exp(x[1]);
    return (tm > tf ? tm : tf) + (x[2] > 0 ? x[2] : 0);
}

static double loss(const mt_calib_point *pts, int n, const double *x)
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        double r = (model_at(&pts[i], x) - pts[i].t_s) / pts[i].t_s;
        s += r * r;
    }
    return x[2] < 0 ? s + 1e3 * x[2] * x[2] : s;
}

double mt_calib_fit(mt_calib_point *pts, int n, double *bandwidth,
                    double *matrix_rate, double *overhead_s)
{
    if (n < 3)
        return -1;
    /* start: half the smallest time as overhead, then each rate as if it
     * alone explained the rest at its best point */
    double tmin = pts[0].t_s;
    for (int i = 1; i < n; i++)
        if (pts[i].t_s < tmin)
            tmin = pts[i].t_s;
    double ov = tmin / 2, bw = 0, rate = 0;
    for (int i = 0; i < n; i++) {
        double rest = pts[i].t_s - ov;
        if (rest <= 0)
            continue;
        if (pts[i].bytes / rest > bw)
            bw = pts[i].bytes / rest;
        if (pts[i].flops / rest > rate)
            rate = pts[i].flops / rest;
    }
    if (!(bw > 0) || !(rate > 0))
        return -1;
    /* Nelder-Mead over (log bw, log rate, overhead) */
    double v[4][3], f[4];
    double x0[3] = { log(bw), log(rate), ov };
    for (int k = 0; k < 4; k++) {
        memcpy(v[k], x0, sizeof x0);
        if (k < 3)
            v[k][k] += k < 2 ? 0.3 : tmin / 4;
        f[k] = loss(pts, n, v[k]);
    }
    for (int it = 0; it < 4000; it++) {
        /* order: v[0] best .. v[3] worst */
        for (int a = 0; a < 4; a++)
            for (int b = a + 1; b < 4; b++)
                if (f[b] < f[a]) {
                    double t = f[a];
                    f[a] = f[b];
                    f[b] = t;
                    for (int d = 0; d < 3; d++) {
                        t = v[a][d];
                        v[a][d] = v[b][d];
                        v[b][d] = t;
                    }
                }
        if (fabs(f[3] - f[0]) <= 1e-14 * (1 + f[0]))
            break;
        double c[3] = { 0, 0, 0 }, xr[3], xe[3], xc[3];
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 3; d++)
                c[d] += v[k][d] / 3;
        for (int d = 0; d < 3; d++)
            xr[d] = c[d] + (c[d] - v[3][d]);
        double fr = loss(pts, n, xr);
        if (fr < f[0]) {
            for (int d = 0; d < 3; d++)
                xe[d] = c[d] + 2 * (c[d] - v[3][d]);
            double fe = loss(pts, n, xe);
            memcpy(v[3], fe < fr ? xe : xr, sizeof xr);
            f[3] = fe < fr ? fe : fr;
        } else if (fr < f[2]) {
            memcpy(v[3], xr, sizeof xr);
            f[3] = fr;
        } else {
            for (int d = 0; d < 3; d++)
                xc[d] = c[d] + 0.5 * (v[3][d] - c[d]);
            double fc = loss(pts, n, xc);
            if (fc < f[3]) {
                memcpy(v[3], xc, sizeof xc);
                f[3] = fc;
            } else {
                for (int k = 1; k < 4; k++) {
                    for (int d = 0; d < 3; d++)
                        v[k][d] = v[0][d] + 0.5 * (v[k][d] - v[0][d]);
                    f[k] = loss(pts, n, v[k]);
                }
            }
        }
    }
    int best = 0;
    for (int k = 1; k < 4; k++)
        if (f[k] < f[best])
            best = k;
    *bandwidth = exp(v[best][0]);
    *matrix_rate = exp(v[best][1]);
    *overhead_s = v[best][2] > 0 ? v[best][2] : 0;
    for (int i = 0; i < n; i++)
        pts[i].fit_s = model_at(&pts[i], v[best]);
    return sqrt(f[best] / n);
}

/* ---- the experiment ---------------------------------------------------------- */

void mt_calibrate_opts_default(mt_calibrate_opts *o)
{
    static const long batches[] = { 1, 2, 4, 8, 16 }, lengths[] = { 16, 64, 256, 1024 };
    memset(o, 0, sizeof *o);
    o->model = "synthetic:small";
    o->device = MT_DEV_CPU;
    o->reps = 12;
    memcpy(o->batches, batches, sizeof batches);
    o->nbatches = 5;
    memcpy(o->lengths, lengths, sizeof lengths);
    o->nlengths = 4;
    o->reserve = -1;
    o->sink = 4;
    o->window = 256;
    o->hold_s = 4;
    o->warmup_s = 1;
}

/* One run: the options resolved, the backend under test, the sequences the
 * grid's batches step, and what the timing found. */
typedef struct calib_run {
    const mt_calibrate_opts *o;
    FILE       *report;           /* the grid, the fit and warnings */
    FILE       *profile;          /* the profile when o->output is NULL */
    char        name[64];
    double      memory, reserve;  /* the options', defaults filled in */
    long        bmax, lmax;       /* the grid's largest batch and length */
    mt_model   *m;                /* the model, or lm's temporal transformer */
    mt_kyutai_lm *lm;             /* a Kyutai model: the whole LM (owns m) */
    float      *x_in, *h_out, *tlog; /* Kyutai: [bmax, hidden] in and out, [bmax, vocab] */
    mt_calib_frame frame;         /* Kyutai: the depformer's and codec's fits */
    mt_decoder *d;
    mt_kv_pool *pool;
    size_t      elem, pb;         /* bytes per weight/K/V element, per cached position */
    mt_sim     *terms;            /* the simulator at unit rates: the cost model's terms */
    mt_kv_seq **seqs;             /* bmax */
    int64_t    *vis;              /* bmax */
    int16_t    *pcm_in, *pcm_out; /* bmax frames */
    double     *ts;               /* one point's timed steps */
    double     *lres;             /* log(step / median) over every point */
    int         nres;
    mt_calib_point *pts;
    int         npts;
    /* --served */
    mt_calib_ticks *ticks;
    int         oom;              /* a tick sample could not be kept */
    double      served_sigma;     /* the ticks' jitter */
    int         dropped;          /* ticks in groups too small to be points */
    char        levels[256];      /* the levels played, for the profile */
} calib_run;

typedef struct calib_fit {
    double bw, rate, ov;          /* bandwidth, matrix_rate, overhead_s */
    double rms;                   /* RMS relative residual */
    double sigma;                 /* step-to-step spread: the profile's jitter */
} calib_fit;

/* Fills the defaults that depend on the device and the host. */
static int resolve_opts(calib_run *r, char *err, size_t errlen)
{
    const mt_calibrate_opts *o = r->o;
    if (o->nbatches < 1 || o->nbatches > MT_CALIB_GRID_MAX ||
        o->nlengths < 1 || o->nlengths > MT_CALIB_GRID_MAX || o->reps < 1) {
        mt_set_err(err, errlen, "empty grid or no timed steps");
        return -1;
    }
    if (o->name && (strlen(o->name) >= sizeof r->name || strpbrk(o->name, " \t\n#="))) {
        mt_set_err(err, errlen, "'%s' cannot be a profile name", o->name);
        return -1;
    }
    r->memory = o->memory;
    if (r->memory == 0) {
        if (o->device == MT_DEV_CUDA) {
            mt_set_err(err, errlen, "--memory BYTES is required with --device cuda");
            return -1;
        }
        r->memory = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    }
    r->reserve = o->reserve < 0 ? r->memory / 8 : o->reserve;
    if (o->name && o->name[0])
        snprintf(r->name, sizeof r->name, "%s", o->name);
    else
        snprintf(r->name, sizeof r->name, "calibrated-%s%s", o->device == MT_DEV_CUDA ? "cuda" : "cpu",
                 o->served ? "-served" : "");
    for (int i = 0; i < o->nbatches; i++)
        r->bmax = o->batches[i] > r->bmax ? o->batches[i] : r->bmax;
    for (int i = 0; i < o->nlengths; i++)
        r->lmax = o->lengths[i] > r->lmax ? o->lengths[i] : r->lmax;
    return 0;
}

/* The model and a decoder whose pool holds the grid's largest point. */
static int load_backend(calib_run *r, char *err, size_t errlen)
{
    const mt_calibrate_opts *o = r->o;
    /* served: mt-serve loads the weights; only the shape is wanted here */
    int mflags = o->served || (o->device == MT_DEV_CUDA && strncmp(o->model, "synthetic:", 10) == 0)
                 ? MT_MODEL_SHAPE_ONLY : 0;
    if (mt_kyutai_is_kyutai(o->model)) {
        /* the temporal step takes embeddings; the depformer needs host weights */
        int kflags = o->served ? MT_MODEL_SHAPE_ONLY
                     : o->device == MT_DEV_CUDA ? MT_KYUTAI_HOST_SIDE : 0;
        if (mt_kyutai_load(o->model, kflags, &r->lm, err, errlen) != 0)
            return -1;
        r->m = r->lm->temporal;
    } else if (mt_model_load(o->model, mflags, &r->m, err, errlen) != 0)
        return -1;
    if (!r->m->cfg.has_audio && !r->lm) {
        mt_set_err(err, errlen, "%s has no audio adapter", o->model);
        return -1;
    }
    /* the pool is sized before the decoder exists: bf16 on CUDA, the CPU's
     * default f32 (do.kv_dtype left at its default) */
    r->elem = o->device == MT_DEV_CUDA ? 2 : mt_num_format_bytes(MT_FMT_DEFAULT);
    r->pb = mt_decoder_position_bytes(&r->m->cfg, r->elem);
    if (o->served)
        return 0;
    mt_decoder_opts dopt;
    memset(&dopt, 0, sizeof dopt);
    dopt.device = o->device;
    dopt.max_batch = (int)r->bmax;
    dopt.threads = o->threads;
    dopt.kv.policy = MT_KV_FULL;
    dopt.kv.budget_bytes = (size_t)r->bmax * (size_t)(r->lmax + o->reps + 2 + 2 * MT_KV_BLOCK) * r->pb;
    if (mt_decoder_create(r->m, &dopt, &r->d, err, errlen) != 0)
        return -1;
    r->pool = mt_decoder_pool(r->d);
    return 0;
}

/* The buffers, the cost terms (from the simulator's own code) and bmax
 * open sequences. */
static int prepare_grid(calib_run *r, char *err, size_t errlen)
{
    const mt_calibrate_opts *o = r->o;
    int cells = o->nbatches * o->nlengths;
    size_t frames = (size_t)r->bmax * (size_t)r->m->cfg.frame_samples;
    r->pts = calloc((size_t)cells, sizeof *r->pts);
    r->seqs = calloc((size_t)r->bmax, sizeof *r->seqs);
    r->vis = calloc((size_t)r->bmax, sizeof *r->vis);
    r->pcm_in = calloc(frames, sizeof *r->pcm_in);
    r->pcm_out = calloc(frames, sizeof *r->pcm_out);
    r->ts = calloc((size_t)o->reps, sizeof *r->ts);
    r->lres = calloc((size_t)cells * (size_t)o->reps, sizeof *r->lres);
    if (!r->pts || !r->seqs || !r->vis || !r->pcm_in || !r->pcm_out || !r->ts || !r->lres) {
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    if (r->lm) {
        size_t H = (size_t)r->m->cfg.hidden, V = (size_t)(r->m->cfg.vocab > 0 ? r->m->cfg.vocab : 1);
        r->x_in = calloc((size_t)r->bmax * H, sizeof *r->x_in);
        r->h_out = calloc((size_t)r->bmax * H, sizeof *r->h_out);
        r->tlog = calloc((size_t)r->bmax * V, sizeof *r->tlog);
        if (!r->x_in || !r->h_out || !r->tlog) {
            mt_set_err(err, errlen, "out of memory");
            return -1;
        }
    }
    if (mt_calib_unit_terms(&r->m->cfg, r->elem, &r->terms, err, errlen) != 0)
        return -1;
    for (long i = 0; i < r->bmax; i++)
        if (mt_kv_seq_open(r->pool, &r->seqs[i]) != 0) {
            mt_set_err(err, errlen, "cannot open %ld sequences", r->bmax);
            return -1;
        }
    for (size_t i = 0; i < frames; i++)
        r->pcm_in[i] = (int16_t)(((long)i * 7919) % 6000 - 3000);
    return 0;
}

/* Times reps steps (after 2 to warm up) of B sessions whose caches hold L
 * positions, and adds the point with its median and cost terms. */
static int time_point(calib_run *r, int B, long L, char *err, size_t errlen)
{
    int reps = r->o->reps, bad = 0;
    for (int i = 0; i < B; i++) {
        mt_kv_release(r->pool, r->seqs[i]);
        if (mt_kv_reserve(r->pool, r->seqs[i], L + reps + 2) != 0)
            bad = 1;
        r->seqs[i]->len = L;   /* cache content does not change the cost */
    }
    if (bad) {
        mt_set_err(err, errlen, "pool too small for B=%d L=%ld", B, L);
        return -1;
    }
    mt_step_io io = { .pcm_in = r->pcm_in, .pcm_out = r->pcm_out };
    if (r->lm)   /* as decode/kyutai.c steps it: embeddings in, h and text logits out */
        io = (mt_step_io){ .x_in = r->x_in, .h_out = r->h_out, .logits = r->tlog };
    for (int k = 0; k < reps + 2; k++) {
        double t0 = now_s();
        if (mt_decoder_step(r->d, B, r->seqs, &io, err, errlen) != 0)
            return -1;
        if (k >= 2)
            r->ts[k - 2] = now_s() - t0;
    }
    /* the timed steps read L+2 .. L+reps+1 positions: the median's */
    for (int i = 0; i < B; i++)
        r->vis[i] = mt_kv_visible_count(r->pool, L + 2 + reps / 2);
    mt_sim_cost cost;
    mt_sim_step_cost(r->terms, B, r->vis, 0, &cost);
    qsort(r->ts, (size_t)reps, sizeof *r->ts, cmp_double);
    double med = r->ts[reps / 2];
    for (int k = 0; k < reps; k++)
        r->lres[r->nres++] = log(r->ts[k] / med);
    r->pts[r->npts++] = (mt_calib_point){ .batch = B, .len = L, .bytes = cost.bytes,
                                          .flops = cost.flops, .t_s = med, .ticks = reps };
    return 0;
}

static int time_grid(calib_run *r, char *err, size_t errlen)
{
    const mt_calibrate_opts *o = r->o;
    fprintf(r->report, "mt-probe calibrate: %s on %s, %d x %d points, %d steps each\n",
            r->m->cfg.name, mt_decoder_backend_name(r->d), o->nbatches, o->nlengths, o->reps);
    fprintf(r->report, "%6s %7s %10s %10s %8s\n", "batch", "len", "step_ms", "fit_ms", "resid%");
    for (int bi = 0; bi < o->nbatches; bi++)
        for (int li = 0; li < o->nlengths; li++)
            if (time_point(r, (int)o->batches[bi], o->lengths[li], err, errlen) != 0)
                return -1;
    return 0;
}

/* ---- --served: the step timed where it runs ----------------------------------- */

static void served_tick(void *user, int level, int measuring, const struct mt_tick *t)
{
    calib_run *r = user;
    if (mt_calib_ticks_add(r->ticks, level, measuring, t) < 0)
        r->oom = 1;
}

/* Sweeps a real mt-serve (the model, device and window policy given) with
 * mt-probe's paced clients at the levels, its table to the report, and
 * turns the ticks read during each level's hold into fit points. */
static int time_served(calib_run *r, char *err, size_t errlen)
{
    const mt_calibrate_opts *o = r->o;
    if (!o->serve_bin) {
        mt_set_err(err, errlen, "--served: no mt-serve to run");
        return -1;
    }
    int levels[MT_CALIB_GRID_MAX];
    size_t off = 0;
    for (int i = 0; i < o->nbatches; i++) {
        levels[i] = (int)o->batches[i];
        if (off < sizeof r->levels)
            off += (size_t)snprintf(r->levels + off, sizeof r->levels - off, "%s%d",
                                    i ? "," : "", levels[i]);
    }
    if (mt_calib_ticks_new(&r->m->cfg, r->elem, o->sink, o->window, &r->ticks, err, errlen))
        return -1;
    char win[24], sink[24], maxs[24], thr[24];
    snprintf(win, sizeof win, "%d", o->window);
    snprintf(sink, sizeof sink, "%d", o->sink);
    snprintf(maxs, sizeof maxs, "%ld", r->bmax);
    snprintf(thr, sizeof thr, "%d", o->threads);
    char *args[16];
    int na = 0;
    args[na++] = "-m";
    args[na++] = (char *)o->model;
    args[na++] = "--device";
    args[na++] = o->device == MT_DEV_CUDA ? "cuda" : "cpu";
    args[na++] = "--window";
    args[na++] = win;
    args[na++] = "--sink";
    args[na++] = sink;
    args[na++] = "--max-sessions";
    args[na++] = maxs;
    if (o->threads > 0) {
        args[na++] = "--threads";
        args[na++] = thr;
    }
    args[na] = NULL;
    fprintf(r->report, "mt-probe calibrate --served: %s, mt-serve --device %s --window %d --sink %d; "
            "levels %s sessions, %.1f s hold after %.1f s warm-up each: the step timed inside "
            "the serving process (tick lines), sharing this host with the clients\n",
            r->m->cfg.name, args[3], o->window, o->sink, r->levels, o->hold_s, o->warmup_s);
    mt_sweep_opts so;
    memset(&so, 0, sizeof so);
    so.levels = levels;
    so.nlevels = o->nbatches;
    so.hold_s = o->hold_s;
    so.warmup_s = o->warmup_s;
    so.serve_bin = o->serve_bin;
    so.serve_args = args;
    so.nserve_args = na;
    so.on_tick = served_tick;
    so.tick_user = r;
    mt_sweep_row *rows = NULL;
    int nrows = 0, wall = 0;
    if (mt_sweep_run(&so, r->report, &rows, &nrows, &wall, err, errlen) != 0)
        return -1;
    free(rows);
    if (r->oom) {
        mt_set_err(err, errlen, "out of memory keeping the ticks");
        return -1;
    }
    if (mt_calib_ticks_points(r->ticks, MT_CALIB_SERVED_MIN_TICKS, &r->pts, &r->npts,
                              &r->served_sigma, &r->dropped, err, errlen) != 0)
        return -1;
    fprintf(r->report, "mt-probe calibrate --served: %zu ticks measured, %d points "
            "(batch x visible positions, median of at least %d ticks), %d ticks in smaller groups left out\n",
            mt_calib_ticks_count(r->ticks), r->npts, MT_CALIB_SERVED_MIN_TICKS, r->dropped);
    fprintf(r->report, "%6s %7s %10s %10s %8s %6s\n", "batch", "len", "step_ms", "fit_ms",
            "resid%", "ticks");
    return 0;
}

/* Fits the cost model to the points and reports every point's residual,
 * the fit and the jitter. */
static int fit_points(calib_run *r, calib_fit *fit, char *err, size_t errlen)
{
    fit->rms = mt_calib_fit(r->pts, r->npts, &fit->bw, &fit->rate, &fit->ov);
    if (fit->rms < 0) {
        mt_set_err(err, errlen, "too few points to fit (%d; need 3)", r->npts);
        return -1;
    }
    for (int i = 0; i < r->npts; i++) {
        fprintf(r->report, "%6d %7ld %10.3f %10.3f %+8.1f", r->pts[i].batch, r->pts[i].len,
                r->pts[i].t_s * 1e3, r->pts[i].fit_s * 1e3,
                100 * (r->pts[i].fit_s - r->pts[i].t_s) / r->pts[i].t_s);
        if (r->o->served)
            fprintf(r->report, " %6d", r->pts[i].ticks);
        fputc('\n', r->report);
    }
    if (r->o->served) {
        fit->sigma = r->served_sigma;
    } else {
        double s2 = 0;
        for (int i = 0; i < r->nres; i++)
            s2 += r->lres[i] * r->lres[i];
        fit->sigma = r->nres > 1 ? sqrt(s2 / (r->nres - 1)) : 0;
        if (fit->sigma > 2)
            fit->sigma = 2;
    }
    fprintf(r->report, "mt-probe calibrate: fit: bandwidth %.4g B/s, matrix_rate %.4g flop/s, "
            "overhead %.1f us; RMS relative residual %.1f%%; step-to-step sigma %.3f\n",
            fit->bw, fit->rate, fit->ov * 1e6, 100 * fit->rms, fit->sigma);
    double weights = (double)mt_model_params(&r->m->cfg) * (double)r->elem;
    if (r->memory - weights - r->reserve < (double)r->pb * MT_KV_BLOCK)
        fprintf(r->report, "mt-probe calibrate: warning: --memory %.4g less weights %.4g and reserve %.4g leaves no K/V pool\n",
                r->memory, weights, r->reserve);
    return 0;
}

/* The profile (mt-profile(5)), each figure saying where it came from. */
static void print_profile(const calib_run *r, const calib_fit *fit, FILE *f)
{
    const char *tick_dev = r->ticks ? mt_calib_ticks_device(r->ticks) : "";
    const char *backend = r->d ? mt_decoder_backend_name(r->d)
                          : tick_dev[0] ? tick_dev
                          : r->o->device == MT_DEV_CUDA ? "cuda" : "cpu";
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    if (r->o->served)
        fprintf(f, "# %s: fitted by mt-probe calibrate --served on %s to %d points (stepped\n"
                   "# batch x visible cache positions) of the tick lines of mt-serve, %s\n"
                   "# backend running %s (--window %d --sink %d), under mt-probe's paced\n"
                   "# clients at %s sessions; RMS relative residual %.1f%%. The step times\n"
                   "# include this host's contention: the clients, the I/O thread and the\n"
                   "# ticker ran on the same cores as the step.\n",
                r->name, when, r->npts, backend, r->m->cfg.name, r->o->window, r->o->sink,
                r->levels, 100 * fit->rms);
    else
        fprintf(f, "# %s: fitted by mt-probe calibrate on %s to %d points (batches x cache\n"
                   "# lengths) of the %s backend running %s; RMS relative residual %.1f%%.\n",
                r->name, when, r->npts, backend, r->m->cfg.name, 100 * fit->rms);
    fprintf(f, "# Format: mt-profile(5). A simulation on this profile reproduces the fit,\n"
               "# not the backend: believe it only within the residual and the grid.\n");
    fprintf(f, "name          = %s\n", r->name);
    fprintf(f, "model         = %s\n", r->m->cfg.name);
    fprintf(f, "memory_bytes  = %.6g   # %s\n", r->memory,
            r->o->device == MT_DEV_CPU ? "this host's physical memory (or --memory)" : "--memory");
    fprintf(f, "reserve_bytes = %.6g   # %s\n", r->reserve, "--reserve (default 1/8 of memory): an assumption");
    fprintf(f, "bandwidth     = %.6g   # fitted\n", fit->bw);
    fprintf(f, "matrix_rate   = %.6g   # fitted\n", fit->rate);
    fprintf(f, "overhead_us   = %.6g   # fitted\n", fit->ov * 1e6);
    fprintf(f, "weight_bytes  = %zu   # the %s backend's weights\n", r->elem, backend);
    fprintf(f, "kv_bytes      = %zu   # the %s backend's K/V\n", r->elem, backend);
    fprintf(f, "jitter_sigma  = %.4g   # measured: spread of log(step / median) over all points%s\n",
            fit->sigma, r->o->served ? "' ticks" : "");
    fprintf(f, "stall_prob    = 0   # not measured\n");
    fprintf(f, "stall_ms      = 0\n");
    fprintf(f, "seed          = 1\n");
    if (r->lm)
        mt_calib_frame_print(&r->frame, f);
    fprintf(f, "# points: batch len measured_ms fitted_ms\n");
    for (int i = 0; i < r->npts; i++)
        fprintf(f, "#   %d %ld %.4f %.4f\n", r->pts[i].batch, r->pts[i].len, r->pts[i].t_s * 1e3,
                r->pts[i].fit_s * 1e3);
}

/* To o->output, or the caller's stream when there is none. */
static int write_profile(const calib_run *r, const calib_fit *fit, char *err, size_t errlen)
{
    const char *path = r->o->output;
    FILE *f = path ? fopen(path, "w") : r->profile;
    if (!f) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    print_profile(r, fit, f);
    if (path ? fclose(f) != 0 : fflush(f) != 0) {
        mt_set_err(err, errlen, "writing the profile: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void free_run(calib_run *r)
{
    mt_calib_ticks_free(r->ticks);
    if (r->pool)
        mt_kv_seq_close_all(r->pool, r->seqs, (size_t)r->bmax);
    mt_sim_free(r->terms);
    free(r->pts);
    free(r->seqs);
    free(r->vis);
    free(r->pcm_in);
    free(r->pcm_out);
    free(r->ts);
    free(r->lres);
    free(r->x_in);
    free(r->h_out);
    free(r->tlog);
    mt_decoder_free(r->d);
    if (r->lm)
        mt_kyutai_free(r->lm);
    else
        mt_model_free(r->m);
}

int mt_calibrate_run(const mt_calibrate_opts *o, FILE *report, FILE *profile, char *err,
                     size_t errlen)
{
    calib_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.report = report;
    r.profile = profile;
    calib_fit fit;
    int rc = -1;
    if (resolve_opts(&r, err, errlen) == 0 && load_backend(&r, err, errlen) == 0 &&
        (o->served ? time_served(&r, err, errlen)
                   : prepare_grid(&r, err, errlen) || time_grid(&r, err, errlen)) == 0 &&
        fit_points(&r, &fit, err, errlen) == 0 &&
        (!r.lm || o->served ||
         mt_calib_frame_run(o, r.lm, fit.bw, report, &r.frame, err, errlen) == 0) &&
        write_profile(&r, &fit, err, errlen) == 0)
        rc = 0;
    free_run(&r);
    return rc;
}
