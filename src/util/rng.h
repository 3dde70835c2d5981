/* rng.h: the one seeded generator (xoshiro256** seeded by splitmix64) used
 * by the synthetic weights, the simulated device's noise and the probe's
 * workloads: fast, and identical on every machine (no libc rand()).
 *
 * The step and splitmix64 are inline because the synthetic weights draw
 * billions of numbers from them; every value they give is part of the
 * documented synthetic init (model.h), so they must never change. */
#ifndef MT_RNG_H
#define MT_RNG_H

#include <stdint.h>

typedef struct mt_rng { uint64_t s[4]; } mt_rng;

/* Advances *x and returns the next splitmix64 output. */
static inline uint64_t mt_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t mt_rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* The next xoshiro256** output. */
static inline uint64_t mt_rng_next(mt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = mt_rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = mt_rng_rotl(s[3], 45);
    return result;
}

/* State from four splitmix64 outputs of seed. */
void   mt_rng_seed(mt_rng *r, uint64_t seed);
double mt_rng_uniform(mt_rng *r);          /* [0,1), 53 bits */
double mt_rng_normal(mt_rng *r);           /* Box-Muller, one per call */

#endif
