/* cpu_q8_vnni.c: the integer product of --weights q8, on AVX-512 VNNI.
 *
 * Why: the float kernels (cpu_q8.c) turn each weight byte into fp32
 * (sign-extend, convert, scale: three instructions a vector of weights)
 * before the first FMA, and at small batch that work, not the weight
 * read, bounds them. Here the activations are quantised as the weights
 * are, once a call: each row in blocks of MT_Q8_BLOCK along K, a block's
 * scale sx = max|x| / 127 and its values xq = round(x / sx) in -127..127.
 * A block's dot product is then an integer one (VPDPBUSD: 64 bytes, two
 * blocks, an instruction), converted and scaled by sx * sw once per block
 * pair and row pair.
 *
 * VPDPBUSD multiplies unsigned bytes by signed ones: the activations are
 * stored offset, u = xq + 128 in 1..255, so a 4-byte group sums
 * u.w = xq.w + 128 * sum(w). The accumulator therefore starts at
 * -128 * sum(w), made from the weights in registers (a VPDPBUSD of 128s by
 * the weights, negated): two instructions a weight vector, shared by all
 * the call's rows, and nothing more stored with the weights.
 *
 * Accuracy: the integer sums are exact (|u.w| over 4 bytes < 2^17, over a
 * block < 2^20: exact in fp32 too); an activation reads back within sx / 2,
 * so beside the weights' own error (cpu_q8.h) a product gains at most
 *   sum over blocks b of (sx_b / 2) * sum_{k in b} |q_k| * sw_b
 * (test_q8 checks every product against it): a block's largest |x| / 254
 * times its weights' |sum|. An activation block with a value not finite
 * gets scale nan (its products nan, as the fp32 product's would be); one
 * whose largest |x| is below 127 / FLT_MAX (1e-36) reads back as zeros.
 *
 * Used for every call (mt_q8_vnni_rows, cpu_q8.c): on the grouped
 * layout (cpu_q8.h), whose 8-row groups are one stream that a tile's
 * first row block prefetches (GROUP_NEAR, GROUP_FAR: since 2026-12-07,
 * 1.3-1.4 times the rate from memory at 1-2 rows, 1.15 at 4, 0.9 of the
 * plain read at 1-2 rows), it streams 13-23 GB/s
 * a core out of cache at 1-4 rows, ahead of the float kernels (on rows
 * one after the other it streamed 10-15 and trailed them at 1-4 rows:
 * bench/RESULTS.md, "The q8 product on integers" and "The q8 weights in
 * groups of 8 rows").
 *
 * Lane groups (cpu_q8.h's MT_Q8_LANES: the LM's and the codec's
 * convolutions' matrices; MT_Q8_LANES=1 every matrix).
 * On groups of 8, a 64-byte weight vector is one row's 64 k: a VPDPBUSD
 * gives 16 partial sums of one row, folded (fold4's shuffles) and
 * corrected by -128 * sum(w) (two more instructions a weight vector),
 * about 7 instructions a 64 bytes at one row. In a lane group a vector
 * holds 16 rows' 4 consecutive k, stored w + 128 (unsigned): one
 * VPDPBUSD by 4 activation bytes xq broadcast (signed) adds 16 rows'
 * partial sums into 16 lanes, an accumulator started at -128 * the
 * block's sum of xq (once a call and row); a block of 32 k is 8 such
 * instructions, then one conversion and one FMA by sx * sw[16 rows]: no
 * fold, no correction a weight vector, about 3 instructions a 64 bytes at
 * one row. A row's arithmetic is the same sequence whatever the call's
 * rows, tile or thread split (a call that takes part of a group computes
 * its 16 lanes and stores its part). In cache (mt-benchq8 -M 2 -t 1, one
 * core, 2026-12-07 09:12Z) it is 1.4-1.8 times the grouped kernel: 78 /
 * 58 / 30 / 16 GB/s at 1 / 4 / 8 / 16 rows against 55 / 33 / 17 / 9 (at
 * 8 rows and more one VPDPBUSD a cycle, the instruction's own bound).
 * From memory it is not ahead at 1-2 rows: there both wait on memory,
 * and with the far prefetch (below, GROUP_FAR) the grouped kernel comes
 * within 0.9-1.0 of the plain read. mt-benchq8 -t 2 -H -O, 256 MiB,
 * median GB/s, groups / lanes / read alternating in one process: in a
 * quiet spell (09:21:00Z, load 1.6) 1 row 69.8 / 60.3 / 71.2, 2 rows
 * 59.8 / 53.5 / 66.9, 4 rows 51.1 / 55.9 / 76.5, 8 rows 17.8 / 21.8 /
 * 45.9; under the other sessions' load (09:20:32-38Z, three runs, load
 * 1.3-1.7, the read 31-34) 1 row 30.5 / 29.1, 28.1 / 32.8, 34.8 / 30.7;
 * 2 rows 24.9 / 26.6, 29.4 / 27.2, 29.9 / 26.9; 4 rows 23.6 / 25.8,
 * 25.1 / 25.3, 22.8 / 23.3; 8 rows 13.3 / 17.5, 14.9 / 19.5, 13.8 /
 * 16.2; at 8 / 16 / 32 rows (09:21:53Z, load 1.2, the read 53) 33.6 /
 * 22.1 / 12.7 against 21.6 / 13.7 / 4.5 (the lanes level at 1-4 rows
 * under load, behind at 1-2 and ahead at 4 in the quiet spell, 1.5-2.8
 * times from 8 rows on). On the real path each user takes the layout its
 * products measured fastest on (cpu_q8.h's mt_q8_layout_for; RESULTS.md,
 * "A layout a matrix"): the LM and the codec's convolutions and
 * transformers lane groups, the codec's codebooks groups. Two lane groups a
 * tile and the activation broadcast folded into VPDPBUSD ({1to16})
 * changed nothing; the prefetch leads did (LANES_NEAR, LANES_AHEAD).
 *
 * Cost of the quantisation: each calling thread quantises the whole X
 * (M x K floats) once a call, against its share of the N x K weight bytes;
 * at M = 8 and 2 threads, a few percent of the call.
 */
#include "decode/cpu_q8_vnni.h"
#include "decode/cpu_q8.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
#include <immintrin.h>
#include "decode/cpu_reduce16.h"

int mt_q8_vnni_built(void) { return 1; }

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/* The quantised activations of a call live on the stack, a chunk of K at a
 * time: ACT_BYTES bytes of u (and as many of scales), rows in groups of
 * ROW_GROUP, a chunk CHUNK_COLS columns whatever the row count, so that a
 * row's products are summed in the same pieces in any call (test_q8: a
 * row's bits do not depend on the batch). Up to 16 rows the weights are
 * read once a call; a hidden width of 2048 is one chunk. */
enum { ACT_BYTES = 32768, ROW_GROUP = 16, CHUNK_COLS = ACT_BYTES / ROW_GROUP };

/* One chunk of a call: what every tile reads. */
typedef struct {
    const uint8_t *u;   /* [rows][ldu]: xq + 128, padded with 128 to ldu */
    const float   *sx;  /* [rows][ldu / 4]: per 64 columns (a block pair),
                           16 floats: the first block's scale 8 times, the
                           second's 8 times (0 past the chunk's end) */
    int            ldu; /* a multiple of 64 */
    const int8_t  *q;   /* the run's weight row 0 at the chunk's first block pair;
                           row j's pair p at q + j*rs + p*ps (cpu_q8.h's layout) */
    int            K;
    int            rs, ps;
    const float   *sc;  /* the scale of the block at q + o: sc[o / MT_Q8_BLOCK] */
    int            nb;  /* blocks in this chunk */
    float          beta;
    float         *Y;   /* row 0 of this row group, the run's first column */
    int            ldy;
    const int8_t  *end; /* rows one after the other: the run's end (prefetches
                           stop there); NULL for a group */
    int            group; /* a whole group: one stream, prefetched ahead */
    /* the lane groups' kernel (cpu_q8.h's MT_Q8_LANES) reads these */
    const int8_t  *xs;  /* [rows][ldu]: xq, signed */
    const float   *sxb; /* [rows][ldu / 32]: a block's scale */
    const int32_t *cb;  /* [rows][ldu / 32]: -128 * the block's sum of xq */
} chunk_job;

/* Lane b: the largest of a[b]'s lanes (max is exact in any order); the
 * sum of a[b]'s lanes as 32-bit integers (exact in any order too). */
REDUCE16X16(VNNI, max16x16, _mm512_max_ps)
#define ADD_EPI32_PS(x, y)                                                                     \
    _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(x), _mm512_castps_si512(y)))
REDUCE16X16(VNNI, isum16x16, ADD_EPI32_PS)

/* Rows 0..M of X [.., ldx], columns 0..kc, into J's u and sx (row stride
 * ldu, padded); kc a multiple of MT_Q8_BLOCK. Sixteen blocks at a time:
 * their largest values and their sums reduced together (max16x16,
 * isum16x16) and their scales divided in one vector, where a block at a
 * time spent two horizontal reductions and two scalar divisions on 32
 * values (mt-benchq8 in cache, 16 rows, K 768: 0.058 -> 0.054 ms;
 * in the frame under the machine's drift, RESULTS.md).
 * The bits are a block at a time's: the division is IEEE's either way,
 * max and integer sums exact in any order. */
VNNI static void quantise(int M, int kc, const float *X, int ldx, uint8_t *u, float *sx, int ldu,
                          int8_t *xs, float *sxb, int32_t *cb)
{
    const __m512 big = _mm512_set1_ps(FLT_MAX), zero = _mm512_setzero_ps();
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127),
                  off = _mm512_set1_epi32(128);
    for (int m = 0; m < M; m++) {
        uint8_t *ur = u + (size_t)m * ldu;
        float *sr = sx + (size_t)m * (ldu / 4);
        int8_t *xr = xs + (size_t)m * ldu;
        float *br = sxb + (size_t)m * (ldu / MT_Q8_BLOCK);
        int32_t *cr = cb + (size_t)m * (ldu / MT_Q8_BLOCK);
        const float *xm = X + (size_t)m * ldx;
        for (int k0 = 0; k0 < kc; k0 += 16 * MT_Q8_BLOCK) {
            const int nb = (kc - k0) / MT_Q8_BLOCK < 16 ? (kc - k0) / MT_Q8_BLOCK : 16;
            const __mmask16 live = (__mmask16)((1u << nb) - 1);
            __m512 am[16];
            __mmask16 bad = 0;     /* inf, or nan (unordered): no scale holds it */
            _Pragma("GCC unroll 16")
            for (int b = 0; b < 16; b++) {
                am[b] = zero;
                if (b < nb) {
                    const float *x = xm + k0 + b * MT_Q8_BLOCK;
                    __m512 a0 = _mm512_abs_ps(_mm512_loadu_ps(x)),
                           a1 = _mm512_abs_ps(_mm512_loadu_ps(x + 16));
                    if (_mm512_cmp_ps_mask(a0, big, _CMP_NLE_UQ) |
                        _mm512_cmp_ps_mask(a1, big, _CMP_NLE_UQ))
                        bad |= (__mmask16)(1u << b);
                    am[b] = _mm512_max_ps(a0, a1);
                }
            }
            const __m512 amax = max16x16(am);
            __m512 s = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
            __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(amax, zero, _CMP_GT_OQ),
                                             _mm512_set1_ps(127.0f), amax);
            /* amax so small that 127 / amax overflows */
            const __mmask16 over = _mm512_cmp_ps_mask(inv, big, _CMP_NLE_UQ);
            s = _mm512_mask_mov_ps(s, over, zero);
            inv = _mm512_mask_mov_ps(inv, over, zero);
            s = _mm512_mask_mov_ps(s, bad, _mm512_set1_ps(NAN));
            inv = _mm512_mask_mov_ps(inv, bad, zero);
            float sv[16], iv[16];
            _mm512_storeu_ps(sv, s);
            _mm512_storeu_ps(iv, inv);
            _mm512_mask_storeu_ps(br + k0 / MT_Q8_BLOCK, live, s);
            __m512 sum[16];   /* the blocks' 32-bit integer sums, as floats' bits */
            _Pragma("GCC unroll 16")
            for (int b = 0; b < 16; b++) {
                sum[b] = zero;
                if (b < nb) {
                    const int k = k0 + b * MT_Q8_BLOCK;
                    const __m512 vi = _mm512_set1_ps(iv[b]);
                    /* nearest, ties to even (the default rounding), as mt_q8_pack */
                    __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xm + k), vi));
                    __m512i q1 =
                        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xm + k + 16), vi));
                    q0 = _mm512_min_epi32(_mm512_max_epi32(q0, lo), hi);
                    q1 = _mm512_min_epi32(_mm512_max_epi32(q1, lo), hi);
                    _mm_storeu_si128((__m128i *)(xr + k), _mm512_cvtepi32_epi8(q0));
                    _mm_storeu_si128((__m128i *)(xr + k + 16), _mm512_cvtepi32_epi8(q1));
                    sum[b] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
                    q0 = _mm512_add_epi32(q0, off);
                    q1 = _mm512_add_epi32(q1, off);
                    _mm_storeu_si128((__m128i *)(ur + k), _mm512_cvtepi32_epi8(q0));
                    _mm_storeu_si128((__m128i *)(ur + k + 16), _mm512_cvtepi32_epi8(q1));
                    _mm256_storeu_ps(sr + k / 4, _mm256_set1_ps(sv[b]));
                }
            }
            _mm512_mask_storeu_epi32(cr + k0 / MT_Q8_BLOCK, live,
                                     _mm512_mullo_epi32(_mm512_castps_si512(isum16x16(sum)),
                                                        _mm512_set1_epi32(-128)));
        }
        for (int k = kc; k < ldu; k += MT_Q8_BLOCK) {   /* the odd block's pair */
            _mm256_storeu_si256((__m256i *)(ur + k), _mm256_set1_epi8((char)0x80));
            _mm256_storeu_ps(sr + k / 4, _mm256_setzero_ps());
        }
    }
}

/* A group's leads in its stream (into the next groups, which follow in
 * memory; a prefetch past the call's weights is wasted, never a fault):
 * each block pair's lines and scales GROUP_NEAR bytes on into L1 (T0),
 * and one line GROUP_FAR bytes on into L2 (T1). The far line was new on
 * 2026-12-07 (the lead 8192 bytes, into L1 alone, before): mt-benchq8 -t
 * 2 -H, 256 MiB, old and new alternating, 09:18:53Z, load 1.2, median
 * GB/s at 1 / 2 / 4 / 8 rows 40.2 / 41.1 / 37.5 / 22.0 before, 56.2 /
 * 53.1 / 43.3 / 27.3 after, the plain read 62.9 / 61.3 / 59.4 / 53.1;
 * one thread (09:18:30Z) 20.4 / 21.5 / 19.5 before, 30.7 / 29.6 / 22.9
 * after, the read 32.5 / 32.8 / 29.0. The lines into L1 alone leave too
 * few misses in flight to cover memory's latency; the far line keeps
 * the L2 fetching ahead (the lane groups' kernel, below, measured the
 * parts one by one). */
enum { GROUP_NEAR = 4096, GROUP_FAR = 32768 };
static int group_near = GROUP_NEAR, group_far = GROUP_FAR;   /* mt_q8_group_ahead */

static void leads_from_env(void);
static pthread_once_t leads_once = PTHREAD_ONCE_INIT;

static void set_group_leads(int near, int far)
{
    group_near = near < 0 ? GROUP_NEAR : near / 64 * 64;
    group_far = far < 0 ? GROUP_FAR : far / 64 * 64;
}

void mt_q8_group_ahead(int near, int far)
{
    pthread_once(&leads_once, leads_from_env);   /* the environment first */
    set_group_leads(near, far);
}

/* Prefetch a block pair's weights a lead on (pf, or nothing when NULL):
 * in a group (rows stored together, cpu_q8_layout.c) its pair's lines and
 * scales (pf GROUP_NEAR on) and a line GROUP_FAR on, else the pair of
 * each of the tile's `rows` weight rows. */
VNNI static inline __attribute__((always_inline)) void
prefetch_pair(const chunk_job *J, const char *pf, const int8_t *q, const float *sc, size_t o,
              int b, const int rows)
{
    if (pf && !J->end) {
        for (int l = 0; l < J->ps; l += 64)
            _mm_prefetch(pf + o + l, _MM_HINT_T0);
        if (group_far)
            _mm_prefetch(pf + o + (group_far - group_near), _MM_HINT_T1);
        _mm_prefetch((const char *)(sc + (pf + o - (const char *)q) / MT_Q8_BLOCK),
                     _MM_HINT_T0);
    } else if (pf) {
        _Pragma("GCC unroll 8")
        for (int j = 0; j < rows; j++)
            _mm_prefetch(pf + (size_t)j * J->K + b * MT_Q8_BLOCK, _MM_HINT_T0);
    }
}

/* One MR x NR tile: activation rows m..m+MR of the chunk against weight
 * rows n..n+NR, a block pair (64 bytes a weight row) at a time; the weight
 * vectors, their offset sums and scales made once and used by all MR rows.
 * MR, NR constants at each call (always_inline): accumulators in
 * registers. pf: where to prefetch the weight stream (or NULL). */
VNNI static inline __attribute__((always_inline)) void
tile(const int MR, const int NR, const chunk_job *J, int m, int n, const char *pf)
{
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    /* lanes 0..7 take a pair's first scale, lanes 8..15 its second */
    const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const int8_t *q = J->q + (size_t)n * J->rs;
    const float *sc = J->sc + (size_t)n * (J->rs / MT_Q8_BLOCK);
    const size_t ss = (size_t)(J->rs / MT_Q8_BLOCK);   /* scales, row to row */
    const uint8_t *u = J->u + (size_t)m * J->ldu;
    const float *sx = J->sx + (size_t)m * (J->ldu / 4);
    __m512 acc[4][8];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NR; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int b = 0; b < J->nb; b += 2) {
        const int two = b + 1 < J->nb;
        const __mmask64 wmask = two ? ~(__mmask64)0 : (__mmask64)0xffffffffu;
        const size_t o = (size_t)(b / 2) * J->ps;
        prefetch_pair(J, pf, q, sc, o, b, NR);
        __m512i w[8], neg[8];
        __m512 sw[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NR; j++) {
            w[j] = _mm512_maskz_loadu_epi8(wmask, q + (size_t)j * J->rs + o);
            neg[j] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, w[j]));
            sw[j] = _mm512_permutexvar_ps(
                halves, _mm512_maskz_loadu_ps(two ? 3 : 1, sc + j * ss + o / MT_Q8_BLOCK));
        }
        _Pragma("GCC unroll 4")
        for (int i = 0; i < MR; i++) {
            __m512i x = _mm512_loadu_si512(u + (size_t)i * J->ldu + b * MT_Q8_BLOCK);
            __m512 s = _mm512_loadu_ps(sx + (size_t)i * (J->ldu / 4) + b * 8);
            _Pragma("GCC unroll 8")
            for (int j = 0; j < NR; j++) {
                __m512i d = _mm512_dpbusd_epi32(neg[j], x, w[j]);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s, sw[j]),
                                            acc[i][j]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float v = _mm512_reduce_add_ps(acc[i][j]);
            float *y = J->Y + (size_t)(m + i) * J->ldy + n + j;
            *y = J->beta == 0.0f ? v : *y + v;   /* beta 0 drops nan/inf too */
        }
}

/* Four weight rows' integer sums for one activation row (d0..d3: 16
 * lanes each, lanes 0..7 the pair's first block, 8..15 its second) folded
 * into one vector: in each 128-bit quarter, lane j holds weight row j's
 * sum over that quarter (quarters 0, 1 the first block; 2, 3 the second).
 * Six shuffles and adds, off the multiply ports, instead of three fp32
 * operations a weight row on them. */
VNNI static inline __attribute__((always_inline)) __m512i
fold4(__m512i d0, __m512i d1, __m512i d2, __m512i d3)
{
    __m512i e01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d0, d1), _mm512_unpackhi_epi32(d0, d1));
    __m512i e23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(e01, e23), _mm512_unpackhi_epi64(e01, e23));
}

/* The weight scales in fold4's layout: weight rows j = 0..3 (row j's
 * scales at sc + j*ss), blocks b and, where two, b + 1 (0 otherwise). */
VNNI static inline __attribute__((always_inline)) __m512
scales4(const float *sc, size_t ss, int two)
{
    const __mmask8 m = two ? 3 : 1;
    __m128i t0 = _mm_maskz_loadu_epi32(m, sc), t1 = _mm_maskz_loadu_epi32(m, sc + ss);
    __m128i t2 = _mm_maskz_loadu_epi32(m, sc + 2 * ss), t3 = _mm_maskz_loadu_epi32(m, sc + 3 * ss);
    __m128i u01 = _mm_unpacklo_epi32(t0, t1), u23 = _mm_unpacklo_epi32(t2, t3);
    __m128i first = _mm_unpacklo_epi64(u01, u23), second = _mm_unpackhi_epi64(u01, u23);
    return _mm512_castsi512_ps(_mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(first)),
        _mm256_broadcastsi128_si256(second), 1));
}

/* As tile, for weight rows in groups of four (NG groups): each activation
 * row's four integer sums folded (fold4) before the conversion, so a
 * weight row costs a VPDPBUSD and a quarter of the fp32 work. */
VNNI static inline __attribute__((always_inline)) void
tile4(const int MR, const int NG, const chunk_job *J, int m, int n, const char *pf)
{
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    const int8_t *q = J->q + (size_t)n * J->rs;
    const size_t ss = (size_t)(J->rs / MT_Q8_BLOCK);   /* scales, row to row */
    const float *sc = J->sc + n * ss;
    const uint8_t *u = J->u + (size_t)m * J->ldu;
    const float *sx = J->sx + (size_t)m * (J->ldu / 4);
    /* scales4's lanes from rows j = 0..3's pairs (sw_j0, sw_j1) side by
     * side: lane 4c + j takes 2j + c / 2 */
    const __m512i group4 = _mm512_set_epi32(7, 5, 3, 1, 7, 5, 3, 1, 6, 4, 2, 0, 6, 4, 2, 0);
    __m512 acc[4][2];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 2")
        for (int g = 0; g < NG; g++)
            acc[i][g] = _mm512_setzero_ps();
    for (int b = 0; b < J->nb; b += 2) {
        const int two = b + 1 < J->nb;
        const __mmask64 wmask = two ? ~(__mmask64)0 : (__mmask64)0xffffffffu;
        const size_t o = (size_t)(b / 2) * J->ps;
        prefetch_pair(J, pf, q, sc, o, b, 4 * NG);
        __m512i w[8], neg[8];
        __m512 sw[2];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 4 * NG; j++) {
            w[j] = _mm512_maskz_loadu_epi8(wmask, q + (size_t)j * J->rs + o);
            neg[j] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, w[j]));
        }
        _Pragma("GCC unroll 2")
        for (int g = 0; g < NG; g++)
            sw[g] = ss == 2 && two   /* a group's 4 rows' pairs: 8 scales in a row */
                        ? _mm512_permutexvar_ps(group4, _mm512_castps256_ps512(_mm256_loadu_ps(
                                                            sc + 4 * g * ss + o / MT_Q8_BLOCK)))
                        : scales4(sc + 4 * g * ss + o / MT_Q8_BLOCK, ss, two);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < MR; i++) {
            __m512i x = _mm512_loadu_si512(u + (size_t)i * J->ldu + b * MT_Q8_BLOCK);
            __m512 s = _mm512_loadu_ps(sx + (size_t)i * (J->ldu / 4) + b * 8);
            _Pragma("GCC unroll 2")
            for (int g = 0; g < NG; g++) {
                __m512i f = fold4(_mm512_dpbusd_epi32(neg[4 * g], x, w[4 * g]),
                                  _mm512_dpbusd_epi32(neg[4 * g + 1], x, w[4 * g + 1]),
                                  _mm512_dpbusd_epi32(neg[4 * g + 2], x, w[4 * g + 2]),
                                  _mm512_dpbusd_epi32(neg[4 * g + 3], x, w[4 * g + 3]));
                acc[i][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(f), _mm512_mul_ps(s, sw[g]),
                                            acc[i][g]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        for (int g = 0; g < NG; g++) {
            __m512 v = acc[i][g];   /* lane 4c + j: weight row j, quarter c */
            __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
            __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            float *y = J->Y + (size_t)(m + i) * J->ldy + n + 4 * g;
            _mm_storeu_ps(y, J->beta == 0.0f ? r : _mm_add_ps(_mm_loadu_ps(y), r));
        }
}

/* Where to prefetch for a tile of NR weight rows from n: the next tile's
 * rows, the same columns in step (a tile of lead: NR * K bytes), or NULL
 * for the last tile. Not cpu_q8.c's stream of PREFETCH_AHEAD bytes on:
 * a tile reads NR rows side by side, and a lead counted along one row
 * fell inside the tile's own rows (measured: 2-row products out of cache
 * at 12 GB/s on one core, 20 for the float kernel). */
static const char *ahead(const chunk_job *J, int n, int NR)
{
    if (!J->end)   /* a group: its stream GROUP_NEAR bytes on, first tile only */
        return J->group && n == 0 ? (const char *)J->q + group_near : NULL;
    const int8_t *next = J->q + (size_t)(n + NR) * J->K;
    return J->end && next + (size_t)NR * J->K <= J->end ? (const char *)next : NULL;
}

/* All M rows against weight rows n..n+NR: blocks of 4 rows, then the rest
 * (the weights of the tile are read from memory by the first block, from
 * cache by the others). */
#define ROWS_FN(NAME, NR)                                                     \
    VNNI static void NAME(int M, const chunk_job *J, int n)                   \
    {                                                                         \
        const char *pf = ahead(J, n, NR);                                     \
        int m = 0;                                                            \
        for (; m + 4 <= M; m += 4, pf = NULL)                                 \
            tile(4, NR, J, m, n, pf);                                         \
        if (M - m == 3)                                                       \
            tile(3, NR, J, m, n, pf);                                         \
        else if (M - m == 2)                                                  \
            tile(2, NR, J, m, n, pf);                                         \
        else if (M - m == 1)                                                  \
            tile(1, NR, J, m, n, pf);                                         \
    }
ROWS_FN(rows_by2, 2)
ROWS_FN(rows_by1, 1)

/* The same for tile4: all M rows against weight rows n..n+4*NG. */
#define ROWS4_FN(NAME, NG)                                                    \
    VNNI static void NAME(int M, const chunk_job *J, int n)                   \
    {                                                                         \
        const char *pf = ahead(J, n, 4 * NG);                                 \
        int m = 0;                                                            \
        for (; m + 4 <= M; m += 4, pf = NULL)                                 \
            tile4(4, NG, J, m, n, pf);                                        \
        if (M - m == 3)                                                       \
            tile4(3, NG, J, m, n, pf);                                        \
        else if (M - m == 2)                                                  \
            tile4(2, NG, J, m, n, pf);                                        \
        else if (M - m == 1)                                                  \
            tile4(1, NG, J, m, n, pf);                                        \
    }
ROWS4_FN(rows_by8, 2)
ROWS4_FN(rows_by4, 1)

/* One chunk, all N weight rows: the rows in blocks of up to 4 against 8
 * or 4 weight rows folded (tile4), what is left 2 and 1 at a time; one
 * row is tiled as any other (it once took 8 weight rows unfolded, which
 * summed its products in another order than a batch's). */
VNNI static void run_chunk(int M, int N, const chunk_job *J)
{
    int n = 0;
    for (; n + 8 <= N; n += 8)
        rows_by8(M, J, n);
    for (; n + 4 <= N; n += 4)
        rows_by4(M, J, n);
    for (; n + 2 <= N; n += 2)
        rows_by2(M, J, n);
    for (; n < N; n++)
        rows_by1(M, J, n);
}


/* ---- lane groups (cpu_q8.h's MT_Q8_LANES) ------------------------------ */

/* A lane group's stream is prefetched by each block of the first tile
 * of rows: its lines LANES_NEAR bytes on into L1 (T0), and one line
 * LANES_AHEAD bytes on into L2 (T1). Measured (mt-benchq8 -t 1 -H, 4
 * rows, 2026-12-07 09:18-09:20Z, load 1.6-1.7, GB/s against the plain
 * read's 30-33): all lines 16 KiB on into L1 alone 21.9, with no
 * prefetch 18.7, the near lines alone 18.8, the far line alone 18.8,
 * both 25.3-25.8 (2 KiB near 22.8; far 32-128 KiB alike); at 1 row 24.7
 * (all lines far, T0) against 28.7 (both), 34.5 the read. Far alone:
 * the L1's misses in flight are too few to cover memory's latency; near
 * alone: too late. MT_Q8_LANES_PF=n (read once; 0: no prefetch) for
 * benchmarks. */
enum { LANES_NEAR = 4096, LANES_AHEAD = 32768 };
static int lanes_ahead = LANES_AHEAD;

static void set_lanes_lead(int bytes)
{
    lanes_ahead = bytes < 0 ? LANES_AHEAD : bytes / 64 * 64;
}

void mt_q8_lanes_ahead(int bytes)
{
    pthread_once(&leads_once, leads_from_env);   /* the environment first */
    set_lanes_lead(bytes);
}

/* The prefetch leads from the environment, once (benchmarks of the real
 * path): MT_Q8_LANES_PF=n (bytes, 0 none), MT_Q8_GROUP_PF=NEAR,FAR
 * (bytes; 8192,0 the grouped layout's leads before 2026-12-07). */
static void leads_from_env(void)
{
    const char *v = getenv("MT_Q8_LANES_PF");
    char *e;
    long n = v && *v ? strtol(v, &e, 10) : -1;
    set_lanes_lead(n < 0 || n > (1 << 20) ? -1 : (int)n);
    v = getenv("MT_Q8_GROUP_PF");
    long near = v && *v ? strtol(v, &e, 10) : -1, far = -1;
    if (v && *v && *e == ',')
        far = strtol(e + 1, NULL, 10);
    set_group_leads(near < 0 || near > (1 << 20) ? -1 : (int)near,
                    far < 0 || far > (1 << 20) ? -1 : (int)far);
}

/* 4 activation bytes broadcast to the 16 lanes (one VPDPBUSD's {1to16}
 * memory operand). */
VNNI static inline __attribute__((always_inline)) __m512i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* One lane group (its 16 weight rows' products in 16 lanes) against
 * activation rows m..m+MR of the chunk: qg, sg the group's bytes and
 * scales at the chunk's first block. A block is 8 vectors: 8 VPDPBUSDs of
 * (w + 128) by xq broadcast 4 bytes at a time, started at -128 * sum(xq)
 * (cb): the exact int32 sums w . xq of 16 rows; then one conversion and
 * one FMA by sx * sw a block. Every row's sequence is the same whatever
 * MR, the lane or the call (test_q8). */
VNNI static inline __attribute__((always_inline)) void
tile16(const int MR, const chunk_job *J, const int8_t *qg, const float *sg, int m, __m512 *out,
       int pf)
{
    const size_t ldb = (size_t)(J->ldu / MT_Q8_BLOCK);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        acc[i] = _mm512_setzero_ps();
    for (int b = 0; b < J->nb; b++) {
        const int8_t *wb = qg + (size_t)b * MT_Q8_LANE * MT_Q8_BLOCK;
        if (pf) {   /* the block LANES_NEAR on into L1, a line pf on into L2 */
            _Pragma("GCC unroll 8")
            for (int l = 0; l < MT_Q8_LANE * MT_Q8_BLOCK; l += 64)
                _mm_prefetch((const char *)wb + LANES_NEAR + l, _MM_HINT_T0);
            _mm_prefetch((const char *)wb + pf, _MM_HINT_T1);
            _mm_prefetch((const char *)(sg + MT_Q8_LANE * b + LANES_NEAR / MT_Q8_BLOCK),
                         _MM_HINT_T0);
        }
        __m512i w[8];
        _Pragma("GCC unroll 8")
        for (int v = 0; v < 8; v++)
            w[v] = _mm512_loadu_si512(wb + 64 * v);
        const __m512 sw = _mm512_loadu_ps(sg + MT_Q8_LANE * b);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < MR; i++) {
            const int8_t *x = J->xs + (size_t)(m + i) * J->ldu + b * MT_Q8_BLOCK;
            __m512i d0 = _mm512_set1_epi32(J->cb[(size_t)(m + i) * ldb + b]);
            __m512i d1 = _mm512_setzero_si512();   /* two chains: half the latency */
            _Pragma("GCC unroll 4")
            for (int v = 0; v < 8; v += 2) {
                d0 = _mm512_dpbusd_epi32(d0, w[v], bcast4(x + 4 * v));
                d1 = _mm512_dpbusd_epi32(d1, w[v + 1], bcast4(x + 4 * v + 4));
            }
            __m512 sc = _mm512_mul_ps(sw, _mm512_set1_ps(J->sxb[(size_t)(m + i) * ldb + b]));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)), sc, acc[i]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < MR; i++)
        out[i] = acc[i];
}

/* Lanes j0..j1 of v (weight rows of a lane group) into y[0..j1-j0], the
 * call's beta. */
VNNI static void store16(const chunk_job *J, float *y, __m512 v, int j0, int j1)
{
    if (j0 == 0 && j1 == MT_Q8_LANE) {
        _mm512_storeu_ps(y, J->beta == 0.0f ? v : _mm512_add_ps(_mm512_loadu_ps(y), v));
        return;
    }
    _Alignas(64) float t[MT_Q8_LANE];
    _mm512_store_ps(t, v);
    for (int l = j0; l < j1; l++)
        y[l - j0] = J->beta == 0.0f ? t[l] : y[l - j0] + t[l];   /* beta 0 drops nan/inf */
}

/* MR activation rows from m against one lane group, stored. */
#define LANES_FN(NAME, MR)                                                                     \
    VNNI static void NAME(const chunk_job *J, const int8_t *qg, const float *sg, int m,        \
                          float *y, int j0, int j1, int pf)                                    \
    {                                                                                          \
        __m512 v[4];                                                                           \
        tile16(MR, J, qg, sg, m, v, pf);                                                       \
        for (int i = 0; i < MR; i++)                                                           \
            store16(J, y + (size_t)(m + i) * J->ldy, v[i], j0, j1);                            \
    }
LANES_FN(lanes_by4, 4)
LANES_FN(lanes_by3, 3)
LANES_FN(lanes_by2, 2)
LANES_FN(lanes_by1, 1)

/* A run of a lane group's rows (mt_q8_walk: rows rows from lane `lane`
 * of the group at q, s, on into the groups after), this chunk's columns:
 * each group's 16 lanes computed, the run's stored. M rows in blocks of
 * 4, the rest as one block; the first block prefetches. */
VNNI static void lanes_run(const chunk_job *J, int M, int k0, const int8_t *q, const float *s,
                           int rows, int lane, float *Y)
{
    const size_t gs = (size_t)MT_Q8_LANE * J->K;   /* bytes from group to group */
    const int8_t *qg = q + (size_t)k0 * MT_Q8_LANE;
    const float *sg = s + (size_t)k0 / MT_Q8_BLOCK * MT_Q8_LANE;
    for (int done = 0, j0 = lane; done < rows; j0 = 0, qg += gs, sg += gs / MT_Q8_BLOCK) {
        const int j1 = j0 + rows - done < MT_Q8_LANE ? j0 + rows - done : MT_Q8_LANE;
        float *y = Y + done;
        int m = 0, pf = lanes_ahead;
        for (; m + 4 <= M; m += 4, pf = 0)
            lanes_by4(J, qg, sg, m, y, j0, j1, pf);
        if (M - m == 3)
            lanes_by3(J, qg, sg, m, y, j0, j1, pf);
        else if (M - m == 2)
            lanes_by2(J, qg, sg, m, y, j0, j1, pf);
        else if (M - m == 1)
            lanes_by1(J, qg, sg, m, y, j0, j1, pf);
        done += j1 - j0;
    }
}

/* One chunk of a call (what every run of weight rows shares), for
 * mt_q8_walk. */
typedef struct {
    int M, N, k0;
    chunk_job J;   /* u, sx, ldu, K, nb, beta, ldy; Y at the call's column 0 */
} chunk_call;

VNNI static void chunk_run(void *arg, const int8_t *q, const float *s, int rows, int rs, int ps,
                           int col)
{
    const chunk_call *c = arg;
    if (rs == 0) {   /* a lane group */
        lanes_run(&c->J, c->M, c->k0, q, s, rows, ps, c->J.Y + col);
        return;
    }
    chunk_job J = c->J;
    const size_t o = (size_t)(c->k0 / 64) * ps;   /* the chunk's first pair */
    J.q = q + o;
    J.sc = s + o / MT_Q8_BLOCK;
    J.rs = rs;
    J.ps = ps;
    J.Y = c->J.Y + col;
    J.end = ps == 64 ? J.q + (size_t)rows * c->J.K : NULL;
    J.group = ps != 64 && rows == MT_Q8_GROUP;
    run_chunk(c->M, rows, &J);
}

void mt_q8_gemm_vnni(int L, int M, int lo, int hi, int N, int K, const float *X, int ldx,
                     const int8_t *q, const float *scale, float beta, float *Y, int ldy)
{
    _Alignas(64) uint8_t u[ACT_BYTES];   /* [rows][ldu] */
    _Alignas(64) float sx[ACT_BYTES / 4]; /* [rows][ldu / 4] */
    _Alignas(64) int8_t xs[ACT_BYTES];    /* [rows][ldu] */
    float sxb[ACT_BYTES / MT_Q8_BLOCK];   /* [rows][ldu / 32] */
    int32_t cb[ACT_BYTES / MT_Q8_BLOCK];  /* [rows][ldu / 32] */
    pthread_once(&leads_once, leads_from_env);
    for (int m0 = 0; m0 < M; m0 += ROW_GROUP) {
        const int rows = M - m0 < ROW_GROUP ? M - m0 : ROW_GROUP;
        const int kc = CHUNK_COLS;
        for (int k0 = 0; k0 < K; k0 += kc) {
            const int kn = K - k0 < kc ? K - k0 : kc, ldu = (kn + 63) & ~63;
            quantise(rows, kn, X + (size_t)m0 * ldx + k0, ldx, u, sx, ldu, xs, sxb, cb);
            chunk_call c = { rows, N, k0,
                             { u, sx, ldu, NULL, K, 0, 0, NULL, kn / MT_Q8_BLOCK,
                               k0 == 0 ? beta : 1.0f, Y + (size_t)m0 * ldy, ldy, NULL, 0, xs,
                               sxb, cb } };
            mt_q8_walk(L, lo, hi, N, K, q, scale, chunk_run, &c);
        }
    }
}

#else

int mt_q8_vnni_built(void) { return 0; }

void mt_q8_lanes_ahead(int bytes) { (void)bytes; }

void mt_q8_group_ahead(int near, int far) { (void)near, (void)far; }

void mt_q8_gemm_vnni(int L, int M, int lo, int hi, int N, int K, const float *X, int ldx,
                     const int8_t *q, const float *scale, float beta, float *Y, int ldy)
{
    (void)L, (void)M, (void)lo, (void)hi, (void)N, (void)K, (void)X, (void)ldx, (void)q,
        (void)scale, (void)beta, (void)Y, (void)ldy;
}

#endif
