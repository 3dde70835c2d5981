/* test_calib_ticks.c: `mt-probe calibrate --served`'s tick lines to fit
 * points (calibrate_ticks.c): each tick goes through mt-serve's line
 * format and parser; the sessions' age (so the positions a row reads)
 * follows the level's stepped sum, warm-up ticks included, and restarts
 * with a new level; catch-up ticks and unmeasured ticks are not samples;
 * groups are medians; small groups are left out; and the fit on the points
 * of synthetic ticks made by a known cost model recovers that model. */
#include "tap.h"
#include "decode/backend_sim.h"
#include "decode/decoder.h"
#include "model/model.h"
#include "probe/calibrate.h"
#include "wire/latline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

/* A tick of `level` sessions, through mt-serve's line format and back. */
static int add_tick(mt_calib_ticks *ct, int level, int measuring, int64_t tick,
                    int64_t active, int64_t stepped, double step_ms)
{
    mt_tick t;
    memset(&t, 0, sizeof t);
    t.tick = tick;
    t.t = (double)tick * 0.08;
    t.active = active;
    t.stepped = stepped;
    t.step_ms = step_ms;
    t.naive_ms = step_ms;
    t.in = t.out = stepped;
    t.naive_met = t.met = 100;
    t.miss = 0;
    snprintf(t.device, sizeof t.device, "cpu");
    char line[MT_LL_MAX_LINE];
    long len = mt_tick_format(&t, line, sizeof line);
    static mt_latline ll;
    mt_tick back;
    if (len < 0 || mt_latline_parse(line, (size_t)len, 1, &ll, err, sizeof err) ||
        mt_tick_from_line(&ll, 1, &back, err, sizeof err)) {
        tap_diag("tick line: %s", err);
        return -9;
    }
    return mt_calib_ticks_add(ct, level, measuring, &back);
}

/* Ages, visible lengths, filters and grouping on hand-checkable ticks
 * (window 32 + sink 4: buckets of 9 positions). */
static void test_points(const mt_config *cfg)
{
    mt_calib_ticks *ct = NULL;
    if (mt_calib_ticks_new(cfg, 4, 4, 32, &ct, err, sizeof err)) {
        ok(0, "mt_calib_ticks_new: %s", err);
        return;
    }
    int rc = 0;
    /* level 4: 10 warm-up ticks (age 0..9), then ages 10, 11, 12 */
    for (int k = 0; k < 10; k++)
        rc |= add_tick(ct, 4, 0, k, 4, 4, 5.0);
    is_int(rc, 0, "warm-up ticks are not samples");
    is_int(add_tick(ct, 4, 1, 10, 4, 4, 7.0), 1, "a measured tick is a sample");
    is_int(add_tick(ct, 4, 1, 11, 4, 4, 9.0), 1, "a second");
    /* a catch-up tick: 6 rows of 4 sessions, two batches in one time; it
     * still ages the sessions (by 6/4 frames) */
    is_int(add_tick(ct, 4, 1, 12, 4, 6, 30.0), 0, "a tick that stepped more rows than sessions is not one");
    is_int(add_tick(ct, 4, 1, 13, 4, 0, 0.0), 0, "an idle tick is not one");
    is_int(add_tick(ct, 4, 1, 14, 4, 4, 8.0), 1, "a third (age 13.5, read as 14: 15 positions)");
    /* level 2 starts from age 0: positions 1, 2, 3; then two of batch 1 */
    is_int(add_tick(ct, 2, 1, 15, 2, 2, 3.0), 1, "a new level");
    add_tick(ct, 2, 1, 16, 2, 2, 2.0);
    add_tick(ct, 2, 1, 17, 2, 2, 4.0);
    add_tick(ct, 2, 1, 18, 2, 1, 1.0);
    add_tick(ct, 2, 1, 19, 2, 1, 1.0);
    is_int((int)mt_calib_ticks_count(ct), 8, "8 samples");
    is_str(mt_calib_ticks_device(ct), "cpu", "the ticks' device");

    mt_calib_point *pts = NULL;
    int n = 0, dropped = 0;
    double sigma = -1;
    if (mt_calib_ticks_points(ct, 3, &pts, &n, &sigma, &dropped, err, sizeof err)) {
        ok(0, "points: %s", err);
        mt_calib_ticks_free(ct);
        return;
    }
    is_int(n, 2, "two groups of 3 ticks are points");
    is_int(dropped, 2, "the group of 2 (batch 1) is left out");
    if (n == 2) {
        is_int(pts[0].batch, 2, "batch 2 first");
        is_int((int)pts[0].len, 2, "ages 0, 1, 2: median 2 positions");
        is_near(pts[0].t_s, 3e-3, 1e-12, "the median of 3, 2, 4 ms");
        is_int(pts[0].ticks, 3, "of 3 ticks");
        is_int(pts[1].batch, 4, "then batch 4");
        is_int((int)pts[1].len, 12, "ages 10, 11, 14: 11, 12, 15 positions, median 12");
        is_near(pts[1].t_s, 8e-3, 1e-12, "the median of 7, 9, 8 ms");
        ok(pts[1].bytes > pts[0].bytes && pts[1].flops > 2 * pts[0].flops * 0.99,
           "cost terms grow with the batch");
    }
    /* sigma: sum of log(t/median)^2 over both groups, over (3-1)+(3-1) */
    double s2 = pow(log(2.0 / 3), 2) + pow(log(4.0 / 3), 2) + pow(log(7.0 / 8), 2) + pow(log(9.0 / 8), 2);
    is_near(sigma, sqrt(s2 / 4), 1e-9, "jitter: the spread of log(tick / median)");
    free(pts);
    mt_calib_ticks_free(ct);
}

/* Ticks made by a known cost model (memory-bound at small batches,
 * compute-bound at large), at four levels of a sweep, 1 s warm-up and 4 s
 * hold: the fit of their points recovers the model. */
static void test_fit_recovers(const mt_config *cfg)
{
    mt_calib_ticks *ct = NULL;
    mt_sim *terms = NULL;
    if (mt_calib_ticks_new(cfg, 4, 4, 32, &ct, err, sizeof err) ||
        mt_calib_unit_terms(cfg, 4, &terms, err, sizeof err)) {
        ok(0, "setup: %s", err);
        mt_calib_ticks_free(ct);
        return;
    }
    int64_t vis[64];
    for (int i = 0; i < 64; i++)
        vis[i] = 36;
    mt_sim_cost c1;
    mt_sim_step_cost(terms, 1, vis, 0, &c1);
    /* 4 ms of memory time at batch 1; compute overtakes near batch 16 */
    double bw = c1.bytes / 4e-3, rate = c1.flops * 16 / 4e-3, ov = 1.5e-3;
    static const int levels[] = { 1, 4, 16, 48 };
    int64_t tick = 0;
    for (int li = 0; li < 4; li++) {
        int B = levels[li];
        for (int k = 0; k < 62; k++) {
            /* the age the accumulator will see: k frames stepped so far */
            int64_t q = k, v = q + 1 < 4 ? q + 1 : 4 + (q + 1 - 4 < 32 ? q + 1 - 4 : 32);
            for (int b = 0; b < B; b++)
                vis[b] = v;
            mt_sim_cost c;
            mt_sim_step_cost(terms, B, vis, 0, &c);
            double tm = c.bytes / bw, tf = c.flops / rate;
            add_tick(ct, B, k >= 12, tick++, B, B, ((tm > tf ? tm : tf) + ov) * 1e3);
        }
    }
    mt_calib_point *pts = NULL;
    int n = 0, dropped = 0;
    double sigma = 0, fbw, frate, fov;
    if (mt_calib_ticks_points(ct, 3, &pts, &n, &sigma, &dropped, err, sizeof err)) {
        ok(0, "points: %s", err);
    } else {
        is_int(n, 4 * 3, "4 levels x 3 length buckets (ages 12..61 read 13..36 positions)");
        double rms = mt_calib_fit(pts, n, &fbw, &frate, &fov);
        ok(rms >= 0 && rms < 0.01, "the fit's RMS residual is under 1%% (%.3g)", rms);
        ok(fabs(fbw / bw - 1) < 0.03 && fabs(frate / rate - 1) < 0.03 && fabs(fov / ov - 1) < 0.1,
           "recovers bandwidth %.4g (%.4g), matrix rate %.4g (%.4g), overhead %.3g ms (%.3g)",
           fbw, bw, frate, rate, fov * 1e3, ov * 1e3);
        ok(sigma < 0.2, "within a group the times differ by the lengths only (sigma %.3f)", sigma);
    }
    free(pts);
    mt_sim_free(terms);
    mt_calib_ticks_free(ct);
}

int main(void)
{
    mt_model *m = NULL;
    if (mt_model_load("synthetic:tiny", MT_MODEL_SHAPE_ONLY, &m, err, sizeof err)) {
        tap_skip_all(err);
        return 0;
    }
    test_points(&m->cfg);
    test_fit_recovers(&m->cfg);
    mt_model_free(m);
    return tap_done();
}
