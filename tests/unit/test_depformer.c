/* test_depformer.c: the host depformer's column mode (decode/depformer.c)
 * at B = 1 and 2 on 2 threads, one pool phase a step with each product's
 * columns taken in chunks, gives the logits of the same depformer on one
 * thread bit for bit, for every weight format (q8, f16, f32), over two
 * frames (the stage counters start again each step); and so does the
 * phase-per-product column mode it replaced (MT_DEPFORMER_FUSED=0); and
 * frame mode (the whole frame one phase, its tokens from a sampler called
 * on each thread's rows, mt_depformer_run_frame) at B = 1 and 2, and with
 * q8 at 9 (the rows split 5 and 4), forced on with MT_DEPFORMER_FRAME=1.
 * Model: synthetic:kyutai-small (8 steps, 4 layers, widths of 256 and
 * 672, multiples of the q8 block), column mode forced on its small
 * depformer_in (mt_depformer_columns_from). */
#include "tap.h"
#include "decode/decoder.h"
#include "decode/depformer.h"
#include "model/kyutai_lm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXB = 9, FRAMES = 2 };

static mt_decoder *make_dec(const mt_kyutai_lm *lm, int threads, mt_num_format w)
{
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = MAXB, .threads = threads,
                          .weights = w };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.window = 16;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = 4 * 16 * mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    char err[256] = "";
    if (mt_decoder_create(lm->temporal, &o, &d, err, sizeof err))
        tap_diag("decoder: %s", err);
    return d;
}

/* Row r's token before step k of frame f: the text's at k = 0, else
 * the audio token of step k - 1 (row 1's at step 3 a -1: no embedding). */
static int32_t prev_token(const mt_kyutai_config *kc, int f, int k, int r)
{
    return r == 1 && k == 3 ? -1
           : (k == 0 ? (7 * r + 5 * f + 1) % kc->text_card : (13 * k + 3 * r + f) % kc->card);
}

/* Frame mode's sampler: step k's logits of rows [r0, r1) kept, and the
 * next step's tokens as prev_token makes them. */
struct sampler {
    const mt_kyutai_config *kc;
    int f, B;
    const float *logits;
    float *out;       /* [dep_q][B][card] this frame's */
    int32_t *tok;
};

static void sample_rows(void *ctx, int k, int r0, int r1, int tid)
{
    struct sampler *s = ctx;
    const size_t card = (size_t)s->kc->card;
    (void)tid;
    for (int r = r0; r < r1; r++) {
        memcpy(s->out + ((size_t)k * s->B + r) * card, s->logits + (size_t)r * card,
               card * sizeof(float));
        s->tok[r] = prev_token(s->kc, s->f, k + 1, r);
    }
}

/* FRAMES frames of B rows through a depformer attached to a decoder of
 * `threads` threads (column mode forced where columns; whole frames in
 * frame mode where frame): every step's logits into out
 * [FRAMES][dep_q][B][card]; its mode into mode. */
static int frames(const mt_kyutai_lm *lm, int threads, mt_num_format w, int columns, int frame,
                  int B, float *out, char *mode, size_t cap)
{
    const mt_kyutai_config *kc = &lm->kc;
    mt_decoder *d = make_dec(lm, threads, w);
    mt_depformer *df = NULL;
    char err[256] = "";
    float *h = malloc((size_t)B * kc->dim * sizeof(float));
    float *logits = malloc((size_t)B * kc->card * sizeof(float));
    int rc = !d || !h || !logits || mt_depformer_create(lm, MAXB, &df, err, sizeof err) ||
             mt_depformer_attach(df, d, err, sizeof err);
    if (!rc && columns)
        mt_depformer_columns_from(df, 0);
    for (int f = 0; !rc && f < FRAMES; f++) {
        for (size_t i = 0; i < (size_t)B * kc->dim; i++)   /* a made-up temporal output */
            h[i] = (float)((int)((i * 37 + (size_t)f * 11) % 29) - 14) / 7.0f;
        rc = mt_depformer_begin(df, B, h);
        if (!rc && frame) {
            int32_t tok[MAXB];
            for (int r = 0; r < B; r++)
                tok[r] = prev_token(kc, f, 0, r);
            struct sampler s = { kc, f, B, logits, out + (size_t)f * kc->dep_q * B * kc->card,
                                 tok };
            rc = !mt_depformer_frame_split(df) ||
                 mt_depformer_run_frame(df, tok, logits, sample_rows, &s);
            continue;
        }
        for (int k = 0; !rc && k < kc->dep_q; k++) {
            int32_t prev[MAXB];
            for (int r = 0; r < B; r++)
                prev[r] = prev_token(kc, f, k, r);
            rc = mt_depformer_next(df, k, prev,
                                   out + ((size_t)f * kc->dep_q + k) * B * kc->card);
        }
    }
    if (rc)
        tap_diag("depformer: %s", err[0] ? err : df ? mt_depformer_error(df) : "-");
    snprintf(mode, cap, "%s", df ? mt_depformer_mode(df) : "-");
    mt_depformer_free(df);
    mt_decoder_free(d);
    free(h);
    free(logits);
    return rc ? -1 : 0;
}

/* How many of n logits differ in their bits between one and two; all n
 * when more than 1% of one's are zero (a run that left them unwritten). */
static size_t differing(const float *one, const float *two, size_t n)
{
    size_t differ = 0, zero = 0;
    for (size_t i = 0; i < n; i++) {
        differ += memcmp(&one[i], &two[i], sizeof(float)) != 0;
        zero += one[i] == 0.0f;
    }
    return zero < n / 100 ? differ : n;
}

static void test_columns(const mt_kyutai_lm *lm, mt_num_format w, int B, const char *fused)
{
    const mt_kyutai_config *kc = &lm->kc;
    size_t n = (size_t)FRAMES * kc->dep_q * B * kc->card;
    float *one = calloc(n, sizeof(float)), *two = calloc(n, sizeof(float));
    char m1[32] = "", m2[32] = "";
    setenv("MT_DEPFORMER_FUSED", fused, 1);
    int good = one && two && frames(lm, 1, w, 0, 0, B, one, m1, sizeof m1) == 0 &&
               frames(lm, 2, w, 1, 0, B, two, m2, sizeof m2) == 0;
    size_t differ = good ? differing(one, two, n) : n;
    ok(good && differ == 0 && !strcmp(m1, m2),
       "%s B=%d, %s: 2 threads' column mode gives 1 thread's logits bit for bit "
       "(%zu of %zu differ; modes %s, %s)", mt_num_format_name(w), B,
       !strcmp(fused, "0") ? "a phase per product" : "one phase a step", differ, n, m1, m2);
    free(one);
    free(two);
}

/* Frame mode on 2 threads against the steps on one, bit for bit. */
static void test_frame(const mt_kyutai_lm *lm, mt_num_format w, int B)
{
    const mt_kyutai_config *kc = &lm->kc;
    size_t n = (size_t)FRAMES * kc->dep_q * B * kc->card;
    float *one = calloc(n, sizeof(float)), *two = calloc(n, sizeof(float));
    char m1[32] = "", m2[32] = "";
    setenv("MT_DEPFORMER_FRAME", "0", 1);
    int good = one && two && frames(lm, 1, w, 0, 0, B, one, m1, sizeof m1) == 0;
    setenv("MT_DEPFORMER_FRAME", "1", 1);
    good = good && frames(lm, 2, w, 0, 1, B, two, m2, sizeof m2) == 0;
    unsetenv("MT_DEPFORMER_FRAME");
    size_t differ = good ? differing(one, two, n) : n;
    ok(good && differ == 0 && !strcmp(m1, m2),
       "%s B=%d: frame mode on 2 threads gives 1 thread's logits bit for bit "
       "(%zu of %zu differ; modes %s, %s)", mt_num_format_name(w), B, differ, n, m1, m2);
    free(one);
    free(two);
}

int main(void)
{
    mt_kyutai_lm *lm = NULL;
    char err[256] = "";
    if (!ok(mt_kyutai_load("synthetic:kyutai-small", 0, &lm, err, sizeof err) == 0,
            "synthetic:kyutai-small loads (%s)", err))
        return tap_done();
    static const mt_num_format fmt[] = { MT_FMT_Q8, MT_FMT_F16, MT_FMT_F32 };
    for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++)
        for (int B = 1; B <= 2; B++)
            test_columns(lm, fmt[i], B, "1");
    /* at 9 rows (past the f16 rows) the f16 and f32 copies' products are
     * OpenBLAS's sgemm, whose bits move with the columns a call has: q8's
     * alone are the same in any column range */
    for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++)
        for (int B = 1; B <= 2; B++)
            test_frame(lm, fmt[i], B);
    test_frame(lm, MT_FMT_Q8, MAXB);
    test_columns(lm, MT_FMT_Q8, 1, "0");
    test_columns(lm, MT_FMT_Q8, 2, "0");
    unsetenv("MT_DEPFORMER_FUSED");
    mt_kyutai_free(lm);
    return tap_done();
}
