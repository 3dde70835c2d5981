/* depformer_cuda.c: Kyutai's depformer on CUDA (depformer_cuda.h), the
 * host side: the same step as depformer.c, each product one cuBLAS SGEMM
 * over the batch's rows with that step's weights, the rest the kernels of
 * kernels/depformer.cu. Built into the CUDA module. */
#include "decode/depformer_cuda.h"
#include "gpu/fp32_cuda.h"
#include "gpu/device_cuda.h"
#define MT_CU_WHO "depformer cuda"
#include "gpu/cuda_check.h"
#include "util/errmsg.h"
#include "../../kernels/depformer_kernels.h"
#include "../../kernels/sample_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

/* Device copies of the side tensors the depformer reads. */
typedef struct dep_w {
    float *wqkv, *wo, *w_in, *w_out;
} dep_w;

struct mt_dep_cuda {
    const mt_kyutai_lm *lm;
    int maxb, B;
    const mt_cu_ctx *ctx;         /* the process's device, stream, cuBLAS handle */
    cudaStream_t   stream;        /* ctx's */
    cublasHandle_t blas;
    size_t bytes;
    float *wbuf;                  /* every weight below, one allocation */
    float *dep_in[MT_KY_MAX_Q];   /* [dep_q] of [dd, dim] */
    float *dep_text_emb;          /* [text_card + 1, dd] */
    float *dep_emb[MT_KY_MAX_Q];  /* [dep_q - 1] of [card + 1, dd] */
    float *linears[MT_KY_MAX_Q];  /* [dep_q] of [card, dd] */
    float **norm1, **norm2;       /* [layers] of [dd] (host arrays of device pointers) */
    dep_w *dep;                   /* [layers * dep_q] (host array of device pointers) */
    float *h;                     /* [maxb, dim] */
    float *x, *xn, *att;          /* [maxb, dd] */
    float *qkv;                   /* [maxb, 3 dd] */
    float *gu;                    /* [maxb, 2 ffn] */
    float *kv;                    /* [layers][maxb][2][dep_q][dd] */
    float *logits;                /* [maxb, card] */
    int32_t *tok;                 /* [maxb] */
    /* the device-sampled frame (frame): one pinned host block and its
     * device mirror, laid out alike */
    void    *h_fr, *d_fr;
    mt_cu_samp *h_samp, *d_samp;  /* [maxb] */
    uint64_t   *h_rng, *d_rng;    /* [maxb][4] */
    int32_t    *h_audio, *d_audio; /* [maxb][dep_q] */
    size_t      fr_bytes;
};

/* Y [B, N] (+)= X [B, K] (rows ldx apart) . W [N, K]^T: column-major,
 * Y^T = W^T' X^T with W read transposed. Plain fp32 (no TF32), asked per
 * call: the handle is the process's shared one. */
static int gemm(mt_dep_cuda *g, int B, int N, int K, const float *X, int ldx, const float *W,
                float beta, float *Y, char *err, size_t errlen)
{
    const float one = 1.0f;
    BL(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, &one, W, CUDA_R_32F, K, X,
                    CUDA_R_32F, ldx, &beta, Y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F_PEDANTIC,
                    CUBLAS_GEMM_DEFAULT),
       "sgemm");
    return 0;
}

static void g_destroy(mt_dep_cuda *g)
{
    if (!g)
        return;
    void *dev[] = { g->wbuf, g->h, g->x, g->xn, g->att, g->qkv, g->gu, g->kv, g->logits, g->tok };
    if (g->ctx) {
        (void)cudaSetDevice(g->ctx->device);
        (void)cudaStreamSynchronize(g->stream);
    }
    mt_cu_fp32_close(NULL, NULL, dev, sizeof dev / sizeof dev[0]);
    if (g->h_fr)
        (void)cudaFreeHost(g->h_fr);
    if (g->d_fr)
        (void)cudaFree(g->d_fr);
    mt_cu_ctx_close(g->ctx);
    free(g->dep);
    free(g->norm1);
    free(g->norm2);
    free(g);
}

/* The weights: a table of (host source, floats, device destination). */
typedef struct wcopy {
    const float *src;
    size_t n;
    float **dst;
} wcopy;

/* The device-sampled frame's buffers (frame): pinned host and device,
 * one layout: [maxb] sampling, [maxb][4] RNG states, [maxb][dep_q] tokens. */
static int alloc_frame(mt_dep_cuda *g, char *err, size_t errlen)
{
    const size_t R = (size_t)g->maxb, Q = (size_t)g->lm->kc.dep_q, A = 256;
    const size_t o_samp = 0, o_rng = (R * sizeof(mt_cu_samp) + A - 1) / A * A,
                 o_audio = o_rng + (R * 4 * sizeof(uint64_t) + A - 1) / A * A;
    g->fr_bytes = o_audio + R * Q * sizeof(int32_t);
    CU(cudaMallocHost(&g->h_fr, g->fr_bytes), "pinned frame buffer");
    CU(cudaMalloc(&g->d_fr, g->fr_bytes), "frame buffer");
    char *h = g->h_fr, *d = g->d_fr;
    g->h_samp = (mt_cu_samp *)(h + o_samp);  g->d_samp = (mt_cu_samp *)(d + o_samp);
    g->h_rng = (uint64_t *)(h + o_rng);      g->d_rng = (uint64_t *)(d + o_rng);
    g->h_audio = (int32_t *)(h + o_audio);   g->d_audio = (int32_t *)(d + o_audio);
    return 0;
}

static int g_create(const mt_kyutai_lm *lm, int max_batch, mt_dep_cuda **out, char *err,
                    size_t errlen)
{
    const mt_kyutai_config *kc = &lm->kc;
    *out = NULL;
    if (kc->dep_q < 1 || kc->dep_q > MT_KY_MAX_Q || lm->shape_only || max_batch < 1 ||
        max_batch > 65536) {
        mt_set_err(err, errlen, "depformer cuda: no depformer, no host weights or batch %d", max_batch);
        return -1;
    }
    mt_dep_cuda *g = calloc(1, sizeof *g);
    const int L = kc->dep_layers, Q = kc->dep_q;
    if (g)
        g->dep = calloc((size_t)L * Q, sizeof *g->dep);
    if (!g || !g->dep) {
        free(g);
        mt_set_err(err, errlen, "depformer cuda: out of memory");
        return -1;
    }
    g->lm = lm;
    g->maxb = max_batch;
    const size_t dd = (size_t)kc->dep_dim, F = (size_t)kc->dep_ffn, R = (size_t)max_batch;
    int nw = 0;
    wcopy *wc = calloc((size_t)4 * Q + 1 + 2 * (size_t)L + 4 * (size_t)L * Q, sizeof *wc);
    float **n1 = calloc((size_t)L, sizeof *n1), **n2 = calloc((size_t)L, sizeof *n2);
    int rc = wc && n1 && n2 ? 0 : -2;
    if (rc)
        mt_set_err(err, errlen, "depformer cuda: out of memory");
    for (int k = 0; rc == 0 && k < Q; k++) {
        wc[nw++] = (wcopy){ lm->dep_in[k], dd * kc->dim, &g->dep_in[k] };
        wc[nw++] = (wcopy){ lm->linears[k], dd * kc->card, &g->linears[k] };
        if (k > 0)
            wc[nw++] = (wcopy){ lm->dep_emb[k - 1], dd * (kc->card + 1), &g->dep_emb[k - 1] };
    }
    if (rc == 0)
        wc[nw++] = (wcopy){ lm->dep_text_emb, dd * (kc->text_card + 1), &g->dep_text_emb };
    for (int l = 0; rc == 0 && l < L; l++) {
        wc[nw++] = (wcopy){ lm->dep_norm1[l], dd, &n1[l] };
        wc[nw++] = (wcopy){ lm->dep_norm2[l], dd, &n2[l] };
        for (int k = 0; k < Q; k++) {
            const mt_ky_dep_w *w = &lm->dep[(size_t)l * Q + k];
            dep_w *d = &g->dep[(size_t)l * Q + k];
            wc[nw++] = (wcopy){ w->wqkv, 3 * dd * dd, &d->wqkv };
            wc[nw++] = (wcopy){ w->wo, dd * dd, &d->wo };
            wc[nw++] = (wcopy){ w->w_in, 2 * F * dd, &d->w_in };
            wc[nw++] = (wcopy){ w->w_out, dd * F, &d->w_out };
        }
    }
    size_t total = 0;
    for (int i = 0; i < nw; i++)
        total += wc[i].n;
    cudaError_t ce = cudaSuccess;
    if (rc == 0 && mt_cu_ctx_open("depformer cuda", &g->ctx, err, errlen) != 0)
        rc = -2;
    if (rc == 0) {
        g->stream = g->ctx->stream;
        g->blas = g->ctx->blas;
        if (mt_cu_ctx_enter(g->ctx, err, errlen) != 0)
            rc = -2;
    }
    struct { void **p; size_t bytes; } al[] = {
        { (void **)&g->wbuf, total * sizeof(float) },
        { (void **)&g->h, R * kc->dim * sizeof(float) },
        { (void **)&g->x, R * dd * sizeof(float) },
        { (void **)&g->xn, R * dd * sizeof(float) },
        { (void **)&g->att, R * dd * sizeof(float) },
        { (void **)&g->qkv, R * 3 * dd * sizeof(float) },
        { (void **)&g->gu, R * 2 * F * sizeof(float) },
        { (void **)&g->kv, (size_t)L * R * 2 * Q * dd * sizeof(float) },
        { (void **)&g->logits, R * kc->card * sizeof(float) },
        { (void **)&g->tok, R * sizeof(int32_t) },
    };
    for (size_t i = 0; rc == 0 && i < sizeof al / sizeof al[0]; i++) {
        if ((ce = cudaMalloc(al[i].p, al[i].bytes)) != cudaSuccess)
            rc = -1;
        else
            g->bytes += al[i].bytes;
    }
    size_t off = 0;
    for (int i = 0; rc == 0 && i < nw; i++) {
        *wc[i].dst = g->wbuf + off;
        if ((ce = cudaMemcpy(*wc[i].dst, wc[i].src, wc[i].n * sizeof(float),
                             cudaMemcpyHostToDevice)) != cudaSuccess)
            rc = -1;
        off += wc[i].n;
    }
    if (rc == -1)
        mt_set_err(err, errlen, "depformer cuda: %s", cudaGetErrorString(ce));
    if (rc == 0 && alloc_frame(g, err, errlen) != 0)
        rc = -2;
    g->norm1 = n1;   /* g_destroy frees them from here */
    g->norm2 = n2;
    free(wc);
    if (rc != 0) {
        g_destroy(g);
        return -1;
    }
    *out = g;
    return 0;
}

static int g_begin(mt_dep_cuda *g, int B, const float *h, char *err, size_t errlen)
{
    if (mt_cu_ctx_enter(g->ctx, err, errlen))
        return -1;
    if (B < 1 || B > g->maxb) {
        mt_set_err(err, errlen, "depformer cuda: batch of %d (1..%d)", B, g->maxb);
        return -1;
    }
    g->B = B;
    CU(cudaMemcpyAsync(g->h, h, (size_t)B * g->lm->kc.dim * sizeof(float), cudaMemcpyHostToDevice,
                       g->stream), "h upload");
    return 0;
}

/* Codebook step k of the frame on the device: its previous tokens in
 * g->tok, its logits into g->logits [B, card]. */
static int step_compute(mt_dep_cuda *g, int k, char *err, size_t errlen)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int B = g->B, dd = kc->dep_dim, F = kc->dep_ffn, Q = kc->dep_q;
    if (gemm(g, B, dd, kc->dim, g->h, kc->dim, g->dep_in[k], 0.0f, g->x, err, errlen))
        return -1;
    CU(mt_cu_dep_add_emb(g->x, k == 0 ? g->dep_text_emb : g->dep_emb[k - 1], g->tok, B, dd,
                         g->stream), "embedding");
    for (int l = 0; l < kc->dep_layers; l++) {
        const dep_w *w = &g->dep[(size_t)l * Q + k];
        float *kv = g->kv + (size_t)l * g->maxb * 2 * Q * dd;
        CU(mt_cu_dep_rmsnorm(g->xn, g->x, g->norm1[l], B, dd, kc->eps, g->stream), "rmsnorm");
        if (gemm(g, B, 3 * dd, dd, g->xn, dd, w->wqkv, 0.0f, g->qkv, err, errlen))
            return -1;
        CU(mt_cu_dep_attention(g->qkv, kv, g->att, B, Q, dd, kc->dep_heads, k, g->stream),
           "attention");
        if (gemm(g, B, dd, dd, g->att, dd, w->wo, 1.0f, g->x, err, errlen))
            return -1;
        CU(mt_cu_dep_rmsnorm(g->xn, g->x, g->norm2[l], B, dd, kc->eps, g->stream), "rmsnorm");
        if (gemm(g, B, 2 * F, dd, g->xn, dd, w->w_in, 0.0f, g->gu, err, errlen))
            return -1;
        CU(mt_cu_dep_swiglu(g->gu, B, F, g->stream), "swiglu");
        if (gemm(g, B, dd, F, g->gu, 2 * F, w->w_out, 1.0f, g->x, err, errlen))
            return -1;
    }
    if (gemm(g, B, kc->card, dd, g->x, dd, g->linears[k], 0.0f, g->logits, err, errlen))
        return -1;
    return 0;
}

/* One codebook step, enqueued; returns with work queued on error
 * (g_next waits for it). */
static int next_enqueue(mt_dep_cuda *g, int k, const int32_t *prev, float *logits, char *err,
                        size_t errlen)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int B = g->B, Q = kc->dep_q;
    if (k < 0 || k >= Q || B < 1) {
        mt_set_err(err, errlen, "depformer cuda: step %d of %d (batch %d)", k, Q, B);
        return -1;
    }
    CU(cudaMemcpyAsync(g->tok, prev, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice,
                       g->stream), "tokens upload");
    if (step_compute(g, k, err, errlen))
        return -1;
    CU(cudaMemcpyAsync(logits, g->logits, (size_t)B * kc->card * sizeof(float),
                       cudaMemcpyDeviceToHost, g->stream), "logits download");
    CU(cudaStreamSynchronize(g->stream), "step");
    return 0;
}

/* next_enqueue, and on an error a wait for what it queued (the logits'
 * copy into the caller's buffer may be pending), as the backbone does. */
static int g_next(mt_dep_cuda *g, int k, const int32_t *prev, float *logits, char *err,
                  size_t errlen)
{
    if (mt_cu_ctx_enter(g->ctx, err, errlen))
        return -1;
    if (next_enqueue(g, k, prev, logits, err, errlen) == 0)
        return 0;
    (void)cudaStreamSynchronize(g->stream);
    return -1;
}

/* The frame's dep_q steps, each sampled on the device into the next's
 * previous tokens; returns with work queued on error (g_frame waits). */
static int frame_enqueue(mt_dep_cuda *g, const int32_t *text, int32_t *audio, char *err,
                         size_t errlen)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int B = g->B, Q = kc->dep_q;
    CU(cudaMemcpyAsync(g->d_fr, g->h_fr, g->fr_bytes, cudaMemcpyHostToDevice, g->stream),
       "sampling upload");
    CU(cudaMemcpyAsync(g->tok, text, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice,
                       g->stream), "text tokens upload");
    for (int k = 0; k < Q; k++) {
        if (step_compute(g, k, err, errlen))
            return -1;
        CU(mt_cu_sample(g->logits, B, kc->card, g->d_samp, (unsigned long long *)g->d_rng,
                        g->tok, g->d_audio + k, Q, g->stream), "sampling");
    }
    CU(cudaMemcpyAsync(g->h_rng, g->d_rng, (size_t)B * 4 * sizeof(uint64_t),
                       cudaMemcpyDeviceToHost, g->stream), "RNG states download");
    CU(cudaMemcpyAsync(g->h_audio, g->d_audio, (size_t)B * Q * sizeof(int32_t),
                       cudaMemcpyDeviceToHost, g->stream), "tokens download");
    CU(cudaStreamSynchronize(g->stream), "frame");   /* the frame's one sync */
    memcpy(audio, g->h_audio, (size_t)B * Q * sizeof(int32_t));
    return 0;
}

static int g_frame(mt_dep_cuda *g, const int32_t *text, const float *temp, const int *top_k,
                   const int *greedy, uint64_t *rng, int32_t *audio, char *err, size_t errlen)
{
    const int B = g->B;
    if (B < 1 || g->lm->kc.card > mt_cu_sample_max_n()) {
        mt_set_err(err, errlen, "depformer cuda: no device sampling for batch %d, card %d (at most %d)",
                   B, g->lm->kc.card, mt_cu_sample_max_n());
        return -1;
    }
    if (mt_cu_ctx_enter(g->ctx, err, errlen))
        return -1;
    for (int r = 0; r < B; r++)
        g->h_samp[r] = (mt_cu_samp){ .temp = temp[r], .top_k = top_k[r], .greedy = greedy[r] };
    memcpy(g->h_rng, rng, (size_t)B * 4 * sizeof(uint64_t));
    if (frame_enqueue(g, text, audio, err, errlen) != 0) {
        (void)cudaStreamSynchronize(g->stream);
        return -1;
    }
    memcpy(rng, g->h_rng, (size_t)B * 4 * sizeof(uint64_t));
    return 0;
}

static size_t g_device_bytes(const mt_dep_cuda *g) { return g->bytes; }

const mt_dep_cuda_ops *mt_depformer_cuda_ops_get(void)
{
    static const mt_dep_cuda_ops ops = {
        .abi = DEP_CUDA_ABI,
        .lm_size = sizeof(mt_kyutai_lm),
        .create = g_create,
        .destroy = g_destroy,
        .begin = g_begin,
        .next = g_next,
        .device_bytes = g_device_bytes,
        .frame = g_frame,
    };
    return &ops;
}
