/* stats.h: the one percentile rule of the project (nearest rank), so that a
 * p99 in a tick record, an mt-probe summary, an mt-replay line and an
 * mt-admit estimate mean the same thing: the smallest observed value with
 * at least q of the data at or below it. Exact over an array
 * (mt_stats_percentile), or within a bucket over a stream kept in bounded
 * memory (mt_pctl).
 */
#ifndef MT_STATS_H
#define MT_STATS_H

#include <stddef.h>
#include <stdint.h>

/* The 0-based index, in sorted order, of the q-quantile of n values
 * (n >= 1): nearest rank ceil(q n), clamped to 1..n, with q n rounded to
 * the nearest integer first when a floating-point error put it just above
 * one (0.1 x 30 is 3.0000000000000004: rank 3, not 4). q <= 0 gives the
 * minimum, q >= 1 the maximum. The histogram below uses it to pick its
 * bucket. */
uint64_t mt_stats_rank(uint64_t n, double q);

/* The q-quantile of v[0..n) by mt_stats_rank; sorts v in place (cheap when
 * already sorted). NAN when n is 0. */
double mt_stats_percentile(double *v, size_t n, double q);

/* The median of sorted v[0..n) as robust estimators define it (the mean of
 * the two middle values when n is even): the MAD scale constants in
 * admit.c assume this one, not the nearest-rank p50. 0 when n is 0. */
double mt_stats_median_sorted(const float *v, size_t n);
/* Percentiles in bounded memory (mt_pctl): a log-linear histogram of non-negative durations in ns, 1 us resolution
 * below 128 us and < 0.8 % relative error above, up to ~18 min; exact
 * count, sum, min and max. Fixed size, no allocation: cheap to keep one per
 * figure (latency, send jitter) for runs of any length. Its quantile is
 * the bucket holding the value of rank mt_stats_rank. */
#define MT_PCTL_SUB     128
#define MT_PCTL_OCTAVES 31
typedef struct mt_pctl {
    uint64_t count;
    double   sum_ns;
    uint64_t min_ns, max_ns;
    uint32_t bucket[MT_PCTL_OCTAVES * MT_PCTL_SUB];
} mt_pctl;

void     mt_pctl_reset(mt_pctl *p);
void     mt_pctl_add(mt_pctl *p, uint64_t ns);   /* negative: pass 0 */
void     mt_pctl_merge(mt_pctl *into, const mt_pctl *from);
/* q in [0,1]; returns ns (0 when empty). q=1 returns the exact max. */
uint64_t mt_pctl_quantile(const mt_pctl *p, double q);
double   mt_pctl_mean(const mt_pctl *p);         /* ns */

#endif
