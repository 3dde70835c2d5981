/* test_decoder.c: the batched step's invariants on synthetic:tiny:
 * prefill of n positions == n single steps (also across the window's
 * wrap), the same outputs whatever the batch composition, recompute after
 * a release reproduces the history, and clear errors for bad calls.
 * Equality is within fp32 rounding (a 1-row product and a B-row product
 * take different BLAS kernels), checked relative to the logit scale.
 * Half precision (--kv-dtype f16, --weights f16): a bounded session's pool
 * bytes halve (twice the sessions in one budget), and the logits stay
 * within 4u (u = 2^-11, f16's unit roundoff) of the fp32 decoder's. */
#include "decode/cpu_q8.h"
#include "tap.h"
#include "decode/decoder.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEPS 40
enum { NS = 3 };

static mt_model *model;
static int V;

static int32_t tok(int b, int i) { return (int32_t)((b * 7919LL + i * 104729LL + 13) % V); }

/* Options for a decoder on dev that steps up to maxb sessions on threads,
 * its K/V kept by pol (S sinks, a window of W) and rope in budget bytes. */
static mt_decoder_opts opts_of(mt_device dev, int maxb, int threads, mt_kv_policy pol, int S,
                               int W, mt_rope_mode rope, size_t budget)
{
    mt_decoder_opts o = { .device = dev, .max_batch = maxb, .threads = threads };
    o.kv.policy = pol;
    o.kv.sink = S;
    o.kv.window = W;
    o.kv.rope = rope;
    o.kv.budget_bytes = budget;
    return o;
}

static mt_decoder *make(mt_kv_policy pol, int S, int W, mt_rope_mode rope, int maxb,
                        int threads)
{
    size_t budget = (size_t)NS * 4 * 16 * STEPS *
                    mt_decoder_position_bytes(&model->cfg, sizeof(float));
    mt_decoder_opts o = opts_of(MT_DEV_CPU, maxb, threads, pol, S, W, rope, budget);
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
    mt_decoder_opts o = opts_of(MT_DEV_CUDA, 2, 1, MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE, 1 << 22);
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
    mt_decoder_free(d);

    /* positions supplied per input (mt_step_io.positions) */
    int64_t pos = 7;
    int32_t one = 1;
    io = (mt_step_io){ .tokens_in = &one, .logits = lg, .positions = &pos };
    d = make(MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE, 2, 1);
    s = NULL;
    pool = mt_decoder_pool(d);
    ok(mt_kv_seq_open(pool, &s) == 0 && mt_kv_reserve(pool, s, 1) == 0 &&
       mt_decoder_step(d, 1, &s, &io, err, sizeof err) != 0, "positions with --rope cache refused");
    like(err, "rope absolute", "message says where positions apply");
    mt_kv_seq_close(pool, s);
    mt_decoder_free(d);
    d = make(MT_KV_WINDOW, 4, 16, MT_ROPE_ABSOLUTE, 2, 1);
    s = NULL;
    pool = mt_decoder_pool(d);
    err[0] = '\0';
    int rc = mt_kv_seq_open(pool, &s) || mt_kv_reserve(pool, s, 1) ||
             mt_decoder_step(d, 1, &s, &io, err, sizeof err);
    ok(rc == 0 && s->len == 1, "positions with --rope absolute step (%s)", rc ? err : "ok");
    pos = -1;
    ok(mt_kv_reserve(pool, s, 1) == 0 && mt_decoder_step(d, 1, &s, &io, err, sizeof err) != 0,
       "a negative position refused");
    like(err, "position -1", "message names the position");
    pos = 8;
    ok(mt_decoder_prefill(d, s, 1, &io, err, sizeof err) != 0, "a prefill with positions refused");
    like(err, "prefill", "message says prefill");
    mt_kv_seq_close(pool, s);
    free(lg);
    mt_decoder_free(d);
}

/* Opens window sessions until the pool refuses; returns how many. */
static int sessions_in(mt_decoder *d)
{
    mt_kv_pool *pool = mt_decoder_pool(d);
    mt_kv_seq *s[256];
    int n = 0;
    while (n < 256 && mt_kv_seq_open(pool, &s[n]) == 0)
        n++;
    for (int i = 0; i < n; i++)
        mt_kv_seq_close(pool, s[i]);
    return n;
}

/* logits [STEPS][V] of session 0 and 1 stepped as a batch of 2 */
static int run_pair(mt_decoder *d, float *out)
{
    mt_kv_pool *pool = mt_decoder_pool(d);
    mt_kv_seq *s[2] = { NULL, NULL };
    char err[256] = "";
    int rc = mt_kv_seq_open(pool, &s[0]) || mt_kv_seq_open(pool, &s[1]);
    float *lg = calloc((size_t)2 * V, sizeof *lg);
    for (int i = 0; !rc && i < STEPS; i++) {
        int32_t t[2] = { tok(0, i), tok(1, i) };
        mt_step_io io = { .tokens_in = t, .logits = lg };
        rc = mt_kv_reserve(pool, s[0], 1) || mt_kv_reserve(pool, s[1], 1) ||
             mt_decoder_step(d, 2, s, &io, err, sizeof err);
        if (rc)
            tap_diag("step: %s", err);
        else
            memcpy(out + (size_t)i * 2 * V, lg, (size_t)2 * V * sizeof *lg);
    }
    for (int b = 0; b < 2; b++)
        if (s[b])
            mt_kv_seq_close(pool, s[b]);
    free(lg);
    return rc ? -1 : 0;
}

static void test_half(void)
{
    char err[256] = "";
    size_t pb32 = mt_decoder_position_bytes(&model->cfg, mt_num_format_bytes(MT_FMT_F32));
    /* room for exactly 6 fp32 sessions (2 blocks each) */
    mt_decoder_opts o = opts_of(MT_DEV_CPU, 2, 2, MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE,
                                6 * 2 * MT_KV_BLOCK * pb32);
    mt_decoder *d32 = NULL, *d16 = NULL;
    o.kv_dtype = MT_FMT_F32;
    ok(mt_decoder_create(model, &o, &d32, err, sizeof err) == 0, "f32 decoder (%s)", err);
    o.kv_dtype = MT_FMT_F16;
    ok(mt_decoder_create(model, &o, &d16, err, sizeof err) == 0, "f16 decoder (%s)", err);
    if (!d32 || !d16) {
        mt_decoder_free(d32);
        mt_decoder_free(d16);
        return;
    }
    const mt_kv_params *p32 = mt_kv_pool_params(mt_decoder_pool(d32));
    const mt_kv_params *p16 = mt_kv_pool_params(mt_decoder_pool(d16));
    is_int((long long)p16->position_bytes * 2, (long long)p32->position_bytes,
           "f16 position bytes are half the f32 ones");
    is_int((long long)mt_kv_bound_bytes(p16) * 2, (long long)mt_kv_bound_bytes(p32),
           "a bounded session's pool bytes halve with f16");
    int n32 = sessions_in(d32), n16 = sessions_in(d16);
    is_int(n32, 6, "the budget holds 6 f32 sessions");
    is_int(n16, 12, "the same budget holds 12 f16 sessions");

    float *a = calloc((size_t)STEPS * 2 * V, sizeof *a);
    float *b = calloc((size_t)STEPS * 2 * V, sizeof *b);
    float *c = calloc((size_t)STEPS * 2 * V, sizeof *c);
    mt_decoder *dw = NULL;
    o.kv_dtype = MT_FMT_F32;
    o.weights = MT_FMT_F16;
    ok(mt_decoder_create(model, &o, &dw, err, sizeof err) == 0, "f16-weight decoder (%s)", err);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int good = a && b && c && dw && run_pair(d32, a) == 0 && run_pair(d16, b) == 0;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* the benchmark's K/V read bandwidth divides by this */
    double att_ms = mt_decoder_attention_ms(d16),
           wall_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    ok(good && att_ms > 0 && att_ms < wall_ms,
       "the last step's attention phases timed (0 < %.4f ms < the two runs' %.1f ms)", att_ms,
       wall_ms);
    good = good && run_pair(dw, c) == 0;
    double scale, e16 = maxdiff(b, a, (size_t)STEPS * 2 * V, &scale);
    double ew = maxdiff(c, a, (size_t)STEPS * 2 * V, &scale);
    const double u = 1.0 / 2048;
    ok(good && e16 <= 4 * u * scale, "f16 K/V within 4u of f32 K/V (err %.2e of %.2e)", e16, scale);
    ok(good && e16 > 1e-6 * scale, "f16 K/V is rounded (err %.2e > 0)", e16);
    ok(good && ew <= 4 * u * scale, "f16 weights within 4u of f32 (err %.2e)", ew);
    ok(good && ew > 1e-6 * scale, "f16 weights are rounded (err %.2e > 0)", ew);
    free(a);
    free(b);
    free(c);
    mt_decoder_free(dw);
    mt_decoder_free(d32);
    mt_decoder_free(d16);

    o.kv_dtype = (mt_num_format)7;
    mt_decoder *bad = NULL;
    ok(mt_decoder_create(model, &o, &bad, err, sizeof err) != 0, "unknown K/V format refused");
    like(err, "format", "message says number format");
    mt_num_format f;
    ok(mt_num_format_parse("f16", &f) == 0 && f == MT_FMT_F16, "parse f16");
    ok(mt_num_format_parse("bf16", &f) != 0, "parse bf16 refused");
}

/* --weights q8: the logits of a q8-weight decoder stay within 4 q of the
 * fp32 decoder's, q = 1/254: a weight's error is at most its block's
 * largest |weight| / 254 (cpu_q8.h), as f16's is 2^-11 of its own value;
 * on 2 threads (the products split by columns). The integer product (on
 * CPUs with AVX-512 VNNI, cpu_q8_vnni.c) rounds the activations too and
 * stays within the same bound (measured 10.0e-3 of the scale, the float
 * product 6.5e-3; 15.7e-3 allowed). A q8 K/V cache is refused. */
static void test_q8_weights(void)
{
    char err[256] = "";
    size_t pb32 = mt_decoder_position_bytes(&model->cfg, mt_num_format_bytes(MT_FMT_F32));
    mt_decoder_opts o = opts_of(MT_DEV_CPU, 2, 2, MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE,
                                6 * 2 * MT_KV_BLOCK * pb32);
    o.kv_dtype = MT_FMT_F32;
    mt_decoder *d32 = NULL, *d8 = NULL;
    ok(mt_decoder_create(model, &o, &d32, err, sizeof err) == 0, "f32 decoder (%s)", err);
    o.weights = MT_FMT_Q8;
    ok(mt_decoder_create(model, &o, &d8, err, sizeof err) == 0, "q8-weight decoder (%s)", err);
    ok(d8 && mt_decoder_weights_f16_rows(d8) > 0, "q8: small calls use the 8-bit copy");
    float *a = calloc((size_t)STEPS * 2 * V, sizeof *a);
    float *c = calloc((size_t)STEPS * 2 * V, sizeof *c);
    int good = a && c && d32 && d8 && run_pair(d32, a) == 0 && run_pair(d8, c) == 0;
    double scale = 0, e8 = good ? maxdiff(c, a, (size_t)STEPS * 2 * V, &scale) : 0;
    const double q = 1.0 / 254;
    ok(good && e8 <= 4 * q * scale, "q8 weights within 4q of f32 (err %.2e of %.2e)", e8, scale);
    ok(good && e8 > 1e-6 * scale, "q8 weights are rounded (err %.2e > 0)", e8);
    free(a);
    free(c);
    mt_decoder_free(d8);
    mt_decoder_free(d32);

    o.weights = MT_FMT_F32;
    o.kv_dtype = MT_FMT_Q8;
    mt_decoder *bad = NULL;
    ok(mt_decoder_create(model, &o, &bad, err, sizeof err) != 0, "a q8 K/V cache is refused");
    mt_num_format f;
    ok(mt_num_format_parse("q8", &f) == 0 && f == MT_FMT_Q8, "parse q8");
}

/* --weights q8 where the integer product serves (mt_q8_every_row): the
 * 8-bit copy serves steps of every batch, so a session's logits are the
 * same bits alone and in a step of 12 sessions (above the f16 copy's 8
 * rows, where sgemm on the fp32 matrices would round otherwise). */
static void test_q8_every_batch(void)
{
    enum { BIG = 12, STEPS_B = 6 };
    if (!mt_q8_every_row()) {
        tap_skip("the integer q8 product is not on this CPU (AVX-512 VNNI)");
        return;
    }
    char err[256] = "";
    size_t pb32 = mt_decoder_position_bytes(&model->cfg, mt_num_format_bytes(MT_FMT_F32));
    mt_decoder_opts o = opts_of(MT_DEV_CPU, BIG, 2, MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE,
                                (size_t)(BIG + 1) * 3 * MT_KV_BLOCK * pb32);
    o.kv_dtype = MT_FMT_F32;
    o.weights = MT_FMT_Q8;
    mt_decoder *d = NULL;
    float *alone = calloc((size_t)STEPS * V, sizeof *alone);
    float *lg = calloc((size_t)BIG * V, sizeof *lg);
    int good = mt_decoder_create(model, &o, &d, err, sizeof err) == 0 && alone && lg &&
               run_alone(d, 0, alone) == 0;
    mt_kv_pool *pool = good ? mt_decoder_pool(d) : NULL;
    mt_kv_seq *seq[BIG] = { 0 };
    for (int b = 0; good && b < BIG; b++)
        good = mt_kv_seq_open(pool, &seq[b]) == 0;
    int unlike = 0;
    for (int i = 0; good && i < STEPS_B; i++) {
        int32_t tk[BIG];
        for (int b = 0; b < BIG; b++) {
            tk[b] = tok(b, i);
            good &= mt_kv_reserve(pool, seq[b], 1) == 0;
        }
        mt_step_io io = { .tokens_in = tk, .logits = lg };
        good = good && mt_decoder_step(d, BIG, seq, &io, err, sizeof err) == 0;
        unlike += good && memcmp(lg, alone + (size_t)i * V, (size_t)V * sizeof *lg) != 0;
    }
    ok(good && unlike == 0, "q8 on the integer product: a session's logits alone and in a "
       "step of %d sessions are the same bits (%d of %d steps differ) %s", BIG, unlike,
       STEPS_B, err);
    for (int b = 0; b < BIG; b++)
        if (seq[b])
            mt_kv_seq_close(pool, seq[b]);
    mt_decoder_free(d);
    free(alone);
    free(lg);
}

/* A step by rows (backend_cpu.c: each thread takes its share of the rows
 * through every layer in one phase, where the products are small) gives
 * the bits of the step by columns: two q8 decoders on 2 threads, one
 * made with MT_CPU_ROW_SPLIT=0 and one with =1, step sessions of
 * different lengths (two join each step, ROW_SPLIT_B at most: an odd
 * split, chunks of 16 rows and a short one, rows past the window's wrap)
 * and every row's logits and hidden state are compared, on an fp32 and
 * an f16 K/V cache. */
enum { ROW_SPLIT_B = 37 };

static int row_split_run(int split, mt_num_format kv, int nsteps, float *lg, float *h)
{
    enum { B = ROW_SPLIT_B };
    const int H = model->cfg.hidden;
    setenv("MT_CPU_ROW_SPLIT", split ? "1" : "0", 1);
    size_t pb = mt_decoder_position_bytes(&model->cfg, mt_num_format_bytes(kv));
    mt_decoder_opts o = opts_of(MT_DEV_CPU, B, 2, MT_KV_WINDOW, 4, 16, MT_ROPE_CACHE,
                                (size_t)(B + 1) * 3 * MT_KV_BLOCK * pb);
    o.kv_dtype = kv;
    o.weights = MT_FMT_Q8;
    char err[256] = "";
    mt_decoder *d = NULL;
    int rc = mt_decoder_create(model, &o, &d, err, sizeof err);
    unsetenv("MT_CPU_ROW_SPLIT");
    mt_kv_pool *pool = rc ? NULL : mt_decoder_pool(d);
    mt_kv_seq *seq[B] = { 0 };
    int len[B] = { 0 };
    for (int i = 0, open = 0; rc == 0 && i < nsteps; i++) {
        int n = 1 + 2 * i < B ? 1 + 2 * i : B;
        for (; rc == 0 && open < n; open++)
            rc = mt_kv_seq_open(pool, &seq[open]);
        int32_t tk[B];
        for (int b = 0; rc == 0 && b < n; b++) {
            tk[b] = tok(b, len[b]++);
            rc = mt_kv_reserve(pool, seq[b], 1);
        }
        mt_step_io io = { .tokens_in = tk, .logits = lg + (size_t)i * B * V,
                          .h_out = h + (size_t)i * B * H };
        rc = rc ? rc : mt_decoder_step(d, n, seq, &io, err, sizeof err);
    }
    if (rc)
        tap_diag("row split %d: %s", split, err);
    for (int b = 0; b < B; b++)
        if (seq[b])
            mt_kv_seq_close(pool, seq[b]);
    mt_decoder_free(d);
    return rc;
}

static void test_q8_row_split(void)
{
    enum { B = ROW_SPLIT_B, N = 30 };
    if (!mt_q8_every_row()) {
        tap_skip("the integer q8 product is not on this CPU (AVX-512 VNNI)");
        tap_skip("the integer q8 product is not on this CPU (AVX-512 VNNI)");
        return;
    }
    const size_t nl = (size_t)N * B * V, nh = (size_t)N * B * model->cfg.hidden;
    mt_num_format kvs[2] = { MT_FMT_F32, MT_FMT_F16 };
    for (int k = 0; k < 2; k++) {
        float *lg0 = calloc(nl, sizeof *lg0), *lg1 = calloc(nl, sizeof *lg1);
        float *h0 = calloc(nh, sizeof *h0), *h1 = calloc(nh, sizeof *h1);
        int good = lg0 && lg1 && h0 && h1 && row_split_run(0, kvs[k], N, lg0, h0) == 0 &&
                   row_split_run(1, kvs[k], N, lg1, h1) == 0;
        int unlike = 0;
        for (int i = 0; good && i < N; i++) {
            size_t n = (size_t)(1 + 2 * i < B ? 1 + 2 * i : B);
            unlike += memcmp(lg0 + (size_t)i * B * V, lg1 + (size_t)i * B * V,
                             n * V * sizeof *lg0) != 0 ||
                      memcmp(h0 + (size_t)i * B * model->cfg.hidden,
                             h1 + (size_t)i * B * model->cfg.hidden,
                             n * model->cfg.hidden * sizeof *h0) != 0;
        }
        ok(good && unlike == 0, "q8, %s K/V: the step by rows gives the step by columns' "
           "logits and hidden states, every row (%d of %d steps differ)",
           k ? "f16" : "fp32", unlike, N);
        free(lg0);
        free(lg1);
        free(h0);
        free(h1);
    }
}

/* max_batch: the decoder's limit, 65,536, is every backend's (the CUDA
 * attention tiles rows past a grid dimension's 65,535); 65,537 refused. */
static void test_max_batch(void)
{
    char err[512] = "";
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = 65536, .threads = 1 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 0;
    o.kv.window = 16;
    o.kv.budget_bytes = (size_t)1 << 20;
    mt_decoder *d = NULL;
    int rc = mt_decoder_create(model, &o, &d, err, sizeof err);
    ok(rc == 0, "max_batch 65536 accepted on the CPU: %s", rc ? err : "ok");
    mt_decoder_free(d);
    d = NULL;
    o.max_batch = 65537;
    ok(mt_decoder_create(model, &o, &d, err, sizeof err) == -1 && !d && strstr(err, "65536"),
       "max_batch 65537 refused: %s", err);
}

int main(void)
{
    /* q8 calls of every row count on the integer product where the CPU
     * has it (its error is the larger: cpu_q8_vnni.c) */
    mt_q8_vnni_rows(1);
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
    test_half();
    test_q8_weights();
    test_q8_every_batch();
    test_q8_row_split();
    test_max_batch();
    mt_model_free(model);
    return tap_done();
}
