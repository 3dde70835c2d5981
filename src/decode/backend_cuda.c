/* backend_cuda.c: the CUDA backend's host side: device memory, cuBLAS and
 * the order of kernel launches in one batched decode step.
 *
 * Precision: weights and activations that feed a GEMM are bf16; cuBLAS
 * accumulates in fp32 and writes fp32; the residual stream, norms, rotary,
 * softmax and the adapters' conversions are fp32; the KV cache is bf16.
 *
 * One step over R rows (R sessions, or R positions of one session in a
 * prefill chunk), all on the backend's one stream, no host sync until the
 * outputs are copied back:
 *   metadata (rows, block tables, inputs) -> device    one pinned buffer
 *   x   = audio_in . bf16(pcm/32768) | embed[id]      GEMM | gather
 *   per layer:
 *     xn  = bf16(rmsnorm(x) * attn_norm)
 *     qkv = xn . Wqkv^T           one GEMM, q|k|v fused [q+2kv, hidden]
 *     qkv += bias; q, k heads normed   Qwen2 / Qwen3 only (kernels/qwen.cu)
 *     rotary (q twice, see attention.cu), K,V -> the pool
 *     att = windowed-sink / paged attention (split + combine)
 *     x  += att . Wo^T            one GEMM, beta = 1 into the fp32 residual
 *     xn  = bf16(rmsnorm(x) * mlp_norm)
 *     gu  = xn . Wgu^T            one GEMM, gate|up fused [2 ffn, hidden]
 *     act = bf16(silu(gate) * up)
 *     x  += act . Wdown^T         one GEMM
 *   out = rmsnorm(x) * norm -> lm_head (logits) | audio_out (pcm)
 *
 * Memory: the weights (one cudaMalloc) and the activations for
 * mt_backend_rows rows (one cudaMalloc) at creation; then one warm-up step
 * over every row against a one-block scratch cache, so that the kernels
 * are loaded (CUDA loads modules lazily) and cuBLAS has its workspace
 * before the free memory is measured; the pool may then take what is free
 * less MT_CUDA_RESERVE (kv_room_bytes, backend.h); the whole KV pool is one
 * cudaMalloc of mt_kv_pool_blocks * 16 * position_bytes in attach_pool.
 * Never managed memory; a step allocates nothing.
 *
 * Host side of a step: metadata and inputs go in through one pinned buffer, outputs
 * (logits, pcm) come back through another (a copy to pageable memory is
 * staged by the driver, at a fraction of the link's speed: 263 MB of
 * logits per step for llama-3.2-1b at B = 512), then one memcpy to the
 * caller; that copy back is timed (out_copy_ms) for the benchmark.
 *
 * Errors: a call that fails mid-step synchronises the stream before it
 * returns (forward), so no copy from the pinned buffers is still pending
 * when the caller reuses them.
 *
 * Synthetic models loaded shape-only (no host weights, e.g. moshi-7b) get
 * their weights made on the device: uniform values with the per-tensor std
 * of model.h's synthetic init, from a splitmix64 hash of (seed, tensor,
 * index). Same shapes and scales as the CPU generator, not the same values
 * (parity tests use host weights).
 *
 * CUDA Graphs (MT_CUDA_GRAPHS=1): a step captured once per power-of-two
 * bucket of rows and replayed, in backend_cuda_graphs.c.
 */
#include "util/errmsg.h"
#include "decode/backend.h"
#include "decode/cuda_entry.h"
#include "decode/backend_cuda_graphs.h"
#include "gpu/device_cuda.h"
#define MT_CU_WHO "cuda"
#include "gpu/cuda_check.h"
#include "../../kernels/mt_kernels.h"
#include "util/clock.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ALIGN = 256 };

/* Device memory kept free after the pool: what the runtime and cuBLAS may
 * still allocate after start-up (kernels of GEMM shapes the warm-up did not
 * meet, workspaces, the block tables) and fragmentation. */
#define MT_CUDA_RESERVE ((size_t)1 << 30)

typedef struct dev_layer {
    float    *attn_norm, *mlp_norm;   /* [hidden] fp32 */
    uint16_t *wqkv;                   /* [q_dim + 2 kv_dim, hidden] */
    uint16_t *wo;                     /* [hidden, q_dim] */
    uint16_t *wgu;                    /* [2 ffn, hidden] */
    uint16_t *wdown;                  /* [hidden, ffn] */
    float    *bqkv;                   /* [q_dim + 2 kv_dim] q|k|v biases, or NULL */
    float    *qk_norm;                /* [2 head_dim] q_norm | k_norm, or NULL */
} dev_layer;

typedef struct cuda_backend {
    mt_backend         *pub;     /* the interface this implements */
    const mt_model     *m;
    const mt_config    *c;
    mt_kv_pool         *pool;
    const mt_kv_params *kvp;
    mt_cu_dims          dims;
    int R, hd, q_dim, kv_dim, qkv_dim, fs, nsm;
    int has_audio, has_tokens;

    const mt_cu_ctx *ctx;    /* the shared device context (NULL until open) */
    cudaStream_t   st;       /* ctx's stream and handle */
    cublasHandle_t blas;

    void      *wslab;
    dev_layer *layer;       /* [layers], host array of device pointers */
    float     *norm;        /* [hidden] */
    uint16_t  *embed;       /* [vocab, hidden] or NULL */
    uint16_t  *lm_head;     /* [vocab, hidden] (== embed when tied) */
    uint16_t  *audio_in;    /* [hidden, fs] */
    uint16_t  *audio_out;   /* [fs, hidden] */
    size_t     weight_bytes;

    uint16_t  *kv;          /* the pool, [blocks][layers][2][kv_heads][16][hd] */
    size_t     kv_bytes;

    void      *aslab;       /* activations, R rows each */
    float     *x;           /* [R, hidden] residual, fp32 */
    uint16_t  *xn;          /* [R, hidden] normed, bf16 */
    float     *qkv;         /* [R, qkv_dim] */
    float     *qrot;        /* [R, 2, heads, hd] rotated, scaled queries */
    float     *part;        /* [R, heads, MAX_SPLITS, hd + 2] attention partials */
    uint16_t  *att;         /* [R, q_dim] bf16 */
    float     *gu;          /* [R, 2 ffn] */
    uint16_t  *act;         /* [R, ffn] bf16 */
    uint16_t  *pcm_bf;      /* [R, fs] bf16 input frames */
    float     *outf;        /* [R, vocab] logits, then [R, fs] pcm as float */
    int16_t   *pcm16;       /* [R, fs] */
    double    *inv_freq;    /* [hd/2] */
    float     *rope_cs;     /* [R][2 (ring, sink)][cos | sin][hd/2], per call */
    int        force_chunk; /* MT_CUDA_SPLIT_CHUNK: ring slots per split (tests) */
    int        ready;       /* 1 once the pool is attached */

    /* outputs back: pinned [R, vocab] logits | [R, fs] pcm */
    void      *h_out;
    float     *h_logits;
    int16_t   *h_pcm_out;
    cudaEvent_t ev0, ev1;
    int        ev_ok;

    /* per-call metadata: pinned host and device mirrors of one layout */
    void      *h_meta, *d_meta;
    size_t     meta_bytes;
    mt_cu_row *h_rows, *d_rows;     /* [R] */
    int32_t   *h_tok, *d_tok;       /* [R] */
    int16_t   *h_pcm, *d_pcm;       /* [R, fs] */
    float     *h_x;                 /* [R, hidden] io->x_in staged (pinned) */
    int32_t   *h_tab, *d_tab;       /* [tab_cap] */
    size_t     tab_cap;

    /* io->h_out: the normed final hidden state back (bf16, as xn), pinned
     * host [R, hidden], made on the first call that asks */
    uint16_t  *h_hid;

    /* CUDA Graphs (MT_CUDA_GRAPHS=1): a step's rows padded to a power of
     * two, each (bucket, split plan, inputs, outputs) captured once */
    int        use_graphs;
    int32_t    scratch_block;       /* the block past the pool's: padding rows' */
    mt_cuda_graphs graphs;
} cuda_backend;

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static int cuda_available(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "no usable CUDA device: %s", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    if (n < 1) {
        snprintf(why, whylen, "no CUDA device present");
        return 0;
    }
    const int dev = mt_cu_ctx_selected();
    if (dev >= n) {
        snprintf(why, whylen, "no CUDA device %d (%d visible%s%s)", dev, n,
                 getenv("CUDA_VISIBLE_DEVICES") ? ", CUDA_VISIBLE_DEVICES=" : "",
                 getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
        return 0;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess || p.major < 8) {
        snprintf(why, whylen, "CUDA device %d is older than sm_80 (the kernels need bf16)", dev);
        return 0;
    }
    snprintf(why, whylen, "%s", p.name);
    return 1;
}

/* Y[rows, out] (fp32) = X[rows, in] (bf16) . W[out, in]^T (bf16) + beta Y */
static int gemm(cuda_backend *be, const uint16_t *W, int out, int in, const uint16_t *X,
                int rows, float *Y, float beta, char *err, size_t errlen)
{
    const float alpha = 1.0f;
    cublasStatus_t s = cublasGemmEx(be->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha,
                                    W, CUDA_R_16BF, in, X, CUDA_R_16BF, in, &beta, Y,
                                    CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        mt_set_err(err, errlen, "cuda: cublasGemmEx %dx%dx%d: %s", out, rows, in, mt_cu_blas_str(s));
        return -1;
    }
    return 0;
}

/* ---- weights -------------------------------------------------------------- */

static size_t up(size_t b) { return (b + ALIGN - 1) / ALIGN * ALIGN; }

/* Lays the weight slab out (base NULL: only counts bytes). */
static size_t layout_weights(cuda_backend *be, char *base)
{
    const mt_config *c = be->c;
    size_t off = 0, H = (size_t)c->hidden;
#define TAKE(ptr, type, n)                                          \
    do {                                                            \
        if (base)                                                   \
            ptr = (type *)(base + off);                             \
        off += up((size_t)(n) * sizeof(type));                      \
    } while (0)
    for (int l = 0; l < c->layers; l++) {
        dev_layer *L = &be->layer[l];
        TAKE(L->attn_norm, float, H);
        TAKE(L->mlp_norm, float, H);
        TAKE(L->wqkv, uint16_t, (size_t)be->qkv_dim * H);
        TAKE(L->wo, uint16_t, H * be->q_dim);
        TAKE(L->wgu, uint16_t, 2 * (size_t)c->ffn * H);
        TAKE(L->wdown, uint16_t, H * c->ffn);
        if (c->qkv_bias)
            TAKE(L->bqkv, float, be->qkv_dim);
        if (c->qk_norm)
            TAKE(L->qk_norm, float, 2 * (size_t)be->hd);
    }
    TAKE(be->norm, float, H);
    if (be->has_tokens) {
        TAKE(be->embed, uint16_t, (size_t)c->vocab * H);
        if (c->tie_embeddings) {
            if (base)
                be->lm_head = be->embed;
        } else
            TAKE(be->lm_head, uint16_t, (size_t)c->vocab * H);
    }
    if (be->has_audio) {
        TAKE(be->audio_in, uint16_t, H * be->fs);
        TAKE(be->audio_out, uint16_t, (size_t)be->fs * H);
    }
#undef TAKE
    return off;
}

/* Where tensor `name` goes, its element count there, fp32 or bf16
 * (is_f32: 1 for a norm, made as 1.0 on the device; 2 for a bias, made as
 * 0.0), and the std of its synthetic init. */
static int tensor_dest(cuda_backend *be, const char *name, void **dst, size_t *n, int *is_f32,
                       float *std)
{
    const mt_config *c = be->c;
    size_t H = (size_t)c->hidden;
    float sh = 1.0f / sqrtf((float)c->hidden), depth = sqrtf(2.0f * c->layers);
    int l, pos = 0;
    char rest[64];
    *is_f32 = 0;
    if (sscanf(name, "model.layers.%d.%63s%n", &l, rest, &pos) == 2 && l >= 0 &&
        l < c->layers) {
        dev_layer *L = &be->layer[l];
        if (!strcmp(rest, "input_layernorm.weight")) {
            *dst = L->attn_norm; *n = H; *is_f32 = 1; *std = 0;
        } else if (!strcmp(rest, "post_attention_layernorm.weight")) {
            *dst = L->mlp_norm; *n = H; *is_f32 = 1; *std = 0;
        } else if (!strcmp(rest, "self_attn.q_proj.weight")) {
            *dst = L->wqkv; *n = (size_t)be->q_dim * H; *std = sh;
        } else if (!strcmp(rest, "self_attn.k_proj.weight")) {
            *dst = L->wqkv + (size_t)be->q_dim * H; *n = (size_t)be->kv_dim * H; *std = sh;
        } else if (!strcmp(rest, "self_attn.v_proj.weight")) {
            *dst = L->wqkv + (size_t)(be->q_dim + be->kv_dim) * H;
            *n = (size_t)be->kv_dim * H; *std = sh;
        } else if (!strcmp(rest, "self_attn.o_proj.weight")) {
            *dst = L->wo; *n = H * be->q_dim;
            *std = 1.0f / sqrtf((float)be->q_dim) / depth;
        } else if (!strcmp(rest, "mlp.gate_proj.weight")) {
            *dst = L->wgu; *n = (size_t)c->ffn * H; *std = sh;
        } else if (!strcmp(rest, "mlp.up_proj.weight")) {
            *dst = L->wgu + (size_t)c->ffn * H; *n = (size_t)c->ffn * H; *std = sh;
        } else if (!strcmp(rest, "mlp.down_proj.weight")) {
            *dst = L->wdown; *n = H * c->ffn;
            *std = 1.0f / sqrtf((float)c->ffn) / depth;
        } else if (!strcmp(rest, "self_attn.q_proj.bias") && L->bqkv) {
            *dst = L->bqkv; *n = (size_t)be->q_dim; *is_f32 = 2; *std = 0;
        } else if (!strcmp(rest, "self_attn.k_proj.bias") && L->bqkv) {
            *dst = L->bqkv + be->q_dim; *n = (size_t)be->kv_dim; *is_f32 = 2; *std = 0;
        } else if (!strcmp(rest, "self_attn.v_proj.bias") && L->bqkv) {
            *dst = L->bqkv + be->q_dim + be->kv_dim; *n = (size_t)be->kv_dim;
            *is_f32 = 2; *std = 0;
        } else if (!strcmp(rest, "self_attn.q_norm.weight") && L->qk_norm) {
            *dst = L->qk_norm; *n = (size_t)be->hd; *is_f32 = 1; *std = 0;
        } else if (!strcmp(rest, "self_attn.k_norm.weight") && L->qk_norm) {
            *dst = L->qk_norm + be->hd; *n = (size_t)be->hd; *is_f32 = 1; *std = 0;
        } else
            return -1;
        return 0;
    }
    if (!strcmp(name, "model.norm.weight")) {
        *dst = be->norm; *n = H; *is_f32 = 1; *std = 0;
    } else if (!strcmp(name, "model.embed_tokens.weight") && be->embed) {
        *dst = be->embed; *n = (size_t)c->vocab * H; *std = 1.0f;
    } else if (!strcmp(name, "lm_head.weight") && be->lm_head && !c->tie_embeddings) {
        *dst = be->lm_head; *n = (size_t)c->vocab * H; *std = sh;
    } else if (!strcmp(name, "audio_in.weight") && be->audio_in) {
        *dst = be->audio_in; *n = H * be->fs; *std = 10.0f / sqrtf((float)be->fs);
    } else if (!strcmp(name, "audio_out.weight") && be->audio_out) {
        *dst = be->audio_out; *n = (size_t)be->fs * H; *std = 0.1f * sh;
    } else
        return -1;
    return 0;
}

/* Uploads host fp32 weights (converted to bf16 on the device through a
 * staging buffer), or makes synthetic ones on the device. */
static int load_weights(cuda_backend *be, char *err, size_t errlen)
{
    const mt_model *m = be->m;
    int count = mt_model_tensor_count(be->c);
    const size_t stage_n = (size_t)16 << 20; /* floats: 64 MiB */
    float *stage = NULL;
    int rc = -1;
    if (!m->shape_only) {
        cudaError_t e = cudaMalloc((void **)&stage, stage_n * sizeof(float));
        if (e != cudaSuccess) {
            mt_set_err(err, errlen, "cuda: no room for a 64 MiB staging buffer: %s",
                     cudaGetErrorString(e));
            return -1;
        }
    }
    for (int i = 0; i < count; i++) {
        mt_tensor_ref ref;
        if (mt_model_tensor(m, i, &ref)) {
            mt_set_err(err, errlen, "cuda: model has no tensor %d", i);
            goto out;
        }
        void *dst;
        size_t n;
        int is_f32;
        float std;
        if (tensor_dest(be, ref.name, &dst, &n, &is_f32, &std)) {
            mt_set_err(err, errlen, "cuda: unexpected tensor %s", ref.name);
            goto out;
        }
        size_t numel = (size_t)ref.shape[0] * (ref.ndim == 2 ? (size_t)ref.shape[1] : 1);
        if (numel != n) {
            mt_set_err(err, errlen, "cuda: tensor %s has %zu elements, expected %zu", ref.name,
                     numel, n);
            goto out;
        }
        int ke = 0;
        if (!ref.data) {
            if (is_f32)
                ke = mt_cu_fill_f32(dst, n, is_f32 == 2 ? 0.0f : 1.0f, be->st);
            else
                ke = mt_cu_fill_uniform_bf16(dst, n, m->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1,
                                             std, be->st);
        } else if (is_f32) {
            cudaError_t e = cudaMemcpyAsync(dst, ref.data, n * sizeof(float),
                                            cudaMemcpyHostToDevice, be->st);
            ke = (int)e;
        } else {
            for (size_t o = 0; o < n && !ke; o += stage_n) {
                size_t k = n - o < stage_n ? n - o : stage_n;
                cudaError_t e = cudaMemcpyAsync(stage, ref.data + o, k * sizeof(float),
                                                cudaMemcpyHostToDevice, be->st);
                ke = e != cudaSuccess ? (int)e
                                      : mt_cu_f32_to_bf16(stage, (uint16_t *)dst + o, k, be->st);
                if (!ke) /* the staging buffer is reused: wait for the conversion */
                    ke = (int)cudaStreamSynchronize(be->st);
            }
        }
        if (ke) {
            mt_set_err(err, errlen, "cuda: weights of %s: %s", ref.name,
                     cudaGetErrorString((cudaError_t)ke));
            goto out;
        }
    }
    {
        cudaError_t e = cudaStreamSynchronize(be->st);
        if (e != cudaSuccess) {
            mt_set_err(err, errlen, "cuda: making the weights: %s", cudaGetErrorString(e));
            goto out;
        }
    }
    rc = 0;
out:
    if (stage)
        cudaFree(stage);
    return rc;
}

/* ---- one forward call over rows ------------------------------------------- */

/* Splits of the ring for this call: enough blocks for a few waves of the
 * GPU, chunks of at least 64 slots; or chunks of MT_CUDA_SPLIT_CHUNK slots
 * (at most MT_CU_MAX_SPLITS of them), so that tests reach the combine with
 * short windows. A small batch (rows x kv heads under the SM count: B = 1
 * to 4 of a 32-head model on an H100) would leave most SMs idle with
 * 64-slot chunks (W = 252: 4 splits, 128 blocks for 132 SMs), so there
 * the window is cut finer, down to 16 slots a chunk (16 splits), and the
 * K/V is read by every SM at once; the combine merges the partials as for
 * any split. */
static void plan_splits(const cuda_backend *be, int nrows, int max_ring, int *nsplit, int *chunk)
{
    if (max_ring < 1) {
        *nsplit = 1;
        *chunk = 1;
        return;
    }
    if (be->force_chunk > 0) {
        int ch = be->force_chunk;
        if ((max_ring + ch - 1) / ch > MT_CU_MAX_SPLITS)
            ch = (max_ring + MT_CU_MAX_SPLITS - 1) / MT_CU_MAX_SPLITS;
        *chunk = ch;
        *nsplit = (max_ring + ch - 1) / ch;
        return;
    }
    int want_blocks = be->nsm * 8;
    int per = nrows * be->c->kv_heads;
    int ns = (want_blocks + per - 1) / per;
    const int min_chunk = per < be->nsm ? 16 : 64;
    int by_len = (max_ring + min_chunk - 1) / min_chunk;
    if (ns > by_len)
        ns = by_len;
    if (ns > MT_CU_MAX_SPLITS)
        ns = MT_CU_MAX_SPLITS;
    if (ns < 1)
        ns = 1;
    *chunk = (max_ring + ns - 1) / ns;
    *nsplit = (max_ring + *chunk - 1) / *chunk;
}


/* The plan of a call over rows h_rows[0..n) with ntab table entries;
 * warm: every output the model has (the warm-up step). */
static fwd_plan make_plan(const cuda_backend *be, int n, size_t ntab, const mt_step_io *io,
                          int warm)
{
    const mt_config *c = be->c;
    fwd_plan pl = { .n = n, .ntab = (int)ntab };
    int max_ring = 0;
    for (int r = 0; r < n; r++) {
        const mt_cu_row *w = &be->h_rows[r];
        int s = w->sink < w->nslots ? w->sink : w->nslots;
        if (w->nslots - s > max_ring)
            max_ring = w->nslots - s;
    }
    plan_splits(be, n, max_ring, &pl.nsplit, &pl.chunk);
    pl.in = io->x_in ? IN_X : io->tokens_in ? IN_TOK : IN_PCM;
    pl.want_logits = (io->logits || warm) && be->lm_head;
    pl.want_pcm = (io->pcm_out || warm) && be->audio_out && !c->audio_passthrough;
    pl.want_hid = io->h_out != NULL;
    return pl;
}

/* The inputs of the real rows 0..nreal into the pinned buffers, zeros for
 * the padding rows up to pl->n (their outputs are never read). */
static void stage_inputs(cuda_backend *be, int nreal, const fwd_plan *pl, const mt_step_io *io)
{
    const size_t H = (size_t)be->c->hidden, fs = (size_t)be->fs;
    const size_t pad = (size_t)(pl->n - nreal);
    if (pl->in == IN_X) {
        memcpy(be->h_x, io->x_in, (size_t)nreal * H * sizeof(float));
        memset(be->h_x + (size_t)nreal * H, 0, pad * H * sizeof(float));
    } else if (pl->in == IN_TOK) {
        memcpy(be->h_tok, io->tokens_in, (size_t)nreal * sizeof(int32_t));
        memset(be->h_tok + nreal, 0, pad * sizeof(int32_t));
    } else {
        memcpy(be->h_pcm, io->pcm_in, (size_t)nreal * fs * sizeof(int16_t));
        memset(be->h_pcm + (size_t)nreal * fs, 0, pad * fs * sizeof(int16_t));
    }
}

/* The device work of a call: metadata and inputs in from the pinned
 * buffers, the layers, the final norm and the heads. Only stream work on
 * fixed buffers, so it can be captured into a graph (step_graph). */
static int enqueue_compute(cuda_backend *be, const fwd_plan *pl, char *err, size_t errlen)
{
    const mt_config *c = be->c;
    cudaStream_t st = be->st;
    const int H = c->hidden, n = pl->n;
    CU(cudaMemcpyAsync(be->d_rows, be->h_rows, (size_t)n * sizeof(mt_cu_row),
                       cudaMemcpyHostToDevice, st), "cudaMemcpyAsync");
    CU(cudaMemcpyAsync(be->d_tab, be->h_tab, (size_t)pl->ntab * sizeof(int32_t),
                       cudaMemcpyHostToDevice, st), "cudaMemcpyAsync");
    if (pl->in == IN_X) {
        CU(cudaMemcpyAsync(be->x, be->h_x, (size_t)n * H * sizeof(float),
                           cudaMemcpyHostToDevice, st), "cudaMemcpyAsync");
    } else if (pl->in == IN_TOK) {
        CU(cudaMemcpyAsync(be->d_tok, be->h_tok, (size_t)n * sizeof(int32_t),
                           cudaMemcpyHostToDevice, st), "cudaMemcpyAsync");
        CU(mt_cu_embed(be->embed, be->d_tok, be->x, n, H, st), "kernel mt_cu_embed");
    } else {
        size_t np = (size_t)n * be->fs;
        CU(cudaMemcpyAsync(be->d_pcm, be->h_pcm, np * sizeof(int16_t), cudaMemcpyHostToDevice,
                           st), "cudaMemcpyAsync");
        CU(mt_cu_pcm_to_bf16(be->d_pcm, be->pcm_bf, np, st), "kernel mt_cu_pcm_to_bf16");
        if (gemm(be, be->audio_in, H, be->fs, be->pcm_bf, n, be->x, 0.0f, err, errlen))
            return -1;
    }
    /* the rotary angles are the same in every layer: once per call */
    CU(mt_cu_rope_table(be->d_rows, be->inv_freq, be->rope_cs, n, be->hd, st),
       "kernel mt_cu_rope_table");
    for (int l = 0; l < c->layers; l++) {
        const dev_layer *L = &be->layer[l];
        CU(mt_cu_rmsnorm(be->x, L->attn_norm, be->xn, n, H, c->eps, st), "kernel mt_cu_rmsnorm");
        if (gemm(be, L->wqkv, be->qkv_dim, H, be->xn, n, be->qkv, 0.0f, err, errlen))
            return -1;
        if (L->bqkv || L->qk_norm) /* Qwen2 biases, Qwen3 q/k norms */
            CU(mt_cu_qwen_qkv(be->qkv, L->bqkv, L->qk_norm, n, c->heads, c->kv_heads, be->hd,
                              c->eps, st), "kernel mt_cu_qwen_qkv");
        CU(mt_cu_rope_append(be->qkv, be->d_rows, be->d_tab, be->kv, be->qrot, be->rope_cs, n,
                             l, be->dims, st), "kernel mt_cu_rope_append");
        CU(mt_cu_attention(be->qrot, be->d_rows, be->d_tab, be->kv, be->part, be->att, n, l,
                           pl->nsplit, pl->chunk, be->dims, st), "kernel mt_cu_attention");
        if (gemm(be, L->wo, H, be->q_dim, be->att, n, be->x, 1.0f, err, errlen))
            return -1;
        CU(mt_cu_rmsnorm(be->x, L->mlp_norm, be->xn, n, H, c->eps, st), "kernel mt_cu_rmsnorm");
        if (gemm(be, L->wgu, 2 * c->ffn, H, be->xn, n, be->gu, 0.0f, err, errlen))
            return -1;
        CU(mt_cu_swiglu(be->gu, be->act, n, c->ffn, st), "kernel mt_cu_swiglu");
        if (gemm(be, L->wdown, H, c->ffn, be->act, n, be->x, 1.0f, err, errlen))
            return -1;
    }
    if (pl->want_logits || pl->want_pcm || pl->want_hid)
        CU(mt_cu_rmsnorm(be->x, be->norm, be->xn, n, H, c->eps, st), "kernel mt_cu_rmsnorm");
    float *y = be->outf + (size_t)be->R * c->vocab;
    if (pl->want_logits &&
        gemm(be, be->lm_head, c->vocab, H, be->xn, n, be->outf, 0.0f, err, errlen))
        return -1;
    if (pl->want_pcm) {
        if (gemm(be, be->audio_out, be->fs, H, be->xn, n, y, 0.0f, err, errlen))
            return -1;
        CU(mt_cu_f32_to_pcm(y, be->pcm16, (size_t)n * be->fs, st), "kernel mt_cu_f32_to_pcm");
    }
    return 0;
}

/* The real rows' outputs back through the pinned buffers (the copy timed
 * by events), the one host sync of a call, then into io. */
static int finish_outputs(cuda_backend *be, int nreal, const fwd_plan *pl, const mt_step_io *io,
                          char *err, size_t errlen)
{
    const mt_config *c = be->c;
    cudaStream_t st = be->st;
    const int H = c->hidden, n = nreal;
    if (pl->want_hid && !be->h_hid &&
        cudaMallocHost((void **)&be->h_hid, (size_t)be->R * H * sizeof(uint16_t)) != cudaSuccess) {
        be->h_hid = NULL;
        mt_set_err(err, errlen, "cuda: cannot pin the hidden states' host buffer");
        return -1;
    }
    if (pl->want_hid)
        CU(cudaMemcpyAsync(be->h_hid, be->xn, (size_t)n * H * sizeof(uint16_t),
                           cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    if (be->ev_ok)
        CU(cudaEventRecord(be->ev0, st), "cudaEventRecord");
    if (pl->want_logits)
        CU(cudaMemcpyAsync(be->h_logits, be->outf, (size_t)n * c->vocab * sizeof(float),
                           cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    if (pl->want_pcm)
        CU(cudaMemcpyAsync(be->h_pcm_out, be->pcm16, (size_t)n * be->fs * sizeof(int16_t),
                           cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    if (be->ev_ok)
        CU(cudaEventRecord(be->ev1, st), "cudaEventRecord");
    /* the one host sync of a step: outputs are back, buffers free again */
    CU(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    float dev_ms = 0;
    if (be->ev_ok)
        CU(cudaEventElapsedTime(&dev_ms, be->ev0, be->ev1), "cudaEventElapsedTime");
    double t0 = (double)mt_clock_ns() / 1e6;
    if (pl->want_logits && io->logits)
        memcpy(io->logits, be->h_logits, (size_t)n * c->vocab * sizeof(float));
    if (pl->want_pcm && io->pcm_out)
        memcpy(io->pcm_out, be->h_pcm_out, (size_t)n * be->fs * sizeof(int16_t));
    for (size_t i = 0; io->h_out && i < (size_t)n * H; i++) {
        uint32_t u = (uint32_t)be->h_hid[i] << 16;      /* bf16 -> fp32 */
        memcpy(&io->h_out[i], &u, sizeof u);
    }
    be->pub->out_copy_ms = dev_ms + ((double)mt_clock_ns() / 1e6 - t0);
    if (io->pcm_out && c->audio_passthrough && io->pcm_in)
        memcpy(io->pcm_out, io->pcm_in, (size_t)n * be->fs * sizeof(int16_t));
    return 0;
}

/* enqueue_compute as the graphs' capture calls it (mt_cuda_enqueue_fn). */
static int enqueue_captured(void *be, const fwd_plan *pl, char *err, size_t errlen)
{
    return enqueue_compute(be, pl, err, errlen);
}

/* Runs rows h_rows[0..n) (filled by the caller, with ntab table entries in
 * h_tab) through the model; io's arrays hold n rows. warm: compute every
 * output the model has and copy it to the pinned buffer, none to the
 * caller (the warm-up step). graph: as one replayed graph of the rows
 * padded to their bucket (a step, once the pool is attached). On an error,
 * waits for what was queued: copies from the pinned buffers may still be
 * pending, and the caller may refill them at once. */
static int forward(cuda_backend *be, int n, size_t ntab, const mt_step_io *io, int warm,
                   int graph, char *err, size_t errlen)
{
    int rows = n;
    if (graph) {
        rows = mt_cuda_graph_pad_rows(be->h_rows, be->h_tab, n, be->R, ntab,
                                      be->scratch_block);
        ntab = be->tab_cap;   /* the copy's size is part of the graph */
    }
    fwd_plan pl = make_plan(be, rows, ntab, io, warm);
    stage_inputs(be, n, &pl, io);
    int rc;
    if (graph)
        rc = mt_cuda_graph_launch(&be->graphs, &pl, be->st, enqueue_captured, be, err, errlen);
    else
        rc = enqueue_compute(be, &pl, err, errlen);
    if (rc == 0 && finish_outputs(be, n, &pl, io, err, errlen) == 0)
        return 0;
    (void)cudaStreamSynchronize(be->st); /* its own error is the same one, or none */
    return -1;
}

/* The attention row of position pos of seq, whose table starts at toff. */
static mt_cu_row make_row(const cuda_backend *be, const mt_kv_seq *s, int64_t pos, int32_t toff)
{
    mt_cu_row w;
    w.table_off = toff;
    w.nslots = (int32_t)mt_kv_visible_count(be->pool, pos);
    w.write_slot = (int32_t)mt_kv_slot(be->pool, s, pos);
    w.pos_abs = (int32_t)pos;
    if (be->kvp->policy == MT_KV_WINDOW) {
        w.sink = be->kvp->sink;
        w.pos_sink = be->kvp->rope == MT_ROPE_CACHE ? w.nslots - 1 : (int32_t)pos;
    } else {
        w.sink = 0;
        w.pos_sink = (int32_t)pos;
    }
    return w;
}

static int check_adapters(const cuda_backend *be, const mt_step_io *io, char *err, size_t errlen)
{
    if (!io->x_in && (io->tokens_in ? !be->embed : (!io->pcm_in || !be->audio_in))) {
        mt_set_err(err, errlen, "cuda: model %s has no %s adapter", be->c->name,
                 io->tokens_in ? "token" : "audio");
        return -1;
    }
    if (!be->ready) {
        mt_set_err(err, errlen, "cuda: backend has no pool attached");
        return -1;
    }
    return 0;
}

static int cuda_step(mt_backend *b, int B, mt_kv_seq *const *seqs, const mt_step_io *io,
                     char *err, size_t errlen)
{
    cuda_backend *be = b->impl;
    if (mt_cu_ctx_enter(be->ctx, err, errlen))
        return -1;
    if (B < 1 || B > be->R) {
        mt_set_err(err, errlen, "cuda: batch of %d outside 1..%d", B, be->R);
        return -1;
    }
    if (check_adapters(be, io, err, errlen))
        return -1;
    size_t ntab = 0;
    for (int r = 0; r < B; r++) {
        const mt_kv_seq *s = seqs[r];
        if (s->len >= INT32_MAX - 1) {
            mt_set_err(err, errlen, "cuda: session %d is at position %lld, past 2^31", r,
                     (long long)s->len);
            return -1;
        }
        if (ntab + (size_t)s->nblocks > be->tab_cap) {
            mt_set_err(err, errlen, "cuda: block tables of the batch exceed the pool (%zu)",
                     be->tab_cap);
            return -1;
        }
        memcpy(be->h_tab + ntab, s->blocks, (size_t)s->nblocks * sizeof(int32_t));
        be->h_rows[r] = make_row(be, s, s->len, (int32_t)ntab);
        if (io->positions) /* absolute rotary only (the decoder checks) */
            be->h_rows[r].pos_abs = be->h_rows[r].pos_sink = (int32_t)io->positions[r];
        ntab += (size_t)s->nblocks;
    }
    return forward(be, B, ntab, io, 0, be->use_graphs, err, errlen);
}

static int cuda_prefill_chunk(mt_backend *b, mt_kv_seq *seq, int64_t base, int R,
                              const mt_step_io *io, char *err, size_t errlen)
{
    cuda_backend *be = b->impl;
    if (base + R >= INT32_MAX) {
        mt_set_err(err, errlen, "cuda: position past 2^31");
        return -1;
    }
    for (int r = 0; r < R; r++)
        be->h_rows[r] = make_row(be, seq, base + r, 0);
    /* h_tab is filled once by cuda_prefill: the previous chunk ended with
     * a sync, so the pinned table is not being read */
    return forward(be, R, (size_t)seq->nblocks, io, 0, 0, err, errlen);
}

/* Rows of one session at consecutive positions. All of a chunk's keys are
 * appended before its attention, so a chunk may not overwrite a slot one of
 * its rows still sees: in the window policy, once the ring wraps, chunks
 * are one position long. */
static int cuda_prefill(mt_backend *b, mt_kv_seq *seq, int n, const mt_step_io *io, char *err,
                        size_t errlen)
{
    cuda_backend *be = b->impl;
    if (check_adapters(be, io, err, errlen) || mt_cu_ctx_enter(be->ctx, err, errlen))
        return -1;
    if ((size_t)seq->nblocks > be->tab_cap) {
        mt_set_err(err, errlen, "cuda: block table longer than the pool");
        return -1;
    }
    memcpy(be->h_tab, seq->blocks, (size_t)seq->nblocks * sizeof(int32_t));
    const int64_t cap = be->kvp->policy == MT_KV_WINDOW
                            ? (int64_t)be->kvp->sink + be->kvp->window : INT64_MAX;
    return mt_backend_prefill_chunks(b, be->c, seq, n, io, be->R, cap, cuda_prefill_chunk, err,
                                     errlen);
}

/* Frees the pinned and device metadata (alloc_meta) and clears them. */
static void free_meta(cuda_backend *be)
{
    if (be->h_meta)
        cudaFreeHost(be->h_meta);
    if (be->d_meta)
        cudaFree(be->d_meta);
    be->h_meta = be->d_meta = NULL;
}

static void cuda_destroy(mt_backend *b)
{
    if (!b)
        return;
    cuda_backend *be = b->impl;
    if (be) {
        if (be->ctx) {
            (void)cudaSetDevice(be->ctx->device);
            (void)cudaStreamSynchronize(be->st);
        }
        void *const dev[] = {be->wslab, be->kv, be->aslab};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
            if (dev[i])
                cudaFree(dev[i]);
        free_meta(be);
        if (be->h_out)
            cudaFreeHost(be->h_out);
        if (be->ev_ok) {
            cudaEventDestroy(be->ev0);
            cudaEventDestroy(be->ev1);
        }
        mt_cuda_graphs_free(&be->graphs);
        if (be->h_hid)
            cudaFreeHost(be->h_hid);
        mt_cu_ctx_close(be->ctx);
        free(be->layer);
        free(be);
    }
    free(b);
}

/* Pinned and device metadata for R rows and tab_cap block-table entries
 * (again when the pool is attached: the tables then cover every block). */
static int alloc_meta(cuda_backend *be, size_t tab_cap, char *err, size_t errlen)
{
    size_t R = (size_t)be->R;
    free_meta(be);
    be->tab_cap = tab_cap;
    size_t o_rows = 0, o_tok = up(R * sizeof(mt_cu_row)), o_pcm = o_tok + up(R * 4),
           o_tab = o_pcm + up(R * be->fs * 2), o_x = o_tab + up(be->tab_cap * 4);
    be->meta_bytes = o_x + up(R * (size_t)be->c->hidden * sizeof(float));
    cudaError_t e = cudaMallocHost(&be->h_meta, be->meta_bytes);
    if (e != cudaSuccess) {
        be->h_meta = NULL;
        mt_set_err(err, errlen, "cuda: cannot pin %zu bytes of host memory: %s", be->meta_bytes,
                 cudaGetErrorString(e));
        return -1;
    }
    e = cudaMalloc(&be->d_meta, be->meta_bytes);
    if (e != cudaSuccess) {
        be->d_meta = NULL;
        mt_set_err(err, errlen, "cuda: cannot allocate %zu bytes of metadata: %s", be->meta_bytes,
                 cudaGetErrorString(e));
        return -1;
    }
    char *hm = be->h_meta, *dm = be->d_meta;
    be->h_rows = (mt_cu_row *)(hm + o_rows); be->d_rows = (mt_cu_row *)(dm + o_rows);
    be->h_tok = (int32_t *)(hm + o_tok);     be->d_tok = (int32_t *)(dm + o_tok);
    be->h_pcm = (int16_t *)(hm + o_pcm);     be->d_pcm = (int16_t *)(dm + o_pcm);
    be->h_tab = (int32_t *)(hm + o_tab);     be->d_tab = (int32_t *)(dm + o_tab);
    be->h_x = (float *)(hm + o_x);           /* host only: x goes straight to be->x */
    return 0;
}

/* One step over all R rows against a scratch cache of one block, every
 * output computed: loads the kernels and lets cuBLAS take its workspace
 * before the free memory is measured for the pool. The rows all write
 * slot 0 of the scratch block (same-valued races on scratch data). */
static int warm_up(cuda_backend *be, char *err, size_t errlen)
{
    const mt_config *c = be->c;
    if (!be->has_tokens && !be->has_audio)
        return 0; /* no input adapter: nothing can run */
    size_t blk = (size_t)MT_KV_BLOCK * mt_decoder_position_bytes(c, be->pub->kv_elem_bytes);
    int32_t *tok = calloc((size_t)be->R, sizeof *tok);
    int16_t *pcm = calloc((size_t)be->R * be->fs, sizeof *pcm);
    if (!tok || !pcm) {
        free(tok);
        free(pcm);
        mt_set_err(err, errlen, "cuda: out of host memory");
        return -1;
    }
    int rc = -1;
    cudaError_t e = cudaMalloc((void **)&be->kv, blk);
    if (e != cudaSuccess) {
        be->kv = NULL;
        mt_set_err(err, errlen, "cuda: warm-up cache: %s", cudaGetErrorString(e));
        goto out;
    }
    e = cudaMemset(be->kv, 0, blk);
    if (e != cudaSuccess) {
        mt_set_err(err, errlen, "cuda: warm-up cache: %s", cudaGetErrorString(e));
        goto out;
    }
    be->h_tab[0] = 0;
    for (int r = 0; r < be->R; r++)
        be->h_rows[r] = (mt_cu_row){ .table_off = 0, .nslots = 1, .write_slot = 0 };
    mt_step_io io = { 0 };
    if (be->has_tokens)
        io.tokens_in = tok;
    else
        io.pcm_in = pcm;
    if (forward(be, be->R, 1, &io, 1, 0, err, errlen)) {
        char why[300];
        snprintf(why, sizeof why, "%s", err);
        mt_set_err(err, errlen, "cuda: warm-up step: %s", why);
        goto out;
    }
    rc = 0;
out:
    if (be->kv)
        cudaFree(be->kv);
    be->kv = NULL;
    free(tok);
    free(pcm);
    return rc;
}

/* The process's shared device context (gpu/device_cuda.h): the selected
 * device, its one stream and cuBLAS handle, which the depformer and the
 * codec share. */
static int open_device(cuda_backend *be, char *err, size_t errlen)
{
    char why[200];
    if (!cuda_available(why, sizeof why)) {
        mt_set_err(err, errlen, "cuda: %s", why);
        return -1;
    }
    if (mt_cu_ctx_open("cuda", &be->ctx, err, errlen))
        return -1;
    be->st = be->ctx->stream;
    be->blas = be->ctx->blas;
    CU(cudaDeviceGetAttribute(&be->nsm, cudaDevAttrMultiProcessorCount, be->ctx->device),
       "cudaDeviceGetAttribute");
    return 0;
}

/* The bf16 weights in one device slab, if the free memory holds them. */
static int upload_weights(cuda_backend *be, char *err, size_t errlen)
{
    const mt_config *c = be->c;
    be->layer = calloc((size_t)c->layers, sizeof *be->layer);
    if (!be->layer) {
        mt_set_err(err, errlen, "cuda: out of host memory");
        return -1;
    }
    be->weight_bytes = layout_weights(be, NULL);
    size_t freeb = 0, total = 0;
    CU(cudaMemGetInfo(&freeb, &total), "cudaMemGetInfo");
    if (be->weight_bytes > freeb) {
        mt_set_err(err, errlen, "cuda: model %s needs %.2f GiB of device memory for its bf16 weights, %.2f GiB free of %.2f",
                 c->name, gib(be->weight_bytes), gib(freeb), gib(total));
        return -1;
    }
    cudaError_t e = cudaMalloc(&be->wslab, be->weight_bytes);
    if (e != cudaSuccess) {
        be->wslab = NULL;
        mt_set_err(err, errlen, "cuda: cannot allocate %.2f GiB for the weights of %s: %s",
                 gib(be->weight_bytes), c->name, cudaGetErrorString(e));
        return -1;
    }
    layout_weights(be, be->wslab);
    return load_weights(be, err, errlen);
}

/* Floats per row of the outputs: the logits, then the pcm. */
static size_t output_width(const cuda_backend *be)
{
    return (size_t)be->fs + (size_t)(be->c->vocab > 0 ? be->c->vocab : 0);
}

/* The activations of R rows carved from one device slab, and the rotary
 * frequencies. */
static int alloc_activations(cuda_backend *be, char *err, size_t errlen)
{
    const mt_config *c = be->c;
    size_t R = (size_t)be->R, H = (size_t)c->hidden, D = (size_t)be->hd;
    size_t outw = output_width(be);
    size_t abytes = up(R * H * 4) + up(R * H * 2) + up(R * be->qkv_dim * 4) +
                    up(R * 2 * c->heads * D * 4) +
                    up(R * c->heads * MT_CU_MAX_SPLITS * (D + 2) * 4) + up(R * be->q_dim * 2) +
                    up(R * 2 * c->ffn * 4) + up(R * c->ffn * 2) + up(R * be->fs * 2) +
                    up(R * outw * 4) + up(R * be->fs * 2) + up(D / 2 * 8) +
                    up(R * 2 * D * 4);
    cudaError_t e = cudaMalloc(&be->aslab, abytes);
    if (e != cudaSuccess) {
        be->aslab = NULL;
        mt_set_err(err, errlen, "cuda: cannot allocate %.2f GiB of activations for %d rows: %s",
                 gib(abytes), be->R, cudaGetErrorString(e));
        return -1;
    }
    {
        char *p = be->aslab;
#define CARVE(ptr, type, n)                        \
        do {                                       \
            ptr = (type *)p;                       \
            p += up((size_t)(n) * sizeof(type));   \
        } while (0)
        CARVE(be->x, float, R * H);
        CARVE(be->xn, uint16_t, R * H);
        CARVE(be->qkv, float, R * be->qkv_dim);
        CARVE(be->qrot, float, R * 2 * c->heads * D);
        CARVE(be->part, float, R * c->heads * MT_CU_MAX_SPLITS * (D + 2));
        CARVE(be->att, uint16_t, R * be->q_dim);
        CARVE(be->gu, float, R * 2 * c->ffn);
        CARVE(be->act, uint16_t, R * c->ffn);
        CARVE(be->pcm_bf, uint16_t, R * be->fs);
        CARVE(be->outf, float, R * outw);
        CARVE(be->pcm16, int16_t, R * be->fs);
        CARVE(be->inv_freq, double, D / 2);
        CARVE(be->rope_cs, float, R * 2 * D);
#undef CARVE
    }
    double *invf = malloc(D / 2 * sizeof(double));
    if (!invf) {
        mt_set_err(err, errlen, "cuda: out of host memory");
        return -1;
    }
    for (size_t i = 0; i < D / 2; i++)
        invf[i] = pow((double)c->rope_theta, -(2.0 * (double)i) / (double)D);
    e = cudaMemcpy(be->inv_freq, invf, D / 2 * sizeof(double), cudaMemcpyHostToDevice);
    free(invf);
    CU(e, "rotary frequencies upload");
    return 0;
}

/* The outputs' way back, pinned so the copy runs at the link's speed, and
 * the two events that time a step. */
static int alloc_outputs(cuda_backend *be, char *err, size_t errlen)
{
    size_t R = (size_t)be->R, outw = output_width(be);
    cudaError_t e = cudaMallocHost(&be->h_out, R * outw * 4);
    if (e != cudaSuccess) {
        be->h_out = NULL;
        mt_set_err(err, errlen, "cuda: cannot pin %zu bytes of host memory for the outputs: %s",
                 R * outw * 4, cudaGetErrorString(e));
        return -1;
    }
    be->h_logits = be->h_out;
    be->h_pcm_out = (int16_t *)((float *)be->h_out + R * (size_t)(be->c->vocab > 0 ? be->c->vocab : 0));
    CU(cudaEventCreate(&be->ev0), "cudaEventCreate");
    if (cudaEventCreate(&be->ev1) != cudaSuccess) {
        cudaEventDestroy(be->ev0);
        mt_set_err(err, errlen, "cuda: cudaEventCreate failed");
        return -1;
    }
    be->ev_ok = 1;
    return 0;
}

static int create(cuda_backend *be, char *err, size_t errlen)
{
    if (open_device(be, err, errlen) || upload_weights(be, err, errlen) ||
        alloc_activations(be, err, errlen) || alloc_outputs(be, err, errlen) ||
        alloc_meta(be, 1, err, errlen) || warm_up(be, err, errlen))
        return -1;
    /* what is free after all that is the pool's, less a reserve */
    size_t freeb = 0, total = 0;
    CU(cudaMemGetInfo(&freeb, &total), "cudaMemGetInfo");
    be->pub->kv_reserve_bytes = MT_CUDA_RESERVE;
    be->pub->kv_room_bytes = freeb > MT_CUDA_RESERVE ? freeb - MT_CUDA_RESERVE : 0;
    return 0;
}

/* The storage behind the pool's blocks, and block tables for all of them. */
static int cuda_attach_pool(mt_backend *b, mt_kv_pool *pool, char *err, size_t errlen)
{
    cuda_backend *be = b->impl;
    if (mt_cu_ctx_enter(be->ctx, err, errlen))
        return -1;
    be->pool = pool;
    be->kvp = mt_kv_pool_params(pool);
    int blocks = mt_kv_pool_blocks(pool);
    /* at most every block of the pool: a batch's sessions hold distinct blocks */
    if (alloc_meta(be, (size_t)blocks + 1, err, errlen))
        return -1;
    /* one block more than the pool's: the graphs' padding rows write there */
    be->scratch_block = blocks;
    be->kv_bytes = (size_t)(blocks + 1) * MT_KV_BLOCK * b->position_bytes;
    if (be->kv_bytes > b->kv_room_bytes) {
        mt_set_err(err, errlen, "cuda: the KV pool of %.2f GiB (%d blocks) does not fit: %.2f GiB free after %.2f GiB of weights, the activations, a warm-up step and a reserve of %.2f GiB; lower the kv budget (--kv-mem)",
                 gib(be->kv_bytes), blocks, gib(b->kv_room_bytes), gib(be->weight_bytes),
                 gib(b->kv_reserve_bytes));
        return -1;
    }
    cudaError_t e = cudaMalloc((void **)&be->kv, be->kv_bytes);
    if (e != cudaSuccess) {
        be->kv = NULL;
        mt_set_err(err, errlen, "cuda: cannot allocate the KV pool of %.2f GiB: %s",
                 gib(be->kv_bytes), cudaGetErrorString(e));
        return -1;
    }
    /* zeroed once, so a slot read before it is written (never, by the
     * bookkeeping) is finite */
    CU(cudaMemsetAsync(be->kv, 0, be->kv_bytes, be->st), "cudaMemsetAsync");
    CU(cudaStreamSynchronize(be->st), "cudaStreamSynchronize");
    be->ready = 1;
    return 0;
}

static int cuda_fill_kv_random(mt_backend *b, uint64_t seed, char *err, size_t errlen)
{
    cuda_backend *be = b->impl;
    if (!be->kv) {
        mt_set_err(err, errlen, "cuda: no pool attached");
        return -1;
    }
    if (mt_cu_ctx_enter(be->ctx, err, errlen))
        return -1;
    /* unit-scale values, as rotated keys and values of a real model */
    CU(mt_cu_fill_uniform_bf16(be->kv, be->kv_bytes / 2, seed, 1.0f, be->st), "kernel mt_cu_fill_uniform_bf16");
    CU(cudaStreamSynchronize(be->st), "cudaStreamSynchronize");
    return 0;
}

static int cuda_backend_create(const mt_model *m, const mt_decoder_opts *o, mt_backend **out,
                               char *err, size_t errlen)
{
    *out = NULL;
    const mt_config *c = &m->cfg;
    if (mt_backend_check_model(m, o, "cuda", err, errlen))
        return -1;
    mt_cu_dims dims = { c->layers, c->heads, c->kv_heads, c->head_dim };
    char why[200];
    if (mt_cu_attention_supported(dims, why, sizeof why)) {
        mt_set_err(err, errlen, "cuda: model %s: %s", c->name, why);
        return -1;
    }
    mt_backend *b = mt_backend_alloc(sizeof(cuda_backend), "cuda: out of host memory", err,
                                     errlen);
    if (!b)
        return -1;
    cuda_backend *be = b->impl;
    be->pub = b;
    b->name = "cuda";
    b->kv_elem_bytes = 2; /* the K/V cache's dtype: bf16 */
    b->attach_pool = cuda_attach_pool;
    b->step = cuda_step;
    b->prefill = cuda_prefill;
    b->destroy = cuda_destroy;
    be->m = m;
    be->c = c;
    be->dims = dims;
    be->R = mt_backend_rows(o);
    be->hd = c->head_dim;
    be->q_dim = c->heads * c->head_dim;
    be->kv_dim = c->kv_heads * c->head_dim;
    be->qkv_dim = be->q_dim + 2 * be->kv_dim;
    be->fs = c->frame_samples > 0 ? c->frame_samples : 1;
    be->has_audio = c->has_audio;
    be->has_tokens = c->has_tokens && c->vocab > 0;
    const char *gr = getenv("MT_CUDA_GRAPHS");
    be->use_graphs = gr && !strcmp(gr, "1");
    const char *fc = getenv("MT_CUDA_SPLIT_CHUNK");
    if (fc && *fc) {
        char *end;
        long v = strtol(fc, &end, 10);
        if (*end || v < 1 || v > 1 << 20) {
            mt_set_err(err, errlen, "cuda: MT_CUDA_SPLIT_CHUNK=%s: want a slot count 1..1048576", fc);
            cuda_destroy(b);
            return -1;
        }
        be->force_chunk = (int)v;
    }
    if (create(be, err, errlen)) {
        cuda_destroy(b);
        return -1;
    }
    *out = b;
    return 0;
}

/* The module's one entry point (cuda_module.h): the loader in the program
 * finds it with dlsym after loading this shared object. */
const mt_cuda_module *mt_cuda_module_get(void)
{
    static const mt_cuda_module mod = {
        .abi = MT_CUDA_MODULE_ABI,
        .backend_size = sizeof(mt_backend),
        .opts_size = sizeof(mt_decoder_opts),
        .available = cuda_available,
        .backend_create = cuda_backend_create,
        .fill_kv_random = cuda_fill_kv_random,
    };
    return &mod;
}
