/* test_speech_cuda.c: the served speech stage (speech/speech.c) takes its
 * codec to the GPU when the decoder is CUDA's, and keeps it on the CPU
 * otherwise.
 *
 * The tiny Kyutai LM (synthetic:kyutai-tiny-mimi) with the tiny Mimi, on a
 * CPU decoder always (the stage says "cpu"), and with a GPU on a CUDA
 * decoder (the stage says "cuda"; skipped without a GPU, MT_REQUIRE_GPU=1
 * fails instead). Sessions come and go (one joins at tick 2,
 * another at tick 4, the first leaves at tick 6 and a new one takes its
 * GPU slot at tick 7), the rows in another order every tick. Against the
 * CPU codec run beside it, a mimi_state per session at batch 1: every
 * row's encoded codes identical (the GPU codec is fp32 like the CPU's,
 * test_mimi_cuda.c),
 * and every decoded frame (the LM's own undelayed codes, decoded by the CPU
 * codec too) within 2 LSB of 16-bit PCM (fp32 rounding in another order,
 * below 1e-4 of full scale); every session's frames counted by the
 * codec. On the GPU, a slot handed to a new session starts from zeros: a
 * stale state would fail the new session's codes. */
#include "tap.h"
#include "test_util.h"
#include "codec/mimi.h"
#include "decode/decoder.h"
#include "speech/kyutai.h"
#include "speech/speech.h"
#include "model/kyutai_lm.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXB = 3, NSESS = 4, TICKS = 12 };

/* session s: [open, close) in ticks */
static const int life[NSESS][2] = { { 0, 6 }, { 2, TICKS }, { 4, TICKS }, { 7, TICKS } };

static mt_decoder *make_dec(const mt_kyutai_lm *lm, mt_device dev, char *err, size_t errlen)
{
    mt_decoder_opts o = { .device = dev, .max_batch = MAXB, .threads = 1 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 2;
    o.kv.window = 4;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = (size_t)(MAXB + 1) * 64 * mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    if (mt_decoder_create(lm->temporal, &o, &d, err, errlen))
        return NULL;
    return d;
}

static void input(int s, int t, int fs, int16_t *pcm)
{
    for (int i = 0; i < fs; i++) {
        double x = (double)(t * fs + i) / 24000.0;
        pcm[i] = (int16_t)lrint(9000.0 * sin(2 * M_PI * (150.0 + 60.0 * s + 50.0 * x) * x));
    }
}

static int16_t to_s16(float v)
{
    v *= 32768.0f;
    return v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768 : (int16_t)lrintf(v);
}

/* The sessions' lives on a decoder of dev, against the CPU codec. */
static void run(mt_kyutai_lm *lm, mimi_model *codec, mt_device dev)
{
    char err[512] = "";
    const char *want = dev == MT_DEV_CUDA ? "cuda" : "cpu";
    mt_decoder *d = make_dec(lm, dev, err, sizeof err);
    mt_speech *sp = NULL;
    if (!ok(d && mt_speech_create(lm, codec, d, MAXB, NULL, &sp, err, sizeof err) == 0,
            "%s: a speech stage on the decoder: %s", want, err[0] ? err : "ok")) {
        mt_decoder_free(d);
        return;
    }
    ok(strcmp(mt_speech_codec_backend(sp), want) == 0, "%s decoder: the codec runs on the %s (%s)",
       want, want, mt_speech_codec_backend(sp));
    const int fs = mt_speech_frame_samples(sp), Q = lm->kc.dep_q, nu = lm->kc.n_q - lm->kc.dep_q;
    mt_speech_sess *ss[NSESS] = { 0 };
    mt_kv_seq *seqs[NSESS] = { 0 };
    mimi_state *ce[NSESS] = { 0 }, *cd[NSESS] = { 0 };   /* the CPU codec beside it */
    int64_t nenc[NSESS] = { 0 }, ndec[NSESS] = { 0 };
    mimi_batch *w = mimi_batch_new(codec, 1, err, sizeof err);
    int16_t *in = malloc((size_t)MAXB * fs * 2), *out = malloc((size_t)MAXB * fs * 2);
    float *x = malloc((size_t)fs * 4), *y = malloc((size_t)fs * 4);
    int code_diff = 0, bad = !w || !in || !out || !x || !y, worst = 0, decoded = 0;
    for (int t = 0; t < TICKS && !bad; t++) {
        mt_speech_sess *rs[MAXB];
        mt_kv_seq *rq[MAXB];
        int who[MAXB], B = 0;
        for (int s = 0; s < NSESS && !bad; s++) {
            if (t == life[s][1] && ss[s]) {   /* leaves: its slot back */
                mt_speech_sess_close(ss[s]);
                mt_kv_seq_close(mt_decoder_pool(d), seqs[s]);
                ss[s] = NULL;
                seqs[s] = NULL;
            }
            if (t == life[s][0]) {
                bad = mt_speech_sess_open(sp, 100 + (uint64_t)s, &ss[s], err, sizeof err) ||
                      mt_kv_seq_open(mt_decoder_pool(d), &seqs[s]) ||
                      !(ce[s] = mimi_state_new(codec, err, sizeof err)) ||
                      !(cd[s] = mimi_state_new(codec, err, sizeof err));
            }
        }
        for (int k = 0; k < NSESS && !bad; k++) {
            int s = (k + t) % NSESS;   /* another row order every tick */
            if (!ss[s])
                continue;
            who[B] = s;
            rs[B] = ss[s];
            rq[B] = seqs[s];
            input(s, t, fs, in + (size_t)B * fs);
            bad = mt_kv_reserve(mt_decoder_pool(d), seqs[s], 1) != 0;
            B++;
        }
        int32_t text[MAXB];
        if (bad || mt_speech_step(sp, B, rq, rs, in, out, text, err, sizeof err)) {
            bad = 1;
            break;
        }
        const int32_t *user, *frame;
        mt_speech_last_codes(sp, &user, &frame);
        for (int r = 0; r < B && !bad; r++) {
            int s = who[r];
            int32_t c[64];
            for (int i = 0; i < fs; i++)
                x[i] = in[(size_t)r * fs + i] / 32768.0f;
            bad = mimi_encode(codec, w, &ce[s], 1, x, c, err, sizeof err) != 0;
            nenc[s]++;
            for (int i = 0; i < nu; i++)
                code_diff += c[i] != user[r * nu + i];
            const int32_t *f = frame + (size_t)r * (1 + Q);
            if (bad || Q == 0 || f[1] < 0)
                continue;
            bad = mimi_decode(codec, w, &cd[s], 1, f + 1, y, err, sizeof err) != 0;
            ndec[s]++;
            decoded++;
            for (int i = 0; i < fs && !bad; i++) {
                int dv = abs(to_s16(y[i]) - out[(size_t)r * fs + i]);
                if (dv > worst)
                    worst = dv;
            }
        }
    }
    if (bad)
        tap_diag("run: %s", err);
    ok(!bad, "%s: %d ticks, sessions joining, leaving, and a slot reused", want, TICKS);
    ok(!bad && code_diff == 0, "%s: every row's codes are the CPU codec's alone (%d differ)", want,
       code_diff);
    ok(!bad && decoded > 10 && worst <= 2,
       "%s: %d decoded frames within 2 LSB of the CPU codec's decode of the same codes (worst %d)",
       want, decoded, worst);
    int counted = 1;
    for (int s = 0; s < NSESS; s++)
        if (ss[s] && (mt_speech_sess_codec_frames(ss[s], 0) != nenc[s] ||
                      mt_speech_sess_codec_frames(ss[s], 1) != ndec[s]))
            counted = 0;
    ok(!bad && counted, "%s: the codec counted every open session's frames in and out", want);
    for (int s = 0; s < NSESS; s++) {
        mt_speech_sess_close(ss[s]);
        if (seqs[s])
            mt_kv_seq_close(mt_decoder_pool(d), seqs[s]);
        mimi_state_free(ce[s]);
        mimi_state_free(cd[s]);
    }
    free(in); free(out); free(x); free(y);
    mimi_batch_free(w);
    mt_speech_free(sp);
    mt_decoder_free(d);
}

int main(void)
{
    char err[512] = "";
    mt_kyutai_lm *lm = NULL;
    mimi_model *codec = NULL;
    if (!ok(mt_kyutai_load("synthetic:kyutai-tiny-mimi", 0, &lm, err, sizeof err) == 0 &&
            mimi_load("synthetic:mimi-tiny", NULL, 0, &codec, err, sizeof err) == 0,
            "the tiny Kyutai LM and Mimi: %s", err[0] ? err : "ok")) {
        mt_kyutai_free(lm);
        mimi_free(codec);
        return tap_done();
    }
    run(lm, codec, MT_DEV_CPU);
    char why[512] = "";
    if (test_cuda_present(why, sizeof why)) {
        tap_diag("GPU: %s", why);
        run(lm, codec, MT_DEV_CUDA);
    } else if (test_gpu_required()) {
        ok(0, "a GPU is present (MT_REQUIRE_GPU=1): %s", why);
    } else {
        char m[600];
        snprintf(m, sizeof m, "the speech stage's GPU codec: no GPU here (%s)", why);
        tap_skip(m);
    }
    mimi_free(codec);
    mt_kyutai_free(lm);
    return tap_done();
}
