/* decoder.h: the backend-neutral batched step.
 *
 * One call advances B sessions by one position each. Each session brings
 * its own KV sequence (kv.h) and length; the caller has already made room
 * with mt_kv_reserve(seq, 1) for every one of them, so a step never fails
 * for lack of cache. Backends (backend.h): CPU (backend_cpu.c, fp32 +
 * OpenBLAS) always; CUDA (backend_cuda.c + kernels/, bf16 + cuBLAS) when
 * built with nvcc; the simulated device (backend_sim.c) on --device sim:P.
 *
 * Lengths: a step writes position seq->len of each session (prefill:
 * seq->len .. seq->len+n-1); mt_decoder_step / mt_decoder_prefill advance
 * seq->len after the backend returns 0. Backends never change len.
 *
 * The KV pool: decoder.c creates the backend first, then the pool with
 * position_bytes = mt_decoder_position_bytes(model, the backend's
 * kv_elem_bytes) (step.h: fp32 4 or f16 2 bytes on the CPU as
 * opts.kv_dtype says, bf16 2 on CUDA, the profile's on the simulated
 * device), then has the backend attach storage for every block
 * (backend.h). On a device backend the pool is sized after the weights,
 * the activations and a warm-up step, keeping a reserve.
 *
 * Adapters (backend-neutral semantics):
 *   audio in:  x = audio_in . (pcm / 32768)
 *   audio out: y = audio_out . rmsnorm(h_final); pcm = lrint(clamp(y,-1,1)
 *              * 32767); audio_passthrough models copy pcm_in to pcm_out
 *              (the backbone still runs).
 *   token in:  x = embed_tokens[id] (ids checked in decoder.c: 0 <= id < vocab)
 *   vector in: x = x_in (no adapter; any model)
 *   logits:    lm_head . rmsnorm(h_final)
 *   hidden out: h_out = rmsnorm(h_final) * norm (what the heads read)
 * Outputs that are NULL (or that the model has no adapter for) are skipped.
 */
#ifndef MT_DECODER_H
#define MT_DECODER_H

#include <stddef.h>
#include <stdint.h>
#include "model/model.h"
#include "decode/kv.h"
#include "decode/step.h"
#include "gpu/cuda_module.h"

typedef struct mt_decoder mt_decoder;
int  mt_decoder_create(const mt_model *m, const mt_decoder_opts *o,
                       mt_decoder **out, char *err, size_t errlen);
/* A decoder over the backend `create` builds (NULL: the CPU backend), the
 * pool sized from its kv_elem_bytes: for tests that drive
 * the engine with a backend of known outputs and known cost
 * (tests/unit/test_engine.c). */
int  mt_decoder_create_with(const mt_model *m, const mt_decoder_opts *o,
                            mt_backend_create_fn create, mt_decoder **out,
                            char *err, size_t errlen);
void mt_decoder_free(mt_decoder *d);
mt_kv_pool *mt_decoder_pool(mt_decoder *d);
const char *mt_decoder_backend_name(const mt_decoder *d);
const mt_model *mt_decoder_model(const mt_decoder *d);
/* Milliseconds the last step spent in its attention phases (0 where the
 * backend does not measure it): for the benchmark's K/V read bandwidth. */
double mt_decoder_attention_ms(const mt_decoder *d);
/* A step is due in about MT_DECODER_WAKE_NS (step.h): lets a backend
 * whose threads sleep between steps wake them ahead of it (on a VM a
 * sleeping thread takes up to milliseconds to run again, paid inside the
 * step otherwise). Cheap, never blocks for long, and optional: a step
 * without it is the same step. */
void mt_decoder_wake(mt_decoder *d);
/* Runs fn(ctx, tid, nt) on the backend's host threads (the CPU backend's
 * pool, nt its threads) or the decoder's own (mt_decoder_host_threads)
 * and returns when every one is done; elsewhere fn(ctx, 0, 1) on the
 * caller's thread. Not while a step runs. */
void mt_decoder_parallel(mt_decoder *d, mt_par_fn fn, void *ctx);
/* The host threads mt_decoder_parallel runs on (1 without a pool). */
int  mt_decoder_threads(const mt_decoder *d);
/* A backend without host threads of its own (sim, CUDA) runs the host
 * work beside its steps (a host depformer, the sampling) on the caller's
 * thread alone; this gives the decoder a pool of mt_decoder_opts.threads
 * host threads (0: every online core) for it, which mt_decoder_parallel,
 * mt_decoder_threads and mt_decoder_wake use from then on. Nothing where
 * the backend has its pool (CPU), one is started already, or one thread
 * is asked for. Not while mt_decoder_parallel runs. 0, or -1 with err
 * (no pool then). */
int  mt_decoder_host_threads(mt_decoder *d, char *err, size_t errlen);
/* Rows up to which the backend uses f16 weight copies (--weights f16 on
 * the CPU), 0 without them. */
int  mt_decoder_weights_f16_rows(const mt_decoder *d);
/* Rows up to which host-side work beside the step (the depformer) uses
 * f16 or 8-bit copies: the backend's rows where it keeps copies; on a
 * device backend (sim, CUDA), whose host keeps none of its own,
 * --weights' rows (mt_decoder_opts.weights_f16_rows, default
 * MT_WEIGHTS_ROWS_DEFAULT, or every row count for q8 where the integer
 * product serves: mt_q8_every_row) when --weights is not f32; else 0. */
int  mt_decoder_host_weight_rows(const mt_decoder *d);
enum { MT_WEIGHTS_ROWS_DEFAULT = 8 };
/* The weights asked for (mt_decoder_opts.weights): q8 makes the depformer
 * keep 8-bit copies too. */
mt_num_format mt_decoder_weights_format(const mt_decoder *d);
/* Why the backend is what it is, for the caller to print: "" normally; with
 * MT_DEV_AUTO, e.g. "CUDA unavailable (no device): using CPU". */
const char *mt_decoder_note(const mt_decoder *d);
size_t mt_decoder_kv_elem_bytes(const mt_decoder *d);
/* Share of the device room a kv_budget_auto pool takes (the rest, with the
 * backend's reserve, is left for what grows after start-up). */
enum { MT_DECODER_AUTO_POOL_PCT = 95 };
/* A simulated device (MT_DEV_SIM): the device's label ("sim:NAME") for
 * every line that carries a figure; NULL on a real device (the backend's
 * sim_label, backend.h). */
const char *mt_decoder_sim_label(const mt_decoder *d);
/* Simulated device: the predicted (noiseless) and noise milliseconds of the
 * steps and prefills since the last call, then resets; returns 1. Returns 0
 * (both 0) on a real device. */
int mt_decoder_sim_take(mt_decoder *d, double *pred_ms, double *noise_ms);

int  mt_decoder_step(mt_decoder *d, int B, mt_kv_seq *const *seqs,
                     const mt_step_io *io, char *err, size_t errlen);
int  mt_decoder_prefill(mt_decoder *d, mt_kv_seq *seq, int n,
                        const mt_step_io *io, char *err, size_t errlen);

#ifdef MT_HAVE_CUDA
/* 1 if a usable GPU is present; else 0 with the reason. Loads the CUDA
 * backend's shared object (gpu/cuda_module.h) and with it the CUDA runtime and
 * cuBLAS, about 150 MB of RSS. */
int  mt_cuda_available(char *why, size_t whylen);
/* mt_cuda_device_present and mt_cuda_select_gpu: gpu/cuda_module.h.
 * --device auto asks the first before anything is loaded, so a machine
 * without a GPU never maps the CUDA libraries. */
#endif

#endif
