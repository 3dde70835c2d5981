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

/* float [-1,1] -> s16 with rounding; values beyond full scale (however
 * large, or infinite) clip, NaN becomes 0. */
void mt_audio_to_s16(const float *in, int16_t *out, size_t n);

#endif
