/* mimi_skinny.c: Mimi's product of a few vectors (up to 8: a small
 * batch's transformer steps, its RVQ columns, the last SEANet layers'
 * steps) against a block of weight rows, streaming each weight row once.
 *
 * At B = 1..4 these products are 2..8 vectors against up to 8 M weights,
 * which OpenBLAS's sgemm packs before it multiplies (the weights read
 * twice), and the one-row dot8_multi loop (util/vec8.h) runs on two
 * dependent sums a vector, which caps it at the FMA latency (about 4
 * floats a cycle). Here weight rows go in blocks (4 rows at up to 4
 * vectors, 2 at up to 8), each (row, vector) its own 16-lane sum, so
 * 8-16 sums are in flight and the loop streams the weights at the read
 * rate where one thread can.
 *
 * The bits: every output is the same sequence of 16-lane multiply-adds
 * over K (a masked last step), then one horizontal sum, whatever its
 * block, its tile or the number of vectors beside it, so the results do
 * not depend on the threads or on the batch (a session's sums are the
 * same alone or beside 7 others). */
#include "codec/mimi_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define SK_TARGET __attribute__((target("avx512f,fma")))

/* Each weight row is also prefetched this many floats ahead (8 KiB; past
 * a short row, into the next block's rows): at K = 512 the hardware's
 * prefetch alone left one thread at 13-17 GB/s, with it 21-22 (2 vectors,
 * 2048 x 512 weights, issue 49's measurement; 256 and 1024 ahead were
 * slower, 4096 no faster). */
enum { PREFETCH = 2048 };

/* rows r0..r0+RB-1 of W against NV vectors: out[r][v] = W_r . V_v */
static inline __attribute__((always_inline)) SK_TARGET void
block(const float *W, size_t ldw, int RB, const float *V, size_t ldv, int NV, int K, float *out)
{
    __m512 acc[4][8];
    #pragma GCC unroll 8
    for (int r = 0; r < RB; r++)
        #pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 w[4];
        #pragma GCC unroll 8
        for (int r = 0; r < RB; r++) {
            w[r] = _mm512_loadu_ps(W + (size_t)r * ldw + k);
            _mm_prefetch((const char *)(W + (size_t)r * ldw + k + PREFETCH), _MM_HINT_T0);
        }
        #pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            __m512 x = _mm512_loadu_ps(V + (size_t)v * ldv + k);
            #pragma GCC unroll 8
            for (int r = 0; r < RB; r++)
                acc[r][v] = _mm512_fmadd_ps(w[r], x, acc[r][v]);
        }
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 w[4];
        #pragma GCC unroll 8
        for (int r = 0; r < RB; r++)
            w[r] = _mm512_maskz_loadu_ps(m, W + (size_t)r * ldw + k);
        #pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            __m512 x = _mm512_maskz_loadu_ps(m, V + (size_t)v * ldv + k);
            #pragma GCC unroll 8
            for (int r = 0; r < RB; r++)
                acc[r][v] = _mm512_fmadd_ps(w[r], x, acc[r][v]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < RB; r++)
        #pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            out[r * 8 + v] = _mm512_reduce_add_ps(acc[r][v]);
}

/* Every row n0..n1-1 of W in blocks of RB, NV vectors (constants once
 * inlined, so the sums stay in registers). */
static inline __attribute__((always_inline)) SK_TARGET void
rows(const float *W, size_t ldw, int n0, int n1, const float *V, size_t ldv, int RB, int NV, int K,
     float *C, size_t ldc_row, size_t ldc_vec, float beta)
{
    float out[4 * 8];
    int n = n0;
    for (; n < n1; n += RB) {
        int rb = n1 - n < RB ? n1 - n : RB;
        if (rb == RB && NV > 4) {   /* the 4 rows twice, from the cache the second time */
            block(W + (size_t)n * ldw, ldw, RB, V, ldv, 4, K, out);
            block(W + (size_t)n * ldw, ldw, RB, V + 4 * ldv, ldv, NV - 4, K, out + 4);
        } else if (rb == RB)
            block(W + (size_t)n * ldw, ldw, RB, V, ldv, NV, K, out);
        else
            for (int r = 0; r < rb; r++)
                block(W + (size_t)(n + r) * ldw, ldw, 1, V, ldv, NV, K, out + r * 8);
        for (int r = 0; r < rb; r++)
            #pragma GCC unroll 8
            for (int v = 0; v < NV; v++) {
                float *c = C + (size_t)(n + r) * ldc_row + (size_t)v * ldc_vec;
                *c = beta != 0.0f ? out[r * 8 + v] + beta * *c : out[r * 8 + v];
            }
    }
}

SK_TARGET static void run(const float *W, size_t ldw, int n0, int n1, const float *V, size_t ldv,
                          int nv, int K, float *C, size_t ldc_row, size_t ldc_vec, float beta)
{
#define SK_CASE(NV, RB) \
    case NV: rows(W, ldw, n0, n1, V, ldv, RB, NV, K, C, ldc_row, ldc_vec, beta); break;
    switch (nv) {
    SK_CASE(1, 4) SK_CASE(2, 4) SK_CASE(3, 4) SK_CASE(4, 4)
    SK_CASE(5, 4) SK_CASE(6, 4) SK_CASE(7, 4) SK_CASE(8, 4)
    default: break;
    }
#undef SK_CASE
}

int mimi_skinny_ok(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

void mimi_skinny_rows(const float *W, size_t ldw, int n0, int n1, const float *V, size_t ldv, int nv,
                      int K, float *C, size_t ldc_row, size_t ldc_vec, float beta)
{
    run(W, ldw, n0, n1, V, ldv, nv, K, C, ldc_row, ldc_vec, beta);
}

#else

int mimi_skinny_ok(void) { return 0; }

void mimi_skinny_rows(const float *W, size_t ldw, int n0, int n1, const float *V, size_t ldv, int nv,
                      int K, float *C, size_t ldc_row, size_t ldc_vec, float beta)
{
    (void)W, (void)ldw, (void)n0, (void)n1, (void)V, (void)ldv, (void)nv, (void)K, (void)C;
    (void)ldc_row, (void)ldc_vec, (void)beta;
}

#endif
