/* test_audio.c: audio.c's file reader. Real files written with libsndfile
 * into a mkdtemp directory: float samples far beyond full scale and NaN
 * (issue 19 item 7), an MP3, an Ogg Vorbis, a FLAC and a 48 kHz stereo WAV
 * read to the frame count their duration predicts (issue 20 item 1: MP3's
 * frame count is only an estimate), and the one truncation rule
 * (issue 19 item 8): a size or count the format states and the data does
 * not reach is refused, a streaming writer's placeholder size is not. */
#include "client/audio_read.h"
#include "client/resample.h"
#include "client/audio_write.h"
#include "tap.h"
#include "test_util.h"

#include <math.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];
static char err[1024];

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmp, name);
}

/* Writes frames x channels interleaved floats; 0, or -1 when this
 * libsndfile cannot write the format (the caller skips). */
static int write_sf(const char *name, int format, int rate, int channels,
                    const float *data, sf_count_t frames)
{
    char p[512];
    path_of(p, sizeof p, name);
    SF_INFO info;
    memset(&info, 0, sizeof info);
    info.samplerate = rate;
    info.channels = channels;
    info.format = format;
    SNDFILE *sf = sf_open(p, SFM_WRITE, &info);
    if (!sf) {
        tap_diag("libsndfile cannot write %s: %s", name, sf_strerror(NULL));
        return -1;
    }
    sf_count_t put = sf_writef_float(sf, data, frames);
    int rc = sf_close(sf);
    if (put != frames || rc != 0) {
        printf("Bail out! writing %s failed\n", name);
        exit(1);
    }
    return 0;
}

/* A tone of seconds at rate, channels interleaved, amplitude 0.5. */
static float *tone(int rate, int channels, double seconds, sf_count_t *frames)
{
    *frames = (sf_count_t)llround(seconds * rate);
    float *d = malloc((size_t)*frames * (size_t)channels * sizeof *d);
    if (!d) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    for (sf_count_t i = 0; i < *frames; i++)
        for (int c = 0; c < channels; c++)
            d[i * channels + c] = 0.5f * (float)sin(2 * M_PI * (440.0 + 110 * c) * (double)i / rate);
    return d;
}

static unsigned char *slurp(const char *name, size_t *n)
{
    char p[512];
    path_of(p, sizeof p, name);
    return (unsigned char *)test_file_read(p, n);
}

static void spill(const char *name, const unsigned char *b, size_t n)
{
    char p[512];
    path_of(p, sizeof p, name);
    test_file_write(p, b, n);
}

static int read_named(const char *name, mt_audio *a)
{
    char p[512];
    path_of(p, sizeof p, name);
    err[0] = 0;
    return mt_audio_read(p, a, err, sizeof err);
}

/* ---- issue 19 item 7: huge, infinite and NaN samples ------------------- */

static void huge_samples(void)
{
    const float in[] = { 1e20f, -1e20f, NAN, 0.5f, INFINITY, -INFINITY, 1.0f, -1.0f };
    const int16_t want[] = { 32767, -32768, 0, 16384, 32767, -32768, 32767, -32768 };
    const size_t n = sizeof in / sizeof in[0];
    int16_t out[8];

    mt_audio_to_s16(in, out, n);
    int same = 1;
    for (size_t i = 0; i < n; i++)
        if (out[i] != want[i]) {
            tap_diag("to_s16(%g) = %d, want %d", (double)in[i], out[i], want[i]);
            same = 0;
        }
    ok(same, "mt_audio_to_s16 clamps 1e20 to 32767, -1e20 to -32768, NaN to 0");

    if (write_sf("float.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 24000, 1, in,
                 (sf_count_t)n) != 0) {
        tap_skip("cannot write a float WAV");
        return;
    }
    mt_audio a;
    int rc = read_named("float.wav", &a);
    ok(rc == 0, "float WAV with 1e20, -1e20, NaN, inf read (%s)", rc ? err : "ok");
    if (rc != 0)
        return;
    is_int(a.frames, n, "all 8 samples read");
    int inrange = 1;
    for (size_t i = 0; i < a.frames; i++)
        if (!(a.samples[i] >= -1.0f && a.samples[i] <= 1.0f))
            inrange = 0;
    ok(inrange, "samples read are within [-1, 1] (NaN read as 0)");
    mt_audio_to_s16(a.samples, out, n);
    same = 1;
    for (size_t i = 0; i < n; i++)
        if (out[i] != want[i]) {
            tap_diag("sample %zu: %d, want %d", i, out[i], want[i]);
            same = 0;
        }
    ok(same, "float WAV -> s16: +1e20 is 32767 (not -32768), NaN is 0, 0.5 is 16384");
    mt_audio_free(&a);

    /* stereo: two huge channels must not overflow the down-mix to inf */
    const float st[] = { 3e38f, 3e38f, -3e38f, -3e38f, NAN, 0.5f };
    if (write_sf("float2.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 24000, 2, st, 3) == 0 &&
        read_named("float2.wav", &a) == 0) {
        ok(a.frames == 3 && a.samples[0] == 1.0f && a.samples[1] == -1.0f &&
           a.samples[2] == 0.25f, "stereo down-mix of 3e38 + 3e38 is 1, of NaN + 0.5 is 0.25");
        mt_audio_free(&a);
    } else {
        ok(0, "stereo float WAV read (%s)", err);
    }
}

/* ---- issue 20 item 1: formats read to the duration's frame count ------- */

/* Reads name, converts to 24 kHz and checks the 80 ms frame count against
 * seconds x 12.5 within one frame. */
static void expect_frames(const char *what, const char *name, double seconds)
{
    mt_audio a, r;
    int rc = read_named(name, &a);
    ok(rc == 0, "%s: read (%s)", what, rc ? err : "ok");
    if (rc != 0)
        return;
    rc = mt_audio_resample(&a, 24000, SRC_SINC_FASTEST, &r, err, sizeof err);
    ok(rc == 0, "%s: resampled to 24 kHz", what);
    if (rc == 0) {
        double frames = (double)r.frames / 1920.0, want = seconds * 12.5;
        ok(fabs(frames - want) <= 1.0, "%s: %.2f frames of 80 ms, want %.2f within one "
           "(%zu samples at %d Hz, %d ch in)", what, frames, want, a.frames, a.rate,
           a.channels_in);
        mt_audio_free(&r);
    }
    mt_audio_free(&a);
}

/* Writes name in format and checks its frames, or skips (why_not) when
 * this libsndfile cannot write that format. */
static void format_case(const char *what, const char *name, int format, int rate,
                        int channels, const float *d, sf_count_t n, double secs,
                        const char *why_not)
{
    if (write_sf(name, format, rate, channels, d, n) == 0)
        expect_frames(what, name, secs);
    else
        tap_skip(why_not);
}

static void formats(void)
{
    const double secs = 1.37;
    sf_count_t n;
    float *d;

    d = tone(48000, 2, secs, &n);
    format_case("48 kHz stereo WAV", "s48.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16,
                48000, 2, d, n, secs, "48 kHz WAV not writable");
    free(d);

    d = tone(44100, 1, secs, &n);
    format_case("FLAC", "t.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 44100, 1, d, n,
                secs, "FLAC not writable by this libsndfile");
    format_case("Ogg Vorbis", "t.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 44100, 1, d, n,
                secs, "Ogg Vorbis not writable by this libsndfile");
    free(d);

    /* libsndfile's frame count for an MP3 is an estimate from the bit rate
     * that the decoded audio need not reach: it used to be "truncated".
     * SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III by value (an enum since
     * libsndfile 1.1, not a macro to test): an older one fails to open it
     * and the case is skipped. */
    d = tone(44100, 2, secs, &n);
    format_case("MP3", "t.mp3", 0x230000 | 0x0082, 44100, 2, d, n, secs,
                "MP3 not writable by this libsndfile (1.1 or later with LAME)");
    free(d);
}

/* ---- issue 19 item 8: one truncation rule ----------------------------- */

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static unsigned char *find_chunk(unsigned char *b, size_t n, const char *id)
{
    for (size_t i = 12; i + 8 <= n; i++)
        if (!memcmp(b + i, id, 4))
            return b + i;
    return NULL;
}

static void expect_refused(const char *what, const char *name, const char *sub)
{
    mt_audio a;
    int rc = read_named(name, &a);
    ok(rc == -1, "%s: refused", what);
    like(err, sub, what);
    if (rc == 0)
        mt_audio_free(&a);
}

static void expect_read(const char *what, const char *name, size_t frames)
{
    mt_audio a;
    int rc = read_named(name, &a);
    ok(rc == 0, "%s: read (%s)", what, rc ? err : "ok");
    if (rc == 0) {
        is_int(a.frames, frames, what);
        mt_audio_free(&a);
    }
}

static void truncation(void)
{
    sf_count_t n;
    float *d = tone(16000, 1, 1.0, &n);
    int wav = write_sf("m.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, d, n);
    int flac = write_sf("m.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, d, n);
    int au = write_sf("m.au", SF_FORMAT_AU | SF_FORMAT_PCM_16, 16000, 1, d, n);
    free(d);
    if (wav != 0) {
        tap_skip("WAV not writable");
        return;
    }
    size_t len;
    unsigned char *b = slurp("m.wav", &len);
    unsigned char *data = find_chunk(b, len, "data");
    if (!data) {
        printf("Bail out! no data chunk in m.wav\n");
        exit(1);
    }
    size_t data_at = (size_t)(data - b) + 8;

    expect_read("whole WAV", "m.wav", (size_t)n);

    spill("cut.wav", b, data_at + (len - data_at) * 6 / 10);
    expect_refused("WAV cut at 60%", "cut.wav", "truncated");

    spill("cut-odd.wav", b, data_at + (len - data_at) * 6 / 10 + 1);
    expect_refused("WAV cut mid-sample", "cut-odd.wav", "truncated");

    /* the same thing seen from the header: all data there, a size that
     * claims more; refused like the cut file (the format cannot tell the
     * two apart) */
    put_le32(data + 4, (uint32_t)(2 * (len - data_at)));
    spill("claims-more.wav", b, len);
    expect_refused("WAV whose data size claims twice the data", "claims-more.wav",
                   "truncated");

    /* placeholders of writers that cannot seek back: unknown length */
    put_le32(data + 4, 0xFFFFFFFFu);
    spill("size-ffff.wav", b, len);
    expect_read("WAV with data size 0xFFFFFFFF (streamed)", "size-ffff.wav", (size_t)n);
    put_le32(data + 4, 0x7FFFF000u);
    spill("size-sox.wav", b, len);
    expect_read("WAV with data size 0x7FFFF000 (sox into a pipe)", "size-sox.wav",
                (size_t)n);
    put_le32(data + 4, (uint32_t)(len - data_at));

    /* the RIFF size is not the audio's: the data chunk is whole */
    put_le32(b + 4, (uint32_t)(2 * len));
    spill("riff-more.wav", b, len);
    expect_read("WAV whose RIFF size claims more, data chunk whole", "riff-more.wav",
                (size_t)n);
    free(b);

    if (flac == 0) {
        b = slurp("m.flac", &len);
        spill("cut.flac", b, len * 6 / 10);
        mt_audio a;
        int rc = read_named("cut.flac", &a);
        ok(rc == -1, "FLAC cut at 60%%: refused (%s)", err);
        if (rc == 0)
            mt_audio_free(&a);
        free(b);
    } else {
        tap_skip("FLAC not writable");
    }
    if (au == 0) {
        b = slurp("m.au", &len);
        spill("cut.au", b, len * 6 / 10);
        expect_refused("AU cut at 60% (its header states the data size)", "cut.au",
                       "truncated");
        free(b);
    } else {
        tap_skip("AU not writable");
    }
}

/* ---- the memory reader (fuzz harness entry point) ---------------------- */

static void memory(void)
{
    size_t len;
    unsigned char *b = slurp("m.wav", &len);
    mt_audio a, f;
    int rc = mt_audio_read_mem(b, len, "mem.wav", &a, err, sizeof err);
    ok(rc == 0, "mt_audio_read_mem reads a WAV (%s)", rc ? err : "ok");
    if (rc == 0 && read_named("m.wav", &f) == 0) {
        ok(a.frames == f.frames && a.rate == f.rate &&
           memcmp(a.samples, f.samples, a.frames * sizeof(float)) == 0,
           "memory and file reads agree sample for sample");
        mt_audio_free(&f);
    }
    if (rc == 0)
        mt_audio_free(&a);
    rc = mt_audio_read_mem(b, len / 2, "half.wav", &a, err, sizeof err);
    ok(rc == -1, "mt_audio_read_mem: half a WAV refused");
    like(err, "half.wav", "message names what the caller called it");
    free(b);
    static const char junk[] = "this is not audio at all, just text.";
    rc = mt_audio_read_mem(junk, sizeof junk, "junk", &a, err, sizeof err);
    ok(rc == -1, "mt_audio_read_mem: text refused (%s)", err);
    rc = mt_audio_read_mem(junk, 0, "empty", &a, err, sizeof err);
    ok(rc == -1, "mt_audio_read_mem: empty refused");
}

static void not_regular(void)
{
    char p[512];
    path_of(p, sizeof p, "fifo.wav");
    if (mkfifo(p, 0600) != 0) {
        tap_skip("mkfifo failed");
        return;
    }
    mt_audio a;
    ok(mt_audio_read(p, &a, err, sizeof err) == -1, "a FIFO is refused, not waited on");
    like(err, "not a regular file", "FIFO message");
}

int main(void)
{
    if (test_tmpdir_make(tmp, sizeof tmp, "mt-audio") != 0)
        return 1;
    huge_samples();
    formats();
    truncation();
    memory();
    not_regular();
    test_tmpdir_remove(tmp);
    return tap_done();
}
