/* depformer.c: Kyutai's depformer step by step over a batch of rows
 * (depformer.h), products through OpenBLAS (sgemm over the rows, the
 * weight read once per step); or, made by mt_depformer_create_cuda, the
 * same steps forwarded to the CUDA module (depformer_cuda.h); or, made by
 * mt_depformer_create_sim, no work at all (a simulated device's profile
 * times it). */
#include "util/errmsg.h"
#include "gpu/cuda_module.h"
#include "decode/depformer.h"
#include "decode/depformer_cuda.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mt_depformer {
    const mt_kyutai_lm *lm;
    int   maxb, B;
    const float *h;   /* [B, dim] this frame's temporal output */
    float *x;         /* [maxb, dd]       residual */
    float *xn;        /* [maxb, dd]       normed */
    float *qkv;       /* [maxb, 3 dd]     this step's q | k | v */
    float *att;       /* [maxb, dd]       attention output, heads concatenated */
    float *gu;        /* [maxb, 2 ffn]    gate | up, then silu(gate) * up in gate */
    float *kv;        /* [layers][maxb][2][dep_q][dd]  the frame's K,V */
    float *score;     /* [dep_q] */
    const mt_dep_cuda_ops *ops;   /* CUDA: every step is the module's */
    mt_dep_cuda *g;
    int   sim;        /* mt_depformer_create_sim: logits all zero, no work */
    char  err[256];   /* the last failed step's message */
};

void mt_depformer_free(mt_depformer *df)
{
    if (!df)
        return;
    if (df->g)
        df->ops->destroy(df->g);
    free(df->x);
    free(df->xn);
    free(df->qkv);
    free(df->att);
    free(df->gu);
    free(df->kv);
    free(df->score);
    free(df);
}

int mt_depformer_create(const mt_kyutai_lm *lm, int max_batch, mt_depformer **out,
                        char *err, size_t errlen)
{
    const mt_kyutai_config *kc = &lm->kc;
    *out = NULL;
    if (kc->dep_q < 1 || lm->shape_only || max_batch < 1) {
        mt_set_err(err, errlen, "depformer: %s", kc->dep_q < 1 ? "the model has none (dep_q 0)"
                                   : lm->shape_only ? "shape-only model (no host weights)"
                                   : "batch under 1");
        return -1;
    }
    mt_depformer *df = calloc(1, sizeof *df);
    if (!df) {
        mt_set_err(err, errlen, "depformer: out of memory");
        return -1;
    }
    size_t R = (size_t)max_batch, dd = (size_t)kc->dep_dim;
    df->lm = lm;
    df->maxb = max_batch;
    df->x = malloc(R * dd * sizeof(float));
    df->xn = malloc(R * dd * sizeof(float));
    df->qkv = malloc(R * 3 * dd * sizeof(float));
    df->att = malloc(R * dd * sizeof(float));
    df->gu = malloc(R * 2 * (size_t)kc->dep_ffn * sizeof(float));
    df->kv = malloc((size_t)kc->dep_layers * R * 2 * kc->dep_q * dd * sizeof(float));
    df->score = malloc((size_t)kc->dep_q * sizeof(float));
    if (!df->x || !df->xn || !df->qkv || !df->att || !df->gu || !df->kv || !df->score) {
        mt_depformer_free(df);
        mt_set_err(err, errlen, "depformer: out of memory");
        return -1;
    }
    *out = df;
    return 0;
}

int mt_depformer_create_cuda(const mt_kyutai_lm *lm, int max_batch, mt_depformer **out,
                             char *err, size_t errlen)
{
    *out = NULL;
#ifdef MT_HAVE_CUDA
    mt_dep_cuda_ops_get_fn get = (mt_dep_cuda_ops_get_fn)mt_cuda_module_sym(DEP_CUDA_OPS_SYM, err, errlen);
    if (!get)
        return -1;
    const mt_dep_cuda_ops *ops = get();
    if (!ops || ops->abi != DEP_CUDA_ABI || ops->lm_size != sizeof(mt_kyutai_lm)) {
        mt_set_err(err, errlen, "depformer: the CUDA module's is not of this build (abi %d, want %d)",
                   ops ? ops->abi : -1, DEP_CUDA_ABI);
        return -1;
    }
    mt_depformer *df = mt_calloc_or_err(1, sizeof *df, err, errlen, "depformer");
    if (!df)
        return -1;
    df->lm = lm;
    df->maxb = max_batch;
    df->ops = ops;
    if (ops->create(lm, max_batch, &df->g, err, errlen) != 0) {
        free(df);
        return -1;
    }
    *out = df;
    return 0;
#else
    (void)lm;
    (void)max_batch;
    mt_set_err(err, errlen, "depformer: built without CUDA (no nvcc at build time)");
    return -1;
#endif
}

int mt_depformer_create_sim(const mt_kyutai_lm *lm, int max_batch, mt_depformer **out,
                            char *err, size_t errlen)
{
    *out = NULL;
    if (lm->kc.dep_q < 1 || max_batch < 1) {
        mt_set_err(err, errlen, "depformer: %s", lm->kc.dep_q < 1 ? "the model has none (dep_q 0)"
                                                                   : "batch under 1");
        return -1;
    }
    mt_depformer *df = mt_calloc_or_err(1, sizeof *df, err, errlen, "depformer");
    if (!df)
        return -1;
    df->lm = lm;
    df->maxb = max_batch;
    df->sim = 1;
    *out = df;
    return 0;
}

int mt_depformer_is_cuda(const mt_depformer *df) { return df->g != NULL; }
int mt_depformer_is_sim(const mt_depformer *df) { return df->sim; }
int mt_depformer_can_frame(const mt_depformer *df) { return df->g && df->ops->frame; }

int mt_depformer_frame(mt_depformer *df, const int32_t *text, const float *temp,
                       const int *top_k, const int *greedy, uint64_t *rng, int32_t *audio)
{
    if (!mt_depformer_can_frame(df)) {
        mt_set_err(df->err, sizeof df->err, "depformer: no device sampling here (CUDA only)");
        return -1;
    }
    return df->ops->frame(df->g, text, temp, top_k, greedy, rng, audio, df->err,
                          sizeof df->err);
}
const char *mt_depformer_error(const mt_depformer *df) { return df->err; }

int mt_depformer_begin(mt_depformer *df, int B, const float *h)
{
    df->B = B;
    df->h = h;
    if (df->g)
        return df->ops->begin(df->g, B, h, df->err, sizeof df->err);
    return 0;
}

/* Kyutai's RMSNorm in fp32: x * alpha * rsqrt(eps + mean(x^2)). */
static void rmsnorm_rows(float *out, const float *x, const float *w, int B, int n, float eps)
{
    for (int r = 0; r < B; r++) {
        const float *xr = x + (size_t)r * n;
        float *o = out + (size_t)r * n;
        float ss = 0;
        for (int i = 0; i < n; i++)
            ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(eps + ss / (float)n);
        for (int i = 0; i < n; i++)
            o[i] = xr[i] * (w[i] * inv);
    }
}

/* Y [B, N] (+)= X [B, K] . W [N, K]^T, X rows ldx apart (sgemv for one
 * row: OpenBLAS's sgemm takes longer over a single row) */
static void gemm_ld(int B, int N, int K, const float *X, int ldx, const float *W, float beta,
                    float *Y)
{
    if (B == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W, K, X, 1, beta, Y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, N, K, 1.0f, X, ldx, W, K, beta,
                    Y, N);
}

static void gemm(int B, int N, int K, const float *X, const float *W, float beta, float *Y)
{
    gemm_ld(B, N, K, X, K, W, beta, Y);
}

static void add_emb(float *x, const float *table, int32_t tok, int n)
{
    if (tok < 0)        /* -1: the zero embedding */
        return;
    const float *e = table + (size_t)tok * n;
    for (int i = 0; i < n; i++)
        x[i] += e[i];
}

int mt_depformer_next(mt_depformer *df, int k, const int32_t *prev, float *logits)
{
    if (df->g)
        return df->ops->next(df->g, k, prev, logits, df->err, sizeof df->err);
    if (df->sim) {   /* equal logits: the sampler draws among its top k */
        memset(logits, 0, (size_t)df->B * df->lm->kc.card * sizeof(float));
        return 0;
    }
    const mt_kyutai_lm *lm = df->lm;
    const mt_kyutai_config *kc = &lm->kc;
    const int B = df->B, dd = kc->dep_dim, F = kc->dep_ffn, Q = kc->dep_q;
    const int nh = kc->dep_heads, hd = dd / nh;
    const float scale = 1.0f / sqrtf((float)hd);

    /* x [B, dd] = depformer_in[k] . h + the previous token's embedding */
    gemm(B, dd, kc->dim, df->h, lm->dep_in[k], 0.0f, df->x);
    for (int r = 0; r < B; r++)
        add_emb(df->x + (size_t)r * dd, k == 0 ? lm->dep_text_emb : lm->dep_emb[k - 1],
                prev[r], dd);

    for (int l = 0; l < kc->dep_layers; l++) {
        const mt_ky_dep_w *w = &lm->dep[(size_t)l * Q + k];
        rmsnorm_rows(df->xn, df->x, lm->dep_norm1[l], B, dd, kc->eps);
        gemm(B, 3 * dd, dd, df->xn, w->wqkv, 0.0f, df->qkv);
        for (int r = 0; r < B; r++) {
            /* this row's frame cache: K [Q, dd] then V [Q, dd] */
            float *kr = df->kv + (((size_t)l * df->maxb + r) * 2) * Q * dd;
            float *vr = kr + (size_t)Q * dd;
            const float *q = df->qkv + (size_t)r * 3 * dd;
            memcpy(kr + (size_t)k * dd, q + dd, (size_t)dd * sizeof(float));
            memcpy(vr + (size_t)k * dd, q + 2 * dd, (size_t)dd * sizeof(float));
            float *o = df->att + (size_t)r * dd;
            for (int h = 0; h < nh; h++) {
                float m = -INFINITY, sum = 0;
                for (int t = 0; t <= k; t++) {
                    float s = 0;
                    for (int i = 0; i < hd; i++)
                        s += q[h * hd + i] * kr[(size_t)t * dd + h * hd + i];
                    df->score[t] = s * scale;
                    m = df->score[t] > m ? df->score[t] : m;
                }
                for (int t = 0; t <= k; t++) {
                    df->score[t] = expf(df->score[t] - m);
                    sum += df->score[t];
                }
                for (int i = 0; i < hd; i++) {
                    float a = 0;
                    for (int t = 0; t <= k; t++)
                        a += df->score[t] * vr[(size_t)t * dd + h * hd + i];
                    o[h * hd + i] = a / sum;
                }
            }
        }
        gemm(B, dd, dd, df->att, w->wo, 1.0f, df->x);
        rmsnorm_rows(df->xn, df->x, lm->dep_norm2[l], B, dd, kc->eps);
        gemm(B, 2 * F, dd, df->xn, w->w_in, 0.0f, df->gu);
        for (int r = 0; r < B; r++) {
            float *g = df->gu + (size_t)r * 2 * F;
            for (int i = 0; i < F; i++)
                g[i] = g[i] / (1.0f + expf(-g[i])) * g[F + i];
        }
        /* x += silu(gate) * up . linear_out^T, reading the gate halves */
        gemm_ld(B, dd, F, df->gu, 2 * F, w->w_out, 1.0f, df->x);
    }
    gemm(B, kc->card, dd, df->x, lm->linears[k], 0.0f, logits);
    return 0;
}
