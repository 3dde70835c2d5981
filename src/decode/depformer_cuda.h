/* depformer_cuda.h: the boundary between depformer.c and the depformer's
 * CUDA implementation (depformer_cuda.c + kernels/depformer.cu) in the
 * dlopen'd CUDA module (cuda_module.h), exported as DEP_CUDA_OPS_SYM.
 * Weights copied to the device in fp32, GEMMs cuBLAS SGEMM over the rows
 * (plain fp32, no TF32), the frame's K/V on the device; h is uploaded at
 * a frame's start, each step's previous tokens up and logits down (the
 * sampler between steps is the host's). */
#ifndef MT_DEPFORMER_CUDA_H
#define MT_DEPFORMER_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "model/kyutai_lm.h"

enum { DEP_CUDA_ABI = 1 };
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
} mt_dep_cuda_ops;

typedef const mt_dep_cuda_ops *(*mt_dep_cuda_ops_get_fn)(void);
const mt_dep_cuda_ops *mt_depformer_cuda_ops_get(void);

#endif
