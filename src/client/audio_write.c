/* audio_write.c: audio output files and streams (libsndfile), written
 * under a temporary name and renamed into place on success, so that a
 * failed run leaves no half-written output. See audio_write.h.
 */
#define _GNU_SOURCE
#include "client/audio_write.h"

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

#include <sndfile.h>

#include "util/errmsg.h"
#include "util/io.h"

/* ---- writing ------------------------------------------------------------ */

static const struct { const char *ext; int fmt; } exts[] = {
    { "wav",  SF_FORMAT_WAV | SF_FORMAT_PCM_16 },
    { "wave", SF_FORMAT_WAV | SF_FORMAT_PCM_16 },
    { "flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16 },
    { "ogg",  SF_FORMAT_OGG | SF_FORMAT_VORBIS },
    { "oga",  SF_FORMAT_OGG | SF_FORMAT_VORBIS },
    { "aif",  SF_FORMAT_AIFF | SF_FORMAT_PCM_16 },
    { "aiff", SF_FORMAT_AIFF | SF_FORMAT_PCM_16 },
    { "au",   SF_FORMAT_AU | SF_FORMAT_PCM_16 },
    { "caf",  SF_FORMAT_CAF | SF_FORMAT_PCM_16 },
    { "w64",  SF_FORMAT_W64 | SF_FORMAT_PCM_16 },
    { "raw",  SF_FORMAT_RAW | SF_FORMAT_PCM_16 },
    { "f32",  SF_FORMAT_RAW | SF_FORMAT_FLOAT },    /* sox's raw float types */
    { "f64",  SF_FORMAT_RAW | SF_FORMAT_DOUBLE },
};

int mt_audio_type_parse(const char *name, int *sf_format)
{
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        if (!strcasecmp(name, exts[i].ext)) {
            *sf_format = exts[i].fmt;
            return 0;
        }
    }
    return -1;
}

/* Measured with libsndfile 1.2: WAV, AIFF, CAF and W64 refuse a pipe
 * ("does not support pipe write": the header's sizes are written last);
 * FLAC writes, but its end leaves sox reporting "lost sync"; AU (size
 * field "unknown"), Ogg and raw stream cleanly. */
int mt_audio_type_streams(int sf_format)
{
    int major = sf_format & SF_FORMAT_TYPEMASK;
    return major == SF_FORMAT_AU || major == SF_FORMAT_OGG ||
           major == SF_FORMAT_RAW;
}

int mt_audio_format_for_path(const char *path, int *sf_format,
                             char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || !dot[1]) {
        mt_set_err(err, errlen, "%s: no file name extension to choose the "
                   "output format (.wav .flac .ogg .aiff .au .caf .w64 .raw)", path);
        return -1;
    }
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        if (!strcasecmp(dot + 1, exts[i].ext)) {
            *sf_format = exts[i].fmt;
            return 0;
        }
    }
    mt_set_err(err, errlen, "%s: unsupported output format '.%s' (use .wav "
               ".flac .ogg .aiff .au .caf .w64 .raw)", path, dot + 1);
    return -1;
}

struct mt_audio_writer {
    SNDFILE *sf;        /* NULL: an AU or raw stream written here */
    char    *path;
    char    *tmp;       /* NULL: a descriptor, written in place */
    uint64_t frames;
    int      fd;        /* the stream's descriptor */
    int      big_endian;
    unsigned char head[28];   /* AU header, sent with the first samples */
    size_t   nhead;
};

static void writer_free(mt_audio_writer *w);

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* AU and raw through a pipe are written here, not by libsndfile: its
 * AU header leaves in a write() of its own, ahead of the audio, and a
 * reader that sniffs the format from its first read() (sox -) then sees
 * 24 bytes and cannot look back. Here the header goes out with the first
 * samples, in one write of at most PIPE_BUF. */
static int stream_write(mt_audio_writer *w, const int16_t *pcm, size_t n,
                        char *err, size_t errlen)
{
    unsigned char buf[28 + 4096];
    size_t o = w->nhead;
    memcpy(buf, w->head, w->nhead);
    w->nhead = 0;
    for (size_t i = 0; i < n || o > 0; ) {
        while (i < n && o + 2 <= sizeof buf) {
            uint16_t v = (uint16_t)pcm[i++];
            buf[o++] = (unsigned char)(w->big_endian ? v >> 8 : v);
            buf[o++] = (unsigned char)(w->big_endian ? v : v >> 8);
        }
        if (mt_write_all(w->fd, buf, o) != 0) {
            mt_set_err(err, errlen, "%s: write failed: %s", w->path, strerror(errno));
            return -1;
        }
        o = 0;
    }
    return 0;
}

/* The SF_INFO of a mono file of format at rate: 0, or -1 with the message
 * (naming name) when libsndfile cannot write that combination. */
static int mono_info(SF_INFO *info, int format, int rate, const char *name,
                     char *err, size_t errlen)
{
    memset(info, 0, sizeof *info);
    info->samplerate = rate;
    info->channels = 1;
    info->format = format;
    if (!sf_format_check(info)) {
        mt_set_err(err, errlen, "%s: libsndfile cannot write this format at %d Hz",
                   name, rate);
        return -1;
    }
    return 0;
}

int mt_audio_writer_open(const char *path, int rate, mt_audio_writer **wp,
                         char *err, size_t errlen)
{
    return mt_audio_writer_open_sub(path, rate, 0, wp, err, errlen);
}

int mt_audio_writer_open_sub(const char *path, int rate, int subformat, mt_audio_writer **wp,
                             char *err, size_t errlen)
{
    static unsigned counter;
    *wp = NULL;
    int fmt;
    if (mt_audio_format_for_path(path, &fmt, err, errlen) != 0)
        return -1;
    if (subformat) {
        fmt = (fmt & ~SF_FORMAT_SUBMASK) | (subformat & SF_FORMAT_SUBMASK);
        SF_INFO probe = { .samplerate = rate, .channels = 1, .format = fmt };
        if (!sf_format_check(&probe)) {
            mt_set_err(err, errlen, "%s: this file type cannot hold that encoding (floating "
                       "point: .wav .w64 .caf .aiff .au .raw .f32 .f64)", path);
            return -1;
        }
    }
    mt_audio_writer *w = mt_calloc_or_err(1, sizeof *w, err, errlen, NULL);
    if (!w)
        return -1;
    size_t len = strlen(path);
    w->path = strdup(path);
    w->tmp = malloc(len + 64);
    if (!w->path || !w->tmp) {
        mt_set_err(err, errlen, "out of memory");
        free(w->path);
        free(w->tmp);
        free(w);
        return -1;
    }
    /* Same directory, so the final rename is atomic; hidden, so a partial
     * file never looks like a result. */
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    snprintf(w->tmp, len + 64, "%.*s.%s.tmp-%ld-%u", (int)dirlen, path,
             path + dirlen, (long)getpid(), counter++);
    SF_INFO info;
    if (mono_info(&info, fmt, rate, path, err, errlen) != 0) {
        free(w->path);
        free(w->tmp);
        free(w);
        return -1;
    }
    w->sf = sf_open(w->tmp, SFM_WRITE, &info);
    if (!w->sf) {
        mt_set_err(err, errlen, "%s: cannot create: %s", path, sf_strerror(NULL));
        unlink(w->tmp);
        free(w->path);
        free(w->tmp);
        free(w);
        return -1;
    }
    *wp = w;
    return 0;
}

int mt_audio_writer_write(mt_audio_writer *w, const int16_t *pcm, size_t n,
                          char *err, size_t errlen)
{
    if (!w->sf) {
        if (stream_write(w, pcm, n, err, errlen) != 0)
            return -1;
        w->frames += n;
        return 0;
    }
    sf_count_t put = sf_write_short(w->sf, pcm, (sf_count_t)n);
    if (put != (sf_count_t)n) {
        mt_set_err(err, errlen, "%s: write failed: %s", w->path, sf_strerror(w->sf));
        return -1;
    }
    w->frames += n;
    return 0;
}

int mt_audio_writer_open_fd(int fd, const char *name, int sf_format, int rate,
                            mt_audio_writer **wp, char *err, size_t errlen)
{
    *wp = NULL;
    if (isatty(fd)) {
        mt_set_err(err, errlen, "%s: is a terminal; send the audio into a pipe "
                   "or a file", name);
        return -1;
    }
    /* A seekable descriptor (stdout redirected to a file) takes any
     * format; a pipe only the streaming ones. */
    if (lseek(fd, 0, SEEK_CUR) < 0 && !mt_audio_type_streams(sf_format)) {
        mt_set_err(err, errlen, "%s: this format cannot be written to a pipe "
                   "(its header is completed last); use --type au, ogg or raw",
                   name);
        return -1;
    }
    mt_audio_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(name))) {
        mt_set_err(err, errlen, "out of memory");
        free(w);
        return -1;
    }
    w->fd = fd;
    int major = sf_format & SF_FORMAT_TYPEMASK;
    if (major == SF_FORMAT_AU || major == SF_FORMAT_RAW) {
        if (major == SF_FORMAT_AU) {
            /* magic, data offset, size unknown, 16-bit linear, rate, mono,
             * and the 4-byte annotation readers (sox) expect */
            memcpy(w->head, ".snd", 4);
            put_be32(w->head + 4, 28);
            put_be32(w->head + 8, 0xFFFFFFFFu);
            put_be32(w->head + 12, 3);
            put_be32(w->head + 16, (uint32_t)rate);
            put_be32(w->head + 20, 1);
            put_be32(w->head + 24, 0);
            w->nhead = 28;
            w->big_endian = 1;
        }
        *wp = w;
        return 0;
    }
    SF_INFO info;
    if (mono_info(&info, sf_format, rate, name, err, errlen) != 0) {
        writer_free(w);
        return -1;
    }
    w->sf = sf_open_fd(fd, SFM_WRITE, &info, 0);
    if (!w->sf) {
        mt_set_err(err, errlen, "%s: cannot write audio: %s", name, sf_strerror(NULL));
        writer_free(w);
        return -1;
    }
    *wp = w;
    return 0;
}

int mt_audio_writer_write_float(mt_audio_writer *w, const float *pcm, size_t n,
                                char *err, size_t errlen)
{
    if (!w->sf) {
        mt_set_err(err, errlen, "%s: float samples go to files only", w->path);
        return -1;
    }
    sf_count_t put = sf_write_float(w->sf, pcm, (sf_count_t)n);
    if (put != (sf_count_t)n) {
        mt_set_err(err, errlen, "%s: write failed: %s", w->path, sf_strerror(w->sf));
        return -1;
    }
    w->frames += n;
    return 0;
}

uint64_t mt_audio_writer_frames(const mt_audio_writer *w) { return w->frames; }
const char *mt_audio_writer_path(const mt_audio_writer *w) { return w->path; }

static void writer_free(mt_audio_writer *w)
{
    free(w->path);
    free(w->tmp);
    free(w);
}

int mt_audio_writer_commit(mt_audio_writer *w, char *err, size_t errlen)
{
    int rc = 0;
    if (!w->sf) {
        /* an AU stream without samples still gets its header */
        if (w->nhead && mt_write_all(w->fd, w->head, w->nhead) != 0) {
            mt_set_err(err, errlen, "%s: write failed: %s", w->path, strerror(errno));
            rc = -1;
        }
    } else {
        sf_write_sync(w->sf);
        if (sf_close(w->sf) != 0) {
            mt_set_err(err, errlen, "%s: close failed", w->path);
            rc = -1;
        }
    }
    w->sf = NULL;
    if (rc == 0 && w->tmp && rename(w->tmp, w->path) != 0) {
        mt_set_err(err, errlen, "%s: %s", w->path, strerror(errno));
        rc = -1;
    }
    if (rc != 0 && w->tmp)
        unlink(w->tmp);
    writer_free(w);
    return rc;
}

void mt_audio_writer_abort(mt_audio_writer *w)
{
    if (!w)
        return;
    if (w->sf)
        sf_close(w->sf);
    if (w->tmp)
        unlink(w->tmp);
    writer_free(w);
}

