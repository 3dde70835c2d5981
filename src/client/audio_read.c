/* audio_read.c: audio files read into memory as mono float (libsndfile):
 * from a path, a descriptor or a buffer. See audio_read.h.
 *
 * Why the care over errors: an input file is hostile like any other input
 * (a truncated download, a directory, a text file named .wav), and the
 * promise to the user is one clear message.
 */
#define _GNU_SOURCE
#include "client/audio_read.h"

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

/* ---- reading ------------------------------------------------------------ */

/* What counts as a truncated file (mt-replay(1) says the same): only a
 * length the format states as a fact and the data does not reach.
 *   - WAV, AIFF, AU and kin: the data chunk's declared size. libsndfile
 *     reads what is there and logs "data : 128000 (should be 63960)".
 *     Writers that cannot seek back (sox or ffmpeg into a pipe) leave a
 *     placeholder instead of the size (0xFFFFFFFF, sox's 0x7FFFF000): a
 *     declared size of 2 GiB or more is such an "unknown length", read to
 *     the end like any stream.
 *   - FLAC: STREAMINFO's total sample count (0 when unknown).
 * Everything else (MP3, whose count libsndfile estimates from the bit
 * rate; Ogg, counted from the last page that is there) is read to the
 * end and what was read is trusted. */
#define DECLARED_UNKNOWN 0x7FFF0000ull

static int log_says_truncated(SNDFILE *sf)
{
    char log[8192];
    log[0] = 0;
    sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
    for (char *line = log; line && *line; ) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        const char *p = line;
        while (*p == ' ')
            p++;
        if (!strncmp(p, "data", 4) || !strncmp(p, "SSND", 4) ||
            !strncmp(p, "Data Size", 9)) {
            unsigned long long declared, actual;
            const char *colon = strchr(p, ':');
            const char *should = strstr(p, "(should be ");
            if (colon && should &&
                sscanf(colon + 1, "%llu", &declared) == 1 &&
                sscanf(should + 11, "%llu", &actual) == 1 &&
                declared > actual && declared < DECLARED_UNKNOWN)
                return 1;
        }
        line = nl ? nl + 1 : NULL;
    }
    return 0;
}

/* One input sample to [-1, 1]: NaN is silence, anything beyond full scale
 * (a float file may hold 1e20 or inf) is full scale. Done on reading so
 * the resampler never sees a huge value to smear over its neighbours. */
static float clamp_sample(double s)
{
    if (isnan(s))
        return 0.0f;
    if (s > 1.0)
        return 1.0f;
    if (s < -1.0)
        return -1.0f;
    return (float)s;
}

/* What a header says that no audio file can be. 0, or -1 with err. */
static int header_ok(const SF_INFO *info, const char *name, char *err, size_t errlen)
{
    if (info->channels < 1 || info->channels > 64 || info->samplerate < 1 ||
        info->samplerate > 768000) {
        mt_set_err(err, errlen, "%s: implausible header (%d channels, %d Hz)",
                   name, info->channels, info->samplerate);
        return -1;
    }
    return 0;
}

/* The decoding half of a read, shared by files and memory: sf is open,
 * name is what messages say. Closes sf in every case. */
static int read_open(SNDFILE *sf, const SF_INFO *info, const char *name,
                     mt_audio *a, char *err, size_t errlen)
{
    if (header_ok(info, name, err, errlen) != 0) {
        sf_close(sf);
        return -1;
    }
    SF_FORMAT_INFO fi;
    memset(&fi, 0, sizeof fi);
    fi.format = info->format & SF_FORMAT_TYPEMASK;
    const char *major = "audio";
    if (sf_command(NULL, SFC_GET_FORMAT_INFO, &fi, sizeof fi) == 0 && fi.name)
        major = fi.name;
    snprintf(a->format, sizeof a->format, "%s, %d ch, %d Hz", major,
             info->channels, info->samplerate);

    /* Read in blocks to the end: info->frames may be absent, an estimate
     * (MP3) or a lie. */
    size_t cap = 0, n = 0;
    float *mono = NULL;
    float block[4096];
    const size_t bframes = sizeof block / sizeof block[0] / (size_t)info->channels;
    for (;;) {
        sf_count_t got = sf_readf_float(sf, block, (sf_count_t)bframes);
        if (got <= 0)
            break;
        if (n + (size_t)got > cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            while (ncap < n + (size_t)got)
                ncap *= 2;
            if (ncap > (size_t)1 << 34) {  /* 4 G samples: not a real input */
                mt_set_err(err, errlen, "%s: too long", name);
                free(mono);
                sf_close(sf);
                return -1;
            }
            float *nm = realloc(mono, ncap * sizeof *nm);
            if (!nm) {
                mt_set_err(err, errlen, "%s: out of memory", name);
                free(mono);
                sf_close(sf);
                return -1;
            }
            mono = nm;
            cap = ncap;
        }
        for (sf_count_t i = 0; i < got; i++) {
            double s = 0;
            for (int c = 0; c < info->channels; c++)
                s += clamp_sample(block[i * info->channels + c]);
            mono[n + (size_t)i] = clamp_sample(s / info->channels);
        }
        n += (size_t)got;
    }
    int e = sf_error(sf);
    int major_fmt = info->format & SF_FORMAT_TYPEMASK;
    int truncated = (major_fmt == SF_FORMAT_FLAC && info->frames > 0 &&
                     info->frames != SF_COUNT_MAX &&
                     (sf_count_t)n < info->frames) || log_says_truncated(sf);
    if (e != SF_ERR_NO_ERROR) {
        mt_set_err(err, errlen, "%s: corrupt audio data: %s", name, sf_strerror(sf));
        free(mono);
        sf_close(sf);
        return -1;
    }
    sf_close(sf);
    if (truncated) {
        mt_set_err(err, errlen, "%s: truncated file (the audio data ends before "
                   "the length its header declares)", name);
        free(mono);
        return -1;
    }
    if (n == 0) {
        mt_set_err(err, errlen, "%s: no audio in file", name);
        free(mono);
        return -1;
    }
    a->samples = mono;
    a->frames = n;
    a->rate = info->samplerate;
    a->channels_in = info->channels;
    return 0;
}

static void open_failed(const char *name, SNDFILE *none, char *err, size_t errlen)
{
    int e = sf_error(none);
    if (e == SF_ERR_UNRECOGNISED_FORMAT)
        mt_set_err(err, errlen, "%s: unsupported or unrecognised audio format", name);
    else
        mt_set_err(err, errlen, "%s: cannot read audio: %s", name, sf_strerror(none));
}

/* A path that can be an audio file: there, regular, not empty. 0, or -1
 * with err naming it. */
static int path_ok(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        mt_set_err(err, errlen, "%s: is a directory, not an audio file", path);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        mt_set_err(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    if (st.st_size == 0) {
        mt_set_err(err, errlen, "%s: empty file", path);
        return -1;
    }
    return 0;
}

int mt_audio_read(const char *path, mt_audio *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (path_ok(path, err, errlen) != 0)
        return -1;
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf) {
        open_failed(path, NULL, err, errlen);
        return -1;
    }
    return read_open(sf, &info, path, a, err, errlen);
}

/* libsndfile's virtual I/O over a buffer in memory. */
typedef struct membuf {
    const unsigned char *p;
    sf_count_t           len, pos;
} membuf;

static sf_count_t mem_len(void *u) { return ((membuf *)u)->len; }
static sf_count_t mem_tell(void *u) { return ((membuf *)u)->pos; }

static sf_count_t mem_seek(sf_count_t off, int whence, void *u)
{
    membuf *m = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->len;
    if (off < -base || off > m->len - base)
        return -1;
    m->pos = base + off;
    return m->pos;
}

static sf_count_t mem_read(void *dst, sf_count_t n, void *u)
{
    membuf *m = u;
    sf_count_t left = m->len - m->pos;
    if (n > left)
        n = left;
    if (n <= 0)
        return 0;
    memcpy(dst, m->p + m->pos, (size_t)n);
    m->pos += n;
    return n;
}

static sf_count_t mem_write(const void *src, sf_count_t n, void *u)
{
    (void)src;
    (void)n;
    (void)u;
    return 0;   /* read only */
}

/* A read from memory; raw_rate > 0 reads headerless s16le mono at that
 * rate (there is nothing in the data to say what it is). */
static int read_mem_as(const void *buf, size_t len, const char *name,
                       int raw_rate, mt_audio *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (len == 0) {
        mt_set_err(err, errlen, "%s: empty file", name);
        return -1;
    }
    if (len > (size_t)INT64_MAX / 2) {
        mt_set_err(err, errlen, "%s: too long", name);
        return -1;
    }
    SF_VIRTUAL_IO io = { mem_len, mem_seek, mem_read, mem_write, mem_tell };
    membuf m = { buf, (sf_count_t)len, 0 };
    SF_INFO info;
    memset(&info, 0, sizeof info);
    if (raw_rate > 0) {
        info.format = SF_FORMAT_RAW | SF_FORMAT_PCM_16 | SF_ENDIAN_LITTLE;
        info.samplerate = raw_rate;
        info.channels = 1;
    }
    SNDFILE *sf = sf_open_virtual(&io, SFM_READ, &info, &m);
    if (!sf) {
        open_failed(name, NULL, err, errlen);
        return -1;
    }
    return read_open(sf, &info, name, a, err, errlen);
}

int mt_audio_read_mem(const void *buf, size_t len, const char *name,
                      mt_audio *a, char *err, size_t errlen)
{
    return read_mem_as(buf, len, name, 0, a, err, errlen);
}

/* Reading a descriptor whole, then decoding from memory: libsndfile
 * decodes only some formats from a non-seekable descriptor (WAV and AU
 * yes, FLAC "lost sync", CAF nothing, W64 garbage at the end), but every
 * format from memory, so a pipe reads like a file. */
int mt_audio_read_fd(int fd, const char *name, int raw_rate, mt_audio *a,
                     char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        mt_set_err(err, errlen, "%s: out of memory", name);
        return -1;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= (size_t)1 << 34) {   /* 16 GiB: not a real input */
                mt_set_err(err, errlen, "%s: too long", name);
                free(buf);
                return -1;
            }
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                mt_set_err(err, errlen, "%s: out of memory", name);
                free(buf);
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            mt_set_err(err, errlen, "%s: %s", name, strerror(errno));
            free(buf);
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len == 0) {
        mt_set_err(err, errlen, "%s: no data (empty input)", name);
        free(buf);
        return -1;
    }
    int rc = read_mem_as(buf, len, name, raw_rate, a, err, errlen);
    free(buf);
    return rc;
}

void mt_audio_free(mt_audio *a)
{
    if (!a)
        return;
    free(a->samples);
    a->samples = NULL;
    a->frames = 0;
}


/* ---- a file a block at a time -------------------------------------------- */

struct mt_audio_stream {
    SNDFILE *sf;
    SF_INFO  info;
    char    *name;
    float    block[4096];   /* [frames * channels] interleaved, as read */
};

int mt_audio_stream_open(const char *path, mt_audio_stream **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    if (path_ok(path, err, errlen) != 0)
        return -1;
    mt_audio_stream *s = mt_calloc_or_err(1, sizeof *s, err, errlen, path);
    if (!s)
        return -1;
    s->sf = sf_open(path, SFM_READ, &s->info);
    if (!s->sf) {
        open_failed(path, NULL, err, errlen);
        free(s);
        return -1;
    }
    s->name = strdup(path);
    if (!s->name || header_ok(&s->info, path, err, errlen) != 0) {
        if (!s->name)
            mt_set_err(err, errlen, "%s: out of memory", path);
        mt_audio_stream_close(s);
        return -1;
    }
    if (log_says_truncated(s->sf)) {
        mt_set_err(err, errlen, "%s: truncated file (the audio data ends before "
                   "the length its header declares)", path);
        mt_audio_stream_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

int mt_audio_stream_rate(const mt_audio_stream *s) { return s->info.samplerate; }

double mt_audio_stream_seconds(const mt_audio_stream *s)
{
    return s->info.frames > 0 && s->info.frames != SF_COUNT_MAX
        ? (double)s->info.frames / s->info.samplerate : 0;
}

long mt_audio_stream_read(mt_audio_stream *s, float *mono, size_t n, char *err,
                          size_t errlen)
{
    size_t ch = (size_t)s->info.channels, done = 0;
    const size_t bframes = sizeof s->block / sizeof s->block[0] / ch;
    while (done < n) {
        size_t want = n - done < bframes ? n - done : bframes;
        sf_count_t got = sf_readf_float(s->sf, s->block, (sf_count_t)want);
        if (got <= 0)
            break;
        for (sf_count_t i = 0; i < got; i++) {
            double v = 0;
            for (size_t c = 0; c < ch; c++)
                v += clamp_sample(s->block[(size_t)i * ch + c]);
            mono[done + (size_t)i] = clamp_sample(v / (double)ch);
        }
        done += (size_t)got;
    }
    if (sf_error(s->sf) != SF_ERR_NO_ERROR) {
        mt_set_err(err, errlen, "%s: corrupt audio data: %s", s->name,
                   sf_strerror(s->sf));
        return -1;
    }
    return (long)done;
}

int mt_audio_stream_rewind(mt_audio_stream *s, char *err, size_t errlen)
{
    if (sf_seek(s->sf, 0, SEEK_SET) != 0) {
        mt_set_err(err, errlen, "%s: cannot go back to its start: %s", s->name,
                   sf_strerror(s->sf));
        return -1;
    }
    return 0;
}

void mt_audio_stream_close(mt_audio_stream *s)
{
    if (!s)
        return;
    if (s->sf)
        sf_close(s->sf);
    free(s->name);
    free(s);
}
