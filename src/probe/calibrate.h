/* calibrate.h: `mt-probe calibrate`: measures a real backend's step time
 * over a grid of batch sizes and cache lengths, fits the simulated device's
 * cost model (backend_sim.h) to it and writes a profile (mt-profile(5)). */
#ifndef MT_CALIBRATE_H
#define MT_CALIBRATE_H

#include <stddef.h>
#include <stdio.h>

#include "decode/decoder.h"

/* One measured point and the model's fit at it. */
typedef struct mt_calib_point {
    int    batch;
    long   len;          /* cache length before the timed steps */
    double bytes, flops; /* the cost model's terms for the median step */
    double t_s;          /* median measured step time */
    double fit_s;        /* the fitted model's prediction */
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
    const char *output;      /* the profile's file; NULL: standard output */
    const char *name;        /* the profile's name; NULL or "": calibrated-DEVICE */
    mt_device   device;      /* MT_DEV_CPU or MT_DEV_CUDA */
    int         threads;     /* CPU threads; 0: all cores */
    int         reps;        /* timed steps per point (2 more warm up) */
    long        batches[MT_CALIB_GRID_MAX], lengths[MT_CALIB_GRID_MAX];
    int         nbatches, nlengths;
    double      memory;      /* the profile's device memory; 0: this host's
                              * physical memory (cpu only) */
    double      reserve;     /* the profile's reserve; < 0: memory / 8 */
} mt_calibrate_opts;

/* The defaults of `mt-probe calibrate` (synthetic:small on the CPU,
 * batches 1,2,4,8,16, lengths 16,64,256,1024, 12 steps a point). */
void mt_calibrate_opts_default(mt_calibrate_opts *o);

/* Times the grid, fits the cost model and writes the profile. The grid,
 * every point's residual, the fit and warnings go to report. 0, or -1
 * with err (nothing printed about it). */
int mt_calibrate_run(const mt_calibrate_opts *o, FILE *report, char *err, size_t errlen);

#endif
