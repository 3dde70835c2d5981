/* cpu_q8.c: the 8-bit weights of --weights q8 (see cpu_q8.h): packing and
 * the small-batch product. Three kernels: AVX-512 (16 weights a vector),
 * AVX2/FMA (8 a vector), portable C; mt_q8_init() picks one from the CPU,
 * as cpu_f16.c does. Each reads a block's 32 bytes and its scale once,
 * turns them into fp32 weights in registers (sign-extend, convert,
 * multiply by the scale) and uses each for all the call's rows; the
 * products accumulate in fp32, so the kernels agree to fp32 summation
 * order and differ from the fp32 product by the quantisation alone.
 * Rows in lane groups (cpu_q8.h's MT_Q8_LANES, the integer kernel's
 * layout) the float levels read through a portable loop (gemm_lanes_c):
 * correct, not fast; that layout is only chosen where the integer kernel
 * serves every call.
 */
#include "decode/cpu_q8.h"
#include "decode/cpu_q8_vnni.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
#define MT_Q8_X86 1
#include <immintrin.h>
#endif

int mt_q8_layout_for(int K, int want)
{
    mt_q8_init();   /* the layout follows the kernels */
    return mt_q8_tiled(K, want);
}

int mt_q8_pack(int L, int8_t *q, float *scale, const float *src, size_t N, int K)
{
    const int nb = K / MT_Q8_BLOCK;
    for (size_t i = 0; i < N * (size_t)K; i++)
        if (!isfinite(src[i]))
            return -1;
    for (size_t n = 0; n < N; n++)
        for (int b = 0; b < nb; b++) {
            const float *w = src + n * K + (size_t)b * MT_Q8_BLOCK;
            const size_t o = mt_q8_offset(L, N, K, n, b);
            /* lane groups: 4 bytes a vector of 64, stored + 128 */
            const int lanes = mt_q8_in_lanes(L, N, K, n);
            int8_t *d = q + (lanes ? mt_q8_byte(L, N, K, n, b * MT_Q8_BLOCK) : o);
            const int step = lanes ? 64 : 4, flip = lanes ? 0x80 : 0;
            float big = 0.0f;
            for (int i = 0; i < MT_Q8_BLOCK; i++)
                big = fmaxf(big, fabsf(w[i]));
            float s = big / 127.0f;
            /* a block of zeros keeps scale 0 and bytes 0; a scale that
             * underflows to 0 likewise (its weights read back as 0, off by
             * less than 127 * FLT_TRUE_MIN) */
            float inv = s > 0.0f ? 1.0f / s : 0.0f;
            scale[o / MT_Q8_BLOCK] = s;
            for (int i = 0; i < MT_Q8_BLOCK; i++) {
                long v = lrintf(w[i] * inv);   /* nearest, ties to even */
                v = v > 127 ? 127 : v < -127 ? -127 : v;
                d[i / 4 * step + i % 4] = (int8_t)(uint8_t)((uint8_t)(int8_t)v ^ flip);
            }
        }
    return 0;
}

int mt_q8_take(mt_q8_mat *d, int want, const float *src, size_t N, int K, int8_t **q, float **s)
{
    const int L = mt_q8_layout_for(K, want);
    *d = (mt_q8_mat){ NULL, NULL, (int)N, L };
    if (K % MT_Q8_BLOCK != 0 || mt_q8_pack(L, *q, *s, src, N, K) != 0)
        return -1;
    d->q = *q;
    d->s = *s;
    *q += N * (size_t)K;
    *s += N * (size_t)(K / MT_Q8_BLOCK);
    return 0;
}

/* ---- portable ---------------------------------------------------------- */

/* The reference: each weight read back as q * scale, one dot product per
 * (row, weight row) in fp32. */
static void gemm_c(int M, int N, int K, const float *X, int ldx, const int8_t *q,
                   const float *scale, int rs, int ps, float beta, float *Y, int ldy)
{
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) {
            const float *x = X + (size_t)m * ldx;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const size_t o = (size_t)n * rs + (size_t)(k / 64) * ps + k % 64;
                acc += x[k] * ((float)q[o] * scale[o / MT_Q8_BLOCK]);
            }
            float *y = Y + (size_t)m * ldy + n;
            *y = beta == 0.0f ? acc : *y + acc;   /* beta 0 drops nan/inf too */
        }
}

/* Rows of a lane group (cpu_q8.h; for the float levels, which have no
 * kernel of their own for it: the layout is the integer kernel's), from
 * lane `lane` of the group at q, s on; as gemm_c, one dot product per
 * (row, weight row) in fp32, weights in k order. */
static void gemm_lanes_c(int M, int Nr, int K, const float *X, int ldx, const int8_t *q,
                         const float *scale, int lane, float beta, float *Y, int ldy)
{
    for (int n = 0; n < Nr; n++) {
        const int l = lane + n;
        const int8_t *g = q + (size_t)(l / MT_Q8_LANE) * MT_Q8_LANE * K;
        const float *sg = scale + (size_t)(l / MT_Q8_LANE) * MT_Q8_LANE * K / MT_Q8_BLOCK;
        const int r = l % MT_Q8_LANE;
        for (int m = 0; m < M; m++) {
            const float *x = X + (size_t)m * ldx;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const int w = (int)(uint8_t)g[(size_t)(k / 4) * 64 + r * 4 + k % 4] - 128;
                acc += x[k] * ((float)w * sg[k / MT_Q8_BLOCK * MT_Q8_LANE + r]);
            }
            float *y = Y + (size_t)m * ldy + n;
            *y = beta == 0.0f ? acc : *y + acc;
        }
    }
}

#ifdef MT_Q8_X86

/* The weights a call reads are one stream (tile after tile); each block
 * step asks for the bytes PREFETCH_AHEAD further on, as cpu_f16.c does
 * (the same distance: see its comment). */
enum { PREFETCH_AHEAD = 8192 };

static inline const char *ahead(const int8_t *w, const int8_t *end)
{
    return end - w > PREFETCH_AHEAD ? (const char *)w + PREFETCH_AHEAD : NULL;
}

/* ---- AVX-512 ------------------------------------------------------------- */

#define Q8_512 __attribute__((target("avx512f,avx2,fma")))

/* 16 bytes of weights as 16 fp32 weights times s. */
Q8_512 static inline __attribute__((always_inline)) __m512 w16(const int8_t *p, __m512 s)
{
    return _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))), s);
}

/* One MR x NR tile: rows 0..MR of X against weight rows 0..NR, a block of
 * 32 at a time (two vectors a weight row, made once, used by all MR rows).
 * MR, NR constants at each call (always_inline): the accumulators stay in
 * registers. */
Q8_512 static inline __attribute__((always_inline)) void
tile512(const int MR, const int NR, int K, const float *X, int ldx, const int8_t *q,
        const float *scale, int rs, int ps, float beta, float *Y, int ldy, const char *pf,
        int pstep)
{
    const int nb = K / MT_Q8_BLOCK;
    __m512 acc[4][8];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NR; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const int k = b * MT_Q8_BLOCK;
        if (pf) {
            for (int o = 0; o < pstep; o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T0);
            /* and their scales, which mirror the bytes (cpu_q8.h) */
            _mm_prefetch((const char *)(scale + (pf - (const char *)q) / MT_Q8_BLOCK), _MM_HINT_T0);
            pf += pstep;
        }
        /* block b of weight row j: at q + j*rs + (b/2)*ps + (b%2)*32 */
        const size_t o = (size_t)(b / 2) * ps + (size_t)(b % 2) * MT_Q8_BLOCK;
        if (NR == 8 && MR > 1) {
            /* a whole group by 2 or 3 rows: each weight row's vectors
             * used at once (the accumulators take most registers) */
            __m512 x0[4], x1[4];
            _Pragma("GCC unroll 4")
            for (int i = 0; i < MR; i++) {
                x0[i] = _mm512_loadu_ps(X + (size_t)i * ldx + k);
                x1[i] = _mm512_loadu_ps(X + (size_t)i * ldx + k + 16);
            }
            _Pragma("GCC unroll 8")
            for (int j = 0; j < NR; j++) {
                const size_t oj = o + (size_t)j * rs;
                __m512 s = _mm512_set1_ps(scale[oj / MT_Q8_BLOCK]);
                __m512 v0 = w16(q + oj, s), v1 = w16(q + oj + 16, s);
                _Pragma("GCC unroll 4")
                for (int i = 0; i < MR; i++)
                    acc[i][j] = _mm512_fmadd_ps(x1[i], v1, _mm512_fmadd_ps(x0[i], v0, acc[i][j]));
            }
            continue;
        }
        __m512 w0[8], w1[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NR; j++) {
            const size_t oj = o + (size_t)j * rs;
            __m512 s = _mm512_set1_ps(scale[oj / MT_Q8_BLOCK]);
            w0[j] = w16(q + oj, s);
            w1[j] = w16(q + oj + 16, s);
        }
        _Pragma("GCC unroll 4")
        for (int i = 0; i < MR; i++) {
            __m512 x0 = _mm512_loadu_ps(X + (size_t)i * ldx + k);
            __m512 x1 = _mm512_loadu_ps(X + (size_t)i * ldx + k + 16);
            _Pragma("GCC unroll 8")
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm512_fmadd_ps(x1, w1[j], _mm512_fmadd_ps(x0, w0[j], acc[i][j]));
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float s = _mm512_reduce_add_ps(acc[i][j]);
            float *y = Y + (size_t)i * ldy + j;
            *y = beta == 0.0f ? s : *y + s;
        }
}

/* ---- AVX2 / FMA ---------------------------------------------------------- */

#define Q8_256 __attribute__((target("avx2,fma")))

Q8_256 static inline __attribute__((always_inline)) float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* As tile512, eight weights a vector: a block is four steps of eight,
 * each weight row's scale broadcast once a block. */
Q8_256 static inline __attribute__((always_inline)) void
tile256(const int MR, const int NR, int K, const float *X, int ldx, const int8_t *q,
        const float *scale, int rs, int ps, float beta, float *Y, int ldy, const char *pf,
        int pstep)
{
    const int nb = K / MT_Q8_BLOCK;
    __m256 acc[4][4];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4")
        for (int j = 0; j < NR; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        if (pf) {
            for (int o = 0; o < pstep; o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T0);
            /* and their scales, which mirror the bytes (cpu_q8.h) */
            _mm_prefetch((const char *)(scale + (pf - (const char *)q) / MT_Q8_BLOCK), _MM_HINT_T0);
            pf += pstep;
        }
        const size_t o = (size_t)(b / 2) * ps + (size_t)(b % 2) * MT_Q8_BLOCK;
        __m256 s[4];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < NR; j++)
            s[j] = _mm256_set1_ps(scale[(o + (size_t)j * rs) / MT_Q8_BLOCK]);
        _Pragma("GCC unroll 4")
        for (int k = b * MT_Q8_BLOCK; k < (b + 1) * MT_Q8_BLOCK; k += 8) {
            __m256 w[4];
            _Pragma("GCC unroll 4")
            for (int j = 0; j < NR; j++)
                w[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                         (const __m128i *)(q + o + (size_t)j * rs +
                                                           (k - b * MT_Q8_BLOCK))))),
                                     s[j]);
            _Pragma("GCC unroll 4")
            for (int i = 0; i < MR; i++) {
                __m256 x = _mm256_loadu_ps(X + (size_t)i * ldx + k);
                _Pragma("GCC unroll 4")
                for (int j = 0; j < NR; j++)
                    acc[i][j] = _mm256_fmadd_ps(x, w[j], acc[i][j]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float v = hsum8(acc[i][j]);
            float *y = Y + (size_t)i * ldy + j;
            *y = beta == 0.0f ? v : *y + v;
        }
}

/* The product over a run of Nr weight rows (row n's bytes at q + n*rs,
 * its block pairs ps apart: cpu_q8.h's layout, a group of MT_Q8_GROUP or
 * rows one after the other) by tiles: one row takes NR1 weight rows a
 * tile (independent FMA chains, streams of loads in flight), two or three
 * rows NR2; four rows and more NR4 weight rows a tile, the rows in blocks
 * of 4 and the last 1 to 3 rows as one block, each tile's weights decoded
 * once and used by the blocks while they are in L1; what is left (Nr not
 * a multiple of the tile) by 2 weight rows, then one by one. Every (row,
 * weight row) sums its blocks in the same order in every tile, so the
 * bits do not depend on M, on the tiling or on the layout (test_q8). The
 * AVX-512 kernel's four rows once took 4 x 2 tiles (and a leftover row
 * 1 x 2 each): a call of 4 rows cost 2.2 times one of 3 (bench/RESULTS.md,
 * "stt-1b at 4 streams"). Rows one after the other (rs = K) are separate
 * streams that the hardware does not fetch ahead far enough: a software
 * prefetch PREFETCH_AHEAD bytes on; a group is one stream, fetched ahead
 * by the hardware. */
/* Where the tile of weight rows from n prefetches, and how many bytes a
 * block: rows one after the other, PREFETCH_AHEAD bytes on in the
 * stream of rows, a tile's NR * 32 bytes a block; a group (one stream,
 * ps / 2 bytes a block for its 8 rows), its first tile only (the others
 * read what it fetched), PREFETCH_AHEAD bytes on: into the next group,
 * which follows in memory (a prefetch past the call's weights is only
 * wasted, never a fault). */
#define PF_AT(n)                                                                               \
    (stream ? ahead(q + (size_t)(n) * rs, end)                                                 \
            : (n) == 0 && Nr == MT_Q8_GROUP ? (const char *)q + PREFETCH_AHEAD : NULL)
#define PF_STEP(NR) (stream ? (NR) * MT_Q8_BLOCK : ps / 2)

#define Q8_RUN(NAME, ATTR, TILE, NR1, NR2, NR4, G23)                                              \
    ATTR static void NAME(int M, int Nr, int K, const float *X, int ldx, const int8_t *q,      \
                          const float *sc, int rs, int ps, float beta, float *Y, int ldy)      \
    {                                                                                          \
        const int stream = ps == 64;   /* rows one after the other */                          \
        const int8_t *end = q + (size_t)Nr * K;                                                \
        const int ss = rs / MT_Q8_BLOCK;   /* scales from one row to the next */               \
        int n = 0;                                                                             \
        if (M == 1)                                                                            \
            for (; n + NR1 <= Nr; n += NR1)                                                    \
                TILE(1, NR1, K, X, ldx, q + (size_t)n * rs, sc + (size_t)n * ss, rs, ps, beta, \
                     Y + n, ldy, PF_AT(n), PF_STEP(NR1));                                      \
        if (G23 && !stream && Nr == MT_Q8_GROUP && (M == 2 || M == 3)) {                       \
            const char *pf = PF_AT(0);   /* a group whole: one tile */                         \
            if (M == 2)                                                                        \
                TILE(2, 8, K, X, ldx, q, sc, rs, ps, beta, Y, ldy, pf, PF_STEP(8));            \
            else                                                                               \
                TILE(3, 8, K, X, ldx, q, sc, rs, ps, beta, Y, ldy, pf, PF_STEP(8));            \
            n = MT_Q8_GROUP;                                                                   \
        }                                                                                      \
        if (M == 2 || M == 3)                                                                  \
            for (; n + NR2 <= Nr; n += NR2) {                                                  \
                const int8_t *w = q + (size_t)n * rs;                                          \
                const float *s = sc + (size_t)n * ss;                                          \
                const char *pf = PF_AT(n);                                                     \
                if (M == 2)                                                                    \
                    TILE(2, NR2, K, X, ldx, w, s, rs, ps, beta, Y + n, ldy, pf, PF_STEP(NR2)); \
                else                                                                           \
                    TILE(3, NR2, K, X, ldx, w, s, rs, ps, beta, Y + n, ldy, pf, PF_STEP(NR2)); \
            }                                                                                  \
        if (M >= 4)                                                                            \
            for (; n + NR4 <= Nr; n += NR4) {                                                  \
                const int8_t *w = q + (size_t)n * rs;                                          \
                const float *s = sc + (size_t)n * ss;                                          \
                const char *pf = PF_AT(n);                                                     \
                int m = 0;                                                                     \
                for (; m + 4 <= M; m += 4, pf = NULL)                                          \
                    TILE(4, NR4, K, X + (size_t)m * ldx, ldx, w, s, rs, ps, beta,              \
                         Y + (size_t)m * ldy + n, ldy, pf, PF_STEP(NR4));                      \
                const float *xm = X + (size_t)m * ldx;                                         \
                float *ym = Y + (size_t)m * ldy + n;                                           \
                if (M - m == 3)                                                                \
                    TILE(3, NR4, K, xm, ldx, w, s, rs, ps, beta, ym, ldy, NULL, 0);            \
                else if (M - m == 2)                                                           \
                    TILE(2, NR4, K, xm, ldx, w, s, rs, ps, beta, ym, ldy, NULL, 0);            \
                else if (M - m == 1)                                                           \
                    TILE(1, NR4, K, xm, ldx, w, s, rs, ps, beta, ym, ldy, NULL, 0);            \
            }                                                                                  \
        for (; n + 2 <= Nr; n += 2) {                                                          \
            const int8_t *w = q + (size_t)n * rs;                                              \
            const float *s = sc + (size_t)n * ss;                                              \
            const char *pf = PF_AT(n);                                                         \
            int m = 0;                                                                         \
            for (; m + 4 <= M; m += 4, pf = NULL)                                              \
                TILE(4, 2, K, X + (size_t)m * ldx, ldx, w, s, rs, ps, beta,                    \
                     Y + (size_t)m * ldy + n, ldy, pf, PF_STEP(2));                            \
            for (; m < M; m++, pf = NULL)                                                      \
                TILE(1, 2, K, X + (size_t)m * ldx, ldx, w, s, rs, ps, beta,                    \
                     Y + (size_t)m * ldy + n, ldy, pf, PF_STEP(2));                            \
        }                                                                                      \
        for (; n < Nr; n++)                                                                    \
            for (int m = 0; m < M; m++)                                                        \
                TILE(1, 1, K, X + (size_t)m * ldx, ldx, q + (size_t)n * rs,                    \
                     sc + (size_t)n * ss, rs, ps, beta, Y + (size_t)m * ldy + n, ldy, NULL, 0); \
    }

Q8_RUN(run512, Q8_512, tile512, 8, 4, 4, 1)
Q8_RUN(run256, Q8_256, tile256, 4, 2, 2, 0)

#endif

/* ---- dispatch ------------------------------------------------------------ */

typedef void (*q8_run_fn)(int, int, int, const float *, int, const int8_t *, const float *,
                          int, int, float, float *, int);
/* Below vnni_rows rows the integer product hands the call to the best
 * float kernel; by default it takes every call. On the layout before
 * (rows one after the other) the float kernel led at 1-4 rows (lead,
 * 2026-12-06T21:10Z: 16.5, 20.8, 19.1, 15.8 GB/s against 15.8, 14.7,
 * 13.7, 13.2 on one core). On the grouped layout (cpu_q8.h), mt-benchq8
 * -t 1 -r 21 (256 MiB, 2048 x 2048, both layouts and both kernels
 * alternating in one process; 2026-12-07T00:04Z, a shared machine at load
 * 3.7-3.9), medians of three runs, GB/s: 1 row 19.4 integer on groups
 * against 17.6 float on rows; 2 rows 19.6 against 18.6; 4 rows 18.1
 * against 13.5; 8 rows 8.6 against 6.0 (integer on rows). Two threads
 * (00:25Z, load 1.5): 38, 37, 31 and 19 GB/s at 1, 2, 4 and 8 rows
 * against 34, 31, 24 (float, rows) and 15 (integer, rows);
 * bench/RESULTS.md, "The q8 weights in groups of 8 rows". Since
 * 2026-12-07 the integer kernel's groups also prefetch a line 32 KiB on
 * into L2 (cpu_q8_vnni.c): two threads, 69.8, 59.8, 51.1 GB/s at 1, 2, 4
 * rows in a quiet spell, the plain read 71, 67, 77. One kernel at
 * every row count also keeps a row's bits whatever the batch (test_q8). */
static struct {
    q8_run_fn run;   /* the float kernel (calls of under vnni_rows rows at level 3) */
    int level, vnni_rows;
} kern = { gemm_c, 0, 1 };

static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

static int set_level(int max_level)
{
    kern.run = gemm_c;
    kern.level = 0;
#ifdef MT_Q8_X86
    __builtin_cpu_init();
    if (max_level >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        kern.run = run256;
        kern.level = 1;
        if (max_level >= 2 && __builtin_cpu_supports("avx512f")) {
            kern.run = run512;
            kern.level = 2;
            /* the integer product (cpu_q8_vnni.c) */
            if (max_level >= 3 && mt_q8_vnni_built() && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("avx512vnni")) {
                kern.level = 3;
            }
        }
    }
#else
    (void)max_level;
#endif
    mt_q8_layout_kernels(kern.level < 3 ? 0 : kern.vnni_rows <= 1 ? 2 : 1);
    return kern.level;
}

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static void pick_kernels(void)
{
    /* benchmarks: MT_Q8_VNNI_ROWS=n moves the threshold (1..64) */
    const char *v = getenv("MT_Q8_VNNI_ROWS");
    char *e;
    long n = v ? strtol(v, &e, 10) : 0;
    if (v && *v && !*e && n >= 1 && n <= 64)
        kern.vnni_rows = (int)n;
    set_level(env_set("MT_Q8_PORTABLE") ? 0 : env_set("MT_Q8_FLOAT") ? 2 : 3);
}

int mt_q8_init(void)
{
    pthread_once(&kern_once, pick_kernels);
    return kern.level;
}



int mt_q8_select(int max_level)
{
    pthread_once(&kern_once, pick_kernels);
    return set_level(max_level);
}

/* One float call over a run of weight rows (mt_q8_walk's callback). */
typedef struct {
    int M, K, ldx, ldy;
    const float *X;
    float beta, *Y;
} float_call;

static void float_run(void *arg, const int8_t *q, const float *s, int rows, int rs, int ps,
                      int col)
{
    const float_call *c = arg;
    if (rs == 0)   /* a lane group */
        gemm_lanes_c(c->M, rows, c->K, c->X, c->ldx, q, s, ps, c->beta, c->Y + col, c->ldy);
    else
        kern.run(c->M, rows, c->K, c->X, c->ldx, q, s, rs, ps, c->beta, c->Y + col, c->ldy);
}

void mt_q8_gemm_rows(int L, int M, int lo, int hi, int N, int K, const float *X, int ldx,
                     const int8_t *q, const float *scale, float beta, float *Y, int ldy)
{
    mt_q8_init();
    if (kern.level == 3 && M >= kern.vnni_rows) {
        mt_q8_gemm_vnni(L, M, lo, hi, N, K, X, ldx, q, scale, beta, Y, ldy);
        return;
    }
    float_call c = { M, K, ldx, ldy, X, beta, Y };
    mt_q8_walk(L, lo, hi, N, K, q, scale, float_run, &c);
}

void mt_q8_gemm(int L, int M, int N, int K, const float *X, int ldx, const int8_t *q,
                const float *scale, float beta, float *Y, int ldy)
{
    mt_q8_gemm_rows(L, M, 0, N, N, K, X, ldx, q, scale, beta, Y, ldy);
}

int mt_q8_every_row(void)
{
    return mt_q8_init() == 3 && kern.vnni_rows <= 1;
}

void mt_q8_vnni_rows(int rows)
{
    kern.vnni_rows = rows < 1 ? 1 : rows;
}
