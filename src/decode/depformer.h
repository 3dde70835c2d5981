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

struct mt_decoder;

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
/* A host depformer on dec's threads (mt_decoder_parallel: each product
 * split by output columns, the attention by rows) and, when dec's backend
 * has f16 weight copies (--weights f16), on f16 copies of its own for
 * calls of up to the same number of rows (each weight matrix, read once
 * per step for all rows, half the bytes). dec must outlive df. Without it
 * every step runs on the caller's thread alone, fp32 (what the depformer
 * did before it was attached). Beside a backend with no host threads
 * (sim, CUDA) it starts the decoder's own (mt_decoder_host_threads), so
 * --threads counts there too. Nothing on CUDA. 0, or -1 with err (out
 * of memory, no threads). */
int  mt_depformer_attach(mt_depformer *df, struct mt_decoder *dec, char *err, size_t errlen);
/* Makes mt_depformer_attach do nothing: the depformer stays on the
 * caller's thread, fp32 (the benchmark's "before" figure). */
void mt_depformer_set_serial(mt_depformer *df);
/* Tests: column mode (B < MT_DEPFORMER_ROWS_MIN on 2 or more threads)
 * from this many depformer_in weights on (default 1 << 20: a real
 * depformer's; the test presets' are smaller). */
void mt_depformer_columns_from(mt_depformer *df, size_t weights);
/* 1 when attached with f16 copies. */
int  mt_depformer_f16(const mt_depformer *df);
/* How it runs: "cuda", "serial" (not attached), "pool" or "pool-f16". */
const char *mt_depformer_mode(const mt_depformer *df);
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

/* Row mode. From MT_DEPFORMER_ROWS_MIN rows on, an attached host depformer
 * on 2 or more threads whose weights are small (kyutai-small's) is run
 * best by rows: each thread takes its share of the rows through every
 * step (its products over its rows, the weights read once per thread and
 * step), with no barrier inside the frame, so the caller (kyutai.c) runs
 * the frame's steps and samples as one parallel phase; below, and for a
 * large depformer, frame mode (below). Step by step, mt_depformer_next
 * splits each product by columns over the threads (the weights read once
 * per step) where they are large: one pool phase a step, the threads
 * taking each product's columns in chunks and waiting for each other only
 * between stages (MT_DEPFORMER_FUSED=0 in the environment: a phase per
 * product, as before, for benchmarks; MT_DEPFORMER_CHUNKS=n, 1..64: n
 * chunks a thread, default 4). 1 when the frame begun is for row mode. */
enum { MT_DEPFORMER_ROWS_MIN = 8 };
int  mt_depformer_rows_split(const mt_depformer *df);
/* Frame mode: the frame begun, every step and its sampling, as one phase
 * of the decoder's threads (depformer.c, "the frame as one phase"): each
 * product cut by columns in a piece a thread, the attention and the
 * sampling by rows, each stage's pieces taken from a counter by whichever
 * thread runs, the next begun when all are done. sample(ctx, k, r0, r1, tid)
 * runs on thread tid once step k's logits [B, card] are complete, and
 * writes the tokens of rows [r0, r1) to tok [B] (step 0 reads tok as the
 * text tokens, step k+1 as step k's). mt_depformer_frame_split: 1 when
 * the frame begun runs best so (a host depformer attached, 2 or more
 * threads, and under MT_DEPFORMER_ROWS_MIN rows or a large depformer;
 * MT_DEPFORMER_FRAME=0 in the environment: never, =1: wherever it can
 * run, for benchmarks and tests); mt_depformer_rows_split is then 0.
 * run_frame: 0, or -1 (not available) with mt_depformer_error's message. */
typedef void (*mt_dep_sample_fn)(void *ctx, int k, int r0, int r1, int tid);
int  mt_depformer_frame_split(const mt_depformer *df);
int  mt_depformer_run_frame(mt_depformer *df, int32_t *tok, float *logits,
                            mt_dep_sample_fn sample, void *ctx);
/* Step k for rows [r0, r1) only, on the calling thread, which is thread
 * tid of the decoder's (its scratch); prev [B] and logits [B, card] are
 * the frame's whole arrays (rows r0..r1-1 read and written). Inside an
 * mt_decoder_parallel phase, threads on disjoint rows. */
void mt_depformer_next_rows(mt_depformer *df, int k, int r0, int r1, const int32_t *prev,
                            float *logits, int tid);

#endif
