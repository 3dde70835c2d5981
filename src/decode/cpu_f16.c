/* cpu_f16.c: half-precision conversion and the small-batch f16-weight
 * product (see cpu_f16.h). Two sets of kernels: F16C/AVX2/FMA (x86-64 with
 * those extensions, checked at run time; the one-row product, B = 1, in
 * AVX-512 where the CPU has that too) and portable C; mt_half_init()
 * picks one. All accumulate in fp32 and round fp32 -> f16 to nearest
 * even, so they agree to fp32 summation order.
 */
#include "decode/cpu_f16.h"

#include <float.h>
#include <math.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
#define MT_F16_X86 1
#include <immintrin.h>
#include "decode/cpu_reduce16.h"
#endif

/* ---- portable ---------------------------------------------------------- */

uint16_t mt_half_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                 /* inf, nan (kept quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u)                 /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {                /* below 2^-14: subnormal or 0 */
        float a;
        memcpy(&a, &ax, sizeof a);
        /* in units of 2^-24; exact scaling, rintf rounds to nearest even */
        return (uint16_t)(sign | (uint32_t)rintf(a * 16777216.0f));
    }
    /* rebias the exponent (127 -> 15) and round the 13 dropped bits to
     * nearest even; a carry moves into the exponent as it should */
    ax += 0xc8000fffu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | (ax >> 13));
}

float mt_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;
    if (e == 0) {
        f = (float)m * (1.0f / 16777216.0f);
        memcpy(&x, &f, sizeof x);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    memcpy(&f, &x, sizeof f);
    return f;
}

static void from_f32_c(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = mt_half_from_float(src[i]);
}

static void to_f32_c(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = mt_half_to_float(src[i]);
}

static void gemm_c(int M, int N, int K, const float *X, int ldx, const uint16_t *W,
                   float beta, float *Y, int ldy)
{
    enum { CH = 256 };
    float w[CH];
    for (int n = 0; n < N; n++) {
        for (int m = 0; m < M; m++)
            Y[(size_t)m * ldy + n] *= beta;
        if (beta == 0.0f)
            for (int m = 0; m < M; m++)
                Y[(size_t)m * ldy + n] = 0.0f;   /* beta 0 drops nan/inf too */
        for (int k0 = 0; k0 < K; k0 += CH) {
            int kn = K - k0 < CH ? K - k0 : CH;
            to_f32_c(w, W + (size_t)n * K + k0, (size_t)kn);
            for (int m = 0; m < M; m++) {
                const float *x = X + (size_t)m * ldx + k0;
                float s = 0.0f;
                for (int k = 0; k < kn; k++)
                    s += x[k] * w[k];
                Y[(size_t)m * ldy + n] += s;
            }
        }
    }
}

static void scores_c(int group, int hd, const float *q, const uint16_t *k, int rows,
                     float scale, float *score, int lds)
{
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < group; i++) {
            float s = 0.0f;
            for (int c = 0; c < hd; c++)
                s += q[(size_t)i * hd + c] * mt_half_to_float(k[(size_t)r * hd + c]);
            score[(size_t)i * lds + r] = s * scale;
        }
}

static void weighted_sum_c(int group, int hd, const float *p, int ldp, const uint16_t *v,
                           int rows, float *out)
{
    for (int i = 0; i < group; i++)
        for (int r = 0; r < rows; r++) {
            float a = p[(size_t)i * ldp + r];
            for (int c = 0; c < hd; c++)
                out[(size_t)i * hd + c] += a * mt_half_to_float(v[(size_t)r * hd + c]);
        }
}

/* ---- F16C / AVX2 / FMA ------------------------------------------------- */

#ifdef MT_F16_X86
#define F16C_FN __attribute__((target("f16c,avx2,fma")))

F16C_FN static void from_f32_x86(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = mt_half_from_float(src[i]);
}

F16C_FN static void to_f32_x86(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        _mm256_storeu_ps(dst + i, a);
        _mm256_storeu_ps(dst + i + 8, b);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = mt_half_to_float(src[i]);
}

F16C_FN static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One MR x NR tile: rows m0..m0+MR of X against weight rows n0..n0+NR.
 * MR and NR are constants at each call (always_inline), so the MR*NR
 * accumulators live in registers; each 8 halves of a weight row are
 * converted once and used by all MR rows. */
F16C_FN static inline __attribute__((always_inline)) void
tile_x86(const int MR, const int NR, int K, const float *X, int ldx, const uint16_t *W,
         float beta, float *Y, int ldy, const char *pf)
{
    __m256 acc[4][8];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NR; j++)
            acc[i][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        /* the NR * 16 bytes this step reads, PREFETCH_AHEAD further on in
         * the call's weights (see PREFETCH_AHEAD) */
        if (pf)
            for (int b = 0; b < NR * 16; b += 64)
                _mm_prefetch(pf + b, _MM_HINT_T0);
        pf = pf ? pf + NR * 16 : NULL;
        __m256 w[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NR; j++)
            w[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(W + (size_t)j * K + k)));
        _Pragma("GCC unroll 4")
        for (int i = 0; i < MR; i++) {
            __m256 x = _mm256_loadu_ps(X + (size_t)i * ldx + k);
            _Pragma("GCC unroll 8")
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm256_fmadd_ps(x, w[j], acc[i][j]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float s = hsum8(acc[i][j]);
            for (int kk = k; kk < K; kk++)
                s += X[(size_t)i * ldx + kk] * mt_half_to_float(W[(size_t)j * K + kk]);
            float *y = Y + (size_t)i * ldy + j;
            *y = beta == 0.0f ? s : *y + s;
        }
}

/* The weights a product reads are one contiguous stream per call (its
 * rows, tile after tile), so each k step of a tile asks for the bytes it
 * reads PREFETCH_AHEAD further on in that stream: a steady trickle of
 * requests, as many as the loads retire. Asking for a whole tile in one
 * burst overflows the core's queue of misses and then leaves it idle,
 * which reads at about half the bandwidth; any distance from 8 to 32 KiB
 * does as well as this one (bench/RESULTS.md). */
enum { PREFETCH_AHEAD = 8192 };

/* Where a tile starting at w asks for its lines: NULL once that is past
 * the call's weights (the other thread's, or another matrix's). */
static inline const char *ahead(const uint16_t *w, const uint16_t *end)
{
    size_t left = (size_t)((const char *)end - (const char *)w);
    return left > PREFETCH_AHEAD ? (const char *)w + PREFETCH_AHEAD : NULL;
}

F16C_FN static void gemm_x86(int M, int N, int K, const float *X, int ldx, const uint16_t *W,
                             float beta, float *Y, int ldy)
{
    const uint16_t *end = W + (size_t)N * K;
    int n = 0;
    if (M == 1) {
        /* one row: eight weight rows at a time, eight independent FMA
         * chains and eight streams of loads in flight */
        for (; n + 8 <= N; n += 8) {
            tile_x86(1, 8, K, X, ldx, W + (size_t)n * K, beta, Y + n, ldy,
                     ahead(W + (size_t)n * K, end));
        }
    }
    if (M == 2 || M == 3) {
        /* two or three rows: four weight rows at a time (8 or 12 chains) */
        for (; n + 4 <= N; n += 4) {
            const char *pf = ahead(W + (size_t)n * K, end);
            if (M == 2)
                tile_x86(2, 4, K, X, ldx, W + (size_t)n * K, beta, Y + n, ldy, pf);
            else
                tile_x86(3, 4, K, X, ldx, W + (size_t)n * K, beta, Y + n, ldy, pf);
        }
    }
    for (; n + 2 <= N; n += 2) {
        const uint16_t *w = W + (size_t)n * K;
        /* the weight rows are read again for each block of 4 X rows; only
         * the first block asks for the next ones */
        const char *pf = ahead(w, end);
        int m = 0;
        for (; m + 4 <= M; m += 4, pf = NULL)
            tile_x86(4, 2, K, X + (size_t)m * ldx, ldx, w, beta, Y + (size_t)m * ldy + n, ldy, pf);
        switch (M - m) {
        case 3: tile_x86(3, 2, K, X + (size_t)m * ldx, ldx, w, beta, Y + (size_t)m * ldy + n, ldy, pf); break;
        case 2: tile_x86(2, 2, K, X + (size_t)m * ldx, ldx, w, beta, Y + (size_t)m * ldy + n, ldy, pf); break;
        case 1: tile_x86(1, 2, K, X + (size_t)m * ldx, ldx, w, beta, Y + (size_t)m * ldy + n, ldy, pf); break;
        default: break;
        }
    }
    for (; n < N; n++)
        for (int m = 0; m < M; m++)
            tile_x86(1, 1, K, X + (size_t)m * ldx, ldx, W + (size_t)n * K, beta,
                     Y + (size_t)m * ldy + n, ldy, NULL);
}

/* q . k_t for the 8 rows k_0..k_7 (hd halves each, hd a multiple of 8),
 * as one vector of 8 sums: eight independent FMA chains, then one
 * transposing reduction for all eight (hadd tree) instead of a horizontal
 * sum per row. */
F16C_FN static inline __attribute__((always_inline)) __m256
dot8rows(const float *q, const uint16_t *k, int hd)
{
    __m256 a[8];
    _Pragma("GCC unroll 8")
    for (int t = 0; t < 8; t++)
        a[t] = _mm256_setzero_ps();
    for (int c = 0; c < hd; c += 8) {
        __m256 qv = _mm256_loadu_ps(q + c);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < 8; t++)
            a[t] = _mm256_fmadd_ps(qv, _mm256_cvtph_ps(_mm_loadu_si128(
                                           (const __m128i *)(k + (size_t)t * hd + c))), a[t]);
    }
    __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 s03 = _mm256_hadd_ps(s01, s23), s47 = _mm256_hadd_ps(s45, s67);
    /* s03 = [rows 0-3 over columns' low halves | rows 0-3, high halves] */
    return _mm256_add_ps(_mm256_permute2f128_ps(s03, s47, 0x20),
                         _mm256_permute2f128_ps(s03, s47, 0x31));
}

F16C_FN static void scores_x86(int group, int hd, const float *q, const uint16_t *k, int rows,
                               float scale, float *score, int lds)
{
    int r = 0;
    if (hd % 8 == 0) {
        const __m256 sv = _mm256_set1_ps(scale);
        for (; r + 8 <= rows; r += 8)
            for (int i = 0; i < group; i++)
                _mm256_storeu_ps(score + (size_t)i * lds + r,
                                 _mm256_mul_ps(dot8rows(q + (size_t)i * hd, k + (size_t)r * hd, hd),
                                               sv));
    }
    for (; r < rows; r++) {
        const uint16_t *kr = k + (size_t)r * hd;
        for (int i = 0; i < group; i++) {
            const float *qi = q + (size_t)i * hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            int c = 0;
            for (; c + 16 <= hd; c += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qi + c),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + c))), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qi + c + 8),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + c + 8))), a1);
            }
            for (; c + 8 <= hd; c += 8)
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qi + c),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + c))), a0);
            float s = hsum8(_mm256_add_ps(a0, a1));
            for (; c < hd; c++)
                s += qi[c] * mt_half_to_float(kr[c]);
            score[(size_t)i * lds + r] = s * scale;
        }
    }
}

F16C_FN static void weighted_sum_x86(int group, int hd, const float *p, int ldp,
                                     const uint16_t *v, int rows, float *out)
{
    for (int i = 0; i < group; i++) {
        const float *pi = p + (size_t)i * ldp;
        float *oi = out + (size_t)i * hd;
        int c = 0;
        /* 32 columns at a time: four accumulators held over all rows */
        for (; c + 32 <= hd; c += 32) {
            __m256 a0 = _mm256_loadu_ps(oi + c), a1 = _mm256_loadu_ps(oi + c + 8);
            __m256 a2 = _mm256_loadu_ps(oi + c + 16), a3 = _mm256_loadu_ps(oi + c + 24);
            for (int r = 0; r < rows; r++) {
                const uint16_t *vr = v + (size_t)r * hd + c;
                __m256 b = _mm256_set1_ps(pi[r]);
                a0 = _mm256_fmadd_ps(b, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)vr)), a0);
                a1 = _mm256_fmadd_ps(b, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 8))), a1);
                a2 = _mm256_fmadd_ps(b, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 16))), a2);
                a3 = _mm256_fmadd_ps(b, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 24))), a3);
            }
            _mm256_storeu_ps(oi + c, a0);
            _mm256_storeu_ps(oi + c + 8, a1);
            _mm256_storeu_ps(oi + c + 16, a2);
            _mm256_storeu_ps(oi + c + 24, a3);
        }
        for (; c + 8 <= hd; c += 8) {
            __m256 a0 = _mm256_loadu_ps(oi + c);
            for (int r = 0; r < rows; r++)
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(pi[r]),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + (size_t)r * hd + c))), a0);
            _mm256_storeu_ps(oi + c, a0);
        }
        for (; c < hd; c++)
            for (int r = 0; r < rows; r++)
                oi[c] += pi[r] * mt_half_to_float(v[(size_t)r * hd + c]);
    }
}

/* ---- AVX-512 (where the CPU has it, on top of the F16C set) ---------- */

/* One row of X (B = 1, the step that streams every weight once) with
 * AVX-512, where the CPU has it: 16 halves converted per instruction, so
 * half the instructions of the AVX2 tile per byte read, and a higher read
 * bandwidth with the same stream prefetch. */
#define AVX512_FN __attribute__((target("avx512f,f16c,avx2,fma")))

AVX512_FN static void gemv_avx512(int N, int K, const float *X, const uint16_t *W, float beta,
                                  float *Y)
{
    const uint16_t *end = W + (size_t)N * K;
    const int K16 = K / 16 * 16;
    int n = 0;
    for (; n + 8 <= N; n += 8) {
        const uint16_t *w = W + (size_t)n * K;
        const char *pf = ahead(w, end);
        __m512 acc[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++)
            acc[j] = _mm512_setzero_ps();
        for (int k = 0; k < K16; k += 16) {
            /* 8 rows x 32 bytes: four lines of the stream */
            if (pf) {
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
                _mm_prefetch(pf + 128, _MM_HINT_T0);
                _mm_prefetch(pf + 192, _MM_HINT_T0);
                pf += 256;
            }
            __m512 x = _mm512_loadu_ps(X + k);
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 8; j++)
                acc[j] = _mm512_fmadd_ps(x, _mm512_cvtph_ps(_mm256_loadu_si256(
                                                (const __m256i *)(w + (size_t)j * K + k))), acc[j]);
        }
        for (int j = 0; j < 8; j++) {
            float s = _mm512_reduce_add_ps(acc[j]);
            for (int k = K16; k < K; k++)
                s += X[k] * mt_half_to_float(w[(size_t)j * K + k]);
            Y[n + j] = beta == 0.0f ? s : Y[n + j] + s;
        }
    }
    for (; n < N; n++) {
        const uint16_t *w = W + (size_t)n * K;
        __m512 acc = _mm512_setzero_ps();
        for (int k = 0; k < K16; k += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(X + k),
                                  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + k))), acc);
        float s = _mm512_reduce_add_ps(acc);
        for (int k = K16; k < K; k++)
            s += X[k] * mt_half_to_float(w[k]);
        Y[n] = beta == 0.0f ? s : Y[n] + s;
    }
}

/* e^x of 16 floats, x <= MT_SOFTMAX_SLACK: the Cephes expf the CPU
 * backend's softmax uses (x = n ln2 + r, a degree-6 polynomial for e^r, 2^n
 * put in the exponent bits), clamped below at -87 so 2^n stays normal. */
AVX512_FN static inline __attribute__((always_inline)) __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 magic = _mm512_set1_ps(12582912.0f);      /* 1.5 * 2^23 */
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
    __m512 nf = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
    __m512i two_n = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(two_n));
}

/* Sums of 16 vectors in one: element r of the result is the sum of a[r]'s
 * 16 elements. Four rounds of shuffles and adds halve the vectors, 16 to
 * 1 (46 instructions with the permute, where 16 separate reductions take
 * about 130); the rows end transposed in 4 x 4 and one permute puts them
 * in order. */
REDUCE16X16(AVX512_FN, sum16x16, _mm512_add_ps)

/* One run of rows <= 16 f16 K and V rows (hd a multiple of 16) for a
 * group of q heads, scores, softmax fold and weighted sum in one pass with
 * the scores in a register: the same arithmetic as scores, the CPU
 * backend's softmax_fold and weighted_sum in turn. */
AVX512_FN static inline __attribute__((always_inline)) void
attend_run_body(int group, const int hd, const float *q, const uint16_t *k, const uint16_t *v,
                int rows, float scale, float *m, float *l, float *out)
{
    const __mmask16 live = (__mmask16)((1u << rows) - 1);
    for (int i = 0; i < group; i++) {
        const float *qi = q + (size_t)i * hd;
        float *oi = out + (size_t)i * hd;
        /* a row a register: unrolled, so that acc[] is never in memory */
        __m512 acc[16];
        _Pragma("GCC unroll 16")
        for (int t = 0; t < 16; t++) {
            acc[t] = _mm512_setzero_ps();
            if (t < rows)
                for (int c = 0; c < hd; c += 16)
                    acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(qi + c),
                                             _mm512_cvtph_ps(_mm256_loadu_si256(
                                                 (const __m256i *)(k + (size_t)t * hd + c))),
                                             acc[t]);
        }
        __m512 s = _mm512_mul_ps(sum16x16(acc), _mm512_set1_ps(scale));
        s = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), s);
        float mnew = _mm512_reduce_max_ps(s);
        if (mnew > m[i] + MT_SOFTMAX_SLACK) {
            float f = expf(m[i] - mnew);            /* 0 on the first run (m = -inf) */
            l[i] *= f;
            __m512 fv = _mm512_set1_ps(f);
            for (int c = 0; c < hd; c += 16)
                _mm512_storeu_ps(oi + c, _mm512_mul_ps(_mm512_loadu_ps(oi + c), fv));
            m[i] = mnew;
        }
        __m512 pz = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(s, _mm512_set1_ps(m[i]))));
        l[i] += _mm512_reduce_add_ps(pz);
        float p[16];
        _mm512_storeu_ps(p, pz);
        int c = 0;
        for (; c + 64 <= hd; c += 64) {
            __m512 a0 = _mm512_loadu_ps(oi + c), a1 = _mm512_loadu_ps(oi + c + 16);
            __m512 a2 = _mm512_loadu_ps(oi + c + 32), a3 = _mm512_loadu_ps(oi + c + 48);
            for (int t = 0; t < rows; t++) {
                const uint16_t *vr = v + (size_t)t * hd + c;
                __m512 b = _mm512_set1_ps(p[t]);
                a0 = _mm512_fmadd_ps(b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)vr)), a0);
                a1 = _mm512_fmadd_ps(b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16))), a1);
                a2 = _mm512_fmadd_ps(b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 32))), a2);
                a3 = _mm512_fmadd_ps(b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 48))), a3);
            }
            _mm512_storeu_ps(oi + c, a0);
            _mm512_storeu_ps(oi + c + 16, a1);
            _mm512_storeu_ps(oi + c + 32, a2);
            _mm512_storeu_ps(oi + c + 48, a3);
        }
        for (; c < hd; c += 16) {
            __m512 a0 = _mm512_loadu_ps(oi + c);
            for (int t = 0; t < rows; t++)
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[t]),
                                     _mm512_cvtph_ps(_mm256_loadu_si256(
                                         (const __m256i *)(v + (size_t)t * hd + c))), a0);
            _mm512_storeu_ps(oi + c, a0);
        }
    }
}

/* The body with hd a constant where it is the common 64: the row loops
 * then unroll with every accumulator in a register. */
AVX512_FN static void attend_run_avx512(int group, int hd, const float *q, const uint16_t *k,
                                        const uint16_t *v, int rows, float scale, float *m,
                                        float *l, float *out)
{
    if (hd == 64)
        attend_run_body(group, 64, q, k, v, rows, scale, m, l, out);
    else
        attend_run_body(group, hd, q, k, v, rows, scale, m, l, out);
}

/* The AVX-512 set's product: the row above for B = 1, the AVX2 tiles for
 * more rows (their weights are read once per 2 to 4 rows of X, so fewer
 * bytes per flop and less to gain from wider conversion). */
AVX512_FN static void gemm_avx512(int M, int N, int K, const float *X, int ldx,
                                  const uint16_t *W, float beta, float *Y, int ldy)
{
    if (M == 1)
        gemv_avx512(N, K, X, W, beta, Y);
    else
        gemm_x86(M, N, K, X, ldx, W, beta, Y, ldy);
}

#endif

/* ---- dispatch ------------------------------------------------------------ */

static struct {
    void (*from_f32)(uint16_t *, const float *, size_t);
    void (*to_f32)(float *, const uint16_t *, size_t);
    void (*gemm)(int, int, int, const float *, int, const uint16_t *, float, float *, int);
    void (*scores)(int, int, const float *, const uint16_t *, int, float, float *, int);
    void (*wsum)(int, int, const float *, int, const uint16_t *, int, float *);
    /* NULL where no fused kernel runs (below the AVX-512 level) */
    void (*run)(int, int, const float *, const uint16_t *, const uint16_t *, int, float,
                float *, float *, float *);
    int f16c;
} kern = { from_f32_c, to_f32_c, gemm_c, scores_c, weighted_sum_c, NULL, 0 };

static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

/* Sets the kernels of the highest level up to max_level that the CPU runs
 * (0 portable, 1 F16C/AVX2/FMA, 2 the same with the AVX-512 product);
 * returns the level set. */
static int set_level(int max_level)
{
    kern.from_f32 = from_f32_c;
    kern.to_f32 = to_f32_c;
    kern.gemm = gemm_c;
    kern.scores = scores_c;
    kern.wsum = weighted_sum_c;
    kern.run = NULL;
    kern.f16c = 0;
#ifdef MT_F16_X86
    __builtin_cpu_init();
    if (max_level >= 1 && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma")) {
        kern.from_f32 = from_f32_x86;
        kern.to_f32 = to_f32_x86;
        kern.gemm = gemm_x86;
        kern.scores = scores_x86;
        kern.wsum = weighted_sum_x86;
        kern.f16c = 1;
        if (max_level >= 2 && __builtin_cpu_supports("avx512f")) {
            kern.gemm = gemm_avx512;
            kern.run = attend_run_avx512;
            kern.f16c = 2;
        }
    }
#else
    (void)max_level;
#endif
    return kern.f16c;
}

static void pick_kernels(void)
{
    const char *force = getenv("MT_F16_PORTABLE");
    set_level(force && *force && strcmp(force, "0") != 0 ? 0 : 2);
}

int mt_half_init(void)
{
    pthread_once(&kern_once, pick_kernels);
    return kern.f16c;
}

int mt_half_select(int max_level)
{
    pthread_once(&kern_once, pick_kernels);
    return set_level(max_level);
}

void mt_half_pack(uint16_t *dst, const float *src, size_t n)
{
    mt_half_init();
    kern.from_f32(dst, src, n);
}

float mt_half_overflow(const float *src, size_t n)
{
    float big = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(src[i]);
        if (a > big && a <= FLT_MAX)       /* finite only: nan compares false */
            big = a;
    }
    return big > MT_HALF_MAX ? big : 0.0f;
}

void mt_half_unpack(float *dst, const uint16_t *src, size_t n)
{
    mt_half_init();
    kern.to_f32(dst, src, n);
}

void mt_half_gemm(int M, int N, int K, const float *X, int ldx, const uint16_t *W,
                 float beta, float *Y, int ldy)
{
    mt_half_init();
    kern.gemm(M, N, K, X, ldx, W, beta, Y, ldy);
}

void mt_half_scores(int group, int hd, const float *q, const uint16_t *k, int rows,
                    float scale, float *score, int lds)
{
    mt_half_init();
    kern.scores(group, hd, q, k, rows, scale, score, lds);
}

void mt_half_weighted_sum(int group, int hd, const float *p, int ldp, const uint16_t *v,
                          int rows, float *out)
{
    mt_half_init();
    kern.wsum(group, hd, p, ldp, v, rows, out);
}

int mt_half_attend_run(int group, int hd, const float *q, const uint16_t *k, const uint16_t *v,
                       int rows, float scale, float *m, float *l, float *out)
{
    mt_half_init();
    if (!kern.run || hd % 16 != 0 || rows < 1 || rows > 16)
        return -1;
    kern.run(group, hd, q, k, v, rows, scale, m, l, out);
    return 0;
}
