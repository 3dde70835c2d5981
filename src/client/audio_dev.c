/* audio_dev.c: sound devices through PortAudio: the device list, the
 * full-duplex stream of --mic and the playback of --play. See
 * audio_dev.h.
 */
#define _GNU_SOURCE
#include "client/audio_dev.h"

#include <dlfcn.h>
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

#include "util/errmsg.h"
#include "util/io.h"
#include "client/resample.h"

/* ---- PortAudio ---------------------------------------------------------- */

static int pa_refs;

/* PortAudio's ALSA and JACK back ends print pages of probing errors on a
 * machine without a sound card; they say nothing the user can act on, and
 * our own message lists what was found. They are silenced through those
 * libraries' own error hooks (looked up by name: both are PortAudio's
 * dependencies, present whenever it is), never by redirecting the
 * process's fd 2, which other threads may be writing to. MT_PA_VERBOSE=1
 * leaves them as they are. */
static void alsa_quiet(const char *file, int line, const char *fn, int err, const char *fmt, ...)
{
    (void)file, (void)line, (void)fn, (void)err, (void)fmt;
}

static void jack_quiet(const char *msg) { (void)msg; }

static void audio_libs_quiet(void)
{
    typedef void (*alsa_handler)(const char *, int, const char *, int, const char *, ...);
    typedef int (*alsa_set_fn)(alsa_handler);
    typedef void (*jack_set_fn)(void (*)(const char *));
    alsa_set_fn alsa_set = (alsa_set_fn)dlsym(RTLD_DEFAULT, "snd_lib_error_set_handler");
    jack_set_fn jack_err = (jack_set_fn)dlsym(RTLD_DEFAULT, "jack_set_error_function");
    jack_set_fn jack_info = (jack_set_fn)dlsym(RTLD_DEFAULT, "jack_set_info_function");
    if (alsa_set)
        (void)alsa_set(alsa_quiet);
    if (jack_err)
        jack_err(jack_quiet);
    if (jack_info)
        jack_info(jack_quiet);
}

static PaError pa_init_quiet(void)
{
    if (pa_refs > 0) {
        pa_refs++;
        return paNoError;
    }
    if (!getenv("MT_PA_VERBOSE"))
        audio_libs_quiet();
    PaError e = Pa_Initialize();
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
        /* one line still: what helps on a machine without a sound card */
        snprintf(buf, cap, "PortAudio found no audio devices (no sound card? to "
                 "try without one, give ALSA a null device: a file with "
                 "'pcm.mtnull { type null }' as ALSA_CONFIG_PATH, then --device "
                 "mtnull; mt-replay(1), ENVIRONMENT)");
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

