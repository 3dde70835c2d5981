/* test_depformer_cuda.c: the depformer on CUDA (mt_depformer_create_cuda)
 * against the CPU's (depformer.c), ready for a device.
 *
 * Always (CPU): the CPU depformer's steps report success; without a GPU
 * (or without CUDA at build time) the CUDA one fails cleanly with the
 * reason; a negative control: the CPU logits of a wrongly-fed step (the
 * previous token off by one, what a wrong embedding row or cache slot on
 * the GPU would give) fail the tolerance below.
 *
 * With a GPU (skipped without; MT_REQUIRE_GPU=1 fails instead): Kyutai's
 * tiny LM fixture (tests/fixtures/kyutai_lm/split, dep_q 2) and
 * synthetic:kyutai-small, batch 3, four frames of deterministic temporal
 * outputs, each step's previous token the CPU's greedy choice, fed to
 * both: every step's greedy token identical and the logits within 1e-4 of
 * their scale (the largest |logit|).
 *
 * Tolerance: both are fp32 with fp32 accumulation (cuBLAS SGEMM in
 * pedantic math, no TF32; expf within 2 ulp); only the order of summation
 * differs, about sqrt(K) eps32 relative per dot product of K terms
 * (K <= 4 dep_dim here: 1e-6), compounded over a few layers: 1e-4 of the
 * scale is two orders above that and, as the control shows, far below a
 * wrong input. test_kyutai_lm holds the CPU to Kyutai's own logits with
 * the same bound.
 *
 * The served path (with a GPU): mt_kyutai_gen_create on a CUDA decoder
 * (what speech/speech.c and so mt-serve --device cuda run) puts the
 * depformer on the GPU, on a CPU decoder on the host; the fixture's model
 * stepped greedily for SERVED_FRAMES frames (past its context) on both,
 * every step succeeding, the depformer logits compared while the tokens
 * that feed them agree. Tolerance there: SERVED_TOL of the scale, as
 * test_kyutai_lm's CUDA temporal check (its K/V is f16 on the GPU, so
 * the temporal output, the depformer's input, differs by about 0.006). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decoder.h"
#include "decode/depformer.h"
#include "speech/kyutai.h"
#include "model/kyutai_lm.h"
#include "tap.h"
#include "test_util.h"

#define LOGIT_TOL 1e-4
#define SERVED_TOL 0.03
enum { B = 3, FRAMES = 4, SERVED_FRAMES = 12 };

static char root[2048];

static mt_kyutai_lm *load(const char *spec)
{
    char path[2400], err[512] = "";
    if (strncmp(spec, "synthetic:", 10) == 0)
        snprintf(path, sizeof path, "%s", spec);
    else
        snprintf(path, sizeof path, "%s/tests/fixtures/kyutai_lm/%s", root, spec);
    mt_kyutai_lm *lm = NULL;
    if (mt_kyutai_load(path, 0, &lm, err, sizeof err))
        tap_diag("load %s: %s", spec, err);
    return lm;
}

/* Deterministic temporal outputs [B, dim] of frame f. */
static void fill_h(float *h, int dim, int f)
{
    for (int r = 0; r < B; r++)
        for (int i = 0; i < dim; i++)
            h[(size_t)r * dim + i] = sinf(0.37f * (float)(i + 1) + 1.3f * (float)r + 0.71f * (float)f);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* max |a - b| over n, and the scale max |a| */
static double diff(const float *a, const float *b, size_t n, double *scale)
{
    double m = 0;
    *scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
        if (fabs(a[i]) > *scale)
            *scale = fabs(a[i]);
    }
    return m;
}

/* Runs FRAMES frames through cpu and (when other) other, tokens from the
 * cpu's greedy logits; with offby, other's previous tokens are shifted by
 * one (the control). Returns the worst relative logit difference and
 * counts differing greedy tokens. */
static double compare(const mt_kyutai_lm *lm, mt_depformer *cpu, mt_depformer *other, int offby,
                      int *tokdiff, int *fail)
{
    const mt_kyutai_config *kc = &lm->kc;
    float *h = malloc((size_t)B * kc->dim * sizeof(float));
    float *lc = malloc((size_t)B * kc->card * sizeof(float));
    float *lo = malloc((size_t)B * kc->card * sizeof(float));
    int32_t prev[B], prev2[B];
    double worst = 0;
    *tokdiff = 0;
    *fail = !h || !lc || !lo;
    for (int f = 0; !*fail && f < FRAMES; f++) {
        fill_h(h, kc->dim, f);
        *fail = mt_depformer_begin(cpu, B, h) || mt_depformer_begin(other, B, h);
        for (int r = 0; r < B; r++)
            prev[r] = (int32_t)((f * 7 + r * 3) % (kc->text_card + 1)) - (r == 2 && f == 1);
        for (int k = 0; !*fail && k < kc->dep_q; k++) {
            for (int r = 0; r < B; r++)
                prev2[r] = offby && prev[r] >= 0 ? (prev[r] + 1) % (k ? kc->card : kc->text_card) : prev[r];
            *fail = mt_depformer_next(cpu, k, prev, lc) || mt_depformer_next(other, k, prev2, lo);
            if (*fail) {
                tap_diag("step %d: %s", k, mt_depformer_error(other));
                break;
            }
            double sc, d = diff(lc, lo, (size_t)B * kc->card, &sc);
            if (d / (sc > 0 ? sc : 1) > worst)
                worst = d / (sc > 0 ? sc : 1);
            for (int r = 0; r < B; r++) {
                int a = argmax(lc + (size_t)r * kc->card, kc->card);
                *tokdiff += a != argmax(lo + (size_t)r * kc->card, kc->card);
                prev[r] = a;
            }
        }
    }
    free(h); free(lc); free(lo);
    return worst;
}

static void cpu_side(const char *spec)
{
    char err[512];
    mt_kyutai_lm *lm = load(spec);
    if (!tap_ok(lm != NULL, "%s loads", spec))
        return;
    mt_depformer *a = NULL, *b = NULL;
    int rc = mt_depformer_create(lm, B, &a, err, sizeof err) || mt_depformer_create(lm, B, &b, err, sizeof err);
    tap_ok(rc == 0 && !mt_depformer_is_cuda(a), "%s: cpu depformers", spec);
    int td = 0, fail = 1;
    double w = rc ? 0 : compare(lm, a, b, 0, &td, &fail);
    tap_ok(!fail && w == 0 && td == 0, "%s: two cpu depformers agree exactly, steps report success (%.2g)", spec, w);
    w = rc ? 0 : compare(lm, a, b, 1, &td, &fail);
    tap_ok(!fail && w > LOGIT_TOL, "%s: control: previous tokens off by one fail the tolerance (%.2g > %.0e)",
           spec, w, LOGIT_TOL);
    mt_depformer_free(a);
    mt_depformer_free(b);
    mt_kyutai_free(lm);
}

static void gpu_side(const char *spec)
{
    char err[512];
    mt_kyutai_lm *lm = load(spec);
    if (!tap_ok(lm != NULL, "%s loads", spec))
        return;
    mt_depformer *a = NULL, *g = NULL;
    int rc = mt_depformer_create(lm, B, &a, err, sizeof err) ||
             mt_depformer_create_cuda(lm, B, &g, err, sizeof err);
    if (!tap_ok(rc == 0 && mt_depformer_is_cuda(g), "%s: cpu and cuda depformers%s%s", spec,
                rc ? ": " : "", rc ? err : "")) {
        mt_depformer_free(a);
        mt_kyutai_free(lm);
        return;
    }
    int td = 0, fail = 1;
    double w = compare(lm, a, g, 0, &td, &fail);
    tap_ok(!fail && td == 0, "%s: cuda greedy tokens equal the cpu's, %d frames x %d steps x %d rows (%d differ)",
           spec, FRAMES, lm->kc.dep_q, B, td);
    tap_ok(!fail && w <= LOGIT_TOL, "%s: cuda logits within %.0e of the scale (%.2g)", spec, LOGIT_TOL, w);
    mt_depformer_free(a);
    mt_depformer_free(g);
    mt_kyutai_free(lm);
}

/* One greedy run of the served path on device dev: text [F, B], audio
 * [F, B, Q], dep logits [F, B, Q, card]. 0, or -1 (said). */
static int served_run(const mt_kyutai_lm *lm, mt_device dev, const char **where,
                      int32_t *text, int32_t *audio, float *dlog)
{
    const mt_kyutai_config *kc = &lm->kc;
    const int Q = kc->dep_q, nu = kc->n_q - kc->dep_q;
    mt_decoder_opts o = { .device = dev, .max_batch = B, .threads = 1 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 0;
    o.kv.window = kc->context;
    o.kv.rope = MT_ROPE_ABSOLUTE;
    o.kv.budget_bytes = (size_t)B * 4 * 64 * mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    mt_kyutai_gen *g = NULL;
    mt_kyutai_sess *ss[B] = { 0 };
    mt_kv_seq *seqs[B] = { 0 };
    mt_kyutai_sampling smp;
    mt_kyutai_sampling_default(&smp);
    smp.greedy = 1;
    char err[512] = "";
    int rc = -1;
    if (mt_decoder_create(lm->temporal, &o, &d, err, sizeof err) ||
        mt_kyutai_gen_create(lm, d, B, &g, err, sizeof err))
        goto out;
    *where = mt_kyutai_gen_dep_where(g);
    for (int r = 0; r < B; r++)
        if (mt_kyutai_sess_open(g, 1, &smp, &ss[r], err, sizeof err) ||
            mt_kv_seq_open(mt_decoder_pool(d), &seqs[r]))
            goto out;
    int32_t user[B * 8];
    for (int f = 0; f < SERVED_FRAMES; f++) {
        for (int i = 0; i < B * nu; i++)
            user[i] = (int32_t)((i * 7 + f * 5) % kc->card);
        for (int r = 0; r < B; r++)
            if (mt_kv_reserve(mt_decoder_pool(d), seqs[r], 1)) {
                snprintf(err, sizeof err, "kv reserve");
                goto out;
            }
        mt_kyutai_out io = { .text = text + (size_t)f * B, .audio = audio + (size_t)f * B * Q,
                             .dep_logits = dlog + (size_t)f * B * Q * kc->card };
        if (mt_kyutai_step(g, B, seqs, ss, user, &io, err, sizeof err))
            goto out;
    }
    rc = 0;
out:
    if (rc)
        tap_diag("served path on %s: %s", dev == MT_DEV_CUDA ? "cuda" : "cpu", err);
    for (int r = 0; r < B; r++)
        mt_kyutai_sess_close(ss[r]);
    if (d)
        mt_kv_seq_close_all(mt_decoder_pool(d), seqs, B);
    mt_kyutai_gen_free(g);
    mt_decoder_free(d);
    return rc;
}

static void served_path(const char *spec)
{
    mt_kyutai_lm *lm = load(spec);
    if (!tap_ok(lm != NULL, "%s loads", spec))
        return;
    const mt_kyutai_config *kc = &lm->kc;
    const int Q = kc->dep_q, C = kc->card;
    size_t nt = (size_t)SERVED_FRAMES * B, na = nt * Q, nl = na * C;
    int32_t *tc = calloc(nt, 4), *tg = calloc(nt, 4), *ac = calloc(na, 4), *ag = calloc(na, 4);
    float *lc = calloc(nl, 4), *lg = calloc(nl, 4);
    const char *wc = "?", *wg = "?";
    int rc = !tc || !tg || !ac || !ag || !lc || !lg ||
             served_run(lm, MT_DEV_CPU, &wc, tc, ac, lc) ||
             served_run(lm, MT_DEV_CUDA, &wg, tg, ag, lg);
    tap_ok(rc == 0, "%s: the served path steps %d frames on the cpu and on cuda", spec,
           SERVED_FRAMES);
    tap_ok(rc == 0 && !strcmp(wc, "host") && !strcmp(wg, "cuda"),
           "%s: the depformer where the decoder runs (cpu decoder: %s, cuda decoder: %s)",
           spec, wc, wg);
    /* logits compared while the tokens before them (text, then each step's
     * audio) agree in both runs, frame by frame */
    int compared = 0, same = 0, total = 0;
    double worst = 0;
    for (int r = 0; rc == 0 && r < B; r++) {
        int agree = 1;
        for (int f = 0; f < SERVED_FRAMES; f++) {
            size_t t = (size_t)f * B + (size_t)r;
            agree = agree && tc[t] == tg[t];
            for (int k = 0; k < Q; k++) {
                size_t a = t * Q + (size_t)k;
                if (agree) {
                    double sc, m = diff(lc + a * C, lg + a * C, (size_t)C, &sc);
                    double rel = sc > 0 ? m / sc : m;
                    worst = rel > worst ? rel : worst;
                    compared++;
                }
                agree = agree && ac[a] == ag[a];
                same += ac[a] == ag[a];
                total++;
            }
        }
    }
    tap_diag("%s: %d of %d audio tokens equal on cuda and cpu", spec, same, total);
    tap_ok(rc == 0 && compared > 0 && worst <= SERVED_TOL,
           "%s: served depformer logits on cuda within %.2f of the scale of the cpu's "
           "(%d steps compared, worst %.2g)", spec, SERVED_TOL, compared, worst);
    free(tc);
    free(tg);
    free(ac);
    free(ag);
    free(lc);
    free(lg);
    mt_kyutai_free(lm);
}

int main(void)
{
    const char *r = getenv("MT_ROOT");
    snprintf(root, sizeof root, "%s", r && *r ? r : ".");
    const char *specs[2] = { "split", "synthetic:kyutai-small" };
    for (int i = 0; i < 2; i++)
        cpu_side(specs[i]);
    char why[512] = "";
    int present = test_cuda_present(why, sizeof why);
    if (!present) {
        char err[512] = "";
        mt_kyutai_lm *lm = load(specs[0]);
        mt_depformer *g = NULL;
        tap_ok(lm && mt_depformer_create_cuda(lm, B, &g, err, sizeof err) == -1 && !g && err[0],
               "the cuda depformer without a GPU fails cleanly: %s", err);
        mt_kyutai_free(lm);
        if (test_gpu_required())
            tap_ok(0, "a GPU is present (MT_REQUIRE_GPU=1): %s", why);
        else
            tap_skip("CUDA depformer parity (kyutai_lm fixture, synthetic:kyutai-small): no GPU here");
        return tap_done();
    }
    tap_diag("GPU: %s", why);
    for (int i = 0; i < 2; i++)
        gpu_side(specs[i]);
    served_path(specs[0]);
    return tap_done();
}
