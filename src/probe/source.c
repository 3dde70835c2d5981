/* source.c: the audio mt-probe's sessions send.
 *
 * Capacity experiments need many sessions of input, not a particular one:
 * synthetic input is a voiced-like tone (a fundamental and two harmonics
 * with a slow vibrato), different per session so no two streams are
 * identical, and deterministic so a rerun sends the same bytes. With a
 * file, every session plays it in a loop from its own offset. The file is
 * read once (libsndfile through audio.c) and resampled once per server
 * rate (libsamplerate).
 */
#include "util/errmsg.h"
#include "probe/probe.h"
#include "client/audio.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int mt_probe_source_open(mt_probe_source *src, const char *path, char *err,
                         size_t errlen)
{
    memset(src, 0, sizeof *src);
    if (!path)
        return 0;
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
    /* Phase from the absolute sample index keeps frames continuous. */
    double f0 = 110.0 + 13.0 * (idx % 11);
    double rate = 24000.0;
    for (size_t i = 0; i < samples; i++) {
        double n = (double)seq * (double)samples + (double)i;
        double t = n / rate;
        double f = f0 * (1.0 + 0.02 * sin(2 * M_PI * 5.0 * t));
        double ph = 2 * M_PI * f * t;
        double env = 0.5 + 0.5 * sin(2 * M_PI * 0.7 * t + idx);
        double v = env * (0.5 * sin(ph) + 0.25 * sin(2 * ph) +
                          0.12 * sin(3 * ph));
        pcm[i] = (int16_t)lrint(v * 8000.0);
    }
}

void mt_probe_source_free(mt_probe_source *src)
{
    free(src->file);
    free(src->pcm);
    memset(src, 0, sizeof *src);
}
