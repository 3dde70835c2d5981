/* test_stats.c: the one percentile rule (util/stats.c): nearest rank over
 * an array, and the bounded histogram (mt_pctl) picking the same rank. */
#include "tap.h"
#include "util/stats.h"

#include <stdint.h>

int main(void)
{
    is_int(mt_stats_rank(10, 0.5), 4, "p50 of 10 is rank 5 (index 4)");
    is_int(mt_stats_rank(30, 0.1), 2, "0.1 x 30 = 3.0000000000000004 keeps rank 3");
    is_int(mt_stats_rank(100, 0.99), 98, "p99 of 100 is the 99th");
    is_int(mt_stats_rank(1, 0.99), 0, "one value: itself");
    is_int(mt_stats_rank(7, 0), 0, "q 0: the minimum");
    is_int(mt_stats_rank(7, 1), 6, "q 1: the maximum");

    double v[10] = { 9, 1, 8, 2, 7, 3, 6, 4, 5, 10 };
    ok(mt_stats_percentile(v, 10, 0.5) == 5, "p50 of 1..10 is 5 (nearest rank)");
    ok(mt_stats_percentile(v, 10, 0.9) == 9, "p90 of 1..10 is 9");
    ok(isnan(mt_stats_percentile(v, 0, 0.5)), "no values: NAN");
    float f[4] = { 1, 2, 3, 4 };
    ok(mt_stats_median_sorted(f, 4) == 2.5f, "the robust median of an even count averages");

    /* below 128 us the histogram is exact to the microsecond: its quantile
     * is the array's, by the same rank */
    mt_pctl p, q;
    mt_pctl_reset(&p);
    mt_pctl_reset(&q);
    double us[100];
    for (int i = 0; i < 100; i++) {
        us[i] = (double)((i * 37) % 100 + 1);
        mt_pctl_add(i < 50 ? &p : &q, (uint64_t)us[i] * 1000);
    }
    mt_pctl_merge(&p, &q);
    is_int((long long)p.count, 100, "merged count");
    int same = 1;
    const double qs[] = { 0.01, 0.1, 0.5, 0.9, 0.99 };
    for (size_t k = 0; k < sizeof qs / sizeof *qs; k++) {
        uint64_t h = mt_pctl_quantile(&p, qs[k]);
        double e = mt_stats_percentile(us, 100, qs[k]) * 1000;
        if ((double)h != e) {
            same = 0;
            tap_diag("q %.2f: histogram %llu, array %.0f", qs[k], (unsigned long long)h, e);
        }
    }
    ok(same, "histogram quantiles equal the array's (exact range)");
    ok(mt_pctl_quantile(&p, 1) == 100000, "q 1: the exact max");
    ok(mt_pctl_mean(&p) == 50500, "mean 50.5 us");
    /* above, within the bucket's 0.8 % */
    mt_pctl_reset(&p);
    for (int i = 1; i <= 1000; i++)
        mt_pctl_add(&p, (uint64_t)i * 1000000);   /* 1..1000 ms */
    double p99 = (double)mt_pctl_quantile(&p, 0.99);
    ok(fabs(p99 - 990e6) <= 0.008 * 990e6, "p99 of 1..1000 ms within 0.8%% of 990 ms (%.0f)", p99);
    return tap_done();
}
