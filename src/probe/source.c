/* source.c: the audio mt-probe's sessions send.
 *
 * Capacity experiments need many sessions of input, not a particular one:
 * synthetic input is a voiced-like tone (a fundamental and two harmonics
 * with a slow vibrato), different per session so no two streams are
 * identical, and deterministic so a rerun sends the same bytes. With a
 * file, every session plays it in a loop from its own offset.
 *
 * The tone is built from tables made once at open, not from sin() per
 * sample: five sin() calls a sample cost about 150 us a 1920-sample frame,
 * which capped one client thread at 5,000-8,000 frames/s, and a client that
 * falls behind reads its returned frames late and reports its own lag as
 * the server's round trip (bench/RESULTS.md, "Host-side frame ceiling").
 * The carrier of each of SYN_CLASSES fundamentals is one second long and
 * exactly periodic (its phase is the integral of the frequency, and the
 * 5 Hz vibrato integrates to zero over a second), so it loops without a
 * click; the slow per-session envelope is evaluated at the frame's edges
 * and interpolated in between. The file is
 * read once (libsndfile through audio.c) and resampled once per server
 * rate (libsamplerate).
 */
#include "util/errmsg.h"
#include "probe/probe.h"
#include "client/audio_read.h"
#include "client/resample.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SYN_RATE    24000
#define SYN_CLASSES 11

/* The carriers: SYN_CLASSES rows of SYN_RATE samples, row k at a
 * fundamental of 110 + 13 k Hz (an integer, so a second holds whole
 * cycles) with a 2 % vibrato at 5 Hz and two harmonics. */
static float *syn_tables(void)
{
    float *t = malloc(sizeof *t * SYN_CLASSES * SYN_RATE);
    if (!t)
        return NULL;
    for (int k = 0; k < SYN_CLASSES; k++) {
        double f0 = 110.0 + 13.0 * k;
        for (int m = 0; m < SYN_RATE; m++) {
            double tt = (double)m / SYN_RATE;
            /* 2 pi * integral of f0 (1 + 0.02 sin(2 pi 5 t)) dt */
            double ph = 2 * M_PI * f0 *
                        (tt + 0.02 * (1.0 - cos(2 * M_PI * 5.0 * tt)) /
                                  (2 * M_PI * 5.0));
            t[(size_t)k * SYN_RATE + (size_t)m] =
                (float)(0.5 * sin(ph) + 0.25 * sin(2 * ph) + 0.12 * sin(3 * ph));
        }
    }
    return t;
}

static double syn_env(int idx, uint64_t n)
{
    return 0.5 + 0.5 * sin(2 * M_PI * 0.7 * ((double)n / SYN_RATE) + idx);
}

int mt_probe_source_open(mt_probe_source *src, const char *path, char *err,
                         size_t errlen)
{
    memset(src, 0, sizeof *src);
    if (!path) {
        src->syn = syn_tables();
        if (!src->syn) {
            mt_set_err(err, errlen, "audio: out of memory");
            return -1;
        }
        return 0;
    }
    mt_audio a;
    if (mt_audio_read(path, &a, err, errlen))
        return -1;
    if (!a.frames) {
        mt_audio_free(&a);
        mt_set_err(err, errlen, "%s: no audio", path);
        return -1;
    }
    src->file = a.samples;      /* ownership moves here */
    src->file_n = a.frames;
    src->file_rate = a.rate;
    return 0;
}

int mt_probe_source_prepare(mt_probe_source *src, int rate, char *err,
                            size_t errlen)
{
    if (!src->file || src->rate == rate)
        return 0;
    mt_audio in = {0}, out = {0};
    in.samples = src->file;
    in.frames = src->file_n;
    in.rate = src->file_rate;
    in.channels_in = 1;
    if (mt_audio_resample(&in, rate, mt_audio_quality_parse("medium"), &out,
                          err, errlen))
        return -1;
    int16_t *pcm = malloc(sizeof *pcm * (out.frames ? out.frames : 1));
    if (!pcm) {
        mt_audio_free(&out);
        mt_set_err(err, errlen, "audio: out of memory");
        return -1;
    }
    mt_audio_to_s16(out.samples, pcm, out.frames);
    free(src->pcm);
    src->pcm = pcm;
    src->pcm_n = out.frames;
    src->rate = rate;
    mt_audio_free(&out);
    if (!src->pcm_n) {
        mt_set_err(err, errlen, "audio: nothing left after resampling");
        return -1;
    }
    return 0;
}

void mt_probe_source_frame(const mt_probe_source *src, int idx, uint32_t seq,
                           int16_t *pcm, size_t samples)
{
    if (src->pcm && src->pcm_n) {
        size_t off = ((size_t)idx * 7919u * samples +
                      (size_t)seq * samples) % src->pcm_n;
        for (size_t i = 0; i < samples; i++)
            pcm[i] = src->pcm[(off + i) % src->pcm_n];
        return;
    }
    if (!src->syn) {            /* a file not prepared yet: silence */
        memset(pcm, 0, samples * sizeof *pcm);
        return;
    }
    /* Phase from the absolute sample index keeps frames continuous. */
    uint64_t n0 = (uint64_t)seq * samples;
    const float *row = src->syn + (size_t)(idx % SYN_CLASSES) * SYN_RATE;
    size_t m = (size_t)(n0 % SYN_RATE);
    double e0 = syn_env(idx, n0), e1 = syn_env(idx, n0 + samples);
    double de = samples ? (e1 - e0) / (double)samples : 0;
    for (size_t i = 0; i < samples; i++) {
        double v = (e0 + de * (double)i) * row[m];
        pcm[i] = (int16_t)lrint(v * 8000.0);
        if (++m == SYN_RATE)
            m = 0;
    }
}

void mt_probe_source_free(mt_probe_source *src)
{
    free(src->file);
    free(src->pcm);
    free(src->syn);
    memset(src, 0, sizeof *src);
}
