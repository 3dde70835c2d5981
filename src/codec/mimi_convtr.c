/* mimi_convtr.c: Mimi's transposed convolutions (the decoder's
 * upsampling layers) without sgemm, at small batch, and the pieces of
 * the sgemm path they share (the overlap-add, the channel-wise one).
 *
 * A transposed convolution of stride s and k = m s taps is s ordinary
 * convolutions over the same input, interleaved: output step o = u s + p
 * (phase p) is the sum over j < m of tap p + j s times input step u - j.
 * So phase p is a causal convolution of m taps (tap jj = m-1-j, weight
 * w[ci][co][p + (m-1-jj) s]) over the input padded with m-1 zero steps,
 * run on mimi_conv.c's direct tile (mimi_trd_*) for the layers with a
 * long time axis: each phase gives its tin steps in the frame; its m-1
 * steps past the frame (the overlap the next frame adds: the session's
 * state keeps it as before, partial sums without the bias, [cout][k - s])
 * are few, so a small loop over the channels gives them (`pending`)
 * rather than a tile of 16 or 48 steps mostly wasted. No column matrix,
 * no packing.
 *
 * The layer with 2 input steps a frame (1024 -> 512, k 16, 33.5 MB of
 * weights) is a product of the weights by B*2 vectors: weight-bound at
 * small batch. There (mimi_trs_*) the weights, reordered once per batch
 * into blocks of 32 of their cout*k output rows ([rows/32][cin][32]), are
 * streamed once against 8 input vectors at a time (16 sums in registers
 * a block, the rows of Z = W^T X; a block's next 8 read it again from
 * the cache), and the overlap-add places Z's rows. Up to 128 vectors
 * (B = 64), where it measured 1.7x sgemm's speed (B = 1..4: 2.3-3.1x).
 *
 * The bits: each output is the bias plus its (ci, j) products in order
 * (direct), or each row of Z its products in ci order from zero (skinny),
 * whatever the tile, thread or batch. */
#include "codec/mimi_impl.h"

#include <string.h>

enum { TS_R = 32, TS_NV = 8, TS_MAXCOLS = 128, TRD_MMAX = 16 };

/* ---- the phases as ordinary convolutions (long time axes) ---------------- */

int mimi_trd_eligible(const mimi_conv *cv)
{
    if (!cv->tr || cv->grouped || cv->k % cv->stride || cv->k / cv->stride > TRD_MMAX || cv->tin < 16)
        return 0;
    mimi_conv pc;
    mimi_trd_phase(cv, &pc);
    return mimi_direct_eligible(&pc);
}

void mimi_trd_phase(const mimi_conv *cv, mimi_conv *pc)
{
    const int m = cv->k / cv->stride;
    *pc = (mimi_conv){ .cin = cv->cin, .cout = cv->cout, .k = m, .stride = 1, .dil = 1,
                       .tin = cv->tin, .tout = cv->tin, .ctx = m - 1 };
}

size_t mimi_trd_pad_floats(const mimi_conv *cv)
{
    mimi_conv pc;
    mimi_trd_phase(cv, &pc);
    return mimi_direct_pad_floats(&pc);
}

size_t mimi_trd_out_floats(const mimi_conv *cv)
{
    return (size_t)cv->stride * cv->cout * (size_t)cv->tin;
}

/* wt: phase p's [cout / CO][cin][m][CO] at p * cout * cin * m */
void mimi_trd_weights(const mimi_conv *cv, float *wt)
{
    const int s = cv->stride, m = cv->k / s, cin = cv->cin, cout = cv->cout, k = cv->k;
    mimi_conv pc;
    mimi_trd_phase(cv, &pc);
    const int CO = mimi_direct_co(&pc);
    for (int p = 0; p < s; p++) {
        float *wp = wt + (size_t)p * cout * cin * m;
        for (int co = 0; co < cout; co++)
            for (int ci = 0; ci < cin; ci++)
                for (int jj = 0; jj < m; jj++)
                    wp[(((size_t)(co / CO) * cin + ci) * m + jj) * CO + co % CO] =
                        cv->w[((size_t)ci * cout + co) * k + p + (m - 1 - jj) * s];
    }
}

void mimi_trd_pad(const mimi_conv *cv, const float *x, float *P, int elu)
{
    static const float zeros[TRD_MMAX];   /* ELU(0) is 0: no context to fuse */
    mimi_conv pc;
    mimi_trd_phase(cv, &pc);
    mimi_direct_pad(&pc, zeros, x, P, elu);
}

/* items of one phase: channel blocks x step tiles, then one a channel
 * block for its steps past the frame */
int mimi_trd_phase_tiles(const mimi_conv *cv)
{
    mimi_conv pc;
    mimi_trd_phase(cv, &pc);
    const int T = mimi_direct_t(&pc);
    return cv->cout / mimi_direct_co(&pc) * ((pc.tout + T - 1) / T + 1);
}

#if defined(__x86_64__)
#include <immintrin.h>

/* Channel block cb of phase p, its steps u = tin + v past the frame
 * (v < m-1): the taps jj <= m-2-v, whose inputs are in the frame, a
 * lane a channel; into the session's new overlap part [cout][ctx] at
 * step v s + p. */
__attribute__((target("avx512f,fma")))
static void pending(const mimi_conv *cv, const mimi_conv *pc, const float *wp, const float *P, int p, int cb,
                    float *part)
{
    const int m = pc->k, cin = cv->cin, CO = mimi_direct_co(pc);
    const size_t L = mimi_direct_pad_floats(pc) / (size_t)cin;
    const __mmask16 mk = (__mmask16)((1u << CO) - 1);
    for (int v = 0; v + 1 < m; v++) {
        __m512 acc = _mm512_setzero_ps();
        const float *w = wp + (size_t)cb * cin * m * CO;
        for (int ci = 0; ci < cin; ci++, w += m * CO) {
            const float *x = P + (size_t)ci * L + cv->tin + v;   /* padded step u + jj */
            for (int jj = 0; jj + 1 + v < m; jj++)
                acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, w + jj * CO), _mm512_set1_ps(x[jj]), acc);
        }
        float tmp[16];
        _mm512_storeu_ps(tmp, acc);
        for (int c = 0; c < CO; c++)
            part[(size_t)(cb * CO + c) * cv->ctx + v * cv->stride + p] = tmp[c];
    }
}

#else

static void pending(const mimi_conv *cv, const mimi_conv *pc, const float *wp, const float *P, int p, int cb,
                    float *part)
{
    (void)cv, (void)pc, (void)wp, (void)P, (void)p, (void)cb, (void)part;
}

#endif

/* item i of phase p: a tile into O [s][cout][tin], or past the tiles a
 * channel block's steps past the frame into part [cout][ctx] */
void mimi_trd_tile(const mimi_conv *cv, const float *wt, const float *P, int p, int i, float *O, float *part)
{
    mimi_conv pc;
    mimi_trd_phase(cv, &pc);
    const int T = mimi_direct_t(&pc), nt = (pc.tout + T - 1) / T, m = pc.k;
    const int ntiles = cv->cout / mimi_direct_co(&pc) * nt;
    const float *wp = wt + (size_t)p * cv->cout * cv->cin * m;
    if (i >= ntiles)
        pending(cv, &pc, wp, P, p, i - ntiles, part);
    else
        mimi_direct_tile(&pc, wp, P, i / nt, i % nt * T, O + (size_t)p * cv->cout * pc.tout, (size_t)pc.tout, 0);
}

/* channel co of a session: y [tout] = bias + the phases interleaved */
void mimi_trd_scatter(const mimi_conv *cv, const float *O, int co, float *y)
{
    const int s = cv->stride, tin = cv->tin;
    const float bias = cv->b ? cv->b[co] : 0.0f;
    for (int p = 0; p < s; p++) {
        const float *o = O + ((size_t)p * cv->cout + co) * tin;
        for (int u = 0; u < tin; u++)
            y[u * s + p] = bias + o[u];
    }
}

/* ---- the product W^T X of a few vectors (short time axes) --------------- */

int mimi_trs_eligible(const mimi_conv *cv)
{
    return cv->tr && !cv->grouped && (cv->cout * cv->k) % TS_R == 0 && mimi_skinny_ok();
}

int mimi_trs_max_cols(void) { return TS_MAXCOLS; }

int mimi_trs_blocks(const mimi_conv *cv) { return cv->cout * cv->k / TS_R; }

size_t mimi_trs_weight_floats(const mimi_conv *cv) { return (size_t)cv->cin * cv->cout * cv->k; }

void mimi_trs_weights(const mimi_conv *cv, float *wr)
{
    const size_t rows = (size_t)cv->cout * cv->k;
    for (int ci = 0; ci < cv->cin; ci++)
        for (size_t r = 0; r < rows; r++)
            wr[((r / TS_R) * cv->cin + ci) * TS_R + r % TS_R] = cv->w[ci * rows + r];
}

#if defined(__x86_64__)
#include <immintrin.h>

/* Z rows rb*32..+32, columns 0..nc (nc <= 8): Z[r][n] = sum_ci W[ci][r] X[ci][n],
 * in ci order from zero */
__attribute__((target("avx512f,fma")))
static void trs_cols(int cin, const float *wr, const float *X, size_t ldx, int nc, int rb, float *Z,
                     size_t ldz)
{
    const float *w = wr + (size_t)rb * cin * TS_R;
    __m512 acc[TS_NV][2];
    for (int n = 0; n < TS_NV; n++)
        acc[n][0] = acc[n][1] = _mm512_setzero_ps();
    for (int ci = 0; ci < cin; ci++, w += TS_R) {
        _mm_prefetch((const char *)(w + 2048), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + 2048 + 16), _MM_HINT_T0);
        __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16);
        const float *x = X + (size_t)ci * ldx;
        #pragma GCC unroll 8
        for (int n = 0; n < TS_NV; n++)
            if (n < nc) {
                __m512 xb = _mm512_set1_ps(x[n]);
                acc[n][0] = _mm512_fmadd_ps(w0, xb, acc[n][0]);
                acc[n][1] = _mm512_fmadd_ps(w1, xb, acc[n][1]);
            }
    }
    float tmp[TS_NV][TS_R];
    for (int n = 0; n < nc; n++) {
        _mm512_storeu_ps(tmp[n], acc[n][0]);
        _mm512_storeu_ps(tmp[n] + 16, acc[n][1]);
    }
    for (int r = 0; r < TS_R; r++)
        for (int n = 0; n < nc; n++)
            Z[(size_t)(rb * TS_R + r) * ldz + n] = tmp[n][r];
}

/* the same, 8 columns at a time (past the first 8, the block's weights
 * come again from the cache: 128 KiB at cin 1024) */
void mimi_trs_block(const mimi_conv *cv, const float *wr, const float *X, size_t ldx, int nc, int rb,
                    float *Z, size_t ldz)
{
    for (int n0 = 0; n0 < nc; n0 += TS_NV)
        trs_cols(cv->cin, wr, X + n0, ldx, nc - n0 < TS_NV ? nc - n0 : TS_NV, rb, Z + n0, ldz);
}

#else

void mimi_trs_block(const mimi_conv *cv, const float *wr, const float *X, size_t ldx, int nc, int rb,
                    float *Z, size_t ldz)
{
    (void)cv, (void)wr, (void)X, (void)ldx, (void)nc, (void)rb, (void)Z, (void)ldz;
}

#endif

/* ---- shared with the sgemm path ------------------------------------------ */

/* The overlap-add of columns n0..n0+nc of Z [cout*k][nc] for output
 * channel co: column (b, t), row (co, kk) lands at output step t*stride +
 * kk of session b in Y [cout][B*tout], or past the frame in its overlap
 * part [B][cout][ctx]. */
void mimi_tr_overlap_add(const mimi_conv *cv, int B, const float *Z, size_t n0, size_t nc, int co,
                         float *Y, float *part)
{
    const int cout = cv->cout, k = cv->k, st = cv->stride, tin = cv->tin, tout = cv->tout;
    const size_t Nout = (size_t)B * tout, pctx = (size_t)cv->ctx;
    for (int kk = 0; kk < k; kk++) {
        const float *z = Z + ((size_t)co * k + kk) * nc;
        float *ybase = Y + (size_t)co * Nout;
        /* steps t < tlast land inside the frame */
        int tlast = kk >= tout ? 0 : (tout - kk + st - 1) / st;
        size_t j = 0;
        for (size_t b = n0 / tin; j < nc; b++) {
            int t0 = (int)((n0 + j) - b * tin);
            int t1 = (int)(n0 + nc - b * tin < (size_t)tin ? n0 + nc - b * tin : (size_t)tin);
            int ts = tlast < t0 ? t0 : tlast > t1 ? t1 : tlast;
            float *yb = ybase + b * tout + kk;
            for (int t = t0; t < ts; t++)
                yb[t * st] += z[j++];
            float *pb = part + (b * cout + co) * pctx;
            for (int t = ts; t < t1; t++)
                pb[t * st + kk - tout] += z[j++];
        }
    }
}

/* The channel-wise transposed convolution (the upsample), one thread:
 * Y [cout][B*tout] += X's contributions, part [B][cout][ctx] too. */
void mimi_tr_grouped(const mimi_conv *cv, int B, const float *X, float *Y, float *part)
{
    const int cout = cv->cout, k = cv->k, st = cv->stride, tin = cv->tin, tout = cv->tout, ctx = cv->ctx;
    const size_t N = (size_t)B * tin, Nout = (size_t)B * tout;
    for (int c = 0; c < cout; c++)
        for (size_t n = 0; n < N; n++) {
            size_t b = n / tin, t = n % tin;
            float x = X[(size_t)c * N + n];
            for (int kk = 0; kk < k; kk++) {
                int j = (int)t * st + kk;
                float v = cv->w[(size_t)c * k + kk] * x;
                if (j < tout)
                    Y[(size_t)c * Nout + b * tout + j] += v;
                else
                    part[(b * cout + c) * ctx + (size_t)(j - tout)] += v;
            }
        }
}
