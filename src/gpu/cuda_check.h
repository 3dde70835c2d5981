/* cuda_check.h: the one CUDA error check of the CUDA module's host code
 * (backend_cuda.c, depformer_cuda.c, mimi_cuda.c, device_cuda.c): a failed
 * runtime call, kernel launch or cuBLAS call sets err ("WHO: WHAT: the
 * runtime's or cuBLAS's words") and returns -1 from the calling function,
 * which must have `char *err, size_t errlen` in scope.
 *
 * A file defines MT_CU_WHO (its messages' prefix, e.g. "mimi cuda")
 * before including this header. CUDA module only (cuda_runtime.h). */
#ifndef MT_GPU_CUDA_CHECK_H
#define MT_GPU_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "util/errmsg.h"

#ifndef MT_CU_WHO
#error "define MT_CU_WHO (the messages' prefix) before including gpu/cuda_check.h"
#endif

/* cuBLAS's status in words (cublasGetStatusString names them by enum). */
static inline const char *mt_cu_blas_str(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown status";
    }
}

/* A runtime call or a kernel wrapper (which returns cudaGetLastError() as
 * an int): anything but 0 is an error. */
#define CU(call, what)                                                                   \
    do {                                                                                 \
        int e_ = (int)(call);                                                            \
        if (e_ != 0) {                                                                   \
            mt_set_err(err, errlen, "%s: %s: %s", MT_CU_WHO, (what),                     \
                       cudaGetErrorString((cudaError_t)e_));                             \
            return -1;                                                                   \
        }                                                                                \
    } while (0)

/* A cuBLAS call. */
#define BL(call, what)                                                                   \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            mt_set_err(err, errlen, "%s: %s: cuBLAS %s", MT_CU_WHO, (what),              \
                       mt_cu_blas_str(s_));                                              \
            return -1;                                                                   \
        }                                                                                \
    } while (0)

#endif
