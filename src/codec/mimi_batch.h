/* mimi_batch.h: the inside of a mimi_batch (mimi.c), shared by the files
 * that run the codec's layers on it: mimi.c (the batch, the transformers,
 * the RVQ and the graph's walk), mimi_par.c (the parallel phases, the
 * products and the elementwise ops) and mimi_seanet.c (the convolutions'
 * forward passes). Not for callers
 * outside src/codec: they see mimi.h's opaque batch. */
#ifndef MT_MIMI_BATCH_H
#define MT_MIMI_BATCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/mimi_impl.h"
#include "util/tpool.h"
#include "util/vec8.h"

enum {
    MAX_TILES = 8,      /* a product in at most this many tiles */
    ELT_CHUNK = 4096,   /* elementwise work item, floats (a multiple of 8) */
    ROW_TILE = 256,     /* the one-channel layer's work item, steps (a multiple of 32) */
    MAX_THREADS = 64,
    Q8_COLS = 16,       /* an 8-bit convolution's columns a product (the q8
                           kernel reads the weights once for up to 16 rows) */
    SKINNY = DOT8_MULTI_MAX,   /* the previous kernels: a product with at most this
                                  many vectors is skinny (at 4, sgemm was the faster
                                  than dot8_multi: issue 49) */
    SKINNY_VT = MIMI_SKINNY_MAX > SKINNY ? MIMI_SKINNY_MAX : SKINNY,   /* vt's rows */
};

/* A product C [M][N] = op(A) op(B) + beta C (row-major, as cblas_sgemm)
 * and its tiles: `split_m` rows or else columns, `tile` of them each. */
typedef struct gemm_job {
    int ta, tb, M, N, K;
    const float *A, *B;
    int lda, ldb, ldc;
    float beta;
    float *C;
    int split_m, tile, ntiles;
    int skinny;          /* the product is skinny_tile's (see there), not sgemm's */
} gemm_job;

struct mimi_batch;
struct par_job;
/* Work item i of a phase, run by thread tid. */
typedef void (*par_item_fn)(struct mimi_batch *w, const struct par_job *j, int i, int tid);

/* What a parallel phase works on: nitems items of fn. */
typedef struct par_job {
    par_item_fn fn;
    int nitems;
    gemm_job g;
    const mimi_conv *cv;
    mimi_state *const *S;
    int B;
    const float *X;     /* conv input; elementwise source */
    const float *wt;    /* the direct convolution's reordered weights */
    float *Y;           /* conv output; elementwise destination */
    size_t n0, nc, n;   /* im2col: the chunk's columns (direct: n0 the first session);
                           elementwise: floats */
    int kind;           /* elementwise: 0 ELU, 1 add, 2 GELU */
    int add;            /* the direct convolution: Y += its outputs */
    int elu;            /* the direct convolution: ELU of X is its input */
    /* attention */
    const mimi_tlayer *l;
    int T, dec;
    const mimi_q8mat *q8;   /* an 8-bit product's matrix (g: its shape and tiles) */
    int gelu;               /* an 8-bit product: GELU on each tile's outputs after it */
} par_job;
struct mimi_batch {
    int    max_batch;
    size_t bytes;
    float *act[4];     /* [max_act * max_batch] each: the SEANet ping-pong */
    float *col;        /* [col_floats]: im2col / transposed-GEMM chunk */
    size_t col_floats;
    float *part;       /* [max_batch][cout][ctx]: a transposed conv's new overlap */
    float *h, *qkv, *att, *ff, *xt;   /* transformer: [max_batch * steps][d|3d|d|ff|d] */
    float *rcos, *rsin;  /* [max_batch * steps][head_dim / 2]: rotary angles */
    float *score;      /* [MAX_THREADS][context]: each thread's attention scores */
    float *xrow;       /* [MAX_THREADS][xrow_floats]: the one-channel layer's padded input */
    size_t xrow_floats;
    float *r, *sc, *sum2;        /* RVQ: [qd][B], [bins][B], [qd][B] */
    float *vt;         /* [SKINNY_VT][vt_k]: a skinny product's columns, made rows */
    size_t vt_k;
    double stage_s[MIMI_NSTAGES];
    double op_s[MIMI_MAX_OPS];   /* the last call's time of each op */
    int    op_n;
    int    old_kern;   /* mimi_batch_old_kernels: the previous kernels */
    int    no_fuse;    /* mimi_batch_fuse(w, 0): no op fused into a convolution */
    float *wt[2 * MIMI_MAX_CONVS];   /* encoder's then decoder's convs: the direct
                                        kernel's reordered weights, or NULL */
    int    cpu_clock;  /* stages timed in this thread's CPU time */
    mimi_q8 *q8;       /* the 8-bit copies (mimi_batch_weights_q8), or NULL */
    int    q8_rows;    /* products of up to this many rows run on them */
    float *q8x;        /* [Q8_COLS][q8 max K]: an 8-bit convolution's columns, as rows */
    float *q8y;        /* [Q8_COLS][q8 max rows]: their products */
    /* threads */
    const mimi_model *m;
    mt_pool pool;      /* pool.n threads, the caller's included; none started at 1 */
    par_job job;       /* the phase being prepared (thread 0's) */
    par_job jobs[2];   /* phase k's, published, in jobs[k % 2] */
    uint32_t seq;      /* thread 0's count of phases posted */
    _Atomic uint64_t claim;   /* phase seq (24 bits) | items (20) | next item (20) */
    atomic_int done;   /* items of the current phase finished */
    atomic_int over;   /* the frame's graph is done: workers return */
    int in_frame;      /* thread 0 is inside par_frame */
};

/* Runs w->job's items fn(w, job, i, tid), i < nitems, on the frame's
 * threads (all on this one outside a frame, or for fewer than 2 items);
 * returns when all are done. */
void mimi_par_run(mimi_batch *w, par_item_fn fn, int nitems);
/* C = op(A) op(B) + beta C (cblas_sgemm's row-major arguments) in tiles
 * on the frame's threads. */
void mimi_par_gemm(mimi_batch *w, int ta, int tb, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);
/* C [M][N] = A [M][K] . W [N][K]^T on W's 8-bit copy q8, by weight rows;
 * with gelu, C = gelu(C) too (mimi_gelu's bits: N a multiple of 8). */
void mimi_q8_product(mimi_batch *w, const mimi_q8mat *q8, int M, int N, int K, const float *A,
                     float *C);
void mimi_q8_product_gelu(mimi_batch *w, const mimi_q8mat *q8, int M, int N, int K,
                          const float *A, float *C);
/* Y [rows][n] = each row's bias (0 without). */
void mimi_fill_bias(float *Y, const float *bias, int rows, size_t n);
/* run(arg) on this thread, the batch's other threads taking the items of
 * the phases it posts (mimi_par_run) until it returns. */
void mimi_par_frame(mimi_batch *w, void (*run)(void *arg), void *arg);
/* The elementwise op `kind` (0 dst = ELU(src), 1 dst += src, 2 GELU in
 * place on dst) over n floats, in ranges across the threads. */
void mimi_par_elt(mimi_batch *w, int kind, float *dst, const float *src, size_t n);

/* mimi_seanet.c: Y [cout][B*tout] = conv(state ++ X [cin][B*tin]), and
 * a transposed convolution's Y [cout][B*tin*stride] with the overlap
 * pending from the last frame; the sessions' states updated. Where
 * mimi_conv_direct (mimi_convtr_direct) says the direct kernel runs cv,
 * the ops beside it fused (fuse; a transposed convolution MIMI_FUSE_ELU
 * alone): MIMI_FUSE_ELU, conv(state ++ ELU(X)), the ELU applied as
 * the input is padded (the context kept is ELU's); MIMI_FUSE_ADD, Y += the
 * conv, the residual's sum made as the kernel stores. Same bits as the
 * ops one after the other. */
enum { MIMI_FUSE_ELU = 1, MIMI_FUSE_ADD = 2 };
void mimi_conv_fwd(const mimi_conv *cv, mimi_batch *w, mimi_state *const *S, int B, const float *X,
                   float *Y, int fuse);
int  mimi_conv_direct(const mimi_batch *w, const mimi_conv *cv);
void mimi_convtr_fwd(const mimi_conv *cv, mimi_batch *w, mimi_state *const *S, int B,
                     const float *X, float *Y, int fuse);
/* Whether the transposed convolution cv of B sessions runs on the direct
 * tile (mimi_convtr.c's phases), where MIMI_FUSE_ELU fuses the ELU before
 * it into its pad (its only input read: no context of inputs). */
int  mimi_convtr_direct(const mimi_batch *w, const mimi_conv *cv, int B);

#endif
