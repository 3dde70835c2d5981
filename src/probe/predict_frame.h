/* predict_frame.h: sessions per device for a speech model's whole frame
 * on a simulated device (predict_frame.c; mt-probe predict --profile). */
#ifndef MT_PROBE_PREDICT_FRAME_H
#define MT_PROBE_PREDICT_FRAME_H

#include <stddef.h>
#include "decode/backend_sim.h"
#include "decode/sim_profile.h"
#include "decode/step.h"

typedef struct mt_predict_frame_out {
    double      p99_factor;        /* a step's p99 over its prediction */
    mt_sim_cost at1;               /* the frame of one session */
    mt_sim_cost atmax;             /* the frame of compute_sessions */
    int         compute_sessions;  /* the most whose p99 is under the period */
    long        memory_sessions;   /* the most the K/V pool holds at S + W */
    int         sessions;          /* the lesser */
} mt_predict_frame_out;

/* model: a Kyutai spec (its temporal shape); codec: the sessions' codec
 * (NULL: none); B up to max_b. 0, or -1 with err. */
int mt_predict_frame(const mt_sim_profile *p, const char *model, const mt_codec_cost *codec,
                     int sink, int window, double period_s, int max_b, mt_predict_frame_out *out,
                     char *err, size_t errlen);

#endif
