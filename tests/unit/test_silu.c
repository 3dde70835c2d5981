/* test_silu.c: mt_silu_mul (decode/cpu_silu.c), the gated feed-forward's
 * activation 8 lanes at a time, against the scalar formula with libm's
 * expf: within 1e-6 of the value (a few fp32 ulps) over [-90, 90] and at
 * 0, +-1e-30 and inf (1e-34 absolute: below -87 the vector takes e^-87
 * for e^x, cpu_silu.c); nan stays nan; the lanes past the last 8 (the
 * scalar tail) and u = g + n (the depformer's gate | up rows). */
#include "tap.h"
#include "decode/cpu_silu.h"

#include <math.h>
#include <stdlib.h>

static float ref(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* |a - b| within rel of |b| (or both nan, or equal infinities) */
static int near(float a, float b, double rel)
{
    if (isnan(b))
        return isnan(a);
    if (isinf(b))
        return a == b;
    return fabs((double)a - b) <= rel * fabs((double)b) + 1e-34;   /* below -87: e^-87 (cpu_silu.c) */
}

int main(void)
{
    enum { N = 4099 };   /* 512 blocks of 8 and a tail of 3 */
    float *g = malloc(2 * N * sizeof *g), *want = malloc(N * sizeof *want);
    if (!g || !want)
        tap_skip_all("out of memory");
    srand(7);
    for (int i = 0; i < N; i++) {
        g[i] = (float)(180.0 * rand() / RAND_MAX - 90.0);
        g[N + i] = (float)(4.0 * rand() / RAND_MAX - 2.0);
    }
    const float special[] = { 0.0f, -0.0f, 1e-30f, -1e-30f, INFINITY, 87.5f, -86.0f, 20.0f };
    for (int i = 0; i < 8; i++)
        g[100 + i] = special[i];
    for (int i = 0; i < N; i++)
        want[i] = ref(g[i], g[N + i]);
    mt_silu_mul(g, g + N, N);
    int bad = 0, worst = -1;
    double wrel = 0;
    for (int i = 0; i < N; i++) {
        if (!near(g[i], want[i], 1e-6))
            bad++;
        double rel = want[i] != 0 && isfinite(want[i]) ? fabs((double)g[i] - want[i]) / fabs((double)want[i]) : 0;
        if (rel > wrel && fabs((double)want[i]) > 1e-30)
            wrel = rel, worst = i;
    }
    ok(bad == 0, "silu(g) * u within 1e-6 of libm's over [-90, 90], 0, +-1e-30, inf, the tail "
       "(%d of %d outside; worst %.2e at %d)", bad, N, wrel, worst);
    float x[9] = { NAN, 1, 2, 3, 4, 5, 6, 7, NAN }, u[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    mt_silu_mul(x, u, 9);
    ok(isnan(x[0]) && isnan(x[8]) && near(x[1], ref(1, 1), 1e-6), "nan stays nan (a lane and the tail)");
    /* below -87 the vector's e^x stops at e^-87: nothing beside 1 */
    float far[8] = { -100, -100, -100, -100, -100, -100, -100, -100 }, one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    mt_silu_mul(far, one, 8);
    ok(fabsf(far[0]) < 1e-35f, "silu(-100) is nothing (%g)", (double)far[0]);
    free(g);
    free(want);
    return tap_done();
}
