/* mt_kernels.h: the CUDA kernels' launchers, callable from C (cuda_backend.c
 * and the GPU benchmark). Every launcher enqueues on the given stream and
 * returns the cudaError_t of the launch as an int (0 = cudaSuccess); none
 * synchronises. bf16 buffers are typed uint16_t here so that C code needs
 * no CUDA headers beyond cuda_runtime.h.
 *
 * KV pool layout on the device (the same as the CPU backend's, in bf16):
 *   pool[block][layer][k|v][kv_head][MT_KV_BLOCK slots][head_dim]
 * Keys are always stored rotated by their absolute position. In window /
 * cache rope mode the query is rotated twice instead: by its absolute
 * position for the ring (a ring key's cache index differs from its absolute
 * position by the same offset as the query's, so q.k is unchanged) and by
 * its cache index for the sink slots (see attention.cu).
 */
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One attention row: a session at one position (a step has one row per
 * session; a prefill chunk has one row per position of one session). */
typedef struct mt_cu_row {
    int32_t table_off;  /* first entry of its block table in the tables array */
    int32_t nslots;     /* visible slots 0..nslots-1 after this row's append */
    int32_t write_slot; /* slot its new K,V go to */
    int32_t pos_abs;    /* rotary position of its key and of the ring query */
    int32_t pos_sink;   /* rotary position of the query against sink slots */
    int32_t sink;       /* slots < sink are sinks (0 in full policy) */
} mt_cu_row;

/* Model dimensions the attention kernels need. */
typedef struct mt_cu_dims {
    int layers, heads, kv_heads, head_dim;
} mt_cu_dims;

/* out[r, :] = bf16(x[r, :] * rsqrt(mean(x^2) + eps) * w) */
int mt_cu_rmsnorm(const float *x, const float *w, uint16_t *out, int rows,
                  int n, float eps, void *stream);
/* out[r, i] = bf16(silu(gu[r, i]) * gu[r, ffn + i]) */
int mt_cu_swiglu(const float *gu, uint16_t *out, int rows, int ffn,
                 void *stream);
/* out = bf16(pcm / 32768) */
int mt_cu_pcm_to_bf16(const int16_t *pcm, uint16_t *out, size_t n,
                      void *stream);
/* pcm = lrint(clamp(y, -1, 1) * 32767) */
int mt_cu_f32_to_pcm(const float *y, int16_t *pcm, size_t n, void *stream);
/* x[r, :] = float(embed[tok[r], :]) */
int mt_cu_embed(const uint16_t *embed, const int32_t *tok, float *x, int rows,
                int hidden, void *stream);
/* dst = bf16(src) */
int mt_cu_f32_to_bf16(const float *src, uint16_t *dst, size_t n, void *stream);
/* Deterministic synthetic weights: dst[i] = std * sqrt(3) * u(seed, i),
 * u uniform in [-1, 1) from a splitmix64 hash of (seed, i). */
int mt_cu_fill_uniform_bf16(uint16_t *dst, size_t n, uint64_t seed, float std,
                            void *stream);
int mt_cu_fill_f32(float *dst, size_t n, float v, void *stream);
/* dst[i] = amp * u(seed, i), u uniform in [-1, 1) (benchmark data). */
int mt_cu_fill_uniform_f32(float *dst, size_t n, uint64_t seed, float amp,
                           void *stream);

/* The rotary table of a call: cs[r][v][0][i] = cos(pos * inv_freq[i]),
 * cs[r][v][1][i] = sin(...), v = 0 at pos_abs, v = 1 at pos_sink; i <
 * head_dim/2. Angles in double, stored as float. The angles are the same
 * in every layer, so a step builds the table once, not once per layer. */
int mt_cu_rope_table(const mt_cu_row *rows, const double *inv_freq, float *cs,
                     int nrows, int head_dim, void *stream);

/* Rotary + KV append for every row: q (raw, from qkv [rows, (H+2Hkv)*D])
 * rotated by pos_abs and pos_sink, scaled by log2(e)/sqrt(D), to
 * qrot [rows][2][H][D] (0 ring, 1 sink); k rotated by pos_abs and v, as
 * bf16, to the pool at write_slot of layer `layer`. rope_cs: the call's
 * table (mt_cu_rope_table). */
int mt_cu_rope_append(const float *qkv, const mt_cu_row *rows,
                      const int32_t *tables, uint16_t *pool, float *qrot,
                      const float *rope_cs, int nrows, int layer,
                      mt_cu_dims d, void *stream);

/* Qwen backbones, in place on qkv [rows, (H+2Hkv)*D] before
 * mt_cu_rope_append: += bias [(H+2Hkv)*D] (q|k|v biases, NULL for none),
 * then each q head RMSNorm'd with qk_norm[0..D) and each k head with
 * qk_norm[D..2D) (NULL for none), eps as the model's rms_norm_eps. */
int mt_cu_qwen_qkv(float *qkv, const float *bias, const float *qk_norm, int rows,
                   int heads, int kv_heads, int head_dim, float eps, void *stream);

/* Largest number of splits of the window the attention uses. */
#define MT_CU_MAX_SPLITS 32

/* Attention of every row's query heads over its visible slots, split in
 * nsplit chunks of `chunk` ring slots (flash-decoding), partials in
 * part [rows][H][nsplit][D+2] (acc, then max and sum, base 2), combined
 * into out [rows, H*D] bf16. */
int mt_cu_attention(const float *qrot, const mt_cu_row *rows,
                    const int32_t *tables, const uint16_t *pool, float *part,
                    uint16_t *out, int nrows, int layer, int nsplit, int chunk,
                    mt_cu_dims d, void *stream);
/* 0 if the kernels support these dims, else -1 with the reason. */
int mt_cu_attention_supported(mt_cu_dims d, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
