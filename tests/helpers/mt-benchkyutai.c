/* mt-benchkyutai.c: Kyutai's LM frame on the CPU by stage, behind
 * bench/bench_kyutai.sh. For each batch size B: B sessions of a Kyutai
 * model (sampling with LMGen's defaults, random user codebooks), a few
 * frames of warm-up, then F frames timed; per stage (input embeddings,
 * temporal transformer, depformer, sampling) and in total, the median over
 * the frames, and the per-session bytes (temporal K/V under the bound,
 * depformer K/V and token rings). The temporal K/V is the window policy's
 * (S sinks + W), reached by stepping, so the attention reads what a long
 * session's would once W frames have passed.
 *
 * -d cuda or -d sim:PROFILE runs the temporal step there (the model's
 * temporal weights the device's own, a preset only: MT_KYUTAI_HOST_SIDE),
 * the streams and the sampling on the host as always; on the simulated
 * device the temporal time is the profile's prediction and the line says
 * so (device=sim:...). The depformer runs where the decoder does (on the
 * GPU with -d cuda, as mt-serve runs it), or where -D says: host or cuda;
 * the line says which (depformer=).
 *
 * The frame at its bound (issue 49; -c CODEC adds the codec): per B, a
 * `frame` line with, for each stage (mimi_enc, embed, temporal, dep,
 * sample, mimi_dec) and the whole frame, STAGE_ms (median), STAGE_bound_ms
 * and STAGE_ratio (ms / bound); the bound is the larger of the bytes the
 * stage must read over this run's copy bandwidth (copy_gbs: a copy on the
 * decoder's threads, bytes read + written, best of 8 passes of 256 MiB:
 * mt-benchstep's figure) and its FLOPs over this run's sgemm
 * (sgemm_gflops: 1024^3 on the decoder's threads, best of 3), both
 * measured again before each B; with -w q8 where the integer product
 * serves, the weight products' FLOPs over its own rate instead
 * (q8_gops: 64 rows by an in-cache matrix on the same threads); the
 * frame's bound is the stages' sum.
 * Mimi (-c SPEC: B sessions encoding B frames of PCM, decoding the
 * model's codebooks; stt shapes, dep_q 0, decode nothing) is timed on its
 * own, on the decoder's threads as mt-serve runs it (until 2026-12-07 on
 * one thread, against a bound from the sgemm on all of them: its ratios
 * in bench/RESULTS.md before then are about twice what they would have
 * been), the median of -F frames; its bound is its FLOPs alone
 * (mimi_encode_flops / mimi_decode_flops over the sgemm rate). -O also runs the depformer as it
 * was before issue 49 (one thread, fp32: -D serial) on the same B, after
 * the new, and prints `depformer_old_vs_new B= old_ms= new_ms= speedup=`
 * with both frames' CPU time (frame_cpu_ms: every thread's, getrusage; on
 * a shared machine the work, whatever share of the cores it got). -P
 * loads the model shape-only and prints the frame line's bounds alone
 * (its _ms 0): for shapes over the host's memory limit (moshi-2b). -T
 * times the temporal transformer alone, its weights made by themselves
 * (the depformer's and the codebook tables left out), so that a shape whose
 * whole fp32 copy is over the host limit but whose temporal is not
 * (moshi-2b: 14.5 GB in all, 7.8 GB temporal) is measured: per B a
 * `temporal_alone` line, the median step of -f frames once the ring is
 * full (token inputs: the same weight reads as the frame's temporal, less
 * the codebook embeddings' sums) against the temporal's bound, and
 * attention_ms, the median of the step's attention (the decoder's
 * mt_decoder_attention_ms: on the CPU stepping by rows, thread 0's rows).
 * -k f16 keeps the temporal K/V in half precision, as mt-serve does by
 * default (--kv-dtype): the attention reads half the bytes, and the
 * bound counts 2 a value (default f32, the figures before 2026-12-07;
 * the lines say kv=). -L's served lines always run f16, as mt-serve.
 *
 * usage: mt-benchkyutai [-m MODEL] [-d cpu|cuda|sim:PROFILE] [-D host|serial|cuda]
 *                       [-b 1,8,32] [-f FRAMES] [-S S] [-W W] [-t THREADS]
 *                       [-w f32|f16|q8] [-k f32|f16] [-r F16_ROWS] [-c CODEC] [-F CODEC_FRAMES]
 *                       [-O] [-P]
 *                       [-T] [-L [-M MAX_BATCH]]
 * Prints logfmt lines; asserts nothing. */
#include "codec/mimi.h"
#include "decode/decoder.h"
#include "decode/cpu_q8.h"
#include "model/synthetic.h"
#include "speech/kyutai.h"
#include "speech/speech.h"
#include "model/kyutai_lm.h"
#include "util/clock.h"
#include "helpers/stream_bw.h"
#include "util/rng.h"
#include "util/stats.h"
#include "helpers/median.h"

#include <cblas.h>
#include <sys/resource.h>
#include <unistd.h>

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mt_device dev = MT_DEV_CPU;
static const char *dev_name = "cpu", *sim_profile;
static const char *dep_on;      /* -D host | cuda | serial; NULL: where the decoder runs */
static mt_num_format weights;   /* -w f16: the backbone's and the depformer's f16 copies;
                                   -w q8: their 8-bit copies */
static mt_num_format kv_fmt;    /* -k f16: the temporal K/V in half precision (mt-serve's
                                   default), 2 bytes an element in its bound */
static int f16_rows;            /* -r ROWS: the f16 product up to ROWS rows (0: default) */

extern void openblas_set_num_threads(int);

static const char *codec_spec;  /* -c: the codec timed beside the LM */
static int codec_frames = 5;    /* -F */
static double last_dep_ms;      /* bench's depformer median, for -O */
static double last_cpu_ms;      /* and its frame's CPU time (every thread's) */
static int predict_only;        /* -P: shape-only, the bounds alone */

/* The process's CPU time (ms), every thread's: on a shared machine the
 * work a frame took, whatever share of the cores it was given. */
static double cpu_ms(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* ---- this machine's figures, measured in the run ------------------------- */

static double secs(void) { return (double)mt_clock_ns() / 1e9; }

/* 1024^3 sgemm on T BLAS threads, best of 3 (GFLOP/s); BLAS back to one
 * thread after (the CPU backend's setting: its own threads run it). */
static double sgemm_gflops(int T)
{
    const int n = 1024;
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++) {
            a[i] = (float)(i % 7) * 0.1f;
            b[i] = (float)(i % 5) * 0.1f;
        }
        openblas_set_num_threads(T);
        for (int r = 0; r < 3; r++) {
            double t0 = secs();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                        0.0f, c, n);
            double g = 2.0 * n * n * n / (secs() - t0) / 1e9;
            best = g > best ? g : best;
        }
        openblas_set_num_threads(1);
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* The copy bandwidth on T threads (GB/s: bytes read + bytes written; the
 * best of 8 passes of 256 MiB), the figure mt-benchstep divides by, so
 * the frame's bounds and the backbone's mean the same. One thread's
 * memcpy counting the bytes once, as before, read a quarter of it (16
 * against 60 GB/s here) and put bounds a stage could beat (ratio 0.5). */
static double copy_gbs(int T)
{
    stream_bufs sb;
    double best = 0;
    if (stream_open(&sb, 1))
        return 0;
    for (int r = 0; r < 8; r++) {
        double g = stream_pass(&sb, T);
        best = g > best ? g : best;
    }
    stream_close(&sb);
    return best;
}

/* A stage's bound (ms): the larger of bytes / copy and flops / sgemm. */
static double bound_ms(double bytes, double flops, double gbs, double gflops)
{
    double a = bytes / (gbs * 1e9), b = flops / (gflops * 1e9);
    return (a > b ? a : b) * 1e3;
}

/* The integer q8 product's rate (GOP/s, 2 a multiply-add) on T threads:
 * 64 rows by a 1024 x 1024 matrix of 8-bit weights (1.1 MiB: in cache),
 * each thread its half of the weight rows, best of 5. With -w q8 on a CPU
 * where the integer product serves (mt_q8_every_row), a stage's products
 * are bound by this, not by sgemm: its multiply-adds are 8-bit ones, up
 * to 4 a 32-bit lane, and a bound by sgemm's rate is one a q8 stage beats
 * (stt-1b's temporal at 4 streams ran at 0.85 of it). 0 elsewhere.
 * Measured on each layout the integer product reads (cpu_q8.h: groups of
 * 8 rows, lane groups of 16), the best of them: the machine's rate, not
 * the default layout's (at 64 rows the lane groups are 1.5-2.8 times as
 * fast, so a bound by the groups' rate alone was a loose one). A round
 * is Q8R_REPS passes on threads made for it: at 10 (2 ms a round, until
 * 2026-12-07) the lane groups read 376-390 or 665-675 GOP/s round by
 * round (the new thread not yet on the other core), and the best of 5
 * was 500-625: a loose bound, which the depformer beat (0.93 at B = 64);
 * at 60 (10 ms) 798-812 in every round. */
enum { Q8R_M = 64, Q8R_N = 1024, Q8R_K = 1024, Q8R_REPS = 60 };
typedef struct {
    const float *X;
    const int8_t *q;
    const float *s;
    float *Y;
    int lo, hi, layout;
} q8_rate_part;

static void *q8_rate_thread(void *arg)
{
    q8_rate_part *p = arg;
    for (int r = 0; r < Q8R_REPS; r++)   /* long enough to hide the thread's start */
        mt_q8_gemm_rows(p->layout, Q8R_M, p->lo, p->hi, Q8R_N, Q8R_K, p->X, Q8R_K, p->q, p->s,
                        0.0f, p->Y, Q8R_N);
    return NULL;
}

static double q8_gops(int T)
{
    if (weights != MT_FMT_Q8 || !mt_q8_every_row())
        return 0;
    T = T < 1 ? 1 : T > 16 ? 16 : T;
    float *X = malloc(sizeof(float) * Q8R_M * Q8R_K), *W = malloc(sizeof(float) * Q8R_N * Q8R_K);
    float *Y = malloc(sizeof(float) * Q8R_M * Q8R_N);
    float *sc = malloc(sizeof(float) * Q8R_N * (Q8R_K / MT_Q8_BLOCK));
    int8_t *q = malloc((size_t)Q8R_N * Q8R_K);
    double best = 0;
    if (X && W && Y && sc && q) {
        for (size_t i = 0; i < (size_t)Q8R_M * Q8R_K; i++)
            X[i] = (float)(i % 13) * 0.1f - 0.6f;
        for (size_t i = 0; i < (size_t)Q8R_N * Q8R_K; i++)
            W[i] = (float)(i % 11) * 0.1f - 0.5f;
        for (int li = 0; li < 2; li++) {
            const int layout = li ? MT_Q8_LANES : MT_Q8_GROUPS;
            const int G = li ? MT_Q8_LANE : MT_Q8_GROUP;   /* rows a group */
            if (mt_q8_pack(layout, q, sc, W, Q8R_N, Q8R_K) != 0)
                continue;
            for (int r = 0; r < 6; r++) {
                pthread_t th[16];
                q8_rate_part part[16];
                int started = 0;
                double t0 = secs();
                for (int t = 0; t < T; t++) {
                    /* whole groups of weight rows in each part */
                    part[t] = (q8_rate_part){ X, q, sc, Y, Q8R_N / G * t / T * G,
                                              Q8R_N / G * (t + 1) / T * G, layout };
                    if (t > 0 && pthread_create(&th[t], NULL, q8_rate_thread, &part[t]) == 0)
                        started |= 1 << t;
                    else if (t > 0)
                        q8_rate_thread(&part[t]);
                }
                q8_rate_thread(&part[0]);
                for (int t = 1; t < T; t++)
                    if (started & (1 << t))
                        pthread_join(th[t], NULL);
                double g = 2.0 * Q8R_REPS * Q8R_M * Q8R_N * Q8R_K / (secs() - t0) / 1e9;
                if (r > 0)     /* the first warms the caches */
                    best = g > best ? g : best;
            }
        }
    }
    free(X);
    free(W);
    free(Y);
    free(sc);
    free(q);
    return best;
}

/* A stage's bound (ms) where part of its FLOPs are the q8 products:
 * bytes / copy against flops / sgemm + qflops / the q8 rate (qg 0: those
 * at sgemm's rate too). */
static double bound_q8_ms(double bytes, double flops, double qflops, double gbs, double gflops,
                          double qg)
{
    double a = bytes / (gbs * 1e9),
           b = flops / (gflops * 1e9) + (qg > 0 ? qflops / (qg * 1e9) : qflops / (gflops * 1e9));
    return (a > b ? a : b) * 1e3;
}

/* Mimi on B sessions and T threads (the decoder's, as mt-serve gives the
 * codec: mt_speech_codec_threads): the median encode and decode (ms) over
 * F frames after one of warm-up; decode of n_dec codebooks (0: none).
 * With -w q8, the transformers' and deepest convolutions' products of up to q8_rows rows on their
 * 8-bit copies, as mt-serve --weights q8 runs the codec (speech.c); their
 * FLOPs (the transformers' weight products and the deepest
 * convolutions', mimi_q8_flops; attention's stay on the sgemm rate) in
 * enc_q, dec_q. */
static int time_mimi(int B, int F, int T, int n_dec, int q8_rows, double *enc_ms, double *dec_ms,
                     double *bytes, double *enc_flops, double *dec_flops, double *enc_q,
                     double *dec_q)
{
    if (predict_only)
        F = 0;              /* no frame timed: the costs alone */
    char err[512] = "";
    mimi_model *m = NULL;
    int n_q = n_dec > 8 ? n_dec : 8;
    *enc_ms = *dec_ms = 0;
    if (mimi_load(codec_spec, NULL, n_q, &m, err, sizeof err)) {
        fprintf(stderr, "mt-benchkyutai: codec %s: %s\n", codec_spec, err);
        return -1;
    }
    const int fs = mimi_frame_size(mimi_model_config(m));
    mimi_state **s = calloc((size_t)B, sizeof *s);
    mimi_batch *w = mimi_batch_new(m, B, err, sizeof err);
    float *pcm = malloc((size_t)B * fs * 4), *out = malloc((size_t)B * fs * 4);
    int32_t *codes = malloc((size_t)B * n_q * 4);
    double *te = malloc((size_t)(F + 1) * sizeof *te), *td = malloc((size_t)(F + 1) * sizeof *td);
    int rc = -1;
    for (int b = 0; s && b < B; b++)
        if (!(s[b] = mimi_state_new(m, err, sizeof err)))
            goto out;
    if (!s || !w || !pcm || !out || !codes || !te || !td ||
        mimi_batch_threads(w, T, err, sizeof err))
        goto out;
    *enc_q = *dec_q = 0;
    if (weights == MT_FMT_Q8) {
        if (mimi_batch_weights_q8(w, q8_rows, err, sizeof err))
            goto out;
        /* the weight products only: attention stays fp32 */
        *enc_q = mimi_q8_flops(m, 0) * B;
        *dec_q = n_dec > 0 ? mimi_q8_flops(m, 1) * B : 0;
    }
    for (int f = 0; f <= F && F > 0; f++) {
        for (size_t i = 0; i < (size_t)B * fs; i++)
            pcm[i] = 0.3f * (float)((i * 2654435761u + (size_t)f * 977) % 2001) / 1000.0f - 0.3f;
        double t0 = secs();
        if (mimi_encode(m, w, s, B, pcm, codes, err, sizeof err))
            goto out;
        double t1 = secs();
        if (n_dec > 0 && mimi_decode(m, w, s, B, codes, out, err, sizeof err))
            goto out;
        double t2 = secs();
        if (f > 0) {
            te[f - 1] = (t1 - t0) * 1e3;
            td[f - 1] = (t2 - t1) * 1e3;
        }
    }
    *enc_ms = F ? median(te, F) : 0;
    *dec_ms = n_dec > 0 && F ? median(td, F) : 0;
    *bytes = (double)mimi_param_count(m) * 4;
    *enc_flops = mimi_encode_flops(m) * B;
    *dec_flops = n_dec > 0 ? mimi_decode_flops(m) * B : 0;
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "mt-benchkyutai: codec B=%d: %s\n", B, err[0] ? err : "out of memory");
    for (int b = 0; s && b < B; b++)
        mimi_state_free(s[b]);
    free(s);
    mimi_batch_free(w);
    mimi_free(m);
    free(pcm);
    free(out);
    free(codes);
    free(te);
    free(td);
    return rc;
}

/* The 8-bit product this run uses (cpu_q8.h; MT_Q8_FLOAT=1 forces the
 * float kernels): printed so old and new read side by side. */
static const char *q8_kernels(void)
{
    static const char *const name[] = { "portable", "avx2", "avx512", "vnni" };
    return weights == MT_FMT_Q8 ? name[mt_q8_init() & 3] : "-";
}

/* Per-frame bytes and FLOPs of the LM's stages at B rows (fp32 weights but
 * where the f16 copies serve: -w f16 and B <= the f16 rows; with -w q8 the
 * 8-bit copies there, 1 byte and 4/32 of a scale a weight). */
typedef struct lm_cost {
    double embed_b, temporal_b, temporal_f, dep_b, dep_f, sample_b;
    double temporal_wf;   /* of temporal_f, the weight products' */
} lm_cost;

static lm_cost lm_costs(const mt_kyutai_lm *lm, int B, int S, int W, int f16_at_b)
{
    const mt_kyutai_config *kc = &lm->kc;
    const double D = kc->dim, dd = kc->dep_dim, Q = kc->dep_q;
    const double F = kc->dep_ffn, L = kc->dep_layers;
    const double wb = !f16_at_b ? 4 : weights == MT_FMT_Q8 ? 1 + 4.0 / MT_Q8_BLOCK : 2;
    lm_cost c;
    double tp = (double)mt_model_params(&lm->temporal->cfg) -
                (double)(kc->text_card + 1) * D;   /* the token table is never read */
    double kv = (double)B * (S + W) *
                mt_decoder_position_bytes(&lm->temporal->cfg, mt_num_format_bytes(kv_fmt));
    c.embed_b = (double)B * (1 + kc->n_q) * D * 4;
    c.temporal_b = tp * wb + kv;
    c.temporal_wf = 2.0 * tp * B;
    c.temporal_f = c.temporal_wf + 4.0 * B * (S + W) * D * kc->num_layers;
    double dep_w = Q * (dd * D + L * (4 * dd * dd + 3 * dd * F) + (double)kc->card * dd);
    c.dep_b = dep_w * wb;
    c.dep_f = 2.0 * dep_w * B;
    c.sample_b = (double)B * (kc->text_card_out + Q * kc->card) * 4;
    return c;
}

/* The `frame` line: each stage's median against its bound, measured now. */
static void print_frame(const mt_kyutai_lm *lm, int B, int S, int W, int T, int f16_rows_at,
                        const double lm_ms[4])
{
    const mt_kyutai_config *kc = &lm->kc;
    double gf = sgemm_gflops(T), bw = copy_gbs(T);
    /* the q8 rate where the 8-bit copies serve this B's products */
    double qg = B <= f16_rows_at ? q8_gops(T) : 0;
    double enc = 0, dec = 0, mb = 0, ef = 0, df = 0, eq = 0, dq = 0;
    if (codec_spec && time_mimi(B, codec_frames, T, kc->dep_q, f16_rows_at, &enc, &dec, &mb, &ef,
                                &df, &eq, &dq))
        codec_spec = NULL;      /* said on stderr; the LM's figures still stand */
    lm_cost c = lm_costs(lm, B, S, W, B <= f16_rows_at);
    const char *name[6] = { "mimi_enc", "embed", "temporal", "dep", "sample", "mimi_dec" };
    double ms[6] = { enc, lm_ms[0], lm_ms[1], lm_ms[2], lm_ms[3], dec };
    /* the codec's bound from its FLOPs alone: its weights are both
     * directions' (mimi_param_count), so their bytes would overstate
     * either one's reads; with -w q8 its transformers' over the q8 rate */
    (void)mb;
    double qc = eq > 0 || dq > 0 ? q8_gops(T) : 0;
    double bd[6] = { codec_spec ? bound_q8_ms(0, ef - eq, eq, bw, gf, qc) : 0,
                     bound_ms(c.embed_b, 0, bw, gf),
                     bound_q8_ms(c.temporal_b, c.temporal_f - c.temporal_wf, c.temporal_wf, bw, gf, qg),
                     bound_q8_ms(c.dep_b, 0, c.dep_f, bw, gf, qg),
                     bound_ms(c.sample_b, 0, bw, gf),
                     codec_spec && kc->dep_q ? bound_q8_ms(0, df - dq, dq, bw, gf, qc) : 0 };
    double tot = 0, tot_b = 0;
    printf("frame model=%s codec=%s B=%d threads=%d kv=%s q8_kernels=%s sgemm_gflops=%.1f "
           "q8_gops=%.1f copy_gbs=%.2f", lm->temporal->cfg.name, codec_spec ? codec_spec : "none",
           B, T, mt_num_format_name(kv_fmt), q8_kernels(), gf, qg, bw);
    for (int i = 0; i < 6; i++) {
        tot += ms[i];
        tot_b += bd[i];
        printf(" %s_ms=%.3f %s_bound_ms=%.3f %s_ratio=%.2f", name[i], ms[i], name[i], bd[i],
               name[i], bd[i] > 0 ? ms[i] / bd[i] : 0.0);
    }
    printf(" frame_ms=%.3f frame_session_ms=%.3f frame_bound_ms=%.3f frame_ratio=%.2f "
           "sample_share=%.3f\n", tot, tot / B, tot_b, tot_b > 0 ? tot / tot_b : 0.0,
           tot > 0 ? lm_ms[3] / tot : 0.0);
}

/* -T: the temporal alone (see the top), B sessions, F frames timed. */
static int bench_temporal_alone(const mt_kyutai_lm *lm, int B, int F, int S, int W, int threads)
{
    const mt_config *c = &lm->temporal->cfg;
    char err[512] = "";
    if (mt_model_params(c) * 4 > mt_model_host_limit()) {
        fprintf(stderr, "mt-benchkyutai: -T: the temporal alone is over the host limit\n");
        return -1;
    }
    mt_model *m = NULL;
    if (mt_model_make(c, 0, 0, &m, err, sizeof err)) {
        fprintf(stderr, "mt-benchkyutai: %s\n", err);
        return -1;
    }
    m->seed = lm->temporal->seed;
    mt_synthetic_fill(m);
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = B, .threads = threads,
                          .weights = weights, .weights_f16_rows = f16_rows, .kv_dtype = kv_fmt };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = S;
    o.kv.window = W;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = (size_t)B * ((size_t)(S + W) / 16 + 2) * 16 *
                        mt_decoder_position_bytes(c, 4);
    mt_decoder *d = NULL;
    mt_kv_seq **seqs = calloc((size_t)B, sizeof *seqs);
    int32_t *tok = calloc((size_t)B, sizeof *tok);
    float *logits = calloc((size_t)B * (c->vocab > 0 ? c->vocab : 1), sizeof *logits);
    double *st = calloc((size_t)(F > 0 ? F : 1), sizeof *st);
    double *sa = calloc((size_t)(F > 0 ? F : 1), sizeof *sa);   /* its attention's share */
    int rc = -1, opened = 0;
    if (!seqs || !tok || !logits || !st || !sa ||
        mt_decoder_create(m, &o, &d, err, sizeof err))
        goto out;
    mt_kv_pool *pool = mt_decoder_pool(d);
    for (; opened < B; opened++)
        if (mt_kv_seq_open(pool, &seqs[opened]))
            goto out;
    mt_rng r;
    mt_rng_seed(&r, 42);
    for (int f = 0; f < S + W + 2 + F; f++) {
        for (int b = 0; b < B; b++) {
            tok[b] = (int32_t)(mt_rng_next(&r) % (uint64_t)c->vocab);
            if (mt_kv_reserve(pool, seqs[b], 1))
                goto out;
        }
        mt_step_io io = { .tokens_in = tok, .logits = logits };
        double t0 = secs();
        if (mt_decoder_step(d, B, seqs, &io, err, sizeof err))
            goto out;
        if (f >= S + W + 2) {
            st[f - (S + W + 2)] = (secs() - t0) * 1e3;
            sa[f - (S + W + 2)] = mt_decoder_attention_ms(d);
        }
    }
    int T = mt_decoder_threads(d);
    const int small = B <= mt_decoder_weights_f16_rows(d);
    lm_cost k = lm_costs(lm, B, S, W, small);
    /* the frame line's bound: the weight products over the q8 rate where
     * the 8-bit copies serve (until 2026-12-07 over sgemm's, a bound
     * 2.8 times the frame's at B = 32 that the stage read 0.8 of) */
    double gf = sgemm_gflops(T), bw = copy_gbs(T), qg = small ? q8_gops(T) : 0;
    double bd = bound_q8_ms(k.temporal_b, k.temporal_f - k.temporal_wf, k.temporal_wf, bw, gf, qg);
    double ms = median(st, F);
    printf("temporal_alone model=%s B=%d S=%d W=%d weights=%s kv=%s q8_kernels=%s threads=%d "
           "frames=%d copy_gbs=%.2f sgemm_gflops=%.1f q8_gops=%.1f temporal_ms=%.3f "
           "temporal_bound_ms=%.3f temporal_ratio=%.2f temporal_bytes=%.0f attention_ms=%.3f\n",
           c->name, B, S, W, mt_num_format_name(weights), mt_num_format_name(kv_fmt), q8_kernels(),
           T, F, bw, gf, qg, ms, bd, bd > 0 ? ms / bd : 0.0, k.temporal_b, median(sa, F));
    rc = 0;
out:
    if (rc && err[0])
        fprintf(stderr, "mt-benchkyutai: %s\n", err);
    for (int b = 0; b < opened; b++)
        mt_kv_seq_close(mt_decoder_pool(d), seqs[b]);
    mt_decoder_free(d);
    mt_model_free(m);
    free(seqs);
    free(tok);
    free(logits);
    free(st);
    free(sa);
    return rc;
}

static int bench(const mt_kyutai_lm *lm, int B, int F, int S, int W, int threads)
{
    const mt_kyutai_config *kc = &lm->kc;
    const int nu = kc->n_q - kc->dep_q;
    char err[512] = "";
    mt_decoder_opts o = { .device = dev, .max_batch = B, .threads = threads,
                          .sim_profile = sim_profile, .weights = weights,
                          .weights_f16_rows = f16_rows, .kv_dtype = kv_fmt };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = S;
    o.kv.window = W;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = (size_t)B * ((size_t)(S + W) / 16 + 2) * 16 *
                        mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    mt_kyutai_gen *g = NULL;
    mt_kyutai_sess **ss = calloc((size_t)B, sizeof *ss);
    mt_kv_seq **seqs = calloc((size_t)B, sizeof *seqs);
    int32_t *user = malloc((size_t)B * (nu > 0 ? nu : 1) * sizeof *user);
    int32_t *text = malloc((size_t)B * sizeof *text);
    double *st[6];
    for (int i = 0; i < 6; i++)
        st[i] = malloc((size_t)F * sizeof(double));
    int rc = -1;
    if (!ss || !seqs || !user || !text || !st[0] || !st[1] || !st[2] || !st[3] || !st[4] || !st[5])
        goto out;
    mt_depformer *df = NULL;
    if (dep_on && kc->dep_q > 0 &&
        (!strcmp(dep_on, "cuda") ? mt_depformer_create_cuda(lm, B, &df, err, sizeof err)
                                 : mt_depformer_create(lm, B, &df, err, sizeof err)))
        goto out;
    if (df && !strcmp(dep_on, "serial"))
        mt_depformer_set_serial(df);    /* the depformer before issue 49 */
    if (mt_decoder_create(lm->temporal, &o, &d, err, sizeof err)) {
        mt_depformer_free(df);
        goto out;
    }
    if (mt_kyutai_gen_create_with(lm, d, B, df, &g, err, sizeof err))
        goto out;
    mt_kv_pool *pool = mt_decoder_pool(d);
    for (int b = 0; b < B; b++)
        if (mt_kyutai_sess_open(g, 1000 + (uint64_t)b, NULL, &ss[b], err, sizeof err) ||
            mt_kv_seq_open(pool, &seqs[b])) {
            if (!err[0])
                snprintf(err, sizeof err, "kv pool full");
            goto out;
        }
    mt_rng r;
    mt_rng_seed(&r, 42);
    int warm = S + W + 2;       /* the ring full: every step reads S + W positions */
    for (int f = 0; f < warm + F; f++) {
        for (int i = 0; i < B * nu; i++)
            user[i] = (int32_t)(mt_rng_next(&r) % (uint64_t)kc->card);
        for (int b = 0; b < B; b++)
            if (mt_kv_reserve(pool, seqs[b], 1)) {
                snprintf(err, sizeof err, "kv reserve");
                goto out;
            }
        mt_kyutai_out io = { .text = text };
        double c0 = cpu_ms();
        if (mt_kyutai_step(g, B, seqs, ss, user, &io, err, sizeof err))
            goto out;
        double c1 = cpu_ms();
        if (f >= warm) {
            mt_kyutai_times t;
            mt_kyutai_last_times(g, &t);
            st[0][f - warm] = t.embed_ms;
            st[1][f - warm] = t.temporal_ms;
            st[2][f - warm] = t.depformer_ms;
            st[3][f - warm] = t.sample_ms;
            st[4][f - warm] = t.embed_ms + t.temporal_ms + t.depformer_ms + t.sample_ms;
            st[5][f - warm] = c1 - c0;
        }
    }
    size_t kvb = (size_t)(S + W) *
                 mt_decoder_position_bytes(&lm->temporal->cfg, mt_num_format_bytes(kv_fmt));
    printf("kyutai device=%s depformer=%s dep_mode=%s model=%s B=%d S=%d W=%d frames=%d embed_ms=%.3f "
           "temporal_ms=%.3f depformer_ms=%.3f sample_ms=%.3f total_ms=%.3f "
           "per_frame_session_ms=%.3f frame_cpu_ms=%.3f session_kv_bytes=%zu "
           "session_other_bytes=%zu\n",
           dev_name, mt_kyutai_gen_dep_where(g), mt_kyutai_gen_dep_mode(g), lm->temporal->cfg.name,
           B, S, W, F, median(st[0], F), median(st[1], F), median(st[2], F), median(st[3], F),
           median(st[4], F), median(st[4], F) / B, median(st[5], F), kvb,
           mt_kyutai_session_bytes(kc));
    last_dep_ms = median(st[2], F);
    last_cpu_ms = median(st[5], F);
    if (dev == MT_DEV_CPU && !(dep_on && !strcmp(dep_on, "serial")))
        print_frame(lm, B, S, W, mt_decoder_threads(d), mt_decoder_weights_f16_rows(d),
                    (double[4]){ median(st[0], F), median(st[1], F), median(st[2], F),
                                 median(st[3], F) });
    fflush(stdout);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "mt-benchkyutai: B=%d: %s\n", B, err);
    for (int b = 0; b < B && ss; b++)
        mt_kyutai_sess_close(ss[b]);
    if (d && seqs)
        mt_kv_seq_close_all(mt_decoder_pool(d), seqs, (size_t)B);
    mt_kyutai_gen_free(g);
    mt_decoder_free(d);
    free(ss);
    free(seqs);
    free(user);
    free(text);
    for (int i = 0; i < 6; i++)
        free(st[i]);
    return rc;
}

/* ---- -L: the step as mt-serve takes it ------------------------------------ */

/* -L (with -c CODEC): B sessions stepped through mt_speech_step, the call
 * mt-serve's tick makes, set up as mt-serve sets it up: mt-serve's K/V
 * (the window policy, 4 sinks + 256, f16, the default pool), a decoder and
 * a codec workspace for max_batch rows (-M, mt-serve's --max-sessions
 * default 64), the codec on the decoder's thread count, text sampled
 * greedily (Kyutai's stt). PCM in, so Mimi's encode is in the step. After
 * 3 frames of warm-up, -f frames back to back (a server behind: no tick
 * between them); per frame the stages (mt_speech_last_times), the whole
 * call's wall time and its CPU time (every thread's). A `served` line of
 * medians: what mt-serve's tick line's step_ms is made of; and the step's p99
 * (step_p99_ms, nearest rank: of 20 frames, the largest). */
static int served_max_batch = 64;   /* -M */

static int bench_served(const mt_kyutai_lm *lm, int B, int F, int threads)
{
    char err[512] = "";
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = served_max_batch,
                          .threads = threads, .weights = weights,
                          .weights_f16_rows = f16_rows, .kv_dtype = MT_FMT_F16 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 4;
    o.kv.window = 256;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = MT_KV_DEFAULT_BUDGET;
    mimi_model *m = NULL;
    mt_decoder *d = NULL;
    mt_speech *sp = NULL;
    mt_speech_sess **ss = calloc((size_t)B, sizeof *ss);
    mt_kv_seq **seqs = calloc((size_t)B, sizeof *seqs);
    int16_t *pcm = NULL, *out = NULL;
    int32_t *text = malloc((size_t)B * sizeof *text);
    double *st[6];
    for (int i = 0; i < 6; i++)
        st[i] = malloc((size_t)F * sizeof(double));
    int rc = -1;
    mt_kyutai_sampling smp;
    mt_kyutai_sampling_default(&smp);
    smp.temp_text = 0;
    if (!ss || !seqs || !text || !st[0] || !st[1] || !st[2] || !st[3] || !st[4] || !st[5] ||
        mimi_load(codec_spec, NULL, 0, &m, err, sizeof err) ||
        mt_decoder_create(lm->temporal, &o, &d, err, sizeof err) ||
        mt_speech_create(lm, m, d, served_max_batch, &smp, &sp, err, sizeof err) ||
        mt_speech_codec_threads(sp, threads, err, sizeof err))
        goto out;
    const size_t fs = (size_t)mt_speech_frame_samples(sp);
    pcm = malloc((size_t)B * fs * sizeof *pcm);
    out = malloc((size_t)B * fs * sizeof *out);
    if (!pcm || !out)
        goto out;
    mt_kv_pool *pool = mt_decoder_pool(d);
    for (int b = 0; b < B; b++)
        if (mt_speech_sess_open(sp, 1000 + (uint64_t)b, &ss[b], err, sizeof err) ||
            mt_kv_seq_open(pool, &seqs[b])) {
            if (!err[0])
                snprintf(err, sizeof err, "kv pool full");
            goto out;
        }
    const int warm = 3;
    for (int f = 0; f < warm + F; f++) {
        for (size_t i = 0; i < (size_t)B * fs; i++)
            pcm[i] = (int16_t)((int)((i * 2654435761u + (size_t)f * 977) % 8001) - 4000);
        for (int b = 0; b < B; b++)
            if (mt_kv_reserve(pool, seqs[b], 1)) {
                snprintf(err, sizeof err, "kv reserve");
                goto out;
            }
        double c0 = cpu_ms(), t0 = secs();
        if (mt_speech_step(sp, B, seqs, ss, pcm, out, text, err, sizeof err))
            goto out;
        double t1 = secs(), c1 = cpu_ms();
        if (f >= warm) {
            mt_speech_times t;
            mt_speech_last_times(sp, &t);
            st[0][f - warm] = t.encode_ms;
            st[1][f - warm] = t.lm.embed_ms;
            st[2][f - warm] = t.lm.temporal_ms;
            st[3][f - warm] = t.lm.sample_ms;
            st[4][f - warm] = (t1 - t0) * 1e3;
            st[5][f - warm] = c1 - c0;
        }
    }
    printf("served model=%s codec=%s B=%d max_batch=%d threads=%d weights=%s frames=%d "
           "enc_ms=%.2f embed_ms=%.2f temporal_ms=%.2f sample_ms=%.2f step_ms=%.2f "
           "step_cpu_ms=%.2f step_p99_ms=%.2f\n", lm->temporal->cfg.name, codec_spec, B,
           served_max_batch, mt_decoder_threads(d), mt_num_format_name(weights), F,
           median(st[0], F), median(st[1], F), median(st[2], F), median(st[3], F),
           median(st[4], F), median(st[5], F), mt_stats_percentile(st[4], (size_t)F, 0.99));
    fflush(stdout);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "mt-benchkyutai: -L B=%d: %s\n", B, err[0] ? err : "out of memory");
    for (int b = 0; b < B && ss; b++)
        mt_speech_sess_close(ss[b]);
    if (d && seqs)
        mt_kv_seq_close_all(mt_decoder_pool(d), seqs, (size_t)B);
    mt_speech_free(sp);
    mt_decoder_free(d);
    mimi_free(m);
    free(ss);
    free(seqs);
    free(pcm);
    free(out);
    free(text);
    for (int i = 0; i < 6; i++)
        free(st[i]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = "synthetic:kyutai-small", *bs = "1,8,32";
    int F = 40, S = 4, W = 252, threads = 0, c, old_too = 0, temporal_alone = 0, served = 0;
    while ((c = getopt(argc, argv, "m:d:D:b:f:S:W:t:w:k:r:c:F:OPTLM:")) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'd':
            dev_name = optarg;
            if (!strcmp(optarg, "cpu"))
                dev = MT_DEV_CPU;
            else if (!strcmp(optarg, "cuda"))
                dev = MT_DEV_CUDA;
            else if (!strncmp(optarg, "sim:", 4) && optarg[4]) {
                dev = MT_DEV_SIM;
                sim_profile = optarg + 4;
            } else {
                fprintf(stderr, "mt-benchkyutai: -d cpu, cuda or sim:PROFILE\n");
                return 2;
            }
            break;
        case 'D':
            if (strcmp(optarg, "host") && strcmp(optarg, "cuda") && strcmp(optarg, "serial")) {
                fprintf(stderr, "mt-benchkyutai: -D host, serial or cuda\n");
                return 2;
            }
            dep_on = optarg;
            break;
        case 'b': bs = optarg; break;
        case 'r': f16_rows = atoi(optarg); break;
        case 'c': codec_spec = optarg; break;
        case 'F': codec_frames = atoi(optarg); break;
        case 'O': old_too = 1; break;
        case 'P': predict_only = 1; break;
        case 'T': temporal_alone = 1; break;
        case 'L': served = 1; break;
        case 'M': served_max_batch = atoi(optarg); break;
        case 'w':
            if (mt_num_format_parse(optarg, &weights)) {
                fprintf(stderr, "mt-benchkyutai: -w f32, f16 or q8\n");
                return 2;
            }
            break;
        case 'k':
            if (mt_num_format_parse(optarg, &kv_fmt) || kv_fmt == MT_FMT_Q8) {
                fprintf(stderr, "mt-benchkyutai: -k f32 or f16\n");
                return 2;
            }
            break;
        case 'f': F = atoi(optarg); break;
        case 'S': S = atoi(optarg); break;
        case 'W': W = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: mt-benchkyutai [-m MODEL] [-d cpu|cuda|sim:PROFILE] "
                            "[-D host|serial|cuda] [-b 1,8,32] [-f FRAMES] [-S S] [-W W] "
                            "[-t THREADS] [-w f32|f16|q8] [-k f32|f16] [-r F16_ROWS] "
                            "[-c CODEC] [-F CODEC_FRAMES] [-O] [-P] [-T] [-L [-M MAX_BATCH]]\n");
            return 2;
        }
    }
    if (F < 1 || S < 0 || W < 1 || threads < 0 || codec_frames < 1 || served_max_batch < 1) {
        fprintf(stderr, "mt-benchkyutai: bad -f, -S, -W, -t or -M\n");
        return 2;
    }
    if (served && !codec_spec) {
        fprintf(stderr, "mt-benchkyutai: -L needs -c CODEC\n");
        return 2;
    }
    char err[512];
    mt_kyutai_lm *lm = NULL;
    int lflags = predict_only || temporal_alone ? MT_MODEL_SHAPE_ONLY : dev == MT_DEV_CPU ? 0 : MT_KYUTAI_HOST_SIDE;
    if (mt_kyutai_load(model, lflags, &lm, err, sizeof err)) {
        fprintf(stderr, "mt-benchkyutai: %s\n", err);
        return 1;
    }
    int rc = 0;
    char *list = strdup(bs);
    for (char *tok = list ? strtok(list, ",") : NULL; tok; tok = strtok(NULL, ",")) {
        int B = atoi(tok);
        if (predict_only) {
            /* the bounds alone: the shape's bytes and FLOPs over this
             * machine's figures (the copies' rows as the CPU backend's
             * defaults: 8 with -w f16, every row with -w q8 where the
             * integer product serves, else 8) */
            int T = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
            int rows = f16_rows                                        ? f16_rows
                       : weights == MT_FMT_Q8 && mt_q8_every_row()     ? MT_Q8_ALL_ROWS
                       : weights == MT_FMT_F16 || weights == MT_FMT_Q8 ? MT_WEIGHTS_ROWS_DEFAULT
                                                                       : 0;
            print_frame(lm, B, S, W, T, rows, (double[4]){ 0, 0, 0, 0 });
            continue;
        }
        if (served) {
            if (B < 1 || B > served_max_batch)
                fprintf(stderr, "mt-benchkyutai: -L: B=%d outside 1..%d (-M)\n", B,
                        served_max_batch);
            if (B < 1 || B > served_max_batch || bench_served(lm, B, F, threads))
                rc = 1;
            continue;
        }
        if (temporal_alone) {
            if (B < 1 || bench_temporal_alone(lm, B, F, S, W, threads))
                rc = 1;
            continue;
        }
        if (B < 1 || bench(lm, B, F, S, W, threads))
            rc = 1;
        if (old_too && B >= 1 && lm->kc.dep_q > 0 && dev == MT_DEV_CPU) {
            /* the depformer before issue 49, beside the new one */
            double new_ms = last_dep_ms, new_cpu = last_cpu_ms;
            const char *keep = dep_on, *keep_codec = codec_spec;
            dep_on = "serial";
            codec_spec = NULL;
            if (bench(lm, B, F, S, W, threads))
                rc = 1;
            printf("depformer_old_vs_new B=%d old_ms=%.3f new_ms=%.3f speedup=%.2f "
                   "old_frame_cpu_ms=%.3f new_frame_cpu_ms=%.3f\n", B, last_dep_ms, new_ms,
                   new_ms > 0 ? last_dep_ms / new_ms : 0.0, last_cpu_ms, new_cpu);
            dep_on = keep;
            codec_spec = keep_codec;
        }
    }
    free(list);
    mt_kyutai_free(lm);
    return rc;
}
