/* mimi_cuda.c: Mimi's batched streaming encode and decode on CUDA, the
 * host side: the graph of mimi_impl.h (mimi.c walks the same), each convolution as
 * im2col + one cuBLAS SGEMM across the batch (a transposed one as one
 * SGEMM + overlap-add), the transformers' projections as SGEMMs and the
 * rest as the kernels of kernels/mimi.cu. Built into the CUDA module
 * (libmetronome_cuda.so) and reached through mimi_cuda_ops (mimi_cuda.h).
 *
 * The weights are one device copy of the model's fp32 arena (a layer's
 * device pointer is its host pointer's offset into the arena); every
 * session's state lives on the device, in a pool of max_sessions rows of
 * state_floats (mimi_state.x's layout), with its positions and
 * first-frame flag on the host. SGEMMs run in plain fp32 (no TF32): the
 * parity test holds them to the CPU's float32 tolerance. */
#include "codec/mimi_cuda.h"
#include "codec/mimi_impl.h"
#include "gpu/fp32_cuda.h"
#include "gpu/device_cuda.h"
#define MT_CU_WHO "mimi cuda"
#include "gpu/cuda_check.h"
#include "util/errmsg.h"
#include "../../kernels/mimi_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

struct mimi_cuda {
    const mimi_model *m;
    int    max_batch, max_sessions;
    const mt_cu_ctx *ctx;   /* the process's device, stream, cuBLAS handle */
    cudaStream_t   stream;  /* ctx's */
    cublasHandle_t blas;
    size_t bytes;         /* device bytes held */
    float *w;             /* [arena_floats]: the weights */
    float *st;            /* [max_sessions][state_floats]: sessions' states */
    float *act[4];        /* [max_act * max_batch] each: the ping-pong */
    float *col;           /* [col_floats * max_batch]: im2col / transposed GEMM */
    float *h, *att;       /* [d][max_batch * T] */
    float *qkv;           /* [3 d][max_batch * T] */
    float *ff;            /* [ff][max_batch * T] */
    float *r, *sum2;      /* [qd][max_batch] */
    float *sc;            /* [bins][max_batch] */
    float *io;            /* [max_batch][frame]: PCM in or out */
    int32_t *codes;       /* [max_batch][n_q] */
    int32_t *slot;        /* [max_batch]: this call's slots */
    int32_t *first;       /* [max_batch]: the downsample's context unset */
    int64_t *pos;         /* [max_batch]: transformer positions at the call */
    /* host, per slot */
    int64_t *enc_pos, *dec_pos;
    int32_t *down_first;
    /* host staging, per call: [max_batch] */
    int32_t *h_slot, *h_first;
    int64_t *h_pos;
};

/* A weight's device copy (NULL stays NULL). */
static const float *D(const mimi_cuda *g, const float *p)
{
    return p ? g->w + (p - g->m->arena) : NULL;
}

static mt_cu_conv geom(const mimi_conv *cv)
{
    mt_cu_conv k = { cv->cin, cv->cout, cv->k, cv->stride, cv->dil, cv->tin, cv->tout,
                     cv->ctx, cv->grouped, cv->st };
    return k;
}

/* Row-major C [M][N] = alpha op(A) op(B) + beta C, as cblas_sgemm: cuBLAS
 * is column-major, so it computes C^T = op(B)^T op(A)^T. */
static int sgemm(mimi_cuda *g, int ta, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc, char *err, size_t errlen)
{
    const float one = 1.0f;
    BL(cublasGemmEx(g->blas, CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B,
                    CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                    CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
       "sgemm");
    return 0;
}

/* ---- convolutions ---------------------------------------------------------------- */

/* Y [cout][B*tout] = conv(context ++ X [cin][B*tin]); contexts updated. */
static int conv_fwd(mimi_cuda *g, const mimi_conv *cv, int B, const float *X, float *Y,
                    char *err, size_t errlen)
{
    const mt_cu_conv k = geom(cv);
    const size_t stride = g->m->state_floats;
    const int N = B * cv->tout, Nin = B * cv->tin;
    if (cv->replicate && cv->ctx > 0)
        CU(mt_cu_mimi_replicate(&k, g->st, stride, g->slot, g->first, B, X, g->stream), "replicate");
    CU(mt_cu_mimi_bias(Y, D(g, cv->b), cv->cout, (size_t)N, g->stream), "bias");
    if (cv->k == 1 && cv->stride == 1) {
        if (sgemm(g, 0, cv->cout, N, cv->cin, D(g, cv->w), cv->cin, X, Nin, 1.0f, Y, N, err, errlen))
            return -1;
    } else {
        int rows = cv->cin * cv->k;
        CU(mt_cu_mimi_im2col(&k, g->st, stride, g->slot, B, X, g->col, g->stream), "im2col");
        if (sgemm(g, 0, cv->cout, N, rows, D(g, cv->w), rows, g->col, N, 1.0f, Y, N, err, errlen))
            return -1;
    }
    CU(mt_cu_mimi_conv_state(&k, g->st, stride, g->slot, B, X, g->stream), "conv state");
    return 0;
}

/* Y [cout][B*tin*stride] = transposed conv of X [cin][B*tin] + the pending
 * overlap; the new overlap kept. */
static int convtr_fwd(mimi_cuda *g, const mimi_conv *cv, int B, const float *X, float *Y,
                      char *err, size_t errlen)
{
    const mt_cu_conv k = geom(cv);
    const int N = B * cv->tin, rows = cv->cout * cv->k;
    if (!cv->grouped &&   /* Z [cout*k][N] = W^T X, W [cin][cout*k] */
        sgemm(g, 1, rows, N, cv->cin, D(g, cv->w), rows, X, N, 0.0f, g->col, N, err, errlen))
        return -1;
    CU(mt_cu_mimi_convtr_ola(&k, g->st, g->m->state_floats, g->slot, B, g->col, D(g, cv->w), X,
                             D(g, cv->b), Y, g->stream),
       "overlap-add");
    return 0;
}

static int elu(mimi_cuda *g, float *dst, const float *src, size_t n, char *err, size_t errlen)
{
    CU(mt_cu_mimi_elu(dst, src, n, g->stream), "elu");
    return 0;
}

/* ---- transformer ------------------------------------------------------------------ */

/* x [d][B*T] through the layers, at the positions in g->pos. */
static int transformer_fwd(mimi_cuda *g, const mimi_tlayer *L, int B, float *x, char *err,
                           size_t errlen)
{
    const mimi_config *c = &g->m->c;
    const int d = c->d_model, ff = c->dim_feedforward, hd = d / c->num_heads, T = g->m->enc_steps;
    const int N = B * T;
    const size_t stride = g->m->state_floats;
    for (int li = 0; li < c->num_layers; li++) {
        const mimi_tlayer *l = &L[li];
        CU(mt_cu_mimi_layer_norm(g->h, x, D(g, l->n1w), D(g, l->n1b), d, (size_t)N, g->stream),
           "layer norm");
        if (sgemm(g, 0, 3 * d, N, d, D(g, l->in_proj), d, g->h, N, 0.0f, g->qkv, N, err, errlen))
            return -1;
        CU(mt_cu_mimi_rope_ring(g->qkv, g->st, stride, g->slot, g->pos, B, T, d, hd, c->context,
                                c->max_period, l->st_k, l->st_v, g->stream),
           "rotary");
        CU(mt_cu_mimi_ring_attention(g->qkv, g->att, g->st, stride, g->slot, g->pos, B, T, d, hd,
                                     c->context, l->st_k, l->st_v, g->stream),
           "ring attention");
        if (sgemm(g, 0, d, N, d, D(g, l->out_proj), d, g->att, N, 0.0f, g->h, N, err, errlen))
            return -1;
        CU(mt_cu_mimi_scale_add(x, g->h, D(g, l->ls1), d, (size_t)N, g->stream), "layer scale");
        CU(mt_cu_mimi_layer_norm(g->h, x, D(g, l->n2w), D(g, l->n2b), d, (size_t)N, g->stream),
           "layer norm");
        if (sgemm(g, 0, ff, N, d, D(g, l->l1), d, g->h, N, 0.0f, g->ff, N, err, errlen))
            return -1;
        CU(mt_cu_mimi_gelu(g->ff, (size_t)ff * N, g->stream), "gelu");
        if (sgemm(g, 0, d, N, ff, D(g, l->l2), ff, g->ff, N, 0.0f, g->h, N, err, errlen))
            return -1;
        CU(mt_cu_mimi_scale_add(x, g->h, D(g, l->ls2), d, (size_t)N, g->stream), "layer scale");
    }
    return 0;
}

/* This call's slots, first-frame flags and (dec or enc) positions to the
 * device. */
static int upload_call(mimi_cuda *g, const int *slot, int B, int dec, char *err, size_t errlen)
{
    for (int b = 0; b < B; b++) {
        g->h_slot[b] = slot[b];
        g->h_first[b] = g->down_first[slot[b]];
        g->h_pos[b] = dec ? g->dec_pos[slot[b]] : g->enc_pos[slot[b]];
    }
    CU(cudaMemcpyAsync(g->slot, g->h_slot, (size_t)B * sizeof *g->slot, cudaMemcpyHostToDevice,
                       g->stream), "upload");
    CU(cudaMemcpyAsync(g->first, g->h_first, (size_t)B * sizeof *g->first, cudaMemcpyHostToDevice,
                       g->stream), "upload");
    CU(cudaMemcpyAsync(g->pos, g->h_pos, (size_t)B * sizeof *g->pos, cudaMemcpyHostToDevice,
                       g->stream), "upload");
    return 0;
}

/* ---- the codec ---------------------------------------------------------------------- */

static int g_check(const mimi_cuda *g, const int *slot, int B, char *err, size_t errlen)
{
    if (B < 1 || B > g->max_batch) {
        mt_set_err(err, errlen, "mimi cuda: batch of %d (1..%d)", B, g->max_batch);
        return -1;
    }
    for (int b = 0; b < B; b++)
        if (slot[b] < 0 || slot[b] >= g->max_sessions) {
            mt_set_err(err, errlen, "mimi cuda: slot %d outside 0..%d", slot[b], g->max_sessions - 1);
            return -1;
        }
    return 0;
}

/* Codebook group rg of every session: lat [dim][B] -> g->codes. */
static int quantize(mimi_cuda *g, mimi_rvq_span rg, int B, const float *lat, char *err, size_t errlen)
{
    const mimi_config *c = &g->m->c;
    const mimi_rvq *q = rg.q;
    const int qd = c->q_dimension, code0 = rg.code0, n = rg.n;
    if (sgemm(g, 0, qd, B, c->dimension, D(g, q->in_proj), c->dimension, lat, B, 0.0f, g->r, B,
              err, errlen))
        return -1;
    for (int i = 0; i < n; i++) {
        if (sgemm(g, 0, c->bins, B, qd, D(g, q->cb[i]), qd, g->r, B, 0.0f, g->sc, B, err, errlen))
            return -1;
        CU(mt_cu_mimi_rvq_pick(g->sc, D(g, q->norm2[i]), D(g, q->cb[i]), g->r, g->codes,
                               c->n_q_used, code0 + i, c->bins, qd, B, g->stream),
           "nearest centroid");
    }
    return 0;
}

/* Codebook group rg of g->codes: lat [dim][B] = (or with add, +=) the
 * projection of the centroids' sum. */
static int dequantize(mimi_cuda *g, mimi_rvq_span rg, int add, int B, float *lat, char *err,
                      size_t errlen)
{
    const int qd = g->m->c.q_dimension;
    CU(cudaMemsetAsync(g->sum2, 0, (size_t)qd * B * sizeof(float), g->stream), "memset");
    for (int i = 0; i < rg.n; i++)
        CU(mt_cu_mimi_dequant(D(g, rg.q->cb[i]), g->codes, g->m->c.n_q_used, rg.code0 + i, qd, B,
                              g->sum2, g->stream),
           "dequantize");
    return sgemm(g, 0, g->m->c.dimension, B, qd, D(g, rg.q->out_proj), qd, g->sum2, B,
                 add ? 1.0f : 0.0f, lat, B, err, errlen);
}

/* One op of the graph (mimi_impl.h) on the device, g->io being the
 * call's PCM. */
static int run_op(mimi_cuda *g, const mimi_op *o, int B, char *err, size_t errlen)
{
    float *src = o->src == MIMI_BUF_IO ? g->io : g->act[o->src];
    float *dst = o->dst == MIMI_BUF_IO ? g->io : g->act[o->dst];
    mimi_rvq_span rg = mimi_rvq_group(g->m, o->which);
    if ((o->kind == MIMI_OP_QUANTIZE || o->kind == MIMI_OP_DEQUANTIZE) && rg.n == 0)
        return 0;   /* a group without codebooks */
    switch (o->kind) {
    case MIMI_OP_CONV:        return conv_fwd(g, o->cv, B, src, dst, err, errlen);
    case MIMI_OP_CONVTR:      return convtr_fwd(g, o->cv, B, src, dst, err, errlen);
    case MIMI_OP_ELU:         return elu(g, dst, src, o->n * B, err, errlen);
    case MIMI_OP_ADD:
        CU(mt_cu_mimi_add(dst, src, o->n * B, g->stream), "add");
        return 0;
    case MIMI_OP_TRANSFORMER:
        return transformer_fwd(g, o->which ? g->m->dtr : g->m->etr, B, dst, err, errlen);
    case MIMI_OP_QUANTIZE:    return quantize(g, rg, B, src, err, errlen);
    case MIMI_OP_DEQUANTIZE:  return dequantize(g, rg, o->which, B, dst, err, errlen);
    }
    mt_set_err(err, errlen, "mimi cuda: op kind %d", (int)o->kind);
    return -1;
}

/* One frame of B sessions (distinct slots) through the encode (dec 0:
 * pcm in, codes out) or decode graph (dec 1: codes in, pcm out). */
static int g_run(mimi_cuda *g, int dec, const int *slot, int B, const void *in, void *out,
                 char *err, size_t errlen)
{
    if (g_check(g, slot, B, err, errlen) || upload_call(g, slot, B, dec, err, errlen))
        return -1;
    const mimi_model *m = g->m;
    const size_t pcm_bytes = (size_t)B * m->frame * sizeof(float);
    const size_t code_bytes = (size_t)B * m->c.n_q_used * sizeof(int32_t);
    CU(cudaMemcpyAsync(dec ? (void *)g->codes : (void *)g->io, in, dec ? code_bytes : pcm_bytes,
                       cudaMemcpyHostToDevice, g->stream), "upload");
    const mimi_graph *gr = dec ? &m->gdec : &m->genc;
    for (int i = 0; i < gr->n; i++)
        if (run_op(g, &gr->op[i], B, err, errlen))
            return -1;
    CU(cudaMemcpyAsync(out, dec ? (void *)g->io : (void *)g->codes, dec ? pcm_bytes : code_bytes,
                       cudaMemcpyDeviceToHost, g->stream), "download");
    CU(cudaStreamSynchronize(g->stream), dec ? "decode" : "encode");
    for (int b = 0; b < B; b++) {
        if (dec) {
            g->dec_pos[slot[b]] += m->enc_steps;
        } else {
            g->enc_pos[slot[b]] += m->enc_steps;
            g->down_first[slot[b]] = 0;
        }
    }
    return 0;
}

/* One encode, enqueued; returns with work queued on error (g_encode
 * waits for it). */
static int encode_enqueue(mimi_cuda *g, const int *slot, int B, const float *pcm,
                          int32_t *codes, char *err, size_t errlen)
{
    return g_run(g, 0, slot, B, pcm, codes, err, errlen);
}

/* One decode, enqueued; returns with work queued on error (g_decode
 * waits for it). */
static int decode_enqueue(mimi_cuda *g, const int *slot, int B, const int32_t *codes,
                          float *pcm, char *err, size_t errlen)
{
    return g_run(g, 1, slot, B, codes, pcm, err, errlen);
}

/* encode_enqueue / decode_enqueue, and on an error a wait for what was
 * queued (copies into the caller's buffers may be pending), as the
 * backbone does. */
static int g_encode(mimi_cuda *g, const int *slot, int B, const float *pcm, int32_t *codes,
                    char *err, size_t errlen)
{
    if (mt_cu_ctx_enter(g->ctx, err, errlen))
        return -1;
    if (encode_enqueue(g, slot, B, pcm, codes, err, errlen) == 0)
        return 0;
    (void)cudaStreamSynchronize(g->stream);
    return -1;
}

static int g_decode(mimi_cuda *g, const int *slot, int B, const int32_t *codes, float *pcm,
                    char *err, size_t errlen)
{
    if (mt_cu_ctx_enter(g->ctx, err, errlen))
        return -1;
    if (decode_enqueue(g, slot, B, codes, pcm, err, errlen) == 0)
        return 0;
    (void)cudaStreamSynchronize(g->stream);
    return -1;
}

static int g_reset(mimi_cuda *g, int slot, char *err, size_t errlen)
{
    if (mt_cu_ctx_enter(g->ctx, err, errlen))
        return -1;
    if (slot < 0 || slot >= g->max_sessions) {
        mt_set_err(err, errlen, "mimi cuda: slot %d outside 0..%d", slot, g->max_sessions - 1);
        return -1;
    }
    size_t n = g->m->state_floats;
    CU(cudaMemsetAsync(g->st + (size_t)slot * n, 0, n * sizeof(float), g->stream), "reset");
    CU(cudaStreamSynchronize(g->stream), "reset");
    g->enc_pos[slot] = g->dec_pos[slot] = 0;
    g->down_first[slot] = 1;
    return 0;
}

static void g_destroy(mimi_cuda *g)
{
    if (!g)
        return;
    void *dev[] = { g->w, g->st, g->act[0], g->act[1], g->act[2], g->act[3], g->col, g->h,
                    g->att, g->qkv, g->ff, g->r, g->sum2, g->sc, g->io, g->codes, g->slot,
                    g->first, g->pos };
    if (g->ctx) {
        (void)cudaSetDevice(g->ctx->device);
        (void)cudaStreamSynchronize(g->stream);
    }
    mt_cu_fp32_close(NULL, NULL, dev, sizeof dev / sizeof dev[0]);
    mt_cu_ctx_close(g->ctx);
    free(g->enc_pos); free(g->dec_pos); free(g->down_first);
    free(g->h_slot); free(g->h_first); free(g->h_pos);
    free(g);
}

/* The largest im2col or transposed-GEMM matrix of one session, floats. */
static size_t col_floats(const mimi_model *m)
{
    size_t mx = 0;
    const mimi_conv *all[2 * MIMI_MAX_CONVS + 2];
    int n = 0;
    for (int i = 0; i < m->n_enc; i++) all[n++] = &m->enc[i];
    for (int i = 0; i < m->n_dec; i++) all[n++] = &m->dec[i];
    all[n++] = &m->down;
    all[n++] = &m->up;
    for (int i = 0; i < n; i++) {
        const mimi_conv *cv = all[i];
        size_t f = cv->grouped ? 0 : cv->tr ? (size_t)cv->cout * cv->k * cv->tin
                                            : (size_t)cv->cin * cv->k * cv->tout;
        if (f > mx)
            mx = f;
    }
    return mx;
}

static int dev_alloc(mimi_cuda *g, void *pp, size_t bytes, char *err, size_t errlen)
{
    void **p = (void **)pp;
    if (bytes == 0)
        bytes = sizeof(float);
    CU(cudaMalloc(p, bytes), "device memory");
    g->bytes += bytes;
    CU(cudaMemsetAsync(*p, 0, bytes, g->stream), "memset");
    return 0;
}

static int g_create(const mimi_model *m, int max_batch, int max_sessions, mimi_cuda **out,
                    char *err, size_t errlen)
{
    *out = NULL;
    if (max_batch < 1 || max_batch > 4096 || max_sessions < 1 || max_sessions > 65536) {
        mt_set_err(err, errlen, "mimi cuda: batch %d / sessions %d out of range", max_batch,
                   max_sessions);
        return -1;
    }
    if (!m->arena) {
        mt_set_err(err, errlen, "mimi cuda: the model has no weights (a shape only)");
        return -1;
    }
    for (int i = 0; i < m->n_dec; i++)
        if (m->dec[i].tr && m->dec[i].ctx > m->dec[i].tout) {
            mt_set_err(err, errlen, "mimi cuda: decoder layer %d's overlap (%d) exceeds its frame (%d)",
                       i, m->dec[i].ctx, m->dec[i].tout);
            return -1;
        }
    if (m->up.ctx > m->up.tout) {
        mt_set_err(err, errlen, "mimi cuda: the upsample's overlap exceeds its frame");
        return -1;
    }
    const mimi_config *c = &m->c;
    if (((size_t)c->d_model / c->num_heads + c->context + 128) * sizeof(float) > 48 * 1024) {
        mt_set_err(err, errlen, "mimi cuda: a ring of %d steps does not fit the attention kernel's shared memory",
                   c->context);
        return -1;
    }
    mimi_cuda *g = calloc(1, sizeof *g);
    if (!g) {
        mt_set_err(err, errlen, "mimi cuda: out of memory");
        return -1;
    }
    g->m = m;
    g->max_batch = max_batch;
    g->max_sessions = max_sessions;
    size_t S = (size_t)max_sessions, Bm = (size_t)max_batch, N = Bm * (size_t)m->enc_steps;
    g->enc_pos = calloc(S, sizeof *g->enc_pos);
    g->dec_pos = calloc(S, sizeof *g->dec_pos);
    g->down_first = calloc(S, sizeof *g->down_first);
    g->h_slot = calloc(Bm, sizeof *g->h_slot);
    g->h_first = calloc(Bm, sizeof *g->h_first);
    g->h_pos = calloc(Bm, sizeof *g->h_pos);
    if (!g->enc_pos || !g->dec_pos || !g->down_first || !g->h_slot || !g->h_first || !g->h_pos) {
        mt_set_err(err, errlen, "mimi cuda: out of memory");
        g_destroy(g);
        return -1;
    }
    for (size_t i = 0; i < S; i++)
        g->down_first[i] = 1;
    cudaError_t ce;
    int rc = mt_cu_ctx_open("mimi cuda", &g->ctx, err, errlen);
    if (rc == 0) {
        g->stream = g->ctx->stream;
        g->blas = g->ctx->blas;
        rc = mt_cu_ctx_enter(g->ctx, err, errlen);
    }
    const size_t F = sizeof(float);
    if (rc == 0)
        rc = dev_alloc(g, &g->w, m->arena_floats * F, err, errlen) ||
             dev_alloc(g, &g->st, S * m->state_floats * F, err, errlen) ||
             dev_alloc(g, &g->act[0], m->max_act * Bm * F, err, errlen) ||
             dev_alloc(g, &g->act[1], m->max_act * Bm * F, err, errlen) ||
             dev_alloc(g, &g->act[2], m->max_act * Bm * F, err, errlen) ||
             dev_alloc(g, &g->act[3], m->max_act * Bm * F, err, errlen) ||
             dev_alloc(g, &g->col, col_floats(m) * Bm * F, err, errlen) ||
             dev_alloc(g, &g->h, (size_t)c->d_model * N * F, err, errlen) ||
             dev_alloc(g, &g->att, (size_t)c->d_model * N * F, err, errlen) ||
             dev_alloc(g, &g->qkv, (size_t)3 * c->d_model * N * F, err, errlen) ||
             dev_alloc(g, &g->ff, (size_t)c->dim_feedforward * N * F, err, errlen) ||
             dev_alloc(g, &g->r, (size_t)c->q_dimension * Bm * F, err, errlen) ||
             dev_alloc(g, &g->sum2, (size_t)c->q_dimension * Bm * F, err, errlen) ||
             dev_alloc(g, &g->sc, (size_t)c->bins * Bm * F, err, errlen) ||
             dev_alloc(g, &g->io, (size_t)m->frame * Bm * F, err, errlen) ||
             dev_alloc(g, &g->codes, (size_t)c->n_q * Bm * sizeof(int32_t), err, errlen) ||
             dev_alloc(g, &g->slot, Bm * sizeof(int32_t), err, errlen) ||
             dev_alloc(g, &g->first, Bm * sizeof(int32_t), err, errlen) ||
             dev_alloc(g, &g->pos, Bm * sizeof(int64_t), err, errlen)
                 ? -1 : 0;
    if (rc == 0) {
        /* the memsets above are on g->stream, which the legacy default
         * stream does not wait for */
        ce = cudaStreamSynchronize(g->stream);
        if (ce == cudaSuccess)
            ce = cudaMemcpy(g->w, m->arena, m->arena_floats * F, cudaMemcpyHostToDevice);
        if (ce != cudaSuccess) {
            mt_set_err(err, errlen, "mimi cuda: weights upload: %s", cudaGetErrorString(ce));
            rc = -1;
        }
    }
    if (rc != 0) {
        g_destroy(g);
        return -1;
    }
    *out = g;
    return 0;
}

static size_t g_device_bytes(const mimi_cuda *g) { return g->bytes; }

const mimi_cuda_ops *mimi_cuda_ops_get(void)
{
    static const mimi_cuda_ops ops = {
        .abi = MIMI_CUDA_ABI,
        .model_size = sizeof(struct mimi_model),
        .create = g_create,
        .destroy = g_destroy,
        .reset = g_reset,
        .encode = g_encode,
        .decode = g_decode,
        .device_bytes = g_device_bytes,
    };
    return &ops;
}
