/* test_cuda.c: the CUDA backend against the CPU backend (parity), on
 * synthetic:tiny (head_dim 16, GQA 2), synthetic:small (head_dim 64) and a
 * made-up model with head_dim 128 and GQA 4 (moshi's and llama-1b's shapes):
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
 * Without a GPU (always the case in CI) the symbol checks run and the
 * parity tests are skipped; with MT_REQUIRE_GPU=1 (make test-gpu) a
 * missing GPU fails instead.
 */
#include "tap.h"
#include "decode/decoder.h"

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
enum { NS = 3, STAGGER = 5, MAXB = 4 };

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
    size_t pb = mt_decoder_position_bytes(&m->cfg, dev == MT_DEV_CUDA ? "cuda" : "cpu");
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
            mt_step_io io = { 0 };
            if (audio) {
                io.pcm_in = pin;
                io.pcm_out = pout;
            } else {
                io.tokens_in = toks;
                io.logits = out[k];
            }
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

static void check(const char *what, const errs *e)
{
    double r = rel_rms(e), mx = e->ref_max > 0 ? e->maxd / e->ref_max : 0;
    if (!ok(r <= RMS_TOL && mx <= MAX_TOL, "%s: cuda matches cpu (rel rms %.4f <= %.2f, max %.4f <= %.2f)",
            what, r, RMS_TOL, mx, MAX_TOL))
        tap_diag("  rms %.4g ref rms %.4g max %.4g ref max %.4g", sqrt(e->rms),
                 sqrt(e->ref_rms), e->maxd, e->ref_max);
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
        mt_decoder *f = make(m, MT_DEV_CPU, MT_KV_FULL, 0, 1, MT_ROPE_ABSOLUTE, steps);
        if (f && run(f, NULL, m, steps, 0, NULL, last_full) == 0) {
            errs sep = { 0 };
            acc_err(&sep, last_cpu, last_full, (size_t)NS * width);
            double gpu_err = rel_rms(&e), s = rel_rms(&sep);
            ok(gpu_err < 0.25 * s, "%s: the tolerance separates policies (cuda err %.4f < 1/4 of window-vs-full %.4f)",
               what, gpu_err, s);
        } else
            ok(0, "%s: full-policy reference ran", what);
        mt_decoder_free(f);
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

/* A model of tiny's kind with head_dim 128 and 4 query heads per kv head
 * (the shapes of moshi-7b's heads and llama-3.2-1b's grouping, which the
 * presets above do not reach), weights from the synthetic generator. */
static mt_model *make_wide(const mt_model *tiny, char *err, size_t errlen)
{
    mt_config c = tiny->cfg;
    snprintf(c.name, sizeof c.name, "wide(hd128,gqa4)");
    c.hidden = 512;
    c.heads = 4;
    c.kv_heads = 1;
    c.head_dim = 128;
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

int main(void)
{
    char why[256] = "";
    char err[256] = "";

    /* The backend is linked: both entry points are callable. */
    int avail = mt_cuda_available(why, sizeof why);
    ok(avail == 0 || avail == 1, "mt_cuda_available answers (%d: %s)", avail, why);
    ok(why[0] != '\0', "mt_cuda_available gives a reason or a device name");
    mt_model *tiny = NULL;
    if (mt_model_load("synthetic:tiny", 0, &tiny, err, sizeof err)) {
        ok(0, "load synthetic:tiny: %s", err);
        return tap_done();
    }
    if (!avail) {
        mt_kv_params kp = { .policy = MT_KV_WINDOW, .sink = 4, .window = 16,
                            .rope = MT_ROPE_CACHE, .budget_bytes = 1 << 20 };
        kp.position_bytes = mt_decoder_position_bytes(&tiny->cfg, "cuda");
        mt_kv_pool *pool = NULL;
        mt_backend *be = NULL;
        mt_decoder_opts o = { .device = MT_DEV_CUDA, .max_batch = 2, .kv = kp };
        int rc = mt_kv_pool_create(&kp, &pool, err, sizeof err);
        ok(rc == 0, "a pool for the CUDA backend");
        err[0] = '\0';
        rc = pool ? mt_cuda_backend_create(tiny, pool, &o, &be, err, sizeof err) : -1;
        ok(rc == -1 && be == NULL && err[0], "mt_cuda_backend_create without a GPU fails cleanly: %s", err);
        mt_kv_pool_free(pool);
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
        mt_model_free(tiny);
        if (getenv("MT_REQUIRE_GPU") && atoi(getenv("MT_REQUIRE_GPU"))) {
            ok(0, "a GPU is present (MT_REQUIRE_GPU=1): %s", why);
            return tap_done();
        }
        tap_skip("CUDA parity tests: no GPU here");
        return tap_done();
    }

    mt_model *small = NULL;
    if (mt_model_load("synthetic:small", 0, &small, err, sizeof err)) {
        ok(0, "load synthetic:small: %s", err);
        mt_model_free(tiny);
        return tap_done();
    }
    mt_model *wide = make_wide(tiny, err, sizeof err);
    if (!ok(wide != NULL, "a head_dim 128, GQA 4 model (%s)", wide ? "made" : err)) {
        mt_model_free(tiny);
        mt_model_free(small);
        return tap_done();
    }
    const mt_model *ms[3] = { tiny, small, wide };
    for (int i = 0; i < 3; i++) {
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
    mt_model_free(tiny);
    mt_model_free(small);
    mt_model_free(wide);
    return tap_done();
}
#endif
