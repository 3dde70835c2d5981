/* calibrate.h: `mt-probe calibrate`: measures a real backend's step time
 * over a grid of batch sizes and cache lengths, fits the simulated device's
 * cost model (backend_sim.h) to it and writes a profile (mt-profile(5)). */
#ifndef MT_CALIBRATE_H
#define MT_CALIBRATE_H

#include <stddef.h>
#include <stdio.h>

#include "decode/backend_sim.h"
#include "decode/decoder.h"
#include "model/model.h"

struct mt_tick;   /* wire/latline.h */

/* One measured point and the model's fit at it. */
typedef struct mt_calib_point {
    int    batch;
    long   len;          /* cache length before the timed steps */
    double bytes, flops; /* the cost model's terms for the median step */
    double t_s;          /* median measured step time */
    double fit_s;        /* the fitted model's prediction */
    int    ticks;        /* steps the median is of */
} mt_calib_point;

/* Fits bandwidth, matrix_rate and overhead to n points (least squares of
 * the relative error of max(bytes/bw, flops/rate) + overhead; Nelder-Mead
 * in log space from a closed-form start). Fills fit_s. Returns the RMS
 * relative residual, or -1 when n < 3. */
double mt_calib_fit(mt_calib_point *pts, int n, double *bandwidth,
                    double *matrix_rate, double *overhead_s);

/* The most batch sizes, and the most cache lengths, in one grid. */
#define MT_CALIB_GRID_MAX 32

typedef struct mt_calibrate_opts {
    const char *model;
    const char *output;      /* the profile's file; NULL: the caller's
                                stream (mt_calibrate_run's profile) */
    const char *name;        /* the profile's name; NULL or "": calibrated-DEVICE */
    mt_device   device;      /* MT_DEV_CPU or MT_DEV_CUDA */
    int         threads;     /* CPU threads; 0: all cores */
    int         reps;        /* timed steps per point (2 more warm up) */
    long        batches[MT_CALIB_GRID_MAX], lengths[MT_CALIB_GRID_MAX];
    int         nbatches, nlengths;
    double      memory;      /* the profile's device memory; 0: this host's
                              * physical memory (cpu only) */
    double      reserve;     /* the profile's reserve; < 0: memory / 8 */
    /* --served: time the step inside a serving mt-serve (serve_bin) under
     * a sweep of mt-probe's paced clients, at the concurrency levels
     * batches[] (each held hold_s after warmup_s), serving the window
     * policy sink + window; lengths[] and reps are not used. */
    int         served;
    /* a Kyutai model (bare only): its codec (a Mimi spec), timed with the
     * depformer beside the temporal step (calibrate_frame.h); NULL: the
     * depformer alone */
    const char *codec;
    const char *serve_bin;
    int         sink, window;
    double      hold_s, warmup_s;
} mt_calibrate_opts;

/* The defaults of `mt-probe calibrate` (synthetic:small on the CPU,
 * batches 1,2,4,8,16, lengths 16,64,256,1024, 12 steps a point; served:
 * mt-serve's window 256 + sink 4, 4 s hold after 1 s warm-up). */
void mt_calibrate_opts_default(mt_calibrate_opts *o);

/* Times the grid, fits the cost model and writes the profile, to
 * o->output or else to profile (the main's standard output). The grid,
 * every point's residual, the fit and warnings go to report. 0, or -1
 * with err (nothing printed about it). */
int mt_calibrate_run(const mt_calibrate_opts *o, FILE *report, FILE *profile, char *err,
                     size_t errlen);

/* The levels --served plays when --batches is not given. */
#define MT_CALIB_SERVED_LEVELS "1,8,16,32,48,64"
/* A --served point needs this many ticks (fewer: left out, counted). */
#define MT_CALIB_SERVED_MIN_TICKS 3

/* The simulator at unit rates (bandwidth and matrix rate 1, no overhead)
 * for a model whose weights and K/V have elem-byte elements: its step
 * cost is the cost model's bytes and flops terms. */
int mt_calib_unit_terms(const mt_config *cfg, size_t elem, mt_sim **out,
                        char *err, size_t errlen);

/* ---- --served: tick lines to fit points (calibrate_ticks.c) ---------------- */

/* The samples of a served calibration: one per usable tick. cfg and elem
 * are the served model's; sink and window its window policy (window <= 0:
 * the full policy, every position read). */
typedef struct mt_calib_ticks mt_calib_ticks;
int  mt_calib_ticks_new(const mt_config *cfg, size_t elem, int sink, int window,
                        mt_calib_ticks **out, char *err, size_t errlen);
void mt_calib_ticks_free(mt_calib_ticks *ct);
/* One tick record, read while a level of `level` sessions played (every
 * tick of the level, warm-up included, in order: they give the sessions'
 * age); measuring: inside the level's hold. A level other than the last
 * call's starts its sessions' age from 0. A tick becomes a sample when
 * measuring, it stepped 1 <= stepped <= active rows (more is a catch-up
 * round: two batches in one time) and step_ms > 0: batch = stepped, each
 * row reading the visible positions of a query at the level's mean
 * stepped-so-far per session. Returns 1 (a sample), 0 (not one), -1 (out
 * of memory). */
int  mt_calib_ticks_add(mt_calib_ticks *ct, int level, int measuring,
                        const struct mt_tick *t);
size_t mt_calib_ticks_count(const mt_calib_ticks *ct);   /* samples */
/* The ticks' device label ("cpu", "cuda", ...), "" when none said it. */
const char *mt_calib_ticks_device(const mt_calib_ticks *ct);
/* Groups the samples by batch and a quarter of the window bound into
 * points (*pts_out, malloc'd; the caller frees it): each group's median
 * time at its median visible length, with the cost model's terms; groups
 * of fewer than min_ticks samples are left out (*dropped counts their
 * ticks). *sigma: the spread of log(tick / its point's median), the
 * profile's jitter. 0, or -1 with err. */
int  mt_calib_ticks_points(mt_calib_ticks *ct, int min_ticks, mt_calib_point **pts_out,
                           int *npts, double *sigma, int *dropped, char *err,
                           size_t errlen);

#endif
