/* backend_cpu.c: the CPU backend: Llama step over a batch of sessions, fp32
 * arithmetic, K/V cache in fp32 or IEEE half, weights fp32 (plus an
 * optional half copy for small batches).
 *
 * One step advances R rows (one row = one session at one position; a
 * prefill is R rows of one session at consecutive positions). The whole
 * transformer reads top to bottom in run_rows():
 *
 *   x   = input adapter (audio_in . pcm/32768, or embed_tokens[id])
 *   for each layer:
 *     xn  = rmsnorm(x) * attn_norm
 *     qkv = xn . [wq|wk|wv]^T            one GEMM over the R rows
 *     rotary on q (and on k in absolute mode)
 *     att = softmax(q . K^T / sqrt(hd)) . V   per (row, kv heads)
 *     K,V of the new positions -> the cache
 *     x  += att . wo^T                   one GEMM
 *     xn  = rmsnorm(x) * mlp_norm
 *     h   = silu(xn . w_gate^T) * (xn . w_up^T)   one GEMM pair
 *     x  += h . w_down^T                 one GEMM
 *   out = rmsnorm(x) * norm -> lm_head (logits) or audio_out (pcm)
 *
 * HuggingFace Llama semantics: RMSNorm x*rsqrt(mean(x^2)+eps)*w, rotate-half
 * rotary with inv_freq[i] = theta^(-2i/hd), GQA (q head h uses kv head
 * h / (heads/kv_heads)), scale 1/sqrt(hd), SwiGLU.
 *
 * Threads. One pool of T threads (cpu_pool.c; the caller's thread is
 * thread 0) runs every parallel phase; OpenBLAS is set to one thread
 * (openblas_set_num_threads(1), process-wide) so its own workers never
 * compete with ours: two thread pools on the same cores oversubscribe, and
 * OpenBLAS's workers spin after each call. A GEMM phase splits the output
 * features into T column slices (multiples of 32) and each thread calls
 * cblas_sgemm on its slice of the weights (cblas_sgemv when R = 1), so
 * each projection is one batched product over the R rows with the weight
 * matrix read once per step. Attention is split by (row, kv heads) work
 * items, a whole row's kv heads at batch (fewer per item when rows are
 * few), handed out through an atomic counter (rows of different lengths
 * cost different amounts). An item makes one pass over its row's visible
 * positions in runs of up to MT_KV_BLOCK cache slots, each run's K rows
 * and then V rows of every head of the item read while they are in L1
 * (online softmax), the next run prefetched; its inner loops are 8-wide
 * vector code with an AVX2/FMA clone picked at load time (on an f16 cache
 * and an AVX-512 CPU, one fused kernel a run: mt_half_attend_run). The cache and
 * the f16 weights are on 2 MiB pages where the kernel allows (see
 * alloc_streamed in backend_cpu_setup.c, which creates the backend and its
 * weight copies; backend_cpu_int.h holds the state both files share).
 * The rmsnorms and rotary passes are cheap (R x hidden) and run on thread 0 between phases.
 * Where a layer's products are a few microseconds (small models, q8), a
 * step of several sessions instead runs by rows: each thread takes its
 * share of the rows through every layer in one phase (phase_rows, with
 * the reasons there), the same bits.
 *
 * Half precision (opts kv_dtype / weights, kernels in cpu_f16.c). An f16
 * cache stores each new K,V row rounded to half (round to nearest even)
 * and attention reads runs of up to MT_KV_BLOCK contiguous rows straight
 * from it, converting in registers and accumulating in fp32; the rows of
 * the running call still come from the fp32 qkv buffer. f16 weights are a
 * half copy of every matrix, made at creation; a GEMM phase of up to
 * f16_rows rows (the measured crossover) runs the f16 product on it, which
 * reads half the bytes of sgemv, and larger calls keep OpenBLAS's sgemm on
 * the fp32 matrices.
 *
 * 8-bit weights (--weights q8, kernels in cpu_q8.c): an 8-bit copy of
 * every matrix (32 bytes and one fp32 scale a block along K: 1.125 bytes a
 * weight), used for calls of up to f16_rows rows: every call where the
 * integer product serves (mt_q8_every_row: it leads sgemm at every batch
 * measured), else the small ones, like the f16 copy. It reads 0.56 of
 * f16's bytes. The float product turns the bytes into fp32 weights in
 * registers and multiplies in fp32 (its error the quantisation's alone, at
 * most scale/2 a weight); the integer one also rounds the activations
 * (cpu_q8_vnni.c states its bound).
 *
 * Cache layout: one contiguous allocation, layer-major, addressed by
 * block id within a layer,
 *   kv[layer][block][kv_head][k|v][MT_KV_BLOCK slots][head_dim]   fp32 or f16
 * so one (layer, block, kv head) is 16 contiguous key rows followed by
 * their 16 value rows, a block holds layers*2*kv_heads*16*head_dim
 * elements (16 * position_bytes) in `layers` pieces, and one layer of a
 * window session (its blocks consecutive ids) is one stretch (kv_at).
 * Keys are stored rotated by their absolute position, in every mode. In
 * window/cache mode (StreamingLLM) a score must see the rotary distance
 * between the query's and the key's indices in the kept cache; a rotary
 * score depends only on the difference of the two angles, so
 *   R(q_index) q . R(k_index) k  =  R(q_index + d) q . R(k_abs) k,
 *   d = k_abs - k_index,
 * and d takes two values: 0 for the sinks (positions 0..S-1 are their own
 * indices) and pos - q_index for the whole contiguous window. The query is
 * rotated at most twice per (row, kv head) instead of every key per step.
 *
 * Attention reads the positions that existed before this call from the
 * cache and the positions written by this call (the row itself, and in a
 * prefill the earlier rows) from the qkv buffer, and the new K,V go to the
 * cache only after every row has attended: in a window prefill a later row
 * may take the ring slot of a position an earlier row still sees.
 */
#include "util/errmsg.h"
#include "decode/backend_cpu_int.h"
#include "decode/cpu_f16.h"
#include "decode/cpu_q8.h"
#include "decode/cpu_pool.h"
#include "decode/cpu_silu.h"
#include "util/clock.h"
#include "util/vec8.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* The vector helpers below are static inline: no ABI crosses a call. */
#pragma GCC diagnostic ignored "-Wpsabi"

enum { SLICE_ALIGN = 32 };

/* A parallel phase of the step (cpu_pool.h). */
typedef mt_tpool_fn phase_fn;


/* ---- small kernels ------------------------------------------------------ */

/* Attention's inner loops use util/vec8.h's eight-float vectors (one AVX
 * register in the x86-64-v3 clone of attend(), chosen at load time by the
 * CPU; a helper left out of line would run the SSE version: seen in a
 * profile, wsum and softmax ran out of line, hence always inlined). */

/* out = x * rsqrt(mean(x^2) + eps) * w, one row of n. The squares
 * (exact in double) are summed in 8 running sums, then in a fixed tree:
 * one sum was a chain of n dependent adds, and the temporal alone ran
 * 5-10% faster without it (kyutai-small, B = 8 and 32). Both passes run
 * eight lanes at a time in the x86-64-v3 clone: scalar, the scaling pass
 * was three quarters of rmsnorm and rmsnorm 12% of that step (a store a
 * float, each waiting on the load before it). The lanes' order is the
 * scalar one (sum l takes elements l, l + 8, ...; (x * r) * w), so the
 * bits are the same in either clone and a row's do not depend on its
 * batch. */
#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    v4d lo = { 0 }, hi = { 0 };   /* sums 0-3 and 4-7 (one 8-wide vector spills) */
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f a, b;
        memcpy(&a, x + i, sizeof a);
        memcpy(&b, x + i + 4, sizeof b);
        v4d da = __builtin_convertvector(a, v4d), db = __builtin_convertvector(b, v4d);
        lo += da * da;
        hi += db * db;
    }
    double p[8];
    memcpy(p, &lo, sizeof lo);
    memcpy(p + 4, &hi, sizeof hi);
    for (; i < n; i++)
        p[i % 8] += (double)x[i] * x[i];
    double ss = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    const v8f r8 = splat8(r);
    for (i = 0; i + 8 <= n; i += 8)
        store8(out + i, load8(x + i) * r8 * load8(w + i));
    for (; i < n; i++)
        out[i] = x[i] * r * w[i];
}

/* Rotate-half rotary on one head vector of hd = 2*half, in place. */
VINLINE void rope_apply(float *v, const float *cs, const float *sn, int half)
{
    int i = 0;
    for (; i + 8 <= half; i += 8) {
        v8f a = load8(v + i), b = load8(v + i + half), c = load8(cs + i), s = load8(sn + i);
        store8(v + i, a * c - b * s);
        store8(v + i + half, b * c + a * s);
    }
    for (; i < half; i++) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
    }
}

void cpu_rope_table(const cpu_backend *be, int64_t pos, float *cs, float *sn)
{
    for (int i = 0; i < be->half; i++) {
        double a = (double)pos * be->inv_freq[i];
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
}

/* ---- phases (run on every thread) -------------------------------------- */

/* Columns [lo, hi) of n split in nt slices aligned to SLICE_ALIGN. */
static void slice(int n, int tid, int nt, int *lo, int *hi)
{
    int per = (n + nt - 1) / nt;
    per = (per + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
    *lo = tid * per < n ? tid * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* Y[:, lo:hi] (+)= X . W[lo:hi, :]^T over the call's rows. */
/* M: the rows multiplied, X's and Y's first; which product serves is
 * the call's (be->nrows rows), so a step by rows (cpu_row_split) takes
 * the product the whole call would. */
static void gemm_cols(const cpu_backend *be, int M, const float *X, int K, const float *W,
                      const uint16_t *W16, const q8mat *W8, int lo, int hi, float *Y, int ldy,
                      float beta)
{
    int N = hi - lo, small = be->nrows <= be->f16_rows;
    if (N <= 0)
        return;
    if (W8 && W8->q && small)
        mt_q8_gemm_rows(W8->layout, M, lo, hi, W8->n, K, X, K, W8->q, W8->s, beta, Y + lo, ldy);
    else if (W16 && small)
        mt_half_gemm(M, N, K, X, K, W16 + (size_t)lo * K, beta, Y + lo, ldy);
    else if (M == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W + (size_t)lo * K, K,
                    X, 1, beta, Y + lo, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X, K,
                    W + (size_t)lo * K, K, beta, Y + lo, ldy);
}

static void phase_gemm(cpu_backend *be, int tid, int nt)
{
    const struct gemm_job *j = &be->job;
    if (j->paired) {
        int lo, hi;
        slice(j->seg[0].N, tid, nt, &lo, &hi);
        for (int s = 0; s < j->nseg; s++)
            gemm_cols(be, be->nrows, j->X, j->K, j->seg[s].W, j->seg[s].W16, j->seg[s].W8, lo,
                      hi, j->seg[s].Y, j->seg[s].ldy, j->beta);
        /* SwiGLU on this thread's columns: gate = silu(gate) * up */
        for (int r = 0; r < be->nrows; r++) {
            float *g = be->gate + (size_t)r * be->c->ffn;
            const float *u = be->up + (size_t)r * be->c->ffn;
            mt_silu_mul(g + lo, u + lo, hi > lo ? (size_t)(hi - lo) : 0);
        }
        return;
    }
    int total = 0;
    for (int s = 0; s < j->nseg; s++)
        total += j->seg[s].N;
    int lo, hi;
    slice(total, tid, nt, &lo, &hi);
    int start = 0;
    for (int s = 0; s < j->nseg; s++) {
        int a = lo > start ? lo - start : 0;
        int b = hi - start < j->seg[s].N ? hi - start : j->seg[s].N;
        if (a < b)
            gemm_cols(be, be->nrows, j->X, j->K, j->seg[s].W, j->seg[s].W16, j->seg[s].W8, a,
                      b, j->seg[s].Y, j->seg[s].ldy, j->beta);
        start += j->seg[s].N;
    }
}

/* Splits the visible list into runs: positions from the cache that sit in
 * consecutive slots of one block (up to MT_KV_BLOCK contiguous rows of
 * each head) and share one rotary offset, and single positions written by
 * this call. Done once per work item; the K pass, the V pass and every
 * head of the item share the runs. Returns the number of runs. */
static int kv_runs(scratch *sc, const row *rw, int n)
{
    int nr = 0;
    for (int j = 0, len; j < n; j += len) {
        kv_run *u = &sc->run[nr++];
        u->j = j;
        u->d = sc->abs[j] - sc->rope[j];
        len = 1;
        if (sc->abs[j] >= rw->base) {
            u->block = -1;
            u->at = rw->first + (int)(sc->abs[j] - rw->base);
        } else {
            int64_t s0 = sc->slot[j];
            int room = MT_KV_BLOCK - (int)(s0 % MT_KV_BLOCK);
            while (len < room && j + len < n && sc->slot[j + len] == s0 + len &&
                   sc->abs[j + len] < rw->base && sc->abs[j + len] - sc->rope[j + len] == u->d)
                len++;
            u->block = rw->seq->blocks[s0 / MT_KV_BLOCK];
            u->at = (int)(s0 % MT_KV_BLOCK);
        }
        u->len = len;
    }
    return nr;
}

/* First K (kv = 0) or V (kv = 1) row of run u for kv head g: f32 in the
 * qkv buffer, f32 or f16 in the cache. */
static inline const void *run_at(const cpu_backend *be, int l, const kv_run *u, int kv, int g)
{
    if (u->block < 0)
        return be->qkv + (size_t)u->at * be->qkv_dim + be->q_dim + (size_t)kv * be->kv_dim +
               (size_t)g * be->hd;
    return (const char *)kv_at(be, u->block, l, kv, g) +
           (size_t)u->at * be->hd * be->kv_elem;
}

/* Asks for run u's rows of head g (K or V). The next run is the next
 * block of this layer: right after this one where the session's blocks
 * are consecutive (kv_at), elsewhere where they are not; either way the
 * hardware prefetcher alone does not keep up (bench/RESULTS.md). Asked
 * for in one burst per head just before that head of the current run is
 * read; asking 1 to 6 heads ahead, or to L2 a few runs ahead, does no
 * better. */
VINLINE void run_prefetch(const cpu_backend *be, int l, const kv_run *u, int kv, int g)
{
    if (u->block < 0)
        return;
    const char *p = run_at(be, l, u, kv, g);
    size_t bytes = (size_t)u->len * be->hd * be->kv_elem;
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
    __builtin_prefetch(p + bytes - 1);
}

/* fp32 rows (fp32 cache or this call's qkv buffer), one kv head's group
 * of q heads: score[i*lds + t] = scale * q_i . k_t for t < rows. */
VINLINE void scores_f32(int group, int hd, const float *q, const float *k, int rows,
                              float scale, float *score, int lds)
{
    for (int t = 0; t < rows; t++) {
        for (int i = 0; i < group; i++)
            score[(size_t)i * lds + t] = dot8(q + (size_t)i * hd, k + (size_t)t * hd, hd) * scale;
    }
}

/* out_i += sum_t p[i*ldp + t] v_t over fp32 rows: 32 columns at a time in
 * four accumulators held over all the rows (out read and written once per
 * run, not once per row). */
VINLINE void wsum_f32(int group, int hd, const float *p, int ldp, const float *v,
                            int rows, float *out)
{
    for (int i = 0; i < group; i++)
        wsum_rows(out + (size_t)i * hd, hd, p + (size_t)i * ldp, v, (size_t)hd, rows);
}

/* One run's scores of one q head folded into its running softmax (online
 * softmax): s[0..len) become e^(s - m) with m the reference maximum, and
 * when it moves the sum l and the output o so far are scaled by
 * e^(m_old - m_new). The reference moves only when a score passes it by
 * more than MT_SOFTMAX_SLACK (and on the first run, m = -inf): a score up to
 * e^SLACK = 3e3 times the reference's weight is far inside fp32's range
 * (260 such terms sum under 1e6), and the rescale with its expf is then
 * rare instead of once every few runs. The result o / l is the same
 * softmax; only the rounding's reference point differs.
 * len <= MT_KV_BLOCK; s has room for MT_KV_BLOCK. */
VINLINE void softmax_fold(float *s, int len, float *m, float *l, float *o, int hd)
{
    float mnew = -INFINITY;
    int t = 0;
    if (len >= 8) {
        v8f m8 = load8(s);
        for (t = 8; t + 8 <= len; t += 8) {
            v8f x = load8(s + t);
            v8i gt = x > m8;
            m8 = (v8f)(((v8i)x & gt) | ((v8i)m8 & ~gt));
        }
        for (int i = 0; i < 8; i++)
            mnew = m8[i] > mnew ? m8[i] : mnew;
    }
    for (; t < len; t++)
        mnew = s[t] > mnew ? s[t] : mnew;
    if (mnew > *m + MT_SOFTMAX_SLACK) {
        float f = expf(*m - mnew);          /* 0 on the first run (m = -inf) */
        *l *= f;
        v8f fv = splat8(f);
        int c = 0;
        for (; c + 8 <= hd; c += 8)
            store8(o + c, load8(o + c) * fv);
        for (; c < hd; c++)
            o[c] *= f;
        *m = mnew;
    }
    mnew = *m;
    v8f mv = splat8(mnew), sum8 = { 0 };
    for (t = 0; t + 8 <= len; t += 8) {
        v8f e = exp8(load8(s + t) - mv);
        store8(s + t, e);
        sum8 += e;
    }
    float sum = ((sum8[0] + sum8[4]) + (sum8[1] + sum8[5])) +
                ((sum8[2] + sum8[6]) + (sum8[3] + sum8[7]));
    if (t < len) {
        float tail[8] = { 0 };
        memcpy(tail, s + t, (size_t)(len - t) * sizeof *tail);
        v8f e = exp8(load8(tail) - mv);
        for (int i = 0; i < len - t; i++) {
            s[t + i] = e[i];
            sum += e[i];
        }
    }
    *l += sum;
}

/* Attention of one (row, kv heads g0..g1) item: those heads' groups of q
 * heads against the row's visible positions, in one pass over the runs
 * with an online softmax: each run's K rows and then its V rows of every
 * head of the item, while they are in L1. A head's K and V rows of a
 * block's layer lie together and the item's heads follow each other
 * (kv_at), so a run of the item is one contiguous stretch of
 * 2 * heads * 16 rows, and the next run (the next block) is asked for
 * while this one is computed. On an f16 cache the CPU's fused kernel
 * (mt_half_attend_run, AVX-512) does a run's scores, softmax fold and
 * weighted sum with the scores in a register; elsewhere the three steps
 * below run in turn. next_r: the row this thread most likely takes next
 * (-1: none known), whose first block is asked for during the last run. */
#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void attend(cpu_backend *be, scratch *sc, int l, int r, int g0, int g1, int next_r)
{
    const row *rw = &be->rows[r];
    const int hd = be->hd, group = be->group, nq = (g1 - g0) * group;
    if (sc->vis_call != be->call || sc->vis_row != r) {
        sc->vis_n = mt_kv_visible_ex(be->pool, rw->seq, rw->pos, sc->slot, sc->rope, sc->abs,
                                     sc->cap, &sc->vis_q_rope);
        sc->vis_nr = kv_runs(sc, rw, sc->vis_n);
        sc->vis_call = be->call;
        sc->vis_row = r;
    }
    const int64_t q_rope = sc->vis_q_rope;
    const int nr = sc->vis_nr;
    const float scale = 1.0f / sqrtf((float)hd);
    /* the item's q heads, rotated by q_rope before this phase */
    const float *qg = be->qkv + (size_t)r * be->qkv_dim + (size_t)g0 * group * hd;
    const float *qk = qg;       /* qg rotated by a further cur_d */
    int64_t cur_d = 0;
    float *out = be->att + (size_t)r * be->q_dim + (size_t)g0 * group * hd;
    float *mx = sc->ml, *sum = sc->ml + nq;
    float *p = sc->score;       /* [group, MT_KV_BLOCK] one head's run */
    memset(out, 0, (size_t)nq * hd * sizeof *out);
    for (int h = 0; h < nq; h++) {
        mx[h] = -INFINITY;
        sum[h] = 0.0f;
    }

    /* after the last run: the first block of the row this thread takes
     * next (its sinks, or the oldest of its window), asked for meanwhile */
    kv_run first;
    const kv_run *next_first = NULL;
    if (next_r >= 0 && be->rows[next_r].seq->nblocks > 0 && be->rows[next_r].base > 0) {
        first = (kv_run){ .block = be->rows[next_r].seq->blocks[0], .at = 0,
                          .len = MT_KV_BLOCK };
        next_first = &first;
    }
    for (int u = 0; u < nr; u++) {
        const kv_run *ru = &sc->run[u];
        const kv_run *ahead = u + 1 < nr ? &sc->run[u + 1] : next_first;
        if (be->cache_rope && ru->d != cur_d) {
            const float *cs = be->dcos + (size_t)r * be->half;
            const float *sn = be->dsin + (size_t)r * be->half;
            if (ru->d != rw->pos - q_rope) {
                cpu_rope_table(be, ru->d, sc->dcs, sc->dsn);
                cs = sc->dcs;
                sn = sc->dsn;
            }
            if (ru->d == 0) {
                qk = qg;
            } else {
                memcpy(sc->qd, qg, (size_t)nq * hd * sizeof *sc->qd);
                for (int i = 0; i < nq; i++)
                    rope_apply(sc->qd + (size_t)i * hd, cs, sn, be->half);
                qk = sc->qd;
            }
            cur_d = ru->d;
        }
        for (int g = g0; g < g1; g++) {
            if (ahead) {
                run_prefetch(be, l, ahead, 0, g);
                run_prefetch(be, l, ahead, 1, g);
            }
            const void *k = run_at(be, l, ru, 0, g), *v = run_at(be, l, ru, 1, g);
            const float *qh = qk + (size_t)(g - g0) * group * hd;
            float *og = out + (size_t)(g - g0) * group * hd;
            int f16 = be->kv_f16 && ru->block >= 0;
            if (f16 &&
                mt_half_attend_run(group, hd, qh, k, v, ru->len, scale, &mx[(g - g0) * group],
                                   &sum[(g - g0) * group], og) == 0)
                continue;
            if (f16)
                mt_half_scores(group, hd, qh, k, ru->len, scale, p, MT_KV_BLOCK);
            else
                scores_f32(group, hd, qh, k, ru->len, scale, p, MT_KV_BLOCK);
            for (int i = 0; i < group; i++) {
                int h = (g - g0) * group + i;
                softmax_fold(p + (size_t)i * MT_KV_BLOCK, ru->len, &mx[h], &sum[h],
                             out + (size_t)h * hd, hd);
            }
            if (f16)
                mt_half_weighted_sum(group, hd, p, MT_KV_BLOCK, v, ru->len, og);
            else
                wsum_f32(group, hd, p, MT_KV_BLOCK, v, ru->len, og);
        }
    }
    for (int h = 0; h < nq; h++) {
        v8f inv = splat8(1.0f / sum[h]);
        float *o = out + (size_t)h * hd;
        int c = 0;
        for (; c + 8 <= hd; c += 8)
            store8(o + c, load8(o + c) * inv);
        for (; c < hd; c++)
            o[c] *= inv[0];
    }
}

/* Work items are (row, a range of kv heads): a whole row's heads when
 * there are rows enough to keep every thread busy (its runs are then
 * contiguous over the heads, and its visible list is made once), fewer
 * heads per item at small batches. Each thread walks its own contiguous
 * share of the items through its own counter, then helps the others with
 * what is left of theirs: rows of different lengths cost different
 * amounts, so a fixed split alone could leave one thread waiting. Neither
 * thread interleaves its rows with the other's, so each reads its own
 * region of the pool (faster than one counter for all, which deals
 * alternate rows to the threads). */
/* The shares of a phase's items (phase_attention, phase_rows): items
 * 0..items-1 cut into nt contiguous shares, share v counted out by
 * be->att_next[v] (shares_reset before the phase). A thread walks its
 * own share, then takes what is left of the others' in turn. */
typedef struct share_walk {
    int items, tid, nt;
    int k;   /* shares walked through: own first */
} share_walk;

static void shares_reset(cpu_backend *be)
{
    for (int t = 0; t < be->tp.n; t++)
        atomic_store(&be->att_next[t].n, 0);
}

/* The walk's next item, or -1 when every share is taken; *hi: the end
 * of the item's share. */
static int share_next(cpu_backend *be, share_walk *w, int *hi)
{
    for (; w->k < w->nt; w->k++) {
        int v = (w->tid + w->k) % w->nt, lo = w->items * v / w->nt;
        int it = lo + atomic_fetch_add(&be->att_next[v].n, 1);
        *hi = w->items * (v + 1) / w->nt;
        if (it < *hi)
            return it;
    }
    return -1;
}

static void phase_attention(cpu_backend *be, int tid, int nt)
{
    scratch *sc = &be->scr[tid];
    const int chunks = be->att_chunks, per = be->c->kv_heads / chunks;
    share_walk w = { be->nrows * chunks, tid, nt, 0 };
    for (int it, hi; (it = share_next(be, &w, &hi)) >= 0;) {
        int g0 = it % chunks * per;
        /* whole rows: the next item here is most likely the next row */
        attend(be, sc, be->layer, it / chunks, g0, g0 + per,
               chunks == 1 && it + 1 < hi ? it + 1 : -1);
    }
}

/* Row r's new K,V of kv head g in layer l to the cache. */
static void store_kv(cpu_backend *be, int l, int r, int g)
{
    const int hd = be->hd;
    const row *rw = &be->rows[r];
    int64_t s = mt_kv_slot(be->pool, rw->seq, rw->pos);
    int32_t b = rw->seq->blocks[s / MT_KV_BLOCK];
    size_t o = (size_t)(s % MT_KV_BLOCK) * hd;
    const float *k = be->qkv + (size_t)r * be->qkv_dim + be->q_dim + (size_t)g * hd;
    if (be->kv_f16) {
        mt_half_pack((uint16_t *)kv_at(be, b, l, 0, g) + o, k, (size_t)hd);
        mt_half_pack((uint16_t *)kv_at(be, b, l, 1, g) + o, k + be->kv_dim, (size_t)hd);
    } else {
        memcpy((float *)kv_at(be, b, l, 0, g) + o, k, (size_t)hd * sizeof(float));
        memcpy((float *)kv_at(be, b, l, 1, g) + o, k + be->kv_dim, (size_t)hd * sizeof(float));
    }
}

/* The new K,V rows to the cache (kv heads split over threads, rows in
 * order so the newest position wins a shared ring slot), then
 * x += att . wo^T on this thread's columns. */
static void phase_store_and_oproj(cpu_backend *be, int tid, int nt)
{
    for (int g = tid; g < be->c->kv_heads; g += nt)
        for (int r = 0; r < be->nrows; r++)
            store_kv(be, be->layer, r, g);
    phase_gemm(be, tid, nt);
}

/* ---- the transformer over the call's rows ------------------------------- */

static void set_job(cpu_backend *be, const float *X, int K, float beta, int paired)
{
    be->job.nseg = 0;
    be->job.X = X;
    be->job.K = K;
    be->job.beta = beta;
    be->job.paired = paired;
}

static void add_seg(cpu_backend *be, const float *W, const uint16_t *W16, const q8mat *W8, int N,
                    float *Y, int ldy)
{
    int s = be->job.nseg++;
    be->job.seg[s].W = W;
    be->job.seg[s].W16 = W16;
    be->job.seg[s].W8 = W8;
    be->job.seg[s].N = N;
    be->job.seg[s].Y = Y;
    be->job.seg[s].ldy = ldy;
}

/* Runs the job set up by set_job/add_seg as phase fn (phase_gemm, or
 * phase_store_and_oproj, which ends in it). norm_w: the job's X is
 * rmsnorm(x) * norm_w (the caller passes be->xn as X), made here on
 * thread 0 first (R x hidden: cheap beside the product). */
static void run_gemm(cpu_backend *be, phase_fn fn, const float *norm_w)
{
    const int H = be->c->hidden;
    if (norm_w)
        for (int r = 0; r < be->nrows; r++)
            rmsnorm(be->xn + (size_t)r * H, be->x + (size_t)r * H, norm_w, H, be->c->eps);
    mt_tpool_run(&be->tp, be, fn);
}

static int ensure_scratch(cpu_backend *be, int need, char *err, size_t errlen)
{
    for (int t = 0; t < be->tp.n; t++) {
        scratch *sc = &be->scr[t];
        if (sc->cap >= need)
            continue;
        int cap = sc->cap ? sc->cap : 64;
        while (cap < need)
            cap *= 2;
        int64_t *a = realloc(sc->slot, (size_t)cap * sizeof *a);
        if (a) sc->slot = a;
        int64_t *b = realloc(sc->rope, (size_t)cap * sizeof *b);
        if (b) sc->rope = b;
        int64_t *p = realloc(sc->abs, (size_t)cap * sizeof *p);
        if (p) sc->abs = p;
        kv_run *u = realloc(sc->run, (size_t)cap * sizeof *u);
        if (u) sc->run = u;
        float *s = realloc(sc->score, (size_t)cap * be->c->heads * sizeof *s);
        if (s) sc->score = s;
        if (!sc->qd)
            sc->qd = malloc((size_t)be->c->heads * be->hd * sizeof *sc->qd);
        if (!sc->ml)
            sc->ml = malloc((size_t)2 * be->c->heads * sizeof *sc->ml);
        if (!sc->dcs)
            sc->dcs = malloc((size_t)be->half * sizeof *sc->dcs);
        if (!sc->dsn)
            sc->dsn = malloc((size_t)be->half * sizeof *sc->dsn);
        if (!a || !b || !p || !u || !s || !sc->qd || !sc->ml || !sc->dcs || !sc->dsn) {
            mt_set_err(err, errlen, "cpu: out of memory for attention over %d positions",
                     need);
            return -1;
        }
        sc->cap = cap;
    }
    return 0;
}

/* One row's q|k|v [q_dim + 2 kv_dim] after the projections: += the q, k, v
 * biases (when the layer has them), then each q and k head RMSNorm'd over
 * its head_dim with q_norm / k_norm (when it has them). */
static void qwen_bias_norm(const cpu_backend *be, const mt_layer_weights *w, float *qkv)
{
    const int hd = be->hd;
    if (w->bq) {
        for (int i = 0; i < be->q_dim; i++)
            qkv[i] += w->bq[i];
        for (int i = 0; i < be->kv_dim; i++) {
            qkv[be->q_dim + i] += w->bk[i];
            qkv[be->q_dim + be->kv_dim + i] += w->bv[i];
        }
    }
    if (w->q_norm) {
        for (int h = 0; h < be->c->heads; h++)
            rmsnorm(qkv + (size_t)h * hd, qkv + (size_t)h * hd, w->q_norm, hd, be->c->eps);
        for (int g = 0; g < be->c->kv_heads; g++)
            rmsnorm(qkv + be->q_dim + (size_t)g * hd, qkv + be->q_dim + (size_t)g * hd,
                    w->k_norm, hd, be->c->eps);
    }
}

/* The attention scratch for the longest visible list of this call, and
 * how the attention is cut into items for the threads. 0, or -1 with err. */
static int prepare_call(cpu_backend *be, char *err, size_t errlen)
{
    const mt_config *c = be->c;
    const int R = be->nrows;
    int64_t need = 1;
    for (int r = 0; r < R; r++) {
        int64_t v = mt_kv_visible_count(be->pool, be->rows[r].pos);
        need = v > need ? v : need;
    }
    if (need > (1 << 30)) {
        mt_set_err(err, errlen, "cpu: %lld visible positions is too many", (long long)need);
        return -1;
    }
    if (ensure_scratch(be, (int)need, err, errlen))
        return -1;
    be->call++;         /* the scratch's visible lists are of an earlier call */
    be->att_ns = 0;
    /* attention items: whole rows when there are 4 per thread, else the
     * kv heads split (in a divisor of kv_heads) until there are */
    be->att_chunks = 1;
    while (be->tp.n > 1 && be->att_chunks < c->kv_heads && R * be->att_chunks < 4 * be->tp.n)
        do
            be->att_chunks++;
        while (c->kv_heads % be->att_chunks);
    return 0;
}

/* x [R, hidden]: the input adapter on the PCM, the token embeddings, or
 * the caller's vectors. */
static void embed_rows(cpu_backend *be, const mt_step_io *io)
{
    const mt_model *m = be->m;
    const int R = be->nrows, H = be->c->hidden, fs = be->c->frame_samples;
    if (io->x_in) {
        memcpy(be->x, io->x_in, (size_t)R * H * sizeof(float));
    } else if (io->tokens_in) {
        for (int r = 0; r < R; r++)
            memcpy(be->x + (size_t)r * H, m->embed + (size_t)io->tokens_in[r] * H,
                   (size_t)H * sizeof(float));
    } else {
        for (size_t i = 0; i < (size_t)R * fs; i++)
            be->pcmf[i] = io->pcm_in[i] / 32768.0f;
        set_job(be, be->pcmf, fs, 0.0f, 0);
        add_seg(be, m->audio_in, be->audio_in16, be->w8 ? &be->audio_in8 : NULL, H, be->x, H);
        run_gemm(be, phase_gemm, NULL);
    }
}

/* The rotary tables of each row: keys at the absolute position (the
 * input's when it gives one), and the query at its rotary position
 * (cache index in cache mode). */
static void rope_rows(cpu_backend *be)
{
    const int half = be->half;
    for (int r = 0; r < be->nrows; r++) {
        cpu_rope_table(be, be->rows[r].rpos, be->rcos + (size_t)r * half,
                   be->rsin + (size_t)r * half);
        if (be->cache_rope) {
            int64_t qi = mt_kv_visible_count(be->pool, be->rows[r].pos) - 1;
            memcpy(be->qcos + (size_t)r * half, be->ccos + (size_t)qi * half,
                   (size_t)half * sizeof(float));
            memcpy(be->qsin + (size_t)r * half, be->csin + (size_t)qi * half,
                   (size_t)half * sizeof(float));
            cpu_rope_table(be, be->rows[r].pos - qi, be->dcos + (size_t)r * half,
                       be->dsin + (size_t)r * half);
        } else {
            memcpy(be->qcos + (size_t)r * half, be->rcos + (size_t)r * half,
                   (size_t)half * sizeof(float));
            memcpy(be->qsin + (size_t)r * half, be->rsin + (size_t)r * half,
                   (size_t)half * sizeof(float));
        }
    }
}

/* Row r's q|k|v after the projections: the q/k/v biases (Qwen2) and each
 * q and k head's RMSNorm (Qwen3), then the rotary: every q head by the
 * query's position (its cache index in cache mode), k heads by the
 * absolute position. */
static void rope_row(cpu_backend *be, const mt_layer_weights *w, int r)
{
    const int hd = be->hd, half = be->half;
    float *q = be->qkv + (size_t)r * be->qkv_dim;
    if (w->bq || w->q_norm)
        qwen_bias_norm(be, w, q);
    for (int h = 0; h < be->c->heads; h++)
        rope_apply(q + (size_t)h * hd, be->qcos + (size_t)r * half, be->qsin + (size_t)r * half,
                   half);
    for (int g = 0; g < be->c->kv_heads; g++)
        rope_apply(q + be->q_dim + (size_t)g * hd, be->rcos + (size_t)r * half,
                   be->rsin + (size_t)r * half, half);
}

/* Layer l on x [R, hidden]: attention (its K, V into the cache) and MLP,
 * each added to x. */
static void run_layer(cpu_backend *be, int l)
{
    const mt_config *c = be->c;
    const int R = be->nrows, H = c->hidden;
    const mt_layer_weights *w = &be->m->layer[l];
    const layer16 *w16 = be->w16 ? &be->w16[l] : NULL;
    const layer8 *w8 = be->w8 ? &be->w8[l] : NULL;
    be->layer = l;

    /* xn = rmsnorm(x) * attn_norm;
     * qkv [R, q_dim + 2 kv_dim] = xn . [wq|wk|wv]^T */
    set_job(be, be->xn, H, 0.0f, 0);
    add_seg(be, w->wq, w16 ? w16->wq : NULL, w8 ? &w8->wq : NULL, be->q_dim, be->qkv, be->qkv_dim);
    add_seg(be, w->wk, w16 ? w16->wk : NULL, w8 ? &w8->wk : NULL, be->kv_dim, be->qkv + be->q_dim,
            be->qkv_dim);
    add_seg(be, w->wv, w16 ? w16->wv : NULL, w8 ? &w8->wv : NULL, be->kv_dim,
            be->qkv + be->q_dim + be->kv_dim, be->qkv_dim);
    run_gemm(be, phase_gemm, w->attn_norm);

    for (int r = 0; r < R; r++)
        rope_row(be, w, r);

    /* att [R, q_dim] = softmax(q K^T / sqrt(hd)) V per (row, kv heads) */
    shares_reset(be);
    uint64_t t_att = mt_clock_ns();
    mt_tpool_run(&be->tp, be, phase_attention);
    be->att_ns += mt_clock_ns() - t_att;

    /* cache <- new K,V; x += att . wo^T */
    set_job(be, be->att, be->q_dim, 1.0f, 0);
    add_seg(be, w->wo, w16 ? w16->wo : NULL, w8 ? &w8->wo : NULL, H, be->x, H);
    run_gemm(be, phase_store_and_oproj, NULL);

    /* xn = rmsnorm(x) * mlp_norm; gate = silu(xn wg^T) * (xn wu^T) */
    set_job(be, be->xn, H, 0.0f, 1);
    add_seg(be, w->w_gate, w16 ? w16->w_gate : NULL, w8 ? &w8->w_gate : NULL, c->ffn, be->gate,
            c->ffn);
    add_seg(be, w->w_up, w16 ? w16->w_up : NULL, w8 ? &w8->w_up : NULL, c->ffn, be->up, c->ffn);
    run_gemm(be, phase_gemm, w->mlp_norm);

    /* x += gate . w_down^T */
    set_job(be, be->gate, c->ffn, 1.0f, 0);
    add_seg(be, w->w_down, w16 ? w16->w_down : NULL, w8 ? &w8->w_down : NULL, H, be->x, H);
    run_gemm(be, phase_gemm, NULL);
}

/* out = rmsnorm(x) * norm, then the output head(s) on it: the hidden
 * states, the logits, the PCM (or the input passed through). */
static void run_heads(cpu_backend *be, const mt_step_io *io)
{
    const mt_model *m = be->m;
    const mt_config *c = be->c;
    const int R = be->nrows, H = c->hidden, fs = c->frame_samples;
    const int want_logits = io->logits && m->lm_head;
    const int want_pcm = io->pcm_out && m->audio_out && !c->audio_passthrough;
    if (io->h_out)
        for (int r = 0; r < R; r++)
            rmsnorm(io->h_out + (size_t)r * H, be->x + (size_t)r * H, m->norm, H, c->eps);
    if (want_logits) {
        /* logits [R, vocab] = xn . lm_head^T */
        set_job(be, be->xn, H, 0.0f, 0);
        add_seg(be, m->lm_head, be->lm_head16, be->w8 ? &be->lm_head8 : NULL, c->vocab, io->logits,
                c->vocab);
        run_gemm(be, phase_gemm, m->norm);
    }
    if (io->pcm_out && c->audio_passthrough && io->pcm_in) {
        memcpy(io->pcm_out, io->pcm_in, (size_t)R * c->frame_samples * sizeof(int16_t));
    } else if (want_pcm) {
        /* pcm [R, frame_samples] = clamp(xn . audio_out^T) * 32767 */
        set_job(be, be->xn, H, 0.0f, 0);
        add_seg(be, m->audio_out, be->audio_out16, be->w8 ? &be->audio_out8 : NULL, fs, be->pcmf,
                fs);
        run_gemm(be, phase_gemm, m->norm);
        for (size_t i = 0; i < (size_t)R * fs; i++) {
            float y = be->pcmf[i];
            y = y > 1.0f ? 1.0f : (y < -1.0f ? -1.0f : y);
            io->pcm_out[i] = (int16_t)lrintf(y * 32767.0f);
        }
    }
}

/* ---- a step by rows, for small products -------------------------------
 *
 * A layer above is five pool phases (q|k|v, attention, o, gate|up, down),
 * each split by columns, every thread waiting for the others between
 * them: 31 barriers a step for 6 layers and the head. Where the products
 * are a few microseconds each (kyutai-small's 256-wide layers), those
 * waits, and a thread descheduled on a shared machine holding up the
 * other at each of them, are most of the step. A step's rows are
 * separate sessions, whose layers depend on nothing of another row's, so
 * there each thread can take chunks of rows through every layer and the
 * head in one phase: no barrier but the step's end. Every weight is then
 * read once a chunk (phase_rows: a chunk a thread or more) rather than
 * once a step: worth it where a layer's weights are small and stay in
 * cache, not for a 2048-wide model, whose step streams them once from
 * memory. The bits are those of the step by columns: the integer q8
 * product gives a row the same bits in any call and any column range
 * (test_q8; test_decoder compares the two ways), attention is per (row,
 * head) either way, and only that product serves (use_row_split). */

/* A layer's weights at most this many for a step by rows: kyutai-small's
 * 0.79 M (q8: 0.9 MB, its 6 layers and head 6 MB) are in; a 512-wide
 * layer (3.1 M) and the 2048-wide models are not. */
enum { ROW_SPLIT_MAX_WEIGHTS = 2 << 20 };

/* Y[r0:r1, 0:N] (+)= X[r0:r1, :] . W^T: the call's product on rows r0..r1. */
static void gemm_rows(const cpu_backend *be, const float *X, int K, const float *W,
                      const uint16_t *W16, const q8mat *W8, int N, float *Y, int ldy,
                      float beta, int r0, int r1)
{
    gemm_cols(be, r1 - r0, X + (size_t)r0 * K, K, W, W16, W8, 0, N, Y + (size_t)r0 * ldy, ldy,
              beta);
}

static void norm_rows(cpu_backend *be, float *out, const float *w, int r0, int r1)
{
    const int H = be->c->hidden;
    for (int r = r0; r < r1; r++)
        rmsnorm(out + (size_t)r * H, be->x + (size_t)r * H, w, H, be->c->eps);
}

/* Layer l on rows r0..r1 of x: run_layer's work, the same order; returns
 * the attention's wall time. */
static uint64_t layer_rows(cpu_backend *be, scratch *sc, int l, int r0, int r1)
{
    const mt_config *c = be->c;
    const int H = c->hidden;
    const mt_layer_weights *w = &be->m->layer[l];
    const layer16 *w16 = be->w16 ? &be->w16[l] : NULL;
    const layer8 *w8 = &be->w8[l];
    norm_rows(be, be->xn, w->attn_norm, r0, r1);
    gemm_rows(be, be->xn, H, w->wq, w16 ? w16->wq : NULL, &w8->wq, be->q_dim, be->qkv,
              be->qkv_dim, 0.0f, r0, r1);
    gemm_rows(be, be->xn, H, w->wk, w16 ? w16->wk : NULL, &w8->wk, be->kv_dim,
              be->qkv + be->q_dim, be->qkv_dim, 0.0f, r0, r1);
    gemm_rows(be, be->xn, H, w->wv, w16 ? w16->wv : NULL, &w8->wv, be->kv_dim,
              be->qkv + be->q_dim + be->kv_dim, be->qkv_dim, 0.0f, r0, r1);
    for (int r = r0; r < r1; r++)
        rope_row(be, w, r);
    uint64_t t_att = mt_clock_ns();
    for (int r = r0; r < r1; r++)
        attend(be, sc, l, r, 0, c->kv_heads, r + 1 < r1 ? r + 1 : -1);
    t_att = mt_clock_ns() - t_att;
    for (int r = r0; r < r1; r++)
        for (int g = 0; g < c->kv_heads; g++)
            store_kv(be, l, r, g);
    gemm_rows(be, be->att, be->q_dim, w->wo, w16 ? w16->wo : NULL, &w8->wo, H, be->x, H, 1.0f,
              r0, r1);
    norm_rows(be, be->xn, w->mlp_norm, r0, r1);
    gemm_rows(be, be->xn, H, w->w_gate, w16 ? w16->w_gate : NULL, &w8->w_gate, c->ffn, be->gate,
              c->ffn, 0.0f, r0, r1);
    gemm_rows(be, be->xn, H, w->w_up, w16 ? w16->w_up : NULL, &w8->w_up, c->ffn, be->up, c->ffn,
              0.0f, r0, r1);
    for (int r = r0; r < r1; r++)
        mt_silu_mul(be->gate + (size_t)r * c->ffn, be->up + (size_t)r * c->ffn, (size_t)c->ffn);
    gemm_rows(be, be->gate, c->ffn, w->w_down, w16 ? w16->w_down : NULL, &w8->w_down, H, be->x,
              H, 1.0f, r0, r1);
    return t_att;
}

/* Rows r0..r1 through every layer and the text head; returns the
 * attention's wall time. */
static uint64_t rows_through(cpu_backend *be, scratch *sc, int r0, int r1)
{
    const mt_step_io *io = be->split_io;
    const int H = be->c->hidden;
    uint64_t att = 0;
    for (int l = 0; l < be->c->layers; l++)
        att += layer_rows(be, sc, l, r0, r1);
    if (io->h_out)
        for (int r = r0; r < r1; r++)
            rmsnorm(io->h_out + (size_t)r * H, be->x + (size_t)r * H, be->m->norm, H,
                    be->c->eps);
    if (io->logits && be->m->lm_head) {
        norm_rows(be, be->xn, be->m->norm, r0, r1);
        gemm_rows(be, be->xn, H, be->m->lm_head, be->lm_head16, &be->lm_head8, be->c->vocab,
                  io->logits, be->c->vocab, 0.0f, r0, r1);
    }
    return att;
}

/* The step's only phase: the rows in chunks (ROW_CHUNK_MAX rows at most,
 * one a thread at least), each thread walking its contiguous share of
 * them through its own counter and then taking what is left of the
 * others' (phase_attention's way): a thread that starts late, its core
 * held by another process, finds its share done by the one that ran,
 * rather than the step waiting for it. A chunk is multiplied together
 * (a product's weights read once for its rows: 1 row at a time costs
 * 1.8 times a row of 8, bench/RESULTS.md); up to 16 rows the integer
 * product reads them once a call (cpu_q8_vnni.c's ROW_GROUP). Until
 * 2026-12-07 two chunks a thread of up to 8: at 8 rows each thread read
 * the weights twice, and the step was 20% slower (0.46-0.57 against
 * 0.36-0.42 ms, alternated; the same from 32 rows on). */
enum { ROW_CHUNK_MAX = 16 };

static void phase_rows(cpu_backend *be, int tid, int nt)
{
    const int R = be->nrows;
    int chunk = R / nt;
    chunk = chunk < 1 ? 1 : chunk > ROW_CHUNK_MAX ? ROW_CHUNK_MAX : chunk;
    share_walk w = { (R + chunk - 1) / chunk, tid, nt, 0 };
    uint64_t att = 0;
    for (int it, hi; (it = share_next(be, &w, &hi)) >= 0;) {
        int r1 = (it + 1) * chunk < R ? (it + 1) * chunk : R;
        att += rows_through(be, &be->scr[tid], it * chunk, r1);
    }
    if (tid == 0)
        be->att_ns = att;   /* thread 0's, its rows' (the other's overlap it) */
}

/* Whether this call steps by rows: the layers' products small
 * (ROW_SPLIT_MAX_WEIGHTS, or MT_CPU_ROW_SPLIT=1), several threads (one
 * runs the step by columns inline: the same work), one row a session (a
 * step, not a prefill: a prefill's rows see each other's K,V; the
 * decoder refuses a session twice in a step), the integer q8 product on
 * every matrix (the only product whose bits do not depend on the rows in
 * a call), and no PCM out (the audio head stays on run_heads). */
static int use_row_split(const cpu_backend *be, const mt_step_io *io)
{
    if (!be->row_split || be->tp.n < 2 || !be->w8 || !be->all_q8 ||
        !mt_q8_every_row() || be->nrows > be->f16_rows || io->pcm_out)
        return 0;
    for (int r = 0; r < be->nrows; r++)
        if (be->rows[r].first != r || be->rows[r].pos != be->rows[r].base)
            return 0;
    return 1;
}

void cpu_row_split_init(cpu_backend *be)
{
    const mt_config *c = be->c;
    int64_t per_layer = (int64_t)c->hidden * (be->q_dim + 2 * be->kv_dim) +
                        (int64_t)be->q_dim * c->hidden + 3 * (int64_t)c->hidden * c->ffn;
    const char *e = getenv("MT_CPU_ROW_SPLIT");
    be->row_split = e && *e ? atoi(e) != 0 : per_layer <= ROW_SPLIT_MAX_WEIGHTS;
}

/* Runs be->rows[0..nrows) through the model; inputs and outputs are row
 * arrays of nrows (outputs may be NULL). */
static int run_rows(cpu_backend *be, const mt_step_io *io, char *err, size_t errlen)
{
    if (prepare_call(be, err, errlen) != 0)
        return -1;
    embed_rows(be, io);
    rope_rows(be);
    if (use_row_split(be, io)) {
        be->split_io = io;
        shares_reset(be);
        if (be->nrows == 1)
            phase_rows(be, 0, 1);   /* one row: on this thread, no phase to post */
        else
            mt_tpool_run(&be->tp, be, phase_rows);
        return 0;
    }
    for (int l = 0; l < be->c->layers; l++)
        run_layer(be, l);
    run_heads(be, io);
    return 0;
}

int cpu_step(mt_backend *b, int B, mt_kv_seq *const *seqs,
             const mt_step_io *io, char *err, size_t errlen)
{
    cpu_backend *be = b->impl;
    if (B < 1 || B > be->R) {
        mt_set_err(err, errlen, "cpu: batch of %d outside 1..%d", B, be->R);
        return -1;
    }
    for (int r = 0; r < B; r++)
        be->rows[r] = (row){ .seq = seqs[r], .pos = seqs[r]->len,
                             .base = seqs[r]->len, .first = r,
                             .rpos = io->positions ? io->positions[r] : seqs[r]->len };
    be->nrows = B;
    int rc = run_rows(be, io, err, errlen);
    b->attention_ms = be->att_ns / 1e6;
    return rc;
}

static int cpu_prefill_chunk(mt_backend *b, mt_kv_seq *seq, int64_t base, int R,
                             const mt_step_io *io, char *err, size_t errlen)
{
    cpu_backend *be = b->impl;
    for (int r = 0; r < R; r++)
        be->rows[r] = (row){ .seq = seq, .pos = base + r, .base = base, .first = 0,
                             .rpos = base + r };
    be->nrows = R;
    return run_rows(be, io, err, errlen);
}

/* No cap on a chunk: run_rows writes a chunk's K,V only after all its rows
 * attended (see the top of the file). */
int cpu_prefill(mt_backend *b, mt_kv_seq *seq, int n, const mt_step_io *io,
                char *err, size_t errlen)
{
    cpu_backend *be = b->impl;
    return mt_backend_prefill_chunks(b, be->c, seq, n, io, be->R, INT64_MAX, cpu_prefill_chunk,
                                     err, errlen);
}

void cpu_wake(mt_backend *b)
{
    cpu_backend *be = b->impl;
    mt_tpool_wake(&be->tp, be);
}

/* mt_decoder_parallel: the caller's work as one phase of the pool (the
 * workers woken first when they sleep: they spin from then until the
 * phase is posted). */
static void phase_par(cpu_backend *be, int tid, int nt) { be->par_fn(be->par_ctx, tid, nt); }

void cpu_parallel(mt_backend *b, mt_par_fn fn, void *ctx)
{
    cpu_backend *be = b->impl;
    be->par_fn = fn;
    be->par_ctx = ctx;
    mt_tpool_run(&be->tp, be, phase_par);
}
