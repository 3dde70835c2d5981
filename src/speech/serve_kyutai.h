/* serve_kyutai.h: mt-serve's Kyutai models: the LM and its Mimi codec
 * loaded, checked against each other, the speech stage (speech/speech.h)
 * made on the decoder, and the per-session memory said at start. */
#ifndef MT_SERVE_KYUTAI_H
#define MT_SERVE_KYUTAI_H

#include <stddef.h>
#include <stdint.h>
#include "codec/mimi.h"
#include "decode/decoder.h"
#include "speech/speech.h"
#include "model/kyutai_lm.h"
#include "model/tokenizer.h"

typedef struct mt_serve_kyutai {
    mt_kyutai_lm *lm;       /* lm->temporal is the decoder's model */
    mimi_model   *codec;
    mt_speech    *sp;
    mt_tokenizer *tok;      /* --tokenizer's pieces, or NULL */
    mt_depformer *df;       /* made before the decoder (CUDA), until start */
    char          codec_spec[4200];
} mt_serve_kyutai;

/* The codec that goes with model when none is named: DIR/mimi/ or
 * DIR/mimi.safetensors beside a directory's LM, else for a preset
 * synthetic:mimi-tiny (the kyutai-tiny ones) or synthetic:mimi. 0, or -1
 * with a message. */
int  mt_serve_kyutai_default_codec(const char *model, char *out, size_t cap, char *err,
                                   size_t errlen);
/* Loads model (a Kyutai directory or preset: mt_kyutai_is_kyutai) and its
 * codec: codec_spec (a mimi_load spec), else DIR/mimi/ or
 * DIR/mimi.safetensors beside a directory's LM, else for a preset
 * synthetic:mimi-tiny (the kyutai-tiny ones) or synthetic:mimi. A device
 * other than the CPU takes a preset's temporal weights itself
 * (MT_KYUTAI_HOST_SIDE). Refuses an LM and a codec that disagree. With
 * tokenizer (a SentencePiece .model, or NULL) its pieces too, refused
 * unless it has as many as the LM's text card. 0, or -1 with a message. */
int  mt_serve_kyutai_load(const char *model, const char *codec_spec, const char *tokenizer,
                          mt_device dev, mt_serve_kyutai *k, char *err, size_t errlen);
/* Before the decoder: with --device cuda, the depformer on the GPU, so
 * that an automatic KV pool is sized after its weights (a depformer made
 * after the pool could find no room). Nothing for another device. 0, or
 * -1 with a message. */
int  mt_serve_kyutai_prepare(mt_serve_kyutai *k, mt_device dev, int max_batch, char *err,
                             size_t errlen);
/* On a simulated device whose profile times the depformer
 * (depformer_params), a depformer that does no work on the host
 * (mt_depformer_create_sim), so it is not counted twice. */
int  mt_serve_kyutai_prepare_sim(mt_serve_kyutai *k, const char *profile, int max_batch,
                                 char *err, size_t errlen);
/* The speech stage on dec, for max_batch sessions; its depformer the one
 * prepared, else where dec runs (mt_kyutai_gen_create_with); smp the
 * sessions' default sampling (NULL: LMGen's). */
int  mt_serve_kyutai_start(mt_serve_kyutai *k, mt_decoder *dec, int max_batch,
                           const mt_kyutai_sampling *smp, char *err, size_t errlen);
/* The startup line: per-session bytes = temporal K/V under the bound +
 * depformer scratch and token rings + codec state; the cache's window in
 * use beside the checkpoint's context; the default sampling. */
void mt_serve_kyutai_report(const mt_serve_kyutai *k, const mt_kv_params *kv,
                            char *out, size_t cap);
void mt_serve_kyutai_free(mt_serve_kyutai *k);

#endif
