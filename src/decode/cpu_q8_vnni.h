/* cpu_q8_vnni.h: the integer product of --weights q8 (cpu_q8_vnni.c), for
 * CPUs with AVX-512 VNNI; cpu_q8.c dispatches to it (see mt_q8_gemm). */
#ifndef MT_CPU_Q8_VNNI_H
#define MT_CPU_Q8_VNNI_H

#include <stdint.h>

/* 1 where this build has the kernel (x86-64, not a fuzz build): the CPU
 * must still be asked (cpu_q8.c does). */
int mt_q8_vnni_built(void);

/* mt_q8_gemm_rows's contract (cpu_q8.h), with the activations X
 * quantised in blocks of MT_Q8_BLOCK (cpu_q8_vnni.c says how and what it
 * costs). */
void mt_q8_gemm_vnni(int L, int M, int lo, int hi, int N, int K, const float *X, int ldx,
                     const int8_t *q, const float *scale, float beta, float *Y, int ldy);

/* Benchmarks: how far on in a lane group's stream (cpu_q8.h's
 * MT_Q8_LANES) each block prefetches, bytes (0: none; -1: the default,
 * or MT_Q8_LANES_PF). Not while a kernel may be running. */
void mt_q8_lanes_ahead(int bytes);
/* Benchmarks: the grouped layout's prefetch leads, bytes (near: the
 * lines into L1; far: one line into L2, 0 none; -1 the defaults). The
 * leads before 2026-12-07: 8192, 0. Not while a kernel may be running. */
void mt_q8_group_ahead(int near, int far);

#endif
