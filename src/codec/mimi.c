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
 * one sgemm per codebook. The convolutions' passes are mimi_seanet.c's,
 * the parallel phases, products and elementwise ops mimi_par.c's, all on
 * the batch's inside (mimi_batch.h).
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
#include "codec/mimi_batch.h"

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

void mimi_batch_fuse(mimi_batch *w, int on) { w->no_fuse = !on; }

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

/* A transformer's product C [M][N] = A [M][K] . W [N][K]^T: on the 8-bit
 * copy of W (matrix `which` of layer li) where the batch has one and M is
 * within q8_rows (q8_product), else par_gemm on the fp32 W; with gelu,
 * then C = gelu(C) (in the 8-bit product's own tiles, else a pass). */
static void tr_gemm(mimi_batch *w, int dec, int li, int which, int M, int N, int K, const float *A,
                    const float *W, float *C, int gelu)
{
    if (!w->q8 || M > w->q8_rows) {
        mimi_par_gemm(w, 0, 1, M, N, K, A, K, W, K, 0.0f, C, N);
        if (gelu)
            mimi_par_elt(w, 2, C, NULL, (size_t)M * N);
    } else if (gelu) {
        mimi_q8_product_gelu(w, mimi_q8_mat(w->q8, dec, li, which), M, N, K, A, C);
    } else {
        mimi_q8_product(w, mimi_q8_mat(w->q8, dec, li, which), M, N, K, A, C);
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
            /* the weighted sum held in registers over each range of slots
             * (util/vec8.h: axpy8's arithmetic slot by slot, the same
             * bits; out read and written once a range, not once a slot) */
            float *oh = orow + (size_t)h * hd;
            memset(oh, 0, (size_t)hd * sizeof *oh);
            for (int s = 0; s < 2; s++) {
                const int j0 = s ? b0 : a0, j1 = s ? b1 : a1;
                for (int j = j0; j < j1; j++)
                    score[j] /= den;
                wsum_rows(oh, hd, score + j0, rv + (size_t)j0 * d + (size_t)h * hd, (size_t)d,
                          j1 - j0);
            }
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
        tr_gemm(w, dec, li, MIMI_Q8_IN, (int)N, 3 * d, d, w->h, l->in_proj, w->qkv, 0);
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
        mimi_par_run(w, it_attend, B * H);
        tr_gemm(w, dec, li, MIMI_Q8_OUT, (int)N, d, d, w->att, l->out_proj, w->h, 0);
        mimi_residual(xt, w->h, l->ls1, d, N);
        mimi_layer_norm(w->h, xt, l->n2w, l->n2b, d, N);
        tr_gemm(w, dec, li, MIMI_Q8_L1, (int)N, ff, d, w->h, l->l1, w->ff, 1);
        tr_gemm(w, dec, li, MIMI_Q8_L2, (int)N, d, ff, w->ff, l->l2, w->h, 0);
        mimi_residual(xt, w->h, l->ls2, d, N);
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
/* quantize's search on the codebooks' 8-bit copies (mimi_q8_nearest: the
 * 8-bit dots, then the centroids they cannot tell apart in double), up to
 * Q8_COLS sessions a product; w->r [qd][B] the projected latents. At a
 * few sessions the fp32 codebooks, 2 MB each, read every frame, were
 * most of the RVQ's time. */
static void quantize_q8(const mimi_model *m, mimi_batch *w, mimi_rvq_span g, int B,
                        int32_t *codes)
{
    const mimi_config *c = &m->c;
    const int qd = c->q_dimension, nq = c->n_q_used;
    for (int i = 0; i < g.n; i++) {
        const mimi_q8cb *cb = mimi_q8_codebook(w->q8, g.code0 > 0, i);
        const float *cbf = g.q->cb[i];
        for (int b0 = 0; b0 < B; b0 += Q8_COLS) {
            const int nb = B - b0 < Q8_COLS ? B - b0 : Q8_COLS;
            for (int j = 0; j < nb; j++)   /* the sessions' residuals as rows */
                for (int e = 0; e < qd; e++)
                    w->q8x[(size_t)j * qd + e] = w->r[(size_t)e * B + b0 + j];
            mimi_q8_product(w, &cb->mat, nb, c->bins, qd, w->q8x, w->q8y);
            for (int j = 0; j < nb; j++) {
                const int b = b0 + j;
                int best = mimi_q8_nearest(cb, cbf, g.q->norm2[i], c->bins, qd,
                                           w->q8x + (size_t)j * qd, w->q8y + (size_t)j * c->bins,
                                           w->sc, NULL);
                codes[(size_t)b * nq + g.code0 + i] = best;
                for (int e = 0; e < qd; e++)
                    w->r[(size_t)e * B + b] -= cbf[(size_t)best * qd + e];
            }
        }
    }
}

static void quantize(const mimi_model *m, mimi_batch *w, mimi_rvq_span g, int B, const float *lat,
                     int32_t *codes)
{
    const mimi_config *c = &m->c;
    const mimi_rvq *q = g.q;
    const int qd = c->q_dimension, nq = c->n_q_used, code0 = g.code0, n = g.n;
    mimi_par_gemm(w, 0, 0, qd, B, c->dimension, q->in_proj, c->dimension, lat, B, 0.0f, w->r, B);
    if (w->q8 && B <= w->q8_rows && mimi_q8_codebook(w->q8, g.code0 > 0, n - 1)) {
        quantize_q8(m, w, g, B, codes);
        return;
    }
    for (int i = 0; i < n; i++) {
        const float *cb = q->cb[i], *n2 = q->norm2[i];
        mimi_par_gemm(w, 0, 0, c->bins, B, qd, cb, qd, w->r, B, 0.0f, w->sc, B);
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
    mimi_par_gemm(w, 0, 0, m->c.dimension, B, qd, g.q->out_proj, qd, w->sum2, B,
                  add ? 1.0f : 0.0f, lat, B);
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
    mimi_par_frame(w, run_graph_call, &gc);
}

/* Whether op i, a convolution, takes the residual's add after it into its
 * stores: the add reads the convolution's output and nothing else does
 * (mimi_graph_residual's scratch), and the direct kernel runs it (its
 * stores add; the other paths write Y whole). The sum's bits are the
 * add's: the convolution's value plus the residual's. */
static int fused_add(const mimi_batch *w, const mimi_graph *g, int i)
{
    const mimi_op *o = &g->op[i], *n = i + 1 < g->n ? &g->op[i + 1] : NULL;
    return !w->no_fuse && n && n->kind == MIMI_OP_ADD && n->src == o->dst && o->dst != MIMI_BUF_IO &&
           n->dst != MIMI_BUF_IO && n->n == (size_t)o->cv->cout * o->cv->tout &&
           mimi_conv_direct(w, o->cv);
}

/* Whether op i, an ELU, is applied by the convolution after it as the
 * direct kernel pads its input (mimi_direct_pad): that convolution
 * (ordinary or transposed) reads its output and nothing else does
 * (mimi_graph_conv's and mimi_graph_residual's scratch), and runs on the
 * direct kernel for these B sessions. */
static int fused_elu(const mimi_batch *w, const mimi_graph *g, int i, int B)
{
    const mimi_op *o = &g->op[i], *n = i + 1 < g->n ? &g->op[i + 1] : NULL;
    if (w->no_fuse || !n || (n->kind != MIMI_OP_CONV && n->kind != MIMI_OP_CONVTR) ||
        n->src != o->dst || o->src == MIMI_BUF_IO || o->dst == MIMI_BUF_IO ||
        o->n != (size_t)n->cv->cin * n->cv->tin)
        return 0;
    return n->kind == MIMI_OP_CONV ? mimi_conv_direct(w, n->cv) : mimi_convtr_direct(w, n->cv, B);
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
    int elu_in = 0;          /* the last op was an ELU the next convolution applies */
    const float *pre = NULL; /* and its input */
    for (int i = 0; i < MIMI_NSTAGES; i++)
        w->stage_s[i] = 0;
    for (int i = 0; i < g->n; i++) {
        const mimi_op *o = &g->op[i];
        const float *src = o->src == MIMI_BUF_IO ? pcm_in : A[o->src];
        float *dst = o->dst == MIMI_BUF_IO ? pcm_out : A[o->dst];
        if (elu_in && (o->kind == MIMI_OP_CONV || o->kind == MIMI_OP_CONVTR))
            src = pre;   /* its input before the ELU skipped */
        double t0 = now_s(w);
        int fused = 0;
        mimi_rvq_span rg = mimi_rvq_group(m, o->which);
        w->op_s[i] = 0;
        if ((o->kind == MIMI_OP_QUANTIZE || o->kind == MIMI_OP_DEQUANTIZE) && rg.n == 0)
            continue;   /* a group without codebooks */
        switch (o->kind) {
        case MIMI_OP_CONV:
            if (fused_add(w, g, i)) {   /* the residual's add as the kernel stores */
                mimi_conv_fwd(o->cv, w, S, B, src, A[g->op[i + 1].dst], elu_in | MIMI_FUSE_ADD);
                fused = 1;
            } else {
                mimi_conv_fwd(o->cv, w, S, B, src, dst, elu_in);
            }
            break;
        case MIMI_OP_CONVTR:      mimi_convtr_fwd(o->cv, w, S, B, src, dst, elu_in); break;
        case MIMI_OP_ELU:
            if (fused_elu(w, g, i, B)) {   /* the convolution after it applies it */
                elu_in = MIMI_FUSE_ELU;
                pre = src;
                continue;
            }
            mimi_par_elt(w, 0, dst, src, o->n * B);
            break;
        case MIMI_OP_ADD:         mimi_par_elt(w, 1, dst, src, o->n * B); break;
        case MIMI_OP_TRANSFORMER:
            transformer_fwd(m, o->which ? m->dtr : m->etr, w, S, B, m->enc_steps, o->which, dst);
            break;
        case MIMI_OP_QUANTIZE:    quantize(m, w, rg, B, src, codes_out); break;
        case MIMI_OP_DEQUANTIZE:  dequantize(m, w, rg, o->which, B, codes_in, dst); break;
        }
        double dt = now_s(w) - t0;
        w->stage_s[o->stage] += dt;
        w->op_s[i] = dt;
        if (fused)   /* the add after it is done */
            w->op_s[++i] = 0;
        if (o->kind == MIMI_OP_CONV || o->kind == MIMI_OP_CONVTR)
            elu_in = 0;
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
