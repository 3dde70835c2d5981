/* speech.c: the speech stage of Kyutai's models (speech.h): Mimi encode,
 * one LM frame, Mimi decode, for a batch of sessions. The codec runs on
 * the CPU (mimi.c, a mimi_state per session), or on a CUDA decoder on the
 * GPU (mimi_engine.h's CUDA engine, a slot per session, its state on the
 * device). */
#include "util/errmsg.h"
#include "util/clock.h"
#include "speech/speech.h"
#include "codec/mimi_engine.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mt_speech_sess {
    mimi_state     *codec;     /* the CPU codec's state; NULL on the GPU's */
    mt_kyutai_sess *lm;
    mt_speech      *sp;
    int             slot;      /* the GPU codec's slot; -1 on the CPU's */
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
    float   *prs;              /* [maxb, extra_heads] the extra heads' output 0;
                                  NULL: none, or a backend without them */
    int32_t *dcodes;           /* [maxb, Q]       codes of the rows decoded */
    mimi_state **st;           /* [maxb]          codec states in row order */
    mimi_state **dst;          /* [maxb]          those of the rows decoded */
    int     *drow;             /* [maxb]          row of each decoded one */
    mt_kyutai_sess **ls;       /* [maxb] */
    mt_speech_times times;
    /* the CUDA codec (a CUDA decoder): sessions are its slots 0..maxb-1 */
    mimi_engine *ce;           /* NULL: the CPU codec (cw, st, dst) */
    int     *eslot, *dslot;    /* [maxb]          slots of the rows encoded / decoded */
    int     *free_slot;        /* [maxb]          a stack of the slots not in use */
    int      nfree;
    pthread_mutex_t mu;        /* free_slot, nfree */
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

int mt_speech_codec_cost(const mt_kyutai_lm *lm, mimi_model *codec, mt_codec_cost *out,
                         char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (mt_speech_check(lm, codec, err, errlen) ||
        mimi_set_codebooks(codec, lm->kc.n_q - lm->kc.dep_q, err, errlen))
        return -1;
    out->flops = mimi_encode_flops(codec) + mimi_decode_flops(codec);
    out->state_bytes = (double)mimi_state_bytes(codec);
    out->weight_bytes = (double)mimi_param_count(codec) * sizeof(float);
    return 0;
}

int mt_speech_codec_threads(mt_speech *sp, int threads, char *err, size_t errlen)
{
    if (!sp->cw)
        return 0;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 64 ? 64 : (int)n;
    }
    return mimi_batch_threads(sp->cw, threads > 64 ? 64 : threads, err, errlen);
}

void mt_speech_free(mt_speech *sp)
{
    if (!sp)
        return;
    mt_kyutai_gen_free(sp->gen);
    mimi_batch_free(sp->cw);
    mimi_engine_free(sp->ce);
    free(sp->eslot);
    free(sp->dslot);
    free(sp->free_slot);
    pthread_mutex_destroy(&sp->mu);
    free(sp->pcm);
    free(sp->codes);
    free(sp->frame);
    free(sp->prs);
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
    pthread_mutex_init(&sp->mu, NULL);
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
    /* the extra heads read out_norm(h) on the host: exact on the CPU
     * backend; the CUDA one's h is bf16 (not checked against Kyutai's), the
     * simulated device's zero */
    int want_prs = kc->extra_heads > 0 && strcmp(mt_decoder_backend_name(dec), "cpu") == 0;
    if (want_prs)
        sp->prs = malloc(R * (size_t)kc->extra_heads * sizeof(float));
    if (!sp->pcm || !sp->codes || !sp->frame || !sp->dcodes || !sp->st || !sp->dst ||
        !sp->drow || !sp->ls || (want_prs && !sp->prs)) {
        mt_speech_free(sp);
        mt_depformer_free(df);
        mt_set_err(err, errlen, "speech: out of memory");
        return -1;
    }
    /* the codec beside the LM: on the GPU when the decoder is CUDA's */
    if (strcmp(mt_decoder_backend_name(dec), "cuda") == 0) {
        char e[400];
        sp->eslot = malloc(R * sizeof *sp->eslot);
        sp->dslot = malloc(R * sizeof *sp->dslot);
        sp->free_slot = malloc(R * sizeof *sp->free_slot);
        if (!sp->eslot || !sp->dslot || !sp->free_slot) {
            mt_speech_free(sp);
            mt_depformer_free(df);
            mt_set_err(err, errlen, "speech: out of memory");
            return -1;
        }
        for (int i = 0; i < max_batch; i++)
            sp->free_slot[i] = max_batch - 1 - i;
        sp->nfree = max_batch;
        if (mimi_engine_new(codec, MIMI_BACKEND_CUDA, max_batch, max_batch, &sp->ce, e, sizeof e)) {
            mt_speech_free(sp);
            mt_depformer_free(df);
            mt_set_err(err, errlen, "speech: the codec on the GPU beside the CUDA decoder: %s", e);
            return -1;
        }
    } else {
        sp->cw = mimi_batch_new(codec, max_batch, err, errlen);
        /* --weights q8: the codec's transformers, deepest convolutions and
         * codebook search too, on products of as many rows as the
         * decoder's 8-bit products take (a row count there too, a
         * session's a step: MT_Q8_ALL_ROWS where the integer product
         * serves; elsewhere the float kernels' crossover with sgemm,
         * which is a matter of rows, whoever's they are) */
        if (sp->cw && mt_decoder_weights_format(dec) == MT_FMT_Q8 &&
            mimi_batch_weights_q8(sp->cw, mt_decoder_weights_f16_rows(dec), err, errlen)) {
            mt_speech_free(sp);
            mt_depformer_free(df);
            return -1;
        }
        if (!sp->cw) {
            mt_speech_free(sp);
            mt_depformer_free(df);
            return -1;
        }
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

size_t mt_speech_codec_q8_bytes(const mt_speech *sp)
{
    return sp->cw ? mimi_batch_q8_bytes(sp->cw) : 0;
}

const char *mt_speech_codec_backend(const mt_speech *sp) { return sp->ce ? "cuda" : "cpu"; }

void mt_speech_last_codes(const mt_speech *sp, const int32_t **user, const int32_t **frame)
{
    *user = sp->codes;
    *frame = sp->frame;
}

int64_t mt_speech_sess_codec_frames(const mt_speech_sess *s, int decoded)
{
    if (s->slot >= 0)
        return decoded ? mimi_engine_frames_decoded(s->sp->ce, s->slot)
                       : mimi_engine_frames_encoded(s->sp->ce, s->slot);
    return decoded ? mimi_state_frames_decoded(s->codec) : mimi_state_frames_encoded(s->codec);
}

const mt_kyutai_sampling *mt_speech_sampling(const mt_speech *sp) { return &sp->smp; }

int mt_speech_sess_open(mt_speech *sp, uint64_t seed, mt_speech_sess **out,
                        char *err, size_t errlen)
{
    return mt_speech_sess_open_smp(sp, seed, NULL, out, err, errlen);
}

int mt_speech_sess_open_smp(mt_speech *sp, uint64_t seed, const mt_kyutai_sampling *smp,
                            mt_speech_sess **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!smp)
        smp = &sp->smp;
    mt_speech_sess *s = mt_calloc_or_err(1, sizeof *s, err, errlen, "speech session");
    if (!s)
        return -1;
    s->sp = sp;
    s->slot = -1;
    if (sp->ce) {
        pthread_mutex_lock(&sp->mu);
        if (sp->nfree > 0)
            s->slot = sp->free_slot[--sp->nfree];
        pthread_mutex_unlock(&sp->mu);
        if (s->slot < 0) {
            mt_set_err(err, errlen, "speech: all %d of the GPU codec's sessions in use", sp->maxb);
            free(s);
            return -1;
        }
        if (mimi_engine_reset(sp->ce, s->slot, err, errlen) ||
            mt_kyutai_sess_open(sp->gen, seed, smp, &s->lm, err, errlen)) {
            mt_speech_sess_close(s);
            return -1;
        }
        *out = s;
        return 0;
    }
    s->codec = mimi_state_new(sp->codec, err, errlen);
    if (!s->codec || mt_kyutai_sess_open(sp->gen, seed, smp, &s->lm, err, errlen)) {
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
    if (s->slot >= 0) {
        mt_speech *sp = s->sp;
        pthread_mutex_lock(&sp->mu);
        sp->free_slot[sp->nfree++] = s->slot;
        pthread_mutex_unlock(&sp->mu);
    }
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
        if (sp->ce)
            sp->eslot[r] = ss[r]->slot;
    }
    for (size_t i = 0; i < (size_t)B * fs; i++)
        sp->pcm[i] = (float)pcm_in[i] / 32768.0f;

    uint64_t t0 = mt_clock_ns();
    if (sp->ce ? mimi_engine_encode(sp->ce, sp->eslot, B, sp->pcm, sp->codes, err, errlen)
               : mimi_encode(sp->codec, sp->cw, sp->st, B, sp->pcm, sp->codes, err, errlen))
        return -1;
    sp->times.encode_ms = ms_since(t0);

    mt_kyutai_out o = { .frame = sp->frame, .prs = sp->prs };
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
            if (sp->ce)
                sp->dslot[nd] = sp->eslot[r];
            memcpy(sp->dcodes + (size_t)nd * Q, f + 1, (size_t)Q * sizeof(int32_t));
            nd++;
        }
    }
    memset(pcm_out, 0, (size_t)B * fs * sizeof(int16_t));
    t0 = mt_clock_ns();
    if (nd > 0 && (sp->ce ? mimi_engine_decode(sp->ce, sp->dslot, nd, sp->dcodes, sp->pcm, err, errlen)
                          : mimi_decode(sp->codec, sp->cw, sp->dst, nd, sp->dcodes, sp->pcm, err,
                                        errlen)))
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

int mt_speech_prs(const mt_speech *sp, const float **prs)
{
    if (prs)
        *prs = sp->prs;
    return sp->prs ? sp->lm->kc.extra_heads : 0;
}

void mt_speech_last_times(const mt_speech *sp, mt_speech_times *t)
{
    *t = sp->times;
}
