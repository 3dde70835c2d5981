/* sample_kernels.h: Kyutai's token sampling on the device
 * (kernels/sample.cu), callable from C (src/decode/depformer_cuda.c): the
 * host sampler's draw (decode/kyutai.c) per row, each row with its own
 * xoshiro256** state, so that a frame's codebook steps need no host round
 * trip. The launcher enqueues on the stream and returns the launch's
 * cudaError_t as an int. */
#ifndef MT_SAMPLE_KERNELS_H
#define MT_SAMPLE_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One row's sampling: greedy (argmax), or temperature and top k. */
typedef struct mt_cu_samp {
    float temp;
    int   top_k;    /* <= 0 or >= n: all */
    int   greedy;
} mt_cu_samp;

/* The largest row length the kernel takes (the row in shared memory). */
int mt_cu_sample_max_n(void);
/* For each row r of logits [B][n]: tok[r] = out[r * out_stride] = its
 * token by sp[r], rng [B][4] (xoshiro256** states) advanced as the host's
 * would be. */
int mt_cu_sample(const float *logits, int B, int n, const mt_cu_samp *sp,
                 unsigned long long *rng, int32_t *tok, int32_t *out, int out_stride,
                 void *stream);

#ifdef __cplusplus
}
#endif
#endif
