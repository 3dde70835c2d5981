/* test_q8.c: the 8-bit weights of --weights q8 (cpu_q8.c). Packing rounds
 * each weight to the nearest multiple of its block's scale (max|w| / 127),
 * and every kernel (AVX-512, AVX2, portable) gives the fp32 product of the
 * original weights within the quantisation's own bound:
 *   |y - x . w| <= sum over blocks b of (scale_b / 2) * sum_{k in b} |x_k|
 * plus fp32 summation slack (K * 2^-22 * sum |x_k w_k|). The bound is tight
 * enough to catch a wrong scale: one block's scale doubled fails it (checked
 * here in at least 95% of the cases, and planted in the kernels once by
 * hand). */
#include "tap.h"
#include "decode/cpu_q8.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 4242;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

/* Weights of varied size by block (1e-3 to 1e2): a scale per block matters. */
static void fill_weights(float *w, int N, int K)
{
    for (int n = 0; n < N; n++)
        for (int b = 0; b < K / MT_Q8_BLOCK; b++) {
            float mag = powf(10.0f, 2.5f * frand() - 0.5f);
            for (int i = 0; i < MT_Q8_BLOCK; i++)
                w[(size_t)n * K + b * MT_Q8_BLOCK + i] = mag * frand();
        }
}

/* Products of X [M, K] by the packed W [N, K] outside the bound (see the
 * top): 0 when the kernel is right. Y starts as y0 and beta 1 adds to it. */
static int violations(int M, int N, int K, const float *X, const float *W, const int8_t *q,
                      const float *s, float beta, const float *y0, const float *Y)
{
    const int nb = K / MT_Q8_BLOCK;
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = 0, bound = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double x = X[(size_t)m * K + k], w = W[(size_t)n * K + k];
                ref += x * w;
                bound += fabs(x) * s[(size_t)n * nb + k / MT_Q8_BLOCK] * 0.5;
                mag += fabs(x * w);
            }
            (void)q;
            bound += K * ldexp(1.0, -22) * mag + 1e-30;
            double base = beta == 0.0f ? 0.0 : y0[(size_t)m * N + n];
            double got = Y[(size_t)m * N + n] - base;
            if (!(fabs(got - ref) <= bound + ldexp(1.0, -22) * fabs(base)))
                bad++;
        }
    return bad;
}

/* Bits of the product of M rows against one row at a time (M = 1, its own
 * tiles): every tiling sums a (row, weight row)'s blocks in the same order,
 * so a batch of M rows (rows of 4, 2 or 3 left; weight rows in tiles of 4,
 * 2 and 1) gives each row what it would alone. The count of rows that
 * differ. */
static int rows_unlike_alone(int M, int N, int K)
{
    float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
    int8_t *q = malloc((size_t)N * K);
    float *s = malloc(sizeof(float) * N * (K / MT_Q8_BLOCK));
    float *Y = malloc(sizeof(float) * M * N), *y1 = malloc(sizeof(float) * N);
    int unlike = 0;
    for (int i = 0; i < M * K; i++)
        X[i] = frand();
    fill_weights(W, N, K);
    mt_q8_pack(q, s, W, (size_t)N, K);
    mt_q8_gemm(M, N, K, X, K, q, s, 0.0f, Y, N);
    for (int m = 0; m < M; m++) {
        mt_q8_gemm(1, N, K, X + (size_t)m * K, K, q, s, 0.0f, y1, N);
        unlike += memcmp(y1, Y + (size_t)m * N, sizeof(float) * N) != 0;
    }
    free(X); free(W); free(q); free(s); free(Y); free(y1);
    return unlike;
}

int main(void)
{
    static const char *const level_name[] = { "portable", "AVX2/FMA", "AVX-512" };
    int top = mt_q8_init();
    tap_diag("kernels: %s", level_name[top]);

    /* packing: q * scale within scale / 2 of w, |q| <= 127, max reads back */
    enum { PN = 9, PK = 128 };
    float *pw = malloc(sizeof(float) * PN * PK);
    int8_t *pq = malloc(PN * PK);
    float *ps = malloc(sizeof(float) * PN * PK / MT_Q8_BLOCK);
    fill_weights(pw, PN, PK);
    memset(pw + 2 * MT_Q8_BLOCK, 0, MT_Q8_BLOCK * sizeof(float));   /* a zero block */
    ok(mt_q8_pack(pq, ps, pw, PN, PK) == 0, "pack a finite matrix");
    int far = 0, hit_max = 0;
    for (int i = 0; i < PN * PK; i++) {
        float s = ps[i / MT_Q8_BLOCK];
        if (!(fabsf(pq[i] * s - pw[i]) <= s * 0.5f * (1 + 1e-6f)) || pq[i] == -128)
            far++;
        hit_max += pq[i] == 127 || pq[i] == -127;
    }
    is_int(far, 0, "every weight reads back within scale/2, bytes in -127..127");
    ok(hit_max >= PN * PK / MT_Q8_BLOCK - 1, "each nonzero block's largest weight is +-127");
    ok(ps[2] == 0.0f && pq[2 * MT_Q8_BLOCK] == 0, "a zero block: scale 0, bytes 0");
    pw[5] = INFINITY;
    ok(mt_q8_pack(pq, ps, pw, PN, PK) == -1, "a matrix with inf is refused");
    pw[5] = NAN;
    ok(mt_q8_pack(pq, ps, pw, PN, PK) == -1, "a matrix with nan is refused");
    free(pw); free(pq); free(ps);

    static const int Ms[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, Ns[] = { 1, 7, 37, 64 }, Ks[] = { 32, 96, 512 };
    for (int level = 0; level <= top; level++) {
        ok(mt_q8_select(level) == level, "kernels %s selected", level_name[level]);
        int bad = 0, cases = 0, caught = 0;
        for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
            for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
                    for (int beta = 0; beta <= 1; beta++) {
                        int M = Ms[a], N = Ns[b], K = Ks[c];
                        float *X = malloc(sizeof(float) * M * K);
                        float *W = malloc(sizeof(float) * N * K);
                        int8_t *q = malloc((size_t)N * K);
                        float *s = malloc(sizeof(float) * N * (K / MT_Q8_BLOCK));
                        float *Y = malloc(sizeof(float) * M * N);
                        float *y0 = malloc(sizeof(float) * M * N);
                        for (int i = 0; i < M * K; i++)
                            X[i] = frand();
                        fill_weights(W, N, K);
                        for (int i = 0; i < M * N; i++)
                            y0[i] = beta ? 10.0f * frand() : NAN;  /* beta 0 drops nan */
                        mt_q8_pack(q, s, W, (size_t)N, K);
                        memcpy(Y, y0, sizeof(float) * M * N);
                        mt_q8_gemm(M, N, K, X, K, q, s, (float)beta, Y, N);
                        bad += violations(M, N, K, X, W, q, s, (float)beta, y0, Y);
                        /* the fault: the largest scale of the last weight
                         * row doubled (a smaller block's error may hide
                         * under the larger blocks' bound) */
                        float *row_s = s + (size_t)(N - 1) * (K / MT_Q8_BLOCK);
                        int big = 0;
                        for (int i = 1; i < K / MT_Q8_BLOCK; i++)
                            big = row_s[i] > row_s[big] ? i : big;
                        row_s[big] *= 2.0f;
                        memcpy(Y, y0, sizeof(float) * M * N);
                        mt_q8_gemm(M, N, K, X, K, q, s, (float)beta, Y, N);
                        row_s[big] *= 0.5f;
                        caught += violations(M, N, K, X, W, q, s, (float)beta, y0, Y) > 0;
                        cases++;
                        free(X); free(W); free(q); free(s); free(Y); free(y0);
                    }
        int unlike = 0;
        for (int M = 2; M <= 9; M++)
            for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                unlike += rows_unlike_alone(M, Ns[b], 512);
        ok(unlike == 0, "%s: each row of a batch (M 2..9, N 1..64) has the bits it has alone "
           "(%d rows differ)", level_name[level], unlike);
        ok(bad == 0, "%s: %d products (M 1..9, N 1..64, K 32..512, beta 0/1) within the "
               "quantisation bound of the fp32 product (%d outside)", level_name[level], cases, bad);
        /* not every case: where x . (that block's weights) is near 0 by
         * chance, doubling them moves the product little */
        ok(caught * 20 >= cases * 19, "%s: a doubled scale breaks the bound in at least 95%% "
           "of the cases (%d of %d)",
           level_name[level], caught, cases);
    }
    return tap_done();
}
