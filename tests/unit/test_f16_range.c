/* test_f16_range.c: weights beyond f16's range under --weights f16. A
 * finite value past 65504 would pack to infinity (and every logit after
 * it to nan or inf); such a matrix is kept in fp32 instead, and the
 * decoder's note names it with its largest value. Planted: one weight of
 * synthetic:tiny set to 1e5 (and -2e5 in another layer's matrix); the
 * f16-weights decoder's logits stay finite and agree with the fp32
 * decoder's within f16 rounding of the other matrices. */
#include "tap.h"
#include "decode/cpu_f16.h"
#include "decode/decoder.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define STEPS 6

static void test_overflow_scan(void)
{
    float v[5] = { 1, -2, 65504.0f, 3, 4 };
    ok(mt_half_overflow(v, 5) == 0.0f, "65504 (f16's largest) fits");
    v[3] = -70000.0f;
    ok(mt_half_overflow(v, 5) == 70000.0f, "-70000: the largest |value| reported (%g)",
       (double)mt_half_overflow(v, 5));
    v[3] = INFINITY;
    v[1] = NAN;
    ok(mt_half_overflow(v, 5) == 0.0f, "inf and nan are not counted (they stay what they are)");
    ok(mt_half_pack != NULL && mt_half_from_float(70000.0f) == 0x7c00,
       "packed, 70000 would be infinity (why the scan exists)");
}

static int run(mt_model *m, mt_num_format weights, float *logits, char *note, size_t cap)
{
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = 1, .threads = 1 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 0;
    o.kv.window = 16;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = (size_t)64 * 16 * mt_decoder_position_bytes(&m->cfg, sizeof(float));
    o.weights = weights;
    o.kv_dtype = MT_FMT_F32;
    mt_decoder *d = NULL;
    char err[256] = "";
    if (mt_decoder_create(m, &o, &d, err, sizeof err)) {
        tap_diag("decoder_create: %s", err);
        return -1;
    }
    snprintf(note, cap, "%s", mt_decoder_note(d) ? mt_decoder_note(d) : "");
    mt_kv_pool *pool = mt_decoder_pool(d);
    mt_kv_seq *s = NULL;
    int rc = mt_kv_seq_open(pool, &s);
    for (int i = 0; i < STEPS && rc == 0; i++) {
        int32_t t = (int32_t)((i * 104729LL + 13) % m->cfg.vocab);
        mt_step_io io = { .tokens_in = &t, .logits = logits + (size_t)i * m->cfg.vocab };
        rc = mt_kv_reserve(pool, s, 1) || mt_decoder_step(d, 1, &s, &io, err, sizeof err);
    }
    if (rc)
        tap_diag("step: %s", err);
    if (s)
        mt_kv_seq_close(pool, s);
    mt_decoder_free(d);
    return rc ? -1 : 0;
}

int main(void)
{
    test_overflow_scan();
    mt_model *m = NULL;
    char err[256];
    if (mt_model_load("synthetic:tiny", 0, &m, err, sizeof err) || !m->cfg.vocab) {
        tap_diag("%s", err);
        return tap_done();
    }
    m->layer[0].w_up[7] = 1e5f;                   /* the planted weights */
    m->layer[m->cfg.layers - 1].wq[3] = -2e5f;
    size_t n = (size_t)STEPS * m->cfg.vocab;
    float *l32 = calloc(n, sizeof(float)), *l16 = calloc(n, sizeof(float));
    char note32[1200], note16[1200];
    int r32 = run(m, MT_FMT_F32, l32, note32, sizeof note32);
    int r16 = run(m, MT_FMT_F16, l16, note16, sizeof note16);
    ok(r32 == 0 && r16 == 0, "both decoders step");
    int finite = 1;
    double md = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        finite &= isfinite(l16[i]) && isfinite(l32[i]);
        double dd = fabs((double)l16[i] - l32[i]);
        md = dd > md ? dd : md;
        scale = fabs(l32[i]) > scale ? fabs(l32[i]) : scale;
    }
    ok(finite, "f16 weights: every logit finite");
    ok(md <= 8.0 / 2048 * scale, "... and within f16 rounding of the fp32 decoder's "
       "(max diff %.3g, scale %.3g)", md, scale);
    ok(strstr(note16, "2 matrices") && strstr(note16, "kept in fp32") &&
       strstr(note16, "layers.0.w_up") && strstr(note16, "100000"),
       "the note names the first matrix and its largest value: %s", note16);
    ok(!strstr(note32, "kept in fp32"), "no such note with fp32 weights");
    free(l32);
    free(l16);
    mt_model_free(m);
    return tap_done();
}
