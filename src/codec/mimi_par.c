/* mimi_par.c: the codec's parallel phases on a batch's threads
 * (mimi_batch.h), and the work that runs on them for every layer: the
 * products (sgemm in tiles, mimi_skinny.c's few-vector product, the 8-bit
 * product of mimi_q8.c's copies) and the elementwise ops. mimi.c (the
 * batch, the transformers, the RVQ, the graph's walk) and mimi_seanet.c
 * (the convolutions) post their work through these; the split of every
 * product is the shape's alone (mimi.c's top comment says why). */
#include "codec/mimi_batch.h"

#include <cblas.h>
#include <sched.h>
#include <string.h>

#include "decode/cpu_q8.h"

/* ---- parallel phases (mimi.c's top comment: the threads) ---------------------------- */

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
void mimi_par_run(mimi_batch *w, par_item_fn fn, int nitems)
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
void mimi_par_frame(mimi_batch *w, void (*run)(void *arg), void *arg)
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
void mimi_par_gemm(mimi_batch *w, int ta, int tb, int M, int N, int K, const float *A, int lda,
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
            mimi_par_run(w, it_gemm, j->ntiles);
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
        mimi_par_run(w, it_gemm, j->ntiles);
}

/* Tile i of an 8-bit product: weight rows (output columns) i * tile on. */
static void it_q8(mimi_batch *w, const par_job *j, int i, int tid)
{
    (void)w, (void)tid;
    const gemm_job *g = &j->g;
    int lo = i * g->tile, hi = lo + g->tile < g->N ? lo + g->tile : g->N;
    mt_q8_gemm_rows(j->q8->layout, g->M, lo, hi, g->N, g->K, g->A, g->lda, j->q8->q, j->q8->s,
                    0.0f, g->C + lo, g->ldc);
    if (j->gelu)   /* the tile's outputs while in cache, a multiple of 8 a row */
        for (int m = 0; m < g->M; m++)
            mimi_gelu(g->C + (size_t)m * g->ldc + lo, (size_t)(hi - lo));
}

/* C [M][N] = A [M][K] . W [N][K]^T on W's 8-bit copy q8, in tiles of
 * whole 16-row lane groups (and so of 8-row groups: cpu_q8.h's layouts)
 * by weight rows, so no group is read by two tiles and each output's sum
 * is the same whatever tile or thread takes it (test_mimi: the bits on
 * 1, 2 and 3 threads). One tile a thread: the kernels stream a tile's
 * bytes with prefetches 32 KiB ahead, and 8 tiles of a matrix (32-128
 * KiB each for the transformers) left them and the RVQ search at B = 1
 * 13-18% slower than 2 (bench/RESULTS.md, 2026-12-07). Sets w->job's g, q8 and gelu
 * only. */
static void q8_product(mimi_batch *w, const mimi_q8mat *q8, int M, int N, int K, const float *A,
                       float *C, int gelu)
{
    gemm_job *g = &w->job.g;
    const int parts = w->pool.n < 1 ? 1 : w->pool.n > MAX_TILES ? MAX_TILES : w->pool.n;
    int tile = ((N + parts - 1) / parts + MT_Q8_LANE - 1) / MT_Q8_LANE * MT_Q8_LANE;
    *g = (gemm_job){ 0, 1, M, N, K, A, NULL, K, K, N, 0.0f, C, 0, tile, (N + tile - 1) / tile, 0 };
    w->job.q8 = q8;
    w->job.gelu = gelu;
    if (g->ntiles == 1)
        it_q8(w, &w->job, 0, 0);
    else
        mimi_par_run(w, it_q8, g->ntiles);
}

void mimi_q8_product(mimi_batch *w, const mimi_q8mat *q8, int M, int N, int K, const float *A,
                     float *C)
{
    q8_product(w, q8, M, N, K, A, C, 0);
}

/* GELU in the product's own phase: one pool phase a layer fewer, and the
 * outputs still in cache (a separate pass was 8 phases a transformer). */
void mimi_q8_product_gelu(mimi_batch *w, const mimi_q8mat *q8, int M, int N, int K,
                          const float *A, float *C)
{
    if (N % 8) {   /* a row's tail would take mimi_gelu's scalar path */
        q8_product(w, q8, M, N, K, A, C, 0);
        mimi_par_elt(w, 2, C, NULL, (size_t)M * N);
        return;
    }
    q8_product(w, q8, M, N, K, A, C, 1);
}

/* The elementwise ops, in ranges of ELT_CHUNK floats: dst = elu(src),
 * dst += src, or gelu(dst) in place. Each range is a multiple of 8 floats
 * but the last, so every element takes the same (vector or tail) path as
 * in one call over the whole (GELU's tail is scalar; ELU's goes through
 * the same lanes, whatever the range). */
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

void mimi_par_elt(mimi_batch *w, int kind, float *dst, const float *src, size_t n)
{
    w->job.kind = kind;
    w->job.Y = dst;
    w->job.X = src;
    w->job.n = n;
    mimi_par_run(w, it_elt, (int)((n + ELT_CHUNK - 1) / ELT_CHUNK));
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
void mimi_fill_bias(float *Y, const float *bias, int rows, size_t n)
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
