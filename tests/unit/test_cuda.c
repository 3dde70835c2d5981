/* test_cuda.c: the CUDA backend against the CPU backend (parity), on
 * synthetic:tiny (head_dim 16, GQA 2), synthetic:small (head_dim 64) and a
 * made-up model with head_dim 128 and GQA 4 (moshi's and llama-1b's shapes),
 * and the Qwen features on tiny-qwen2 / tiny-qwen3 (qwen_cases, with
 * positions supplied per input, mt_step_io.positions, in absolute rotary):
 * full policy, window without sinks, window + sinks in both rope modes,
 * over 3x the window, batches whose sessions have different lengths
 * (sessions join at different ticks), a prefill, and the audio adapter.
 *
 * Tolerance (bf16): the CUDA backend rounds weights, GEMM inputs and the
 * KV cache to bf16 (8-bit mantissa, relative rounding 2^-9 = 0.2%) and
 * accumulates in fp32. Each rounding perturbs a dot product by about
 * 2^-9/sqrt(3) of its magnitude (random-signed errors add in quadrature,
 * like the terms); a layer has about four such roundings in series, so
 * after L <= 8 layers and the head we expect a relative RMS error near 1%.
 * We allow 3% RMS of the CPU logits' RMS and 8% of the largest |logit| for
 * the largest single difference. So that this bound is not vacuous, the
 * window cases also check that the CUDA-vs-CPU error is under a quarter of
 * the difference between the window and the full policy's logits at the
 * same step (what a wrong sink, ring order or rotary would produce).
 *
 * Split and combine (flash-decoding): the window cases above have W <= 24,
 * for which the planner takes one split; a step at W = 3000 takes many.
 * So: synthetic:tiny, S=4, W=300, cache rope, 336 ticks (ceil(300/64) = 5
 * splits by the planner's 64-slot floor), the same with
 * MT_CUDA_SPLIT_CHUNK=5 (5 forced splits of a W=24 ring, the sinks in
 * split 0), and a model at the largest GQA group the kernel takes (8).
 *
 * Negative controls: every window case with sinks also requires the
 * CUDA-vs-CPU error to be under a quarter of the CPU's own cache-mode vs
 * absolute-mode difference on the same input (swapping the sink and ring
 * rotary positions changes only the sinks' scores: a tolerance that did
 * not separate the two modes would pass such a fault), and under a quarter
 * of the window-vs-full difference. Where the CPU difference is itself
 * under 4x the expected bf16 error the control is skipped, said so: at
 * W=300 on synthetic weights it is 0.5% (rope modes) and 2% (policies),
 * measured on the CPU, so the controls live in the W<=24 cases, the
 * forced-split ones included (7% and 24%).
 *
 * Without a GPU (always the case in CI) the CPU-side parts still run: the
 * controls of the multi-split case are computed on the CPU and must be
 * large enough to be detected (over 4x the expected bf16 error, and a CPU
 * output of the wrong rope mode, planted as if it were the GPU's, must
 * fail the check), and an emulation of the split/combine arithmetic of
 * attention.cu must match direct softmax attention and must fail the
 * tolerance when its combine skips the rescale. The GPU cases then print
 * a TAP skip; with MT_REQUIRE_GPU=1 (make test-gpu) a missing GPU fails
 * instead. MT_CUDA_QUICK=1 runs only the forced-split cases (for
 * compute-sanitizer in tests/gpu/run-device.sh). How each GPU case fails on a planted fault: a wrong combine
 * rescale weights every split's partial as if its max were the global
 * one: the W=300 and forced-split cases exceed RMS_TOL (the emulation
 * shows the size); swapped sink/ring positions make the GPU output the
 * other rope mode's: the rope-mode control fails (its difference is over
 * RMS_TOL here, so the plain tolerance fails too); a wrong GQA mapping at
 * group 8 reads another head's keys: the GQA-8 case's tolerance fails.
 */
#include "tap.h"
#include "decode/backend.h"
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>

#ifndef MT_HAVE_CUDA
int main(void)
{
    tap_skip_all("built without CUDA (no nvcc at build time)");
    return 0;
}
#else

#define RMS_TOL 0.03
#define MAX_TOL 0.08
#define EXPECTED_ERR 0.01 /* the bf16 estimate above */
enum { NS = 3, STAGGER = 5, MAXB = 4 };

/* When set, run() gives each input its rotary position 3 b + pos_stride i
 * (mt_step_io.positions, as an adapter's position ids). */
static int pos_stride;

static int32_t tok(int b, int i, int V)
{
    return (int32_t)((b * 7919LL + i * 104729LL + 13) % V);
}

static int16_t pcm_sample(int b, int i, int k)
{
    /* a few tones at about -20 dBFS, different per session and frame */
    double t = (double)(i * 1920 + k) / 24000.0;
    return (int16_t)lrint(3000.0 * sin(2 * M_PI * (220.0 + 55.0 * b) * t) +
                          1000.0 * sin(2 * M_PI * 1337.0 * t + i));
}

typedef struct errs { double rms, ref_rms, maxd, ref_max; } errs;

static void acc_err(errs *e, const float *got, const float *ref, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        e->rms += d * d;
        e->ref_rms += (double)ref[i] * ref[i];
        if (fabs(d) > e->maxd)
            e->maxd = fabs(d);
        if (fabs(ref[i]) > e->ref_max)
            e->ref_max = fabs(ref[i]);
    }
}

static double rel_rms(const errs *e) { return e->ref_rms > 0 ? sqrt(e->rms / e->ref_rms) : 0; }

static mt_decoder *make(const mt_model *m, mt_device dev, mt_kv_policy pol, int S, int W,
                        mt_rope_mode rope, int steps)
{
    mt_decoder_opts o = { .device = dev, .max_batch = MAXB, .threads = 2 };
    o.kv.policy = pol;
    o.kv.sink = S;
    o.kv.window = W;
    o.kv.rope = rope;
    /* bf16 on CUDA, fp32 (the widest) on the CPU: a budget that holds them */
    size_t pb = mt_decoder_position_bytes(&m->cfg, dev == MT_DEV_CUDA ? 2 : sizeof(float));
    o.kv.budget_bytes = (size_t)(NS + 1) * 16 * ((steps + 16 + S + W) / 16 + 2) * pb;
    char err[256] = "";
    mt_decoder *d = NULL;
    if (mt_decoder_create(m, &o, &d, err, sizeof err))
        tap_diag("decoder_create(%s): %s", dev == MT_DEV_CUDA ? "cuda" : "cpu", err);
    else if (dev == MT_DEV_CUDA && strcmp(mt_decoder_backend_name(d), "cuda") != 0) {
        tap_diag("asked for CUDA, got %s", mt_decoder_backend_name(d));
        mt_decoder_free(d);
        d = NULL;
    }
    return d;
}

/* Runs NS staggered sessions for `steps` ticks on d; session b joins at
 * tick STAGGER*b. Writes the last tick's outputs of every session to
 * last [NS][width] (floats: logits, or pcm as float). Token adapter unless
 * audio. Returns 0 or -1. cmp (may be NULL): the other decoder's run
 * compared tick by tick into e. */
static int run(mt_decoder *d, mt_decoder *cmp, const mt_model *m, int steps, int audio,
               errs *e, float *last)
{
    const mt_config *c = &m->cfg;
    const int V = c->vocab, FS = c->frame_samples;
    const size_t width = audio ? (size_t)FS : (size_t)V;
    mt_decoder *ds[2] = { d, cmp };
    mt_kv_seq *seq[2][NS] = { { 0 } };
    float *out[2];
    int16_t *pin = malloc((size_t)NS * FS * sizeof *pin);
    int16_t *pout = malloc((size_t)NS * FS * sizeof *pout);
    int32_t toks[NS];
    int64_t rpos[NS];
    out[0] = malloc((size_t)NS * width * sizeof(float));
    out[1] = malloc((size_t)NS * width * sizeof(float));
    int rc = -1;
    char err[256] = "";
    if (!pin || !pout || !out[0] || !out[1])
        goto done;
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < NS && ds[k]; b++)
            if (mt_kv_seq_open(mt_decoder_pool(ds[k]), &seq[k][b])) {
                tap_diag("seq_open failed");
                goto done;
            }
    for (int t = 0; t < steps; t++) {
        int B = 0;
        mt_kv_seq *batch[2][NS];
        int who[NS];
        for (int b = 0; b < NS; b++) {
            if (t < STAGGER * b)
                continue;
            int i = t - STAGGER * b; /* this session's position */
            who[B] = b;
            toks[B] = tok(b, i, V > 0 ? V : 1);
            rpos[B] = 3LL * b + (int64_t)pos_stride * i;
            for (int s = 0; s < FS; s++)
                pin[(size_t)B * FS + s] = pcm_sample(b, i, s);
            for (int k = 0; k < 2; k++)
                batch[k][B] = seq[k][b];
            B++;
        }
        for (int k = 0; k < 2; k++) {
            if (!ds[k])
                continue;
            for (int j = 0; j < B; j++)
                if (mt_kv_reserve(mt_decoder_pool(ds[k]), batch[k][j], 1)) {
                    tap_diag("reserve failed at tick %d", t);
                    goto done;
                }
            mt_step_io io = test_step_io(audio, pin, pout, toks, out[k]);
            if (pos_stride)
                io.positions = rpos;
            if (mt_decoder_step(ds[k], B, batch[k], &io, err, sizeof err)) {
                tap_diag("step %d (%s): %s", t, mt_decoder_backend_name(ds[k]), err);
                goto done;
            }
            if (audio)
                for (size_t s = 0; s < (size_t)B * FS; s++)
                    out[k][s] = pout[s];
        }
        if (cmp)
            acc_err(e, out[1], out[0], (size_t)B * width); /* cmp vs d */
        if (t == steps - 1 && last) {
            if (B != NS) {
                tap_diag("not every session active at the last tick");
                goto done;
            }
            (void)who;
            memcpy(last, out[0], (size_t)NS * width * sizeof(float));
        }
    }
    rc = 0;
done:
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < NS; b++)
            if (seq[k][b])
                mt_kv_seq_close(mt_decoder_pool(ds[k]), seq[k][b]);
    free(pin);
    free(pout);
    free(out[0]);
    free(out[1]);
    return rc;
}

static int within_tol(const errs *e)
{
    double mx = e->ref_max > 0 ? e->maxd / e->ref_max : 0;
    return rel_rms(e) <= RMS_TOL && mx <= MAX_TOL;
}

static void check(const char *what, const errs *e)
{
    double r = rel_rms(e), mx = e->ref_max > 0 ? e->maxd / e->ref_max : 0;
    if (!ok(within_tol(e), "%s: cuda matches cpu (rel rms %.4f <= %.2f, max %.4f <= %.2f)",
            what, r, RMS_TOL, mx, MAX_TOL))
        tap_diag("  rms %.4g ref rms %.4g max %.4g ref max %.4g", sqrt(e->rms),
                 sqrt(e->ref_rms), e->maxd, e->ref_max);
}

/* The CPU's last-tick outputs of every session under another policy or
 * rope mode, compared with ref: the relative RMS difference (-1 on error). */
static double cpu_difference(const mt_model *m, mt_kv_policy pol, int S, int W, mt_rope_mode rope,
                             int steps, const float *ref)
{
    size_t width = (size_t)m->cfg.vocab;
    float *last = malloc((size_t)NS * width * sizeof(float));
    mt_decoder *f = make(m, MT_DEV_CPU, pol, S, W, rope, steps);
    double r = -1;
    if (last && f && run(f, NULL, m, steps, 0, NULL, last) == 0) {
        errs sep = { 0 };
        acc_err(&sep, ref, last, (size_t)NS * width);
        r = rel_rms(&sep);
    }
    mt_decoder_free(f);
    free(last);
    return r;
}

/* A negative control: the GPU's error under a quarter of a difference the
 * CPU shows between two modes on the same input. A difference under 4x the
 * expected bf16 error cannot separate anything (long windows on synthetic
 * weights, see controls_on_cpu): skipped, said so. */
static void control(const char *what, const char *which, double gpu_err, double diff)
{
    if (diff <= 4 * EXPECTED_ERR) {
        char why[300];
        snprintf(why, sizeof why, "%s: %s difference %.4f too small to be a control here",
                 what, which, diff);
        tap_skip(why);
        return;
    }
    ok(gpu_err < 0.25 * diff, "%s: the tolerance separates %s (cuda err %.4f < 1/4 of %.4f)",
       what, which, gpu_err, diff);
}

/* One parity case: CUDA vs CPU over `steps` staggered ticks. For window
 * cases also the window-vs-full separation (see the top comment). */
static void parity(const mt_model *m, const char *name, mt_kv_policy pol, int S, int W,
                   mt_rope_mode rope, int steps, int audio)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s %s S=%d W=%d rope=%s %d ticks%s", m->cfg.name, name,
             pol == MT_KV_FULL ? "full" : "window", S, W,
             rope == MT_ROPE_CACHE ? "cache" : "absolute", steps, audio ? " audio" : "");
    mt_decoder *g = make(m, MT_DEV_CUDA, pol, S, W, rope, steps);
    mt_decoder *c = make(m, MT_DEV_CPU, pol, S, W, rope, steps);
    if (!g || !c) {
        ok(0, "%s: decoders created", what);
        mt_decoder_free(g);
        mt_decoder_free(c);
        return;
    }
    size_t width = audio ? (size_t)m->cfg.frame_samples : (size_t)m->cfg.vocab;
    float *last_cpu = malloc((size_t)NS * width * sizeof(float));
    float *last_full = malloc((size_t)NS * width * sizeof(float));
    errs e = { 0 };
    int rc = last_cpu && last_full ? run(c, g, m, steps, audio, &e, last_cpu) : -1;
    /* the CPU run is the reference, the GPU run is compared against it */
    if (!ok(rc == 0, "%s: ran", what)) {
        goto out;
    }
    check(what, &e);
    if (pol == MT_KV_WINDOW && !audio) {
        double gpu_err = rel_rms(&e);
        double s = cpu_difference(m, MT_KV_FULL, 0, 1, MT_ROPE_ABSOLUTE, steps, last_cpu);
        if (ok(s >= 0, "%s: full-policy reference ran", what))
            control(what, "window-vs-full", gpu_err, s);
        if (S > 0 && !pos_stride) { /* cache mode takes no positions */
            mt_rope_mode other = rope == MT_ROPE_CACHE ? MT_ROPE_ABSOLUTE : MT_ROPE_CACHE;
            double sr = cpu_difference(m, pol, S, W, other, steps, last_cpu);
            if (ok(sr >= 0, "%s: other rope mode's reference ran", what))
                control(what, "cache-vs-absolute", gpu_err, sr);
        }
    }
out:
    free(last_cpu);
    free(last_full);
    mt_decoder_free(g);
    mt_decoder_free(c);
}

/* Prefill of n positions then one step, CUDA vs CPU (logits of both). */
static void parity_prefill(const mt_model *m, mt_kv_policy pol, int S, int W, int n)
{
    const int V = m->cfg.vocab;
    mt_decoder *d[2] = { make(m, MT_DEV_CPU, pol, S, W, MT_ROPE_CACHE, n + 1),
                         make(m, MT_DEV_CUDA, pol, S, W, MT_ROPE_CACHE, n + 1) };
    int32_t *toks = malloc((size_t)(n + 1) * sizeof *toks);
    float *lg[2] = { malloc((size_t)(n + 1) * V * sizeof(float)),
                     malloc((size_t)(n + 1) * V * sizeof(float)) };
    int good = d[0] && d[1] && toks && lg[0] && lg[1];
    char err[256] = "";
    for (int i = 0; good && i <= n; i++)
        toks[i] = tok(1, i, V);
    for (int k = 0; good && k < 2; k++) {
        mt_kv_pool *p = mt_decoder_pool(d[k]);
        mt_kv_seq *s = NULL;
        mt_step_io io = { .tokens_in = toks, .logits = lg[k] };
        mt_step_io io1 = { .tokens_in = toks + n, .logits = lg[k] + (size_t)n * V };
        if (mt_kv_seq_open(p, &s) || mt_kv_reserve(p, s, n) ||
            mt_decoder_prefill(d[k], s, n, &io, err, sizeof err) || mt_kv_reserve(p, s, 1) ||
            mt_decoder_step(d[k], 1, &s, &io1, err, sizeof err)) {
            tap_diag("prefill: %s", err);
            good = 0;
        }
        if (s)
            mt_kv_seq_close(p, s);
    }
    char what[120];
    snprintf(what, sizeof what, "%s prefill %d + step, %s S=%d W=%d", m->cfg.name, n,
             pol == MT_KV_FULL ? "full" : "window", S, W);
    if (ok(good, "%s: ran", what)) {
        errs e = { 0 };
        acc_err(&e, lg[1], lg[0], (size_t)(n + 1) * V);
        check(what, &e);
    }
    mt_decoder_free(d[0]);
    mt_decoder_free(d[1]);
    free(toks);
    free(lg[0]);
    free(lg[1]);
}

/* A model of tiny's kind with head_dim hd and `heads` query heads over one
 * kv head: hd 128 with 4 (the shapes of moshi-7b's heads and
 * llama-3.2-1b's grouping, which the presets do not reach) and 8 (the
 * largest group the attention kernel takes), weights from the synthetic
 * generator. */
static mt_model *make_wide(const mt_model *tiny, int hd, int heads, char *err, size_t errlen)
{
    mt_config c = tiny->cfg;
    snprintf(c.name, sizeof c.name, "wide(hd%d,gqa%d)", hd, heads);
    c.hidden = 512;
    c.heads = heads;
    c.kv_heads = 1;
    c.head_dim = hd;
    c.ffn = 512;
    c.layers = 2;
    mt_model *m = NULL;
    if (mt_model_alloc(&c, &m, err, errlen))
        return NULL;
    m->seed = 7;
    int n = mt_model_tensor_count(&m->cfg);
    for (int i = 0; i < n; i++) {
        mt_tensor_ref r;
        if (mt_model_tensor(m, i, &r) || !r.data || mt_model_synthetic_tensor(m, i, r.data)) {
            snprintf(err, errlen, "wide model: tensor %d", i);
            mt_model_free(m);
            return NULL;
        }
    }
    return m;
}

/* attention.cu's arithmetic on the CPU, for one query head: scores in
 * base 2 (q carries log2(e)/sqrt(D)); the S sinks are split 0's, the ring
 * slots S..n-1 go in chunks of `chunk`; each split keeps an online softmax
 * (max m, sum l, acc), and the combine rescales each by exp2(m - M).
 * skip_rescale plants the fault: the combine adds the partials as if every
 * split's max were the global one. */
static void emulate_attention(const float *q, const float *K, const float *V, int n, int S,
                              int D, int chunk, int skip_rescale, float *out)
{
    int nsplit = (n - S + chunk - 1) / chunk;
    double M = -INFINITY, L = 0;
    double *acc = calloc((size_t)nsplit * D, sizeof *acc), *m = malloc(nsplit * sizeof *m),
           *l = calloc((size_t)nsplit, sizeof *l);
    if (!acc || !m || !l)
        goto out;
    for (int sp = 0; sp < nsplit; sp++) {
        m[sp] = -INFINITY;
        int lo = S + sp * chunk, hi = lo + chunk < n ? lo + chunk : n;
        for (int ph = 0; ph < 2; ph++) {
            int a = ph == 0 ? 0 : lo, b = ph == 0 ? (sp == 0 ? S : 0) : hi;
            for (int j = a; j < b; j++) {
                double sc = 0;
                for (int i = 0; i < D; i++)
                    sc += (double)q[i] * K[(size_t)j * D + i];
                double mn = sc > m[sp] ? sc : m[sp];
                double c = m[sp] == -INFINITY ? 0 : exp2(m[sp] - mn), pw = exp2(sc - mn);
                l[sp] = l[sp] * c + pw;
                for (int i = 0; i < D; i++)
                    acc[(size_t)sp * D + i] = acc[(size_t)sp * D + i] * c + pw * V[(size_t)j * D + i];
                m[sp] = mn;
            }
        }
        if (m[sp] > M)
            M = m[sp];
    }
    for (int sp = 0; sp < nsplit; sp++)
        L += l[sp] * (skip_rescale ? 1.0 : exp2(m[sp] - M));
    for (int i = 0; i < D; i++) {
        double A = 0;
        for (int sp = 0; sp < nsplit; sp++)
            A += acc[(size_t)sp * D + i] * (skip_rescale ? 1.0 : exp2(m[sp] - M));
        out[i] = (float)(A / L);
    }
out:
    free(acc);
    free(m);
    free(l);
}

/* The CPU-side part of the split checks: the emulation matches direct
 * softmax attention with the rescale, and fails the tolerance without. */
static void split_emulation(void)
{
    enum { N = 304, SK = 4, D = 64, CH = 64, HEADS = 8 };
    float *K = malloc((size_t)N * D * sizeof *K), *V = malloc((size_t)N * D * sizeof *V);
    float q[D], ref[D], good[D], bad[D];
    errs eg = { 0 }, eb = { 0 };
    uint64_t r = 42;
    if (!K || !V) {
        ok(0, "emulation: memory");
        free(K);
        free(V);
        return;
    }
    for (int h = 0; h < HEADS; h++) {
        /* keys whose scores differ by split, as positions far apart do */
        for (int j = 0; j < N; j++)
            for (int i = 0; i < D; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                double u = (double)(r >> 11) / 9007199254740992.0 * 2 - 1;
                K[(size_t)j * D + i] = (float)(u * (1.0 + (j / CH) % 3));
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                V[(size_t)j * D + i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1);
            }
        for (int i = 0; i < D; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            q[i] = (float)(((double)(r >> 11) / 9007199254740992.0 * 2 - 1) * 1.4426950408889634 * 2 / sqrt(D));
        }
        /* direct: one softmax over all n keys */
        double mx = -INFINITY, sum = 0, sc[N];
        for (int j = 0; j < N; j++) {
            sc[j] = 0;
            for (int i = 0; i < D; i++)
                sc[j] += (double)q[i] * K[(size_t)j * D + i];
            mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int i = 0; i < D; i++)
            ref[i] = 0;
        for (int j = 0; j < N; j++) {
            double w = exp2(sc[j] - mx);
            sum += w;
            for (int i = 0; i < D; i++)
                ref[i] += (float)(w * V[(size_t)j * D + i]);
        }
        for (int i = 0; i < D; i++)
            ref[i] = (float)(ref[i] / sum);
        emulate_attention(q, K, V, N, SK, D, CH, 0, good);
        emulate_attention(q, K, V, N, SK, D, CH, 1, bad);
        acc_err(&eg, good, ref, D);
        acc_err(&eb, bad, ref, D);
    }
    ok(rel_rms(&eg) < 1e-4, "emulated split+combine (5 splits, sinks in split 0) matches direct attention (rel rms %.2g)",
       rel_rms(&eg));
    ok(!within_tol(&eb), "planted fault: a combine without the rescale fails the parity tolerance (rel rms %.3f > %.2f)",
       rel_rms(&eb), RMS_TOL);
    free(K);
    free(V);
}

/* The CPU-side part of the controls: on the forced-split case's input
 * (synthetic:tiny, S=4, W=24, both rope modes) the two differences are
 * large enough for a correct GPU (error about EXPECTED_ERR) to pass under
 * a quarter of them, and the other rope mode's output, planted as if it
 * were the GPU's (what swapped sink and ring positions produce), fails the
 * plain tolerance already. At W=300 the differences are reported, not
 * required: with the synthetic weights' near-uniform attention, 4 sinks
 * among 304 keys move the logits by about 0.5%, under the bf16 error, so
 * there the controls cannot separate anything and parity() skips them. */
static void controls_on_cpu(const mt_model *m)
{
    size_t width = (size_t)m->cfg.vocab;
    float *cache = malloc((size_t)NS * width * sizeof(float));
    const int S = 4, W = 24, T = 3 * 24 + 14;
    mt_decoder *dc = make(m, MT_DEV_CPU, MT_KV_WINDOW, S, W, MT_ROPE_CACHE, T);
    mt_decoder *da = make(m, MT_DEV_CPU, MT_KV_WINDOW, S, W, MT_ROPE_ABSOLUTE, T);
    errs planted = { 0 };
    int ran = cache && dc && da && run(dc, da, m, T, 0, &planted, cache) == 0;
    mt_decoder_free(dc);
    mt_decoder_free(da);
    if (ok(ran, "controls on the CPU: %s S=%d W=%d %d ticks ran", m->cfg.name, S, W, T)) {
        double sr = cpu_difference(m, MT_KV_WINDOW, S, W, MT_ROPE_ABSOLUTE, T, cache);
        double sp = cpu_difference(m, MT_KV_FULL, 0, 1, MT_ROPE_ABSOLUTE, T, cache);
        ok(sr > 4 * EXPECTED_ERR, "W=%d: cache-vs-absolute difference %.4f > 4 x the expected bf16 error %.2f: the rope-mode control can pass a correct GPU",
           W, sr, EXPECTED_ERR);
        ok(sp > 4 * EXPECTED_ERR, "W=%d: window-vs-full difference %.4f > 4 x the expected bf16 error %.2f: the policy control can pass a correct GPU",
           W, sp, EXPECTED_ERR);
        ok(!within_tol(&planted),
           "planted fault: absolute-mode output in place of cache mode's fails the tolerance (rel rms %.4f > %.2f over all ticks)",
           rel_rms(&planted), RMS_TOL);
    }
    mt_decoder *d3 = make(m, MT_DEV_CPU, MT_KV_WINDOW, 4, 300, MT_ROPE_CACHE, 336);
    if (cache && d3 && run(d3, NULL, m, 336, 0, NULL, cache) == 0)
        tap_diag("W=300: cache-vs-absolute %.4f, window-vs-full %.4f (too small to be controls)",
                 cpu_difference(m, MT_KV_WINDOW, 4, 300, MT_ROPE_ABSOLUTE, 336, cache),
                 cpu_difference(m, MT_KV_FULL, 0, 1, MT_ROPE_ABSOLUTE, 336, cache));
    mt_decoder_free(d3);
    free(cache);
}

/* The Qwen features (kernels/qwen.cu): the q/k/v biases of tiny-qwen2 and
 * the per-head q/k norms of tiny-qwen3 (head_dim 32, heads*head_dim twice
 * hidden). Negative control: the CPU's difference between the model and
 * the same model without the feature (biases zeroed; norms left out)
 * must be over 4x the expected bf16 error, so that a GPU that skipped
 * the feature fails; with a GPU, the CUDA error must be under a quarter
 * of it. Without a GPU only the CPU side runs. */
static void qwen_cases(const char *spec, int gpu)
{
    char err[256] = "", what[160];
    mt_model *m = NULL, *bare = NULL;
    if (mt_model_load(spec, 0, &m, err, sizeof err) ||
        mt_model_load(spec, 0, &bare, err, sizeof err)) {
        ok(0, "load %s: %s", spec, err);
        mt_model_free(m);
        return;
    }
    const char *which = m->cfg.qkv_bias ? "a missing q/k/v bias" : "a missing q/k norm";
    for (int l = 0; l < bare->cfg.layers; l++) {
        mt_layer_weights *w = &bare->layer[l];
        if (w->bq) {
            memset(w->bq, 0, (size_t)bare->cfg.heads * bare->cfg.head_dim * sizeof(float));
            memset(w->bk, 0, (size_t)bare->cfg.kv_heads * bare->cfg.head_dim * sizeof(float));
            memset(w->bv, 0, (size_t)bare->cfg.kv_heads * bare->cfg.head_dim * sizeof(float));
        }
        w->q_norm = w->k_norm = NULL;   /* the CPU step skips the norms */
    }
    const int W = 16, T = 3 * W + STAGGER * (NS - 1) + 4;
    size_t width = (size_t)m->cfg.vocab;
    float *last = malloc((size_t)NS * width * sizeof(float));
    float *last_bare = malloc((size_t)NS * width * sizeof(float));
    for (int pol = 0; pol < 2; pol++) {
        mt_kv_policy kp = pol ? MT_KV_WINDOW : MT_KV_FULL;
        int S = pol ? 4 : 0, Wn = pol ? W : 1;
        mt_rope_mode rope = pol ? MT_ROPE_CACHE : MT_ROPE_ABSOLUTE;
        snprintf(what, sizeof what, "%s %s", spec, pol ? "window S=4 W=16 cache" : "full");
        mt_decoder *c = make(m, MT_DEV_CPU, kp, S, Wn, rope, T);
        mt_decoder *cb = make(bare, MT_DEV_CPU, kp, S, Wn, rope, T);
        mt_decoder *g = gpu ? make(m, MT_DEV_CUDA, kp, S, Wn, rope, T) : NULL;
        errs e = { 0 }, sep = { 0 };
        int rc = last && last_bare && c && cb && (g || !gpu) ? 0 : -1;
        if (!rc)
            rc = run(c, g, m, T, 0, g ? &e : NULL, last);
        if (!rc)
            rc = run(cb, NULL, bare, T, 0, NULL, last_bare);
        if (ok(rc == 0, "%s: ran (%s)", what, gpu ? "cuda and cpu" : "cpu only")) {
            acc_err(&sep, last, last_bare, (size_t)NS * width);
            double diff = rel_rms(&sep);
            ok(diff > 4 * EXPECTED_ERR, "%s: without the feature the CPU differs by %.4f > 4 x "
               "the expected bf16 error %.2f: the parity tolerance separates %s", what, diff,
               EXPECTED_ERR, which);
            if (gpu) {
                check(what, &e);
                control(what, which, rel_rms(&e), diff);
            }
        }
        mt_decoder_free(c);
        mt_decoder_free(cb);
        mt_decoder_free(g);
    }
    if (gpu) {
        parity(m, "tokens", MT_KV_WINDOW, 4, W, MT_ROPE_ABSOLUTE, T, 0);
        pos_stride = 3; /* positions supplied per input: absolute rotary only */
        parity(m, "tokens positions 3b+3i", MT_KV_FULL, 0, 1, MT_ROPE_ABSOLUTE, T, 0);
        parity(m, "tokens positions 3b+3i", MT_KV_WINDOW, 4, W, MT_ROPE_ABSOLUTE, T, 0);
        pos_stride = 0;
        parity(m, "tokens", MT_KV_WINDOW, 0, W, MT_ROPE_CACHE, T, 0);
        parity(m, "audio", MT_KV_WINDOW, 4, W, MT_ROPE_CACHE, T, 1);
        parity_prefill(m, MT_KV_WINDOW, 4, W, 30);
    }
    free(last);
    free(last_bare);
    mt_model_free(m);
    mt_model_free(bare);
}

int main(void)
{
    char why[256] = "";
    char err[256] = "";

    /* The backend is linked: both entry points are callable. */
    int avail = mt_cuda_available(why, sizeof why);
    char node[256] = "";
    int present = mt_cuda_device_present(node, sizeof node);
    /* a GPU the runtime can use has a device node; one without is no GPU */
    ok(avail == 0 || (avail == 1 && present), "mt_cuda_available (%d: %s) agrees with the "
       "device nodes (%d: %s)", avail, why, present, node);
    ok(why[0] != '\0', "mt_cuda_available gives a reason or a device name");
    mt_model *tiny = NULL;
    if (mt_model_load("synthetic:tiny", 0, &tiny, err, sizeof err)) {
        ok(0, "load synthetic:tiny: %s", err);
        return tap_done();
    }
    if (!avail) {
        mt_kv_params kp = { .policy = MT_KV_WINDOW, .sink = 4, .window = 16,
                            .rope = MT_ROPE_CACHE, .budget_bytes = 1 << 20 };
        mt_backend *be = NULL;
        mt_decoder_opts o = { .device = MT_DEV_CUDA, .max_batch = 2, .kv = kp };
        err[0] = '\0';
        int rc = mt_cuda_backend_create(tiny, &o, &be, err, sizeof err);
        ok(rc == -1 && be == NULL && err[0], "mt_cuda_backend_create without a GPU fails cleanly: %s", err);
        mt_decoder *d = NULL;
        rc = mt_decoder_create(tiny, &o, &d, err, sizeof err);
        like(rc ? err : "", "CUDA", "--device cuda without a GPU: one clear message");
        mt_decoder_free(d);
        o.device = MT_DEV_AUTO;
        d = NULL;
        rc = mt_decoder_create(tiny, &o, &d, err, sizeof err);
        ok(rc == 0 && d && strcmp(mt_decoder_backend_name(d), "cpu") == 0,
           "--device auto falls back to the CPU (%s)", d ? mt_decoder_note(d) : err);
        mt_decoder_free(d);
        /* the CPU-side parts of the split and control checks */
        split_emulation();
        controls_on_cpu(tiny);
        qwen_cases("synthetic:tiny-qwen2", 0);
        qwen_cases("synthetic:tiny-qwen3", 0);
        mt_model_free(tiny);
        if (getenv("MT_REQUIRE_GPU") && atoi(getenv("MT_REQUIRE_GPU"))) {
            ok(0, "a GPU is present (MT_REQUIRE_GPU=1): %s", why);
            return tap_done();
        }
        tap_skip("CUDA parity tests (incl. multi-split W=300, forced splits, GQA 8, negative controls): no GPU here");
        return tap_done();
    }

    mt_model *small = NULL;
    if (mt_model_load("synthetic:small", 0, &small, err, sizeof err)) {
        ok(0, "load synthetic:small: %s", err);
        mt_model_free(tiny);
        return tap_done();
    }
    mt_model *wide = make_wide(tiny, 128, 4, err, sizeof err);
    mt_model *gqa8 = wide ? make_wide(tiny, 64, 8, err, sizeof err) : NULL;
    if (!ok(wide && gqa8, "head_dim 128 GQA 4 and head_dim 64 GQA 8 models (%s)",
            gqa8 ? "made" : err)) {
        mt_model_free(tiny);
        mt_model_free(small);
        mt_model_free(wide);
        return tap_done();
    }
    split_emulation();
    /* MT_CUDA_QUICK=1: the forced-split cases alone (every kernel, several
     * splits, GQA 8), for a pass under compute-sanitizer */
    const char *quick = getenv("MT_CUDA_QUICK");
    int nmodels = quick && atoi(quick) ? 0 : 4;
    const mt_model *ms[4] = { tiny, small, wide, gqa8 };
    for (int i = 0; i < nmodels; i++) {
        const mt_model *m = ms[i];
        const int W = 16;
        const int T = 3 * W + STAGGER * (NS - 1) + 4; /* every session past 3x W */
        parity(m, "tokens", MT_KV_FULL, 0, 1, MT_ROPE_ABSOLUTE, T, 0);
        parity(m, "tokens", MT_KV_WINDOW, 0, W, MT_ROPE_CACHE, T, 0);
        parity(m, "tokens", MT_KV_WINDOW, 4, W, MT_ROPE_CACHE, T, 0);
        parity(m, "tokens", MT_KV_WINDOW, 4, W, MT_ROPE_ABSOLUTE, T, 0);
        parity(m, "tokens", MT_KV_WINDOW, 4, 24, MT_ROPE_CACHE, 3 * 24 + 14, 0);
        if (m->cfg.has_audio)
            parity(m, "audio", MT_KV_WINDOW, 4, W, MT_ROPE_CACHE, T, 1);
        parity_prefill(m, MT_KV_FULL, 0, 1, 40);
        parity_prefill(m, MT_KV_WINDOW, 4, W, 30);
    }
    /* several splits: by the planner (W=300: 5 chunks of 60), then forced
     * (chunks of 5 slots of a W=24 ring), then forced at GQA 8 */
    if (nmodels)
        parity(tiny, "tokens multi-split", MT_KV_WINDOW, 4, 300, MT_ROPE_CACHE, 336, 0);
    if (ok(setenv("MT_CUDA_SPLIT_CHUNK", "5", 1) == 0, "MT_CUDA_SPLIT_CHUNK=5 set")) {
        parity(tiny, "tokens forced-split", MT_KV_WINDOW, 4, 24, MT_ROPE_CACHE, 3 * 24 + 14, 0);
        parity(tiny, "tokens forced-split", MT_KV_WINDOW, 4, 24, MT_ROPE_ABSOLUTE, 3 * 24 + 14, 0);
        parity(gqa8, "tokens forced-split", MT_KV_WINDOW, 4, 24, MT_ROPE_CACHE, 3 * 24 + 14, 0);
        parity_prefill(gqa8, MT_KV_WINDOW, 4, 24, 40);
        unsetenv("MT_CUDA_SPLIT_CHUNK");
    }
    if (nmodels) {
        qwen_cases("synthetic:tiny-qwen2", 1);
        qwen_cases("synthetic:tiny-qwen3", 1);
    }
    mt_model_free(tiny);
    mt_model_free(small);
    mt_model_free(wide);
    mt_model_free(gqa8);
    return tap_done();
}
#endif
