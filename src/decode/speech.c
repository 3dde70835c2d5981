/* speech.c: the speech stage of Kyutai's models (speech.h): Mimi encode,
 * one LM frame, Mimi decode, for a batch of sessions. */
#include "util/errmsg.h"
#include "util/clock.h"
#include "decode/speech.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mt_speech_sess {
    mimi_state     *codec;
    mt_kyutai_sess *lm;
};

struct mt_speech {
    const mt_kyutai_lm *lm;
    mimi_model   *codec;
    mimi_batch   *cw;          /* the codec's workspace for max_batch rows */
    mt_kyutai_gen *gen;
    mt_kyutai_sampling smp;
    int      maxb, fs, nu, Q;  /* rows; samples per frame; user / model codebooks */
    float   *pcm;              /* [maxb, fs]      PCM in, then out, as floats */
    int32_t *codes;            /* [maxb, nu]      the user's codes */
    int32_t *frame;            /* [maxb, 1 + Q]   undelayed text + model codes */
    int32_t *dcodes;           /* [maxb, Q]       codes of the rows decoded */
    mimi_state **st;           /* [maxb]          codec states in row order */
    mimi_state **dst;          /* [maxb]          those of the rows decoded */
    int     *drow;             /* [maxb]          row of each decoded one */
    mt_kyutai_sess **ls;       /* [maxb] */
    mt_speech_times times;
};

int mt_speech_check(const mt_kyutai_lm *lm, const mimi_model *codec, char *err,
                    size_t errlen)
{
    const mt_kyutai_config *kc = &lm->kc;
    const mimi_config *mc = mimi_model_config(codec);
    int nu = kc->n_q - kc->dep_q;
    if (mc->bins != kc->card) {
        mt_set_err(err, errlen, "codec and LM disagree: the codec's codebooks have %d "
                 "entries (bins), the LM's card is %d", mc->bins, kc->card);
        return -1;
    }
    if (nu < 1 || nu > mc->n_q) {
        mt_set_err(err, errlen, "codec and LM disagree: the LM reads %d user codebooks "
                 "(n_q %d - dep_q %d), the codec has %d (n_q)", nu, kc->n_q, kc->dep_q,
                 mc->n_q);
        return -1;
    }
    if (kc->dep_q > 0 && kc->dep_q != nu) {
        mt_set_err(err, errlen, "codec and LM disagree: the LM makes %d codebooks (dep_q) "
                 "but reads %d of the user's (n_q - dep_q); the codec decodes as many "
                 "as it encodes", kc->dep_q, nu);
        return -1;
    }
    if (mimi_frame_size(mc) < 1) {
        mt_set_err(err, errlen, "codec: no frame size");
        return -1;
    }
    return 0;
}

void mt_speech_free(mt_speech *sp)
{
    if (!sp)
        return;
    mt_kyutai_gen_free(sp->gen);
    mimi_batch_free(sp->cw);
    free(sp->pcm);
    free(sp->codes);
    free(sp->frame);
    free(sp->dcodes);
    free(sp->st);
    free(sp->dst);
    free(sp->drow);
    free(sp->ls);
    free(sp);
}

int mt_speech_create(const mt_kyutai_lm *lm, mimi_model *codec, mt_decoder *dec,
                     int max_batch, const mt_kyutai_sampling *smp,
                     mt_speech **out, char *err, size_t errlen)
{
    return mt_speech_create_with(lm, codec, dec, max_batch, smp, NULL, out, err, errlen);
}

const char *mt_speech_dep_where(const mt_speech *sp)
{
    return mt_kyutai_gen_dep_where(sp->gen);
}

int mt_speech_create_with(const mt_kyutai_lm *lm, mimi_model *codec, mt_decoder *dec,
                          int max_batch, const mt_kyutai_sampling *smp, mt_depformer *df,
                          mt_speech **out, char *err, size_t errlen)
{
    *out = NULL;
    const mt_kyutai_config *kc = &lm->kc;
    int nu = kc->n_q - kc->dep_q;
    mt_speech *sp = NULL;
    if (mt_speech_check(lm, codec, err, errlen) ||
        mimi_set_codebooks(codec, nu, err, errlen) ||
        !(sp = mt_calloc_or_err(1, sizeof *sp, err, errlen, "speech"))) {
        mt_depformer_free(df);
        return -1;
    }
    sp->lm = lm;
    sp->codec = codec;
    sp->maxb = max_batch;
    sp->fs = mimi_frame_size(mimi_model_config(codec));
    sp->nu = nu;
    sp->Q = kc->dep_q;
    if (smp)
        sp->smp = *smp;
    else
        mt_kyutai_sampling_default(&sp->smp);
    size_t R = (size_t)max_batch;
    sp->pcm = malloc(R * (size_t)sp->fs * sizeof(float));
    sp->codes = malloc(R * (size_t)nu * sizeof(int32_t));
    sp->frame = malloc(R * (size_t)(1 + sp->Q) * sizeof(int32_t));
    sp->dcodes = malloc(R * (size_t)(sp->Q ? sp->Q : 1) * sizeof(int32_t));
    sp->st = calloc(R, sizeof *sp->st);
    sp->dst = calloc(R, sizeof *sp->dst);
    sp->drow = calloc(R, sizeof *sp->drow);
    sp->ls = calloc(R, sizeof *sp->ls);
    if (!sp->pcm || !sp->codes || !sp->frame || !sp->dcodes || !sp->st || !sp->dst ||
        !sp->drow || !sp->ls) {
        mt_speech_free(sp);
        mt_depformer_free(df);
        mt_set_err(err, errlen, "speech: out of memory");
        return -1;
    }
    sp->cw = mimi_batch_new(codec, max_batch, err, errlen);
    if (!sp->cw) {
        mt_speech_free(sp);
        mt_depformer_free(df);
        return -1;
    }
    if (mt_kyutai_gen_create_with(lm, dec, max_batch, df, &sp->gen, err, errlen)) {
        mt_speech_free(sp);      /* df: freed by the generator's failure */
        return -1;
    }
    *out = sp;
    return 0;
}

int mt_speech_sample_rate(const mt_speech *sp)
{
    return mimi_model_config(sp->codec)->sample_rate;
}

int mt_speech_frame_samples(const mt_speech *sp) { return sp->fs; }
int mt_speech_audio_out(const mt_speech *sp) { return sp->Q > 0; }

size_t mt_speech_dep_bytes(const mt_speech *sp)
{
    return mt_kyutai_session_bytes(&sp->lm->kc);
}

size_t mt_speech_codec_bytes(const mt_speech *sp)
{
    return mimi_state_bytes(sp->codec);
}

int mt_speech_sess_open(mt_speech *sp, uint64_t seed, mt_speech_sess **out,
                        char *err, size_t errlen)
{
    *out = NULL;
    mt_speech_sess *s = mt_calloc_or_err(1, sizeof *s, err, errlen, "speech session");
    if (!s)
        return -1;
    s->codec = mimi_state_new(sp->codec, err, errlen);
    if (!s->codec || mt_kyutai_sess_open(sp->gen, seed, &sp->smp, &s->lm, err, errlen)) {
        mt_speech_sess_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void mt_speech_sess_close(mt_speech_sess *s)
{
    if (!s)
        return;
    mimi_state_free(s->codec);
    mt_kyutai_sess_close(s->lm);
    free(s);
}

static double ms_since(uint64_t t0) { return (double)(mt_clock_ns() - t0) / 1e6; }

int mt_speech_step(mt_speech *sp, int B, mt_kv_seq *const *seqs,
                   mt_speech_sess *const *ss, const int16_t *pcm_in,
                   int16_t *pcm_out, int32_t *text, char *err, size_t errlen)
{
    if (B < 1 || B > sp->maxb) {
        mt_set_err(err, errlen, "speech: batch of %d outside 1..%d", B, sp->maxb);
        return -1;
    }
    const size_t fs = (size_t)sp->fs;
    const int Q = sp->Q;
    for (int r = 0; r < B; r++) {
        sp->st[r] = ss[r]->codec;
        sp->ls[r] = ss[r]->lm;
    }
    for (size_t i = 0; i < (size_t)B * fs; i++)
        sp->pcm[i] = (float)pcm_in[i] / 32768.0f;

    uint64_t t0 = mt_clock_ns();
    if (mimi_encode(sp->codec, sp->cw, sp->st, B, sp->pcm, sp->codes, err, errlen))
        return -1;
    sp->times.encode_ms = ms_since(t0);

    mt_kyutai_out o = { .frame = sp->frame };
    if (mt_kyutai_step(sp->gen, B, seqs, sp->ls, sp->codes, &o, err, errlen))
        return -1;
    mt_kyutai_last_times(sp->gen, &sp->times.lm);

    /* the rows with an undelayed frame are decoded, as one batch */
    int nd = 0;
    for (int r = 0; r < B; r++) {
        const int32_t *f = sp->frame + (size_t)r * (1 + Q);
        text[r] = f[0] >= 0 ? f[0] : -1;
        if (Q > 0 && f[1] >= 0) {
            sp->drow[nd] = r;
            sp->dst[nd] = sp->st[r];
            memcpy(sp->dcodes + (size_t)nd * Q, f + 1, (size_t)Q * sizeof(int32_t));
            nd++;
        }
    }
    memset(pcm_out, 0, (size_t)B * fs * sizeof(int16_t));
    t0 = mt_clock_ns();
    if (nd > 0 && mimi_decode(sp->codec, sp->cw, sp->dst, nd, sp->dcodes, sp->pcm, err, errlen))
        return -1;
    sp->times.decode_ms = ms_since(t0);
    for (int d = 0; d < nd; d++) {
        const float *x = sp->pcm + (size_t)d * fs;
        int16_t *y = pcm_out + (size_t)sp->drow[d] * fs;
        for (size_t i = 0; i < fs; i++) {
            float v = x[i] * 32768.0f;
            y[i] = v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768 : (int16_t)lrintf(v);
        }
    }
    return 0;
}

void mt_speech_last_times(const mt_speech *sp, mt_speech_times *t)
{
    *t = sp->times;
}
