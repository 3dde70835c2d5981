/* serve_kyutai.c: mt-serve's Kyutai models (serve_kyutai.h). */
#include "speech/serve_kyutai.h"
#include "decode/sim_profile.h"
#include "util/errmsg.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int mt_serve_kyutai_default_codec(const char *model, char *out, size_t cap, char *err,
                                  size_t errlen)
{
    struct stat st;
    if (!strncmp(model, "synthetic:", 10)) {
        snprintf(out, cap, "%s", !strncmp(model + 10, "kyutai-tiny", 11)
                                     ? "synthetic:mimi-tiny" : "synthetic:mimi");
        return 0;
    }
    if ((size_t)snprintf(out, cap, "%s/mimi", model) < cap && stat(out, &st) == 0 &&
        S_ISDIR(st.st_mode))
        return 0;
    if ((size_t)snprintf(out, cap, "%s/mimi.safetensors", model) < cap &&
        stat(out, &st) == 0)
        return 0;
    mt_set_err(err, errlen, "%s: no codec: give --codec SPEC, or put Mimi's checkpoint "
             "in %s/mimi/ or %s/mimi.safetensors", model, model, model);
    return -1;
}

int mt_serve_kyutai_load(const char *model, const char *codec_spec, const char *tokenizer,
                         mt_device dev, mt_serve_kyutai *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    if (codec_spec)
        snprintf(k->codec_spec, sizeof k->codec_spec, "%s", codec_spec);
    else if (mt_serve_kyutai_default_codec(model, k->codec_spec, sizeof k->codec_spec, err,
                                           errlen))
        return -1;
    int flags = dev != MT_DEV_CPU && !strncmp(model, "synthetic:", 10) &&
                dev != MT_DEV_AUTO ? MT_KYUTAI_HOST_SIDE : 0;
    char e[1024];   /* an unknown preset lists them all */
    if (mt_kyutai_load(model, flags, &k->lm, e, sizeof e)) {
        mt_set_err(err, errlen, "%s", e);
        return -1;
    }
    const char *left_out = mt_kyutai_preset_note(model);  /* issue 49: said, not silent */
    if (left_out)
        fprintf(stderr, "mt-serve: %s: %s\n", model, left_out);
    if (mimi_load(k->codec_spec, NULL, 0, &k->codec, e, sizeof e)) {
        mt_set_err(err, errlen, "codec %s: %s", k->codec_spec, e);
        mt_serve_kyutai_free(k);
        return -1;
    }
    if (mt_speech_check(k->lm, k->codec, e, sizeof e)) {
        mt_set_err(err, errlen, "%s with codec %s: %s", model, k->codec_spec, e);
        mt_serve_kyutai_free(k);
        return -1;
    }
    if (!tokenizer)
        return 0;
    k->tok = mt_tokenizer_load_err(tokenizer, e, sizeof e);
    if (!k->tok) {
        mt_set_err(err, errlen, "tokenizer %s", e);
        mt_serve_kyutai_free(k);
        return -1;
    }
    if (mt_tokenizer_size(k->tok) != k->lm->kc.text_card) {
        mt_set_err(err, errlen, "tokenizer %s has %d pieces, the text card of %s is %d: "
                   "not this model's tokenizer", tokenizer, mt_tokenizer_size(k->tok),
                   model, k->lm->kc.text_card);
        mt_serve_kyutai_free(k);
        return -1;
    }
    return 0;
}

int mt_serve_kyutai_prepare(mt_serve_kyutai *k, mt_device dev, int max_batch, char *err,
                            size_t errlen)
{
    if (dev != MT_DEV_CUDA || k->lm->kc.dep_q == 0 || k->df)
        return 0;
    char e[400];
    if (mt_depformer_create_cuda(k->lm, max_batch, &k->df, e, sizeof e)) {
        mt_set_err(err, errlen, "the depformer on CUDA: %s", e);
        return -1;
    }
    return 0;
}

int mt_serve_kyutai_prepare_sim(mt_serve_kyutai *k, const char *profile, int max_batch,
                                char *err, size_t errlen)
{
    if (k->lm->kc.dep_q == 0 || k->df)
        return 0;
    mt_sim_profile p;
    if (mt_sim_profile_load(profile, &p, err, errlen))
        return -1;
    if (!(p.depformer_params > 0))
        return 0;   /* the profile does not time it: the host computes it */
    return mt_depformer_create_sim(k->lm, max_batch, &k->df, err, errlen);
}

int mt_serve_kyutai_start(mt_serve_kyutai *k, mt_decoder *dec, int max_batch,
                          const mt_kyutai_sampling *smp, char *err, size_t errlen)
{
    mt_depformer *df = k->df;
    k->df = NULL;                /* the speech stage's from here on */
    return mt_speech_create_with(k->lm, k->codec, dec, max_batch, smp, df, &k->sp, err,
                                 errlen);
}

void mt_serve_kyutai_report(const mt_serve_kyutai *k, const mt_kv_params *kv,
                            char *out, size_t cap)
{
    const mt_kyutai_config *kc = &k->lm->kc;
    size_t kvb = kv->policy == MT_KV_WINDOW ? mt_kv_bound_bytes(kv) : 0;
    size_t dep = mt_speech_dep_bytes(k->sp), codec = mt_speech_codec_bytes(k->sp);
    char kvs[64];
    if (kvb)
        snprintf(kvs, sizeof kvs, "%zu", kvb);
    else
        snprintf(kvs, sizeof kvs, "unbounded (full policy)");
    snprintf(out, cap, "kyutai %s: %d layers x %d, %d codebooks (%d the model's), text %d; "
             "codec %s on the %s, %d of its codebooks, %d samples a frame at %d Hz; per-session bytes "
             "= temporal K/V under the bound %s + depformer scratch and token rings %zu + "
             "codec state %zu%s%s",
             k->lm->temporal->cfg.name, kc->num_layers, kc->dim, kc->n_q, kc->dep_q,
             kc->text_card_out, k->codec_spec, mt_speech_codec_backend(k->sp),
             mimi_model_config(k->codec)->n_q_used,
             mt_speech_frame_samples(k->sp), mt_speech_sample_rate(k->sp), kvs, dep, codec,
             kvb ? " = " : "", "");
    if (kvb) {
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%zu", kvb + dep + codec);
    }
    if (kc->dep_q > 0) {
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "; depformer on %s", mt_speech_dep_where(k->sp));
    }
    if (k->tok) {
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "; tokenizer: %d pieces", mt_tokenizer_size(k->tok));
    }
    {
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "; codec compute %.4g GFLOP a session-frame (encode %.4g "
                 "+ decode %.4g)", (mimi_encode_flops(k->codec) + mimi_decode_flops(k->codec)) / 1e9,
                 mimi_encode_flops(k->codec) / 1e9, mimi_decode_flops(k->codec) / 1e9);
        size_t q8 = mt_speech_codec_q8_bytes(k->sp);
        n = strlen(out);
        if (q8)
            snprintf(out + n, cap - n, "; codec on 8-bit copies (%.1f MB)", (double)q8 / 1e6);
    }
    {
        /* the window in use beside the checkpoint's context: a window
         * shorter than it is a bounded cache, not Kyutai's ring */
        size_t n = strlen(out);
        if (kv->policy == MT_KV_WINDOW)
            snprintf(out + n, cap - n, "; cache window %d + %d sinks (%s positions) beside "
                     "the checkpoint's context %d%s", kv->window, kv->sink,
                     kv->rope == MT_ROPE_ABSOLUTE ? "absolute" : "cache",
                     kc->context, kv->sink == 0 && kv->window == kc->context &&
                     kv->rope == MT_ROPE_ABSOLUTE ? " (Kyutai's ring, --kv ring)" : "");
        else
            snprintf(out + n, cap - n, "; cache full (unbounded) beside the checkpoint's "
                     "context %d", kc->context);
        const mt_kyutai_sampling *m = mt_speech_sampling(k->sp);
        n = strlen(out);
        snprintf(out + n, cap - n, "; sampling text temperature %g top-k %d, audio "
                 "temperature %g top-k %d", (double)m->temp_text, m->top_k_text,
                 (double)m->temp, m->top_k);
    }
    if (!mt_speech_audio_out(k->sp)) {
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "; speech to text (dep_q 0): text only, every answer "
                 "a TEXT frame");
    }
}

void mt_serve_kyutai_free(mt_serve_kyutai *k)
{
    mt_speech_free(k->sp);
    mt_depformer_free(k->df);
    mt_tokenizer_free(k->tok);
    mimi_free(k->codec);
    mt_kyutai_free(k->lm);
    k->sp = NULL;
    k->tok = NULL;
    k->df = NULL;
    k->codec = NULL;
    k->lm = NULL;
}
