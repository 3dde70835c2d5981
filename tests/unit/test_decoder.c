/* test_decoder.c: the batched step's invariants on synthetic:tiny:
 * prefill of n positions == n single steps (also across the window's
 * wrap), the same outputs whatever the batch composition, recompute after
 * a release reproduces the history, and clear errors for bad calls.
 * Equality is within fp32 rounding (a 1-row product and a B-row product
 * take different BLAS kernels), checked relative to the logit scale. */
#include "tap.h"
#include "decode/decoder.h"

#include <stdint.h>

#define STEPS 40
enum { NS = 3 };

static mt_model *model;
static int V;

static int32_t tok(int b, int i) { return (int32_t)((b * 7919LL + i * 104729LL + 13) % V); }

static mt_decoder *make(mt_kv_policy pol, int S, int W, mt_rope_mode rope, int maxb,
                        int threads)
{
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = maxb, .threads = threads };
    o.kv.policy = pol;
    o.kv.sink = S;
    o.kv.window = W;
    o.kv.rope = rope;
    o.kv.budget_bytes = (size_t)NS * 4 * 16 * STEPS * mt_decoder_position_bytes(&model->cfg, sizeof(float));
    char err[256] = "";
    mt_decoder *d = NULL;
    if (mt_decoder_create(model, &o, &d, err, sizeof err))
        tap_diag("decoder_create: %s", err);
    return d;
}

static double maxdiff(const float *a, const float *b, size_t n, double *scale)
{
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m ? d : m;
        s = fabs(b[i]) > s ? fabs(b[i]) : s;
    }
    *scale = s;
    return m;
}

/* logits [STEPS][V] of session b stepped alone, one position at a time */
static int run_alone(mt_decoder *d, int b, float *out)
{
    mt_kv_pool *pool = mt_decoder_pool(d);
    mt_kv_seq *s = NULL;
    char err[256];
    if (mt_kv_seq_open(pool, &s))
        return -1;
    for (int i = 0; i < STEPS; i++) {
        int32_t t = tok(b, i);
        mt_step_io io = { .tokens_in = &t, .logits = out + (size_t)i * V };
        if (mt_kv_reserve(pool, s, 1) || mt_decoder_step(d, 1, &s, &io, err, sizeof err)) {
            tap_diag("step: %s", err);
            mt_kv_seq_close(pool, s);
            return -1;
        }
    }
    mt_kv_seq_close(pool, s);
    return 0;
}

static void test_policy(mt_kv_policy pol, int S, int W, mt_rope_mode rope, const char *name)
{
    mt_decoder *d = make(pol, S, W, rope, NS, 2);
    if (!ok(d != NULL, "%s: decoder created", name))
        return;
    mt_kv_pool *pool = mt_decoder_pool(d);
    char err[256] = "";
    float *alone = calloc((size_t)NS * STEPS * V, sizeof *alone);
    float *batched = calloc((size_t)NS * STEPS * V, sizeof *batched);
    float *pre = calloc((size_t)STEPS * V, sizeof *pre);
    float *lg = calloc((size_t)NS * V, sizeof *lg);

    int good = 1;
    for (int b = 0; b < NS; b++)
        good &= run_alone(d, b, alone + (size_t)b * STEPS * V) == 0;
    ok(good, "%s: sessions stepped one at a time", name);

    /* The same sessions batched, starting at steps 0, 3, 7: the batch's
     * composition changes as they join. */
    int start[NS] = { 0, 3, 7 };
    mt_kv_seq *seq[NS] = { 0 }, *batch[NS];
    for (int b = 0; b < NS; b++)
        good &= mt_kv_seq_open(pool, &seq[b]) == 0;
    for (int t = 0; good && t < STEPS + start[NS - 1]; t++) {
        int B = 0, who[NS];
        int32_t tk[NS];
        for (int b = 0; b < NS; b++) {
            int i = t - start[b];
            if (i < 0 || i >= STEPS)
                continue;
            good &= mt_kv_reserve(pool, seq[b], 1) == 0;
            tk[B] = tok(b, i);
            who[B] = b;
            batch[B++] = seq[b];
        }
        mt_step_io io = { .tokens_in = tk, .logits = lg };
        if (mt_decoder_step(d, B, batch, &io, err, sizeof err)) {
            tap_diag("batched step: %s", err);
            good = 0;
            break;
        }
        for (int r = 0; r < B; r++)
            memcpy(batched + ((size_t)who[r] * STEPS + (t - start[who[r]])) * V,
                   lg + (size_t)r * V, (size_t)V * sizeof *lg);
    }
    double scale, e = maxdiff(batched, alone, (size_t)NS * STEPS * V, &scale);
    if (!ok(good && e <= 1e-5 * scale, "%s: batched == one at a time (err %.2e of %.2e)",
            name, e, scale))
        tap_diag("  err %g scale %g", e, scale);
    for (int b = 0; b < NS; b++)
        mt_kv_seq_close(pool, seq[b]);

    /* Prefill of all STEPS positions (past the window's wrap) in one call
     * == STEPS single steps. */
    mt_kv_seq *s = NULL;
    int32_t tk[STEPS];
    for (int i = 0; i < STEPS; i++)
        tk[i] = tok(0, i);
    mt_step_io io = { .tokens_in = tk, .logits = pre };
    good = mt_kv_seq_open(pool, &s) == 0 && mt_kv_reserve(pool, s, STEPS) == 0 &&
           mt_decoder_prefill(d, s, STEPS, &io, err, sizeof err) == 0;
    if (!good)
        tap_diag("prefill: %s", err);
    e = maxdiff(pre, alone, (size_t)STEPS * V, &scale);
    ok(good && e <= 1e-5 * scale, "%s: prefill(%d) == %d steps (err %.2e)", name, STEPS,
       STEPS, e);
    is_int(s ? s->len : -1, STEPS, "prefill advances len by n");

    /* Prefill in two parts, then one more step, after a release (the
     * preempt-and-recompute path). */
    mt_kv_release(pool, s);
    int half = STEPS / 2 + 3;
    io.logits = NULL; /* only the cache is wanted */
    good = mt_kv_reserve(pool, s, half) == 0 &&
           mt_decoder_prefill(d, s, half, &io, err, sizeof err) == 0;
    mt_step_io io2 = { .tokens_in = tk + half, .logits = NULL };
    good = good && mt_kv_reserve(pool, s, STEPS - 1 - half) == 0 &&
           mt_decoder_prefill(d, s, STEPS - 1 - half, &io2, err, sizeof err) == 0;
    int32_t last = tk[STEPS - 1];
    mt_step_io io3 = { .tokens_in = &last, .logits = lg };
    good = good && mt_kv_reserve(pool, s, 1) == 0 &&
           mt_decoder_step(d, 1, &s, &io3, err, sizeof err) == 0;
    if (!good)
        tap_diag("recompute: %s", err);
    e = maxdiff(lg, alone + (size_t)(STEPS - 1) * V, (size_t)V, &scale);
    ok(good && e <= 1e-5 * scale, "%s: release + recompute + step == history (err %.2e)",
       name, e);
    mt_kv_seq_close(pool, s);

    /* Thread count does not change the result beyond rounding. */
    mt_decoder *d1 = make(pol, S, W, rope, NS, 1);
    float *one = calloc((size_t)STEPS * V, sizeof *one);
    good = d1 && run_alone(d1, 1, one) == 0;
    e = maxdiff(one, alone + (size_t)STEPS * V, (size_t)STEPS * V, &scale);
    ok(good && e <= 1e-5 * scale, "%s: 1 thread == 2 threads (err %.2e)", name, e);
    mt_decoder_free(d1);
    free(one);

    free(alone);
    free(batched);
    free(pre);
    free(lg);
    mt_decoder_free(d);
}

static void test_errors(void)
{
    char err[256] = "";
    mt_decoder_opts o = { .device = MT_DEV_CUDA, .max_batch = 2, .threads = 1 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 4;
    o.kv.window = 16;
    o.kv.budget_bytes = 1 << 22;
    mt_decoder *d = NULL;
#ifndef MT_HAVE_CUDA
    ok(mt_decoder_create(model, &o, &d, err, sizeof err) != 0, "CUDA without a CUDA build refused");
    like(err, "built without CUDA", "message says built without CUDA");
    int gpu = 0;
#else
    char why[256] = "";
    int gpu = mt_cuda_available(why, sizeof why);
    if (!gpu) {
        ok(mt_decoder_create(model, &o, &d, err, sizeof err) != 0, "CUDA without a GPU refused");
        like(err, "unavailable", "message says CUDA is unavailable");
    }
#endif
    if (!gpu) {
        o.device = MT_DEV_AUTO;
        d = NULL;
        ok(mt_decoder_create(model, &o, &d, err, sizeof err) == 0, "AUTO falls back to CPU");
        is_str(d ? mt_decoder_backend_name(d) : NULL, "cpu", "AUTO backend is cpu");
        like(d ? mt_decoder_note(d) : NULL, "CPU", "AUTO note says why");
        mt_decoder_free(d);
    } else {
        tap_skip("a GPU is present: the CPU fallback is not taken");
    }
    d = make(MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE, 2, 1);
    mt_kv_pool *pool = mt_decoder_pool(d);
    mt_kv_seq *s = NULL;
    mt_kv_seq_open(pool, &s);
    int32_t bad = V;
    float *lg = calloc((size_t)2 * V, sizeof *lg);
    mt_step_io io = { .tokens_in = &bad, .logits = lg };
    ok(mt_decoder_step(d, 1, &s, &io, err, sizeof err) != 0, "token id == vocab refused");
    like(err, "token id", "message names the token id");
    is_int(s->len, 0, "a refused step does not advance len");
    int32_t two[2] = { 1, 2 };
    mt_kv_seq *dup[2] = { s, s };
    io.tokens_in = two;
    ok(mt_decoder_step(d, 2, dup, &io, err, sizeof err) != 0, "same session twice refused");
    ok(mt_decoder_step(d, 3, dup, &io, err, sizeof err) != 0, "batch over max_batch refused");
    mt_kv_release(pool, s);
    ok(mt_decoder_step(d, 1, &s, &io, err, sizeof err) != 0, "released session refused");
    like(err, "reserve", "message says reserve first");
    mt_kv_seq_close(pool, s);
    free(lg);
    mt_decoder_free(d);
}

int main(void)
{
    char err[512] = "";
    if (mt_model_load("synthetic:tiny", 0, &model, err, sizeof err))
        tap_skip_all(err);
    if (!model->embed || model->cfg.vocab <= 0) {
        mt_model_free(model);
        tap_skip_all("synthetic:tiny has no token adapter");
    }
    V = model->cfg.vocab;
    test_policy(MT_KV_FULL, 0, 0, MT_ROPE_ABSOLUTE, "full");
    test_policy(MT_KV_WINDOW, 0, 16, MT_ROPE_CACHE, "window S=0 cache");
    test_policy(MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE, "window S=4 cache");
    test_policy(MT_KV_WINDOW, 4, 16, MT_ROPE_ABSOLUTE, "window S=4 absolute");
    test_errors();
    mt_model_free(model);
    return tap_done();
}
