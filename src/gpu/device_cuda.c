/* device_cuda.c: the process's one CUDA device context (device_cuda.h):
 * the selected device, one stream and one cuBLAS handle, counted by the
 * backbone, the depformer and the codec that share them. Built into the
 * CUDA module. */
#include "gpu/device_cuda.h"
#define MT_CU_WHO "cuda"
#include "gpu/cuda_check.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static mt_cu_ctx       ctx;        /* valid while refs > 0 */
static int             refs;
static int             selected;   /* the device the next open takes */

/* "device N of M visible" for messages, with the mask when one is set. */
static void visible_note(char *buf, size_t len, int n)
{
    const char *mask = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(buf, len, "%d visible%s%s%s", n, mask ? " (CUDA_VISIBLE_DEVICES=" : "",
             mask ? mask : "", mask ? ")" : "");
}

int mt_cu_ctx_select(int gpu, char *err, size_t errlen)
{
    if (gpu < 0) {
        mt_set_err(err, errlen, "cuda: --gpu %d: want a device ordinal 0, 1, ...", gpu);
        return -1;
    }
    pthread_mutex_lock(&ctx_mu);
    int rc = 0;
    if (refs > 0 && ctx.device != gpu) {
        mt_set_err(err, errlen, "cuda: device %d is already in use by this process; cannot switch to %d",
                   ctx.device, gpu);
        rc = -1;
    } else
        selected = gpu;
    pthread_mutex_unlock(&ctx_mu);
    return rc;
}

int mt_cu_ctx_selected(void)
{
    pthread_mutex_lock(&ctx_mu);
    int g = selected;
    pthread_mutex_unlock(&ctx_mu);
    return g;
}

static void ctx_teardown(void)
{
    if (ctx.stream)
        (void)cudaStreamSynchronize(ctx.stream);
    if (ctx.blas)
        (void)cublasDestroy(ctx.blas);
    if (ctx.workspace)
        (void)cudaFree(ctx.workspace);
    ctx.workspace = NULL;
    if (ctx.stream)
        (void)cudaStreamDestroy(ctx.stream);
    ctx.blas = NULL;
    ctx.stream = NULL;
}

/* The device, its stream and a handle on the stream (ctx_mu held). */
static int ctx_create(char *err, size_t errlen)
{
    int n = 0;
    CU(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    if (selected >= n) {
        char note[200];
        visible_note(note, sizeof note, n);
        mt_set_err(err, errlen, "cuda: no device %d: %s", selected, note);
        return -1;
    }
    ctx.device = selected;
    CU(cudaSetDevice(ctx.device), "cudaSetDevice");
    CU(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "stream");
    BL(cublasCreate(&ctx.blas), "cublasCreate");
    BL(cublasSetStream(ctx.blas, ctx.stream), "cublasSetStream");
    CU(cudaMalloc(&ctx.workspace, MT_CU_WORKSPACE), "cuBLAS workspace");
    BL(cublasSetWorkspace(ctx.blas, ctx.workspace, MT_CU_WORKSPACE), "cublasSetWorkspace");
    return 0;
}

int mt_cu_ctx_open(const char *who, const mt_cu_ctx **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&ctx_mu);
    int rc = 0;
    if (refs == 0) {
        char why[400];
        ctx = (mt_cu_ctx){ 0 };
        rc = ctx_create(why, sizeof why);
        if (rc) {
            ctx_teardown();
            mt_set_err(err, errlen, "%s: %s", who, why);
        }
    }
    if (rc == 0) {
        refs++;
        *out = &ctx;
    }
    pthread_mutex_unlock(&ctx_mu);
    return rc;
}

void mt_cu_ctx_close(const mt_cu_ctx *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&ctx_mu);
    if (refs > 0 && --refs == 0) {
        (void)cudaSetDevice(ctx.device);
        ctx_teardown();
    }
    pthread_mutex_unlock(&ctx_mu);
}

int mt_cu_ctx_enter(const mt_cu_ctx *c, char *err, size_t errlen)
{
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    return 0;
}
