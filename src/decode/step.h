/* step.h: the types one decode step is made of, shared by the decoder
 * (decoder.c) and every backend (backend.h) without either including the
 * other: the device and number-format names, the decoder's options, a
 * step's inputs and outputs, a backend's constructor, and the one formula
 * for the K/V bytes of a position.
 */
#ifndef MT_STEP_H
#define MT_STEP_H

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
    MT_FMT_DEFAULT = 0, MT_FMT_F32 = 1, MT_FMT_F16 = 2,
    MT_FMT_Q8 = 3   /* weights only: 8-bit blocks with a scale (cpu_q8.h) */
} mt_num_format;

/* The codec a speech model's sessions carry (Kyutai's Mimi, decode/
 * speech.c), in the numbers the simulated device books for it: all zero
 * when the model has none. */
typedef struct mt_codec_cost {
    double flops;          /* encode + decode of one frame of one session */
    double state_bytes;    /* one session's streaming state */
    double weight_bytes;   /* the codec's weights as the device holds them */
} mt_codec_cost;

typedef struct mt_decoder_opts {
    mt_device    device;
    int          max_batch;   /* largest B a step will be given */
    int          threads;     /* CPU threads; 0 = all cores */
    mt_kv_params kv;          /* policy, S, W, rope, budget_bytes;
                                 position_bytes is filled in when the pool
                                 is made (mt_backend_pool_create) */
    int          kv_budget_auto; /* 1: kv.budget_bytes is only a default: a
                                    backend with device memory (CUDA) sizes
                                    the pool to MT_DECODER_AUTO_POOL_PCT % of
                                    the room it reports instead */
    mt_num_format kv_dtype;   /* CPU K/V elements: f32 or f16 (IEEE half) */
    mt_num_format weights;    /* CPU: f16 adds a half copy of the weights,
                                 used for calls of up to weights_f16_rows
                                 rows (0: the measured crossover); q8 an
                                 8-bit copy (cpu_q8.h) used the same way */
    int          weights_f16_rows;
    /* MT_DEV_SIM (backend_sim.h): the profile, a built-in name or a path;
     * kv.budget_bytes 0 takes the profile's budget (memory less weights
     * less reserve). The model may be a shape-only load. */
    const char  *sim_profile;
    /* MT_DEV_SIM: every modeled duration is divided by this (<= 1: none),
     * so a run of model time T takes T/K of real time (mt-serve
     * --time-scale). */
    double       sim_time_scale;
    /* MT_DEV_SIM: the sessions' codec, booked by the simulated device
     * (time a step, state and weights out of the K/V budget; backend_sim.h);
     * zero: none. Other backends ignore it. */
    mt_codec_cost codec;
} mt_decoder_opts;

/* Inputs and outputs of one step; exactly one of pcm_in / tokens_in / x_in
 * is used. */
typedef struct mt_step_io {
    const int16_t *pcm_in;    /* [B, frame_samples]  audio adapter */
    int16_t       *pcm_out;   /* [B, frame_samples] */
    const int32_t *tokens_in; /* [B]                 token adapter */
    float         *logits;    /* [B, vocab] */
    const int64_t *positions; /* [B] each row's rotary position as its
                                 adapter numbers it (Qwen2.5-Omni's position
                                 ids, one a token for audio or text alone),
                                 or NULL: the session's slot index. Its key
                                 is stored rotated by it. Steps only (not
                                 prefill), in 0..2^31-1, and only where
                                 rotary positions are absolute: the full
                                 policy or --rope absolute (a cache-mode
                                 window numbers positions by slot). */
    /* Vector input (a caller that embeds its own streams, e.g. Kyutai's
     * summed text and codebook embeddings): used instead of pcm_in and
     * tokens_in. */
    const float   *x_in;      /* [B, hidden]         x = x_in */
    float         *h_out;     /* [B, hidden]         rmsnorm(h_final) * norm
                                 (CUDA: rounded to bf16, as its heads read it) */
} mt_step_io;

/* How long before a step mt_decoder_wake is called (decoder.h). */
enum { MT_DECODER_WAKE_NS = 1500000 };
/* How long a host pool's worker spins before it sleeps (the CPU backend's,
 * cpu_pool.c, and a decoder's own host pool, decoder.c): through a whole
 * step, and past the wake-up ahead of the next tick (util/tpool.c). */
enum { MT_DECODER_SPIN_NS = 2 * MT_DECODER_WAKE_NS };

/* A backend constructor (backend.h): builds the backend without a pool;
 * the pool is then sized from the backend's kv_elem_bytes. */
struct mt_backend;
/* Work for thread tid of nt (mt_decoder_parallel). */
typedef void (*mt_par_fn)(void *ctx, int tid, int nt);

typedef int (*mt_backend_create_fn)(const mt_model *m, const mt_decoder_opts *o,
                                    struct mt_backend **out, char *err, size_t errlen);

/* KV bytes of one position of the model for a K/V element of elem_bytes:
 * layers * 2 (K,V) * kv_heads * head_dim * elem_bytes. Every pool, backend
 * and simulated device takes its position size from here. */
size_t mt_decoder_position_bytes(const mt_config *c, size_t elem_bytes);

/* Bytes of one element of a CPU number format (f32 4, f16 2; DEFAULT is
 * f32): position bytes for a pool sized before a decoder exists. */
size_t mt_num_format_bytes(mt_num_format f);
/* "f32", "f16" for a format (DEFAULT resolved as the CPU backend does);
 * parse: 0, or -1 for an unknown name. */
const char *mt_num_format_name(mt_num_format f);
int mt_num_format_parse(const char *s, mt_num_format *out);

#endif
