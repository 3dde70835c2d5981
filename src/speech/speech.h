/* speech.h: the speech stage around the decoder step for Kyutai's models:
 * per session per 80 ms frame, PCM in -> Mimi encode (the user's
 * codebooks) -> one LM frame (speech/kyutai.h: the temporal transformer
 * through the decoder and its bounded cache, the depformer, sampling with
 * the session's own generator) -> Mimi decode -> PCM out, with the text
 * token beside it. Every stage runs once per call for all the rows, as one
 * batch (mimi_encode, mt_kyutai_step, mimi_decode).
 *
 * What goes back per row:
 *   text   the undelayed frame's text token (the one that goes with the
 *          audio of this output), -1 while the delays fill (the first
 *          max_delay frames);
 *   pcm    Mimi's decoding of the undelayed frame's model codebooks;
 *          silence while the delays fill, and always for speech-to-text
 *          configurations (dep_q 0: no model codebooks; mt-serve then
 *          answers with the text alone).
 *
 * The codec must agree with the LM: Mimi's codebook size equals the LM's
 * card; Mimi runs with the user's codebooks (n_q - dep_q), which its
 * checkpoint must hold, and the model's (dep_q) must be as many (or 0).
 * Else mt_speech_check refuses, naming both numbers. */
#ifndef MT_SPEECH_H
#define MT_SPEECH_H

#include <stddef.h>
#include <stdint.h>
#include "codec/mimi.h"
#include "speech/kyutai.h"

typedef struct mt_speech mt_speech;
typedef struct mt_speech_sess mt_speech_sess;

/* lm runs on dec (mt_kyutai_gen_create's rules); codec's codebook count is
 * set here (mimi_set_codebooks). smp: the sampling of every session (NULL:
 * Kyutai's defaults). Nothing is owned. */
int  mt_speech_create(const mt_kyutai_lm *lm, mimi_model *codec, mt_decoder *dec,
                      int max_batch, const mt_kyutai_sampling *smp,
                      mt_speech **out, char *err, size_t errlen);
/* The same with the depformer df (mt_kyutai_gen_create_with: owned from
 * this call on; NULL: one where the decoder runs). */
int  mt_speech_create_with(const mt_kyutai_lm *lm, mimi_model *codec, mt_decoder *dec,
                           int max_batch, const mt_kyutai_sampling *smp, mt_depformer *df,
                           mt_speech **out, char *err, size_t errlen);
void mt_speech_free(mt_speech *sp);
/* The CPU codec on `threads` threads (0: every online core, at most 64;
 * codec/mimi.h's mimi_batch_threads); nothing when the codec is on the
 * GPU. The codec's results do not depend on it. */
int  mt_speech_codec_threads(mt_speech *sp, int threads, char *err, size_t errlen);
/* Where the depformer runs: "cuda", "host", or "none" (dep_q 0). */
const char *mt_speech_dep_where(const mt_speech *sp);

/* Checks alone (no decoder needed): 0, or -1 naming the disagreement. */
int  mt_speech_check(const mt_kyutai_lm *lm, const mimi_model *codec, char *err,
                     size_t errlen);

/* The codec's figures for the simulated device (step.h's mt_codec_cost),
 * at the codebook count mt_speech_create sets (which this sets too): FLOPs
 * of one session-frame's encode and decode, one session's state, and the
 * weights in fp32 (as the CUDA codec, mimi_cuda.c, holds them). */
int  mt_speech_codec_cost(const mt_kyutai_lm *lm, mimi_model *codec, mt_codec_cost *out,
                          char *err, size_t errlen);

int  mt_speech_sample_rate(const mt_speech *sp);
int  mt_speech_frame_samples(const mt_speech *sp);
int  mt_speech_audio_out(const mt_speech *sp);    /* 0 for dep_q 0 */

/* Per-session bytes besides the temporal K/V (which the KV pool holds):
 * the depformer's scratch and the token rings, and the codec's state. */
size_t mt_speech_dep_bytes(const mt_speech *sp);
size_t mt_speech_codec_bytes(const mt_speech *sp);
/* The host codec's 8-bit copies (--weights q8), shared by every session;
 * 0 without. */
size_t mt_speech_codec_q8_bytes(const mt_speech *sp);

/* Where the codec runs: "cuda" on a CUDA decoder (the codec's CUDA engine,
 * every session's state on the GPU), else "cpu". */
const char *mt_speech_codec_backend(const mt_speech *sp);
/* The last step's codes, valid until the next step: user [B, n_q - dep_q]
 * (the rows' encoded input), frame [B, 1 + dep_q] (the undelayed text and
 * model codes; -1 where the delays are not yet filled). */
void mt_speech_last_codes(const mt_speech *sp, const int32_t **user, const int32_t **frame);

/* The extra heads (voice activity: Kyutai's Step prs) of the last step,
 * [B, n] by row, valid until the next step; n (the return) is
 * extra_heads_num_heads, 0 when the model has none or the decoder's
 * backend does not give them (only the CPU backend does: the CUDA one's
 * out_norm(h) is not checked against Kyutai's, the simulated device has
 * none). prs may be NULL (the count alone). */
int  mt_speech_prs(const mt_speech *sp, const float **prs);

/* A session: its codec state and LM streams, sampling seeded by seed. On
 * the GPU codec at most max_batch sessions are open at once. */
int  mt_speech_sess_open(mt_speech *sp, uint64_t seed, mt_speech_sess **out,
                         char *err, size_t errlen);
/* The same with the session's own sampling (NULL: the stage's). */
int  mt_speech_sess_open_smp(mt_speech *sp, uint64_t seed, const mt_kyutai_sampling *smp,
                             mt_speech_sess **out, char *err, size_t errlen);
/* The stage's sampling: every session's unless it brings its own. */
const mt_kyutai_sampling *mt_speech_sampling(const mt_speech *sp);
void mt_speech_sess_close(mt_speech_sess *s);
/* Frames the session's codec has encoded (decoded 0) or decoded (1). */
int64_t mt_speech_sess_codec_frames(const mt_speech_sess *s, int decoded);

/* One frame for B rows: pcm_in [B, frame_samples] s16; seqs the rows'
 * decoder sequences with room made (mt_kv_reserve(seq, 1)); pcm_out
 * [B, frame_samples]; text [B]. 0, or -1 with a message. */
int  mt_speech_step(mt_speech *sp, int B, mt_kv_seq *const *seqs,
                    mt_speech_sess *const *ss, const int16_t *pcm_in,
                    int16_t *pcm_out, int32_t *text, char *err, size_t errlen);

/* Milliseconds of the last step: encode, LM (the kyutai.h stages), decode. */
typedef struct mt_speech_times {
    double encode_ms, decode_ms;
    mt_kyutai_times lm;
} mt_speech_times;
void mt_speech_last_times(const mt_speech *sp, mt_speech_times *t);

#endif
