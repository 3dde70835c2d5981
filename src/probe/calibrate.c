/* calibrate.c: `mt-probe calibrate` (calibrate.h): times a real backend's
 * steps over a grid of batch sizes and cache lengths, fits the simulated
 * device's cost model to the medians, prints every point's residual, and
 * writes a profile whose figures say they were fitted, on what and when.
 *
 * The cache is not computed for the grid: a session is given its blocks
 * and its length set, so a step reads as many K/V positions as a real
 * session of that length would (what a step costs does not depend on what
 * the cache holds). The cost model's terms come from backend_sim.c itself
 * (mt_sim_step_cost with unit rates), so the fit and the simulator can
 * never disagree on what bytes and flops a step has. */
#define _GNU_SOURCE
#include "probe/calibrate.h"
#include "decode/backend_sim.h"
#include "decode/decoder.h"
#include "decode/kv.h"
#include "model/model.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* ---- the subcommand ---------------------------------------------------------- */

static int parse_list(const char *s, long *out, int cap, long lo, long hi)
{
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < lo || v > hi || n == cap)
            return -1;
        out[n++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return n;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-probe calibrate [-m MODEL] [--device cpu|cuda] [options]\n"
"  -m, --model SPEC     model (default synthetic:small)\n"
"      --device DEV     cpu (default) or cuda\n"
"      --threads N      CPU threads (default: all cores)\n"
"      --batches LIST   batch sizes, comma-separated (default 1,2,4,8,16)\n"
"      --lengths LIST   cache lengths (default 16,64,256,1024)\n"
"      --reps N         timed steps per point (default 12; 2 more warm up)\n"
"      --memory BYTES   device memory for the profile (default: this host's\n"
"                       physical memory on cpu; required with cuda)\n"
"      --reserve BYTES  the profile's reserve (default 1/8 of --memory)\n"
"      --name NAME      the profile's name (default calibrated-DEVICE)\n"
"  -o, --output FILE    write the profile there (default: standard output)\n"
"The fit and every point's residual go to standard error.\n");
}

int mt_probe_calibrate_main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},
        {"device", required_argument, 0, 'd'},
        {"threads", required_argument, 0, 't'},
        {"batches", required_argument, 0, 'b'},
        {"lengths", required_argument, 0, 'l'},
        {"reps", required_argument, 0, 'r'},
        {"memory", required_argument, 0, 'M'},
        {"reserve", required_argument, 0, 'R'},
        {"name", required_argument, 0, 'n'},
        {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *model = "synthetic:small", *out_path = NULL;
    char name[64] = "";
    mt_device dev = MT_DEV_CPU;
    int threads = 0, reps = 12;
    long batches[32] = { 1, 2, 4, 8, 16 }, lengths[32] = { 16, 64, 256, 1024 };
    int nb = 5, nl = 4;
    double memory = 0, reserve = -1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:o:h", lo, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'm': model = optarg; break;
        case 'd':
            if (!strcmp(optarg, "cpu")) dev = MT_DEV_CPU;
            else if (!strcmp(optarg, "cuda")) dev = MT_DEV_CUDA;
            else goto bad;
            break;
        case 't':
            threads = (int)strtol(optarg, &end, 10);
            if (*end || threads < 0 || threads > 1024) goto bad;
            break;
        case 'b':
            if ((nb = parse_list(optarg, batches, 32, 1, 65536)) < 1) goto bad;
            break;
        case 'l':
            if ((nl = parse_list(optarg, lengths, 32, 1, 1 << 20)) < 1) goto bad;
            break;
        case 'r':
            reps = (int)strtol(optarg, &end, 10);
            if (*end || reps < 1 || reps > 10000) goto bad;
            break;
        case 'M':
            memory = strtod(optarg, &end);
            if (*end || !(memory > 0) || memory > 1e18) goto bad;
            break;
        case 'R':
            reserve = strtod(optarg, &end);
            if (*end || !(reserve >= 0) || reserve > 1e18) goto bad;
            break;
        case 'n':
            if (strlen(optarg) >= sizeof name || strpbrk(optarg, " \t\n#=")) goto bad;
            snprintf(name, sizeof name, "%s", optarg);
            break;
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: goto bad;
        }
    }
    if (optind < argc)
        goto bad;
    if (memory == 0) {
        if (dev == MT_DEV_CUDA) {
            fprintf(stderr, "mt-probe calibrate: --memory BYTES is required with --device cuda\n");
            return 2;
        }
        memory = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    }
    if (reserve < 0)
        reserve = memory / 8;
    if (!name[0])
        snprintf(name, sizeof name, "calibrated-%s", dev == MT_DEV_CUDA ? "cuda" : "cpu");

    char err[512];
    mt_model *m = NULL;
    int mflags = dev == MT_DEV_CUDA && strncmp(model, "synthetic:", 10) == 0 ? MT_MODEL_SHAPE_ONLY : 0;
    if (mt_model_load(model, mflags, &m, err, sizeof err) != 0) {
        fprintf(stderr, "mt-probe calibrate: %s\n", err);
        return 1;
    }
    if (!m->cfg.has_audio) {
        fprintf(stderr, "mt-probe calibrate: %s has no audio adapter\n", model);
        mt_model_free(m);
        return 1;
    }
    long bmax = 0, lmax = 0;
    for (int i = 0; i < nb; i++)
        bmax = batches[i] > bmax ? batches[i] : bmax;
    for (int i = 0; i < nl; i++)
        lmax = lengths[i] > lmax ? lengths[i] : lmax;
    /* the pool is sized before the decoder exists: bf16 on CUDA, the CPU's
     * default f32 (o.kv_dtype left at its default) */
    size_t elem = dev == MT_DEV_CUDA ? 2 : mt_num_format_bytes(MT_FMT_DEFAULT);
    size_t pb = mt_decoder_position_bytes(&m->cfg, elem);
    mt_decoder_opts o;
    memset(&o, 0, sizeof o);
    o.device = dev;
    o.max_batch = (int)bmax;
    o.threads = threads;
    o.kv.policy = MT_KV_FULL;
    o.kv.budget_bytes = (size_t)bmax * (size_t)(lmax + reps + 2 + 2 * MT_KV_BLOCK) * pb;
    mt_decoder *d = NULL;
    if (mt_decoder_create(m, &o, &d, err, sizeof err) != 0) {
        fprintf(stderr, "mt-probe calibrate: %s\n", err);
        mt_model_free(m);
        return 1;
    }
    mt_kv_pool *pool = mt_decoder_pool(d);

    /* the cost model's terms, from the simulator's own code */
    mt_sim_profile unit;
    memset(&unit, 0, sizeof unit);
    snprintf(unit.name, sizeof unit.name, "unit");
    unit.memory_bytes = 1e18;   /* no limit: only the terms are wanted */
    unit.bandwidth = unit.matrix_rate = 1;
    unit.weight_bytes = (int)elem;
    unit.kv_bytes = (int)elem;
    mt_sim *terms = NULL;
    mt_calib_point *pts = calloc((size_t)(nb * nl), sizeof *pts);
    mt_kv_seq **seqs = calloc((size_t)bmax, sizeof *seqs);
    int64_t *vis = calloc((size_t)bmax, sizeof *vis);
    int16_t *pcm_in = calloc((size_t)bmax * (size_t)m->cfg.frame_samples, sizeof *pcm_in);
    int16_t *pcm_out = calloc((size_t)bmax * (size_t)m->cfg.frame_samples, sizeof *pcm_out);
    double *ts = calloc((size_t)reps, sizeof *ts), *lres = calloc((size_t)(nb * nl * reps), sizeof *lres);
    int rc = 1, npts = 0, nres = 0;
    if (!pts || !seqs || !vis || !pcm_in || !pcm_out || !ts || !lres) {
        fprintf(stderr, "mt-probe calibrate: out of memory\n");
        goto out;
    }
    if (mt_sim_create(&unit, &m->cfg, NULL, &terms, err, sizeof err) != 0) {
        fprintf(stderr, "mt-probe calibrate: %s\n", err);
        goto out;
    }
    for (long i = 0; i < bmax; i++)
        if (mt_kv_seq_open(pool, &seqs[i]) != 0) {
            fprintf(stderr, "mt-probe calibrate: cannot open %ld sequences\n", bmax);
            goto out;
        }
    for (long i = 0; i < bmax * m->cfg.frame_samples; i++)
        pcm_in[i] = (int16_t)((i * 7919) % 6000 - 3000);
    fprintf(stderr, "mt-probe calibrate: %s on %s, %d x %d points, %d steps each\n",
            m->cfg.name, mt_decoder_backend_name(d), nb, nl, reps);
    fprintf(stderr, "%6s %7s %10s %10s %8s\n", "batch", "len", "step_ms", "fit_ms", "resid%");
    for (int bi = 0; bi < nb; bi++)
        for (int li = 0; li < nl; li++) {
            int B = (int)batches[bi];
            long L = lengths[li];
            int bad = 0;
            for (int i = 0; i < B; i++) {
                mt_kv_release(pool, seqs[i]);
                if (mt_kv_reserve(pool, seqs[i], L + reps + 2) != 0)
                    bad = 1;
                seqs[i]->len = L;   /* cache content does not change the cost */
            }
            if (bad) {
                fprintf(stderr, "mt-probe calibrate: pool too small for B=%d L=%ld\n", B, L);
                goto out;
            }
            mt_step_io io = { .pcm_in = pcm_in, .pcm_out = pcm_out };
            for (int k = 0; k < reps + 2; k++) {
                double t0 = now_s();
                if (mt_decoder_step(d, B, seqs, &io, err, sizeof err) != 0) {
                    fprintf(stderr, "mt-probe calibrate: %s\n", err);
                    goto out;
                }
                if (k >= 2)
                    ts[k - 2] = now_s() - t0;
            }
            /* the timed steps read L+2 .. L+reps+1 positions: the median's */
            for (int i = 0; i < B; i++)
                vis[i] = mt_kv_visible_count(pool, L + 2 + reps / 2);
            mt_sim_cost cost;
            mt_sim_step_cost(terms, B, vis, 0, &cost);
            qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
            double med = ts[reps / 2];
            for (int k = 0; k < reps; k++)
                lres[nres++] = log(ts[k] / med);
            pts[npts++] = (mt_calib_point){ .batch = B, .len = L, .bytes = cost.bytes,
                                            .flops = cost.flops, .t_s = med };
        }
    double bw, rate, ov;
    double rms = mt_calib_fit(pts, npts, &bw, &rate, &ov);
    if (rms < 0) {
        fprintf(stderr, "mt-probe calibrate: too few points to fit (%d; need 3)\n", npts);
        goto out;
    }
    for (int i = 0; i < npts; i++)
        fprintf(stderr, "%6d %7ld %10.3f %10.3f %+8.1f\n", pts[i].batch, pts[i].len,
                pts[i].t_s * 1e3, pts[i].fit_s * 1e3,
                100 * (pts[i].fit_s - pts[i].t_s) / pts[i].t_s);
    double s2 = 0;
    for (int i = 0; i < nres; i++)
        s2 += lres[i] * lres[i];
    double sigma = nres > 1 ? sqrt(s2 / (nres - 1)) : 0;
    if (sigma > 2)
        sigma = 2;
    fprintf(stderr, "mt-probe calibrate: fit: bandwidth %.4g B/s, matrix_rate %.4g flop/s, "
            "overhead %.1f us; RMS relative residual %.1f%%; step-to-step sigma %.3f\n",
            bw, rate, ov * 1e6, 100 * rms, sigma);
    double weights = (double)mt_model_params(&m->cfg) * (double)elem;
    if (memory - weights - reserve < (double)pb * MT_KV_BLOCK)
        fprintf(stderr, "mt-probe calibrate: warning: --memory %.4g less weights %.4g and reserve %.4g leaves no K/V pool\n",
                memory, weights, reserve);
    FILE *f = out_path ? fopen(out_path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "mt-probe calibrate: %s: %s\n", out_path, strerror(errno));
        goto out;
    }
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    fprintf(f, "# %s: fitted by mt-probe calibrate on %s to %d points (batches x cache\n"
               "# lengths) of the %s backend running %s; RMS relative residual %.1f%%.\n"
               "# Format: mt-profile(5). A simulation on this profile reproduces the fit,\n"
               "# not the backend: believe it only within the residual and the grid.\n",
            name, when, npts, mt_decoder_backend_name(d), m->cfg.name, 100 * rms);
    fprintf(f, "name          = %s\n", name);
    fprintf(f, "model         = %s\n", m->cfg.name);
    fprintf(f, "memory_bytes  = %.6g   # %s\n", memory,
            dev == MT_DEV_CPU ? "this host's physical memory (or --memory)" : "--memory");
    fprintf(f, "reserve_bytes = %.6g   # %s\n", reserve, "--reserve (default 1/8 of memory): an assumption");
    fprintf(f, "bandwidth     = %.6g   # fitted\n", bw);
    fprintf(f, "matrix_rate   = %.6g   # fitted\n", rate);
    fprintf(f, "overhead_us   = %.6g   # fitted\n", ov * 1e6);
    fprintf(f, "weight_bytes  = %zu   # the %s backend's weights\n", elem, mt_decoder_backend_name(d));
    fprintf(f, "kv_bytes      = %zu   # the %s backend's K/V\n", elem, mt_decoder_backend_name(d));
    fprintf(f, "jitter_sigma  = %.4g   # measured: spread of log(step / median) over all points\n", sigma);
    fprintf(f, "stall_prob    = 0   # not measured\n");
    fprintf(f, "stall_ms      = 0\n");
    fprintf(f, "seed          = 1\n");
    fprintf(f, "# points: batch len measured_ms fitted_ms\n");
    for (int i = 0; i < npts; i++)
        fprintf(f, "#   %d %ld %.4f %.4f\n", pts[i].batch, pts[i].len, pts[i].t_s * 1e3,
                pts[i].fit_s * 1e3);
    if (out_path ? fclose(f) != 0 : fflush(f) != 0) {
        fprintf(stderr, "mt-probe calibrate: writing the profile: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    for (long i = 0; seqs && i < bmax; i++)
        if (seqs[i])
            mt_kv_seq_close(pool, seqs[i]);
    mt_sim_free(terms);
    free(pts);
    free(seqs);
    free(vis);
    free(pcm_in);
    free(pcm_out);
    free(ts);
    free(lres);
    mt_decoder_free(d);
    mt_model_free(m);
    return rc;
bad:
    usage(stderr);
    return 2;
}
