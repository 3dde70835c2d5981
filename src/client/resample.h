/* resample.h: rate conversion with libsamplerate at a chosen quality,
 * and mono float to s16 frames. Library code: nothing printed.
 */
#ifndef MT_RESAMPLE_H
#define MT_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "client/audio_read.h"

/* libsamplerate converters by name: "best", "medium", "fastest", "zoh",
 * "linear". Returns the SRC_* constant or -1. */
int         mt_audio_quality_parse(const char *name);
const char *mt_audio_quality_name(int quality);

/* out = in converted to rate (a copy when the rates are equal). */
int  mt_audio_resample(const mt_audio *in, int rate, int quality,
                       mt_audio *out, char *err, size_t errlen);

/* ---- a stream, converted a block at a time ------------------------------ */
typedef struct mt_resampler mt_resampler;
/* A converter from in_rate to out_rate (a copy when they are equal). 0, or
 * -1 with err. */
int  mt_resampler_new(int in_rate, int out_rate, int quality, mt_resampler **r,
                      char *err, size_t errlen);
/* Converts what it can of in[0..n_in) into out[0..cap): *used gets the
 * input consumed, the return the output made (-1 with err). end: no input
 * after this; call again with n_in 0 until it returns 0 to flush. */
long mt_resampler_run(mt_resampler *r, const float *in, size_t n_in, int end,
                      size_t *used, float *out, size_t cap, char *err,
                      size_t errlen);
void mt_resampler_reset(mt_resampler *r);   /* a new stream from its start */
void mt_resampler_free(mt_resampler *r);

/* float [-1,1] -> s16 with rounding; values beyond full scale (however
 * large, or infinite) clip, NaN becomes 0. */
void mt_audio_to_s16(const float *in, int16_t *out, size_t n);

#endif
