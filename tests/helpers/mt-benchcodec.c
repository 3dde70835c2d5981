/* mt-benchcodec.c: times the Mimi codec (src/codec/) per session-frame at
 * several batch sizes, beside this machine's sgemm measured in the same
 * run with the same thread count, for bench/bench_codec.sh.
 *
 *   mt-benchcodec [-c SPEC] [--batches 1,8,32,64] [--frames F] [--threads T]
 *                 [--codebooks N] [--compare [--layers] [--old-tr | --q8]]
 *
 * For each batch B: B sessions, one warm-up frame, then F frames of
 * encode and decode; the best frame's time (the machine is shared, so the
 * minimum is the figure least disturbed by others). The sgemm figure is
 * measured again before each batch's timing and the best so far is the
 * denominator (a disturbed sgemm would flatter the codec). Prints logfmt
 * lines:
 *   machine threads= sgemm_gflops= (the first measurement)
 *   codec B= enc_ms= dec_ms= (per session-frame) enc_gflops= dec_gflops=
 *         gflops= (both directions) sgemm_gflops= (best so far)
 *         frac_sgemm= (gflops / sgemm_gflops) and per stage
 *         enc_seanet= enc_transformer= enc_resample= enc_rvq= (GFLOP/s)
 *         and dec_* alike (wall; with one thread they are on the
 *         codec_cpu line, GFLOP/s / ms per session-frame of CPU time)
 *   realtime sessions= (80 ms per frame over the best per-session time,
 *         on these threads)
 * With one thread, codec_cpu and realtime_cpu lines give the same from
 * this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), codec and sgemm
 * alike: the work itself, whatever else the shared machine runs.
 * Threads: the codec runs on T threads of its own (mimi_batch_threads,
 * OpenBLAS held to one thread inside it, as mt-serve does); the sgemm
 * beside it is OpenBLAS's own on T threads.
 * Exit status 0, 1 on error, 2 on usage. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec/mimi.h"
#include "helpers/median.h"

extern void openblas_set_num_threads(int);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* this thread's CPU time: on one BLAS thread, the work done whatever else
 * the shared machine runs meanwhile */
static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double sgemm_cpu_best;

static int threads = 1;

/* the best of a few 1024^3 sgemms: the machine's figure on T threads
 * (OpenBLAS's; back to one thread for the codec after) */
static double sgemm_gflops(void)
{
    openblas_set_num_threads(threads);
    const int n = 1024;
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
    if (!a || !b || !c)
        return 0;
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now(), c0 = cpu();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = 2.0 * n * n * n / (now() - t0) / 1e9, gc = 2.0 * n * n * n / (cpu() - c0) / 1e9;
        if (g > best)
            best = g;
        if (gc > sgemm_cpu_best)
            sgemm_cpu_best = gc;
    }
    free(a);
    free(b);
    free(c);
    openblas_set_num_threads(1);
    return best;
}

/* --compare: B sessions, F frames, each frame encoded and decoded on the
 * previous convolution kernels (mimi_batch_old_kernels 1) and on the
 * current ones, the order alternating frame by frame (one shared state:
 * the work does not depend on the values; with --old-tr the old side is
 * the current kernels but the transposed convolutions on sgemm +
 * overlap-add, i.e. before mimi_convtr.c; with --q8 the old side is the
 * fp32 transformers and the new their 8-bit copies, mimi_batch_weights_q8,
 * as mt-serve --weights q8 runs the codec). Prints the medians (wall, per
 * session-frame) of each path, and with --layers the median of every
 * encode op on each (ms a frame of the batch; with one thread, its CPU
 * time), then of every decode op:
 *   compare B= enc_old_ms= enc_new_ms= dec_old_ms= dec_new_ms= enc_ratio=
 *           workspace_bytes= (the batch's, the direct kernel's weights included)
 *   layer B= op= what= old_ms= new_ms=    (encode)
 *   dlayer B= op= what= old_ms= new_ms=   (decode) */
static int old_level = 1;   /* --old-tr: 2, the old side only the transposed convolutions' */
static int cmp_q8;          /* --q8: the old side the fp32 transformers, the new their
                               8-bit copies (mimi_batch_weights_q8), the kernels alike */

static int compare(mimi_model *m, int B, int frames, int layers)
{
    char err[512];
    const mimi_config *c = mimi_model_config(m);
    const int fs = mimi_frame_size(c), nq = c->n_q_used;
    mimi_state **s = calloc((size_t)B, sizeof *s);
    mimi_batch *w = mimi_batch_new(m, B, err, sizeof err);
    float *pcm = malloc((size_t)B * fs * 4), *out = malloc((size_t)B * fs * 4);
    int32_t *codes = malloc((size_t)B * nq * 4);
    enum { MAXOPS = 512 };
    double *t[4], *ops[2], *dops[2];   /* enc old/new, dec old/new [frames]; (d)ops [path][op][frames] */
    for (int i = 0; i < 4; i++)
        t[i] = calloc((size_t)frames, sizeof(double));
    for (int i = 0; i < 2; i++) {
        ops[i] = calloc((size_t)MAXOPS * frames, sizeof(double));
        dops[i] = calloc((size_t)MAXOPS * frames, sizeof(double));
    }
    if (!s || !w || !pcm || !out || !codes || !t[3] || !ops[1] || !dops[0] || !dops[1]) {
        fprintf(stderr, "mt-benchcodec: B=%d: %s\n", B, w ? "out of memory" : err);
        return 1;
    }
    if (mimi_batch_threads(w, threads, err, sizeof err) != 0)
        goto fail;
    for (int b = 0; b < B; b++)
        if (!(s[b] = mimi_state_new(m, err, sizeof err)))
            goto fail;
    if (cmp_q8 && mimi_batch_weights_q8(w, 1 << 30, err, sizeof err) != 0)
        goto fail;
    if (threads == 1)
        mimi_batch_time_cpu(w, 1);   /* the layers in this thread's CPU time */
    int nops = 0, ndops = 0;
    for (int f = -1; f < frames; f++)
        for (int r = 0; r < 2; r++) {
            int old = (r + (f & 1)) % 2 == 0;   /* old first on even frames */
            if (cmp_q8)
                mimi_batch_weights_q8(w, old ? 0 : 1 << 30, err, sizeof err);   /* a toggle */
            else
                mimi_batch_old_kernels(w, old ? old_level : 0);
            for (size_t i = 0; i < (size_t)B * fs; i++)
                pcm[i] = 0.3f * (float)((i * 2654435761u + (size_t)f * 977) % 2001) / 1000.0f - 0.3f;
            double t0 = now();
            if (mimi_encode(m, w, s, B, pcm, codes, err, sizeof err) != 0)
                goto fail;
            double t1 = now();
            double os[MAXOPS];
            nops = mimi_batch_op_seconds(w, os, MAXOPS);
            if (mimi_decode(m, w, s, B, codes, out, err, sizeof err) != 0)
                goto fail;
            double t2 = now();
            double ds[MAXOPS];
            ndops = mimi_batch_op_seconds(w, ds, MAXOPS);
            if (f < 0)
                continue;   /* warm-up */
            int p = old ? 0 : 1;
            t[p][f] = (t1 - t0) * 1e3 / B;
            t[2 + p][f] = (t2 - t1) * 1e3 / B;
            for (int i = 0; i < nops && i < MAXOPS; i++)
                ops[p][(size_t)i * frames + f] = os[i] * 1e3;
            for (int i = 0; i < ndops && i < MAXOPS; i++)
                dops[p][(size_t)i * frames + f] = ds[i] * 1e3;
        }
    double eo = median(t[0], frames), en = median(t[1], frames);
    printf("compare B=%d threads=%d frames=%d enc_old_ms=%.2f enc_new_ms=%.2f dec_old_ms=%.2f dec_new_ms=%.2f "
           "enc_ratio=%.2f workspace_bytes=%zu\n", B, threads, frames, eo, en, median(t[2], frames),
           median(t[3], frames), en / eo, mimi_batch_bytes(w));
    for (int i = 0; layers && i < nops && i < MAXOPS; i++) {
        char what[96];
        mimi_op_describe(m, 0, i, what, sizeof what);
        printf("layer B=%d op=%d what=%s old_ms=%.3f new_ms=%.3f\n", B, i, what,
               median(ops[0] + (size_t)i * frames, frames), median(ops[1] + (size_t)i * frames, frames));
    }
    for (int i = 0; layers && i < ndops && i < MAXOPS; i++) {
        char what[96];
        mimi_op_describe(m, 1, i, what, sizeof what);
        printf("dlayer B=%d op=%d what=%s old_ms=%.3f new_ms=%.3f\n", B, i, what,
               median(dops[0] + (size_t)i * frames, frames), median(dops[1] + (size_t)i * frames, frames));
    }
    fflush(stdout);
    for (int b = 0; b < B; b++)
        mimi_state_free(s[b]);
    free(s);
    mimi_batch_free(w);
    free(pcm);
    free(out);
    free(codes);
    for (int i = 0; i < 4; i++)
        free(t[i]);
    for (int i = 0; i < 2; i++) {
        free(ops[i]);
        free(dops[i]);
    }
    return 0;
fail:
    fprintf(stderr, "mt-benchcodec: %s\n", err);
    return 1;
}

int main(int argc, char **argv)
{
    const char *spec = "synthetic:mimi", *batches = "1,8,32,64";
    int frames = 3, cmp = 0, layers = 0, ncb = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--compare")) cmp = 1;
        else if (!strcmp(argv[i], "--layers")) layers = 1;
        else if (!strcmp(argv[i], "--old-tr")) old_level = 2;
        else if (!strcmp(argv[i], "--q8")) cmp_q8 = 1;
        else if (!strcmp(argv[i], "--codebooks") && i + 1 < argc) ncb = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: mt-benchcodec [-c SPEC] [--batches LIST] [--frames F] [--threads T] [--codebooks N] [--compare [--layers] [--old-tr | --q8]]\n");
            return 2;
        }
    }
    if (frames < 1 || threads < 1 || threads > 256) {
        fprintf(stderr, "mt-benchcodec: --frames and --threads must be positive\n");
        return 2;
    }
    openblas_set_num_threads(1);
    char err[512];
    mimi_model *m;
    if (mimi_load(spec, NULL, 0, &m, err, sizeof err) != 0) {
        fprintf(stderr, "mt-benchcodec: %s\n", err);
        return 1;
    }
    if (ncb > 0 && mimi_set_codebooks(m, ncb, err, sizeof err) != 0) {   /* stt-1b reads 32 */
        fprintf(stderr, "mt-benchcodec: %s\n", err);
        return 2;
    }
    if (cmp) {
        for (const char *q = batches; *q;) {
            int B = atoi(q);
            if (B < 1 || B > 1024) {
                fprintf(stderr, "mt-benchcodec: bad batch in '%s'\n", batches);
                return 2;
            }
            if (compare(m, B, frames, layers) != 0)
                return 1;
            while (*q && *q != ',')
                q++;
            if (*q == ',')
                q++;
        }
        mimi_free(m);
        return 0;
    }
    const mimi_config *c = mimi_model_config(m);
    const int fs = mimi_frame_size(c), nq = c->n_q_used;
    double peak = sgemm_gflops();
    double fe[MIMI_NSTAGES], fd[MIMI_NSTAGES];
    mimi_stage_flops(m, 0, fe);
    mimi_stage_flops(m, 1, fd);
    printf("machine threads=%d sgemm_gflops=%.1f\n", threads, peak);
    printf("codec spec=%s params=%zu state_bytes=%zu enc_gflop=%.3f dec_gflop=%.3f codebooks=%d\n", spec,
           mimi_param_count(m), mimi_state_bytes(m), mimi_encode_flops(m) / 1e9, mimi_decode_flops(m) / 1e9, nq);
    double best_pair = 1e30, best_cpu = 1e30;
    int best_cb = 0;
    int best_b = 0;
    const char *p = batches;
    while (*p) {
        int B = atoi(p);
        if (B < 1 || B > 1024) {
            fprintf(stderr, "mt-benchcodec: bad batch in '%s'\n", batches);
            return 2;
        }
        mimi_state **s = calloc((size_t)B, sizeof *s);
        mimi_batch *w = mimi_batch_new(m, B, err, sizeof err);
        float *pcm = malloc((size_t)B * fs * 4), *out = malloc((size_t)B * fs * 4);
        int32_t *codes = malloc((size_t)B * nq * 4);
        if (!s || !w || !pcm || !out || !codes) {
            fprintf(stderr, "mt-benchcodec: B=%d: %s\n", B, w ? "out of memory" : err);
            return 1;
        }
        if (mimi_batch_threads(w, threads, err, sizeof err) != 0) {
            fprintf(stderr, "mt-benchcodec: %s\n", err);
            return 1;
        }
        for (int b = 0; b < B; b++)
            if (!(s[b] = mimi_state_new(m, err, sizeof err))) {
                fprintf(stderr, "mt-benchcodec: %s\n", err);
                return 1;
            }
        if (threads == 1)
            mimi_batch_time_cpu(w, 1);
        double g_here = sgemm_gflops();   /* beside this batch's timing */
        if (g_here > peak)
            peak = g_here;
        double ce = 1e30, cd = 1e30;   /* CPU seconds of the best frame */
        double be = 1e30, bd = 1e30, se[MIMI_NSTAGES] = {0}, sd[MIMI_NSTAGES] = {0};
        for (int f = 0; f <= frames; f++) {
            for (size_t i = 0; i < (size_t)B * fs; i++)
                pcm[i] = 0.3f * (float)((i * 2654435761u + (size_t)f * 977) % 2001) / 1000.0f - 0.3f;
            double c0 = cpu(), t0 = now();
            if (mimi_encode(m, w, s, B, pcm, codes, err, sizeof err) != 0) {
                fprintf(stderr, "mt-benchcodec: %s\n", err);
                return 1;
            }
            double t1 = now(), c1 = cpu();
            if (f > 0 && c1 - c0 < ce)
                ce = c1 - c0;
            double st[MIMI_NSTAGES];
            mimi_batch_stage_seconds(w, st);
            if (f > 0 && t1 - t0 < be) {
                be = t1 - t0;
                memcpy(se, st, sizeof st);
            }
            if (mimi_decode(m, w, s, B, codes, out, err, sizeof err) != 0) {
                fprintf(stderr, "mt-benchcodec: %s\n", err);
                return 1;
            }
            double t2 = now(), c2 = cpu();
            if (f > 0 && c2 - c1 < cd)
                cd = c2 - c1;
            mimi_batch_stage_seconds(w, st);
            if (f > 0 && t2 - t1 < bd) {
                bd = t2 - t1;
                memcpy(sd, st, sizeof st);
            }
        }
        double ge = mimi_encode_flops(m) * B / be / 1e9, gd = mimi_decode_flops(m) * B / bd / 1e9;
        double gall = (mimi_encode_flops(m) + mimi_decode_flops(m)) * B / (be + bd) / 1e9;
        printf("codec B=%d enc_ms=%.2f dec_ms=%.2f enc_gflops=%.1f dec_gflops=%.1f gflops=%.1f sgemm_gflops=%.1f "
               "frac_sgemm=%.2f", B, be * 1e3 / B, bd * 1e3 / B, ge, gd, gall, peak, gall / peak);
        static const char *names[MIMI_NSTAGES] = { "seanet", "transformer", "resample", "rvq" };
        for (int i = 0; threads > 1 && i < MIMI_NSTAGES; i++)
            printf(" enc_%s=%.1f", names[i], se[i] > 0 ? fe[i] * B / se[i] / 1e9 : 0);
        for (int i = 0; threads > 1 && i < MIMI_NSTAGES; i++)
            printf(" dec_%s=%.1f", names[i], sd[i] > 0 ? fd[i] * B / sd[i] / 1e9 : 0);
        printf("\n");
        if (threads == 1) {
            double gc = (mimi_encode_flops(m) + mimi_decode_flops(m)) * B / (ce + cd) / 1e9;
            printf("codec_cpu B=%d enc_ms=%.2f dec_ms=%.2f gflops=%.1f sgemm_gflops=%.1f frac_sgemm=%.2f", B,
                   ce * 1e3 / B, cd * 1e3 / B, gc, sgemm_cpu_best, gc / sgemm_cpu_best);
            for (int i = 0; i < MIMI_NSTAGES; i++)
                printf(" enc_%s=%.1f/%.2fms", names[i], se[i] > 0 ? fe[i] * B / se[i] / 1e9 : 0, se[i] * 1e3 / B);
            for (int i = 0; i < MIMI_NSTAGES; i++)
                printf(" dec_%s=%.1f/%.2fms", names[i], sd[i] > 0 ? fd[i] * B / sd[i] / 1e9 : 0, sd[i] * 1e3 / B);
            printf("\n");
            if ((ce + cd) / B < best_cpu) {
                best_cpu = (ce + cd) / B;
                best_cb = B;
            }
        }
        fflush(stdout);
        if ((be + bd) / B < best_pair) {
            best_pair = (be + bd) / B;
            best_b = B;
        }
        for (int b = 0; b < B; b++)
            mimi_state_free(s[b]);
        free(s);
        mimi_batch_free(w);
        free(pcm);
        free(out);
        free(codes);
        while (*p && *p != ',')
            p++;
        if (*p == ',')
            p++;
    }
    double frame_s = (double)fs / c->sample_rate;
    printf("realtime sessions=%d at_batch=%d per_session_frame_ms=%.2f threads=%d\n", (int)(frame_s / best_pair),
           best_b, best_pair * 1e3, threads);
    if (threads == 1)
        printf("realtime_cpu sessions=%d at_batch=%d per_session_frame_ms=%.2f (one core's CPU time)\n",
               (int)(frame_s / best_cpu), best_cb, best_cpu * 1e3);
    mimi_free(m);
    return 0;
}
