/* cpu_q8.h: 8-bit weights for the CPU backend (--weights q8): each weight
 * row cut in blocks of MT_Q8_BLOCK values along K, a block stored as
 * MT_Q8_BLOCK signed bytes and one fp32 scale (the idea of ggml's q8_0,
 * written here; the bytes and the scales are two separate arrays so that
 * the kernels load whole vectors of bytes). A weight reads back as
 * q * scale, scale = max|w| of its block / 127, q = round(w / scale), so
 * its error is at most scale / 2 = max|w| / 254: about 0.4% of the
 * block's largest weight. 1.125 bytes a weight where f16 takes 2.
 *
 * Two products. On a CPU with AVX-512 VNNI, the integer one
 * (cpu_q8_vnni.c, for calls of 4 rows or more): the activations
 * quantised in blocks of 32 as well
 * (scale max|x| / 127), integer dot products a block, one fp32 multiply by
 * both scales a block; it adds the activations' rounding to the error
 * (cpu_q8_vnni.c states the bound). Elsewhere, or with MT_Q8_FLOAT=1, the
 * float ones: the bytes converted to fp32 in registers, accumulated in
 * fp32 on fp32 activations (the weights' rounding alone): an AVX-512
 * kernel, an AVX2/FMA one and a portable scalar one, picked once from the
 * CPU like cpu_f16.h's.
 */
#ifndef MT_CPU_Q8_H
#define MT_CPU_Q8_H

#include <stddef.h>
#include <stdint.h>

enum { MT_Q8_BLOCK = 32 };

/* Picks the kernels (idempotent, thread-safe); returns 3 (AVX-512 VNNI,
 * the integer product), 2 (AVX-512), 1 (AVX2/FMA) or 0 (portable).
 * MT_Q8_PORTABLE=1 forces the portable ones; MT_Q8_FLOAT=1 the best float
 * ones (the product before the integer one: benchmarks put them side by
 * side). */
int mt_q8_init(void);
/* Tests: the best kernels up to max_level that the CPU runs; returns the
 * level set. Not while a kernel may be running. */
int mt_q8_select(int max_level);

/* The integer product serves calls of at least rows rows (default 5:
 * below, the float kernels stream faster out of cache here; cpu_q8.c has
 * the figures). Tests: 1 makes it serve every call. Not while a kernel
 * may be running. */
void mt_q8_vnni_rows(int rows);

/* Quantises the matrix src [N, K] (K a multiple of MT_Q8_BLOCK) into
 * q [N, K] and scale [N, K / MT_Q8_BLOCK]. Returns -1, writing nothing
 * more, where a value is not finite (inf or nan: no scale holds it). */
int mt_q8_pack(int8_t *q, float *scale, const float *src, size_t N, int K);

/* Y[m, 0:N] = beta * Y[m, 0:N] + X[m, 0:K] . Wdq[0:N, 0:K]^T for m < M,
 * Wdq the weights read back (q * scale); X row m at X + m*ldx, weight row n
 * at q + n*K and its scales at scale + n*(K / MT_Q8_BLOCK), Y row m at
 * Y + m*ldy; beta 0 or 1. K a multiple of MT_Q8_BLOCK. Meant for small
 * M: the weights are read once. */
void mt_q8_gemm(int M, int N, int K, const float *X, int ldx, const int8_t *q,
                const float *scale, float beta, float *Y, int ldy);

#endif
