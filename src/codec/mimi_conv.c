/* mimi_conv.c: Mimi's direct convolution for the SEANet layers with a
 * long time axis (the first levels of the encoder and the last of the
 * decoder: few channels, up to 1920 steps a frame), AVX-512, without
 * im2col or sgemm.
 *
 * There, im2col + sgemm copies each input k times into the column matrix
 * and OpenBLAS then packs that matrix again before multiplying (its copy
 * routines were a third of its time on these shapes, issue 49). Here each
 * session's input is copied once, its left context before it and split
 * into `stride` phases (padded step q = u * stride + p at P[p][u]), so
 * the input of output step t at tap kk is P[(kk dil) % stride][t + (kk dil)
 * / stride]: contiguous in t for any stride. A tile is 8 output channels x
 * 48 steps (24 16-lane sums), each (input channel, tap) one broadcast
 * weight per channel against 3 vectors of input, or at 16 to 63 steps
 * (the deeper layers) 16 channels x 16 steps; the weights are reordered
 * once per batch ([cout / CO][cin][k][CO]) so a tile reads them in
 * order.
 *
 * The bits: an output is the bias plus its cin * k products in the order
 * (ci, kk), whatever tile, thread or batch it is in. */
#include "codec/mimi_impl.h"

#include <string.h>

enum { DC_CO = 8, DC_T = 48, DC_MARGIN = DC_T + 16, DC_KMAX = 64 /* taps */ };

/* The tile's shape: 8 channels x 48 steps from 64 steps on, else 16
 * channels x 16 steps (the deeper layers: 16 steps a frame, more
 * channels); under 8 output channels (the decoder's last layer, 64 -> 1:
 * through im2col and sgemm it took 0.14 ms a frame at B = 1 for 0.4
 * MFLOP, a twentieth of the decoder), one channel x 128 steps. */
enum { DC_T1 = 128 };
int mimi_direct_co(const mimi_conv *cv)
{
    return cv->cout < DC_CO ? 1 : cv->tout >= 64 ? DC_CO : 2 * DC_CO;
}
int mimi_direct_t(const mimi_conv *cv)
{
    return cv->cout < DC_CO ? DC_T1 : cv->tout >= 64 ? DC_T : 16;
}

int mimi_direct_eligible(const mimi_conv *cv)
{
    return !cv->tr && !cv->grouped && cv->tout >= 16 && cv->cout % mimi_direct_co(cv) == 0 &&
           cv->k <= DC_KMAX && mimi_skinny_ok();
}

/* steps a phase holds: every padded step, and room for a tile's overrun */
static size_t phase_len(const mimi_conv *cv)
{
    return (size_t)(cv->ctx + cv->tin + cv->stride - 1) / cv->stride +
           (mimi_direct_t(cv) > DC_T ? (size_t)DC_T1 + 16 : DC_MARGIN);
}

size_t mimi_direct_pad_floats(const mimi_conv *cv)
{
    return (size_t)cv->cin * cv->stride * phase_len(cv);
}

size_t mimi_direct_weight_floats(const mimi_conv *cv) { return (size_t)cv->cout * cv->cin * cv->k; }

void mimi_direct_weights(const mimi_conv *cv, float *wt)
{
    const int cin = cv->cin, k = cv->k, CO = mimi_direct_co(cv);
    for (int co = 0; co < cv->cout; co++)
        for (int ci = 0; ci < cin; ci++)
            for (int kk = 0; kk < k; kk++)
                wt[(((size_t)(co / CO) * cin + ci) * k + kk) * CO + co % CO] =
                    cv->w[((size_t)co * cin + ci) * k + kk];
}

void mimi_direct_pad(const mimi_conv *cv, const float *ctx, const float *x, float *P, int elu)
{
    const int st = cv->stride, c = cv->ctx, n = c + cv->tin;
    const size_t L = phase_len(cv);
    for (int p = 0; p < st; p++) {
        float *ph = P + (size_t)p * L;
        size_t u = 0;
        int q = p;
        for (; q < c; q += st)   /* the context's steps, then the input's */
            ph[u++] = ctx[q];
        const size_t u0 = u;
        if (st == 1) {
            memcpy(ph + u, x + (q - c), (size_t)(n - q) * sizeof *ph);
            u += (size_t)(n - q);
        } else {
            for (int i = q - c; i < n - c; i += st)
                ph[u++] = x[i];
        }
        if (elu)   /* the input's steps only: the context holds ELU's already */
            mimi_elu(ph + u0, ph + u0, u - u0);
        memset(ph + u, 0, (L - u) * sizeof *ph);
    }
}

/* where tap kk's input starts in a channel's padded phases: phase
 * (kk dil) % stride, step (kk dil) / stride (no division in the loop) */
static void tap_offsets(const mimi_conv *cv, size_t L, size_t *offs)
{
    for (int kk = 0; kk < cv->k; kk++) {
        int off = kk * cv->dil;
        offs[kk] = (size_t)(off % cv->stride) * L + (size_t)(off / cv->stride);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

/* The first n (> 0) of a tile's 16 sums v to y, or added to what y holds
 * (add: y + v, as the residual's add would make them after the store). */
__attribute__((target("avx512f,fma"))) static inline __attribute__((always_inline)) void
store_steps(float *y, int n, __m512 v, int add)
{
    const __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    if (add)
        v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), v);
    _mm512_mask_storeu_ps(y, m, v);
}

/* 16 channels x 16 steps: one vector of steps, 16 sums */
__attribute__((target("avx512f,fma")))
static void tile16(const mimi_conv *cv, const float *wt, const float *P, int cb, int t0, float *Y,
                   size_t ldy, int add)
{
    const int cin = cv->cin, k = cv->k, st = cv->stride, CO = 2 * DC_CO;
    const size_t L = phase_len(cv);
    __m512 acc[2 * DC_CO];
    for (int c = 0; c < CO; c++)
        acc[c] = _mm512_set1_ps(cv->b ? cv->b[cb * CO + c] : 0.0f);
    const float *w = wt + (size_t)cb * cin * k * CO;
    size_t offs[DC_KMAX];
    tap_offsets(cv, L, offs);
    for (int ci = 0; ci < cin; ci++) {
        const float *Pc = P + (size_t)ci * st * L + t0;
        for (int kk = 0; kk < k; kk++, w += CO) {
            /* 16 steps a weight: the weights' read shows beside the FMAs
             * (at B = 1, 6.3 MB against 50 MFLOP), so ask for them 4 KiB
             * ahead (5-15% on these layers, issue 49) */
            _mm_prefetch((const char *)(w + 1024), _MM_HINT_T0);
            __m512 x = _mm512_loadu_ps(Pc + offs[kk]);
            #pragma GCC unroll 16
            for (int c = 0; c < CO; c++)
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(w[c]), x, acc[c]);
        }
    }
    int len = cv->tout - t0 < 16 ? cv->tout - t0 : 16;
    for (int c = 0; c < CO; c++)
        store_steps(Y + (size_t)(cb * CO + c) * ldy + t0, len, acc[c], add);
}

/* 1 channel x 128 steps: 8 vectors of steps, 8 independent sums */
__attribute__((target("avx512f,fma")))
static void tile1(const mimi_conv *cv, const float *wt, const float *P, int cb, int t0, float *Y,
                  size_t ldy, int add)
{
    enum { V = DC_T1 / 16 };
    const int cin = cv->cin, k = cv->k, st = cv->stride;
    const size_t L = phase_len(cv);
    __m512 acc[V];
    for (int j = 0; j < V; j++)
        acc[j] = _mm512_set1_ps(cv->b ? cv->b[cb] : 0.0f);
    const float *w = wt + (size_t)cb * cin * k;
    size_t offs[DC_KMAX];
    tap_offsets(cv, L, offs);
    for (int ci = 0; ci < cin; ci++) {
        const float *Pc = P + (size_t)ci * st * L + t0;
        for (int kk = 0; kk < k; kk++, w++) {
            const __m512 wc = _mm512_set1_ps(*w);
            #pragma GCC unroll 8
            for (int j = 0; j < V; j++)
                acc[j] = _mm512_fmadd_ps(wc, _mm512_loadu_ps(Pc + offs[kk] + 16 * j), acc[j]);
        }
    }
    float *y = Y + (size_t)cb * ldy + t0;
    for (int j = 0, len = cv->tout - t0; j < V && 16 * j < len; j++)
        store_steps(y + 16 * j, len - 16 * j, acc[j], add);
}

__attribute__((target("avx512f,fma")))
void mimi_direct_tile(const mimi_conv *cv, const float *wt, const float *P, int cb, int t0, float *Y,
                      size_t ldy, int add)
{
    if (mimi_direct_t(cv) == 16) {
        tile16(cv, wt, P, cb, t0, Y, ldy, add);
        return;
    }
    if (mimi_direct_t(cv) == DC_T1) {
        tile1(cv, wt, P, cb, t0, Y, ldy, add);
        return;
    }
    const int cin = cv->cin, k = cv->k, st = cv->stride;
    const size_t L = phase_len(cv);
    __m512 acc[DC_CO][3];
    for (int c = 0; c < DC_CO; c++) {
        __m512 b = _mm512_set1_ps(cv->b ? cv->b[cb * DC_CO + c] : 0.0f);
        acc[c][0] = acc[c][1] = acc[c][2] = b;
    }
    const float *w = wt + (size_t)cb * cin * k * DC_CO;
    size_t offs[DC_KMAX];
    tap_offsets(cv, L, offs);
    for (int ci = 0; ci < cin; ci++) {
        const float *Pc = P + (size_t)ci * st * L + t0;
        for (int kk = 0; kk < k; kk++, w += DC_CO) {
            const float *x = Pc + offs[kk];
            __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16), x2 = _mm512_loadu_ps(x + 32);
            #pragma GCC unroll 8
            for (int c = 0; c < DC_CO; c++) {
                __m512 wc = _mm512_set1_ps(w[c]);
                acc[c][0] = _mm512_fmadd_ps(wc, x0, acc[c][0]);
                acc[c][1] = _mm512_fmadd_ps(wc, x1, acc[c][1]);
                acc[c][2] = _mm512_fmadd_ps(wc, x2, acc[c][2]);
            }
        }
    }
    int len = cv->tout - t0 < DC_T ? cv->tout - t0 : DC_T;
    for (int c = 0; c < DC_CO; c++) {
        float *y = Y + (size_t)(cb * DC_CO + c) * ldy + t0;
        for (int j = 0; j < 3 && 16 * j < len; j++)
            store_steps(y + 16 * j, len - 16 * j, acc[c][j], add);
    }
}

#else

void mimi_direct_tile(const mimi_conv *cv, const float *wt, const float *P, int cb, int t0, float *Y,
                      size_t ldy, int add)
{
    (void)cv, (void)wt, (void)P, (void)cb, (void)t0, (void)Y, (void)ldy, (void)add;
}

#endif
