/* resample.c: rate conversion (libsamplerate) of mono float audio, and
 * float to s16. See resample.h.
 */
#define _GNU_SOURCE
#include "client/resample.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <samplerate.h>

#include "util/errmsg.h"
#include "util/io.h"

/* ---- rate conversion ---------------------------------------------------- */

static const struct { const char *name; int q; } qualities[] = {
    { "best", SRC_SINC_BEST_QUALITY },
    { "medium", SRC_SINC_MEDIUM_QUALITY },
    { "fastest", SRC_SINC_FASTEST },
    { "zoh", SRC_ZERO_ORDER_HOLD },
    { "linear", SRC_LINEAR },
};

int mt_audio_quality_parse(const char *name)
{
    for (size_t i = 0; i < sizeof qualities / sizeof qualities[0]; i++)
        if (!strcmp(name, qualities[i].name))
            return qualities[i].q;
    return -1;
}

const char *mt_audio_quality_name(int quality)
{
    for (size_t i = 0; i < sizeof qualities / sizeof qualities[0]; i++)
        if (qualities[i].q == quality)
            return qualities[i].name;
    return "?";
}

int mt_audio_resample(const mt_audio *in, int rate, int quality,
                      mt_audio *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->rate = rate;
    out->channels_in = in->channels_in;
    memcpy(out->format, in->format, sizeof out->format);
    if (rate < 1 || in->rate < 1) {
        mt_set_err(err, errlen, "bad sample rate %d -> %d", in->rate, rate);
        return -1;
    }
    if (rate == in->rate) {
        out->samples = malloc((in->frames ? in->frames : 1) * sizeof(float));
        if (!out->samples) {
            mt_set_err(err, errlen, "out of memory");
            return -1;
        }
        memcpy(out->samples, in->samples, in->frames * sizeof(float));
        out->frames = in->frames;
        return 0;
    }
    double ratio = (double)rate / in->rate;
    /* The converted length of the whole signal, rounded to nearest:
     * libsamplerate's end-of-input flush delivers exactly this. */
    size_t want = (size_t)llround((double)in->frames * ratio);
    size_t cap = want + 64;
    out->samples = mt_calloc_or_err(cap, sizeof(float), err, errlen, NULL);
    if (!out->samples)
        return -1;
    int e = 0;
    SRC_STATE *st = src_new(quality, 1, &e);
    if (!st) {
        mt_set_err(err, errlen, "libsamplerate: %s", src_strerror(e));
        free(out->samples);
        out->samples = NULL;
        return -1;
    }
    SRC_DATA d;
    memset(&d, 0, sizeof d);
    size_t done_in = 0, done_out = 0;
    for (;;) {
        d.data_in = in->samples + done_in;
        d.input_frames = (long)(in->frames - done_in);
        d.data_out = out->samples + done_out;
        d.output_frames = (long)(cap - done_out);
        d.end_of_input = 1;
        d.src_ratio = ratio;
        e = src_process(st, &d);
        if (e) {
            mt_set_err(err, errlen, "libsamplerate: %s", src_strerror(e));
            src_delete(st);
            free(out->samples);
            out->samples = NULL;
            return -1;
        }
        done_in += (size_t)d.input_frames_used;
        done_out += (size_t)d.output_frames_gen;
        if ((d.output_frames_gen == 0 && done_in >= in->frames) ||
            done_out >= cap)
            break;
    }
    src_delete(st);
    /* Exactly want frames: trim the converter's tail or pad with zeros. */
    if (done_out < want)
        memset(out->samples + done_out, 0, (want - done_out) * sizeof(float));
    out->frames = want;
    return 0;
}

void mt_audio_to_s16(const float *in, int16_t *out, size_t n)
{
    /* Clamp in float before converting: lrintf of a value outside long's
     * range (1e20 * 32768) is undefined and gives LONG_MIN on x86, which
     * turned a huge positive sample into -32768. */
    for (size_t i = 0; i < n; i++) {
        float v = in[i] * 32768.0f;
        if (isnan(v))
            v = 0.0f;
        else if (v > 32767.0f)
            v = 32767.0f;
        else if (v < -32768.0f)
            v = -32768.0f;
        out[i] = (int16_t)lrintf(v);
    }
}


/* ---- a stream of blocks --------------------------------------------------- */

struct mt_resampler {
    SRC_STATE *st;      /* NULL when the rates are equal */
    double     ratio;
};

int mt_resampler_new(int in_rate, int out_rate, int quality, mt_resampler **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    if (in_rate < 1 || out_rate < 1) {
        mt_set_err(err, errlen, "bad sample rate %d -> %d", in_rate, out_rate);
        return -1;
    }
    mt_resampler *r = mt_calloc_or_err(1, sizeof *r, err, errlen, NULL);
    if (!r)
        return -1;
    r->ratio = (double)out_rate / in_rate;
    if (in_rate != out_rate) {
        int e = 0;
        r->st = src_new(quality, 1, &e);
        if (!r->st) {
            mt_set_err(err, errlen, "libsamplerate: %s", src_strerror(e));
            free(r);
            return -1;
        }
    }
    *out = r;
    return 0;
}

long mt_resampler_run(mt_resampler *r, const float *in, size_t n_in, int end,
                      size_t *used, float *out, size_t cap, char *err,
                      size_t errlen)
{
    if (!r->st) {
        size_t n = n_in < cap ? n_in : cap;
        memcpy(out, in, n * sizeof *out);
        *used = n;
        return (long)n;
    }
    SRC_DATA d;
    memset(&d, 0, sizeof d);
    d.data_in = in;
    d.input_frames = (long)n_in;
    d.data_out = out;
    d.output_frames = (long)cap;
    d.end_of_input = end;
    d.src_ratio = r->ratio;
    int e = src_process(r->st, &d);
    if (e) {
        mt_set_err(err, errlen, "libsamplerate: %s", src_strerror(e));
        return -1;
    }
    *used = (size_t)d.input_frames_used;
    return d.output_frames_gen;
}

void mt_resampler_reset(mt_resampler *r)
{
    if (r->st)
        src_reset(r->st);
}

void mt_resampler_free(mt_resampler *r)
{
    if (!r)
        return;
    if (r->st)
        src_delete(r->st);
    free(r);
}
