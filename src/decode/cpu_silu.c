/* cpu_silu.c: silu(gate) * up, 8 lanes at a time (util/vec8.h's exp8, one
 * AVX register in the x86-64-v3 clone chosen at load time). libm's expf,
 * one call a value, was a quarter of the depformer's time outside its
 * products at 32 sessions (perf, bench/RESULTS.md, issue 49).
 *
 * The sigmoid takes e = e^-|x| only (exp8 is made for x <= 0, where it
 * cannot overflow): 1 / (1 + e) for x >= 0, e / (1 + e) below. A value
 * under -87 gets e^-87 for its e: silu(x) is then x * 1.6e-38 where the
 * scalar formula gives x * e^x, both nothing beside a unit's activations. */
#include "decode/cpu_silu.h"

#include <math.h>

#include "util/vec8.h"

#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void mt_silu_mul(float *g, const float *u, size_t n)
{
    const v8f one = splat8(1.0f);
    const v8i sign = (v8i)splat8(-0.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f x = load8(g + i);
        v8f e = exp8((v8f)((v8i)x | sign));          /* e^-|x| */
        v8f den = one + e;
        v8i neg = x < splat8(0.0f);
        v8f num = (v8f)(((v8i)e & neg) | ((v8i)one & ~neg));
        store8(g + i, x * (num / den) * load8(u + i));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
