/* test_f16.c: the half-precision kernels of the CPU backend (cpu_f16.c):
 * the conversions round to nearest even and agree with the IEEE format on
 * every half value, the vector (F16C) kernels agree with the portable
 * scalar ones, and the small-batch f16-weight product equals an fp32
 * product over the same rounded weights; so do the attention kernels
 * (scores and weighted sum over a run of f16 rows). */
#include "tap.h"
#include "decode/cpu_f16.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

int main(void)
{
    static const char *const level_name[] = { "portable", "F16C", "F16C + AVX-512 product" };
    int top = mt_half_init();
    tap_diag("kernels: %s", level_name[top]);

    /* every half: to float and back is the identity (nan stays nan) */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mt_half_to_float((uint16_t)h);
        uint16_t back = mt_half_from_float(f);
        if (isnan(f) ? (back & 0x7c00) != 0x7c00 || !(back & 0x3ff) : back != h)
            bad++;
    }
    is_int(bad, 0, "half -> float -> half is the identity on all 65536 halves");
    ok(mt_half_to_float(0x3c00) == 1.0f && mt_half_to_float(0xc000) == -2.0f &&
       mt_half_to_float(0x7bff) == 65504.0f && mt_half_to_float(0x0001) == ldexpf(1, -24),
       "known values: 1, -2, 65504, smallest subnormal");
    /* ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    is_int(mt_half_from_float(1.0f + ldexpf(1, -11)), 0x3c00, "tie rounds to even (down)");
    is_int(mt_half_from_float(1.0f + 3 * ldexpf(1, -11)), 0x3c02, "tie rounds to even (up)");
    is_int(mt_half_from_float(65520.0f), 0x7c00, "65520 rounds to inf");
    is_int(mt_half_from_float(65519.0f), 0x7bff, "65519 rounds to 65504");

    /* vector kernels == scalar on random values of every magnitude */
    enum { N = 4099 };
    float *src = malloc(N * sizeof *src), *back = malloc(N * sizeof *back);
    uint16_t *h = malloc(N * sizeof *h);
    for (int i = 0; i < N; i++)
        src[i] = ldexpf(frand(), (int)(i % 48) - 30);
    mt_half_pack(h, src, N);
    mt_half_unpack(back, h, N);
    int diff = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        if (h[i] != mt_half_from_float(src[i]) || back[i] != mt_half_to_float(h[i]))
            diff++;
        if (fabsf(src[i]) >= ldexpf(1, -14) && fabsf(src[i]) < 65504.0f) {
            double rel = fabs((double)back[i] - src[i]) / fabs((double)src[i]);
            worst = rel > worst ? rel : worst;
        }
    }
    is_int(diff, 0, "pack/unpack agree with the scalar conversions");
    ok(worst <= ldexp(1, -11), "normal range: relative error %.3e <= u = 2^-11", worst);

    /* gemm: M = 1..9 rows, N odd, K not a multiple of 8; beta 0 and 1 */
    const int K = 203, Nn = 37;
    float *X = malloc(9 * K * sizeof *X), *Wf = malloc((size_t)Nn * K * sizeof *Wf);
    uint16_t *W = malloc((size_t)Nn * K * sizeof *W);
    float *Y = malloc(9 * 40 * sizeof *Y);
    for (int i = 0; i < 9 * K; i++)
        X[i] = frand();
    for (int i = 0; i < Nn * K; i++)
        Wf[i] = frand();
    mt_half_pack(W, Wf, (size_t)Nn * K);
    mt_half_unpack(Wf, W, (size_t)Nn * K);
    /* every kernel level this CPU runs (the wider ones replace the others
     * at run time, so each is checked here) */
    for (int level = top; level >= 0; level--) {
        ok(mt_half_select(level) == level, "kernels of level %d (%s) selected", level,
           level_name[level]);
        double gerr = 0;
        for (int M = 1; M <= 9; M++)
            for (int beta = 0; beta <= 1; beta++) {
                for (int i = 0; i < 9 * 40; i++)
                    Y[i] = beta ? 0.5f : NAN;
                mt_half_gemm(M, Nn, K, X, K, W, (float)beta, Y, 40);
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < Nn; n++) {
                        double s = beta ? 0.5 : 0;
                        for (int k = 0; k < K; k++)
                            s += (double)X[m * K + k] * Wf[n * K + k];
                        double e = fabs(s - Y[m * 40 + n]);
                        gerr = isnan(e) ? 1e9 : (e > gerr ? e : gerr);
                    }
            }
        ok(gerr < 1e-4, "level %d: f16 gemm == fp64 product over the rounded weights (err %.2e)",
           level, gerr);
        /* The CPU backend splits a product's columns in slices, one call
         * per thread (and the slices move with the thread count): each
         * column must come out bit for bit the same whichever piece holds
         * it. */
        int same = 1;
        float *Y2 = malloc(9 * 40 * sizeof *Y2);
        static const int cut[] = { 0, 1, 8, 11, 19, 35, 37 };
        for (int M = 1; Y2 && M <= 9; M++) {
            for (int i = 0; i < 9 * 40; i++)
                Y[i] = Y2[i] = 0.25f;
            mt_half_gemm(M, Nn, K, X, K, W, 1.0f, Y, 40);
            for (int c = 0; c + 1 < (int)(sizeof cut / sizeof cut[0]); c++)
                mt_half_gemm(M, cut[c + 1] - cut[c], K, X, K, W + (size_t)cut[c] * K, 1.0f,
                             Y2 + cut[c], 40);
            same &= memcmp(Y, Y2, 9 * 40 * sizeof *Y) == 0;
        }
        ok(Y2 && same, "level %d: columns in pieces == one call, bit for bit",
           level);
        free(Y2);
    }
    mt_half_select(top);
    /* attention kernels: group 2, hd 72 (not a multiple of 32), 13 rows */
    {
        enum { G = 2, HD = 72, RW = 13, LD = 16 };
        float q[G * HD], kf[RW * HD], sc[G * LD], o[G * HD], o2[G * HD];
        uint16_t k16[RW * HD];
        for (int i = 0; i < G * HD; i++)
            q[i] = frand();
        for (int i = 0; i < RW * HD; i++)
            kf[i] = frand();
        mt_half_pack(k16, kf, RW * HD);
        mt_half_unpack(kf, k16, RW * HD);
        mt_half_scores(G, HD, q, k16, RW, 0.5f, sc, LD);
        double e1 = 0, e2 = 0;
        for (int i = 0; i < G; i++)
            for (int r = 0; r < RW; r++) {
                double d = 0;
                for (int c = 0; c < HD; c++)
                    d += (double)q[i * HD + c] * kf[r * HD + c];
                e1 = fmax(e1, fabs(0.5 * d - sc[i * LD + r]));
            }
        for (int i = 0; i < G * HD; i++)
            o[i] = o2[i] = 0.25f;
        mt_half_weighted_sum(G, HD, sc, LD, k16, RW, o);
        for (int i = 0; i < G; i++)
            for (int c = 0; c < HD; c++) {
                double d = o2[i * HD + c];
                for (int r = 0; r < RW; r++)
                    d += (double)sc[i * LD + r] * kf[r * HD + c];
                e2 = fmax(e2, fabs(d - o[i * HD + c]));
            }
        ok(e1 < 1e-5, "half scores == fp64 over the rounded keys (err %.2e)", e1);
        ok(e2 < 1e-5, "half weighted sum == fp64 over the rounded values (err %.2e)", e2);
    }
    /* the fused run (AVX-512 only): three runs of 16, 5 and 13 rows folded
     * into one softmax, the third run's scores far above the first's so
     * that the reference maximum moves (past MT_SOFTMAX_SLACK) and the sum
     * and output so far are rescaled; against fp64 over the rounded K/V */
    {
        enum { G = 2, HD = 64, NR = 3, MAXR = 16 };
        static const int rows[NR] = { 16, 5, 13 };
        static const float gain[NR] = { 1.0f, 0.5f, 40.0f };
        float q[G * HD], kf[NR][MAXR * HD], vf[NR][MAXR * HD], o[G * HD];
        uint16_t k16[NR][MAXR * HD], v16[NR][MAXR * HD];
        for (int i = 0; i < G * HD; i++)
            q[i] = frand();
        for (int u = 0; u < NR; u++) {
            for (int i = 0; i < MAXR * HD; i++) {
                kf[u][i] = frand() * gain[u] / 8;
                vf[u][i] = frand();
            }
            /* the last run's keys lean towards q: scores well above the rest */
            for (int r = 0; u == NR - 1 && r < rows[u]; r++)
                for (int c = 0; c < HD; c++)
                    kf[u][r * HD + c] += (q[c] + q[HD + c]) * 6;
            mt_half_pack(k16[u], kf[u], MAXR * HD);
            mt_half_unpack(kf[u], k16[u], MAXR * HD);
            mt_half_pack(v16[u], vf[u], MAXR * HD);
            mt_half_unpack(vf[u], v16[u], MAXR * HD);
        }
        const float scale = 0.125f;
        int refused = 0, ran = 1;
        for (int level = top; level >= 0; level--) {
            mt_half_select(level);
            float m[G] = { -INFINITY, -INFINITY }, l[G] = { 0, 0 };
            int rc = mt_half_attend_run(G, HD, q, k16[0], v16[0], 16, scale, m, l, o);
            refused += level < 2 && rc == -1;
            ran &= level < 2 || rc == 0;
        }
        mt_half_select(top);
        ok(refused == (top < 2 ? top + 1 : 2) && ran,
           "fused run: done at the AVX-512 level, refused (-1) below it");
        if (top == 2) {
            float m[G] = { -INFINITY, -INFINITY }, l[G] = { 0, 0 };
            for (int i = 0; i < G * HD; i++)
                o[i] = 0;
            int rc = 0;
            for (int u = 0; u < NR; u++)
                rc |= mt_half_attend_run(G, HD, q, k16[u], v16[u], rows[u], scale, m, l, o);
            double err = 0, moved = INFINITY;
            for (int i = 0; i < G; i++) {
                double sc[3 * MAXR], mx = -INFINITY, first_max = -INFINITY, den = 0;
                int n = 0;
                for (int u = 0; u < NR; u++)
                    for (int r = 0; r < rows[u]; r++, n++) {
                        double d = 0;
                        for (int c = 0; c < HD; c++)
                            d += (double)q[i * HD + c] * kf[u][r * HD + c];
                        sc[n] = d * scale;
                        mx = fmax(mx, sc[n]);
                        if (u == 0)
                            first_max = fmax(first_max, sc[n]);
                    }
                moved = fmin(moved, mx - first_max);
                for (int j = 0; j < n; j++)
                    den += exp(sc[j] - mx);
                for (int c = 0; c < HD; c++) {
                    double num = 0;
                    n = 0;
                    for (int u = 0; u < NR; u++)
                        for (int r = 0; r < rows[u]; r++, n++)
                            num += exp(sc[n] - mx) * vf[u][r * HD + c];
                    err = fmax(err, fabs(num / den - o[i * HD + c] / l[i]));
                }
            }
            ok(rc == 0 && moved > MT_SOFTMAX_SLACK && err < 1e-5,
               "fused run: three runs == fp64 softmax over the rounded K/V, the maximum moved"
               " %.1f (err %.2e)", moved, err);
            ok(mt_half_attend_run(G, 72, q, k16[0], v16[0], 16, scale, m, l, o) == -1 &&
                   mt_half_attend_run(G, HD, q, k16[0], v16[0], 17, scale, m, l, o) == -1,
               "fused run: refused for hd 72 (not a multiple of 16) and 17 rows");
        } else {
            tap_skip("no AVX-512: the fused run is not used on this CPU");
            tap_skip("no AVX-512: the fused run is not used on this CPU");
        }
    }
    free(src); free(back); free(h); free(X); free(Wf); free(W); free(Y);
    return tap_done();
}
