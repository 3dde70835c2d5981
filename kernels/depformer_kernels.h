/* depformer_kernels.h: launchers of the depformer's CUDA kernels
 * (kernels/depformer.cu), callable from C (src/decode/depformer_cuda.c).
 * fp32 throughout, rows [B][n] as in depformer.c. Each launcher enqueues
 * on the given stream and returns the launch's cudaError_t as an int. */
#ifndef MT_DEPFORMER_KERNELS_H
#define MT_DEPFORMER_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[r] = x[r] * (w * rsqrt(eps + mean(x[r]^2))) */
int mt_cu_dep_rmsnorm(float *out, const float *x, const float *w, int B, int n, float eps,
                      void *stream);
/* x[r] += table[tok[r]] (tok -1: nothing) */
int mt_cu_dep_add_emb(float *x, const float *table, const int32_t *tok, int B, int n,
                      void *stream);
/* Step k of the frame for each row r: k and v of qkv [B][3 dd] into the
 * row's frame cache kv [maxb][2][Q][dd] (of this layer), then
 * att [B][dd] = softmax(q.k / sqrt(hd)) v over steps 0..k, per head. */
int mt_cu_dep_attention(const float *qkv, float *kv, float *att, int B, int Q, int dd, int nh,
                        int k, void *stream);
/* gu [B][2F]: gu[r][i] = silu(gu[r][i]) * gu[r][F + i] for i < F */
int mt_cu_dep_swiglu(float *gu, int B, int F, void *stream);

#ifdef __cplusplus
}
#endif
#endif
