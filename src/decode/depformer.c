/* depformer.c: Kyutai's depformer step by step over a batch of rows
 * (depformer.h), one product per weight matrix and step for all rows (the
 * weight read once per step, not once per row), each split by output
 * columns over the decoder's threads once attached (mt_depformer_attach;
 * a step is one mt_decoder_parallel phase in which the threads take the
 * products' columns in chunks, below "one phase a step"): OpenBLAS on
 * each thread's columns of the fp32 weights, or the f16 product
 * (cpu_f16.c) on a half copy for calls of up to the backbone's f16 rows
 * (with --weights q8, the 8-bit product, cpu_q8.c, on an 8-bit copy
 * instead); or, made by mt_depformer_create_cuda, the same steps
 * forwarded to the CUDA module (depformer_cuda.h); or, made by
 * mt_depformer_create_sim, no work at all (a simulated device's profile
 * times it). */
#include "util/errmsg.h"
#include "decode/cpu_f16.h"
#include "decode/cpu_q8.h"
#include "decode/cpu_silu.h"
#include "gpu/cuda_module.h"
#include "decode/decoder.h"
#include "decode/depformer.h"
#include "decode/depformer_cuda.h"
#include "util/grow.h"
#include "util/vec8.h"

#include <cblas.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Column mode pays a barrier per stage: worth it only where a product
 * is large (a real depformer's depformer_in, 1024 x 4096 for Moshi); the
 * tiny test presets' products are done before the threads would wake. */
enum { COLUMNS_MIN_WEIGHTS = 1 << 20 };
/* Column mode: a product's columns cut in this many chunks per thread. */
enum { DEP_CHUNKS_PER_THREAD = 4 };

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
    float *score;     /* [threads][dep_q] each thread's attention weights */
    /* attached to a decoder (mt_depformer_attach): its threads, and f16
     * copies when it has them; NULL: every phase inline on one thread */
    mt_decoder *dec;
    int   nthreads;   /* threads score was sized for */
    int   serial;     /* mt_depformer_set_serial: attach does nothing */
    int   sim;        /* mt_depformer_create_sim: logits all zero, no work */
    int   f16_rows;   /* the f16 copies serve calls of up to this many rows */
    uint16_t *w16;    /* every half copy below, one allocation */
    uint16_t **in16, **lin16;  /* [dep_q] depformer_in[k], linears[k] */
    struct dep16 { uint16_t *wqkv, *wo, *w_in, *w_out; } *dep16; /* [layers * dep_q] */
    /* --weights q8: 8-bit copies (bytes [N, K], scales [N, K/32]) in place
     * of the half ones, the same matrices */
    int8_t *w8;       /* every copy's bytes, one allocation */
    float  *w8s;      /* and their scales */
    mt_q8_mat *in8, *lin8;                                       /* [dep_q] */
    struct dep8 { mt_q8_mat wqkv, wo, w_in, w_out; } *dep8;      /* [layers * dep_q] */
    /* the job posted to the threads (column mode) */
    struct dep_job {
        int op;                   /* JOB_GEMM, JOB_GATE_UP, JOB_ATTEND */
        const float *X;           /* [B, K] rows ldx apart */
        int ldx, K, N;
        const float *W;           /* [N, K] */
        const uint16_t *W16;      /* the same in f16, or NULL */
        const mt_q8_mat *W8;      /* the same in 8 bits, or NULL */
        float beta, *Y;           /* [B, N] rows ldy apart */
        int ldy;
        const float *emb;         /* JOB_GEMM: + this table's row prev[r] */
        const int32_t *prev;
        int l, k;                 /* JOB_ATTEND: layer, step */
    } job;
    /* column mode as one phase a step (step_fused): each stage's chunk
     * counters, reset before the step; its k, prev and logits */
    struct dep_stage { atomic_int claim, done, ready; } *stage; /* [2 + 5 layers], frame
                                                                    mode [frame_stages] */
    int   fused;      /* 0: a phase per product instead (MT_DEPFORMER_FUSED=0) */
    int   frame_env;  /* MT_DEPFORMER_FRAME: 0 never frame mode, 1 wherever it can run,
                         -1 (unset) mt_depformer_frame_split's choice */
    int   chunks;     /* a product's columns cut in this many chunks a thread */
    size_t columns_min; /* column mode from this many depformer_in weights */
    float *xin;       /* [dep_q][B][dd] depformer_in[k] . h of every step, made at
                         step 0 (h is the frame's; column and frame modes) */
    int   fused_k;
    const int32_t *fused_prev;
    float *fused_logits;
    /* frame mode (mt_depformer_run_frame): each thread's normed rows and
     * what the frame samples with (its stage counters in stage[]) */
    float *xnt;       /* [nthreads][maxb][dd] */
    mt_dep_sample_fn sample;
    void *sample_ctx;
    int32_t *frame_tok;
    float *frame_logits;
    const mt_dep_cuda_ops *ops;   /* CUDA: every step is the module's */
    mt_dep_cuda *g;
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
    free(df->w16);
    free(df->in16);
    free(df->lin16);
    free(df->dep16);
    free(df->w8);
    free(df->w8s);
    free(df->in8);
    free(df->lin8);
    free(df->dep8);
    free(df->stage);
    free(df->xin);
    free(df->xnt);
    free(df);
}

static int n_stages(const mt_kyutai_config *kc);
static int frame_stages(const mt_kyutai_config *kc);

/* A depformer of lm for max_batch rows, zeroed but for those two; NULL
 * with err when out of memory. */
static mt_depformer *df_new(const mt_kyutai_lm *lm, int max_batch, char *err, size_t errlen)
{
    mt_depformer *df = mt_calloc_or_err(1, sizeof *df, err, errlen, "depformer");
    if (df) {
        df->lm = lm;
        df->maxb = max_batch;
        df->columns_min = COLUMNS_MIN_WEIGHTS;
        const char *e = getenv("MT_DEPFORMER_FUSED");
        df->fused = !(e && !strcmp(e, "0"));
        /* more chunks balance a late thread better, fewer pay less per
         * call (each call quantises its input afresh); benchmarks may
         * set MT_DEPFORMER_CHUNKS (1..64) */
        e = getenv("MT_DEPFORMER_FRAME");
        df->frame_env = e && *e ? atoi(e) != 0 : -1;
        e = getenv("MT_DEPFORMER_CHUNKS");
        df->chunks = e && atoi(e) >= 1 && atoi(e) <= 64 ? atoi(e) : DEP_CHUNKS_PER_THREAD;
    }
    return df;
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
    mt_depformer *df = df_new(lm, max_batch, err, errlen);
    if (!df)
        return -1;
    size_t R = (size_t)max_batch, dd = (size_t)kc->dep_dim;
    df->x = mt_alloc_lines(R * dd * sizeof(float));
    df->xn = mt_alloc_lines(R * dd * sizeof(float));
    df->qkv = mt_alloc_lines(R * 3 * dd * sizeof(float));
    df->att = mt_alloc_lines(R * dd * sizeof(float));
    df->gu = mt_alloc_lines(R * 2 * (size_t)kc->dep_ffn * sizeof(float));
    df->kv = malloc((size_t)kc->dep_layers * R * 2 * kc->dep_q * dd * sizeof(float));
    df->score = malloc((size_t)kc->dep_q * sizeof(float));
    df->stage = calloc((size_t)frame_stages(kc), sizeof *df->stage);   /* frame mode's are more */
    df->xin = mt_alloc_lines((size_t)kc->dep_q * R * dd * sizeof(float));
    if (!df->x || !df->xn || !df->qkv || !df->att || !df->gu || !df->kv || !df->score ||
        !df->stage || !df->xin) {
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
    mt_depformer *df = df_new(lm, max_batch, err, errlen);
    if (!df)
        return -1;
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
    mt_depformer *df = df_new(lm, max_batch, err, errlen);
    if (!df)
        return -1;
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

/* Kyutai's RMSNorm in fp32: x * alpha * rsqrt(eps + mean(x^2)). The
 * squares in 8 running sums (sum l: elements l, l + 8, ...) added in a
 * fixed tree, the scaling eight lanes at a time: scalar, one chain of n
 * dependent adds and a store a float, it was a tenth of kyutai-small's LM
 * frame at B = 32. The order is fixed, so a row's bits depend on nothing
 * but the row. */
#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void rmsnorm_rows(float *out, const float *x, const float *w, int B, int n, float eps)
{
    for (int r = 0; r < B; r++) {
        const float *xr = x + (size_t)r * n;
        float *o = out + (size_t)r * n;
        v8f acc = splat8(0.0f);
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            v8f v = load8(xr + i);
            acc += v * v;
        }
        float p[8];
        memcpy(p, &acc, sizeof p);
        for (; i < n; i++)
            p[i % 8] += xr[i] * xr[i];
        float ss = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
        float inv = 1.0f / sqrtf(eps + ss / (float)n);
        const v8f inv8 = splat8(inv);
        for (i = 0; i + 8 <= n; i += 8)
            store8(o + i, load8(xr + i) * (load8(w + i) * inv8));
        for (; i < n; i++)
            o[i] = xr[i] * (w[i] * inv);
    }
}

/* ---- f16 and q8 copies ------------------------------------------------------ */

/* One matrix [N, K] into the q8 copy at *q, *s (moved past it), in lane
 * groups where the kernels read them (cpu_q8.h); -1 where a value is
 * not finite. */
static int take_q8(mt_q8_mat *d, const float *src, size_t N, size_t K, int8_t **q, float **s)
{
    return mt_q8_take(d, MT_Q8_LANES, src, N, (int)K, q, s);
}

/* --weights q8 (every width a multiple of the block): 8-bit copies of
 * every per-step matrix, used for calls of up to rows rows. */
static int make_q8(mt_depformer *df, int rows, char *err, size_t errlen)
{
    const mt_kyutai_config *kc = &df->lm->kc;
    const int Q = kc->dep_q, L = kc->dep_layers;
    const size_t dd = (size_t)kc->dep_dim, F = (size_t)kc->dep_ffn;
    size_t per_step = dd * kc->dim + (size_t)L * (4 * dd * dd + 3 * dd * F) + (size_t)kc->card * dd;
    df->w8 = malloc(per_step * Q);
    df->w8s = malloc(per_step * Q / MT_Q8_BLOCK * sizeof(float));
    df->in8 = calloc((size_t)Q, sizeof *df->in8);
    df->lin8 = calloc((size_t)Q, sizeof *df->lin8);
    df->dep8 = calloc((size_t)L * Q, sizeof *df->dep8);
    if (!df->w8 || !df->w8s || !df->in8 || !df->lin8 || !df->dep8) {
        mt_set_err(err, errlen, "depformer: cannot allocate the q8 weights (%zu bytes)",
                   per_step * Q + per_step * Q / MT_Q8_BLOCK * sizeof(float));
        return -1;
    }
    mt_q8_init();
    int8_t *q = df->w8;
    float *s = df->w8s;
    int bad = 0;
    for (int k = 0; k < Q; k++) {
        bad |= take_q8(&df->in8[k], df->lm->dep_in[k], dd, (size_t)kc->dim, &q, &s);
        bad |= take_q8(&df->lin8[k], df->lm->linears[k], (size_t)kc->card, dd, &q, &s);
        for (int l = 0; l < L; l++) {
            const mt_ky_dep_w *w = &df->lm->dep[(size_t)l * Q + k];
            struct dep8 *h = &df->dep8[(size_t)l * Q + k];
            bad |= take_q8(&h->wqkv, w->wqkv, 3 * dd, dd, &q, &s);
            bad |= take_q8(&h->wo, w->wo, dd, dd, &q, &s);
            bad |= take_q8(&h->w_in, w->w_in, 2 * F, dd, &q, &s);
            bad |= take_q8(&h->w_out, w->w_out, dd, F, &q, &s);
        }
    }
    if (bad) {
        mt_set_err(err, errlen, "depformer: --weights q8: a weight is not finite");
        return -1;
    }
    df->f16_rows = rows;
    return 0;
}

void mt_depformer_set_serial(mt_depformer *df) { df->serial = 1; }

int mt_depformer_attach(mt_depformer *df, mt_decoder *dec, char *err, size_t errlen)
{
    if (df->g || df->serial || df->sim)
        return 0;               /* CUDA: the module's own; sim: no work */
    const mt_kyutai_config *kc = &df->lm->kc;
    const int Q = kc->dep_q, L = kc->dep_layers;
    const size_t dd = (size_t)kc->dep_dim, F = (size_t)kc->dep_ffn;
    /* beside a backend without host threads (sim, CUDA), the decoder's
     * own: --threads of them, as on the CPU backend */
    if (mt_decoder_host_threads(dec, err, errlen))
        return -1;
    int T = mt_decoder_threads(dec);
    float *score = malloc((size_t)T * Q * sizeof(float));
    float *xnt = mt_alloc_lines((size_t)T * df->maxb * dd * sizeof(float));
    if (!score || !xnt) {
        free(score);
        free(xnt);
        mt_set_err(err, errlen, "depformer: out of memory");
        return -1;
    }
    free(df->score);
    df->score = score;
    free(df->xnt);
    df->xnt = xnt;
    df->nthreads = T;
    df->dec = dec;
    int rows = mt_decoder_host_weight_rows(dec);
    if (rows <= 0 || df->w16 || df->w8)
        return 0;
    if (mt_decoder_weights_format(dec) == MT_FMT_Q8 && kc->dim % MT_Q8_BLOCK == 0 &&
        dd % MT_Q8_BLOCK == 0 && F % MT_Q8_BLOCK == 0)
        return make_q8(df, rows, err, errlen);
    size_t per_step = dd * kc->dim + (size_t)L * (4 * dd * dd + 3 * dd * F) + (size_t)kc->card * dd;
    df->w16 = malloc(per_step * Q * sizeof(uint16_t));
    df->in16 = calloc((size_t)Q, sizeof *df->in16);
    df->lin16 = calloc((size_t)Q, sizeof *df->lin16);
    df->dep16 = calloc((size_t)L * Q, sizeof *df->dep16);
    if (!df->w16 || !df->in16 || !df->lin16 || !df->dep16) {
        mt_set_err(err, errlen, "depformer: cannot allocate the f16 weights (%zu bytes)",
                   per_step * Q * sizeof(uint16_t));
        return -1;
    }
    mt_half_init();
    uint16_t *p = df->w16;
#define TAKE(dst, src, count)          \
    do {                               \
        (dst) = p;                     \
        mt_half_pack(p, (src), (count)); \
        p += (count);                  \
    } while (0)
    for (int k = 0; k < Q; k++) {
        TAKE(df->in16[k], df->lm->dep_in[k], dd * kc->dim);
        TAKE(df->lin16[k], df->lm->linears[k], (size_t)kc->card * dd);
        for (int l = 0; l < L; l++) {
            const mt_ky_dep_w *w = &df->lm->dep[(size_t)l * Q + k];
            struct dep16 *h = &df->dep16[(size_t)l * Q + k];
            TAKE(h->wqkv, w->wqkv, 3 * dd * dd);
            TAKE(h->wo, w->wo, dd * dd);
            TAKE(h->w_in, w->w_in, 2 * F * dd);
            TAKE(h->w_out, w->w_out, dd * F);
        }
    }
#undef TAKE
    df->f16_rows = rows;
    return 0;
}

int mt_depformer_f16(const mt_depformer *df) { return df->w16 != NULL || df->w8 != NULL; }

const char *mt_depformer_mode(const mt_depformer *df)
{
    return df->g ? "cuda" : !df->dec ? "serial" : df->w16 ? "pool-f16" : df->w8 ? "pool-q8" : "pool";
}

/* ---- the phases ------------------------------------------------------------ */

enum { JOB_GEMM, JOB_GATE_UP, JOB_ATTEND };

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define dep_relax() _mm_pause()
#else
#define dep_relax() ((void)0)
#endif
enum { SLICE_ALIGN = 16 };   /* columns a thread's slice starts on */

/* [lo, hi) of n split in nt slices aligned to SLICE_ALIGN. */
static void slice(int n, int tid, int nt, int *lo, int *hi)
{
    int per = (n + nt - 1) / nt;
    per = (per + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
    *lo = tid * per < n ? tid * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* Y[:, lo:hi] (+)= X . W[lo:hi, :]^T over B rows: the f16 product on
 * the half copy up to f16_rows rows, else OpenBLAS (sgemv for one row:
 * its sgemm takes longer over a single row). */
static void gemm_cols(const mt_depformer *df, const struct dep_job *j, int B, int lo, int hi,
                      int w_off, int y_off)
{
    int N = hi - lo;
    if (N <= 0)
        return;
    const size_t K = (size_t)j->K;
    float *Y = j->Y + y_off + lo;
    if (j->W8 && B <= df->f16_rows)
        mt_q8_gemm_rows(j->W8->layout, B, w_off + lo, w_off + hi, j->W8->n, j->K, j->X, j->ldx,
                        j->W8->q, j->W8->s, j->beta, Y, j->ldy);
    else if (j->W16 && B <= df->f16_rows)
        mt_half_gemm(B, N, j->K, j->X, j->ldx, j->W16 + (size_t)(w_off + lo) * K, j->beta, Y,
                     j->ldy);
    else if (B == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, N, j->K, 1.0f, j->W + (size_t)(w_off + lo) * K,
                    j->K, j->X, 1, j->beta, Y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, N, j->K, 1.0f, j->X, j->ldx,
                    j->W + (size_t)(w_off + lo) * K, j->K, j->beta, Y, j->ldy);
}

/* Row r's frame cache at layer l, K [Q, dd] then V [Q, dd] (*kr, *vr),
 * with step k's new K,V written to it from the qkv buffer; returns the
 * row's q. */
static const float *frame_cache_put(mt_depformer *df, int l, int k, int r, float **kr,
                                    float **vr)
{
    const mt_kyutai_config *kc = &df->lm->kc;
    const int dd = kc->dep_dim, Q = kc->dep_q;
    *kr = df->kv + (((size_t)l * df->maxb + r) * 2) * Q * dd;
    *vr = *kr + (size_t)Q * dd;
    const float *q = df->qkv + (size_t)r * 3 * dd;
    memcpy(*kr + (size_t)k * dd, q + dd, (size_t)dd * sizeof(float));
    memcpy(*vr + (size_t)k * dd, q + 2 * dd, (size_t)dd * sizeof(float));
    return q;
}

/* q . k over n floats one lane at a time: the depformer's attention as it
 * was before issue 49 (mt_depformer_set_serial, the benchmark's old side). */
static inline float dot_before(const float *q, const float *k, int n)
{
    float sc = 0;
    for (int i = 0; i < n; i++)
        sc += q[i] * k[i];
    return sc;
}

/* Attention of rows [r0, r1) at step k of layer l over the frame's
 * positions 0..k, the new K,V written to each row's frame cache first.
 * 8 lanes at a time (util/vec8.h): a score is a dot8 over the head's
 * width, the output the weighted rows added with axpy8; in serial mode
 * (the benchmark's old side) one lane at a time, as before issue 49. */
#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void attend_rows(mt_depformer *df, int l, int k, int r0, int r1, float *score)
{
    const mt_kyutai_config *kc = &df->lm->kc;
    const int dd = kc->dep_dim, nh = kc->dep_heads, hd = dd / nh, before = df->serial;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = r0; r < r1; r++) {
        float *kr, *vr;
        const float *q = frame_cache_put(df, l, k, r, &kr, &vr);
        float *o = df->att + (size_t)r * dd;
        for (int h = 0; h < nh; h++) {
            float m = -INFINITY, sum = 0;
            for (int t = 0; t <= k; t++) {
                const float *kt = kr + (size_t)t * dd + h * hd;
                score[t] = (before ? dot_before(q + h * hd, kt, hd) : dot8(q + h * hd, kt, hd)) *
                           scale;
                m = score[t] > m ? score[t] : m;
            }
            for (int t = 0; t <= k; t++) {
                score[t] = expf(score[t] - m);
                sum += score[t];
            }
            float *oh = o + h * hd;
            if (before) {
                for (int i = 0; i < hd; i++) {
                    float a = 0;
                    for (int t = 0; t <= k; t++)
                        a += score[t] * vr[(size_t)t * dd + h * hd + i];
                    oh[i] = a / sum;
                }
                continue;
            }
            memset(oh, 0, (size_t)hd * sizeof(float));
            for (int t = 0; t <= k; t++)
                axpy8(oh, score[t] / sum, vr + (size_t)t * dd + h * hd, hd);
        }
    }
}

/* Columns [lo, hi) of a product job j over B rows (its X, Y and prev
 * already offset to the first): JOB_GEMM, plus the previous token's
 * embedding where it has one; JOB_GATE_UP, gate | up of those columns of
 * the ffn width, then silu(gate) * up into the gate half. */
static void do_cols(mt_depformer *df, const struct dep_job *j, int B, int lo, int hi)
{
    if (j->op == JOB_GEMM) {
        gemm_cols(df, j, B, lo, hi, 0, 0);
        if (j->emb)             /* + the previous token's embedding (-1: zero) */
            for (int r = 0; r < B; r++)
                if (j->prev[r] >= 0)
                    for (int i = lo; i < hi; i++)
                        j->Y[(size_t)r * j->ldy + i] += j->emb[(size_t)j->prev[r] * j->N + i];
        return;
    }
    const int F = j->N;
    gemm_cols(df, j, B, lo, hi, 0, 0);
    gemm_cols(df, j, B, lo, hi, F, F);
    for (int r = 0; r < B; r++) {
        float *g = j->Y + (size_t)r * 2 * F;
        if (df->serial)   /* as before issue 49: libm's expf a value */
            for (int i = lo; i < hi; i++)
                g[i] = g[i] / (1.0f + expf(-g[i])) * g[F + i];
        else
            mt_silu_mul(g + lo, g + F + lo, hi > lo ? (size_t)(hi - lo) : 0);
    }
}

/* Rows [*r0, *r1) of share c of n over B rows. */
static void row_share(int B, int c, int n, int *r0, int *r1)
{
    int per = (B + n - 1) / n;
    *r0 = c * per < B ? c * per : B;
    *r1 = *r0 + per < B ? *r0 + per : B;
}

/* Job j over rows [r0, r0 + B) (its X, Y and prev already offset to
 * r0), as thread tid of nt: its slice of the columns, or of the rows for
 * the attention; score: this thread's [dep_q]. */
static void do_job(mt_depformer *df, const struct dep_job *j, int r0, int B, int tid, int nt,
                   float *score)
{
    int lo, hi;
    if (j->op == JOB_ATTEND) {
        int a, b;
        row_share(B, tid, nt, &a, &b);
        attend_rows(df, j->l, j->k, r0 + a, r0 + b, score);
        return;
    }
    slice(j->N, tid, nt, &lo, &hi);
    do_cols(df, j, B, lo, hi);
}

/* The job posted to the decoder's threads (column mode). */
static void phase(void *ctx, int tid, int nt)
{
    mt_depformer *df = ctx;
    do_job(df, &df->job, 0, df->B, tid, nt, df->score + (size_t)tid * df->lm->kc.dep_q);
}

/* Runs job j over rows [r0, r0 + B): split over the decoder's threads
 * (pool: column mode, all rows), else on this thread alone as thread tid
 * (its score slot; row mode, or not attached). */
static void run_job(mt_depformer *df, struct dep_job *j, int r0, int B, int pool, int tid)
{
    /* one row's attention is one thread's work: no phase (and no
     * barrier, which waits on a loaded machine) for it */
    if (pool && !(j->op == JOB_ATTEND && B == 1)) {
        df->job = *j;
        mt_decoder_parallel(df->dec, phase, df);
    } else {
        do_job(df, j, r0, B, 0, 1, df->score + (size_t)tid * df->lm->kc.dep_q);
    }
}

static struct dep_job gemm_job(const float *X, int ldx, int K, const float *W,
                               const uint16_t *W16, int N, float beta, float *Y, int ldy)
{
    return (struct dep_job){ .op = JOB_GEMM, .X = X, .ldx = ldx, .K = K, .N = N, .W = W,
                             .W16 = W16, .beta = beta, .Y = Y, .ldy = ldy };
}

/* A step's stages in order: depformer_in (0), then per layer these five,
 * then the linears (the last); each stage's products read what the stage
 * before wrote in full (a barrier between two stages, no more). */
enum { ST_QKV, ST_ATTEND, ST_O, ST_GATE_UP, ST_OUT, ST_PER_LAYER };

static int n_stages(const mt_kyutai_config *kc) { return 2 + ST_PER_LAYER * kc->dep_layers; }

/* Stage s of step k over the rows from r0 (its X, Y and prev offset to
 * r0): its job, and in *norm the RMSNorm weights that x must go through
 * into xn before it (NULL: none). */
static struct dep_job stage_job(const mt_depformer *df, int k, int s, int r0,
                                const int32_t *prev, float *logits, const float **norm)
{
    const mt_kyutai_lm *lm = df->lm;
    const mt_kyutai_config *kc = &lm->kc;
    const int dd = kc->dep_dim, F = kc->dep_ffn, Q = kc->dep_q;
    const size_t R = (size_t)r0;
    float *x = df->x + R * dd, *xn = df->xn + R * dd, *qkv = df->qkv + R * 3 * dd;
    float *att = df->att + R * dd, *gu = df->gu + R * 2 * F;
    struct dep_job j;
    *norm = NULL;
    if (s == 0) {   /* x [B, dd] = depformer_in[k] . h + the previous token's embedding */
        j = gemm_job(df->h + R * kc->dim, kc->dim, kc->dim, lm->dep_in[k],
                     df->w16 ? df->in16[k] : NULL, dd, 0.0f, x, dd);
        j.W8 = df->w8 ? &df->in8[k] : NULL;
        j.emb = k == 0 ? lm->dep_text_emb : lm->dep_emb[k - 1];
        j.prev = prev + r0;
        return j;
    }
    if (s == n_stages(kc) - 1) {   /* logits [B, card] = linears[k] . x */
        j = gemm_job(x, dd, dd, lm->linears[k], df->w16 ? df->lin16[k] : NULL, kc->card,
                     0.0f, logits + R * kc->card, kc->card);
        j.W8 = df->w8 ? &df->lin8[k] : NULL;
        return j;
    }
    const int l = (s - 1) / ST_PER_LAYER;
    const mt_ky_dep_w *w = &lm->dep[(size_t)l * Q + k];
    const struct dep16 *w16 = df->w16 ? &df->dep16[(size_t)l * Q + k] : NULL;
    const struct dep8 *w8 = df->w8 ? &df->dep8[(size_t)l * Q + k] : NULL;
    switch ((s - 1) % ST_PER_LAYER) {
    case ST_QKV:
        *norm = lm->dep_norm1[l];
        j = gemm_job(xn, dd, dd, w->wqkv, w16 ? w16->wqkv : NULL, 3 * dd, 0.0f, qkv, 3 * dd);
        j.W8 = w8 ? &w8->wqkv : NULL;
        return j;
    case ST_ATTEND:
        return (struct dep_job){ .op = JOB_ATTEND, .l = l, .k = k };
    case ST_O:      /* x += out_proj . attention */
        j = gemm_job(att, dd, dd, w->wo, w16 ? w16->wo : NULL, dd, 1.0f, x, dd);
        j.W8 = w8 ? &w8->wo : NULL;
        return j;
    case ST_GATE_UP:
        *norm = lm->dep_norm2[l];
        j = gemm_job(xn, dd, dd, w->w_in, w16 ? w16->w_in : NULL, F, 0.0f, gu, 2 * F);
        j.W8 = w8 ? &w8->w_in : NULL;
        j.op = JOB_GATE_UP;
        return j;
    default:        /* x += silu(gate) * up . linear_out^T, reading the gate halves */
        j = gemm_job(gu, 2 * F, F, w->w_out, w16 ? w16->w_out : NULL, dd, 1.0f, x, dd);
        j.W8 = w8 ? &w8->w_out : NULL;
        return j;
    }
}

/* Step k for rows [r0, r1): every product over those rows at once, a
 * pool phase each (pool) or all on this thread. */
static void step_rows(mt_depformer *df, int k, int r0, int r1, const int32_t *prev,
                      float *logits, int pool, int tid)
{
    const mt_kyutai_config *kc = &df->lm->kc;
    const int B = r1 - r0, dd = kc->dep_dim;
    float *x = df->x + (size_t)r0 * dd, *xn = df->xn + (size_t)r0 * dd;
    for (int s = 0; s < n_stages(kc); s++) {
        const float *norm;
        struct dep_job j = stage_job(df, k, s, r0, prev, logits, &norm);
        if (norm)
            rmsnorm_rows(xn, x, norm, B, dd, kc->eps);
        run_job(df, &j, r0, B, pool, tid);
    }
}

/* ---- one phase a step (column mode) ----------------------------------------
 * A barrier per product posted through the pool costs a wake-up, and on a
 * loaded machine a wait for a thread that is not running: a 2B Moshi
 * frame at B = 1 was 16 x 26 of them, and two threads lost to one when
 * another process held a core. Here a step is one pool phase: every
 * thread walks the step's stages, taking each stage's work in chunks
 * (columns of a product, rows of the attention) from a shared counter,
 * so a thread that runs late finds its chunks taken by the other and a
 * stage waits at most for a chunk in hand, not for half the product.
 * The thread that finishes a stage's last chunk makes the next stage's
 * input (its RMSNorm) and opens it. depformer_in reads only the frame's
 * h: step 0's first stage makes it for every step, so the later steps
 * start at their first layer. A column's value does not depend on
 * which chunk holds it (chunks start on SLICE_ALIGN columns, as the
 * slices do), so the logits are those of one thread, bit for bit. */

/* Columns per chunk of a product N wide, on nt threads: cut in
 * df->chunks per thread. */
static int chunk_cols(const mt_depformer *df, int N, int nt)
{
    int per = (N + nt * df->chunks - 1) / (nt * df->chunks);
    return (per + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
}

/* Waits until *v reaches n (a stage's ready flag 1, its done count):
 * spins, and past a short while yields the CPU at every turn (the thread
 * with the chunk in hand may want this core). */
static void wait_at_least(const atomic_int *v, int n)
{
    enum { SPIN_PAUSES = 2048 };
    for (unsigned i = 0; atomic_load_explicit(v, memory_order_acquire) < n; i++) {
        if (i < SPIN_PAUSES)
            dep_relax();
        else
            sched_yield();
    }
}

/* Chunk c of stage job j (all B rows): columns, or row c of the
 * attention. */
static void do_chunk(mt_depformer *df, const struct dep_job *j, int B, int c, int cw,
                     float *score)
{
    if (j->op == JOB_ATTEND) {
        attend_rows(df, j->l, j->k, c, c + 1, score);
        return;
    }
    int lo = c * cw, hi = lo + cw < j->N ? lo + cw : j->N;
    do_cols(df, j, B, lo, hi);
}

/* x rows [r0, r1) = xin[k] + the embedding of each row's previous token
 * prev[r] (-1: none), as do_cols adds it (column and frame modes). */
static void input_rows(mt_depformer *df, int k, const int32_t *prev, int r0, int r1)
{
    const mt_kyutai_lm *lm = df->lm;
    const int dd = lm->kc.dep_dim;
    const float *emb = k == 0 ? lm->dep_text_emb : lm->dep_emb[k - 1];
    const float *xin = df->xin + (size_t)k * df->B * dd;
    for (int r = r0; r < r1; r++) {
        float *x = df->x + (size_t)r * dd;
        memcpy(x, xin + (size_t)r * dd, (size_t)dd * sizeof(float));
        if (prev[r] >= 0)
            for (int i = 0; i < dd; i++)
                x[i] += emb[(size_t)prev[r] * dd + i];
    }
}

/* x [B, dd] for step k of the fused walk, then xn = its RMSNorm for
 * layer 0. */
static void fused_input(mt_depformer *df, int k)
{
    const mt_kyutai_lm *lm = df->lm;
    input_rows(df, k, df->fused_prev, 0, df->B);
    rmsnorm_rows(df->xn, df->x, lm->dep_norm1[0], df->B, lm->kc.dep_dim, lm->kc.eps);
}

/* Stage s's job for the fused walk, its chunk width and count: stage 0
 * (only at step 0) is depformer_in of every step into xin, chunk c in
 * step c / (chunks a step). */
static struct dep_job fused_job(mt_depformer *df, int s, int c, int nt, int *cw, int *n)
{
    const mt_kyutai_config *kc = &df->lm->kc;
    const float *norm;
    int k = df->fused_k, per = 0;
    if (s == 0) {
        per = (kc->dep_dim + chunk_cols(df, kc->dep_dim, nt) - 1) / chunk_cols(df, kc->dep_dim, nt);
        k = c < 0 ? 0 : c / per;
    }
    struct dep_job j = stage_job(df, k, s, 0, df->fused_prev, df->fused_logits, &norm);
    *cw = j.op == JOB_ATTEND ? 1 : chunk_cols(df, j.N, nt);
    *n = j.op == JOB_ATTEND ? df->B : (j.N + *cw - 1) / *cw;
    if (s == 0) {
        *n = per * kc->dep_q;
        j.Y = df->xin + (size_t)k * df->B * kc->dep_dim;
        j.emb = NULL;
    }
    return j;
}

/* The step's phase: thread tid of nt walks every stage (fused_*: the
 * step's k, prev and logits; stage 0 at step 0 only). */
static void fused_phase(void *ctx, int tid, int nt)
{
    mt_depformer *df = ctx;
    const mt_kyutai_config *kc = &df->lm->kc;
    const int B = df->B, ns = n_stages(kc), k = df->fused_k;
    float *score = df->score + (size_t)tid * kc->dep_q;
    for (int s = k == 0 ? 0 : 1; s < ns; s++) {
        struct dep_stage *st = &df->stage[s];
        if (s > 0)
            wait_at_least(&df->stage[s - 1].ready, 1);
        int cw, n;
        struct dep_job j = fused_job(df, s, -1, nt, &cw, &n);
        for (;;) {
            int c = atomic_fetch_add_explicit(&st->claim, 1, memory_order_acq_rel);
            if (c >= n)
                break;
            if (s == 0) {   /* depformer_in of step c / per, its chunk c % per */
                j = fused_job(df, 0, c, nt, &cw, &n);
                do_chunk(df, &j, B, c % (n / kc->dep_q), cw, score);
            } else {
                do_chunk(df, &j, B, c, cw, score);
            }
            if (atomic_fetch_add_explicit(&st->done, 1, memory_order_acq_rel) != n - 1)
                continue;
            const float *norm = NULL;   /* the last chunk: the next stage's input */
            if (s == 0)
                fused_input(df, k);
            else if (s + 1 < ns)
                stage_job(df, k, s + 1, 0, df->fused_prev, df->fused_logits, &norm);
            if (norm)
                rmsnorm_rows(df->xn, df->x, norm, B, kc->dep_dim, kc->eps);
            atomic_store_explicit(&st->ready, 1, memory_order_release);
        }
    }
}

/* Step k of all rows as one phase on the decoder's threads; past step 0
 * its input (depformer_in made at step 0) is summed and normed here. */
static void step_fused(mt_depformer *df, int k, const int32_t *prev, float *logits)
{
    for (int s = 0; s < n_stages(&df->lm->kc); s++) {
        atomic_store_explicit(&df->stage[s].claim, 0, memory_order_relaxed);
        atomic_store_explicit(&df->stage[s].done, 0, memory_order_relaxed);
        atomic_store_explicit(&df->stage[s].ready, 0, memory_order_relaxed);
    }
    df->fused_k = k;
    df->fused_prev = prev;
    df->fused_logits = logits;
    if (k > 0) {
        fused_input(df, k);
        atomic_store_explicit(&df->stage[0].ready, 1, memory_order_relaxed);
    }
    /* the pool's post publishes the stores above to the workers */
    mt_decoder_parallel(df->dec, fused_phase, df);
}

/* ---- the frame as one phase (frame mode) -----------------------------------
 * Row mode (each thread its rows through every step) reads every weight
 * once per thread: at 8 rows each of the two threads streams kyutai-small's
 * 28 MB of per-step weights for its 4 rows, 1.4 ms a frame, where one
 * thread alone does 4 rows in 1.1 (the two contend for memory). Column
 * mode reads them once, each thread its columns, but a phase per step
 * (and one to sample) and the chunks' claims and input quantisations
 * cost more than that saved. Here the whole frame is one phase: every
 * product cut by columns in as many pieces as threads (one quantisation
 * of its input a piece), the attention, the sampling
 * (mt_depformer_run_frame's sample) and the next step's input by rows,
 * each stage's pieces taken from its counter and the next stage begun
 * when they are all done (22 stages a step); each thread norms every row
 * itself into its own xn (a row of 256 is less than a wait). Pieces, not
 * fixed halves: with a third busy thread on the two cores, fixed halves
 * and a barrier between stages took 3.5 ms at B = 1 in one run against
 * 0.9 on one thread. The bits are those of the other modes: a column's
 * value does not depend on the columns beside it (test_depformer). */

/* The frame's stages in order: 0 depformer_in of every step (piece p of
 * step p / nt), 1 step 0's input rows, then per step its n_stages - 1
 * (the layers' five, the linears) and its sampling (with the next step's
 * input rows): FRAME_FIRST + k * FRAME_PER(kc) + s - 1, s = 1 ..
 * n_stages (n_stages: the sampling). */
enum { FRAME_FIRST = 2 };
static int frame_per(const mt_kyutai_config *kc) { return n_stages(kc); }
static int frame_stages(const mt_kyutai_config *kc)
{
    return FRAME_FIRST + kc->dep_q * frame_per(kc);
}

/* Piece c of n of stage g (frame_stages' numbering) on this thread: xn
 * its normed rows, score its attention weights. */
static void frame_piece(mt_depformer *df, int g, int c, int n, float *xn, float *score, int tid)
{
    const mt_kyutai_config *kc = &df->lm->kc;
    const int B = df->B, dd = kc->dep_dim;
    const float *norm;
    int lo, hi;
    if (g == 0) {   /* depformer_in of step c / n, its piece c % n */
        int k = c / n;
        struct dep_job j = stage_job(df, k, 0, 0, df->frame_tok, df->frame_logits, &norm);
        j.Y = df->xin + (size_t)k * B * dd;
        j.emb = NULL;
        slice(j.N, c % n, n, &lo, &hi);
        do_cols(df, &j, B, lo, hi);
        return;
    }
    if (g == 1) {
        row_share(B, c, n, &lo, &hi);
        input_rows(df, 0, df->frame_tok, lo, hi);
        return;
    }
    const int k = (g - FRAME_FIRST) / frame_per(kc), s = (g - FRAME_FIRST) % frame_per(kc) + 1;
    if (s == n_stages(kc)) {   /* the sampling, then the next step's input */
        row_share(B, c, n, &lo, &hi);
        if (hi > lo)
            df->sample(df->sample_ctx, k, lo, hi, tid);
        if (k + 1 < kc->dep_q)
            input_rows(df, k + 1, df->frame_tok, lo, hi);
        return;
    }
    struct dep_job j = stage_job(df, k, s, 0, df->frame_tok, df->frame_logits, &norm);
    if (j.op == JOB_ATTEND) {
        row_share(B, c, n, &lo, &hi);
        attend_rows(df, j.l, j.k, lo, hi, score);
        return;
    }
    if (j.X == df->xn)   /* the normed input: this thread's own copy */
        j.X = xn;
    slice(j.N, c, n, &lo, &hi);
    do_cols(df, &j, B, lo, hi);
}

/* The frame's phase on thread tid of nt: every stage in order, its
 * pieces (nt of them, dep_q * nt for stage 0) taken from its counter, so
 * that a thread another process holds off its core finds its pieces
 * done by the one that ran, not waited for at every stage. A thread that
 * takes a piece of a stage whose products read the normed rows first
 * norms every row into its own xn. */
static void frame_phase(void *ctx, int tid, int nt)
{
    mt_depformer *df = ctx;
    const mt_kyutai_config *kc = &df->lm->kc;
    const int dd = kc->dep_dim, ng = frame_stages(kc);
    float *xn = df->xnt + (size_t)tid * df->maxb * dd, *score = df->score + (size_t)tid * kc->dep_q;
    for (int g = 0; g < ng; g++) {
        struct dep_stage *st = &df->stage[g];
        const int n = g == 0 ? kc->dep_q * nt : nt;
        if (g > 0)
            wait_at_least(&df->stage[g - 1].done, g == 1 ? kc->dep_q * nt : nt);
        int normed = g < FRAME_FIRST;
        for (int c; (c = atomic_fetch_add_explicit(&st->claim, 1, memory_order_acq_rel)) < n;) {
            if (!normed) {   /* once a piece is held, x is the stage's own: no later
                                stage runs before this one is done */
                const int k = (g - FRAME_FIRST) / frame_per(kc);
                const int s = (g - FRAME_FIRST) % frame_per(kc) + 1;
                const float *norm = NULL;
                if (s < n_stages(kc))
                    stage_job(df, k, s, 0, df->frame_tok, df->frame_logits, &norm);
                if (norm)   /* every row, into this thread's xn */
                    rmsnorm_rows(xn, df->x, norm, df->B, dd, kc->eps);
                normed = 1;
            }
            frame_piece(df, g, c, g == 0 ? nt : n, xn, score, tid);
            atomic_fetch_add_explicit(&st->done, 1, memory_order_acq_rel);
        }
    }
}

static int columns_split(const mt_depformer *df);

/* Frame mode where it can run (a host depformer on 2 or more threads)
 * and row mode would read more: under MT_DEPFORMER_ROWS_MIN rows (row
 * mode's threads would have a row or two each), or a depformer whose
 * weights are large (columns_split: each thread would stream all of
 * them). Measured (mt-benchkyutai -w q8, alternated, 2026-12-07):
 * kyutai-small at B = 1 0.55 ms against 0.70-0.80 (one thread: its
 * products were too small for column mode), B = 4 0.95 against 1.08-1.15,
 * B = 8 1.50-1.52 against 1.28-1.39 (row mode kept), B = 32 4.9-5.0
 * against 3.4-4.0; moshi-2b's depformer at B = 1 29.1-29.3 against
 * 35.0-35.9 (a phase a step), B = 2 31.5 against 33.0-34.8, B = 8 47-48
 * against 63-74 (row mode). */
int mt_depformer_frame_split(const mt_depformer *df)
{
    if (df->g || df->sim || !df->dec || df->nthreads < 2 || !df->xnt || df->B > df->maxb ||
        df->frame_env == 0)
        return 0;
    return df->frame_env == 1 || df->B < MT_DEPFORMER_ROWS_MIN || columns_split(df);
}

int mt_depformer_run_frame(mt_depformer *df, int32_t *tok, float *logits,
                           mt_dep_sample_fn sample, void *ctx)
{
    if (!mt_depformer_frame_split(df)) {
        mt_set_err(df->err, sizeof df->err, "depformer: frame mode not available here");
        return -1;
    }
    df->sample = sample;
    df->sample_ctx = ctx;
    df->frame_tok = tok;
    df->frame_logits = logits;
    for (int g = 0; g < frame_stages(&df->lm->kc); g++) {
        atomic_store_explicit(&df->stage[g].claim, 0, memory_order_relaxed);
        atomic_store_explicit(&df->stage[g].done, 0, memory_order_relaxed);
    }
    /* the pool's post publishes the stores above to the workers */
    mt_decoder_parallel(df->dec, frame_phase, df);
    return 0;
}

static int columns_split(const mt_depformer *df)
{
    const mt_kyutai_config *kc = &df->lm->kc;
    return df->dec != NULL && df->nthreads > 1 &&
           (size_t)kc->dep_dim * (size_t)kc->dim >= df->columns_min;
}

void mt_depformer_columns_from(mt_depformer *df, size_t weights) { df->columns_min = weights; }

int mt_depformer_rows_split(const mt_depformer *df)
{
    return !df->g && df->dec && df->nthreads > 1 && df->B >= MT_DEPFORMER_ROWS_MIN &&
           !mt_depformer_frame_split(df);
}

int mt_depformer_next(mt_depformer *df, int k, const int32_t *prev, float *logits)
{
    if (df->g)
        return df->ops->next(df->g, k, prev, logits, df->err, sizeof df->err);
    if (df->sim) {   /* equal logits: the sampler draws among its top k */
        memset(logits, 0, (size_t)df->B * df->lm->kc.card * sizeof(float));
        return 0;
    }
    if (columns_split(df) && df->fused && df->B <= MT_DEPFORMER_ROWS_MIN)
        step_fused(df, k, prev, logits);
    else
        step_rows(df, k, 0, df->B, prev, logits, columns_split(df), 0);
    return 0;
}

void mt_depformer_next_rows(mt_depformer *df, int k, int r0, int r1, const int32_t *prev,
                            float *logits, int tid)
{
    if (r1 > r0)
        step_rows(df, k, r0, r1, prev, logits, 0, tid);
}
