/* stats.c: percentiles by one rank rule (see stats.h). */
#include "util/stats.h"

#include <math.h>
#include <stdlib.h>

uint64_t mt_stats_rank(uint64_t n, double q)
{
    if (n == 0 || q <= 0)
        return 0;
    if (q >= 1)
        return n - 1;
    /* The 0.999999 instead of ceil(): q n that should be an integer but
     * came out a hair above it keeps its rank. */
    double r = q * (double)n + 0.999999;
    uint64_t k = r >= (double)n ? n : (uint64_t)r;
    return k >= 1 ? k - 1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double mt_stats_percentile(double *v, size_t n, double q)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return v[mt_stats_rank(n, q)];
}

double mt_stats_median_sorted(const float *v, size_t n)
{
    if (n == 0)
        return 0;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
