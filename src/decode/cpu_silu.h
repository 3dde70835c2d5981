/* cpu_silu.h: the gated feed-forward's activation on the CPU, 8 lanes at a
 * time (cpu_silu.c), for the CPU backend's SwiGLU and the depformer's. */
#ifndef MT_CPU_SILU_H
#define MT_CPU_SILU_H

#include <stddef.h>

/* g[i] = silu(g[i]) * u[i] for i < n, silu(x) = x / (1 + e^-x): within a
 * few fp32 ulps of the scalar formula with libm's expf (test_silu); u may
 * be g + n (the depformer's gate | up rows), not g. */
void mt_silu_mul(float *g, const float *u, size_t n);

#endif
