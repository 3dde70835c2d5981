/* backend.h: the interface a decode backend implements (CPU: backend_cpu.c,
 * CUDA: backend_cuda.c, the simulated device: backend_sim.c) and what the backends share (backend.c): the
 * constructor's model checks, the K/V element size, the pool's creation
 * and the slicing of a prefill into chunks.
 *
 * Life of a backend (two phases, so that a device backend can size the
 * pool from what it has left once everything else is in place):
 *   1. mt_*_backend_create(model, opts): weights, activations, threads;
 *      sets kv_elem_bytes (its K/V dtype) and, on a device, kv_room_bytes
 *      (the memory the pool may still take, after a warm-up step and a
 *      reserve). No pool yet.
 *   2. mt_backend_pool_create(be, kv params): position_bytes from
 *      kv_elem_bytes, the pool's bookkeeping (kv.h), then be->attach_pool,
 *      which allocates the storage behind the pool's block ids.
 * decoder.c does both; the benchmark and tests may too. A new backend is
 * its constructor below and one row of decoder.c's device table; the
 * decoder's checks, pool sizing and dispatch are the same for all.
 *
 * Only decoder.c, the backends, and tests and benchmarks that drive a
 * backend directly include this file; everything else goes through
 * decoder.h.
 */
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "decode/kv.h"
#include "decode/step.h"
#include "model/model.h"

/* Rows a prefill chunk runs at once; a backend sizes its activations for
 * max(max_batch, MT_BACKEND_PREFILL_CHUNK) rows (mt_backend_rows). */
enum { MT_BACKEND_PREFILL_CHUNK = 64 };

typedef struct mt_backend {
    const char *name;         /* "cpu", "cuda", "sim:NAME" */
    void       *impl;
    /* Bytes of one K or V element in the backend's cache dtype (fp32 4,
     * bf16 or f16 2): set by the constructor; the pool's position_bytes
     * follow from it (mt_decoder_position_bytes). */
    size_t      kv_elem_bytes;
    /* Memory the pool may still take on a device backend, measured after
     * the weights, the activations and one warm-up step, less the reserve;
     * 0 on the CPU (no device limit known). */
    size_t      kv_room_bytes;
    size_t      kv_reserve_bytes; /* that reserve (for messages) */
    /* The most the pool may take (0: no limit): a budget of 0 takes all of
     * it, a larger one is refused (the simulated device's profile). */
    size_t      kv_max_bytes;
    size_t      position_bytes;   /* set by mt_backend_pool_create */
    /* Time the last call spent copying its outputs back to the caller
     * (ms; 0 where not measured): for the benchmark. */
    double      out_copy_ms;
    /* Time the last step (not prefill) spent in its attention phases,
     * every layer's (ms; 0 where not measured): the benchmark divides the
     * K/V bytes the step read by it. */
    double      attention_ms;
    /* What the caller should know about this backend, for it to print
     * (NULL or "": nothing); may be set by attach_pool, which knows the
     * pool. */
    const char *note;
    /* A simulated device: its label ("sim:NAME"), carried by every figure
     * it yields; NULL on a real device. */
    const char *sim_label;
    /* Storage for every block of pool (mt_kv_pool_blocks), addressed by
     * block id; called once, by mt_backend_pool_create. */
    int  (*attach_pool)(struct mt_backend *be, mt_kv_pool *pool, char *err, size_t errlen);
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
    /* Optional (NULL: run fn inline as thread 0 of 1): runs fn(ctx, tid,
     * nt) on each of the backend's nt host threads and returns when all
     * are done (the CPU backend's pool; the Kyutai frame's depformer and
     * sampling, decode/kyutai.c). Not during a step. */
    void (*parallel)(struct mt_backend *be, mt_par_fn fn, void *ctx);
    int  par_threads;         /* the threads parallel runs on */
    /* Rows up to which the backend multiplies by its f16 weight copies
     * (--weights f16), 0 when it has none: the depformer follows it. */
    int  weights_f16_rows;
    /* Optional (NULL: a real device): the modeled (noiseless) and noise
     * milliseconds of the calls since the last one, then reset. */
    void (*take_modeled)(struct mt_backend *be, double *pred_ms, double *noise_ms);
    void (*destroy)(struct mt_backend *be);
} mt_backend;

/* Backend constructors. No pool yet: see the top of this file. */
int  mt_cpu_backend_create(const mt_model *m, const mt_decoder_opts *o,
                           mt_backend **out, char *err, size_t errlen);
#ifdef MT_HAVE_CUDA
int  mt_cuda_backend_create(const mt_model *m, const mt_decoder_opts *o,
                            mt_backend **out, char *err, size_t errlen);
/* Fills every slot of the pool with random bf16 values (for benchmarks:
 * never time on zeros, which hide unwritten outputs and can run faster). */
int  mt_cuda_backend_fill_kv_random(mt_backend *be, uint64_t seed, char *err,
                                    size_t errlen);
#endif

/* The simulated device (backend_sim.h): o->sim_profile names the profile,
 * o->sim_time_scale its time scale; the backend owns its mt_sim. */
int  mt_sim_backend_create(const mt_model *m, const mt_decoder_opts *o,
                           mt_backend **out, char *err, size_t errlen);

/* The checks every constructor starts with: a Llama shape the backends
 * can run (heads a multiple of kv_heads, even head_dim, positive sizes)
 * and a batch size in range. who prefixes the message ("cpu", "cuda"). */
int  mt_backend_check_model(const mt_model *m, const mt_decoder_opts *o, const char *who,
                            char *err, size_t errlen);
/* A zeroed mt_backend with a zeroed impl of impl_size bytes behind
 * ->impl, the start of every constructor; NULL with oom (the backend's
 * own "cpu: out of memory") in err. Freed as free(b->impl), free(b). */
mt_backend *mt_backend_alloc(size_t impl_size, const char *oom, char *err, size_t errlen);
/* Rows a backend's activations hold: max(max_batch, MT_BACKEND_PREFILL_CHUNK). */
int  mt_backend_rows(const mt_decoder_opts *o);

/* Creates the pool for be with kv's policy and budget (position_bytes is
 * computed here; a budget of 0 or over be->kv_max_bytes as said there) and
 * attaches it; *out is the caller's to free after the
 * backend. 0, or -1 with nothing left allocated. */
int  mt_backend_pool_create(mt_backend *be, const mt_config *c, const mt_kv_params *kv,
                            mt_kv_pool **out, char *err, size_t errlen);

/* A prefill of n positions from seq->len cut into chunks of at most
 * max_rows rows, none reaching past position cap (exclusive; INT64_MAX for
 * none) except one position at a time once base >= cap. run gets each
 * chunk's first position, its row count and io sliced to its rows. */
typedef int (*mt_prefill_chunk_fn)(mt_backend *be, mt_kv_seq *seq, int64_t base, int rows,
                                   const mt_step_io *io, char *err, size_t errlen);
int  mt_backend_prefill_chunks(mt_backend *be, const mt_config *c, mt_kv_seq *seq, int n,
                               const mt_step_io *io, int max_rows, int64_t cap,
                               mt_prefill_chunk_fn run, char *err, size_t errlen);

#endif
