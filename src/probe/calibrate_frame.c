/* calibrate_frame.c: `mt-probe calibrate` with a Kyutai model times the
 * speech frame's other stages alone (calibrate_frame.h): the depformer
 * (begin + its codebook steps for B sessions, on the device asked for)
 * and the Mimi codec (encode + decode of B sessions' frames), each at
 * every batch of the grid, the median of reps frames a point. A line
 * t(B) = a + b B is fitted to each: the slope is the per-session compute
 * (rate = flops a session / b), the intercept the weights' read and the
 * launches. What a stage's time is made of is the simulator's model
 * (backend_sim.h); the fit's residual says how well it holds. */
#include "probe/calibrate_frame.h"
#include "codec/mimi.h"
#include "codec/mimi_engine.h"
#include "decode/depformer.h"
#include "util/clock.h"
#include "util/errmsg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mt_calib_line_fit(const double *x, const double *t, int n, mt_calib_line *out)
{
    double sx = 0, st = 0, sxx = 0, sxt = 0;
    for (int i = 0; i < n; i++) {
        sx += x[i];
        st += t[i];
        sxx += x[i] * x[i];
        sxt += x[i] * t[i];
    }
    double den = n * sxx - sx * sx;
    out->rms = -1;
    if (n < 2 || !(den > 0))
        return;
    out->b_s = (n * sxt - sx * st) / den;
    out->a_s = (st - out->b_s * sx) / n;
    double s2 = 0;
    for (int i = 0; i < n; i++) {
        double r = (out->a_s + out->b_s * x[i] - t[i]) / t[i];
        s2 += r * r;
    }
    out->rms = sqrt(s2 / n);
}

double mt_calib_dep_params(const mt_kyutai_config *kc)
{
    double dd = kc->dep_dim, F = kc->dep_ffn;
    double layer = 3 * dd * dd + dd * dd + 2 * F * dd + dd * F;
    return (double)kc->dep_q * (dd * kc->dim + kc->dep_layers * layer + (double)kc->card * dd);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of one depformer frame of B sessions (reps, after 2). */
static int time_dep(mt_depformer *df, const mt_kyutai_config *kc, int B, int reps,
                    const float *h, int32_t *prev, float *logits, double *ts, double *med,
                    char *err, size_t errlen)
{
    for (int k = 0; k < reps + 2; k++) {
        uint64_t t0 = mt_clock_ns();
        int rc = mt_depformer_begin(df, B, h);
        for (int q = 0; rc == 0 && q < kc->dep_q; q++) {
            for (int b = 0; b < B; b++)
                prev[b] = (b + q) % kc->card;   /* any valid token: the cost is the same */
            rc = mt_depformer_next(df, q, prev, logits);
        }
        if (rc) {
            mt_set_err(err, errlen, "depformer: %s", mt_depformer_error(df));
            return -1;
        }
        if (k >= 2)
            ts[k - 2] = (double)(mt_clock_ns() - t0) * 1e-9;
    }
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
    *med = ts[reps / 2];
    return 0;
}

/* The depformer's points and fit. */
static int run_dep(const mt_calibrate_opts *o, const mt_kyutai_lm *lm, double bandwidth,
                   FILE *report, mt_calib_frame *out, char *err, size_t errlen)
{
    const mt_kyutai_config *kc = &lm->kc;
    long bmax = 0;
    for (int i = 0; i < o->nbatches; i++)
        bmax = o->batches[i] > bmax ? o->batches[i] : bmax;
    mt_depformer *df = NULL;
    int rc = o->device == MT_DEV_CUDA ? mt_depformer_create_cuda(lm, (int)bmax, &df, err, errlen)
                                      : mt_depformer_create(lm, (int)bmax, &df, err, errlen);
    if (rc)
        return -1;
    float *h = calloc((size_t)bmax * kc->dim, sizeof *h);
    float *logits = calloc((size_t)bmax * kc->card, sizeof *logits);
    int32_t *prev = calloc((size_t)bmax, sizeof *prev);
    double *ts = calloc((size_t)o->reps, sizeof *ts);
    double x[MT_CALIB_GRID_MAX], t[MT_CALIB_GRID_MAX];
    rc = h && logits && prev && ts ? 0 : -1;
    if (rc)
        mt_set_err(err, errlen, "out of memory");
    for (size_t i = 0; rc == 0 && i < (size_t)bmax * kc->dim; i++)
        h[i] = (float)((long)(i * 7919 % 2001) - 1000) / 1000.0f;
    fprintf(report, "mt-probe calibrate: depformer (%s, %d steps of %d layers) %6s %10s\n",
            mt_depformer_is_cuda(df) ? "cuda" : "cpu", kc->dep_q, kc->dep_layers, "batch",
            "frame_ms");
    for (int i = 0; rc == 0 && i < o->nbatches; i++) {
        x[i] = (double)o->batches[i];
        rc = time_dep(df, kc, (int)o->batches[i], o->reps, h, prev, logits, ts, &t[i], err,
                      errlen);
        if (rc == 0)
            fprintf(report, "mt-probe calibrate: depformer %6ld %10.3f\n", o->batches[i],
                    t[i] * 1e3);
    }
    if (rc == 0) {
        out->have_dep = 1;
        out->dep_params = mt_calib_dep_params(kc);
        out->dep_weight_bytes = 4;   /* fp32, on the CPU and on CUDA */
        mt_calib_line_fit(x, t, o->nbatches, &out->dep);
        double read_s = out->dep_params * out->dep_weight_bytes / bandwidth;
        out->dep_rate = out->dep.b_s > 0 ? 2 * out->dep_params / out->dep.b_s : 0;
        out->dep_overhead_us = out->dep.a_s > read_s ? (out->dep.a_s - read_s) * 1e6 : 0;
    }
    free(h);
    free(logits);
    free(prev);
    free(ts);
    mt_depformer_free(df);
    return rc;
}

/* Median seconds of one codec frame (encode + decode) of B sessions. */
static int time_codec(mimi_engine *e, int B, int reps, const int *slot, const float *pcm,
                      int32_t *codes, float *out, double *ts, double *med, char *err,
                      size_t errlen)
{
    for (int k = 0; k < reps + 2; k++) {
        uint64_t t0 = mt_clock_ns();
        if (mimi_engine_encode(e, slot, B, pcm, codes, err, errlen) ||
            mimi_engine_decode(e, slot, B, codes, out, err, errlen))
            return -1;
        if (k >= 2)
            ts[k - 2] = (double)(mt_clock_ns() - t0) * 1e-9;
    }
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
    *med = ts[reps / 2];
    return 0;
}

/* The codec's points and fit (o->codec at the LM's codebooks). */
static int run_codec(const mt_calibrate_opts *o, const mt_kyutai_lm *lm, FILE *report,
                     mt_calib_frame *out, char *err, size_t errlen)
{
    long bmax = 0;
    for (int i = 0; i < o->nbatches; i++)
        bmax = o->batches[i] > bmax ? o->batches[i] : bmax;
    mimi_model *m = NULL;
    mimi_engine *e = NULL;
    char why[512];
    if (mimi_load(o->codec, NULL, lm->kc.dep_q, &m, why, sizeof why) ||
        mimi_engine_new(m, o->device == MT_DEV_CUDA ? MIMI_BACKEND_CUDA : MIMI_BACKEND_CPU,
                        (int)bmax, (int)bmax, &e, why, sizeof why)) {
        mt_set_err(err, errlen, "codec %s: %s", o->codec, why);
        mimi_free(m);
        return -1;
    }
    const mimi_config *c = mimi_model_config(m);
    size_t fs = (size_t)mimi_frame_size(c);
    float *pcm = calloc((size_t)bmax * fs, sizeof *pcm), *pout = calloc((size_t)bmax * fs, sizeof *pout);
    int32_t *codes = calloc((size_t)bmax * c->n_q_used, sizeof *codes);
    int *slot = calloc((size_t)bmax, sizeof *slot);
    double *ts = calloc((size_t)o->reps, sizeof *ts);
    double x[MT_CALIB_GRID_MAX], t[MT_CALIB_GRID_MAX];
    int rc = pcm && pout && codes && slot && ts ? 0 : -1;
    if (rc)
        mt_set_err(err, errlen, "out of memory");
    for (long i = 0; rc == 0 && i < bmax; i++)
        slot[i] = (int)i;
    for (size_t i = 0; rc == 0 && i < (size_t)bmax * fs; i++)
        pcm[i] = (float)((long)(i * 7919 % 6001) - 3000) / 32768.0f;
    for (int i = 0; rc == 0 && i < o->nbatches; i++) {
        x[i] = (double)o->batches[i];
        rc = time_codec(e, (int)o->batches[i], o->reps, slot, pcm, codes, pout, ts, &t[i], err,
                        errlen);
        if (rc == 0)
            fprintf(report, "mt-probe calibrate: codec (%s, %d codebooks) %6ld %10.3f ms\n",
                    mimi_backend_name(mimi_engine_backend(e)), c->n_q_used, o->batches[i],
                    t[i] * 1e3);
    }
    if (rc == 0) {
        out->have_codec = 1;
        out->codec_flops = mimi_encode_flops(m) + mimi_decode_flops(m);
        mt_calib_line_fit(x, t, o->nbatches, &out->codec);
        out->codec_rate = out->codec.b_s > 0 ? out->codec_flops / out->codec.b_s : 0;
        out->codec_overhead_us = out->codec.a_s > 0 ? out->codec.a_s * 1e6 : 0;
    }
    free(pcm);
    free(pout);
    free(codes);
    free(slot);
    free(ts);
    mimi_engine_free(e);
    mimi_free(m);
    return rc;
}

int mt_calib_frame_run(const mt_calibrate_opts *o, const mt_kyutai_lm *lm, double bandwidth,
                       FILE *report, mt_calib_frame *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (run_dep(o, lm, bandwidth, report, out, err, errlen))
        return -1;
    if (o->codec && run_codec(o, lm, report, out, err, errlen))
        return -1;
    if (out->dep.rms >= 0)
        fprintf(report, "mt-probe calibrate: depformer fit: %.3f ms + %.4f ms a session "
                "(RMS relative residual %.1f%%): depformer_rate %.4g flop/s, overhead %.0f us\n",
                out->dep.a_s * 1e3, out->dep.b_s * 1e3, 100 * out->dep.rms, out->dep_rate,
                out->dep_overhead_us);
    if (out->have_codec && out->codec.rms >= 0)
        fprintf(report, "mt-probe calibrate: codec fit: %.3f ms + %.4f ms a session "
                "(RMS relative residual %.1f%%): codec_rate %.4g flop/s, overhead %.0f us\n",
                out->codec.a_s * 1e3, out->codec.b_s * 1e3, 100 * out->codec.rms,
                out->codec_rate, out->codec_overhead_us);
    return 0;
}

void mt_calib_frame_print(const mt_calib_frame *f, FILE *out)
{
    if (f->have_codec && f->codec.rms >= 0 && f->codec_rate > 0) {
        fprintf(out, "codec_rate        = %.6g   # fitted: %.4g flops a session-frame / the slope\n",
                f->codec_rate, f->codec_flops);
        fprintf(out, "codec_overhead_us = %.6g   # fitted: the intercept (RMS residual %.1f%%)\n",
                f->codec_overhead_us, 100 * f->codec.rms);
    }
    if (f->have_dep && f->dep.rms >= 0 && f->dep_rate > 0) {
        fprintf(out, "depformer_params       = %.0f   # from the shape\n", f->dep_params);
        fprintf(out, "depformer_weight_bytes = %d   # fp32\n", f->dep_weight_bytes);
        fprintf(out, "depformer_rate         = %.6g   # fitted: 2 x params / the slope\n",
                f->dep_rate);
        fprintf(out, "depformer_overhead_us  = %.6g   # fitted: the intercept less the weights' read at the fitted bandwidth (RMS residual %.1f%%)\n",
                f->dep_overhead_us, 100 * f->dep.rms);
    }
}
