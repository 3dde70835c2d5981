/* mimi.h: Mimi, Kyutai's causal neural audio codec (24 kHz PCM in frames of
 * 1920 samples <-> 8..32 codebook tokens at 12.5 Hz), streaming, batched
 * across sessions. The public contract of src/codec/.
 *
 * The pipeline, one frame per session per call:
 *   encode: SEANet encoder (causal convolutions, ELU, residual blocks,
 *           strided downsampling by the reversed ratios) -> encoder
 *           transformer (LayerNorm, rotary attention over a ring of
 *           `context` steps, GELU MLP, layer scale) -> stride-2
 *           downsampling convolution -> split RVQ (one semantic codebook on
 *           its own projection, the acoustic ones residual on theirs)
 *   decode: centroids summed and projected back -> channel-wise transposed
 *           upsampling -> decoder transformer -> SEANet decoder (transposed
 *           convolutions whose overlap is kept for the next frame).
 * Every layer works on a batch of sessions at once, activations laid out
 * [channels][session][time], convolutions as one sgemm per layer.
 *
 * A session's state (every convolution's left context, every transposed
 * convolution's pending overlap, both transformers' rings) is
 * mimi_state_bytes() bytes, fixed by the configuration. */
#ifndef MT_MIMI_H
#define MT_MIMI_H

#include <stddef.h>
#include <stdint.h>

#define MIMI_MAX_RATIOS 8

typedef struct mimi_config {
    int    sample_rate;          /* 24000 */
    double frame_rate;           /* 12.5 */
    /* SEANet (Kyutai's "seanet" block) */
    int dimension;               /* latent channels, 512 */
    int n_filters;               /* 64 */
    int n_residual_layers;       /* 1 */
    int n_ratios;
    int ratios[MIMI_MAX_RATIOS]; /* decoder order: 8, 6, 5, 4 */
    int kernel_size;             /* 7 */
    int residual_kernel_size;    /* 3 */
    int last_kernel_size;        /* 3 */
    int dilation_base;           /* 2 */
    int compress;                /* 2 */
    /* quantizer */
    int q_dimension;             /* 256 */
    int n_q;                     /* 32 codebooks in the checkpoint */
    int n_q_semantic;            /* 1 */
    int bins;                    /* 2048 */
    /* transformers (encoder and decoder alike) */
    int    d_model;              /* 512, equal to dimension */
    int    num_heads;            /* 8 */
    int    num_layers;           /* 8 */
    int    context;              /* 250 steps at the encoder rate */
    int    dim_feedforward;      /* 2048 */
    double max_period;           /* 10000 */
    int    layer_scale;          /* 1: layer_scale_{1,2}.scale present */
    /* a setting, not in the checkpoint: codebooks produced and consumed */
    int n_q_used;                /* 8 */
} mimi_config;

/* Kyutai's published configuration (their loaders.py _mimi_config), with
 * n_q_used = 8. */
void mimi_config_default(mimi_config *c);
/* The tiny configuration of the test fixtures (tests/fixtures/mimi). */
void mimi_config_tiny(mimi_config *c);
/* Parses Kyutai's configuration dictionary as JSON ({"sample_rate",
 * "frame_rate", "seanet": {...}, "quantizer": {...}, "transformer":
 * {...}}), on top of what *c holds (missing keys keep their values).
 * Settings this implementation does not have (non-causal, weight norm,
 * reflect padding, gating, another norm or positional embedding, input or
 * output projections in the transformer) are refused with the key. */
int mimi_config_parse(const char *json, size_t len, const char *what,
                      mimi_config *c, char *err, size_t errlen);
/* Checks derived quantities: integer strides, heads dividing d_model, etc. */
int mimi_config_check(const mimi_config *c, char *err, size_t errlen);

int mimi_frame_size(const mimi_config *c);      /* sample_rate / frame_rate */
int mimi_hop_length(const mimi_config *c);      /* product of the ratios */
int mimi_downsample_stride(const mimi_config *c);

typedef struct mimi_model mimi_model;
typedef struct mimi_state mimi_state;
typedef struct mimi_batch mimi_batch;

/* Loads spec: "synthetic:mimi" (the published shape, deterministic random
 * weights), "synthetic:mimi-tiny" (the fixtures' shape), optionally
 * ":seed=N"; a .safetensors file; or a directory holding one
 * (model.safetensors, or the only *.safetensors) and optionally
 * config.json. The configuration comes from config_path when given, else
 * the directory's config.json, else the checkpoint's "mimi_config"
 * metadata, else the published one. n_q_used <= 0 keeps the default (8,
 * or all the codebooks when fewer). */
int  mimi_load(const char *spec, const char *config_path, int n_q_used,
               mimi_model **out, char *err, size_t errlen);
/* The shape alone (no weights: state bytes, FLOPs, parameter count; not
 * for encode/decode): synthetic specs, or the configuration a checkpoint
 * file or directory would be loaded with (its tensors not read). */
int  mimi_load_shape(const char *spec, const char *config_path, int n_q_used,
                     mimi_model **out, char *err, size_t errlen);
/* The same from a safetensors image in memory (what the fuzz harness
 * drives). c is the configuration the tensors must match. Every tensor
 * Kyutai's state dict has for c must be present with its shape (F32, F16
 * or BF16); an unknown or mis-shaped tensor is refused, with its name and
 * the expected shape. */
int  mimi_load_mem(const void *buf, size_t len, const char *what,
                   const mimi_config *c, mimi_model **out, char *err, size_t errlen);
/* Deterministic random weights of c's shape. */
int  mimi_synthetic(const mimi_config *c, uint64_t seed, mimi_model **out,
                    char *err, size_t errlen);
void mimi_free(mimi_model *m);

const mimi_config *mimi_model_config(const mimi_model *m);
/* Changes the number of codebooks used (n_q_semantic..n_q). */
int    mimi_set_codebooks(mimi_model *m, int n, char *err, size_t errlen);
size_t mimi_param_count(const mimi_model *m);
/* Multiply-adds x 2 per frame of one session, encode and decode. */
double mimi_encode_flops(const mimi_model *m);
double mimi_decode_flops(const mimi_model *m);

/* One session's streaming state, zeroed at start: mimi_state_bytes() are
 * allocated by mimi_state_new, and encoding or decoding allocates nothing
 * more for the session, however long it runs. */
size_t      mimi_state_bytes(const mimi_model *m);
mimi_state *mimi_state_new(const mimi_model *m, char *err, size_t errlen);
void        mimi_state_reset(const mimi_model *m, mimi_state *s);
void        mimi_state_free(mimi_state *s);
/* Frames the session has encoded / decoded since its start. */
int64_t     mimi_state_frames_encoded(const mimi_state *s);
int64_t     mimi_state_frames_decoded(const mimi_state *s);

/* Workspace for batches of up to max_batch sessions. */
mimi_batch *mimi_batch_new(const mimi_model *m, int max_batch, char *err, size_t errlen);
void        mimi_batch_free(mimi_batch *w);
/* Runs the batch's encode and decode on `threads` threads (1..64; the
 * caller's is one of them, the others a pool the batch owns; 1 at
 * creation). The results are the same bits for any thread count: the
 * work is split by the shape alone (mimi.c). OpenBLAS inside the codec
 * should run on one thread (openblas_set_num_threads(1)), as mt-serve's
 * CPU backend sets it. -1 with err if the threads cannot start (the
 * batch then runs on one). */
int         mimi_batch_threads(mimi_batch *w, int threads, char *err, size_t errlen);
int         mimi_batch_thread_count(const mimi_batch *w);
/* The transformers' products of up to max_rows rows (a session's steps,
 * two a frame in the published shape), those of the SEANet layers with
 * a few steps a frame and the encoder's codebook search (mimi_q8.c), on
 * 8-bit copies of their matrices (decode/cpu_q8.h: a scale per block of
 * 32 weights, max|w| / 127; 89 MB where fp32 is 317 MB, published
 * shape), made here from the
 * model's; max_rows 0 turns them off (the fp32 products, the default;
 * copies made stay until the batch is freed, so that a benchmark may
 * toggle). The
 * results then differ from fp32 within that format's error (test_mimi
 * states the bound it checks) and stay the same bits for any thread
 * count. -1 with err on no memory or a weight not finite. */
int         mimi_batch_weights_q8(mimi_batch *w, int max_rows, char *err, size_t errlen);
/* The 8-bit copies' bytes (0 without). */
size_t      mimi_batch_q8_bytes(const mimi_batch *w);
size_t      mimi_batch_bytes(const mimi_batch *w);

/* Encodes one frame for each of B sessions: pcm [B][frame_size] ->
 * codes [B][n_q_used]. s[b] is session b's state (distinct). */
int mimi_encode(const mimi_model *m, mimi_batch *w, mimi_state *const *s, int B,
                const float *pcm, int32_t *codes, char *err, size_t errlen);
/* Decodes one frame for each of B sessions: codes [B][n_q_used] ->
 * pcm [B][frame_size]. A code outside [0, bins) is refused. */
int mimi_decode(const mimi_model *m, mimi_batch *w, mimi_state *const *s, int B,
                const int32_t *codes, float *pcm, char *err, size_t errlen);

/* Stage timings of the last call (seconds), for the benchmark: wall
 * time, or with mimi_batch_time_cpu(w, 1) the calling thread's CPU time
 * (the work itself on a shared machine, when BLAS runs on this thread). */
void mimi_batch_time_cpu(mimi_batch *w, int on);
enum { MIMI_ST_SEANET, MIMI_ST_TRANSFORMER, MIMI_ST_RESAMPLE, MIMI_ST_RVQ, MIMI_NSTAGES };
void mimi_batch_stage_seconds(const mimi_batch *w, double out[MIMI_NSTAGES]);
/* Per-op timings of the last call (seconds, the same clock as the
 * stages), op i of the call's graph, for the benchmark's per-layer
 * breakdown: returns the op count (at most max written to out).
 * mimi_op_describe names op i of encode (dir 0) or decode (1): its kind
 * and, for a convolution, cin->cout k stride steps; 0, or -1 past the end. */
int  mimi_batch_op_seconds(const mimi_batch *w, double *out, int max);
int  mimi_op_describe(const mimi_model *m, int dir, int i, char *buf, size_t len);
/* The kernels: 0 the current ones (default: mimi_conv.c's direct
 * convolution, mimi_skinny.c's products of up to 8 vectors), 1 the
 * previous ones (im2col + sgemm, products of up to 2 vectors on
 * dot8_multi), 2 the current ones but the transposed convolutions on
 * the previous sgemm + overlap-add (the kernels before mimi_convtr.c),
 * kept for side-by-side benchmarks (mt-benchcodec --compare [--old-tr]);
 * test_mimi checks the current ones against 1. */
void mimi_batch_old_kernels(mimi_batch *w, int old);
/* 0: every op of the graph by itself, none fused into the direct
 * convolution beside it (mimi_conv_fwd's MIMI_FUSE_*); 1 (default): fused.
 * test_mimi checks that both give the same bits. */
void mimi_batch_fuse(mimi_batch *w, int on);
/* FLOPs per session-frame of each stage, encode (dir 0) or decode (1). */
void mimi_stage_flops(const mimi_model *m, int dir, double out[MIMI_NSTAGES]);
/* The FLOPs per session-frame, encode (dir 0) or decode (1), that
 * mimi_batch_weights_q8 puts on the 8-bit product: the transformer's
 * weight products and the convolutions that get copies. */
double mimi_q8_flops(const mimi_model *m, int dir);

#endif
