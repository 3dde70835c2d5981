/* backend_cuda_graphs.c: the CUDA backend's steps as CUDA Graphs
 * (MT_CUDA_GRAPHS=1; off by default until a lease has timed them,
 * tests/gpu/run-lease.sh): a step's rows are padded to the next power of
 * two (at most R; padding rows attend to one slot of a scratch block past
 * the pool's and their outputs are dropped), and the device work of each
 * (bucket, split plan, input kind, outputs wanted) is captured once, on
 * its first step, then replayed with one launch: sessions joining or
 * leaving change the bucket, not the graph. backend_cuda.c stages the
 * inputs into pinned buffers first (a graph copies from fixed addresses);
 * the outputs' copies, the timing events and the one sync stay outside
 * the graph. In the window policy a bucket has one split plan once its
 * sessions' rings are full; at most MT_CUDA_MAX_GRAPHS are kept, the least
 * recently replayed goes. The stream and the cuBLAS handle are the
 * process's shared ones (gpu/device_cuda.h), with a fixed cuBLAS
 * workspace so that a captured GEMM allocates nothing. Prefill chunks and
 * the warm-up step run without graphs.
 */
#include "decode/backend_cuda_graphs.h"
#include "util/errmsg.h"
#define MT_CU_WHO "cuda"
#include "gpu/cuda_check.h"

#include <string.h>

int mt_cuda_graph_pad_rows(mt_cu_row *rows, int32_t *tab, int B, int R, size_t ntab,
                           int32_t scratch_block)
{
    int bucket = 1;
    while (bucket < B)
        bucket *= 2;
    if (bucket > R)
        bucket = B;
    tab[ntab] = scratch_block;
    for (int r = B; r < bucket; r++)
        rows[r] = (mt_cu_row){ .table_off = (int32_t)ntab, .nslots = 1 };
    return bucket;
}

/* The graph of plan key: captured before, or now into the least recently
 * used slot. */
static int graph_for(mt_cuda_graphs *gs, const fwd_plan *key, cudaStream_t st,
                     mt_cuda_enqueue_fn enqueue, void *ctx, cudaGraphExec_t *out, char *err,
                     size_t errlen)
{
    for (int i = 0; i < gs->ngraphs; i++)
        if (!memcmp(&gs->graphs[i].key, key, sizeof *key)) {
            gs->graphs[i].used = ++gs->clock;
            *out = gs->graphs[i].exec;
            return 0;
        }
    int slot = gs->ngraphs < MT_CUDA_MAX_GRAPHS ? gs->ngraphs : 0;
    for (int i = 0; gs->ngraphs == MT_CUDA_MAX_GRAPHS && i < gs->ngraphs; i++)
        if (gs->graphs[i].used < gs->graphs[slot].used)
            slot = i;                                   /* the least recently used */
    cudaGraph_t g = NULL;
    /* thread-local: another thread's work on the shared stream (the codec,
     * the depformer) is not captured, and does not break the capture */
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    int rc = enqueue(ctx, key, err, errlen);
    cudaError_t e = cudaStreamEndCapture(st, &g);
    if (rc)
        goto out;
    rc = -1;
    if (e != cudaSuccess) {
        mt_set_err(err, errlen, "cuda: capturing a step of %d rows: %s", key->n,
                   cudaGetErrorString(e));
        goto out;
    }
    cudaGraphExec_t exec;
    e = cudaGraphInstantiate(&exec, g, 0);
    if (e != cudaSuccess) {
        mt_set_err(err, errlen, "cuda: instantiating a step of %d rows: %s", key->n,
                   cudaGetErrorString(e));
        goto out;
    }
    if (slot < gs->ngraphs)
        (void)cudaGraphExecDestroy(gs->graphs[slot].exec);
    else
        gs->ngraphs++;
    gs->graphs[slot] = (step_graph){ .key = *key, .exec = exec, .used = ++gs->clock };
    *out = exec;
    rc = 0;
out:
    if (g)
        (void)cudaGraphDestroy(g);
    return rc;
}

int mt_cuda_graph_launch(mt_cuda_graphs *gs, const fwd_plan *key, cudaStream_t st,
                         mt_cuda_enqueue_fn enqueue, void *ctx, char *err, size_t errlen)
{
    cudaGraphExec_t exec;
    if (graph_for(gs, key, st, enqueue, ctx, &exec, err, errlen))
        return -1;
    cudaError_t e = cudaGraphLaunch(exec, st);
    if (e != cudaSuccess) {
        mt_set_err(err, errlen, "cuda: cudaGraphLaunch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

void mt_cuda_graphs_free(mt_cuda_graphs *gs)
{
    for (int i = 0; i < gs->ngraphs; i++)
        (void)cudaGraphExecDestroy(gs->graphs[i].exec);
    gs->ngraphs = 0;
}
