/* device_cuda.h: the process's one CUDA device context, shared by the
 * backbone (decode/backend_cuda.c), the depformer (decode/depformer_cuda.c)
 * and the Mimi codec (codec/mimi_cuda.c): one device, one non-blocking
 * stream and one cuBLAS handle on it, so that a speech frame's stages run
 * in order on one stream and one host synchronisation ends the frame.
 * CUDA module only.
 *
 * The device is the selected one (mt_cu_ctx_select, from `--gpu N`;
 * default 0), counted among the devices CUDA_VISIBLE_DEVICES leaves
 * visible, as the runtime counts them. The handle keeps cuBLAS's default
 * math mode: the fp32 paths (depformer, codec) ask for plain fp32 per
 * call (CUBLAS_COMPUTE_32F_PEDANTIC), the backbone for bf16 with fp32
 * accumulation, so no caller changes the shared handle's settings (which
 * cuBLAS does not allow across threads).
 *
 * The runtime's current device is a per-thread setting: every entry point
 * of the three users calls mt_cu_ctx_enter before its first CUDA call, so
 * a step on another thread than the one that created the context runs on
 * the same device. */
#ifndef MT_GPU_DEVICE_CUDA_H
#define MT_GPU_DEVICE_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>

typedef struct mt_cu_ctx {
    int            device;   /* runtime ordinal (among the visible devices) */
    cudaStream_t   stream;
    cublasHandle_t blas;
    void          *workspace;  /* cuBLAS's, fixed: a GEMM captured into a graph
                                  allocates nothing (MT_CU_WORKSPACE bytes) */
} mt_cu_ctx;

#define MT_CU_WORKSPACE ((size_t)32 << 20)

/* The device the next context opens on (gpu >= 0). -1 with err set when
 * a context is open on another device, or gpu is out of range. */
int  mt_cu_ctx_select(int gpu, char *err, size_t errlen);
/* The selected device's ordinal (0 unless mt_cu_ctx_select said else). */
int  mt_cu_ctx_selected(void);
/* The shared context, opened on the first call (device, stream, handle)
 * and counted; who prefixes messages. -1 with err set. */
int  mt_cu_ctx_open(const char *who, const mt_cu_ctx **out, char *err, size_t errlen);
/* Drops one count; the last closes the handle and the stream (after a
 * synchronisation). NULL is a no-op. */
void mt_cu_ctx_close(const mt_cu_ctx *c);
/* Makes c's device the calling thread's current one. */
int  mt_cu_ctx_enter(const mt_cu_ctx *c, char *err, size_t errlen);

#endif
