/* calibrate_frame.h: the speech frame's stages beside the temporal step
 * for `mt-probe calibrate` with a Kyutai model: the depformer and the
 * Mimi codec timed alone at each batch of the grid, and the profile
 * figures (mt-profile(5): depformer_*, codec_*) fitted to them. */
#ifndef MT_PROBE_CALIBRATE_FRAME_H
#define MT_PROBE_CALIBRATE_FRAME_H

#include <stdio.h>
#include "model/kyutai_lm.h"
#include "probe/calibrate.h"

/* One stage's fit: t(B) = a + b B over the timed batches, least squares
 * on the medians. */
typedef struct mt_calib_line {
    double a_s, b_s;      /* intercept (s), slope (s a session) */
    double rms;           /* RMS relative residual; < 0: not fitted */
} mt_calib_line;

typedef struct mt_calib_frame {
    double        dep_params;      /* parameters read a frame (profile's D) */
    int           dep_weight_bytes;
    mt_calib_line dep;             /* the depformer's 8 steps of B sessions */
    double        dep_rate, dep_overhead_us;
    double        codec_flops;     /* encode + decode, a session-frame */
    mt_calib_line codec;           /* encode + decode of B sessions' frames */
    double        codec_rate, codec_overhead_us;
    int           have_dep, have_codec;
} mt_calib_frame;

/* Least squares of t = a + b x over n points (x, t); RMS relative
 * residual in *rms (-1 with fewer than 2 distinct x). */
void mt_calib_line_fit(const double *x, const double *t, int n, mt_calib_line *out);

/* The depformer's parameters a frame reads: every codebook step's
 * depformer_in, layers and head (embedding tables excluded). */
double mt_calib_dep_params(const mt_kyutai_config *kc);

/* Times lm's depformer and the codec (o->codec; none: skipped) on
 * o->device at each of o->batches (o->reps frames after 2 to warm up),
 * prints the points and fits to report, and fills out. bandwidth is the
 * temporal fit's: the depformer's intercept less its weights' read time
 * is its overhead. 0, or -1 with err. */
int mt_calib_frame_run(const mt_calibrate_opts *o, const mt_kyutai_lm *lm, double bandwidth,
                       FILE *report, mt_calib_frame *out, char *err, size_t errlen);

/* The profile lines for out (mt-profile(5)), each saying where it came
 * from. */
void mt_calib_frame_print(const mt_calib_frame *f, FILE *out);

#endif
