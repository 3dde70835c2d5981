/* stats.h: the one percentile rule of the project (nearest rank), so that a
 * p99 in a tick record, an mt-probe summary, an mt-replay line and an
 * mt-admit estimate mean the same thing: the smallest observed value with
 * at least q of the data at or below it.
 */
#ifndef MT_STATS_H
#define MT_STATS_H

#include <stddef.h>
#include <stdint.h>

/* The 0-based index, in sorted order, of the q-quantile of n values
 * (n >= 1): nearest rank ceil(q n), clamped to 1..n, with q n rounded to
 * the nearest integer first when a floating-point error put it just above
 * one (0.1 x 30 is 3.0000000000000004: rank 3, not 4). q <= 0 gives the
 * minimum, q >= 1 the maximum. Histogram percentiles (client.c) use it to
 * pick their bucket. */
uint64_t mt_stats_rank(uint64_t n, double q);

/* The q-quantile of v[0..n) by mt_stats_rank; sorts v in place (cheap when
 * already sorted). NAN when n is 0. */
double mt_stats_percentile(double *v, size_t n, double q);

/* The median of sorted v[0..n) as robust estimators define it (the mean of
 * the two middle values when n is even): the MAD scale constants in
 * admit.c assume this one, not the nearest-rank p50. 0 when n is 0. */
double mt_stats_median_sorted(const float *v, size_t n);

#endif
