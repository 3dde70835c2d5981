/* test_speech.c: the speech stage mt-serve runs for Kyutai's models
 * (speech/speech.h) against the same model run by hand, one session at a
 * time: Mimi encode of that session alone, mt_kyutai_step at batch 1,
 * Mimi decode of the undelayed frame. Three sessions (other seeds, other
 * audio) share the served batch; session 1's text tokens must equal the
 * stand-alone ones exactly and its PCM within 1 LSB (the batched GEMMs may
 * sum in another order), over more frames than the window so the bounded
 * cache wraps. Also: the codec/LM refusals with their numbers, and the
 * speech-to-text shape (text only, silence out). */
#include "tap.h"
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

enum { NS = 3, T = 14, ROW = 1 };

static mt_decoder *make_dec(const mt_kyutai_lm *lm, int maxb)
{
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = maxb, .threads = 1 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 2;
    o.kv.window = 4;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = (size_t)(NS + 1) * 64 * mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    char err[256] = "";
    if (mt_decoder_create(lm->temporal, &o, &d, err, sizeof err))
        tap_diag("decoder: %s", err);
    return d;
}

/* Session s's frame t: a chirp of its own pitch, s16. */
static void input(int s, int t, int fs, int16_t *pcm)
{
    for (int i = 0; i < fs; i++) {
        double x = (double)(t * fs + i) / 24000.0;
        pcm[i] = (int16_t)lrint(8000.0 * sin(2 * M_PI * (180.0 + 70.0 * s + 40.0 * x) * x));
    }
}

static uint64_t seed_of(int s) { return 1000 + 17 * (uint64_t)s; }

/* The served path: all NS sessions stepped as one batch. */
static int served(const mt_kyutai_lm *lm, mimi_model *codec, int32_t text[T],
                  int16_t *pcm_row /* [T, fs] */)
{
    char err[256] = "";
    mt_decoder *d = make_dec(lm, NS);
    mt_speech *sp = NULL;
    mt_speech_sess *ss[NS] = { 0 };
    mt_kv_seq *seqs[NS] = { 0 };
    int rc = -1;
    if (!d || mt_speech_create(lm, codec, d, NS, NULL, &sp, err, sizeof err))
        goto out;
    int fs = mt_speech_frame_samples(sp);
    int16_t *in = malloc((size_t)NS * fs * sizeof *in), *outp = malloc((size_t)NS * fs * sizeof *outp);
    for (int s = 0; s < NS; s++)
        if (mt_speech_sess_open(sp, seed_of(s), &ss[s], err, sizeof err) ||
            mt_kv_seq_open(mt_decoder_pool(d), &seqs[s]))
            goto out2;
    for (int t = 0; t < T; t++) {
        int32_t tx[NS];
        for (int s = 0; s < NS; s++) {
            input(s, t, fs, in + (size_t)s * fs);
            if (mt_kv_reserve(mt_decoder_pool(d), seqs[s], 1))
                goto out2;
        }
        if (mt_speech_step(sp, NS, seqs, ss, in, outp, tx, err, sizeof err))
            goto out2;
        text[t] = tx[ROW];
        memcpy(pcm_row + (size_t)t * fs, outp + (size_t)ROW * fs, (size_t)fs * sizeof *outp);
    }
    rc = 0;
out2:
    free(in);
    free(outp);
out:
    if (rc)
        tap_diag("served: %s", err);
    for (int s = 0; s < NS; s++) {
        mt_speech_sess_close(ss[s]);
        if (seqs[s])
            mt_kv_seq_close(mt_decoder_pool(d), seqs[s]);
    }
    mt_speech_free(sp);
    mt_decoder_free(d);
    return rc;
}

/* The stand-alone path: session ROW alone, every stage by hand. */
static int alone(const mt_kyutai_lm *lm, mimi_model *codec, int32_t text[T], int16_t *pcm)
{
    char err[256] = "";
    const mt_kyutai_config *kc = &lm->kc;
    const int Q = kc->dep_q, nu = kc->n_q - kc->dep_q;
    int fs = mimi_frame_size(mimi_model_config(codec));
    mt_decoder *d = make_dec(lm, 1);
    mt_kyutai_gen *g = NULL;
    mt_kyutai_sess *ks = NULL;
    mt_kv_seq *seq = NULL;
    mimi_state *st = NULL;
    mimi_batch *w = NULL;
    int rc = -1;
    int16_t *in = malloc((size_t)fs * sizeof *in);
    float *x = malloc((size_t)fs * sizeof *x);
    mt_kyutai_sampling smp;
    mt_kyutai_sampling_default(&smp);
    if (!d || mimi_set_codebooks(codec, nu, err, sizeof err) ||
        !(st = mimi_state_new(codec, err, sizeof err)) ||
        !(w = mimi_batch_new(codec, 1, err, sizeof err)) ||
        mt_kyutai_gen_create(lm, d, 1, &g, err, sizeof err) ||
        mt_kyutai_sess_open(g, seed_of(ROW), &smp, &ks, err, sizeof err) ||
        mt_kv_seq_open(mt_decoder_pool(d), &seq))
        goto out;
    for (int t = 0; t < T; t++) {
        int32_t codes[8], frame[9];
        input(ROW, t, fs, in);
        for (int i = 0; i < fs; i++)
            x[i] = (float)in[i] / 32768.0f;
        if (mimi_encode(codec, w, &st, 1, x, codes, err, sizeof err) ||
            mt_kv_reserve(mt_decoder_pool(d), seq, 1))
            goto out;
        mt_kyutai_out o = { .frame = frame };
        if (mt_kyutai_step(g, 1, &seq, &ks, codes, &o, err, sizeof err))
            goto out;
        text[t] = frame[0] >= 0 ? frame[0] : -1;
        int16_t *y = pcm + (size_t)t * fs;
        memset(y, 0, (size_t)fs * sizeof *y);
        if (Q > 0 && frame[1] >= 0) {
            if (mimi_decode(codec, w, &st, 1, frame + 1, x, err, sizeof err))
                goto out;
            for (int i = 0; i < fs; i++) {
                float v = x[i] * 32768.0f;
                y[i] = v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768 : (int16_t)lrintf(v);
            }
        }
    }
    rc = 0;
out:
    if (rc)
        tap_diag("alone: %s", err);
    if (seq)
        mt_kv_seq_close(mt_decoder_pool(d), seq);
    mt_kyutai_sess_close(ks);
    mt_kyutai_gen_free(g);
    mimi_batch_free(w);
    mimi_state_free(st);
    mt_decoder_free(d);
    free(in);
    free(x);
    return rc;
}

static void compare(const char *model, int audio)
{
    char err[256] = "";
    mt_kyutai_lm *lm = NULL;
    mimi_model *codec = NULL;
    if (!ok(mt_kyutai_load(model, 0, &lm, err, sizeof err) == 0 &&
            mimi_load("synthetic:mimi-tiny", NULL, 0, &codec, err, sizeof err) == 0,
            "%s and synthetic:mimi-tiny load %s", model, err)) {
        mt_kyutai_free(lm);
        return;
    }
    int fs = mimi_frame_size(mimi_model_config(codec));
    int32_t t1[T], t2[T];
    int16_t *p1 = calloc((size_t)T * fs, sizeof *p1), *p2 = calloc((size_t)T * fs, sizeof *p2);
    int r1 = served(lm, codec, t1, p1), r2 = alone(lm, codec, t2, p2);
    if (ok(r1 == 0 && r2 == 0, "%s: served (batch of %d) and stand-alone paths run %d frames",
           model, NS, T)) {
        int same = 1, ntext = 0, maxd = 0, loud = 0;
        for (int t = 0; t < T; t++) {
            same &= t1[t] == t2[t];
            ntext += t1[t] >= 0;
        }
        for (size_t i = 0; i < (size_t)T * fs; i++) {
            int dd = abs(p1[i] - p2[i]);
            maxd = dd > maxd ? dd : maxd;
            loud |= p1[i] != 0;
        }
        ok(same, "%s: session %d's text tokens equal the stand-alone ones", model, ROW);
        ok(ntext >= T - 2, "%s: text from the frame after the delays on (%d of %d)", model,
           ntext, T);
        ok(maxd <= 1, "%s: its PCM within 1 LSB of the stand-alone one (max %d)", model, maxd);
        if (audio)
            ok(loud, "%s: the model speaks (non-zero PCM out)", model);
        else
            ok(!loud, "%s: speech to text: the audio out is silence", model);
    }
    free(p1);
    free(p2);
    mimi_free(codec);
    mt_kyutai_free(lm);
}

static void refusals(void)
{
    char err[256] = "";
    mt_kyutai_lm *lm = NULL;
    mimi_model *codec = NULL;
    if (mt_kyutai_load("synthetic:kyutai-tiny", 0, &lm, err, sizeof err) ||
        mimi_load("synthetic:mimi-tiny", NULL, 0, &codec, err, sizeof err)) {
        ok(0, "presets load: %s", err);
        return;
    }
    ok(mt_speech_check(lm, codec, err, sizeof err) == -1, "card 24 against 32 bins refused");
    like(err, "32 entries (bins), the LM's card is 24", "the message names both numbers");
    mt_kyutai_free(lm);
    lm = NULL;
    mimi_free(codec);
    codec = NULL;
    /* a codec of 4 codebooks against the published shape's 8 user ones */
    if (mt_kyutai_load("synthetic:moshiko", MT_MODEL_SHAPE_ONLY, &lm, err, sizeof err) ||
        mimi_load_shape("synthetic:mimi-tiny", NULL, 0, &codec, err, sizeof err)) {
        ok(0, "shapes load: %s", err);
        return;
    }
    ok(mt_speech_check(lm, codec, err, sizeof err) == -1, "moshiko with mimi-tiny refused");
    tap_diag("%s", err);
    mt_kyutai_free(lm);
    mimi_free(codec);
}

int main(void)
{
    compare("synthetic:kyutai-tiny-mimi", 1);
    compare("synthetic:kyutai-tiny-stt", 0);
    refusals();
    return tap_done();
}
