/* fp32_cuda.c: the stream and fp32 cuBLAS handle shared by the Mimi and
 * depformer CUDA paths (fp32_cuda.h). Built into the CUDA module. */
#include "gpu/fp32_cuda.h"
#include "util/errmsg.h"

int mt_cu_fp32_open(cudaStream_t *stream, cublasHandle_t *blas, const char *who, char *err,
                    size_t errlen)
{
    *stream = NULL;
    *blas = NULL;
    cudaError_t ce = cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        *stream = NULL;
        mt_set_err(err, errlen, "%s: stream: %s", who, cudaGetErrorString(ce));
        return -1;
    }
    if (cublasCreate(blas) != CUBLAS_STATUS_SUCCESS) {
        *blas = NULL;
        mt_set_err(err, errlen, "%s: cublasCreate failed", who);
        return -1;
    }
    if (cublasSetStream(*blas, *stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(*blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS) {
        mt_set_err(err, errlen, "%s: cuBLAS stream or math mode refused", who);
        return -1;
    }
    return 0;
}

void mt_cu_fp32_close(cudaStream_t stream, cublasHandle_t blas, void *const *dev, size_t ndev)
{
    for (size_t i = 0; i < ndev; i++)
        if (dev[i])
            (void)cudaFree(dev[i]);
    if (blas)
        (void)cublasDestroy(blas);
    if (stream)
        (void)cudaStreamDestroy(stream);
}
