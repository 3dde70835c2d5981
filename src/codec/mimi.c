/* mimi.c: Mimi's streaming compute for a batch of sessions: causal
 * convolutions as im2col + one sgemm per layer (columns = every session's
 * output steps), or, for the layers with a long time axis, mimi_conv.c's
 * direct kernel; products of up to 8 vectors (a small batch's
 * transformer steps, RVQ columns, last layers) on mimi_skinny.c's
 * kernel; transposed convolutions on mimi_convtr.c's kernels (the
 * phases of the long ones on the direct tile, the 2-step one a product
 * of 8 columns at a time, up to 64 sessions), else one sgemm +
 * overlap-add; the
 * transformers with one sgemm per projection across the batch and
 * attention over each session's ring, the split RVQ with the distances as
 * one sgemm per codebook.
 *
 * Activations are [channels][session][steps] (column n = b * T + t), so a
 * batch is one matrix and one frame of B sessions costs one GEMM per
 * layer, not B; the transformers work token-major inside ([session][steps]
 * [channels], see transformer_fwd). Large buffers (weights, session
 * states) are on 2 MiB pages (mimi_model.c).
 *
 * Threads (mimi_batch_threads; util/tpool.h, the caller's thread being
 * thread 0). A single live conversation is B = 1, where each layer is too
 * small for OpenBLAS's own threads to pay (and mt-serve holds OpenBLAS to
 * one thread anyway, backend_cpu.c), so the codec splits its own work:
 * every product into tiles, by output rows where the weights are the
 * larger operand (the deep layers, the transformers' projections, the
 * codebooks) and by output columns, i.e. steps of the batch, where the
 * activations are (the first SEANet layers), each tile one sgemm (or,
 * for a product of one or two vectors, skinny_tile's own loop); the
 * im2col copy by input channels; a transposed convolution's overlap-add
 * by output channels; the attention by (session, head); the elementwise
 * ELU, GELU and residual adds by ranges of 4096 floats; the last
 * one-channel layer by (session, 256 steps). The tiles are a function of
 * the shape alone, never of the thread count, and each tile's arithmetic
 * is the same whichever thread takes it (items are claimed one at a
 * time, see par_run), so the results are the same bits for any number of
 * threads (test_mimi checks 1, 2 and 3). A frame is one phase of the
 * pool and its parallel pieces sub-phases that end when their items are
 * done (par_frame), so a thread the scheduler leaves out costs the frame
 * once, not every piece. */
#include "codec/mimi_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/errmsg.h"
#include "decode/cpu_q8.h"
#include "util/tpool.h"
#include "util/vec8.h"

#include <sched.h>
#include <stdatomic.h>

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
    /* attention */
    const mimi_tlayer *l;
    int T, dec;
    const mimi_q8mat *q8;   /* an 8-bit product's matrix (g: its shape and tiles) */
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

static double now_s(const mimi_batch *w)
{
    return (double)(w->cpu_clock ? mt_thread_cpu_ns() : mt_clock_ns()) * 1e-9;
}

void mimi_batch_time_cpu(mimi_batch *w, int on) { w->cpu_clock = on; }

static void *alloc_f(size_t n, size_t *bytes, int *bad)
{
    void *p = NULL;
    size_t sz = (n ? n : 1) * sizeof(float);
    if (posix_memalign(&p, 64, sz) != 0) {
        *bad = 1;
        return NULL;
    }
    memset(p, 0, sz);
    *bytes += sz;
    return p;
}

mimi_batch *mimi_batch_new(const mimi_model *m, int max_batch, char *err, size_t errlen)
{
    if (max_batch < 1 || max_batch > 4096) {
        mt_set_err(err, errlen, "mimi batch: %d sessions is out of range (1..4096)", max_batch);
        return NULL;
    }
    mimi_batch *w = mt_calloc_or_err(1, sizeof *w, err, errlen, "mimi batch");
    if (!w)
        return NULL;
    const mimi_config *c = &m->c;
    size_t B = (size_t)max_batch, N = B * (size_t)m->enc_steps;
    int bad = 0;
    w->max_batch = max_batch;
    for (int i = 0; i < 4; i++)
        w->act[i] = alloc_f(m->max_act * B, &w->bytes, &bad);
    /* the im2col chunk: whole batch when small, else at least 64 columns */
    size_t need = (size_t)m->max_rows * (size_t)m->frame * B;
    size_t cap = (size_t)1 << 22;
    if (cap < (size_t)m->max_rows * 64)
        cap = (size_t)m->max_rows * 64;
    w->col_floats = need < cap ? need : cap;
    w->col = alloc_f(w->col_floats, &w->bytes, &bad);
    size_t part = 0;
    for (int i = 0; i < m->n_dec; i++)
        if (m->dec[i].tr && (size_t)m->dec[i].cout * (size_t)m->dec[i].ctx > part)
            part = (size_t)m->dec[i].cout * (size_t)m->dec[i].ctx;
    if ((size_t)m->up.cout * (size_t)m->up.ctx > part)
        part = (size_t)m->up.cout * (size_t)m->up.ctx;
    w->part = alloc_f(part * B, &w->bytes, &bad);
    w->h = alloc_f((size_t)c->d_model * N, &w->bytes, &bad);
    w->qkv = alloc_f((size_t)3 * c->d_model * N, &w->bytes, &bad);
    w->att = alloc_f((size_t)c->d_model * N, &w->bytes, &bad);
    w->ff = alloc_f((size_t)c->dim_feedforward * N, &w->bytes, &bad);
    w->xt = alloc_f((size_t)c->d_model * N, &w->bytes, &bad);
    w->rcos = alloc_f((size_t)(c->d_model / c->num_heads / 2) * N, &w->bytes, &bad);
    w->rsin = alloc_f((size_t)(c->d_model / c->num_heads / 2) * N, &w->bytes, &bad);
    w->score = alloc_f((size_t)c->context * MAX_THREADS, &w->bytes, &bad);
    int maxctx = 0;
    for (int i = 0; i < m->n_dec; i++)
        if (!m->dec[i].tr && m->dec[i].ctx > maxctx)
            maxctx = m->dec[i].ctx;
    w->xrow_floats = (size_t)ROW_TILE + (size_t)maxctx + 16;
    w->xrow = alloc_f(w->xrow_floats * MAX_THREADS, &w->bytes, &bad);
    w->m = m;
    w->pool.n = 1;
    w->r = alloc_f((size_t)c->q_dimension * B, &w->bytes, &bad);
    w->sc = alloc_f((size_t)c->bins * B, &w->bytes, &bad);
    w->sum2 = alloc_f((size_t)c->q_dimension * B, &w->bytes, &bad);
    size_t k = (size_t)m->max_rows;
    size_t ks[4] = { (size_t)c->dimension, (size_t)c->q_dimension, (size_t)c->d_model,
                     (size_t)c->dim_feedforward };
    for (int i = 0; i < 4; i++)
        k = ks[i] > k ? ks[i] : k;
    w->vt_k = k;
    for (int i = 0; i < m->n_enc + m->n_dec; i++) {
        const mimi_conv *cv = i < m->n_enc ? &m->enc[i] : &m->dec[i - m->n_enc];
        int trd = mimi_trd_eligible(cv) && mimi_trd_pad_floats(cv) + mimi_trd_out_floats(cv) <= w->col_floats;
        int trs = !trd && mimi_trs_eligible(cv) && cv->tin < 16;
        if (!trd && !trs && (!mimi_direct_eligible(cv) || mimi_direct_pad_floats(cv) > w->col_floats))
            continue;   /* im2col + sgemm (transposed: sgemm + overlap-add) */
        float *wt = alloc_f(mimi_direct_weight_floats(cv), &w->bytes, &bad);   /* cin*cout*k, all three */
        if (wt)
            (trd ? mimi_trd_weights : trs ? mimi_trs_weights : mimi_direct_weights)(cv, wt);
        w->wt[i < m->n_enc ? i : MIMI_MAX_CONVS + i - m->n_enc] = wt;
    }
    w->vt = alloc_f(k * SKINNY_VT, &w->bytes, &bad);
    if (bad) {
        mt_set_err(err, errlen, "mimi batch of %d: out of memory", max_batch);
        mimi_batch_free(w);
        return NULL;
    }
    return w;
}

void mimi_batch_free(mimi_batch *w)
{
    if (!w)
        return;
    mt_pool_stop(&w->pool);
    for (int i = 0; i < 4; i++)
        free(w->act[i]);
    free(w->xrow);
    free(w->col); free(w->part); free(w->h); free(w->qkv); free(w->att); free(w->ff);
    free(w->xt); free(w->rcos); free(w->rsin);
    free(w->score); free(w->r); free(w->sc); free(w->sum2); free(w->vt);
    free(w->q8x); free(w->q8y);
    for (int i = 0; i < 2 * MIMI_MAX_CONVS; i++)
        free(w->wt[i]);
    mimi_q8_free(w->q8);
    free(w);
}

int mimi_batch_weights_q8(mimi_batch *w, int max_rows, char *err, size_t errlen)
{
    if (max_rows <= 0) {   /* the copies stay for the next call (benchmarks toggle) */
        w->q8_rows = 0;
        return 0;
    }
    if (!w->q8) {
        if (mimi_q8_make(w->m, &w->q8, err, errlen))
            return -1;
        size_t mk, mn;
        int bad = 0;
        mimi_q8_conv_max(w->q8, &mk, &mn);
        w->q8x = alloc_f(mk * Q8_COLS, &w->bytes, &bad);
        w->q8y = alloc_f(mn * Q8_COLS, &w->bytes, &bad);
        if (bad) {
            mimi_q8_free(w->q8);
            free(w->q8x);
            free(w->q8y);
            w->q8 = NULL, w->q8x = w->q8y = NULL;
            mt_set_err(err, errlen, "mimi: out of memory for the 8-bit convolutions' columns");
            return -1;
        }
    }
    w->q8_rows = max_rows;
    return 0;
}

size_t mimi_batch_q8_bytes(const mimi_batch *w) { return mimi_q8_bytes(w->q8); }

size_t mimi_batch_bytes(const mimi_batch *w) { return w->bytes; }

void mimi_batch_stage_seconds(const mimi_batch *w, double out[MIMI_NSTAGES])
{
    for (int i = 0; i < MIMI_NSTAGES; i++)
        out[i] = w->stage_s[i];
}

int mimi_batch_op_seconds(const mimi_batch *w, double *out, int max)
{
    for (int i = 0; i < w->op_n && i < max; i++)
        out[i] = w->op_s[i];
    return w->op_n;
}

void mimi_batch_old_kernels(mimi_batch *w, int old) { w->old_kern = old == 2 ? 2 : old != 0; }

int mimi_batch_threads(mimi_batch *w, int threads, char *err, size_t errlen)
{
    if (threads < 1 || threads > MAX_THREADS) {
        mt_set_err(err, errlen, "mimi batch: %d threads is out of range (1..%d)", threads, MAX_THREADS);
        return -1;
    }
    mt_pool_stop(&w->pool);
    memset(&w->pool, 0, sizeof w->pool);
    w->pool.n = 1;
    /* Workers spin 2 ms for the next phase (phases follow each other
     * within microseconds inside a frame), then sleep until the next
     * frame. */
    if (threads > 1 && mt_pool_start(&w->pool, threads, 2000000, err, errlen) != 0) {
        memset(&w->pool, 0, sizeof w->pool);
        w->pool.n = 1;
        return -1;
    }
    return 0;
}

int mimi_batch_thread_count(const mimi_batch *w) { return w->pool.n; }

/* ---- parallel phases (see the top of the file) ---------------------------- */

/* A frame (one encode or decode) is one phase of the pool: thread 0 walks
 * the graph and posts each parallel piece of work as a sub-phase of
 * numbered items; the other threads take items as they come. A sub-phase
 * ends when its items are done, not when every thread has looked in, so
 * a thread the scheduler left out (a loaded machine) delays nothing but
 * the frame's end. Items are claimed by compare-and-swap on `claim`,
 * which names the sub-phase, so a late thread cannot take an item of a
 * sub-phase already over; it reads the sub-phase's parameters only once
 * it holds an item (they stay put until every item is done). */
enum { ITEM_BITS = 20, MAX_ITEMS = (1 << ITEM_BITS) - 1, SEQ_MASK = (1 << 24) - 1 };

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define relax() _mm_pause()
#else
#define relax() ((void)0)
#endif

/* One turn of a wait: pause, and every 64 turns give the CPU away (on a
 * loaded machine the thread waited for may need this core). */
static void wait_turn(unsigned i)
{
    relax();
    if ((i & 63) == 63)
        sched_yield();
}

/* Claims an item of the current sub-phase and runs it; 0 when there was
 * none to claim. */
static int run_one(mimi_batch *w, int tid)
{
    uint64_t c = atomic_load_explicit(&w->claim, memory_order_acquire);
    for (;;) {
        uint32_t next = (uint32_t)(c & MAX_ITEMS), n = (uint32_t)((c >> ITEM_BITS) & MAX_ITEMS);
        if (next >= n)
            return 0;
        if (atomic_compare_exchange_weak_explicit(&w->claim, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            const par_job *j = &w->jobs[(c >> (2 * ITEM_BITS)) & 1];
            j->fn(w, j, (int)next, tid);
            atomic_fetch_add_explicit(&w->done, 1, memory_order_release);
            return 1;
        }
    }
}

static void add_into(float *dst, const float *src, size_t n);

/* Runs w->job's items fn(w, job, i, tid), i < nitems, on the frame's
 * threads (all on this one outside a frame, or for fewer than 2 items);
 * returns when all are done. */
static void par_run(mimi_batch *w, par_item_fn fn, int nitems)
{
    w->job.fn = fn;
    w->job.nitems = nitems;
    if (w->pool.n <= 1 || !w->in_frame || nitems > MAX_ITEMS || nitems < 2) {
        for (int i = 0; i < nitems; i++)
            fn(w, &w->job, i, 0);
        return;
    }
    w->seq = (w->seq + 1) & SEQ_MASK;
    w->jobs[w->seq & 1] = w->job;
    atomic_store_explicit(&w->done, 0, memory_order_relaxed);
    atomic_store_explicit(&w->claim,
                          ((uint64_t)w->seq << (2 * ITEM_BITS)) | ((uint64_t)nitems << ITEM_BITS),
                          memory_order_release);
    while (run_one(w, 0))
        ;
    for (unsigned i = 0; atomic_load_explicit(&w->done, memory_order_acquire) < nitems; i++)
        wait_turn(i);
}

/* The pool's phase, a whole frame: thread 0 walks the graph (f->run),
 * the others take items until it is over. */
typedef struct frame_run {
    mimi_batch *w;
    void (*run)(void *arg);
    void *arg;
} frame_run;

static void frame_phase(void *ctx, int tid, int nt)
{
    frame_run *f = ctx;
    mimi_batch *w = f->w;
    (void)nt;
    if (tid == 0) {
        f->run(f->arg);
        atomic_store_explicit(&w->over, 1, memory_order_release);
        return;
    }
    for (unsigned i = 0; !atomic_load_explicit(&w->over, memory_order_acquire); i++)
        if (run_one(w, tid))
            i = 0;
        else
            wait_turn(i);
}

/* run(arg) on this thread, the batch's other threads taking its items. */
static void par_frame(mimi_batch *w, void (*run)(void *arg), void *arg)
{
    if (w->pool.n <= 1) {
        run(arg);
        return;
    }
    frame_run f = { w, run, arg };
    atomic_store(&w->over, 0);
    atomic_store(&w->claim, 0);   /* no items until the first sub-phase */
    w->in_frame = 1;
    mt_pool_run(&w->pool, frame_phase, &f);
    w->in_frame = 0;
}

static void gemm_tile(const gemm_job *j, int t)
{
    int o = t * j->tile, dim = j->split_m ? j->M : j->N;
    int len = dim - o < j->tile ? dim - o : j->tile;
    const CBLAS_TRANSPOSE ta = j->ta ? CblasTrans : CblasNoTrans, tb = j->tb ? CblasTrans : CblasNoTrans;
    if (j->split_m)
        cblas_sgemm(CblasRowMajor, ta, tb, len, j->N, j->K, 1.0f,
                    j->ta ? j->A + o : j->A + (size_t)o * j->lda, j->lda, j->B, j->ldb, j->beta,
                    j->C + (size_t)o * j->ldc, j->ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, j->M, len, j->K, 1.0f, j->A, j->lda,
                    j->tb ? j->B + (size_t)o * j->ldb : j->B + o, j->ldb, j->beta, j->C + o, j->ldc);
}

/* One tile of a skinny product: a few vectors (a session's one or two
 * steps at B = 1 or 2) against a tile of weight rows. OpenBLAS's sgemm
 * packs its operands into blocks before it multiplies, which for so few
 * vectors means reading the weights twice: this loop streams each weight
 * row once (1.65 x faster on Mimi's transformer shapes at 2 rows, one
 * thread, issue 49). Two layouts:
 *   tb  C [nv][N] = V [nv][K] . W [N][K]^T    (V = A, W = B: the projections)
 *   !tb C [N][nv] = W [N][K] . V^T            (W = A, V = vt: B's columns)
 * Each output's sum is the same loop whatever the tile, so the bits do not
 * depend on the threads. */
__attribute__((target_clones("arch=x86-64-v3", "default")))
static void skinny_tile(const gemm_job *j, const float *vt, int t)
{
    int o = t * j->tile, dim = j->tb ? j->N : j->M;
    int len = dim - o < j->tile ? dim - o : j->tile, nv = j->tb ? j->M : j->N;
    const float *W = j->tb ? j->B : j->A, *V = j->tb ? j->A : vt;
    size_t ldw = (size_t)(j->tb ? j->ldb : j->lda), ldv = j->tb ? (size_t)j->lda : (size_t)j->K;
    float acc[SKINNY];
    for (int n = o; n < o + len; n++) {
        /* a constant count each, so that the sums stay in registers */
        const float *wr = W + (size_t)n * ldw;
        if (nv == 1)
            dot8_multi(wr, V, ldv, 1, j->K, acc);
        else
            dot8_multi(wr, V, ldv, 2, j->K, acc);
        for (int v = 0; v < nv; v++) {
            float *c = j->tb ? j->C + (size_t)v * j->ldc + n : j->C + (size_t)n * j->ldc + v;
            *c = j->beta != 0.0f ? acc[v] + j->beta * *c : acc[v];
        }
    }
}

/* A tile of a skinny product on mimi_skinny.c's kernel (up to 8 vectors),
 * the layouts as skinny_tile's. */
static void skinny8_tile(const gemm_job *j, const float *vt, int t)
{
    int o = t * j->tile, dim = j->tb ? j->N : j->M;
    int len = dim - o < j->tile ? dim - o : j->tile, nv = j->tb ? j->M : j->N;
    if (j->tb)
        mimi_skinny_rows(j->B, (size_t)j->ldb, o, o + len, j->A, (size_t)j->lda, nv, j->K, j->C, 1,
                         (size_t)j->ldc, j->beta);
    else
        mimi_skinny_rows(j->A, (size_t)j->lda, o, o + len, vt, (size_t)j->K, nv, j->K, j->C,
                         (size_t)j->ldc, 1, j->beta);
}

static void it_gemm(mimi_batch *w, const par_job *j, int i, int tid)
{
    (void)tid;
    if (j->g.skinny == 2)
        skinny8_tile(&j->g, w->vt, i);
    else if (j->g.skinny)
        skinny_tile(&j->g, w->vt, i);
    else
        gemm_tile(&j->g, i);
}

/* Sets up j as a skinny product when it is one (op(A) plain; at most
 * SKINNY vectors; B's columns fit vt); copies B's columns into w->vt. */
static int skinny_setup(mimi_batch *w, gemm_job *j)
{
    int wide = w->old_kern != 1 && mimi_skinny_ok();
    if (j->ta || (j->tb ? j->M : j->N) > (wide ? MIMI_SKINNY_MAX : SKINNY) || (size_t)j->K > w->vt_k)
        return 0;
    if (!j->tb)
        for (int v = 0; v < j->N; v++)
            for (int k = 0; k < j->K; k++)
                w->vt[(size_t)v * j->K + k] = j->B[(size_t)k * j->ldb + v];
    int dim = j->tb ? j->N : j->M;
    int tile = ((dim + MAX_TILES - 1) / MAX_TILES + 15) / 16 * 16;
    j->skinny = wide ? 2 : 1;
    j->tile = tile < dim ? tile : dim;
    j->ntiles = (dim + j->tile - 1) / j->tile;
    return 1;
}

/* C [M][N] = op(A) [M][K] op(B) [K][N] + beta C, as cblas_sgemm
 * (alpha 1), in tiles across the threads. The tiles split the larger
 * operand's dimension (rows of A, or columns of B) into at most MAX_TILES,
 * rows in multiples of 16 and columns of 64; a product under 1e5
 * multiply-adds is one tile. */
static void par_gemm(mimi_batch *w, int ta, int tb, int M, int N, int K, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    gemm_job *j = &w->job.g;
    *j = (gemm_job){ ta, tb, M, N, K, A, B, lda, ldb, ldc, beta, C, M >= N, 0, 1, 0 };
    if (skinny_setup(w, j)) {
        if (j->ntiles == 1 && j->skinny == 2)
            skinny8_tile(j, w->vt, 0);
        else if (j->ntiles == 1)
            skinny_tile(j, w->vt, 0);
        else
            par_run(w, it_gemm, j->ntiles);
        return;
    }
    int dim = j->split_m ? M : N, unit = j->split_m ? 16 : 64;
    int tile = (dim + MAX_TILES - 1) / MAX_TILES;
    tile = (tile + unit - 1) / unit * unit;
    if ((double)M * N * K < 1e5 || tile >= dim) {
        j->split_m = 1;
        j->tile = M;
    } else {
        j->tile = tile;
        j->ntiles = (dim + tile - 1) / tile;
    }
    if (j->ntiles == 1)
        gemm_tile(j, 0);   /* no phase for one tile */
    else
        par_run(w, it_gemm, j->ntiles);
}

/* Tile i of an 8-bit product: weight rows (output columns) i * tile on. */
static void it_q8(mimi_batch *w, const par_job *j, int i, int tid)
{
    (void)w, (void)tid;
    const gemm_job *g = &j->g;
    int lo = i * g->tile, hi = lo + g->tile < g->N ? lo + g->tile : g->N;
    mt_q8_gemm_rows(g->M, lo, hi, g->N, g->K, g->A, g->lda, j->q8->q, j->q8->s, 0.0f, g->C + lo,
                    g->ldc);
}

/* C [M][N] = A [M][K] . W [N][K]^T on W's 8-bit copy q8, in tiles of
 * whole 8-row groups (cpu_q8.h) by weight rows, the tiles a function of
 * the shape alone (each output's sum is the same whatever thread takes
 * it). Sets w->job's g and q8 only. */
static void q8_product(mimi_batch *w, const mimi_q8mat *q8, int M, int N, int K, const float *A,
                       float *C)
{
    gemm_job *g = &w->job.g;
    int tile = ((N + MAX_TILES - 1) / MAX_TILES + MT_Q8_GROUP - 1) / MT_Q8_GROUP * MT_Q8_GROUP;
    *g = (gemm_job){ 0, 1, M, N, K, A, NULL, K, K, N, 0.0f, C, 0, tile, (N + tile - 1) / tile, 0 };
    w->job.q8 = q8;
    if (g->ntiles == 1)
        it_q8(w, &w->job, 0, 0);
    else
        par_run(w, it_q8, g->ntiles);
}

/* A transformer's product C [M][N] = A [M][K] . W [N][K]^T: on the 8-bit
 * copy of W (matrix `which` of layer li) where the batch has one and M is
 * within q8_rows (q8_product), else par_gemm on the fp32 W. */
static void tr_gemm(mimi_batch *w, int dec, int li, int which, int M, int N, int K, const float *A,
                    const float *W, float *C)
{
    if (!w->q8 || M > w->q8_rows)
        par_gemm(w, 0, 1, M, N, K, A, K, W, K, 0.0f, C, N);
    else
        q8_product(w, mimi_q8_mat(w->q8, dec, li, which), M, N, K, A, C);
}

/* The elementwise ops, in ranges of ELT_CHUNK floats: dst = elu(src),
 * dst += src, or gelu(dst) in place. Each range is a multiple of 8 floats
 * but the last, so every element takes the same (vector or tail) path as
 * in one call over the whole. */
static void it_elt(mimi_batch *w, const par_job *j, int t, int tid)
{
    (void)w, (void)tid;
    size_t i0 = (size_t)t * ELT_CHUNK, len = j->n - i0 < ELT_CHUNK ? j->n - i0 : ELT_CHUNK;
    if (j->kind == 0)
        mimi_elu(j->Y + i0, j->X + i0, len);
    else if (j->kind == 1)
        add_into(j->Y + i0, j->X + i0, len);
    else
        mimi_gelu(j->Y + i0, len);
}

static void par_elt(mimi_batch *w, int kind, float *dst, const float *src, size_t n)
{
    w->job.kind = kind;
    w->job.Y = dst;
    w->job.X = src;
    w->job.n = n;
    par_run(w, it_elt, (int)((n + ELT_CHUNK - 1) / ELT_CHUNK));
}

/* ---- elementwise (ELU and GELU in mimi_elt.c; util/vec8.h's vectors) ------ */

static void add_into(float *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        store8(dst + i, load8(dst + i) + load8(src + i));
    for (; i < n; i++)
        dst[i] += src[i];
}

/* Y [rows][n] = bias[row] (0 without a bias): the sgemm then adds into it */
static void fill_bias(float *Y, const float *bias, int rows, size_t n)
{
    for (int r = 0; r < rows; r++) {
        float *y = Y + (size_t)r * n;
        v8f v = splat8(bias ? bias[r] : 0.0f);
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
            store8(y + i, v);
        for (; i < n; i++)
            y[i] = v[0];
    }
}

/* ---- convolutions ----------------------------------------------------------- */

/* The one-channel layer (the decoder's last), work item t = (session,
 * ROW_TILE steps): a GEMM of one row would read an im2col matrix cin*k
 * times the input's size for k flops an element, so each input row, its
 * context before it, is added in at its k shifts. */
static void it_conv_row(mimi_batch *w, const par_job *j, int it, int tid)
{
    const mimi_conv *cv = j->cv;
    const int cin = cv->cin, k = cv->k, dil = cv->dil, tin = cv->tin, tout = cv->tout, ctx_ = cv->ctx;
    const size_t Nin = (size_t)j->B * tin;
    const int per = (tout + ROW_TILE - 1) / ROW_TILE;
    float *xp = w->xrow + (size_t)tid * w->xrow_floats;   /* [len + ctx]: padded input steps t0.. */
    {
        int b = it / per, t0 = it % per * ROW_TILE;
        int len = tout - t0 < ROW_TILE ? tout - t0 : ROW_TILE;
        const float *sb0 = j->S[b]->x + cv->st;
        for (int ci = 0; ci < cin; ci++) {
            /* xp[p] = padded input at step t0 + p: the context below ctx, X above */
            const float *xs = j->X + (size_t)ci * Nin + (size_t)b * tin;
            for (int p = 0; p < len + ctx_; p++) {
                int q = t0 + p;
                xp[p] = q < ctx_ ? sb0[(size_t)ci * ctx_ + q] : xs[q - ctx_];
            }
            for (int kk = 0; kk < k; kk++)
                cblas_saxpy(len, cv->w[(size_t)ci * k + kk], xp + (size_t)kk * dil, 1,
                            j->Y + (size_t)b * tout + t0, 1);
        }
    }
}

/* im2col of columns n0..n0+nc into w->col, input channels split across
 * the threads: Col [cin*k][nc], row (ci, kk), column (b, t) = padded input
 * at t*stride + kk*dil, the padding being the session's context. */
static void it_im2col(mimi_batch *w, const par_job *j, int ci, int tid)
{
    const mimi_conv *cv = j->cv;
    const int cin = cv->cin, k = cv->k, st = cv->stride, dil = cv->dil;
    const int tin = cv->tin, tout = cv->tout, ctx_ = cv->ctx;
    const size_t Nin = (size_t)j->B * tin, n0 = j->n0, nc = j->nc;
    (void)tid, (void)cin;
    {
        const float *xs = j->X + (size_t)ci * Nin;
        for (int kk = 0; kk < k; kk++) {
            float *crow = w->col + ((size_t)ci * k + kk) * nc;
            int off = kk * dil;
            /* steps t < tsplit read the context */
            int tsplit = off >= ctx_ ? 0 : (ctx_ - off + st - 1) / st;
            size_t jj = 0;
            for (size_t b = n0 / tout; jj < nc; b++) {
                int t0 = (int)((n0 + jj) - b * tout);
                int t1 = (int)(n0 + nc - b * tout < (size_t)tout ? n0 + nc - b * tout : (size_t)tout);
                int ts = tsplit < t0 ? t0 : tsplit > t1 ? t1 : tsplit;
                const float *sb = j->S[b]->x + cv->st + (size_t)ci * ctx_;
                for (int t = t0; t < ts; t++)
                    crow[jj++] = sb[t * st + off];
                const float *xb = xs + b * tin;   /* step p of the padded input: xb[p - ctx] */
                if (st == 1) {
                    if (t1 > ts)
                        memcpy(crow + jj, xb + (ts + off - ctx_), (size_t)(t1 - ts) * sizeof *crow);
                    jj += (size_t)(t1 - ts);
                } else {
                    for (int t = ts; t < t1; t++)
                        crow[jj++] = xb[t * st + off - ctx_];
                }
            }
        }
    }
}

/* The direct kernel's reordered weights of cv, or NULL (not eligible) */
static const float *direct_weights(const mimi_batch *w, const mimi_conv *cv)
{
    const mimi_model *m = w->m;
    if (w->old_kern == 1 || (w->old_kern == 2 && cv->tr))
        return NULL;
    if (cv >= m->enc && cv < m->enc + m->n_enc)
        return w->wt[cv - m->enc];
    if (cv >= m->dec && cv < m->dec + m->n_dec)
        return w->wt[MIMI_MAX_CONVS + (cv - m->dec)];
    return NULL;
}

/* The direct convolution's items, few enough that claiming them (one at
 * a time, on a shared counter) costs nothing beside their work. */
enum { PAD_CH = 16, TILE_GROUPS = 4 };   /* channels a pad item; runs of tiles a session */

/* item (b, channel group): session b's channels, context and input, padded into w->col */
static void it_direct_pad(mimi_batch *w, const par_job *j, int it, int tid)
{
    const mimi_conv *cv = j->cv;
    const int ng = (cv->cin + PAD_CH - 1) / PAD_CH, lb = it / ng, b = (int)j->n0 + lb;
    const size_t per = mimi_direct_pad_floats(cv), Nin = (size_t)j->B * cv->tin;
    (void)tid;
    for (int ci = it % ng * PAD_CH; ci < cv->cin && ci < (it % ng + 1) * PAD_CH; ci++)
        mimi_direct_pad(cv, j->S[b]->x + cv->st + (size_t)ci * cv->ctx,
                        j->X + (size_t)ci * Nin + (size_t)b * cv->tin, w->col + lb * per + ci * (per / cv->cin));
}

/* the direct convolution's tile items of one session: channel blocks x
 * runs of step tiles; *per_run: tiles a run */
static int direct_items(const mimi_conv *cv, int *per_run)
{
    const int T = mimi_direct_t(cv), nt = (cv->tout + T - 1) / T;
    *per_run = (nt + TILE_GROUPS - 1) / TILE_GROUPS;
    return cv->cout / mimi_direct_co(cv) * ((nt + *per_run - 1) / *per_run);
}

/* item (b, channel block, run of step tiles) of the direct convolution */
static void it_direct_tile(mimi_batch *w, const par_job *j, int it, int tid)
{
    const mimi_conv *cv = j->cv;
    const int T = mimi_direct_t(cv), nt = (cv->tout + T - 1) / T, ncb = cv->cout / mimi_direct_co(cv);
    int per_run;
    const int nruns = direct_items(cv, &per_run) / ncb;
    const int lb = it / (ncb * nruns), b = (int)j->n0 + lb, cb = it / nruns % ncb, r = it % nruns;
    (void)tid;
    for (int t = r * per_run; t < nt && t < (r + 1) * per_run; t++)
        mimi_direct_tile(cv, j->wt, w->col + (size_t)lb * mimi_direct_pad_floats(cv), cb, t * T,
                         j->Y + (size_t)b * cv->tout, (size_t)j->B * cv->tout);
}

/* ---- the deepest layers on 8-bit copies (mimi_q8.c) ------------------------ */

/* cv's 8-bit copy where the batch has one and its product's cols columns
 * (sessions x steps) are within q8_rows, else NULL */
static const mimi_q8mat *conv_q8_mat(const mimi_batch *w, const mimi_conv *cv, size_t cols)
{
    return w->q8 && cols <= (size_t)w->q8_rows ? mimi_q8_conv(w->q8, cv) : NULL;
}

/* Item c of an 8-bit layer's chunk: input column n0 + c as row c of
 * w->q8x. A convolution's is its im2col column, (ci, kk) the padded input
 * at step t*stride + kk*dil of session b (the context below ctx); a
 * transposed one's the input channels at that step. */
static void it_q8_col(mimi_batch *w, const par_job *j, int c, int tid)
{
    const mimi_conv *cv = j->cv;
    const size_t n = j->n0 + (size_t)c;
    const int cin = cv->cin, k = cv->k, ctx = cv->ctx, tin = cv->tin;
    const size_t Nin = (size_t)j->B * tin;
    (void)tid;
    if (cv->tr) {
        float *row = w->q8x + (size_t)c * cin;
        for (int ci = 0; ci < cin; ci++)
            row[ci] = j->X[(size_t)ci * Nin + n];
        return;
    }
    const size_t b = n / (size_t)cv->tout;
    const int t = (int)(n % (size_t)cv->tout);
    const float *sb = j->S[b]->x + cv->st, *xb = j->X + b * tin;
    float *row = w->q8x + (size_t)c * cin * k;
    for (int ci = 0; ci < cin; ci++)
        for (int kk = 0; kk < k; kk++) {
            int p = t * cv->stride + kk * cv->dil;
            row[ci * k + kk] = p < ctx ? sb[(size_t)ci * ctx + p] : xb[(size_t)ci * Nin + p - ctx];
        }
}

/* Columns n0..n0+nc (nc <= Q8_COLS) of layer w->job.cv on its copy q8:
 * w->q8y [nc][rows] = the columns . the copy^T (rows: cout, or a
 * transposed layer's cout * k) */
static void q8_columns(mimi_batch *w, const mimi_q8mat *q8, size_t n0, int nc)
{
    const mimi_conv *cv = w->job.cv;
    const int rows = cv->tr ? cv->cout * cv->k : cv->cout, K = cv->tr ? cv->cin : cv->cin * cv->k;
    w->job.n0 = n0;
    par_run(w, it_q8_col, nc);
    q8_product(w, q8, nc, rows, K, w->q8x, w->q8y);
}

/* A convolution's Y [cout][N] (its bias in) += the product on its copy */
static void conv_q8(mimi_batch *w, const mimi_q8mat *q8, size_t N, float *Y)
{
    const int cout = w->job.cv->cout;
    for (size_t n0 = 0; n0 < N; n0 += Q8_COLS) {
        const int nc = N - n0 < Q8_COLS ? (int)(N - n0) : Q8_COLS;
        q8_columns(w, q8, n0, nc);
        for (int c = 0; c < nc; c++)
            for (int co = 0; co < cout; co++)
                Y[(size_t)co * N + n0 + c] += w->q8y[(size_t)c * cout + co];
    }
}

/* Y [cout][B*tout] = conv(state ++ X [cin][B*tin]); states updated. */
static void conv_fwd(const mimi_conv *cv, mimi_batch *w, mimi_state *const *S, int B,
                     const float *X, float *Y)
{
    const int cin = cv->cin, cout = cv->cout, k = cv->k, st = cv->stride;
    const int tin = cv->tin, tout = cv->tout, ctx = cv->ctx;
    const size_t Nin = (size_t)B * tin, N = (size_t)B * tout;
    if (cv->replicate && ctx > 0)
        for (int b = 0; b < B; b++)
            if (S[b]->down_first)
                for (int ci = 0; ci < cin; ci++)
                    for (int j = 0; j < ctx; j++)
                        S[b]->x[cv->st + (size_t)ci * ctx + j] = X[(size_t)ci * Nin + (size_t)b * tin];
    par_job *job = &w->job;
    job->cv = cv;
    job->S = S;
    job->B = B;
    job->X = X;
    job->Y = Y;
    job->wt = direct_weights(w, cv);
    if (job->wt) {   /* mimi_conv.c, the bias its own; as many sessions at a time as w->col holds */
        int G = (int)(w->col_floats / mimi_direct_pad_floats(cv));
        for (int b0 = 0; b0 < B; b0 += G) {
            int nb = B - b0 < G ? B - b0 : G;
            int per_run;
            job->n0 = (size_t)b0;
            par_run(w, it_direct_pad, nb * ((cin + PAD_CH - 1) / PAD_CH));
            par_run(w, it_direct_tile, nb * direct_items(cv, &per_run));
        }
    } else
        fill_bias(Y, cv->b, cout, N);
    const mimi_q8mat *q8 = job->wt ? NULL : conv_q8_mat(w, cv, N);
    if (job->wt) {
    } else if (q8) {
        conv_q8(w, q8, N, Y);
    } else if (cout == 1 && st == 1 && (size_t)ctx + 16 <= w->xrow_floats - ROW_TILE) {
        par_run(w, it_conv_row, B * ((tout + ROW_TILE - 1) / ROW_TILE));
    } else if (k == 1 && st == 1) {
        par_gemm(w, 0, 0, cout, (int)N, cin, cv->w, cin, X, (int)Nin, 1.0f, Y, (int)N);
    } else {
        const size_t rows = (size_t)cin * k;
        size_t chunk = w->col_floats / rows;
        if (chunk < 1)
            chunk = 1;
        for (size_t n0 = 0; n0 < N; n0 += chunk) {
            size_t nc = N - n0 < chunk ? N - n0 : chunk;
            job->n0 = n0;
            job->nc = nc;
            par_run(w, it_im2col, cin);
            par_gemm(w, 0, 0, cout, (int)nc, (int)rows, cv->w, (int)rows, w->col, (int)nc, 1.0f,
                     Y + n0, (int)N);
        }
    }
    if (ctx > 0)   /* the new left context: the last ctx steps of state ++ X */
        for (int b = 0; b < B; b++)
            for (int ci = 0; ci < cin; ci++) {
                float *sb = S[b]->x + cv->st + (size_t)ci * ctx;
                const float *xb = X + (size_t)ci * Nin + (size_t)b * tin;
                for (int j = 0; j < ctx; j++)
                    sb[j] = tin + j >= ctx ? xb[tin + j - ctx] : sb[tin + j];
            }
}

/* A transposed convolution's overlap-add of w->col's columns, output
 * channels split across the threads (mimi_tr_overlap_add) */
static void it_overlap_add(mimi_batch *w, const par_job *jb, int co, int tid)
{
    (void)tid;
    mimi_tr_overlap_add(jb->cv, jb->B, w->col, jb->n0, jb->nc, co, jb->Y, w->part);
}

/* mimi_convtr.c's items: trs row blocks; trd (session, channel group)
 * pads, (session, phase, tile) tiles, (session, channel) scatters; a
 * session's padded input then its phases' outputs in w->col */
static void it_trs(mimi_batch *w, const par_job *j, int rb, int tid)
{
    (void)tid;
    mimi_trs_block(j->cv, j->wt, j->X, (size_t)j->B * j->cv->tin, (int)j->nc, rb, w->col, j->nc);
}

static size_t trd_session_floats(const mimi_conv *cv)
{
    return mimi_trd_pad_floats(cv) + mimi_trd_out_floats(cv);
}

static void it_trd_pad(mimi_batch *w, const par_job *j, int it, int tid)
{
    const mimi_conv *cv = j->cv;
    const int ng = (cv->cin + PAD_CH - 1) / PAD_CH, lb = it / ng;
    const size_t per = mimi_trd_pad_floats(cv) / cv->cin, Nin = (size_t)j->B * cv->tin;
    (void)tid;
    for (int ci = it % ng * PAD_CH; ci < cv->cin && ci < (it % ng + 1) * PAD_CH; ci++)
        mimi_trd_pad(cv, j->X + (size_t)ci * Nin + (j->n0 + lb) * cv->tin,
                     w->col + lb * trd_session_floats(cv) + ci * per);
}

static void it_trd_tile(mimi_batch *w, const par_job *j, int it, int tid)
{
    const mimi_conv *cv = j->cv;
    const int nt = mimi_trd_phase_tiles(cv), lb = it / (nt * cv->stride);
    float *P = w->col + lb * trd_session_floats(cv);
    (void)tid;
    mimi_trd_tile(cv, j->wt, P, it / nt % cv->stride, it % nt, P + mimi_trd_pad_floats(cv),
                  w->part + (j->n0 + lb) * cv->cout * cv->ctx);
}

static void it_trd_scatter(mimi_batch *w, const par_job *j, int it, int tid)
{
    const mimi_conv *cv = j->cv;
    const int lb = it / cv->cout, co = it % cv->cout;
    const size_t b = j->n0 + lb;
    (void)tid;
    mimi_trd_scatter(cv, w->col + lb * trd_session_floats(cv) + mimi_trd_pad_floats(cv), co,
                     j->Y + (size_t)co * j->B * cv->tout + b * cv->tout);
}

/* Y [cout][B*tin*stride] = transposed conv of X [cin][B*tin], plus the
 * overlap pending from the last frame; the new overlap (without bias) kept. */
static void convtr_fwd(const mimi_conv *cv, mimi_batch *w, mimi_state *const *S, int B,
                       const float *X, float *Y)
{
    const int cin = cv->cin, cout = cv->cout, k = cv->k, st = cv->stride;
    const int tin = cv->tin, tout = cv->tout, ctx = cv->ctx;
    const size_t N = (size_t)B * tin, Nout = (size_t)B * tout;
    const float *wt = direct_weights(w, cv);
    float *part = w->part;   /* [B][cout][ctx] */
    memset(part, 0, (size_t)B * cout * ctx * sizeof(float));
    if (wt && cv->tin >= 16) {   /* mimi_convtr.c's phases, as many sessions as w->col holds */
        const int G = (int)(w->col_floats / trd_session_floats(cv));
        w->job = (par_job){ .cv = cv, .B = B, .X = X, .Y = Y, .wt = wt };
        for (int b0 = 0; b0 < B; b0 += G) {
            int nb = B - b0 < G ? B - b0 : G;
            w->job.n0 = (size_t)b0;
            par_run(w, it_trd_pad, nb * ((cin + PAD_CH - 1) / PAD_CH));
            par_run(w, it_trd_tile, nb * st * mimi_trd_phase_tiles(cv));
            par_run(w, it_trd_scatter, nb * cout);
        }
    } else if (cv->grouped) {
        fill_bias(Y, cv->b, cout, Nout);
        mimi_tr_grouped(cv, B, X, Y, part);
    } else {
        fill_bias(Y, cv->b, cout, Nout);
        const size_t rows = (size_t)cout * k;
        const mimi_q8mat *q8 = conv_q8_mat(w, cv, N);
        size_t chunk = w->col_floats / rows;
        if (q8 && chunk > Q8_COLS)
            chunk = Q8_COLS;
        if (chunk < 1)
            chunk = 1;
        for (size_t n0 = 0; n0 < N; n0 += chunk) {
            size_t nc = N - n0 < chunk ? N - n0 : chunk;
            w->job = (par_job){ .cv = cv, .B = B, .X = X + n0, .Y = Y, .n0 = n0, .nc = nc, .wt = wt };
            if (q8) {   /* the 8-bit copy's [nc][rows], made [rows][nc] */
                w->job.X = X;
                q8_columns(w, q8, n0, (int)nc);
                for (size_t r = 0; r < rows; r++)
                    for (size_t c = 0; c < nc; c++)
                        w->col[r * nc + c] = w->q8y[c * rows + r];
            } else if (wt && N <= (size_t)mimi_trs_max_cols())   /* mimi_convtr.c's product */
                par_run(w, it_trs, mimi_trs_blocks(cv));
            else   /* Z [cout*k][nc] = W^T (W is [cin][cout*k]) x X[:, n0..] */
                par_gemm(w, 1, 0, (int)rows, (int)nc, cin, cv->w, (int)rows, X + n0, (int)N, 0.0f,
                         w->col, (int)nc);
            w->job = (par_job){ .cv = cv, .B = B, .Y = Y, .n0 = n0, .nc = nc };
            par_run(w, it_overlap_add, cout);
        }
    }
    for (int b = 0; b < B; b++)
        for (int co = 0; co < cout; co++) {
            float *sb = S[b]->x + cv->st + (size_t)co * ctx;
            float *y = Y + (size_t)co * Nout + (size_t)b * tout;
            const float *pb = part + ((size_t)b * cout + co) * ctx;
            for (int j = 0; j < ctx; j++) {
                y[j] += sb[j];
                sb[j] = pb[j];
            }
        }
}

/* ---- transformer ---------------------------------------------------------- */

/* Inside the transformer the activations are token-major ([B*T][d], one
 * row a session's step): LayerNorm, rotary, the ring writes and attention
 * then read contiguous rows, and the projections are sgemm(NoTrans, Trans)
 * against the [out][in] weights (a few percent faster than the
 * channel-major product at 16 rows, in a test of the 8 layers' shapes). */

/* One session's attention, its T rows, heads h0..h1-1: out [T][d] (ld_out
 * apart) from its queries q [T] (ld_q apart) over its ring rk, rv [cap][d]
 * just written with positions pos0..pos0+T-1. Slot j holds the newest position
 * congruent to j; query position p sees positions max(0, p-cap+1,
 * last-cap+1) .. p (the older ones overwritten), taken in slot order. */
__attribute__((target_clones("arch=x86-64-v3", "default")))
static void attend(const float *q, size_t ld_q, const float *rk, const float *rv, float *out,
                   size_t ld_out, float *score, int T, int d, int H, int h0, int h1, int cap,
                   int64_t pos0)
{
    const int hd = d / H;
    const float isq = 1.0f / sqrtf((float)hd);
    const int64_t last = pos0 + T - 1;
    for (int t = 0; t < T; t++) {
        int64_t p = pos0 + t, lo = p - cap + 1;
        if (lo < last - cap + 1)
            lo = last - cap + 1;
        if (lo < 0)
            lo = 0;
        if (lo > p) {   /* more steps than the ring: this one's were overwritten */
            memset(out + (size_t)t * ld_out + (size_t)h0 * (d / H), 0,
                   (size_t)(h1 - h0) * (d / H) * sizeof *out);
            continue;
        }
        /* valid slots: [a0, a1) and [b0, b1), ascending */
        int a0, a1, b0 = 0, b1 = 0;
        if (p - lo + 1 >= cap) {
            a0 = 0;
            a1 = cap;
        } else {
            int slo = (int)(lo % cap), shi = (int)(p % cap);
            if (slo <= shi) {
                a0 = slo;
                a1 = shi + 1;
            } else {
                a0 = 0;
                a1 = shi + 1;
                b0 = slo;
                b1 = cap;
            }
        }
        const float *qr = q + (size_t)t * ld_q;
        float *orow = out + (size_t)t * ld_out;
        for (int h = h0; h < h1; h++) {
            const float *qh = qr + (size_t)h * hd;
            float mx = -INFINITY;
            for (int s = 0; s < 2; s++)
                for (int j = s ? b0 : a0; j < (s ? b1 : a1); j++) {
                    float sc = dot8(qh, rk + (size_t)j * d + (size_t)h * hd, hd) * isq;
                    score[j] = sc;
                    if (sc > mx)
                        mx = sc;
                }
            float den = 0;
            for (int s = 0; s < 2; s++)
                for (int j = s ? b0 : a0; j < (s ? b1 : a1); j++) {
                    float e = expf(score[j] - mx);
                    score[j] = e;
                    den += e;
                }
            float *oh = orow + (size_t)h * hd;
            memset(oh, 0, (size_t)hd * sizeof *oh);
            for (int s = 0; s < 2; s++)
                for (int j = s ? b0 : a0; j < (s ? b1 : a1); j++)
                    axpy8(oh, score[j] / den, rv + (size_t)j * d + (size_t)h * hd, hd);
        }
    }
}

/* Attention, work item (session, head), after the rings are written. */
static void it_attend(mimi_batch *w, const par_job *j, int it, int tid)
{
    const mimi_config *c = &w->m->c;
    const int d = c->d_model, H = c->num_heads, T = j->T;
    float *score = w->score + (size_t)tid * c->context;
    {
        int b = it / H, h = it % H;
        int64_t pos0 = j->dec ? j->S[b]->dec_pos : j->S[b]->enc_pos;
        attend(w->qkv + (size_t)b * T * 3 * d, (size_t)3 * d, j->S[b]->x + j->l->st_k,
               j->S[b]->x + j->l->st_v, w->att + (size_t)b * T * d, (size_t)d, score, T, d, H, h,
               h + 1, c->context, pos0);
    }
}

/* x [d][B*T] through the layers; session b's rows start at its position. */
static void transformer_fwd(const mimi_model *m, const mimi_tlayer *L, mimi_batch *w,
                            mimi_state *const *S, int B, int T, int dec, float *x)
{
    const mimi_config *c = &m->c;
    const int d = c->d_model, ff = c->dim_feedforward, H = c->num_heads, hd = d / H, cap = c->context;
    const size_t N = (size_t)B * T;
    float *xt = w->xt;   /* [N][d] */
    for (int i = 0; i < d; i++)
        for (size_t n = 0; n < N; n++)
            xt[n * d + i] = x[(size_t)i * N + n];
    for (int b = 0; b < B; b++) {
        int64_t pos0 = dec ? S[b]->dec_pos : S[b]->enc_pos;
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)b * T + t;
            mimi_rope_table(w->rcos + n * (hd / 2), w->rsin + n * (hd / 2), hd, pos0 + t, c->max_period);
        }
    }
    for (int li = 0; li < c->num_layers; li++) {
        const mimi_tlayer *l = &L[li];
        mimi_layer_norm(w->h, xt, l->n1w, l->n1b, d, N);
        /* qkv [N][3d]: row n = q, k, v of step n */
        tr_gemm(w, dec, li, MIMI_Q8_IN, (int)N, 3 * d, d, w->h, l->in_proj, w->qkv);
        for (int b = 0; b < B; b++) {
            int64_t pos0 = dec ? S[b]->dec_pos : S[b]->enc_pos;
            float *rk = S[b]->x + l->st_k, *rv = S[b]->x + l->st_v;
            for (int t = 0; t < T; t++) {
                size_t n = (size_t)b * T + t;
                float *qr = w->qkv + n * 3 * d;
                const float *cs = w->rcos + n * (hd / 2), *sn = w->rsin + n * (hd / 2);
                mimi_rope_row(qr, cs, sn, d, hd);
                mimi_rope_row(qr + d, cs, sn, d, hd);
                size_t slot = (size_t)((pos0 + t) % cap);
                memcpy(rk + slot * d, qr + d, (size_t)d * sizeof *rk);
                memcpy(rv + slot * d, qr + 2 * d, (size_t)d * sizeof *rv);
            }
        }
        w->job = (par_job){ .S = S, .B = B, .l = l, .T = T, .dec = dec };
        par_run(w, it_attend, B * H);
        tr_gemm(w, dec, li, MIMI_Q8_OUT, (int)N, d, d, w->att, l->out_proj, w->h);
        for (size_t n = 0; n < N; n++)
            for (int i = 0; i < d; i++)
                xt[n * d + i] += (l->ls1 ? l->ls1[i] : 1.0f) * w->h[n * d + i];
        mimi_layer_norm(w->h, xt, l->n2w, l->n2b, d, N);
        tr_gemm(w, dec, li, MIMI_Q8_L1, (int)N, ff, d, w->h, l->l1, w->ff);
        par_elt(w, 2, w->ff, NULL, (size_t)ff * N);
        tr_gemm(w, dec, li, MIMI_Q8_L2, (int)N, d, ff, w->ff, l->l2, w->h);
        for (size_t n = 0; n < N; n++)
            for (int i = 0; i < d; i++)
                xt[n * d + i] += (l->ls2 ? l->ls2[i] : 1.0f) * w->h[n * d + i];
    }
    for (int i = 0; i < d; i++)
        for (size_t n = 0; n < N; n++)
            x[(size_t)i * N + n] = xt[n * d + i];
    for (int b = 0; b < B; b++) {
        if (dec)
            S[b]->dec_pos += T;
        else
            S[b]->enc_pos += T;
    }
}

/* ---- the codec ---------------------------------------------------------------- */

static int check_call(const mimi_model *m, const mimi_batch *w, mimi_state *const *s, int B,
                      const void *in, const void *out, char *err, size_t errlen)
{
    if (!m || !w || !s || !in || !out) {
        mt_set_err(err, errlen, "mimi: NULL argument");
        return -1;
    }
    if (B < 1 || B > w->max_batch) {
        mt_set_err(err, errlen, "mimi: batch of %d sessions (workspace holds 1..%d)", B, w->max_batch);
        return -1;
    }
    for (int b = 0; b < B; b++)
        if (!s[b]) {
            mt_set_err(err, errlen, "mimi: session %d has no state", b);
            return -1;
        }
    return 0;
}

/* Codebook group g of every session: lat [dim][B] -> codes, the
 * distances to the centroids as one sgemm per codebook. */
static void quantize(const mimi_model *m, mimi_batch *w, mimi_rvq_span g, int B, const float *lat,
                     int32_t *codes)
{
    const mimi_config *c = &m->c;
    const mimi_rvq *q = g.q;
    const int qd = c->q_dimension, nq = c->n_q_used, code0 = g.code0, n = g.n;
    par_gemm(w, 0, 0, qd, B, c->dimension, q->in_proj, c->dimension, lat, B, 0.0f, w->r, B);
    for (int i = 0; i < n; i++) {
        const float *cb = q->cb[i], *n2 = q->norm2[i];
        par_gemm(w, 0, 0, c->bins, B, qd, cb, qd, w->r, B, 0.0f, w->sc, B);
        for (int b = 0; b < B; b++) {
            int best = 0;
            float bd = INFINITY;
            for (int e = 0; e < c->bins; e++) {
                float dist = n2[e] - 2.0f * w->sc[(size_t)e * B + b];
                if (dist < bd) {
                    bd = dist;
                    best = e;
                }
            }
            codes[(size_t)b * nq + code0 + i] = best;
            for (int e = 0; e < qd; e++)
                w->r[(size_t)e * B + b] -= cb[(size_t)best * qd + e];
        }
    }
}

/* Codebook group g: lat [dim][B] = (or with add, +=) the projection of the sum of every session's centroids. */
static void dequantize(const mimi_model *m, mimi_batch *w, mimi_rvq_span g, int add, int B,
                       const int32_t *codes, float *lat)
{
    const int qd = m->c.q_dimension, nq = m->c.n_q_used;
    memset(w->sum2, 0, (size_t)qd * B * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < g.n; i++) {
            const float *cv = g.q->cb[i] + (size_t)codes[(size_t)b * nq + g.code0 + i] * qd;
            for (int e = 0; e < qd; e++)
                w->sum2[(size_t)e * B + b] += cv[e];
        }
    par_gemm(w, 0, 0, m->c.dimension, B, qd, g.q->out_proj, qd, w->sum2, B, add ? 1.0f : 0.0f,
             lat, B);
}

/* One call's graph and its arguments (run_graph's). */
typedef struct graph_call {
    const mimi_model *m;
    const mimi_graph *g;
    mimi_batch *w;
    mimi_state *const *S;
    int B;
    const float *pcm_in;
    float *pcm_out;
    const int32_t *codes_in;
    int32_t *codes_out;
} graph_call;

static void run_graph_call(void *arg);

/* One frame of B sessions through graph g (encode or decode): pcm_in or
 * codes_in in, pcm_out or codes_out out; each op's time filed under its
 * stage. On the batch's threads (par_frame). */
static void run_graph(const mimi_model *m, const mimi_graph *g, mimi_batch *w,
                      mimi_state *const *S, int B, const float *pcm_in, float *pcm_out,
                      const int32_t *codes_in, int32_t *codes_out)
{
    graph_call gc = { m, g, w, S, B, pcm_in, pcm_out, codes_in, codes_out };
    par_frame(w, run_graph_call, &gc);
}

static void run_graph_call(void *arg)
{
    const graph_call *gc = arg;
    const mimi_model *m = gc->m;
    const mimi_graph *g = gc->g;
    mimi_batch *w = gc->w;
    mimi_state *const *S = gc->S;
    const int B = gc->B;
    const float *pcm_in = gc->pcm_in;
    float *pcm_out = gc->pcm_out;
    const int32_t *codes_in = gc->codes_in;
    int32_t *codes_out = gc->codes_out;
    float **A = w->act;
    for (int i = 0; i < MIMI_NSTAGES; i++)
        w->stage_s[i] = 0;
    for (int i = 0; i < g->n; i++) {
        const mimi_op *o = &g->op[i];
        const float *src = o->src == MIMI_BUF_IO ? pcm_in : A[o->src];
        float *dst = o->dst == MIMI_BUF_IO ? pcm_out : A[o->dst];
        double t0 = now_s(w);
        mimi_rvq_span rg = mimi_rvq_group(m, o->which);
        w->op_s[i] = 0;
        if ((o->kind == MIMI_OP_QUANTIZE || o->kind == MIMI_OP_DEQUANTIZE) && rg.n == 0)
            continue;   /* a group without codebooks */
        switch (o->kind) {
        case MIMI_OP_CONV:        conv_fwd(o->cv, w, S, B, src, dst); break;
        case MIMI_OP_CONVTR:      convtr_fwd(o->cv, w, S, B, src, dst); break;
        case MIMI_OP_ELU:         par_elt(w, 0, dst, src, o->n * B); break;
        case MIMI_OP_ADD:         par_elt(w, 1, dst, src, o->n * B); break;
        case MIMI_OP_TRANSFORMER:
            transformer_fwd(m, o->which ? m->dtr : m->etr, w, S, B, m->enc_steps, o->which, dst);
            break;
        case MIMI_OP_QUANTIZE:    quantize(m, w, rg, B, src, codes_out); break;
        case MIMI_OP_DEQUANTIZE:  dequantize(m, w, rg, o->which, B, codes_in, dst); break;
        }
        double dt = now_s(w) - t0;
        w->stage_s[o->stage] += dt;
        w->op_s[i] = dt;
    }
    w->op_n = g->n;
}

int mimi_encode(const mimi_model *m, mimi_batch *w, mimi_state *const *S, int B,
                const float *pcm, int32_t *codes, char *err, size_t errlen)
{
    if (check_call(m, w, S, B, pcm, codes, err, errlen) != 0)
        return -1;
    run_graph(m, &m->genc, w, S, B, pcm, NULL, NULL, codes);
    for (int b = 0; b < B; b++) {
        S[b]->down_first = 0;
        S[b]->enc_frames++;
    }
    return 0;
}

int mimi_decode(const mimi_model *m, mimi_batch *w, mimi_state *const *S, int B,
                const int32_t *codes, float *pcm, char *err, size_t errlen)
{
    if (check_call(m, w, S, B, codes, pcm, err, errlen) != 0)
        return -1;
    const mimi_config *c = &m->c;
    const int nq = c->n_q_used;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < nq; i++) {
            int32_t v = codes[(size_t)b * nq + i];
            if (v < 0 || v >= c->bins) {
                mt_set_err(err, errlen, "mimi: session %d codebook %d: code %d outside 0..%d", b, i,
                           (int)v, c->bins - 1);
                return -1;
            }
        }
    run_graph(m, &m->gdec, w, S, B, NULL, pcm, codes, NULL);
    for (int b = 0; b < B; b++)
        S[b]->dec_frames++;
    return 0;
}
