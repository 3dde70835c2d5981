/* depformer.h: Kyutai's depth transformer (the depformer), batched over
 * the rows of a tick, fp32 on the CPU.
 *
 * Per frame and row, dep_q sequential steps k = 0 .. dep_q-1, each with
 * its own weights (weights_per_step):
 *   x   = depformer_in[k] . h  +  (k == 0 ? depformer_text_emb[text]
 *                                          : depformer_emb[k-1][prev audio])
 *   for each layer (norms shared across steps, projections per step):
 *     x += out_proj[k] . attention(in_proj[k] . rmsnorm(x) * norm1)
 *          over this frame's positions 0..k (causal, no positions)
 *     x += linear_out[k] . (SiLU(a) * b), [a | b] = linear_in[k] . rmsnorm(x) * norm2
 *   logits = linears[k] . x                       (no final norm)
 * The K/V of a frame's dep_q positions is the row's per-frame cache,
 * started again at every frame. A token of -1 embeds to zero. */
#ifndef MT_DEPFORMER_H
#define MT_DEPFORMER_H

#include <stddef.h>
#include <stdint.h>
#include "model/kyutai_lm.h"

typedef struct mt_depformer mt_depformer;

int  mt_depformer_create(const mt_kyutai_lm *lm, int max_batch, mt_depformer **out,
                         char *err, size_t errlen);
/* The same on CUDA (depformer_cuda.h: fp32 cuBLAS over the rows, the
 * weights on the device); fails with the reason without the CUDA module,
 * a GPU or device memory. */
int  mt_depformer_create_cuda(const mt_kyutai_lm *lm, int max_batch, mt_depformer **out,
                              char *err, size_t errlen);
int  mt_depformer_is_cuda(const mt_depformer *df);
/* One that does no work (every step's logits zero, so the sampler draws
 * among its top k), for a simulated device whose profile times the
 * depformer (mt-profile(5)'s depformer_params): the host computing it
 * too would count it twice. No host weights needed. */
int  mt_depformer_create_sim(const mt_kyutai_lm *lm, int max_batch, mt_depformer **out,
                             char *err, size_t errlen);
int  mt_depformer_is_sim(const mt_depformer *df);
void mt_depformer_free(mt_depformer *df);
/* Starts a frame for B rows: h [B, dim] is the temporal output after
 * out_norm (read until the frame's last step). 0, or -1 (CUDA only) with
 * mt_depformer_error's message. */
int  mt_depformer_begin(mt_depformer *df, int B, const float *h);
/* Step k (in order 0 .. dep_q-1) of the frame: prev [B] is the text token
 * at k = 0, else the audio token of step k-1; logits [B, card]. 0, or -1
 * (CUDA only) with mt_depformer_error's message. */
int  mt_depformer_next(mt_depformer *df, int k, const int32_t *prev, float *logits);
const char *mt_depformer_error(const mt_depformer *df);
/* CUDA only (1 when df can): the whole frame after mt_depformer_begin,
 * each step sampled on the device by the host sampler's rules (kyutai.c)
 * from each row's temp, top_k, greedy [B] and xoshiro256** state rng
 * [B][4] (advanced as the host's would be); text [B] is step 0's previous
 * token; audio [B][dep_q] the tokens. One host synchronisation. 0, or -1
 * with mt_depformer_error's message. */
int  mt_depformer_can_frame(const mt_depformer *df);
int  mt_depformer_frame(mt_depformer *df, const int32_t *text, const float *temp,
                        const int *top_k, const int *greedy, uint64_t *rng, int32_t *audio);

#endif
