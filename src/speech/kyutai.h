/* kyutai.h: one frame of Kyutai's LM for a batch of sessions: the token
 * streams with their delays, the temporal step on the decoder (so the
 * bounded cache applies), the depformer and the sampling. What Kyutai's
 * LMGen does (moshi/models/lm.py), per session.
 *
 * A session's streams: 1 text + n_q audio codebooks, the first dep_q of
 * them the model's, the rest the user's. At frame t (offset t):
 *   - the user's tokens of this frame are written at t + delay[k] of a
 *     ring of max_delay + 2 frames per stream;
 *   - the input of stream k is its initial token (text_card for text, card
 *     for audio) while t <= delay[k], else the ring at t;
 *   - x = text_emb[in_0] + sum_k emb[k][in_{k+1}]  (a token of -1 adds
 *     nothing), stepped by the decoder (mt_step_io.x_in); its text logits
 *     are text_linear . out_norm(h), and h_out is out_norm(h);
 *   - with extra heads (extra_heads_num_heads, the speech-to-text models'
 *     voice activity), head j's output is softmax(extra[j] . out_norm(h))
 *     over its extra_dim outputs, and prs[j] its output 0: what Kyutai's
 *     server sends as the Step message's prs (rust/moshi-core/src/asr.rs:
 *     softmax_last_dim, then index 0 of each head, in head order; their
 *     LMGen.step_with_extra_heads computes the same softmax);
 *   - the text token is sampled, then the depformer makes the dep_q model
 *     tokens one after the other (depformer.h);
 *   - they are written at t + 1; the frame undelayed (text and the model's
 *     codebooks of frame t - max_delay, each read at its own delay) is the
 *     output from t = max_delay on.
 *
 * Sampling: greedy (argmax), or Kyutai's: softmax(logits / temp), the top
 * k, one draw (an exponential race: argmax p_i / E_i, E_i ~ Exp(1)) from
 * the session's own generator, so a session's tokens are a function of its
 * seed and inputs alone, whatever else shares the batch. Defaults as
 * LMGen's: temp 0.8 (audio), 0.7 (text), top_k 250 (audio), 25 (text).
 */
#ifndef MT_KYUTAI_H
#define MT_KYUTAI_H

#include <stddef.h>
#include <stdint.h>
#include "decode/decoder.h"
#include "decode/depformer.h"
#include "model/kyutai_lm.h"

typedef struct mt_kyutai_sampling {
    int   greedy;
    float temp, temp_text;
    int   top_k, top_k_text;
} mt_kyutai_sampling;

void mt_kyutai_sampling_default(mt_kyutai_sampling *s);

/* The sampler's collecting passes: 0 the 8-lane code, 1 AVX-512's compress
 * where the CPU has it (the default), -1 the best the CPU runs; returns
 * the level set (the same tokens either way: test_kyutai_sample runs
 * both). */
int mt_kyutai_sample_select(int level);

typedef struct mt_kyutai_sess mt_kyutai_sess;
typedef struct mt_kyutai_gen mt_kyutai_gen;

/* Outputs of one frame, rows in batch order; NULL members are skipped. */
typedef struct mt_kyutai_out {
    int32_t *text;         /* [B]             sampled text token */
    int32_t *audio;        /* [B, dep_q]      sampled model codebooks */
    int32_t *frame;        /* [B, 1 + dep_q]  undelayed frame, -2 before max_delay */
    float   *text_logits;  /* [B, text_card_out] */
    float   *dep_logits;   /* [B, dep_q, card] */
    float   *prs;          /* [B, extra_heads] each extra head's output 0
                              (nothing without extra heads) */
} mt_kyutai_out;

/* dec runs lm->temporal (its max_batch at least max_batch); neither is
 * owned. */
int  mt_kyutai_gen_create(const mt_kyutai_lm *lm, mt_decoder *dec, int max_batch,
                          mt_kyutai_gen **out, char *err, size_t errlen);
/* The same with the depformer df (mt_depformer_create or _create_cuda for
 * at least max_batch rows; owned by the generator from this call on, freed
 * also when it fails). df NULL: one made where the decoder runs, on CUDA
 * when the decoder's backend is CUDA, else on the host (what
 * mt_kyutai_gen_create does). dep_q 0: df must be NULL. */
int  mt_kyutai_gen_create_with(const mt_kyutai_lm *lm, mt_decoder *dec, int max_batch,
                               mt_depformer *df, mt_kyutai_gen **out, char *err,
                               size_t errlen);
/* Where the depformer runs: "cuda", "host", or "none" (dep_q 0). */
const char *mt_kyutai_gen_dep_where(const mt_kyutai_gen *g);
/* How it runs (mt_depformer_mode), or "none". */
const char *mt_kyutai_gen_dep_mode(const mt_kyutai_gen *g);
void mt_kyutai_gen_free(mt_kyutai_gen *g);

int  mt_kyutai_sess_open(const mt_kyutai_gen *g, uint64_t seed, const mt_kyutai_sampling *s,
                         mt_kyutai_sess **out, char *err, size_t errlen);
void mt_kyutai_sess_close(mt_kyutai_sess *s);
int64_t mt_kyutai_sess_offset(const mt_kyutai_sess *s);

/* One frame for B sessions: user [B, n_q - dep_q] their codebook tokens
 * (each -1 or 0..card-1); seqs their decoder sequences, each with room
 * made (mt_kv_reserve(seq, 1)). 0, or -1 with a message: the decoder's
 * failure advances nothing; a CUDA depformer's, after the temporal step,
 * leaves the token rings unwritten but the sessions' K/V and generators
 * one frame on (the caller ends those sessions). */
int  mt_kyutai_step(mt_kyutai_gen *g, int B, mt_kv_seq *const *seqs,
                    mt_kyutai_sess *const *sess, const int32_t *user,
                    const mt_kyutai_out *out, char *err, size_t errlen);

/* Milliseconds of the last step by stage: the input embeddings, the
 * temporal transformer (the decoder's step), the depformer, sampling. */
typedef struct mt_kyutai_times {
    double embed_ms, temporal_ms, depformer_ms, sample_ms;
} mt_kyutai_times;
void mt_kyutai_last_times(const mt_kyutai_gen *g, mt_kyutai_times *t);

#endif
