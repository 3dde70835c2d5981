/* cpu_f16.h: IEEE half-precision kernels for the CPU backend: K/V rows and
 * weight matrices stored as f16 (half the bytes of fp32), converted to fp32
 * in registers and accumulated in fp32.
 *
 * Each kernel has an F16C/AVX2/FMA version (the one-row product also an
 * AVX-512 one, where the CPU has it) and a portable scalar version
 * (bit-exact IEEE conversion, round to nearest even); mt_half_init() picks
 * one set for the process from the CPU (the kernels call through it).
 * Debian's OpenBLAS 0.3.21 exports no half-precision GEMM/GEMV (no
 * shgemm, sbgemm or sbgemv symbol in libopenblas.so.0), so the small-batch
 * product over f16 weights is written here.
 */
#ifndef MT_CPU_F16_H
#define MT_CPU_F16_H

#include <stddef.h>
#include <stdint.h>

/* Picks the kernels (idempotent, thread-safe); returns 2 when the F16C
 * ones are in use with the AVX-512 product for one row (B = 1), 1 for
 * F16C/AVX2 alone, 0 for the portable ones. */
int  mt_half_init(void);
/* Tests: switches to the best kernels up to max_level (as above) the CPU
 * runs and returns the level set. Not while a kernel may be running. */
int  mt_half_select(int max_level);
/* MT_F16_PORTABLE=1 in the environment forces the portable kernels (tests). */

uint16_t mt_half_from_float(float f);  /* round to nearest even */
float    mt_half_to_float(uint16_t h);

void mt_half_pack(uint16_t *dst, const float *src, size_t n);

#define MT_HALF_MAX 65504.0f   /* the largest finite half */
/* The largest |value| of src[0..n) when a finite one lies beyond
 * MT_HALF_MAX (packed, it would turn into infinity or saturate): a weight
 * matrix for which this is not 0 is kept in fp32 (backend_cpu.c), never
 * packed. 0 when every value fits (inf and nan are not counted: they
 * stay what they are in either precision). */
float mt_half_overflow(const float *src, size_t n);
void mt_half_unpack(float *dst, const uint16_t *src, size_t n);

/* Y[m, 0:N] = beta * Y[m, 0:N] + X[m, 0:K] . W[0:N, 0:K]^T for m < M;
 * X row m at X + m*ldx, W row n at W + n*K (f16), Y row m at Y + m*ldy.
 * beta is 0 (Y overwritten) or 1 (accumulated). Meant for small M: W is
 * read once, each row of it used by all M rows while in L1. */
void mt_half_gemm(int M, int N, int K, const float *X, int ldx, const uint16_t *W,
                 float beta, float *Y, int ldy);

/* Attention over a run of `rows` f16 K or V rows of hd elements each (a
 * block's contiguous slots), for a group of q heads, read straight from the
 * cache (no fp32 copy):
 *   scores:       score[i*lds + r] = scale * q[i*hd:] . k[r*hd:]
 *   weighted_sum: out[i*hd:] += sum_r p[i*ldp + r] * v[r*hd:]        */
void mt_half_scores(int group, int hd, const float *q, const uint16_t *k, int rows,
                    float scale, float *score, int lds);
void mt_half_weighted_sum(int group, int hd, const float *p, int ldp, const uint16_t *v,
                          int rows, float *out);

/* The online softmax's slack (the CPU backend's softmax_fold and the fused
 * run below): the running reference maximum m moves only when a score
 * passes it by more than this. */
#define MT_SOFTMAX_SLACK 8.0f

/* One run of rows <= 16 f16 K and V rows, fused (scores, the online
 * softmax fold into m[i], l[i] and out, the weighted sum) for a group of q
 * heads; the same arithmetic as mt_half_scores, the softmax fold and
 * mt_half_weighted_sum in turn. Returns -1, having done nothing, where the
 * CPU has no fused kernel (below AVX-512) or hd is not a multiple of 16. */
int mt_half_attend_run(int group, int hd, const float *q, const uint16_t *k, const uint16_t *v,
                       int rows, float scale, float *m, float *l, float *out);

#endif
