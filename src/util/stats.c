/* stats.c: percentiles by one rank rule, over an array or a bounded
 * histogram (see stats.h). */
#include "util/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the histogram (mt_pctl) ---------------------------------------------- */

void mt_pctl_reset(mt_pctl *p) { memset(p, 0, sizeof *p); }

static int pctl_index(uint64_t us)
{
    if (us < MT_PCTL_SUB)
        return (int)us;
    int msb = 63 - __builtin_clzll(us);           /* >= 7 */
    int oct = msb - 6;                            /* 1.. */
    if (oct >= MT_PCTL_OCTAVES)
        return MT_PCTL_OCTAVES * MT_PCTL_SUB - 1;
    int sub = (int)((us >> (msb - 7)) & (MT_PCTL_SUB - 1));
    return oct * MT_PCTL_SUB + sub;
}

static uint64_t pctl_value(int idx)  /* bucket middle, us */
{
    int oct = idx / MT_PCTL_SUB, sub = idx % MT_PCTL_SUB;
    if (oct == 0)
        return (uint64_t)sub;
    int msb = oct + 6;
    uint64_t lo = ((uint64_t)1 << msb) | ((uint64_t)sub << (msb - 7));
    uint64_t width = (uint64_t)1 << (msb - 7);
    return lo + width / 2;
}

void mt_pctl_add(mt_pctl *p, uint64_t ns)
{
    if (p->count == 0 || ns < p->min_ns)
        p->min_ns = ns;
    if (ns > p->max_ns)
        p->max_ns = ns;
    p->count++;
    p->sum_ns += (double)ns;
    p->bucket[pctl_index(ns / 1000)]++;
}

void mt_pctl_merge(mt_pctl *into, const mt_pctl *from)
{
    if (!from->count)
        return;
    if (!into->count || from->min_ns < into->min_ns)
        into->min_ns = from->min_ns;
    if (from->max_ns > into->max_ns)
        into->max_ns = from->max_ns;
    into->count += from->count;
    into->sum_ns += from->sum_ns;
    for (int i = 0; i < MT_PCTL_OCTAVES * MT_PCTL_SUB; i++)
        into->bucket[i] += from->bucket[i];
}

uint64_t mt_pctl_quantile(const mt_pctl *p, double q)
{
    if (!p->count)
        return 0;
    if (q >= 1.0)
        return p->max_ns;
    if (q <= 0)
        return p->min_ns;
    /* the bucket holding the value of the shared rank rule */
    uint64_t rank = mt_stats_rank(p->count, q);
    uint64_t seen = 0;
    for (int i = 0; i < MT_PCTL_OCTAVES * MT_PCTL_SUB; i++) {
        seen += p->bucket[i];
        if (seen > rank) {
            uint64_t v = pctl_value(i) * 1000;
            if (v > p->max_ns)
                v = p->max_ns;
            if (v < p->min_ns)
                v = p->min_ns;
            return v;
        }
    }
    return p->max_ns;
}

double mt_pctl_mean(const mt_pctl *p)
{
    return p->count ? p->sum_ns / (double)p->count : 0;
}
