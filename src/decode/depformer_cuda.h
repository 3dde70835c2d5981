/* depformer_cuda.h: the boundary between depformer.c and the depformer's
 * CUDA implementation (depformer_cuda.c + kernels/depformer.cu) in the
 * dlopen'd CUDA module (cuda_module.h), exported as DEP_CUDA_OPS_SYM.
 * Weights copied to the device in fp32, GEMMs cuBLAS SGEMM over the rows
 * (plain fp32, no TF32), the frame's K/V on the device; h is uploaded at
 * a frame's start, each step's previous tokens up and logits down (the
 * sampler between steps is the host's); or, with frame, all dep_q steps
 * and their sampling on the device and one synchronisation a frame. */
#ifndef MT_DEPFORMER_CUDA_H
#define MT_DEPFORMER_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "model/kyutai_lm.h"

enum { DEP_CUDA_ABI = 2 };
#define DEP_CUDA_OPS_SYM "mt_depformer_cuda_ops_get"

typedef struct mt_dep_cuda mt_dep_cuda;

typedef struct mt_dep_cuda_ops {
    int    abi;        /* DEP_CUDA_ABI of the module's build */
    size_t lm_size;    /* sizeof(mt_kyutai_lm) there */
    int  (*create)(const mt_kyutai_lm *lm, int max_batch, mt_dep_cuda **out, char *err,
                   size_t errlen);
    void (*destroy)(mt_dep_cuda *g);
    /* h [B, dim] (host) */
    int  (*begin)(mt_dep_cuda *g, int B, const float *h, char *err, size_t errlen);
    /* prev [B], logits [B, card] (host) */
    int  (*next)(mt_dep_cuda *g, int k, const int32_t *prev, float *logits, char *err,
                 size_t errlen);
    size_t (*device_bytes)(const mt_dep_cuda *g);
    /* The whole frame after begin, sampling on the device (kernels/
     * sample.cu, the host sampler's draw): text [B] (step 0's previous
     * token), temp / top_k / greedy [B] each row's sampling, rng [B][4]
     * each row's xoshiro256** state (advanced), audio [B][dep_q] the
     * tokens; one host synchronisation. -1 with err (the card too long
     * for the kernel included). */
    int  (*frame)(mt_dep_cuda *g, const int32_t *text, const float *temp, const int *top_k,
                  const int *greedy, uint64_t *rng, int32_t *audio, char *err, size_t errlen);
} mt_dep_cuda_ops;

typedef const mt_dep_cuda_ops *(*mt_dep_cuda_ops_get_fn)(void);
const mt_dep_cuda_ops *mt_depformer_cuda_ops_get(void);

#endif
