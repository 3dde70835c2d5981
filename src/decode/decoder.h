/* decoder.h: the backend-neutral batched step.
 *
 * One call advances B sessions by one position each. Each session brings
 * its own KV sequence (kv.h) and length; the caller has already made room
 * with mt_kv_reserve(seq, 1) for every one of them, so a step never fails
 * for lack of cache. Backends: CPU (backend_cpu.c, fp32 + OpenBLAS) always; CUDA
 * (backend_cuda.c + kernels/, bf16 + cuBLAS) when built with nvcc.
 *
 * Lengths: a step writes position seq->len of each session (prefill:
 * seq->len .. seq->len+n-1); mt_decoder_step / mt_decoder_prefill advance
 * seq->len after the backend returns 0. Backends never change len.
 *
 * The KV pool: decoder.c sets kv.position_bytes before it creates the pool
 * and then the backend: layers * 2 (K,V) * kv_heads * head_dim * element
 * size, the element being fp32 (4 bytes) on CPU and bf16 (2 bytes) on
 * CUDA. A backend constructor reads mt_kv_pool_params(pool)->position_bytes
 * and mt_kv_pool_blocks(pool), owns storage for that many blocks addressed
 * by block id, and sets be->position_bytes to the same value (checked).
 *
 * Adapters (backend-neutral semantics):
 *   audio in:  x = audio_in . (pcm / 32768)
 *   audio out: y = audio_out . rmsnorm(h_final); pcm = lrint(clamp(y,-1,1)
 *              * 32767); audio_passthrough models copy pcm_in to pcm_out
 *              (the backbone still runs).
 *   token in:  x = embed_tokens[id] (ids checked in decoder.c: 0 <= id < vocab)
 *   logits:    lm_head . rmsnorm(h_final)
 * Outputs that are NULL (or that the model has no adapter for) are skipped.
 */
#ifndef MT_DECODER_H
#define MT_DECODER_H

#include <stddef.h>
#include <stdint.h>
#include "model/model.h"
#include "decode/kv.h"

typedef enum mt_device { MT_DEV_AUTO = 0, MT_DEV_CPU = 1, MT_DEV_CUDA = 2,
                         MT_DEV_SIM = 3 /* backend_sim.h */ } mt_device;

typedef struct mt_decoder_opts {
    mt_device    device;
    int          max_batch;   /* largest B a step will be given */
    int          threads;     /* CPU threads; 0 = all cores */
    mt_kv_params kv;          /* policy, S, W, rope, budget_bytes;
                                 position_bytes is filled in by decoder.c
                                 (see above) */
    /* MT_DEV_SIM (backend_sim.h): the profile, a built-in name or a path;
     * kv.budget_bytes 0 takes the profile's budget (memory less weights
     * less reserve). The model may be a shape-only load. */
    const char  *sim_profile;
} mt_decoder_opts;

/* Inputs and outputs of one step; exactly one of pcm / tokens is used. */
typedef struct mt_step_io {
    const int16_t *pcm_in;    /* [B, frame_samples]  audio adapter */
    int16_t       *pcm_out;   /* [B, frame_samples] */
    const int32_t *tokens_in; /* [B]                 token adapter */
    float         *logits;    /* [B, vocab] */
} mt_step_io;

/* The backend interface decoder.c dispatches to. */
typedef struct mt_backend {
    const char *name;         /* "cpu", "cuda" */
    void       *impl;
    size_t      position_bytes;
    /* B sessions one position each. */
    int  (*step)(struct mt_backend *be, int B, mt_kv_seq *const *seqs,
                 const mt_step_io *io, char *err, size_t errlen);
    /* One session, n positions from its current len (recompute after a
     * release); io as for a batch of n rows of one session; outputs may be
     * NULL (only the cache is wanted). */
    int  (*prefill)(struct mt_backend *be, mt_kv_seq *seq, int n,
                    const mt_step_io *io, char *err, size_t errlen);
    /* Optional (NULL: nothing to do): a step is due shortly (about
     * MT_DECODER_WAKE_NS from now); wake what sleeps between steps. */
    void (*wake)(struct mt_backend *be);
    void (*destroy)(struct mt_backend *be);
} mt_backend;

typedef struct mt_decoder mt_decoder;

int  mt_decoder_create(const mt_model *m, const mt_decoder_opts *o,
                       mt_decoder **out, char *err, size_t errlen);
void mt_decoder_free(mt_decoder *d);
mt_kv_pool *mt_decoder_pool(mt_decoder *d);
const char *mt_decoder_backend_name(const mt_decoder *d);
const mt_model *mt_decoder_model(const mt_decoder *d);
/* A step is due in about MT_DECODER_WAKE_NS: lets a backend whose threads
 * sleep between steps wake them ahead of it (on a VM a sleeping thread
 * takes up to milliseconds to run again, paid inside the step otherwise).
 * Cheap, never blocks for long, and optional: a step without it is the
 * same step. */
enum { MT_DECODER_WAKE_NS = 1500000 };
void mt_decoder_wake(mt_decoder *d);
/* Why the backend is what it is, for the caller to print: "" normally; with
 * MT_DEV_AUTO, e.g. "CUDA unavailable (no device): using CPU". */
const char *mt_decoder_note(const mt_decoder *d);
/* Simulated device (MT_DEV_SIM): the device's label ("sim:NAME") for
 * every line that carries a figure; NULL on a real device. */
const char *mt_decoder_sim_label(const mt_decoder *d);
/* Simulated device: the predicted (noiseless) and noise milliseconds of the
 * steps and prefills since the last call, then resets; returns 1. Returns 0
 * (both 0) on a real device. */
int mt_decoder_sim_take(mt_decoder *d, double *pred_ms, double *noise_ms);
/* KV bytes of one position for a backend ("cpu" or "cuda") and model. */
size_t mt_decoder_position_bytes(const mt_config *c, const char *backend);

int  mt_decoder_step(mt_decoder *d, int B, mt_kv_seq *const *seqs,
                     const mt_step_io *io, char *err, size_t errlen);
int  mt_decoder_prefill(mt_decoder *d, mt_kv_seq *seq, int n,
                        const mt_step_io *io, char *err, size_t errlen);

/* Backend constructors (position_bytes and kv budget from opts). */
int  mt_cpu_backend_create(const mt_model *m, mt_kv_pool *pool,
                           const mt_decoder_opts *o, mt_backend **out,
                           char *err, size_t errlen);
#ifdef MT_HAVE_CUDA
int  mt_cuda_backend_create(const mt_model *m, mt_kv_pool *pool,
                            const mt_decoder_opts *o, mt_backend **out,
                            char *err, size_t errlen);
/* 1 if a usable GPU is present; else 0 with the reason. */
int  mt_cuda_available(char *why, size_t whylen);
#endif

#endif
