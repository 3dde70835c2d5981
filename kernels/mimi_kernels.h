/* mimi_kernels.h: launchers of Mimi's CUDA kernels (kernels/mimi.cu),
 * callable from C (src/codec/mimi_cuda.c). The GEMMs are cuBLAS's; these
 * are the steps around them. Every launcher enqueues on the given stream
 * and returns the launch's cudaError_t as an int (0 = success).
 *
 * Layout as on the CPU (mimi.c): activations [channels][B * steps],
 * column n = b * steps + t; session b's streaming state is the float array
 * st + slot[b] * stride (the CPU's mimi_state.x, one row per slot of the
 * device's state pool), offsets into it as in mimi_impl.h. */
#ifndef MT_MIMI_KERNELS_H
#define MT_MIMI_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Geometry of one streaming convolution (mimi_conv's fields). */
typedef struct mt_cu_conv {
    int cin, cout, k, stride, dil, tin, tout, ctx, grouped;
    size_t st;      /* offset of its state within a session's state */
} mt_cu_conv;

/* x = x > 0 ? x : expm1(x), dst may be src */
int mt_cu_mimi_elu(float *dst, const float *src, size_t n, void *stream);
/* dst += src */
int mt_cu_mimi_add(float *dst, const float *src, size_t n, void *stream);
/* Y [cout][N] = bias[co] (0 without bias) */
int mt_cu_mimi_bias(float *Y, const float *bias, int cout, size_t N, void *stream);
/* The downsampling convolution's first frame: its context set to the
 * first input step, for sessions b with first[b] != 0. */
int mt_cu_mimi_replicate(const mt_cu_conv *cv, float *st, size_t stride, const int32_t *slot,
                         const int32_t *first, int B, const float *X, void *stream);
/* col [cin*k][B*tout]: row (ci, kk), column (b, t) = the padded input at
 * t*stride + kk*dil, the padding being session b's context. */
int mt_cu_mimi_im2col(const mt_cu_conv *cv, const float *st, size_t stride, const int32_t *slot,
                      int B, const float *X, float *col, void *stream);
/* The new left context: the last ctx steps of context ++ X. */
int mt_cu_mimi_conv_state(const mt_cu_conv *cv, float *st, size_t stride, const int32_t *slot,
                          int B, const float *X, void *stream);
/* Transposed convolution's overlap-add: Y [cout][B*tout] = bias + the
 * taps landing in the frame (Z [cout*k][B*tin] from the GEMM, or for a
 * grouped one w [cout][k] times X [cout][B*tin]) + the pending overlap;
 * the new overlap (taps past the frame) replaces it. Needs ctx <= tout. */
int mt_cu_mimi_convtr_ola(const mt_cu_conv *cv, float *st, size_t stride, const int32_t *slot,
                          int B, const float *Z, const float *w, const float *X,
                          const float *bias, float *Y, void *stream);
/* h [d][N] = LayerNorm(x) * g + b over each column (eps 1e-5) */
int mt_cu_mimi_layer_norm(float *h, const float *x, const float *g, const float *b, int d,
                          size_t N, void *stream);
/* Rotary on q and k rows of qkv [3d][B*T] at position pos0[b] + t
 * (pairs 2i, 2i+1 within each head), then k and v into session b's rings
 * at slot (pos0[b] + t) % cap: ring [cap][d] at offsets st_k, st_v. */
int mt_cu_mimi_rope_ring(float *qkv, float *st, size_t stride, const int32_t *slot,
                         const int64_t *pos0, int B, int T, int d, int hd, int cap,
                         double max_period, size_t st_k, size_t st_v, void *stream);
/* att [d][B*T] = softmax(q.k / sqrt(hd)) v over each session's ring,
 * causal and at most cap steps back, the ring written for this frame. */
int mt_cu_mimi_ring_attention(const float *qkv, float *att, const float *st, size_t stride,
                              const int32_t *slot, const int64_t *pos0, int B, int T, int d,
                              int hd, int cap, size_t st_k, size_t st_v, void *stream);
/* x [d][N] += s[i] * h (s NULL: 1) */
int mt_cu_mimi_scale_add(float *x, const float *h, const float *s, int d, size_t N, void *stream);
/* x = gelu(x) (erf form) */
int mt_cu_mimi_gelu(float *x, size_t n, void *stream);
/* For each session b: the nearest centroid of r [qd][B] given
 * sc [bins][B] = C r and |c|^2 (norm2 [bins]): code = argmin n2 - 2 sc,
 * lowest index on a tie; codes[b * nq + q] = code; r -= C[code]. */
int mt_cu_mimi_rvq_pick(const float *sc, const float *norm2, const float *cb, float *r,
                        int32_t *codes, int nq, int q, int bins, int qd, int B, void *stream);
/* sum [qd][B] += cb[codes[b * nq + q]] */
int mt_cu_mimi_dequant(const float *cb, const int32_t *codes, int nq, int q, int qd, int B,
                       float *sum, void *stream);

#ifdef __cplusplus
}
#endif
#endif
