/* calibrate.h: `mt-probe calibrate`: measures a real backend's step time
 * over a grid of batch sizes and cache lengths, fits the simulated device's
 * cost model (backend_sim.h) to it and writes a profile (mt-profile(5)). */
#ifndef MT_CALIBRATE_H
#define MT_CALIBRATE_H

#include <stddef.h>

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

/* The subcommand: argv[0] is "calibrate". Returns an exit status. */
int mt_probe_calibrate_main(int argc, char **argv);

#endif
