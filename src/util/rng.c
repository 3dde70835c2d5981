/* rng.c: see rng.h. */
#define _GNU_SOURCE
#include "util/rng.h"

#include <math.h>

void mt_rng_seed(mt_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = mt_splitmix64(&x);
}

double mt_rng_uniform(mt_rng *r)
{
    return (double)(mt_rng_next(r) >> 11) * 0x1.0p-53;
}

double mt_rng_normal(mt_rng *r)
{
    double u1 = mt_rng_uniform(r), u2 = mt_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
