/* input.c: mt-replay's inputs at the session rate (see input.h). */
#include "client/input.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/audio_read.h"
#include "client/resample.h"
#include "util/errmsg.h"

struct mt_input {
    char    *path;
    int16_t *pcm;       /* [frames] mono s16 at the session rate */
    size_t   frames;
};

struct mt_source {
    mt_input *in;
    size_t    pos;      /* next sample */
    int       at_end;   /* mt_source_frame reached the end */
};

int mt_input_open(const char *path, int rate, int quality, int raw_rate,
                  mt_input **inp, char *err, size_t errlen)
{
    *inp = NULL;
    mt_audio raw, at;
    int rc;
    if (!strcmp(path, "-")) {
        if (isatty(0)) {
            mt_set_err(err, errlen, "-: standard input is a terminal; pipe "
                       "audio into it");
            return -1;
        }
        rc = mt_audio_read_fd(0, "stdin", raw_rate, &raw, err, errlen);
    } else {
        rc = mt_audio_read(path, &raw, err, errlen);
    }
    if (rc != 0)
        return -1;
    rc = mt_audio_resample(&raw, rate, quality, &at, err, errlen);
    mt_audio_free(&raw);
    if (rc != 0)
        return -1;
    mt_input *in = calloc(1, sizeof *in);
    if (in) {
        in->path = strdup(path);
        in->pcm = malloc((at.frames ? at.frames : 1) * sizeof *in->pcm);
    }
    if (!in || !in->path || !in->pcm) {
        mt_set_err(err, errlen, "%s: out of memory", path);
        mt_audio_free(&at);
        mt_input_close(in);
        return -1;
    }
    in->frames = at.frames;
    mt_audio_to_s16(at.samples, in->pcm, at.frames);
    mt_audio_free(&at);
    *inp = in;
    return 0;
}

const char *mt_input_path(const mt_input *in) { return in->path; }

void mt_input_close(mt_input *in)
{
    if (!in)
        return;
    free(in->path);
    free(in->pcm);
    free(in);
}

int mt_source_open(mt_input *in, mt_source **sp, char *err, size_t errlen)
{
    mt_source *s = calloc(1, sizeof *s);
    if (!s) {
        mt_set_err(err, errlen, "%s: out of memory", in->path);
        return -1;
    }
    s->in = in;
    *sp = s;
    return 0;
}

long mt_source_read(mt_source *s, int16_t *pcm, size_t n, char *err,
                    size_t errlen)
{
    (void)err;
    (void)errlen;
    size_t take = s->in->frames - s->pos;
    if (take > n)
        take = n;
    memcpy(pcm, s->in->pcm + s->pos, take * sizeof *pcm);
    s->pos += take;
    return (long)take;
}

int mt_source_frame(mt_source *s, int16_t *pcm, size_t n, int loop,
                    char *err, size_t errlen)
{
    if (s->at_end)
        return 0;
    size_t i = 0;
    int rewound = 0;   /* nothing read since the last rewind */
    while (i < n) {
        long got = mt_source_read(s, pcm + i, n - i, err, errlen);
        if (got < 0)
            return -1;
        i += (size_t)got;
        if (got > 0)
            rewound = 0;
        if (i == n)
            break;
        if (loop && !rewound) {
            if (mt_source_rewind(s, err, errlen) != 0)
                return -1;
            rewound = 1;
            continue;
        }
        s->at_end = 1;
        if (i == 0)
            return 0;
        memset(pcm + i, 0, (n - i) * sizeof *pcm);
        break;
    }
    return 1;
}

int mt_source_rewind(mt_source *s, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    s->pos = 0;
    s->at_end = 0;
    return 0;
}

void mt_source_close(mt_source *s)
{
    free(s);
}
