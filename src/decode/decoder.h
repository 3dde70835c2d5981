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
 * The KV pool: decoder.c creates the backend first, then the pool with
 * position_bytes = layers * 2 (K,V) * kv_heads * head_dim * the element
 * size of the backend's K/V dtype (its kv_elem_bytes: fp32 4 or f16 2 bytes
 * on the CPU as opts.kv_dtype says, bf16 2 on CUDA), then has the backend attach storage for every
 * block (backend.h). On a device backend the pool is sized after the
 * weights, the activations and a warm-up step, keeping a reserve.
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

typedef enum mt_device { MT_DEV_AUTO = 0, MT_DEV_CPU = 1, MT_DEV_CUDA = 2,
                         MT_DEV_SIM = 3 /* backend_sim.h */ } mt_device;

/* Number format of the CPU backend's K/V cache and of its weights
 * (--kv-dtype, --weights). DEFAULT: the backend's choice (CPU: f32 K/V, f32
 * weights; CUDA: bf16 K/V whatever is asked). */
typedef enum mt_num_format {
    MT_FMT_DEFAULT = 0, MT_FMT_F32 = 1, MT_FMT_F16 = 2
} mt_num_format;

typedef struct mt_decoder_opts {
    mt_device    device;
    int          max_batch;   /* largest B a step will be given */
    int          threads;     /* CPU threads; 0 = all cores */
    mt_kv_params kv;          /* policy, S, W, rope, budget_bytes;
                                 position_bytes is filled in by decoder.c
                                 (see above) */
    int          kv_budget_auto; /* 1: kv.budget_bytes is only a default: a
                                    backend with device memory (CUDA) sizes
                                    the pool to MT_DECODER_AUTO_POOL_PCT % of
                                    the room it reports instead */
    mt_num_format kv_dtype;   /* CPU K/V elements: f32 or f16 (IEEE half) */
    mt_num_format weights;    /* CPU: f16 adds a half copy of the weights,
                                 used for calls of up to weights_f16_rows
                                 rows (0: the measured crossover) */
    int          weights_f16_rows;
    /* MT_DEV_SIM (backend_sim.h): the profile, a built-in name or a path;
     * kv.budget_bytes 0 takes the profile's budget (memory less weights
     * less reserve). The model may be a shape-only load. */
    const char  *sim_profile;
    /* MT_DEV_SIM: every modeled duration is divided by this (<= 1: none),
     * so a run of model time T takes T/K of real time (mt-serve
     * --time-scale). */
    double       sim_time_scale;
} mt_decoder_opts;

/* Inputs and outputs of one step; exactly one of pcm_in / tokens_in / x_in
 * is used. */
typedef struct mt_step_io {
    const int16_t *pcm_in;    /* [B, frame_samples]  audio adapter */
    int16_t       *pcm_out;   /* [B, frame_samples] */
    const int32_t *tokens_in; /* [B]                 token adapter */
    float         *logits;    /* [B, vocab] */
    /* Vector input (a caller that embeds its own streams, e.g. Kyutai's
     * summed text and codebook embeddings): used instead of pcm_in and
     * tokens_in. */
    const float   *x_in;      /* [B, hidden]         x = x_in */
    float         *h_out;     /* [B, hidden]         rmsnorm(h_final) * norm */
} mt_step_io;


typedef struct mt_decoder mt_decoder;
struct mt_backend;

/* A backend constructor (decode/backend.h): builds the backend without a
 * pool; the decoder then sizes the pool from the backend's kv_elem_bytes. */
typedef int (*mt_backend_create_fn)(const mt_model *m, const mt_decoder_opts *o,
                                    struct mt_backend **out, char *err, size_t errlen);

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
/* KV bytes of one position of the model for a K/V element of elem_bytes
 * (the backend's kv_elem_bytes; mt_decoder_kv_elem_bytes of a decoder). */
size_t mt_decoder_position_bytes(const mt_config *c, size_t elem_bytes);
size_t mt_decoder_kv_elem_bytes(const mt_decoder *d);
/* Share of the device room a kv_budget_auto pool takes (the rest, with the
 * backend's reserve, is left for what grows after start-up). */
enum { MT_DECODER_AUTO_POOL_PCT = 95 };
/* Bytes of one element of a CPU number format (f32 4, f16 2; DEFAULT is
 * f32): position bytes for a pool sized before a decoder exists. */
size_t mt_num_format_bytes(mt_num_format f);
/* "f32", "f16" for a format (DEFAULT resolved as the CPU backend does);
 * parse: 0, or -1 for an unknown name. */
const char *mt_num_format_name(mt_num_format f);
int mt_num_format_parse(const char *s, mt_num_format *out);
/* Simulated device (MT_DEV_SIM): the device's label ("sim:NAME") for
 * every line that carries a figure; NULL on a real device. */
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
 * backend's shared object (cuda_module.h) and with it the CUDA runtime and
 * cuBLAS, about 150 MB of RSS. */
int  mt_cuda_available(char *why, size_t whylen);
/* 1 if the kernel exposes a GPU device node (/dev/nvidia0..., nvidiactl,
 * or WSL's /dev/dxg), with its name in why; else 0 with the reason. Loads
 * nothing: --device auto asks this first, so a machine without a GPU never
 * maps the CUDA libraries. */
int  mt_cuda_device_present(char *why, size_t whylen);
#endif

#endif
