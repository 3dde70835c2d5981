/* mimi_cuda.h: the boundary between the codec (mimi_engine.c) and Mimi's
 * CUDA implementation (mimi_cuda.c + kernels/mimi.cu), which lives in the
 * dlopen'd CUDA module (libmetronome_cuda.so, gpu/cuda_module.h) so
 * that a process on the CPU maps no CUDA library. The module exports
 * MIMI_CUDA_OPS_SYM, found with mt_cuda_module_sym (cuda_loader.c).
 *
 * The CUDA side keeps every session's state on the device, in a pool of
 * max_sessions slots (one mimi_state.x each); calls name sessions by
 * slot. Its arithmetic is fp32 throughout (cuBLAS SGEMM without TF32), the
 * CPU's in another order of summation. */
#ifndef MT_MIMI_CUDA_H
#define MT_MIMI_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "codec/mimi.h"

/* Bumped whenever mimi_cuda_ops or what its functions take changes. */
enum { MIMI_CUDA_ABI = 1 };
#define MIMI_CUDA_OPS_SYM "mimi_cuda_ops_get"

typedef struct mimi_cuda mimi_cuda;

typedef struct mimi_cuda_ops {
    int    abi;          /* MIMI_CUDA_ABI of the module's build */
    size_t model_size;   /* sizeof(struct mimi_model) there: a layout check */
    /* Weights copied to the device; m must outlive the context (its
     * geometry is read at every call). Slots start reset. */
    int  (*create)(const mimi_model *m, int max_batch, int max_sessions, mimi_cuda **out,
                   char *err, size_t errlen);
    void (*destroy)(mimi_cuda *g);
    int  (*reset)(mimi_cuda *g, int slot, char *err, size_t errlen);
    /* As mimi_encode / mimi_decode, sessions named by distinct slots (the
     * caller has checked slots, B and the codes' range). */
    int  (*encode)(mimi_cuda *g, const int *slot, int B, const float *pcm, int32_t *codes,
                   char *err, size_t errlen);
    int  (*decode)(mimi_cuda *g, const int *slot, int B, const int32_t *codes, float *pcm,
                   char *err, size_t errlen);
    size_t (*device_bytes)(const mimi_cuda *g);
} mimi_cuda_ops;

typedef const mimi_cuda_ops *(*mimi_cuda_ops_get_fn)(void);
const mimi_cuda_ops *mimi_cuda_ops_get(void);

#endif
