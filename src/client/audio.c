/* audio.c: audio files (libsndfile), rate conversion (libsamplerate) and
 * full-duplex devices (PortAudio) for mt-replay. See audio.h.
 *
 * Why the care over errors: an input file is hostile like any other input
 * (a truncated download, a directory, a text file named .wav), and the
 * promise to the user is one clear message and no half-written output.
 */
#define _GNU_SOURCE
#include "util/errmsg.h"
#include "client/audio.h"

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

#include <portaudio.h>
#include <samplerate.h>
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

/* The decoding half of a read, shared by files and memory: sf is open,
 * name is what messages say. Closes sf in every case. */
static int read_open(SNDFILE *sf, const SF_INFO *info, const char *name,
                     mt_audio *a, char *err, size_t errlen)
{
    if (info->channels < 1 || info->channels > 64 || info->samplerate < 1 ||
        info->samplerate > 768000) {
        mt_set_err(err, errlen, "%s: implausible header (%d channels, %d Hz)",
                   name, info->channels, info->samplerate);
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

int mt_audio_read(const char *path, mt_audio *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
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
    static unsigned counter;
    *wp = NULL;
    int fmt;
    if (mt_audio_format_for_path(path, &fmt, err, errlen) != 0)
        return -1;
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

/* ---- PortAudio ---------------------------------------------------------- */

static int pa_refs;

/* PortAudio's ALSA and JACK back ends print pages of probing errors on a
 * machine without a sound card; they say nothing the user can act on, and
 * our own message lists what was found. */
static PaError pa_init_quiet(void)
{
    if (pa_refs > 0) {
        pa_refs++;
        return paNoError;
    }
    int saved = -1;
    if (!getenv("MT_PA_VERBOSE")) {
        fflush(stderr);
        saved = dup(2);
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (saved >= 0 && devnull >= 0)
            dup2(devnull, 2);
        if (devnull >= 0)
            close(devnull);
    }
    PaError e = Pa_Initialize();
    if (saved >= 0) {
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
    }
    if (e == paNoError)
        pa_refs = 1;
    return e;
}

static void pa_done(void)
{
    if (pa_refs > 0 && --pa_refs == 0)
        Pa_Terminate();
}

static int pa_collect(mt_pa_device **list, int *n, char *err, size_t errlen)
{
    *list = NULL;
    *n = 0;
    int count = Pa_GetDeviceCount();
    if (count < 0) {
        mt_set_err(err, errlen, "PortAudio: %s", Pa_GetErrorText(count));
        return -1;
    }
    mt_pa_device *l = mt_calloc_or_err(count ? (size_t)count : 1, sizeof *l, err, errlen, NULL);
    if (!l)
        return -1;
    PaDeviceIndex din = Pa_GetDefaultInputDevice();
    PaDeviceIndex dout = Pa_GetDefaultOutputDevice();
    for (int i = 0; i < count; i++) {
        const PaDeviceInfo *di = Pa_GetDeviceInfo(i);
        l[i].index = i;
        if (!di)
            continue;
        const PaHostApiInfo *hi = Pa_GetHostApiInfo(di->hostApi);
        snprintf(l[i].name, sizeof l[i].name, "%s", di->name ? di->name : "?");
        snprintf(l[i].host_api, sizeof l[i].host_api, "%s",
                 hi && hi->name ? hi->name : "?");
        l[i].max_in = di->maxInputChannels;
        l[i].max_out = di->maxOutputChannels;
        l[i].default_rate = di->defaultSampleRate;
        l[i].is_default_in = i == din;
        l[i].is_default_out = i == dout;
    }
    *list = l;
    *n = count;
    return 0;
}

int mt_pa_list(mt_pa_device **list, int *n, char *err, size_t errlen)
{
    *list = NULL;
    *n = 0;
    PaError e = pa_init_quiet();
    if (e != paNoError) {
        mt_set_err(err, errlen, "PortAudio: %s", Pa_GetErrorText(e));
        return -1;
    }
    int rc = pa_collect(list, n, err, errlen);
    pa_done();
    return rc;
}

char *mt_pa_describe(const mt_pa_device *list, int n, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    if (n == 0) {
        snprintf(buf, cap, "PortAudio found no audio devices");
        return buf;
    }
    for (int i = 0; i < n && len < cap; i++) {
        int w = snprintf(buf + len, cap - len,
                         "%s%d \"%s\" (%s, in %d, out %d, %.0f Hz%s%s)",
                         i ? "\n" : "", list[i].index, list[i].name,
                         list[i].host_api, list[i].max_in, list[i].max_out,
                         list[i].default_rate,
                         list[i].is_default_in ? ", default in" : "",
                         list[i].is_default_out ? ", default out" : "");
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return buf;
}

/* Single-producer single-consumer ring of floats: the PortAudio callback
 * is one side, the caller's thread the other; no locks in the callback. */
typedef struct ring {
    float          *buf;
    size_t          mask;
    _Atomic size_t  head;   /* written by the producer */
    _Atomic size_t  tail;   /* written by the consumer */
} ring;

static int ring_init(ring *r, size_t min_cap)
{
    size_t cap = 1024;
    while (cap < min_cap)
        cap <<= 1;
    r->buf = calloc(cap, sizeof(float));
    r->mask = cap - 1;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    return r->buf ? 0 : -1;
}

static size_t ring_count(ring *r)
{
    return atomic_load_explicit(&r->head, memory_order_acquire) -
           atomic_load_explicit(&r->tail, memory_order_acquire);
}

static size_t ring_push(ring *r, const float *src, size_t n)
{
    size_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    size_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    size_t space = r->mask + 1 - (head - tail);
    if (n > space)
        n = space;
    for (size_t i = 0; i < n; i++)
        r->buf[(head + i) & r->mask] = src ? src[i] : 0.0f;
    atomic_store_explicit(&r->head, head + n, memory_order_release);
    return n;
}

static size_t ring_pop(ring *r, float *dst, size_t n)
{
    size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    size_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    size_t have = head - tail;
    if (n > have)
        n = have;
    for (size_t i = 0; i < n; i++)
        if (dst)
            dst[i] = r->buf[(tail + i) & r->mask];
    atomic_store_explicit(&r->tail, tail + n, memory_order_release);
    return n;
}

struct mt_duplex {
    PaStream *stream;
    int       rate, dev_rate, frame_samples, jitter_frames;
    char      name[128];
    ring      mic, spk;
    SRC_STATE *src_in, *src_out;   /* NULL when the device runs at rate */
    float    *tmp_dev;             /* device-rate scratch */
    size_t    tmp_dev_cap;
    float    *mic_acc;             /* converted mic samples at rate */
    size_t    mic_acc_len, mic_acc_cap;
    float    *spk_tmp;
    size_t    spk_tmp_cap;
    _Atomic int      spk_started;
    _Atomic uint64_t spk_under, mic_dropped;
    uint64_t  mic_frames, mic_short, spk_dropped;
    float     level;
};

static int duplex_cb(const void *input, void *output, unsigned long frames,
                     const PaStreamCallbackTimeInfo *ti,
                     PaStreamCallbackFlags flags, void *user)
{
    mt_duplex *d = user;
    (void)ti;
    (void)flags;
    if (input) {
        size_t put = ring_push(&d->mic, input, frames);
        if (put < frames)
            atomic_fetch_add(&d->mic_dropped, frames - put);
    }
    float *out = output;
    if (out) {
        size_t need = frames;
        size_t prebuf = (size_t)d->jitter_frames * (size_t)d->frame_samples *
                        (size_t)d->dev_rate / (size_t)d->rate;
        if (!atomic_load(&d->spk_started)) {
            if (ring_count(&d->spk) >= prebuf && ring_count(&d->spk) > 0)
                atomic_store(&d->spk_started, 1);
        }
        size_t got = 0;
        if (atomic_load(&d->spk_started))
            got = ring_pop(&d->spk, out, need);
        if (got < need) {
            memset(out + got, 0, (need - got) * sizeof(float));
            if (atomic_load(&d->spk_started)) {
                atomic_fetch_add(&d->spk_under, 1);
                atomic_store(&d->spk_started, 0);  /* re-prebuffer */
            }
        }
    }
    return paContinue;
}

static int find_device(const char *spec, const mt_pa_device *l, int n)
{
    char *end;
    long idx = strtol(spec, &end, 10);
    if (*spec && !*end && idx >= 0 && idx < n)
        return (int)idx;
    for (int i = 0; i < n; i++)
        if (!strcmp(l[i].name, spec))
            return i;
    for (int i = 0; i < n; i++)
        if (strcasestr(l[i].name, spec))
            return i;
    return -1;
}

/* The input and output devices: both `device` (an index or a name), or the
 * defaults; either must have the channels for full duplex. 0, or -1 with
 * err listing what PortAudio found. */
static int pick_duplex_devices(const char *device, const mt_pa_device *l, int n,
                               int *din, int *dout, char *err, size_t errlen)
{
    char found[2048];
    mt_pa_describe(l, n, found, sizeof found);
    if (device) {
        *din = *dout = find_device(device, l, n);
        if (*din < 0) {
            mt_set_err(err, errlen, "no audio device matches '%s'; %s%s", device,
                       n ? "PortAudio found:\n" : "", found);
            return -1;
        }
    } else {
        *din = Pa_GetDefaultInputDevice();
        *dout = Pa_GetDefaultOutputDevice();
        if (*din == paNoDevice || *dout == paNoDevice || *din >= n || *dout >= n) {
            mt_set_err(err, errlen, "no default %s device; %s%s",
                       *din == paNoDevice ? "input" : "output",
                       n ? "PortAudio found:\n" : "", found);
            return -1;
        }
    }
    if (l[*din].max_in < 1 || l[*dout].max_out < 1) {
        mt_set_err(err, errlen, "device \"%s\" cannot do full duplex (in %d, out "
                   "%d channels); PortAudio found:\n%s", l[*din].name,
                   l[*din].max_in, l[*dout].max_out, found);
        return -1;
    }
    return 0;
}

/* One mono float channel at the device's lowest default latency. */
static void mono_params(PaStreamParameters *p, int dev, int input)
{
    memset(p, 0, sizeof *p);
    p->device = dev;
    p->channelCount = 1;
    p->sampleFormat = paFloat32;
    p->suggestedLatency = input ? Pa_GetDeviceInfo(dev)->defaultLowInputLatency
                                : Pa_GetDeviceInfo(dev)->defaultLowOutputLatency;
}

/* The rings, the scratch buffers and, when the device runs at another
 * rate, the two resamplers. */
static int duplex_buffers(mt_duplex *d, char *err, size_t errlen)
{
    size_t dev_frame = (size_t)d->frame_samples * (size_t)d->dev_rate / (size_t)d->rate + 16;
    int se = 0;
    if (ring_init(&d->mic, dev_frame * 16) || ring_init(&d->spk, dev_frame * (16 + (size_t)d->jitter_frames)))
        goto nomem;
    d->tmp_dev_cap = dev_frame * 8;
    d->tmp_dev = malloc(d->tmp_dev_cap * sizeof(float));
    d->mic_acc_cap = (size_t)d->frame_samples * 8;
    d->mic_acc = malloc(d->mic_acc_cap * sizeof(float));
    d->spk_tmp_cap = dev_frame * 2 + 64;
    d->spk_tmp = malloc(d->spk_tmp_cap * sizeof(float));
    if (!d->tmp_dev || !d->mic_acc || !d->spk_tmp)
        goto nomem;
    if (d->dev_rate != d->rate) {
        d->src_in = src_new(SRC_SINC_FASTEST, 1, &se);
        d->src_out = d->src_in ? src_new(SRC_SINC_FASTEST, 1, &se) : NULL;
        if (!d->src_in || !d->src_out) {
            mt_set_err(err, errlen, "libsamplerate: %s", src_strerror(se));
            return -1;
        }
    }
    return 0;
nomem:
    mt_set_err(err, errlen, "out of memory");
    return -1;
}

static int duplex_start(mt_duplex *d, const PaStreamParameters *in,
                        const PaStreamParameters *out, char *err, size_t errlen)
{
    PaError e = Pa_OpenStream(&d->stream, in, out, d->dev_rate,
                              paFramesPerBufferUnspecified, paClipOff, duplex_cb, d);
    if (e != paNoError) {
        mt_set_err(err, errlen, "cannot open \"%s\" at %d Hz: %s", d->name,
                   d->dev_rate, Pa_GetErrorText(e));
        d->stream = NULL;
        return -1;
    }
    e = Pa_StartStream(d->stream);
    if (e != paNoError) {
        mt_set_err(err, errlen, "cannot start \"%s\": %s", d->name, Pa_GetErrorText(e));
        return -1;
    }
    return 0;
}

/* What duplex_buffers and duplex_start made (the stream closed, not
 * stopped), and d. */
static void duplex_free(mt_duplex *d)
{
    if (d->stream)
        Pa_CloseStream(d->stream);
    if (d->src_in)
        src_delete(d->src_in);
    if (d->src_out)
        src_delete(d->src_out);
    free(d->mic.buf);
    free(d->spk.buf);
    free(d->tmp_dev);
    free(d->mic_acc);
    free(d->spk_tmp);
    free(d);
}

int mt_duplex_open(const char *device, int rate, int frame_samples,
                   int jitter_frames, mt_duplex **dp, char *err, size_t errlen)
{
    *dp = NULL;
    if (rate < 1 || frame_samples < 1) {
        mt_set_err(err, errlen, "bad stream format %d Hz / %d samples", rate,
                   frame_samples);
        return -1;
    }
    PaError e = pa_init_quiet();
    if (e != paNoError) {
        mt_set_err(err, errlen, "PortAudio: %s", Pa_GetErrorText(e));
        return -1;
    }
    mt_pa_device *l = NULL;
    int n = 0, din, dout;
    mt_duplex *d = NULL;
    if (pa_collect(&l, &n, err, errlen) != 0) {
        pa_done();
        return -1;
    }
    if (pick_duplex_devices(device, l, n, &din, &dout, err, errlen) != 0)
        goto fail;
    d = calloc(1, sizeof *d);
    if (!d) {
        mt_set_err(err, errlen, "out of memory");
        goto fail;
    }
    d->rate = rate;
    d->frame_samples = frame_samples;
    d->jitter_frames = jitter_frames < 0 ? 0 : jitter_frames;
    snprintf(d->name, sizeof d->name, "%s", l[din].name);
    PaStreamParameters in, out;
    mono_params(&in, din, 1);
    mono_params(&out, dout, 0);
    d->dev_rate = rate;
    if (Pa_IsFormatSupported(&in, &out, rate) != paFormatIsSupported)
        d->dev_rate = (int)l[din].default_rate;
    free(l);
    l = NULL;
    if (d->dev_rate < 1000 || d->dev_rate > 768000) {
        mt_set_err(err, errlen, "device \"%s\" reports no usable sample rate", d->name);
        free(d);
        d = NULL;
        goto fail;
    }
    if (duplex_buffers(d, err, errlen) != 0 || duplex_start(d, &in, &out, err, errlen) != 0)
        goto fail;
    *dp = d;
    return 0;
fail:
    if (d)
        duplex_free(d);
    free(l);
    pa_done();
    return -1;
}

/* Moves what the microphone produced into mic_acc at the server rate,
 * keeping at most a few frames (a device that runs fast, or the ALSA null
 * device that has no clock, must not build up delay). */
static void mic_pull(mt_duplex *d)
{
    for (;;) {
        size_t got = ring_pop(&d->mic, d->tmp_dev, d->tmp_dev_cap / 2);
        if (got == 0)
            break;
        if (!d->src_in) {
            for (size_t i = 0; i < got; i++) {
                if (d->mic_acc_len == d->mic_acc_cap) {
                    memmove(d->mic_acc, d->mic_acc + d->frame_samples,
                            (d->mic_acc_cap - (size_t)d->frame_samples) * sizeof(float));
                    d->mic_acc_len -= (size_t)d->frame_samples;
                }
                d->mic_acc[d->mic_acc_len++] = d->tmp_dev[i];
            }
            continue;
        }
        SRC_DATA s;
        memset(&s, 0, sizeof s);
        s.data_in = d->tmp_dev;
        s.input_frames = (long)got;
        s.src_ratio = (double)d->rate / d->dev_rate;
        while (s.input_frames > 0) {
            if (d->mic_acc_len + 64 > d->mic_acc_cap) {
                memmove(d->mic_acc, d->mic_acc + d->frame_samples,
                        (d->mic_acc_len - (size_t)d->frame_samples) * sizeof(float));
                d->mic_acc_len -= (size_t)d->frame_samples;
            }
            s.data_out = d->mic_acc + d->mic_acc_len;
            s.output_frames = (long)(d->mic_acc_cap - d->mic_acc_len);
            if (src_process(d->src_in, &s) != 0)
                return;
            d->mic_acc_len += (size_t)s.output_frames_gen;
            s.data_in += s.input_frames_used;
            s.input_frames -= s.input_frames_used;
            if (s.input_frames_used == 0 && s.output_frames_gen == 0)
                break;
        }
    }
}

int mt_duplex_read(mt_duplex *d, int16_t *pcm, size_t n)
{
    mic_pull(d);
    size_t take = d->mic_acc_len < n ? d->mic_acc_len : n;
    mt_audio_to_s16(d->mic_acc, pcm, take);
    float peak = 0;
    for (size_t i = 0; i < take; i++) {
        float a = fabsf(d->mic_acc[i]);
        if (a > peak)
            peak = a;
    }
    d->level = peak;
    memmove(d->mic_acc, d->mic_acc + take, (d->mic_acc_len - take) * sizeof(float));
    d->mic_acc_len -= take;
    if (take < n)
        memset(pcm + take, 0, (n - take) * sizeof *pcm);
    d->mic_frames++;
    if (take < n) {
        d->mic_short++;
        return 0;
    }
    return 1;
}

void mt_duplex_write(mt_duplex *d, const int16_t *pcm, size_t n)
{
    float fbuf[4096];
    size_t off = 0;
    while (off < n) {
        size_t chunk = n - off < 4096 ? n - off : 4096;
        for (size_t i = 0; i < chunk; i++)
            fbuf[i] = pcm[off + i] / 32768.0f;
        const float *dev = fbuf;
        size_t devn = chunk;
        if (d->src_out) {
            SRC_DATA s;
            memset(&s, 0, sizeof s);
            s.data_in = fbuf;
            s.input_frames = (long)chunk;
            s.data_out = d->spk_tmp;
            s.output_frames = (long)d->spk_tmp_cap;
            s.src_ratio = (double)d->dev_rate / d->rate;
            if (src_process(d->src_out, &s) != 0)
                return;
            dev = d->spk_tmp;
            devn = (size_t)s.output_frames_gen;
        }
        size_t cap = d->spk.mask + 1;
        if (ring_count(&d->spk) + devn > cap)
            d->spk_dropped++;    /* full: the newest audio is lost */
        ring_push(&d->spk, dev, devn);
        off += chunk;
    }
}

void mt_duplex_get_status(mt_duplex *d, mt_duplex_status *st)
{
    memset(st, 0, sizeof *st);
    st->level = d->level;
    st->mic_frames = d->mic_frames;
    st->mic_short = d->mic_short;
    st->mic_dropped = atomic_load(&d->mic_dropped);
    st->spk_under = atomic_load(&d->spk_under);
    st->spk_dropped = d->spk_dropped;
    st->device_rate = d->dev_rate;
    size_t per = (size_t)d->frame_samples * (size_t)d->dev_rate / (size_t)d->rate;
    st->buffered_frames = per ? (int)(ring_count(&d->spk) / per) : 0;
}

const char *mt_duplex_device_name(const mt_duplex *d) { return d->name; }

void mt_duplex_close(mt_duplex *d)
{
    if (!d)
        return;
    if (d->stream)
        Pa_StopStream(d->stream);
    duplex_free(d);
    pa_done();
}

struct mt_player { PaStream *stream; };

int mt_player_open(int rate, int frame_samples, mt_player **pp,
                   char *err, size_t errlen)
{
    *pp = NULL;
    PaError e = pa_init_quiet();
    if (e != paNoError) {
        mt_set_err(err, errlen, "PortAudio: %s", Pa_GetErrorText(e));
        return -1;
    }
    if (Pa_GetDefaultOutputDevice() == paNoDevice) {
        mt_pa_device *l = NULL;
        int n = 0;
        char found[2048] = "";
        if (pa_collect(&l, &n, err, errlen) == 0)
            mt_pa_describe(l, n, found, sizeof found);
        free(l);
        mt_set_err(err, errlen, "no default output device (use -o FILE); %s%s",
                   n ? "PortAudio found:\n" : "", found);
        pa_done();
        return -1;
    }
    mt_player *p = calloc(1, sizeof *p);
    if (!p) {
        mt_set_err(err, errlen, "out of memory");
        pa_done();
        return -1;
    }
    e = Pa_OpenDefaultStream(&p->stream, 0, 1, paInt16, rate,
                             (unsigned long)frame_samples, NULL, NULL);
    if (e == paNoError)
        e = Pa_StartStream(p->stream);
    if (e != paNoError) {
        mt_set_err(err, errlen, "cannot open the default output at %d Hz: %s",
                   rate, Pa_GetErrorText(e));
        if (p->stream)
            Pa_CloseStream(p->stream);
        free(p);
        pa_done();
        return -1;
    }
    *pp = p;
    return 0;
}

int mt_player_write(mt_player *p, const int16_t *pcm, size_t n,
                    char *err, size_t errlen)
{
    PaError e = Pa_WriteStream(p->stream, pcm, (unsigned long)n);
    if (e != paNoError && e != paOutputUnderflowed) {
        mt_set_err(err, errlen, "playback: %s", Pa_GetErrorText(e));
        return -1;
    }
    return 0;
}

void mt_player_close(mt_player *p)
{
    if (!p)
        return;
    Pa_StopStream(p->stream);
    Pa_CloseStream(p->stream);
    free(p);
    pa_done();
}
