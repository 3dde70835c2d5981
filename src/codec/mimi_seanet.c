/* mimi_seanet.c: the SEANet convolutions' forward passes on a batch
 * (mimi_batch.h): which kernel each layer takes and its work items on
 * the batch's threads. A layer with a long time axis goes to mimi_conv.c's
 * direct kernel (transposed: mimi_convtr.c's phases); the deepest ones,
 * a few steps a frame, to their 8-bit copies where the batch has them
 * (mimi_q8.c); the one-channel last layer to its row loop; the rest to
 * im2col + sgemm (transposed: mimi_convtr.c's product or sgemm, then
 * overlap-add). Every item's arithmetic is a function of the shape alone,
 * as mimi.c's top comment says of all the codec's work. */
#include "codec/mimi_batch.h"

#include <cblas.h>
#include <string.h>

#include "decode/cpu_q8.h"

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
                        j->X + (size_t)ci * Nin + (size_t)b * cv->tin, w->col + lb * per + ci * (per / cv->cin),
                        j->elu);
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
                         j->Y + (size_t)b * cv->tout, (size_t)j->B * cv->tout, j->add);
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
    mimi_par_run(w, it_q8_col, nc);
    mimi_q8_product(w, q8, nc, rows, K, w->q8x, w->q8y);
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
int mimi_conv_direct(const mimi_batch *w, const mimi_conv *cv)
{
    return direct_weights(w, cv) != NULL;
}

void mimi_conv_fwd(const mimi_conv *cv, mimi_batch *w, mimi_state *const *S, int B,
                     const float *X, float *Y, int fuse)
{
    const int elu = (fuse & MIMI_FUSE_ELU) != 0;
    const int cin = cv->cin, cout = cv->cout, k = cv->k, st = cv->stride;
    const int tin = cv->tin, tout = cv->tout, ctx = cv->ctx;
    const size_t Nin = (size_t)B * tin, N = (size_t)B * tout;
    if (cv->replicate && ctx > 0)
        for (int b = 0; b < B; b++)
            if (S[b]->down_first)
                for (int ci = 0; ci < cin; ci++)
                    for (int j = 0; j < ctx; j++) {
                        float *s = &S[b]->x[cv->st + (size_t)ci * ctx + j];
                        *s = X[(size_t)ci * Nin + (size_t)b * tin];
                        if (elu)
                            mimi_elu(s, s, 1);
                    }
    par_job *job = &w->job;
    job->cv = cv;
    job->S = S;
    job->B = B;
    job->X = X;
    job->Y = Y;
    job->wt = direct_weights(w, cv);
    if (fuse && !job->wt)   /* the caller asks mimi_conv_direct first */
        return;
    job->add = (fuse & MIMI_FUSE_ADD) != 0;
    job->elu = elu;
    if (job->wt) {   /* mimi_conv.c, the bias its own; as many sessions at a time as w->col holds */
        int G = (int)(w->col_floats / mimi_direct_pad_floats(cv));
        for (int b0 = 0; b0 < B; b0 += G) {
            int nb = B - b0 < G ? B - b0 : G;
            int per_run;
            job->n0 = (size_t)b0;
            mimi_par_run(w, it_direct_pad, nb * ((cin + PAD_CH - 1) / PAD_CH));
            mimi_par_run(w, it_direct_tile, nb * direct_items(cv, &per_run));
        }
    } else
        mimi_fill_bias(Y, cv->b, cout, N);
    const mimi_q8mat *q8 = job->wt ? NULL : conv_q8_mat(w, cv, N);
    if (job->wt) {
    } else if (q8) {
        conv_q8(w, q8, N, Y);
    } else if (cout == 1 && st == 1 && (size_t)ctx + 16 <= w->xrow_floats - ROW_TILE) {
        mimi_par_run(w, it_conv_row, B * ((tout + ROW_TILE - 1) / ROW_TILE));
    } else if (k == 1 && st == 1) {
        mimi_par_gemm(w, 0, 0, cout, (int)N, cin, cv->w, cin, X, (int)Nin, 1.0f, Y, (int)N);
    } else {
        const size_t rows = (size_t)cin * k;
        size_t chunk = w->col_floats / rows;
        if (chunk < 1)
            chunk = 1;
        for (size_t n0 = 0; n0 < N; n0 += chunk) {
            size_t nc = N - n0 < chunk ? N - n0 : chunk;
            job->n0 = n0;
            job->nc = nc;
            mimi_par_run(w, it_im2col, cin);
            mimi_par_gemm(w, 0, 0, cout, (int)nc, (int)rows, cv->w, (int)rows, w->col, (int)nc,
                          1.0f, Y + n0, (int)N);
        }
    }
    if (ctx > 0)   /* the new left context: the last ctx steps of state ++ X */
        for (int b = 0; b < B; b++)
            for (int ci = 0; ci < cin; ci++) {
                float *sb = S[b]->x + cv->st + (size_t)ci * ctx;
                const float *xb = X + (size_t)ci * Nin + (size_t)b * tin;
                const int j0 = ctx > tin ? ctx - tin : 0;   /* from X on */
                for (int j = 0; j < j0; j++)
                    sb[j] = sb[tin + j];
                if (elu)   /* the context is the convolution's input: ELU's */
                    mimi_elu(sb + j0, xb + tin + j0 - ctx, (size_t)(ctx - j0));
                else
                    memcpy(sb + j0, xb + tin + j0 - ctx, (size_t)(ctx - j0) * sizeof *sb);
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
                     w->col + lb * trd_session_floats(cv) + ci * per, j->elu);
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
int mimi_convtr_direct(const mimi_batch *w, const mimi_conv *cv, int B)
{
    return direct_weights(w, cv) && cv->tin >= 16 && !conv_q8_mat(w, cv, (size_t)B * cv->tin);
}

void mimi_convtr_fwd(const mimi_conv *cv, mimi_batch *w, mimi_state *const *S, int B,
                       const float *X, float *Y, int fuse)
{
    const int cin = cv->cin, cout = cv->cout, k = cv->k, st = cv->stride;
    const int tin = cv->tin, tout = cv->tout, ctx = cv->ctx;
    const size_t N = (size_t)B * tin, Nout = (size_t)B * tout;
    const float *wt = direct_weights(w, cv);
    float *part = w->part;   /* [B][cout][ctx] */
    if (fuse && !mimi_convtr_direct(w, cv, B))   /* the caller asks mimi_convtr_direct first */
        return;
    memset(part, 0, (size_t)B * cout * ctx * sizeof(float));
    if (mimi_convtr_direct(w, cv, B)) {   /* mimi_convtr.c's phases, as many sessions as w->col holds */
        const int G = (int)(w->col_floats / trd_session_floats(cv));
        w->job = (par_job){ .cv = cv, .B = B, .X = X, .Y = Y, .wt = wt,
                            .elu = (fuse & MIMI_FUSE_ELU) != 0 };
        for (int b0 = 0; b0 < B; b0 += G) {
            int nb = B - b0 < G ? B - b0 : G;
            w->job.n0 = (size_t)b0;
            mimi_par_run(w, it_trd_pad, nb * ((cin + PAD_CH - 1) / PAD_CH));
            mimi_par_run(w, it_trd_tile, nb * st * mimi_trd_phase_tiles(cv));
            mimi_par_run(w, it_trd_scatter, nb * cout);
        }
    } else if (cv->grouped) {
        mimi_fill_bias(Y, cv->b, cout, Nout);
        mimi_tr_grouped(cv, B, X, Y, part);
    } else {
        mimi_fill_bias(Y, cv->b, cout, Nout);
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
                mimi_par_run(w, it_trs, mimi_trs_blocks(cv));
            else   /* Z [cout*k][nc] = W^T (W is [cin][cout*k]) x X[:, n0..] */
                mimi_par_gemm(w, 1, 0, (int)rows, (int)nc, cin, cv->w, (int)rows, X + n0, (int)N,
                              0.0f, w->col, (int)nc);
            w->job = (par_job){ .cv = cv, .B = B, .Y = Y, .n0 = n0, .nc = nc };
            mimi_par_run(w, it_overlap_add, cout);
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
