/* median.h: the median the benchmark helpers report (mt-benchcodec,
 * mt-benchkyutai, mt-benchq8): v sorted in place, the middle value (the
 * mean of the two middle ones for an even n). Static functions, included
 * by one helper program each. */
#ifndef MT_TESTS_MEDIAN_H
#define MT_TESTS_MEDIAN_H

#include <stdlib.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
