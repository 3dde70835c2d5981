/* cpu_reduce16.h: sixteen AVX-512 vectors reduced lane-wise at once, a
 * transpose as it reduces: lane i of the result combines a[i]'s sixteen
 * lanes (15 shuffles and 15 operations, where one reduction a vector
 * takes 4 dependent steps each). The attention's scores (cpu_f16.c: the
 * sums of 16 dot products) and the q8 kernel's quantisation
 * (cpu_q8_vnni.c: 16 blocks' largest values and their sums) use it.
 *
 * REDUCE16X16(ATTR, NAME, OP) defines `static __m512 NAME(const __m512
 * *a)` with the function attribute ATTR (its file's AVX-512 target) and
 * OP(x, y) the lane-wise operation on two __m512 (an integer one through
 * casts: only the operation reads the bits). The order in which a lane's
 * values meet is fixed: a sum's bits are the same in every call. */
#ifndef MT_CPU_REDUCE16_H
#define MT_CPU_REDUCE16_H

#include <immintrin.h>

#define REDUCE16X16(ATTR, NAME, OP)                                                           \
    ATTR static inline __attribute__((always_inline)) __m512 NAME(const __m512 *a)          \
    {                                                                                        \
        __m512 c[8], e[4], g[2];                                                             \
        _Pragma("GCC unroll 8")                                                              \
        for (int i = 0; i < 8; i++)   /* c[i] = [row 2i: lanes 0-1 | row 2i+1: lanes 2-3] */ \
            c[i] = OP(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),                    \
                      _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xee));                   \
        _Pragma("GCC unroll 4")                                                              \
        for (int i = 0; i < 4; i++)   /* e[i]: lane j = row 4i + j, 4 partial results */    \
            e[i] = OP(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),                    \
                      _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));                   \
        _Pragma("GCC unroll 2")                                                              \
        for (int i = 0; i < 2; i++)                                                          \
            g[i] = OP(_mm512_unpacklo_ps(e[2 * i], e[2 * i + 1]),                            \
                      _mm512_unpackhi_ps(e[2 * i], e[2 * i + 1]));                           \
        __m512 z = OP(                                                                       \
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(g[0]), _mm512_castps_pd(g[1]))), \
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(g[0]), _mm512_castps_pd(g[1])))); \
        /* z[4j + p] holds row 4p + j */                                                     \
        const __m512i order =                                                                \
            _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);          \
        return _mm512_permutexvar_ps(order, z);                                              \
    }

#endif
