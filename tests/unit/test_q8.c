/* test_q8.c: the 8-bit weights of --weights q8 (cpu_q8.c). Packing rounds
 * each weight to the nearest multiple of its block's scale (max|w| / 127),
 * and every kernel (AVX-512, AVX2, portable) gives the fp32 product of the
 * original weights within the quantisation's own bound:
 *   |y - x . w| <= sum over blocks b of (scale_b / 2) * sum_{k in b} |x_k|
 * plus fp32 summation slack (K * 2^-22 * sum |x_k w_k|). The bound is tight
 * enough to catch a wrong scale: one block's scale doubled fails it (checked
 * here in at least 95% of the cases, and planted in the kernels once by
 * hand). The lane groups' layout (cpu_q8.h's MT_Q8_LANES) at the portable
 * and integer levels: the same bound, and a row's bits whatever the
 * call's rows (1..20) or the row range it takes (cut inside groups). */
#include "tap.h"
#include "decode/cpu_q8.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The layout of a matrix here: the one in force (mt_q8_layout), or
 * groups where none is (cpu_q8.h's mt_q8_layout_for). */
#define LAY(K) mt_q8_layout_for((K), MT_Q8_GROUPS)

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

/* The largest |x| of the activation block of X[k] (its row's block of
 * MT_Q8_BLOCK): the integer kernel's activation scale is this / 127. */
static double act_max(const float *x, int k)
{
    const float *b = x + k / MT_Q8_BLOCK * MT_Q8_BLOCK;
    double big = 0;
    for (int i = 0; i < MT_Q8_BLOCK; i++)
        big = fmax(big, fabs(b[i]));
    return big;
}

/* Products of X [M, K] by the packed W [N, K] outside the bound (see the
 * top; with act, the integer kernel's, plus the activations' rounding):
 * 0 when the kernel is right. Y starts as y0 and beta 1 adds to it. */
static int violations(int M, int N, int K, const float *X, const float *W, const int8_t *q,
                      const float *s, float beta, const float *y0, const float *Y, int act)
{
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = 0, bound = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double x = X[(size_t)m * K + k], w = W[(size_t)n * K + k];
                double sw = s[mt_q8_offset(LAY(K), N, K, n, k / MT_Q8_BLOCK) / MT_Q8_BLOCK];
                ref += x * w;
                bound += fabs(x) * sw * 0.5;
                /* an activation within sx / 2 = max|x| / 254 of its block,
                 * times the weight as read back */
                if (act)
                    bound += act_max(X + (size_t)m * K, k) / 254.0 *
                             fabs(mt_q8_weight(LAY(K), q, N, K, n, k) * sw);
                mag += fabs(x * w);
            }
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
    mt_q8_pack(LAY(K), q, s, W, (size_t)N, K);
    mt_q8_gemm(LAY(K), M, N, K, X, K, q, s, 0.0f, Y, N);
    for (int m = 0; m < M; m++) {
        mt_q8_gemm(LAY(K), 1, N, K, X + (size_t)m * K, K, q, s, 0.0f, y1, N);
        unlike += memcmp(y1, Y + (size_t)m * N, sizeof(float) * N) != 0;
    }
    free(X); free(W); free(q); free(s); free(Y); free(y1);
    return unlike;
}

/* Products of M rows by weight rows lo..hi of a packed [N, K] matrix,
 * pieces [0, 5), [5, 21), [21, N) (groups of 8 taken in part), against
 * the whole call, and the whole call on the matrix packed row by row
 * (the layout before) against it on the grouped one: the count of
 * products whose bits differ (want: 0 for the float kernels, whose every
 * tile sums the same blocks in the same order) and, in *bad, of pieces
 * outside the quantisation bound (any kernel). */
static int pieces_unlike(int M, int N, int K, int act, int *bad)
{
    float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
    int8_t *q = malloc((size_t)N * K), *qr = malloc((size_t)N * K);
    float *s = malloc(sizeof(float) * N * (K / MT_Q8_BLOCK));
    float *sr = malloc(sizeof(float) * N * (K / MT_Q8_BLOCK));
    float *Y = malloc(sizeof(float) * M * N), *Yp = malloc(sizeof(float) * M * N);
    float *Yr = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++)
        X[i] = frand();
    fill_weights(W, N, K);
    mt_q8_layout(0);
    mt_q8_pack(LAY(K), qr, sr, W, (size_t)N, K);
    mt_q8_gemm(LAY(K), M, N, K, X, K, qr, sr, 0.0f, Yr, N);
    mt_q8_layout(1);
    mt_q8_pack(LAY(K), q, s, W, (size_t)N, K);
    mt_q8_gemm(LAY(K), M, N, K, X, K, q, s, 0.0f, Y, N);
    const int cut[4] = { 0, 5, 21, N };
    for (int p = 0; p < 3; p++)
        mt_q8_gemm_rows(LAY(K), M, cut[p], cut[p + 1], N, K, X, K, q, s, 0.0f, Yp + cut[p], N);
    *bad += violations(M, N, K, X, W, q, s, 0.0f, NULL, Yp, act) > 0;
    mt_q8_layout(-1);   /* the kernels' own again */
    int unlike = 0;
    for (int i = 0; i < M * N; i++)
        unlike += memcmp(&Y[i], &Yp[i], sizeof(float)) != 0 || memcmp(&Y[i], &Yr[i], sizeof(float)) != 0;
    free(X); free(W); free(q); free(qr); free(s); free(sr); free(Y); free(Yp); free(Yr);
    return unlike;
}

/* The lane groups' layout (cpu_q8.h's MT_Q8_LANES): products of M rows
 * by a packed [N, K] matrix, whole and by row ranges cut inside lane
 * groups (thread splits of every kind), against each other: the count of
 * products in lane groups whose bits differ (want 0 for every kernel: a
 * lane group's 16 rows are computed together whatever part the call
 * takes) and, in *bad, of calls with a product outside the bound. */
static int lanes_pieces_unlike(int M, int N, int K, int act, int *bad)
{
    float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
    int8_t *q = malloc((size_t)N * K);
    float *s = malloc(sizeof(float) * N * (K / MT_Q8_BLOCK));
    float *Y = malloc(sizeof(float) * M * N), *Yp = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++)
        X[i] = frand();
    fill_weights(W, N, K);
    mt_q8_pack(LAY(K), q, s, W, (size_t)N, K);
    mt_q8_gemm(LAY(K), M, N, K, X, K, q, s, 0.0f, Y, N);
    *bad += violations(M, N, K, X, W, q, s, 0.0f, NULL, Y, act) > 0;
    /* cuts: in a group, across a group, at group ends, one row, the rest */
    static const int cuts[][6] = { { 0, 5, 21, -1 }, { 0, 1, 2, 17, 31, -1 },
                                   { 0, 16, 32, 33, -1 }, { 0, 15, -1 } };
    int unlike = 0;
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        memset(Yp, 0, sizeof(float) * M * N);
        for (int p = 1, lo = 0; lo < N; p++) {
            int hi = cuts[c][p] < 0 || cuts[c][p] > N ? N : cuts[c][p];
            if (hi > lo)
                mt_q8_gemm_rows(LAY(K), M, lo, hi, N, K, X, K, q, s, 0.0f, Yp + lo, N);
            lo = hi > lo ? hi : lo;
        }
        *bad += violations(M, N, K, X, W, q, s, 0.0f, NULL, Yp, act) > 0;
        /* the rows in lane groups; those past the last whole group are
         * the row-by-row kernel's, whose integer tiles depend on the run
         * (the bound alone holds there) */
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N / MT_Q8_LANE * MT_Q8_LANE; n++)
                unlike += memcmp(Y + (size_t)m * N + n, Yp + (size_t)m * N + n, sizeof(float)) != 0;
    }
    free(X); free(W); free(q); free(s); free(Y); free(Yp);
    return unlike;
}

/* One product M x N x K (beta 0 or 1) with the selected kernels: adds 1
 * to *bad where a product is outside the bound, and 1 to *caught where the
 * planted fault (the largest scale of the last weight row doubled: a
 * smaller block's error may hide under the larger blocks' bound) is. */
static void one_case(int M, int N, int K, int beta, int act, int *bad, int *caught)
{
    float *X = malloc(sizeof(float) * M * K);
    float *W = malloc(sizeof(float) * N * K);
    int8_t *q = malloc((size_t)N * K);
    float *s = malloc(sizeof(float) * N * (K / MT_Q8_BLOCK));
    float *Y = malloc(sizeof(float) * M * N);
    float *y0 = malloc(sizeof(float) * M * N);
    if (!X || !W || !q || !s || !Y || !y0) {
        (*bad)++;
        goto out;
    }
    for (int i = 0; i < M * K; i++)
        X[i] = frand();
    fill_weights(W, N, K);
    for (int i = 0; i < M * N; i++)
        y0[i] = beta ? 10.0f * frand() : NAN;  /* beta 0 drops nan */
    mt_q8_pack(LAY(K), q, s, W, (size_t)N, K);
    memcpy(Y, y0, sizeof(float) * M * N);
    mt_q8_gemm(LAY(K), M, N, K, X, K, q, s, (float)beta, Y, N);
    *bad += violations(M, N, K, X, W, q, s, (float)beta, y0, Y, act) > 0;
    size_t big = mt_q8_offset(LAY(K), N, K, N - 1, 0) / MT_Q8_BLOCK;   /* the last row's */
    for (int i = 1; i < K / MT_Q8_BLOCK; i++) {
        size_t at = mt_q8_offset(LAY(K), N, K, N - 1, i) / MT_Q8_BLOCK;
        big = s[at] > s[big] ? at : big;
    }
    float *row_s = s;
    row_s[big] *= 2.0f;
    memcpy(Y, y0, sizeof(float) * M * N);
    mt_q8_gemm(LAY(K), M, N, K, X, K, q, s, (float)beta, Y, N);
    row_s[big] *= 0.5f;
    *caught += violations(M, N, K, X, W, q, s, (float)beta, y0, Y, act) > 0;
out:
    free(X); free(W); free(q); free(s); free(Y); free(y0);
}

int main(void)
{
    static const char *const level_name[] = { "portable", "AVX2/FMA", "AVX-512",
                                              "AVX-512 VNNI (integer)" };
    int top = mt_q8_init();
    mt_q8_vnni_rows(1);   /* the integer kernel at every row count */
    tap_diag("kernels: %s", level_name[top]);

    /* the layout asked for: where the integer kernel serves every call,
     * lane groups or groups of 8 (rows where K is not a multiple of 64) as
     * asked; elsewhere never lane groups */
    if (getenv("MT_Q8_LANES") || getenv("MT_Q8_ROWMAJOR")) {
        tap_skip("MT_Q8_LANES or MT_Q8_ROWMAJOR set: the layouts are the environment's");
    } else if (mt_q8_every_row()) {
        ok(mt_q8_layout_for(512, MT_Q8_LANES) == MT_Q8_LANES &&
           mt_q8_layout_for(96, MT_Q8_LANES) == MT_Q8_LANES &&
           mt_q8_layout_for(512, MT_Q8_GROUPS) == MT_Q8_GROUPS &&
           mt_q8_layout_for(96, MT_Q8_GROUPS) == MT_Q8_ROWS,
           "the layout asked for: lane groups, or groups where K allows");
    } else {
        ok(mt_q8_layout_for(512, MT_Q8_LANES) == mt_q8_layout_for(512, MT_Q8_GROUPS) &&
           mt_q8_layout_for(512, MT_Q8_GROUPS) != MT_Q8_LANES,
           "no lane groups where the integer kernel does not serve every call");
    }

    /* packing: q * scale within scale / 2 of w, |q| <= 127, max reads back */
    enum { PN = 9, PK = 128 };
    float *pw = malloc(sizeof(float) * PN * PK);
    int8_t *pq = malloc(PN * PK);
    float *ps = malloc(sizeof(float) * PN * PK / MT_Q8_BLOCK);
    fill_weights(pw, PN, PK);
    memset(pw + 2 * MT_Q8_BLOCK, 0, MT_Q8_BLOCK * sizeof(float));   /* a zero block */
    ok(mt_q8_pack(LAY(PK), pq, ps, pw, PN, PK) == 0, "pack a finite matrix");
    int far = 0, hit_max = 0;
    for (int i = 0; i < PN * PK; i++) {
        float s = ps[mt_q8_offset(LAY(PK), PN, PK, i / PK, i % PK / MT_Q8_BLOCK) / MT_Q8_BLOCK];
        int v = mt_q8_weight(LAY(PK), pq, PN, PK, i / PK, i % PK);
        if (!(fabsf(v * s - pw[i]) <= s * 0.5f * (1 + 1e-6f)) || v < -127 || v > 127)
            far++;
        hit_max += v == 127 || v == -127;
    }
    is_int(far, 0, "every weight reads back within scale/2, bytes in -127..127");
    ok(hit_max >= PN * PK / MT_Q8_BLOCK - 1, "each nonzero block's largest weight is +-127");
    size_t z = mt_q8_offset(LAY(PK), PN, PK, 0, 2);   /* row 0's block 2 */
    ok(ps[z / MT_Q8_BLOCK] == 0.0f && mt_q8_weight(LAY(PK), pq, PN, PK, 0, 2 * MT_Q8_BLOCK) == 0,
       "a zero block: scale 0, bytes 0");
    /* the layout: rows 0..7 a group, block pairs of 8 rows' 64 bytes;
     * row 8 (past the last whole group) row by row; K = 96 (not a
     * multiple of 64) row by row */
    mt_q8_layout(MT_Q8_GROUPS);   /* whatever the kernels' (MT_Q8_LANES=1) */
    ok(mt_q8_offset(LAY(PK), PN, PK, 0, 1) == 32 && mt_q8_offset(LAY(PK), PN, PK, 1, 0) == 64 &&
       mt_q8_offset(LAY(PK), PN, PK, 7, 3) == 512 + 7 * 64 + 32 && mt_q8_offset(LAY(PK), PN, PK, 8, 1) == 8 * PK + 32 &&
       mt_q8_offset(LAY(96), PN, 96, 1, 0) == 96, "the grouped layout (8 rows, block pairs)");
    /* lane groups: N 40 (rows 0..31 two groups, 32.. row by row), K 128:
     * row 17's weight 6 in group 1's vector 1, lane 1; its block 2's
     * scale at 16 * 128 / 32 + 2 * 16 + 1; row 33 row by row; the bytes
     * read back as packed */
    mt_q8_layout(MT_Q8_LANES);
    ok(mt_q8_byte(LAY(PK), 40, PK, 17, 6) == 16 * PK + 64 + 4 + 2 && mt_q8_byte(LAY(PK), 40, PK, 0, 4) == 64 &&
       mt_q8_offset(LAY(PK), 40, PK, 17, 2) / MT_Q8_BLOCK == 16 * PK / 32 + 2 * 16 + 1 &&
       mt_q8_byte(LAY(PK), 40, PK, 33, 40) == 33 * PK + 40 && mt_q8_in_lanes(LAY(PK), 40, PK, 31) &&
       !mt_q8_in_lanes(LAY(PK), 40, PK, 32), "the lane groups' layout (16 rows x 4 bytes a vector)");
    {
        float lw[40 * PK], ls[40 * PK / MT_Q8_BLOCK];
        int8_t lq[40 * PK];
        fill_weights(lw, 40, PK);
        mt_q8_pack(LAY(PK), lq, ls, lw, 40, PK);
        int lfar = 0;
        for (int i = 0; i < 40 * PK; i++) {
            float sc = ls[mt_q8_offset(LAY(PK), 40, PK, i / PK, i % PK / MT_Q8_BLOCK) / MT_Q8_BLOCK];
            lfar += !(fabsf(mt_q8_weight(LAY(PK), lq, 40, PK, i / PK, i % PK) * sc - lw[i]) <=
                      sc * 0.5f * (1 + 1e-6f));
        }
        ok(lfar == 0 && (uint8_t)lq[mt_q8_byte(LAY(PK), 40, PK, 0, 0)] ==
                            (uint8_t)(mt_q8_weight(LAY(PK), lq, 40, PK, 0, 0) + 128),
           "lane groups: every weight reads back within scale/2, stored + 128 (%d far)", lfar);
    }
    mt_q8_layout(-1);
    pw[5] = INFINITY;
    ok(mt_q8_pack(LAY(PK), pq, ps, pw, PN, PK) == -1, "a matrix with inf is refused");
    pw[5] = NAN;
    ok(mt_q8_pack(LAY(PK), pq, ps, pw, PN, PK) == -1, "a matrix with nan is refused");
    free(pw); free(pq); free(ps);

    static const int Ms[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, Ns[] = { 1, 7, 37, 64 }, Ks[] = { 32, 96, 512 };
    for (int level = 0; level <= top; level++) {
        ok(mt_q8_select(level) == level, "kernels %s selected", level_name[level]);
        int bad = 0, cases = 0, caught = 0;
        for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
            for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
                    for (int beta = 0; beta <= 1; beta++, cases++)
                        one_case(Ms[a], Ns[b], Ks[c], beta, level == 3, &bad, &caught);
        /* the integer kernel quantises the activations a chunk of columns
         * and a group of 64 rows at a time: wide rows (odd block count),
         * many rows */
        static const int wide[][3] = { { 1, 9, 33 * 1024 + 32 }, { 9, 5, 4128 }, { 70, 3, 4128 } };
        for (size_t w = 0; w < sizeof wide / sizeof *wide; w++, cases++)
            one_case(wide[w][0], wide[w][1], wide[w][2], (int)(w & 1), level == 3, &bad, &caught);
        /* every kernel: a row's bits whatever the batch (the integer
         * kernel's chunks along K are the same at every row count, and one
         * row is tiled as a batch's: cpu_q8_vnni.c); K 4160: three chunks */
        {
            int unlike = 0;
            for (int M = 2; M <= 9; M++)
                for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                    unlike += rows_unlike_alone(M, Ns[b], 512) + rows_unlike_alone(M, Ns[b], 4160);
            ok(unlike == 0, "%s: each row of a batch (M 2..9, N 1..64, K 512, 4160) has the bits "
               "it has alone (%d rows differ)", level_name[level], unlike);
        }
        int pbad = 0, punlike = 0;
        for (int M = 1; M <= 9; M += 2)
            for (int K = 64; K <= 576; K += 512)   /* grouped (64 | K) */
                punlike += pieces_unlike(M, 37, K, level == 3, &pbad);
        punlike += pieces_unlike(4, 37, 96, level == 3, &pbad);   /* row by row (K 96) */
        ok(pbad == 0, "%s: row ranges of a grouped matrix (cut inside groups) within the bound",
           level_name[level]);
        if (level < 3)
            ok(punlike == 0, "%s: row ranges and the row-by-row layout give the whole call's "
               "bits (%d differ)", level_name[level], punlike);
        ok(bad == 0, "%s: %d products (M 1..70, N 1..64, K 32..33824, beta 0/1) within the "
               "quantisation bound of the fp32 product (%d outside)", level_name[level], cases, bad);
        /* not every case: where x . (that block's weights) is near 0 by
         * chance, doubling them moves the product little */
        ok(caught * 20 >= cases * 19, "%s: a doubled scale breaks the bound in at least 95%% "
           "of the cases (%d of %d)",
           level_name[level], caught, cases);
        /* the lane groups' layout: the integer kernel's, read by the
         * others through a portable loop (not AVX2/AVX-512: slow and not
         * theirs) */
        if (level == 0 || level == 3) {
            mt_q8_layout(MT_Q8_LANES);
            int lbad = 0, lcases = 0, lcaught = 0, lunlike = 0, lalone = 0;
            static const int LNs[] = { 16, 37, 64 }, LKs[] = { 32, 96, 512 };
            for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
                for (size_t b = 0; b < sizeof LNs / sizeof *LNs; b++)
                    for (size_t c = 0; c < sizeof LKs / sizeof *LKs; c++)
                        for (int beta = 0; beta <= 1; beta++, lcases++)
                            one_case(Ms[a], LNs[b], LKs[c], beta, level == 3, &lbad, &lcaught);
            for (size_t w = 0; w < sizeof wide / sizeof *wide; w++, lcases++)
                one_case(wide[w][0], wide[w][1] + 32, wide[w][2], (int)(w & 1), level == 3,
                         &lbad, &lcaught);
            ok(lbad == 0, "%s, lane groups: %d products (M 1..70, N 16..64, K 32..33824, beta "
               "0/1) within the quantisation bound (%d outside)", level_name[level], lcases, lbad);
            ok(lcaught * 20 >= lcases * 19, "%s, lane groups: a doubled scale breaks the bound "
               "in at least 95%% of the cases (%d of %d)", level_name[level], lcaught, lcases);
            for (int M = 1; M <= 9; M += 4)
                for (int K = 96; K <= 4160; K += 4064)   /* K 96, 4160: 3 chunks */
                    lunlike += lanes_pieces_unlike(M, 40, K, level == 3, &lbad);
            lunlike += lanes_pieces_unlike(18, 37, 512, level == 3, &lbad);
            ok(lunlike == 0 && lbad == 0, "%s, lane groups: row ranges cut inside and across "
               "groups give the whole call's bits (%d rows differ, %d calls outside the bound)",
               level_name[level], lunlike, lbad);
            for (int M = 2; M <= (level == 3 ? 20 : 5); M++)
                for (size_t b = 0; b < sizeof LNs / sizeof *LNs; b++)
                    lalone += rows_unlike_alone(M, LNs[b], 512) +
                              rows_unlike_alone(M, LNs[b], 4128);
            ok(lalone == 0, "%s, lane groups: each row of a batch (M 2..20, N 16..64, K 512, "
               "4128) has the bits it has alone (%d rows differ)", level_name[level], lalone);
            mt_q8_layout(-1);
        }
        /* an activation not finite: its row's products are not finite
         * (no scale holds it in the integer kernel), the others are */
        enum { FM = 3, FN = 5, FK = 64 };
        float X[FM * FK], W[FN * FK], s[FN * FK / MT_Q8_BLOCK], Y[FM * FN];
        int8_t q[FN * FK];
        for (int i = 0; i < FM * FK; i++)
            X[i] = frand();
        fill_weights(W, FN, FK);
        mt_q8_pack(LAY(FK), q, s, W, FN, FK);
        X[FK + 40] = INFINITY;
        X[2 * FK + 3] = NAN;
        mt_q8_gemm(LAY(FK), FM, FN, FK, X, FK, q, s, 0.0f, Y, FN);
        int fin0 = 1, nonfin12 = 1;
        for (int n = 0; n < FN; n++) {
            fin0 &= isfinite(Y[n]) != 0;
            nonfin12 &= !isfinite(Y[FN + n]) && !isfinite(Y[2 * FN + n]);
        }
        ok(fin0 && nonfin12, "%s: an inf or nan activation makes its row's products not "
           "finite, and no other row's", level_name[level]);
    }
    return tap_done();
}
