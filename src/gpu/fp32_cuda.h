/* fp32_cuda.h: the stream and cuBLAS handle that the fp32 CUDA paths
 * (Mimi's codec, Kyutai's depformer) each open and close the same way.
 * CUDA module only: include it from *_cuda.c files. */
#ifndef MT_DECODE_FP32_CUDA_H
#define MT_DECODE_FP32_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>

/* A non-blocking stream and a cuBLAS handle on it in plain fp32 (pedantic
 * math: no TF32 rounding of the SGEMMs' inputs, so parity tests hold to
 * float32 tolerance). -1 with "WHO: ..." in err; what was opened is left
 * in *stream / *blas (NULL otherwise) for mt_cu_fp32_close. */
int mt_cu_fp32_open(cudaStream_t *stream, cublasHandle_t *blas, const char *who, char *err,
                    size_t errlen);

/* cudaFree of each non-NULL dev[i] (dev [ndev]), then the handle and the
 * stream when not NULL. */
void mt_cu_fp32_close(cudaStream_t stream, cublasHandle_t blas, void *const *dev, size_t ndev);

#endif
