/* replay_input.c: mt-replay's inputs at the session rate (see replay_input.h).
 *
 * A short input (a minute or less by its header, and standard input) is
 * read whole, resampled and held as s16: its sessions share it, and every
 * check on the file (a FLAC that ends early, corrupt data) is made before
 * any connection. A longer one is streamed: each session reads and
 * resamples its own copy a block at a time, as far as it plays, so that a
 * one-hour file replayed for five seconds costs five seconds of work and a
 * few blocks of memory.
 *
 * A FIFO (a named pipe, a process substitution's /dev/fd/N) is read as
 * standard input is, whole, through its descriptor: a file check (stat's
 * "not a regular file") would leave its writer blocked in open().
 */
#include "client/replay_input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/audio_read.h"
#include "client/resample.h"
#include "util/errmsg.h"

/* Inputs longer than this (by their header) are streamed. */
#define STREAM_OVER_S 60.0

struct mt_input {
    char    *path;
    int      rate, quality;  /* the session's rate; the converter */
    int      streamed;
    int16_t *pcm;            /* [frames] mono s16 at rate (not streamed) */
    size_t   frames;
};

struct mt_source {
    mt_input        *in;
    size_t           pos;          /* next sample of in->pcm */
    int              at_end;       /* mt_source_frame reached the end */
    /* streamed */
    mt_audio_stream *as;
    mt_resampler    *rs;
    float            inbuf[4096];  /* [in_have] mono at the file's rate */
    size_t           in_have, in_off;
    int              in_eof;       /* the file has given all it has */
    float            outbuf[8192]; /* [out_have] mono at the session rate */
    size_t           out_have, out_off;
    int              flushed;      /* the converter has given all it has */
};

/* 1 when path names a FIFO (read as a stream, like "-"). */
static int is_fifo(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* A FIFO read to its end: as mt_audio_read_fd. */
static int read_fifo(const char *path, int raw_rate, mt_audio *raw, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = mt_audio_read_fd(fd, path, raw_rate, raw, err, errlen);
    close(fd);
    return rc;
}

/* The whole input, read, resampled and turned into s16. 0, or -1. */
static int read_whole(mt_input *in, int raw_rate, char *err, size_t errlen)
{
    mt_audio raw, at;
    int rc;
    if (is_fifo(in->path)) {
        rc = read_fifo(in->path, raw_rate, &raw, err, errlen);
    } else if (!strcmp(in->path, "-")) {
        if (isatty(0)) {
            mt_set_err(err, errlen, "-: standard input is a terminal; pipe "
                       "audio into it");
            return -1;
        }
        rc = mt_audio_read_fd(0, "stdin", raw_rate, &raw, err, errlen);
    } else {
        rc = mt_audio_read(in->path, &raw, err, errlen);
    }
    if (rc != 0)
        return -1;
    rc = mt_audio_resample(&raw, in->rate, in->quality, &at, err, errlen);
    mt_audio_free(&raw);
    if (rc != 0)
        return -1;
    in->pcm = malloc((at.frames ? at.frames : 1) * sizeof *in->pcm);
    if (!in->pcm) {
        mt_set_err(err, errlen, "%s: out of memory", in->path);
        mt_audio_free(&at);
        return -1;
    }
    in->frames = at.frames;
    mt_audio_to_s16(at.samples, in->pcm, at.frames);
    mt_audio_free(&at);
    return 0;
}

int mt_input_open(const char *path, int rate, int quality, int raw_rate,
                  mt_input **inp, char *err, size_t errlen)
{
    *inp = NULL;
    mt_input *in = mt_calloc_or_err(1, sizeof *in, err, errlen, path);
    if (!in)
        return -1;
    in->path = strdup(path);
    in->rate = rate;
    in->quality = quality;
    if (!in->path) {
        mt_set_err(err, errlen, "%s: out of memory", path);
        free(in);
        return -1;
    }
    if (strcmp(path, "-") != 0 && !is_fifo(path)) {
        /* the header decides; its checks are made either way */
        mt_audio_stream *as;
        if (mt_audio_stream_open(path, &as, err, errlen) != 0) {
            mt_input_close(in);
            return -1;
        }
        in->streamed = mt_audio_stream_seconds(as) > STREAM_OVER_S;
        mt_audio_stream_close(as);
    }
    if (!in->streamed && read_whole(in, raw_rate, err, errlen) != 0) {
        mt_input_close(in);
        return -1;
    }
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
    *sp = NULL;
    mt_source *s = mt_calloc_or_err(1, sizeof *s, err, errlen, in->path);
    if (!s)
        return -1;
    s->in = in;
    if (in->streamed &&
        (mt_audio_stream_open(in->path, &s->as, err, errlen) != 0 ||
         mt_resampler_new(mt_audio_stream_rate(s->as), in->rate, in->quality,
                          &s->rs, err, errlen) != 0)) {
        mt_source_close(s);
        return -1;
    }
    *sp = s;
    return 0;
}

/* More output from the converter into outbuf, reading the file as it
 * needs. 0 (outbuf has samples, or flushed is set), or -1 with err. */
static int stream_fill(mt_source *s, char *err, size_t errlen)
{
    s->out_have = s->out_off = 0;
    while (!s->out_have && !s->flushed) {
        if (s->in_off == s->in_have && !s->in_eof) {
            long got = mt_audio_stream_read(s->as, s->inbuf,
                                            sizeof s->inbuf / sizeof *s->inbuf,
                                            err, errlen);
            if (got < 0)
                return -1;
            s->in_have = (size_t)got;
            s->in_off = 0;
            s->in_eof = got == 0;
        }
        size_t used = 0;
        long made = mt_resampler_run(s->rs, s->inbuf + s->in_off,
                                     s->in_have - s->in_off, s->in_eof, &used,
                                     s->outbuf, sizeof s->outbuf / sizeof *s->outbuf,
                                     err, errlen);
        if (made < 0)
            return -1;
        s->in_off += used;
        s->out_have = (size_t)made;
        if (s->in_eof && made == 0 && s->in_off == s->in_have)
            s->flushed = 1;
    }
    return 0;
}

long mt_source_read(mt_source *s, int16_t *pcm, size_t n, char *err,
                    size_t errlen)
{
    if (!s->in->streamed) {
        size_t take = s->in->frames - s->pos;
        if (take > n)
            take = n;
        memcpy(pcm, s->in->pcm + s->pos, take * sizeof *pcm);
        s->pos += take;
        return (long)take;
    }
    size_t done = 0;
    while (done < n) {
        if (s->out_off == s->out_have) {
            if (s->flushed || stream_fill(s, err, errlen) != 0)
                break;
            if (s->out_have == 0)
                break;
        }
        size_t take = s->out_have - s->out_off;
        if (take > n - done)
            take = n - done;
        mt_audio_to_s16(s->outbuf + s->out_off, pcm + done, take);
        s->out_off += take;
        done += take;
    }
    if (done < n && !s->flushed && s->out_off == s->out_have)
        return -1;   /* stream_fill failed: err is set */
    return (long)done;
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
    s->pos = 0;
    s->at_end = 0;
    if (!s->in->streamed)
        return 0;
    if (mt_audio_stream_rewind(s->as, err, errlen) != 0)
        return -1;
    mt_resampler_reset(s->rs);
    s->in_have = s->in_off = s->out_have = s->out_off = 0;
    s->in_eof = s->flushed = 0;
    return 0;
}

void mt_source_close(mt_source *s)
{
    if (!s)
        return;
    mt_audio_stream_close(s->as);
    mt_resampler_free(s->rs);
    free(s);
}
