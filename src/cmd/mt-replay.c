/* mt-replay: audio files as real-time sessions of mt-serve, pipe modes for
 * the frame stream (--emit, --play), and live conversations through
 * PortAudio (--mic). A thin main over client.c and audio.c; see
 * mt-replay(1).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <libgen.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <portaudio.h>
#include <sndfile.h>

#include "util/io.h"
#include "util/errmsg.h"
#include "cmd/opt.h"
#include "client/audio.h"
#include "client/client.h"
#include "client/transcript.h"
#include "wire/endpoint.h"
#include "wire/frame.h"
#include "wire/latline.h"
#include "util/clock.h"

enum { LAT_NONE, LAT_INTERVAL, LAT_FRAMES };

typedef struct input {
    const char *path;
    mt_audio    audio;      /* at the session rate, mono float */
    int16_t    *pcm;        /* the same as s16 */
    size_t      frames;
} input;

typedef struct sess {
    input           *in;
    int              attempts;      /* connections made (1 + retries) */
    int              final_state;   /* MT_CS_*: the last attempt's end */
    char             reason[MT_REASON_MAX + 1];
    size_t           pos;           /* next sample */
    uint64_t         frames_left;   /* --duration bound, or UINT64_MAX */
    mt_audio_writer *w;
    uint32_t         next_out;      /* next seq expected back */
    char             out_path[4096];
} sess;

typedef struct app {
    const char *sock;
    const char *token_file;     /* --token-file: HELLO's access token */
    const char *emit;           /* --emit FILE */
    int         play, mic, list;
    int         copies, loop, rate_check, lat, quality, no_pace;
    double      stagger_ms, duration_s, interval_s, jitter_ms;
    const char *out_pattern, *device, *model;
    const char *type;           /* --type, for '-' in and out */
    int         type_fmt;       /* its libsndfile format */
    const char *latency_log;    /* --latency-log FILE */
    const char *transcript_path;/* -t FILE: the text tokens (TEXT frames) */
    mt_transcript *transcript;
    uint32_t    seed;           /* --seed: HELLO's seq; 0: the server's */
    int         retry;          /* --retry N */
    int        *sess_of;        /* client session index -> a->s index */
    int         retries;        /* made so far */
    int         live;           /* --mic with stdout a terminal */
    int         rate, frame_samples;
    input      *inputs;
    int         ninputs;
    sess       *s;
    int         ns;
    mt_client  *cl;
    int         write_failed;
    /* interval lines */
    uint64_t    t_begin, t_next_line;
    long        line_no;
    mt_pctl     iv_rtt, iv_server;
    /* mic */
    mt_duplex  *dx;
    uint64_t    t_status;
    double      last_rtt_ms;
    int         not_realtime;   /* the capture device outruns the clock */
} app;

/* Where the machine lines go: stdout, stderr when stdout carries audio
 * (-o -), the --latency-log file, or nowhere (NULL: a live --mic status
 * has the terminal). */
static FILE *g_lines;

static volatile sig_atomic_t g_stop;
static mt_client *g_client;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
    if (g_client)
        mt_client_stop(g_client);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-replay -s SOCK [-n N] [--stagger MS] [-o PATTERN] FILE...|-\n"
"       mt-replay --emit FILE|- [--no-pace] > STREAM\n"
"       mt-replay --play [-o FILE] < STREAM\n"
"       mt-replay -s SOCK --mic [--device DEV] [--jitter MS]\n"
"       mt-replay --list-devices\n"
"options:\n"
"  -s, --socket PATH      mt-serve's Unix socket, or tcp:HOST:PORT\n"
"      --token-file FILE  access token for a TCP server (mt-serve --token-file)\n"
"  -n, --copies N         sessions per input file (default 1)\n"
"      --stagger MS       start sessions MS apart (default 0)\n"
"  -o, --output PATTERN   write returned audio; %%d = session index; format\n"
"                         from the extension (.wav .flac .ogg .aiff ...);\n"
"                         '-' is standard output (one session)\n"
"      --type TYPE        format of '-' (stdin or stdout): au (default out),\n"
"                         ogg or raw through a pipe; raw stdin is s16le mono\n"
"                         at --rate; other formats only from/to a file\n"
"      --retry N          retry a refused session up to N times, backing off\n"
"                         (0.25 s doubling, jittered, at most 8 s); not one\n"
"                         the server marks final (a wrong token, say)\n"
"      --latency-log FILE machine lines to FILE instead of stdout\n"
"  -t, --transcript FILE  text models: the text tokens, one line a frame\n"
"      --seed N           models that sample: the sessions' seed (HELLO's seq,\n"
"                         1..4294967295; default: the server's)\n"
"                         (SESSION SEQ ID...); each is a replay_text line too\n"
"  -r, --rate HZ          session sample rate (default 24000)\n"
"  -f, --frame-samples N  samples per frame (default 1920)\n"
"  -m, --model NAME       model name asked in HELLO (default: any)\n"
"  -q, --quality Q        resampler: best medium fastest zoh linear\n"
"      --loop             repeat each file (with --duration)\n"
"      --duration SEC     stop each session after SEC seconds of audio\n"
"      --rate-check       print the achieved send jitter\n"
"      --latency MODE     frames, interval (default) or none\n"
"      --interval SEC     seconds between interval lines (default 1)\n"
"      --emit FILE        write FILE's frame stream to stdout, no server\n"
"      --no-pace          with --emit: as fast as possible\n"
"      --play             read a frame stream on stdin, write -o or play\n"
"      --mic              live conversation through PortAudio\n"
"      --device DEV       PortAudio device: index, name or part of it\n"
"      --jitter MS        speaker jitter buffer (default 160)\n"
"      --list-devices     list what PortAudio finds\n"
"  -h, --help             this text\n"
"      --version          print the version\n");
}

/* PATTERN with %d replaced by idx (and %% by %). Only one %d allowed. */
static int expand_pattern(const char *pat, int idx, char *out, size_t cap)
{
    size_t o = 0;
    int seen = 0;
    for (const char *p = pat; *p; p++) {
        if (*p == '%' && p[1] == 'd') {
            int w = snprintf(out + o, cap - o, "%d", idx);
            if (w < 0 || (size_t)w >= cap - o)
                return -1;
            o += (size_t)w;
            p++;
            seen++;
        } else if (*p == '%' && p[1] == '%') {
            if (o + 1 >= cap)
                return -1;
            out[o++] = '%';
            p++;
        } else {
            if (o + 1 >= cap)
                return -1;
            out[o++] = *p;
        }
    }
    out[o] = 0;
    return seen;
}

/* ---- reading inputs ------------------------------------------------------ */

static int load_input(app *a, input *in, char *err, size_t errlen)
{
    mt_audio raw;
    int rc;
    if (!strcmp(in->path, "-")) {
        int raw_rate = a->type &&
            (a->type_fmt & SF_FORMAT_TYPEMASK) == SF_FORMAT_RAW ? a->rate : 0;
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
    rc = mt_audio_resample(&raw, a->rate, a->quality, &in->audio, err, errlen);
    mt_audio_free(&raw);
    if (rc != 0)
        return -1;
    in->frames = in->audio.frames;
    in->pcm = malloc((in->frames ? in->frames : 1) * sizeof *in->pcm);
    if (!in->pcm) {
        mt_set_err(err, errlen, "%s: out of memory", in->path);
        return -1;
    }
    mt_audio_to_s16(in->audio.samples, in->pcm, in->frames);
    return 0;
}

/* The next frame of a session's input: file order, zero padded at the end,
 * repeated with --loop, bounded by --duration. 1 = frame, 0 = end. */
static int source_next(app *a, sess *s, int16_t *pcm, size_t n)
{
    if (s->frames_left == 0)
        return 0;
    if (s->pos >= s->in->frames) {
        if (!a->loop)
            return 0;
        s->pos = 0;
    }
    size_t i = 0;
    while (i < n) {
        if (s->pos >= s->in->frames) {
            if (a->loop && a->duration_s > 0) {
                s->pos = 0;
                continue;
            }
            memset(pcm + i, 0, (n - i) * sizeof *pcm);
            break;
        }
        size_t take = s->in->frames - s->pos;
        if (take > n - i)
            take = n - i;
        memcpy(pcm + i, s->in->pcm + s->pos, take * sizeof *pcm);
        s->pos += take;
        i += take;
    }
    if (s->frames_left != UINT64_MAX)
        s->frames_left--;
    return 1;
}

/* ---- latency lines ------------------------------------------------------- */

static void print_line(mt_ll_writer *w)
{
    if (g_lines && mt_ll_end(w) >= 0) {
        fputs(w->buf, g_lines);
        fputc('\n', g_lines);
    }
}

static void flush_lines(void)
{
    if (g_lines)
        fflush(g_lines);
}

static void interval_line(app *a, uint64_t now)
{
    char buf[1024];
    mt_ll_writer w;
    mt_client_totals t;
    mt_client_totals_get(a->cl, &t);
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, "replay_tick", a->line_no++);
    mt_ll_f(&w, "t", (double)(now - a->t_begin) / 1e9, 3);
    mt_ll_int(&w, "active", t.active);
    mt_ll_u64(&w, "sent", t.sent);
    mt_ll_u64(&w, "received", t.received);
    mt_ll_u64(&w, "filled", t.filled);
    mt_ll_u64(&w, "late", t.late);
    mt_ll_f(&w, "p50_ms", mt_pctl_quantile(&a->iv_rtt, 0.5) / 1e6, 3);
    mt_ll_f(&w, "p99_ms", mt_pctl_quantile(&a->iv_rtt, 0.99) / 1e6, 3);
    mt_ll_f(&w, "max_ms", a->iv_rtt.max_ns / 1e6, 3);
    mt_ll_f(&w, "server_p50_ms", mt_pctl_quantile(&a->iv_server, 0.5) / 1e6, 3);
    mt_ll_f(&w, "server_p99_ms", mt_pctl_quantile(&a->iv_server, 0.99) / 1e6, 3);
    print_line(&w);
    flush_lines();
}

/* ---- the live status of --mic ------------------------------------------- */

/* Where the one-line status is drawn: the terminal on stdout (live), else
 * stderr when that is a terminal (stdout then carries the machine lines
 * into a pipe), else nowhere. */
static FILE *status_out(const app *a)
{
    return a->live ? stdout : isatty(2) ? stderr : NULL;
}

/* A capture device that hands out samples faster than the clock (a null
 * or file-backed ALSA PCM) fills the ring and has the excess dropped: more
 * dropped than half the elapsed time's worth means at least 1.5 x real
 * time, which no microphone does. */
static int device_outruns_clock(const mt_duplex_status *st, double elapsed_s)
{
    return elapsed_s > 0.5 && st->device_rate > 0 &&
           (double)st->mic_dropped > 0.5 * elapsed_s * st->device_rate;
}

static void status_line(app *a, uint64_t now)
{
    mt_duplex_status st;
    mt_duplex_get_status(a->dx, &st);
    double elapsed = (double)(now - a->t_begin) / 1e9;
    if (device_outruns_clock(&st, elapsed))
        a->not_realtime = 1;
    FILE *f = status_out(a);
    if (!f)
        return;
    int bars = (int)(st.level * 10 + 0.5f);
    char meter[11];
    for (int i = 0; i < 10; i++)
        meter[i] = i < bars ? '#' : '.';
    meter[10] = 0;
    mt_client_totals t;
    mt_client_totals_get(a->cl, &t);
    /* \r and erase-to-end: one line redrawn in place, never scrolling */
    fprintf(f, "\r\033[Kmic [%s] %5.1f s  latency p50 %5.1f p99 %5.1f ms  "
            "late %llu  fills %llu  underruns %llu%s", meter, elapsed,
            mt_pctl_quantile(&a->iv_rtt, 0.5) / 1e6,
            mt_pctl_quantile(&a->iv_rtt, 0.99) / 1e6,
            (unsigned long long)t.late, (unsigned long long)t.filled,
            (unsigned long long)st.spk_under,
            a->not_realtime ? "  DEVICE NOT REAL-TIME" : "");
    fflush(f);
}

/* ---- client callbacks ---------------------------------------------------- */

static int cb_accept(void *user, int idx, const mt_hello *fmt, char *reason,
                     size_t rlen)
{
    app *a = user;
    sess *s = &a->s[a->sess_of[idx]];
    if ((int)fmt->sample_rate != a->rate || (int)fmt->frame_samples != a->frame_samples) {
        snprintf(reason, rlen, "server accepted %u Hz / %u samples, asked "
                 "%d Hz / %d", fmt->sample_rate, fmt->frame_samples, a->rate,
                 a->frame_samples);
        return -1;
    }
    if (s->out_path[0]) {
        char err[512];
        int rc = !strcmp(s->out_path, "-")
            ? mt_audio_writer_open_fd(1, "stdout", a->type_fmt, a->rate, &s->w,
                                      err, sizeof err)
            : mt_audio_writer_open(s->out_path, a->rate, &s->w, err, sizeof err);
        if (rc != 0) {
            snprintf(reason, rlen, "%s", err);
            a->write_failed = 1;
            return -1;
        }
    }
    return 0;
}

static int cb_next(void *user, int idx, uint32_t seq, int16_t *pcm, size_t n)
{
    app *a = user;
    (void)seq;
    if (a->dx) {
        mt_duplex_read(a->dx, pcm, n);
        if (a->duration_s > 0 && seq >= (uint32_t)(a->duration_s * a->rate / a->frame_samples))
            return MT_NEXT_END;
        return MT_NEXT_FRAME;
    }
    return source_next(a, &a->s[a->sess_of[idx]], pcm, n) ? MT_NEXT_FRAME : MT_NEXT_END;
}

static void write_out(app *a, sess *s, const int16_t *pcm, size_t n)
{
    char err[512];
    if (s->w && mt_audio_writer_write(s->w, pcm, n, err, sizeof err) != 0) {
        fprintf(stderr, "mt-replay: %s\n", err);
        mt_audio_writer_abort(s->w);
        s->w = NULL;
        a->write_failed = 1;
    }
}

static void cb_frame(void *user, const mt_client_result *r, const int16_t *pcm,
                     size_t n)
{
    app *a = user;
    int si = a->sess_of[r->idx];
    sess *s = &a->s[si];
    /* Output by seq: a gap (a frame the server never answered) becomes
     * silence, so the file stays aligned with what was sent. */
    static int16_t zero[MT_FRAME_MAX_PAYLOAD / 2];
    while (s->w && s->next_out < r->seq) {
        write_out(a, s, zero, n);
        s->next_out++;
    }
    if (r->seq >= s->next_out) {
        write_out(a, s, pcm, n);
        s->next_out = r->seq + 1;
    }
    if (!r->fill) {
        mt_pctl_add(&a->iv_rtt, r->rtt_ms > 0 ? (uint64_t)(r->rtt_ms * 1e6) : 0);
        mt_pctl_add(&a->iv_server, r->server_ms > 0 ? (uint64_t)(r->server_ms * 1e6) : 0);
        a->last_rtt_ms = r->rtt_ms;
    }
    if (a->lat == LAT_FRAMES) {
        char buf[512];
        mt_ll_writer w;
        mt_ll_begin(&w, buf, sizeof buf);
        mt_ll_u64(&w, "replay_frame", r->seq);
        mt_ll_int(&w, "session", si);
        mt_ll_int(&w, "fill", r->fill);
        mt_ll_int(&w, "late", r->late);
        mt_ll_f(&w, "rtt_ms", r->rtt_ms, 3);
        mt_ll_f(&w, "server_ms", r->server_ms, 3);
        mt_ll_f(&w, "queue_ms", r->queue_ms, 3);
        mt_ll_f(&w, "send_late_ms", r->send_late_ms, 3);
        print_line(&w);
    }
    if (a->dx) {
        mt_duplex_write(a->dx, pcm, n);
        uint64_t now = mt_clock_ns();
        if (now - a->t_status > 200000000ull) {
            status_line(a, now);
            a->t_status = now;
        }
    }
}

/* --retry's wait before attempt k+1 (k retries made): 250 ms doubling,
 * at most 8 s, each drawn from [half, all] of that so that sessions
 * refused together do not come back together. */
static uint64_t retry_delay_ns(int k)
{
    double base = 0.25 * (double)(1u << (k < 5 ? k : 5));
    if (base > 8)
        base = 8;
    double u = (double)random() / ((double)RAND_MAX + 1.0);
    return (uint64_t)(base * (0.5 + 0.5 * u) * 1e9);
}

/* A fresh connection for session si after a refusal. 0, or -1. */
static int retry_session(app *a, int si, const char *why)
{
    sess *s = &a->s[si];
    char err[256];
    uint64_t delay = retry_delay_ns(s->attempts - 1);
    int idx = mt_client_add_unix(a->cl, a->sock, mt_clock_ns() + delay,
                                 err, sizeof err);
    if (idx < 0) {
        fprintf(stderr, "mt-replay: retry: %s\n", err);
        return -1;
    }
    a->sess_of[idx] = si;
    s->attempts++;
    a->retries++;
    s->pos = 0;
    s->next_out = 0;
    s->frames_left = a->duration_s > 0
        ? (uint64_t)(a->duration_s * a->rate / a->frame_samples + 0.5) : UINT64_MAX;
    char buf[1024];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, "replay_retry", si);
    mt_ll_int(&w, "attempt", s->attempts);
    mt_ll_f(&w, "in_s", (double)delay / 1e9, 3);
    mt_ll_str(&w, "reason", why);
    print_line(&w);
    flush_lines();
    return 0;
}

/* A TEXT frame: a replay_text line (live), and the transcript line. */
static void cb_text(void *user, int idx, uint32_t seq, const int32_t *tok, int n)
{
    app *a = user;
    if (n == 0)
        return;   /* a text-only answer before the model has text */
    int si = a->sess_of[idx];
    char buf[1024], ids[800];
    size_t k = 0;
    for (int i = 0; i < n && k + 12 < sizeof ids; i++)
        k += (size_t)snprintf(ids + k, sizeof ids - k, "%s%d", i ? "," : "", (int)tok[i]);
    ids[k] = 0;
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_u64(&w, "replay_text", seq);
    mt_ll_int(&w, "session", si);
    mt_ll_str(&w, "tokens", ids);
    print_line(&w);
    char err[512];
    if (a->transcript && mt_transcript_add(a->transcript, si, seq, tok, n, err, sizeof err)) {
        fprintf(stderr, "mt-replay: -t: %s\n", err);
        a->write_failed = 1;
    }
}

static void cb_end(void *user, int idx, const mt_client_stats *st)
{
    app *a = user;
    int si = a->sess_of[idx];
    sess *s = &a->s[si];
    char err[512];
    if (s->w) {
        if (st->state == MT_CS_DONE) {
            /* frames sent but never answered: silence, counted as missing */
            static int16_t zero[MT_FRAME_MAX_PAYLOAD / 2];
            while (s->w && s->next_out < st->sent) {
                write_out(a, s, zero, (size_t)a->frame_samples);
                s->next_out++;
            }
            if (s->w && mt_audio_writer_commit(s->w, err, sizeof err) != 0) {
                fprintf(stderr, "mt-replay: %s\n", err);
                a->write_failed = 1;
            }
        } else {
            mt_audio_writer_abort(s->w);
        }
        s->w = NULL;
    }
    char buf[1024];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, "replay_session", si);
    mt_ll_str(&w, "state", mt_client_state_name(st->state));
    mt_ll_u64(&w, "server_session", st->server_session);
    mt_ll_str(&w, "file", s->in ? s->in->path : "mic");
    mt_ll_u64(&w, "sent", st->sent);
    mt_ll_u64(&w, "received", st->received);
    mt_ll_u64(&w, "filled", st->filled);
    mt_ll_u64(&w, "late", st->late);
    mt_ll_u64(&w, "missing", st->missing);
    mt_ll_f(&w, "rtt_max_ms", st->rtt_max_ms, 3);
    mt_ll_f(&w, "server_max_ms", st->server_max_ms, 3);
    if (st->text || st->text_only)      /* a text model's TEXT frames */
        mt_ll_u64(&w, "text", st->text);
    if (st->text_only)
        mt_ll_int(&w, "text_only", 1);
    if (st->reason[0])
        mt_ll_str(&w, "reason", st->reason);
    print_line(&w);
    flush_lines();
    s->final_state = st->state;
    snprintf(s->reason, sizeof s->reason, "%s", st->reason);
    if (st->state == MT_CS_REJECTED && st->final && s->attempts <= a->retry)
        fprintf(stderr, "mt-replay: session %d: not retried: the server says the same "
                "request would be refused again\n", si);
    else if (st->state == MT_CS_REJECTED && s->attempts <= a->retry && !g_stop)
        retry_session(a, si, st->reason);
}

static void summary_line(app *a)
{
    mt_client_totals t;
    mt_client_totals_get(a->cl, &t);
    int done = 0, rejected = 0, failed = 0;
    for (int i = 0; i < a->ns; i++) {
        done += a->s[i].final_state == MT_CS_DONE;
        rejected += a->s[i].final_state == MT_CS_REJECTED;
        failed += a->s[i].final_state != MT_CS_DONE &&
                  a->s[i].final_state != MT_CS_REJECTED;
    }
    char buf[2048];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, "replay_summary", a->ns);
    mt_ll_int(&w, "done", done);
    mt_ll_int(&w, "rejected", rejected);
    mt_ll_int(&w, "failed", failed);
    mt_ll_u64(&w, "sent", t.sent);
    mt_ll_u64(&w, "received", t.received);
    mt_ll_u64(&w, "filled", t.filled);
    mt_ll_u64(&w, "late", t.late);
    mt_ll_u64(&w, "missing", t.missing);
    mt_ll_f(&w, "p50_ms", mt_pctl_quantile(&t.rtt, 0.5) / 1e6, 3);
    mt_ll_f(&w, "p99_ms", mt_pctl_quantile(&t.rtt, 0.99) / 1e6, 3);
    mt_ll_f(&w, "max_ms", t.rtt.max_ns / 1e6, 3);
    mt_ll_f(&w, "server_p50_ms", mt_pctl_quantile(&t.server, 0.5) / 1e6, 3);
    mt_ll_f(&w, "server_p99_ms", mt_pctl_quantile(&t.server, 0.99) / 1e6, 3);
    mt_ll_f(&w, "server_max_ms", t.server.max_ns / 1e6, 3);
    mt_ll_int(&w, "retries", a->retries);
    print_line(&w);
    /* sessions that did not finish, with their last reason, one line each */
    for (int i = 0; i < a->ns; i++) {
        const sess *s = &a->s[i];
        if (s->final_state == MT_CS_DONE)
            continue;
        mt_ll_begin(&w, buf, sizeof buf);
        mt_ll_str(&w, "replay_rejected", s->final_state == MT_CS_REJECTED ? "rejected" : "failed");
        mt_ll_int(&w, "session", i);
        mt_ll_str(&w, "reason", s->reason[0] ? s->reason : "interrupted before it ended");
        print_line(&w);
    }
    if (a->rate_check) {
        mt_ll_begin(&w, buf, sizeof buf);
        mt_ll_int(&w, "replay_rate", t.sessions);
        mt_ll_u64(&w, "frames", t.send_late.count);
        mt_ll_f(&w, "jitter_p50_ms", mt_pctl_quantile(&t.send_late, 0.5) / 1e6, 3);
        mt_ll_f(&w, "jitter_p99_ms", mt_pctl_quantile(&t.send_late, 0.99) / 1e6, 3);
        mt_ll_f(&w, "jitter_max_ms", t.send_late.max_ns / 1e6, 3);
        mt_ll_f(&w, "jitter_mean_ms", mt_pctl_mean(&t.send_late) / 1e6, 3);
        print_line(&w);
    }
    flush_lines();
}

/* ---- modes --------------------------------------------------------------- */

/* The client and its sessions, paced from now: 0, or the exit status. */
static int client_start(app *a, int mic)
{
    static const mt_client_callbacks cb = { cb_accept, cb_next, cb_frame, cb_end, cb_text };
    char err[512];
    if (a->transcript_path &&
        mt_transcript_open(a->transcript_path, &a->transcript, err, sizeof err) != 0) {
        fprintf(stderr, "mt-replay: -t: %s\n", err);
        return 1;
    }
    mt_client_config cc;
    memset(&cc, 0, sizeof cc);
    cc.hello.sample_rate = (uint32_t)a->rate;
    cc.hello.frame_samples = (uint32_t)a->frame_samples;
    cc.hello.channels = 1;
    cc.hello.encoding = MT_ENC_PCM_S16LE;
    if (a->model)
        snprintf(cc.hello.model, sizeof cc.hello.model, "%s", a->model);
    if (a->token_file) {
        size_t tl = 0;
        if (mt_token_read(a->token_file, cc.hello.token, sizeof cc.hello.token,
                          &tl, err, sizeof err) != 0) {
            fprintf(stderr, "mt-replay: %s\n", err);
            return 2;
        }
        cc.hello.token_len = (uint8_t)tl;
    }
    cc.cb = &cb;
    cc.user = a;
    cc.seed = a->seed;
    /* every session, and a fresh connection for each retry */
    long cap = (long)a->ns * (a->retry + 1) + 1;
    cc.max_sessions = (int)cap;
    a->sess_of = calloc((size_t)cap, sizeof *a->sess_of);
    if (!a->sess_of) {
        fprintf(stderr, "mt-replay: out of memory\n");
        return 1;
    }
    /* A microphone frame is read when due: read early it would be short. */
    cc.prepare_ns = mic ? -1 : 0;
    if (mt_client_new(&cc, &a->cl, err, sizeof err) != 0) {
        fprintf(stderr, "mt-replay: %s\n", err);
        return 1;
    }
    g_client = a->cl;
    if (g_stop)
        mt_client_stop(a->cl);
    uint64_t t0 = mt_clock_ns();
    srandom((unsigned)(t0 ^ (uint64_t)getpid()));
    for (int i = 0; i < a->ns; i++) {
        uint64_t start = t0 + (uint64_t)(i * a->stagger_ms * 1e6);
        int idx = mt_client_add_unix(a->cl, a->sock, start, err, sizeof err);
        if (idx < 0) {
            fprintf(stderr, "mt-replay: %s\n", err);
            return 1;
        }
        a->sess_of[idx] = i;
        a->s[i].attempts = 1;
    }
    a->t_begin = t0;
    return 0;
}

/* Runs the sessions to their end, with the interval lines: 0, or 1. */
static int client_loop(app *a)
{
    char err[512];
    uint64_t step = (uint64_t)(a->interval_s * 1e9);
    a->t_next_line = a->t_begin + step;
    for (;;) {
        uint64_t until = a->t_next_line;
        if (a->lat != LAT_INTERVAL && until > mt_clock_ns() + 200000000ull)
            until = mt_clock_ns() + 200000000ull;
        int left = mt_client_run(a->cl, until, err, sizeof err);
        if (left < 0) {
            fprintf(stderr, "mt-replay: %s\n", err);
            return 1;
        }
        uint64_t now = mt_clock_ns();
        if (now >= a->t_next_line) {
            if (a->lat == LAT_INTERVAL)
                interval_line(a, now);
            /* the interval's percentiles, for the lines and the status */
            mt_pctl_reset(&a->iv_rtt);
            mt_pctl_reset(&a->iv_server);
            a->t_next_line += step;
            if (a->t_next_line < now)
                a->t_next_line = now + step;
        }
        if (left == 0)
            return 0;
    }
}

/* The summary (and the microphone's) lines, on a live terminal there too,
 * and the warning for a capture device that is not real-time. */
static void closing_lines(app *a)
{
    if (a->dx) {
        mt_duplex_status st;
        mt_duplex_get_status(a->dx, &st);
        if (device_outruns_clock(&st, (double)(mt_clock_ns() - a->t_begin) / 1e9))
            a->not_realtime = 1;
        if (status_out(a))
            fputc('\n', status_out(a));
    }
    FILE *lines = g_lines;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            if (!a->live || g_lines == stdout)
                break;
            g_lines = stdout;
        }
        summary_line(a);
        if (a->dx && g_lines) {
            mt_duplex_status st;
            mt_duplex_get_status(a->dx, &st);
            fprintf(g_lines, "replay_mic device=\"%s\" device_rate=%d mic_frames=%llu "
                   "mic_short=%llu mic_dropped=%llu spk_underruns=%llu "
                   "spk_dropped=%llu real_time=%d\n", mt_duplex_device_name(a->dx),
                   st.device_rate,
                   (unsigned long long)st.mic_frames, (unsigned long long)st.mic_short,
                   (unsigned long long)st.mic_dropped, (unsigned long long)st.spk_under,
                   (unsigned long long)st.spk_dropped, !a->not_realtime);
            fflush(g_lines);
        }
    }
    g_lines = lines;
    if (a->dx && a->not_realtime)
        fprintf(stderr, "mt-replay: the capture device \"%s\" is not real-time: "
                "it delivers samples faster than its rate (the excess was "
                "dropped), so what was sent is not live audio; pick a "
                "microphone with --device (see --list-devices)\n",
                mt_duplex_device_name(a->dx));
}

/* The exit status of the run (EXIT STATUS in mt-replay(1)). */
static int client_exit_status(const app *a, int rc)
{
    int done = 0, rejected = 0;
    for (int i = 0; i < a->ns; i++) {
        done += a->s[i].final_state == MT_CS_DONE;
        rejected += a->s[i].final_state == MT_CS_REJECTED;
    }
    if (rc == 0 && (done + rejected != a->ns || a->write_failed))
        return 1;
    if (rc == 0 && rejected > 0)
        return 3;
    return rc;
}

static int run_client(app *a, int mic)
{
    int rc = client_start(a, mic);
    if (rc != 0)
        return rc;
    rc = client_loop(a);
    closing_lines(a);
    rc = client_exit_status(a, rc);
    g_client = NULL;
    return rc;
}

static void sleep_until(uint64_t t)
{
    while (mt_client_sleep_until(t) != 0 && !g_stop)
        ;
}

/* One frame of the --emit stream, sent at t_send, onto stdout. 0, or -1
 * (said). */
static int emit_frame(int type, uint32_t seq, uint64_t t_send,
                      const uint8_t *payload, uint32_t length)
{
    static uint8_t buf[MT_FRAME_MAX_SIZE];
    const mt_frame f = { .version = MT_FRAME_VERSION, .type = (uint8_t)type, .seq = seq,
                         .t_send = t_send, .length = length, .payload = payload };
    long n = mt_frame_encode(&f, buf, sizeof buf);
    if (n < 0) {
        fprintf(stderr, "mt-replay: encode: %s\n", mt_frame_strerror((int)n));
        return -1;
    }
    if (mt_write_all(1, buf, (size_t)n) != 0) {
        fprintf(stderr, "mt-replay: write: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int run_emit(app *a)
{
    sess *s = &a->s[0];
    mt_hello h;
    memset(&h, 0, sizeof h);
    h.sample_rate = (uint32_t)a->rate;
    h.frame_samples = (uint32_t)a->frame_samples;
    h.channels = 1;
    h.encoding = MT_ENC_PCM_S16LE;
    if (a->model)
        snprintf(h.model, sizeof h.model, "%s", a->model);
    uint8_t hp[128];
    long hn = mt_hello_encode(&h, hp, sizeof hp);
    if (hn < 0 || emit_frame(MT_FRAME_HELLO, 0, mt_clock_ns(), hp, (uint32_t)hn) != 0)
        return 1;
    int16_t *pcm = malloc((size_t)a->frame_samples * sizeof *pcm);
    uint8_t *pay = malloc((size_t)a->frame_samples * 2);
    if (!pcm || !pay) {
        fprintf(stderr, "mt-replay: out of memory\n");
        return 1;
    }
    uint64_t period = (uint64_t)a->frame_samples * 1000000000ull / (uint64_t)a->rate;
    uint64_t t0 = mt_clock_ns();
    mt_pctl jit;
    mt_pctl_reset(&jit);
    uint32_t seq = 0;
    int rc = 0;
    while (!g_stop && source_next(a, s, pcm, (size_t)a->frame_samples)) {
        uint64_t due = t0 + seq * period;
        if (!a->no_pace)
            sleep_until(due);
        if (g_stop)
            break;
        for (int i = 0; i < a->frame_samples; i++) {
            pay[2 * i] = (uint8_t)((uint16_t)pcm[i]);
            pay[2 * i + 1] = (uint8_t)((uint16_t)pcm[i] >> 8);
        }
        uint64_t now = mt_clock_ns();
        if (!a->no_pace)
            mt_pctl_add(&jit, now > due ? now - due : 0);
        if (emit_frame(MT_FRAME_AUDIO, seq++, now, pay, (uint32_t)a->frame_samples * 2) != 0) {
            rc = 1;
            break;
        }
    }
    if (rc == 0 && emit_frame(MT_FRAME_END, 0, mt_clock_ns(), NULL, 0) != 0)
        rc = 1;
    if (a->rate_check && jit.count)
        fprintf(stderr, "replay_rate frames=%llu jitter_p50_ms=%.3f "
                "jitter_p99_ms=%.3f jitter_max_ms=%.3f\n",
                (unsigned long long)jit.count,
                mt_pctl_quantile(&jit, 0.5) / 1e6,
                mt_pctl_quantile(&jit, 0.99) / 1e6, jit.max_ns / 1e6);
    free(pcm);
    free(pay);
    return rc;
}

/* mt-replay --play: what the frame stream on stdin has set up and brought. */
typedef struct player {
    mt_frame_decoder *dec;
    mt_hello          fmt;      /* from the first HELLO or ACCEPT */
    int               have_fmt, ended;
    int16_t          *pcm;      /* one frame */
    mt_audio_writer  *w;        /* -o, or */
    mt_player        *pl;       /* the sound device */
    uint64_t          frames, filled;
    mt_pctl           srv;      /* t_ready - t_arrive of the frames not filled */
} player;

/* The first HELLO/ACCEPT: the format, and the sink that plays it. */
static int play_format(const app *a, player *p, const mt_frame *f, char *err, size_t errlen)
{
    mt_hello *fmt = &p->fmt;
    if (mt_hello_decode(f->payload, f->length, fmt) != 0 ||
        fmt->sample_rate < 1 || fmt->frame_samples < 1 ||
        fmt->frame_samples > MT_FRAME_MAX_PAYLOAD / 2 || fmt->channels > 1) {
        mt_set_err(err, errlen, "malformed %s on stdin", mt_frame_type_name(f->type));
        return -1;
    }
    p->have_fmt = 1;
    p->pcm = mt_calloc_or_err(fmt->frame_samples, sizeof *p->pcm, err, errlen, NULL);
    if (!p->pcm)
        return -1;
    if (!a->out_pattern)
        return mt_player_open((int)fmt->sample_rate, (int)fmt->frame_samples,
                              &p->pl, err, errlen);
    if (!strcmp(a->out_pattern, "-"))
        return mt_audio_writer_open_fd(1, "stdout", a->type_fmt, (int)fmt->sample_rate,
                                       &p->w, err, errlen);
    return mt_audio_writer_open(a->out_pattern, (int)fmt->sample_rate, &p->w, err, errlen);
}

/* An AUDIO frame (FILL as silence) to the sink, counted. */
static int play_audio(player *p, const mt_frame *f, char *err, size_t errlen)
{
    uint32_t fs = p->fmt.frame_samples;
    if (!p->have_fmt) {
        mt_set_err(err, errlen, "AUDIO before HELLO/ACCEPT on stdin");
        return -1;
    }
    int fill = (f->flags & MT_FLAG_FILL) != 0;
    if (!fill && f->length != fs * 2) {
        mt_set_err(err, errlen, "AUDIO frame %u: %u bytes, expected %u", f->seq, f->length, fs * 2);
        return -1;
    }
    for (uint32_t i = 0; i < fs; i++)
        p->pcm[i] = fill ? 0 : (int16_t)(f->payload[2 * i] | (f->payload[2 * i + 1] << 8));
    p->frames++;
    p->filled += fill;
    if (!fill && f->t_arrive && f->t_ready >= f->t_arrive)
        mt_pctl_add(&p->srv, f->t_ready - f->t_arrive);
    if (p->w && mt_audio_writer_write(p->w, p->pcm, fs, err, errlen) != 0)
        return -1;
    if (p->pl && mt_player_write(p->pl, p->pcm, fs, err, errlen) != 0)
        return -1;
    return 0;
}

static int play_frame(const app *a, player *p, const mt_frame *f, char *err, size_t errlen)
{
    switch (f->type) {
    case MT_FRAME_HELLO:
    case MT_FRAME_ACCEPT:
        return p->have_fmt ? 0 : play_format(a, p, f, err, errlen);
    case MT_FRAME_AUDIO:
        return play_audio(p, f, err, errlen);
    case MT_FRAME_END:
        p->ended = 1;
        return 0;
    case MT_FRAME_REJECT:
    case MT_FRAME_ERROR: {
        int len = (int)(f->length > MT_REASON_MAX ? MT_REASON_MAX : f->length);
        mt_set_err(err, errlen, "%s on stdin: %.*s", mt_frame_type_name(f->type),
                 len, (const char *)f->payload);
        return -1;
    }
    default:
        return 0;
    }
}

/* Reads and plays stdin's frames up to END (0), or a signal (0, not
 * ended); -1 with err on a read error, a bad frame or a stream that ends
 * without END. */
static int play_stream(const app *a, player *p, char *err, size_t errlen)
{
    uint8_t buf[65536];
    while (!p->ended && !g_stop) {
        ssize_t n = read(0, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            mt_set_err(err, errlen, "read stdin: %s", strerror(errno));
            return -1;
        }
        if (n == 0) {
            mt_set_err(err, errlen, "frame stream on stdin ended %s",
                     mt_frame_decoder_finish(p->dec) ? "inside a frame (truncated)"
                                                     : "without END");
            return -1;
        }
        size_t off = 0;
        while (off < (size_t)n && !p->ended) {
            size_t used = 0;
            mt_frame f;
            int r = mt_frame_decode(p->dec, buf + off, (size_t)n - off, &used, &f);
            off += used;
            if (r == MT_FRAME_NEED_MORE)
                break;
            if (r < 0) {
                mt_set_err(err, errlen, "bad frame on stdin: %s", mt_frame_strerror(r));
                return -1;
            }
            if (play_frame(a, p, &f, err, errlen) != 0)
                return -1;
        }
    }
    return 0;
}

static int run_play(app *a)
{
    static mt_frame_decoder dec;
    mt_frame_decoder_init(&dec);
    player p;
    memset(&p, 0, sizeof p);
    p.dec = &dec;
    mt_pctl_reset(&p.srv);
    char err[512];
    if (play_stream(a, &p, err, sizeof err) != 0)
        goto fail;
    if (!p.ended) {
        snprintf(err, sizeof err, "interrupted");
        goto fail;
    }
    mt_audio_writer *w = p.w;
    p.w = NULL;
    if (w && mt_audio_writer_commit(w, err, sizeof err) != 0)
        goto fail;
    mt_player_close(p.pl);
    fprintf(g_lines ? g_lines : stdout, "replay_play frames=%llu filled=%llu samples=%llu server_p50_ms=%.3f "
           "server_p99_ms=%.3f\n", (unsigned long long)p.frames,
           (unsigned long long)p.filled,
           (unsigned long long)(p.frames * (p.have_fmt ? p.fmt.frame_samples : 0)),
           mt_pctl_quantile(&p.srv, 0.5) / 1e6, mt_pctl_quantile(&p.srv, 0.99) / 1e6);
    free(p.pcm);
    return 0;
fail:
    fprintf(stderr, "mt-replay: %s\n", err);
    mt_audio_writer_abort(p.w);
    mt_player_close(p.pl);
    free(p.pcm);
    return 1;
}

static int list_devices(void)
{
    mt_pa_device *l = NULL;
    int n = 0;
    char err[512];
    if (mt_pa_list(&l, &n, err, sizeof err) != 0) {
        fprintf(stderr, "mt-replay: %s\n", err);
        return 1;
    }
    printf("# PortAudio %s: %d device%s\n", Pa_GetVersionText(), n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++)
        printf("%d\t%s\t%s\tin=%d\tout=%d\trate=%.0f%s%s\n", l[i].index,
               l[i].name, l[i].host_api, l[i].max_in, l[i].max_out,
               l[i].default_rate, l[i].is_default_in ? "\tdefault_in" : "",
               l[i].is_default_out ? "\tdefault_out" : "");
    free(l);
    return 0;
}

/* The last use of a (run_sessions' end): nothing reads it after. */
static void app_free(app *a)
{
    if (a->dx)
        mt_duplex_close(a->dx);
    mt_client_free(a->cl);
    char err[512];
    if (mt_transcript_close(a->transcript, err, sizeof err) != 0)
        fprintf(stderr, "mt-replay: -t: %s\n", err);
    for (int i = 0; i < a->ninputs; i++) {
        mt_audio_free(&a->inputs[i].audio);
        free(a->inputs[i].pcm);
    }
    free(a->inputs);
    free(a->s);
    free(a->sess_of);
}

/* ---- the command line ---------------------------------------------------- */

static const mt_cli cli = {
    "mt-replay", "mt-replay -s SOCK [options] FILE... | --emit FILE | --play | --mic | --list-devices",
    usage,
};

enum { O_STAGGER = 256, O_LOOP, O_DURATION, O_RATECHECK, O_LATENCY,
       O_INTERVAL, O_EMIT, O_NOPACE, O_PLAY, O_MIC, O_DEVICE, O_JITTER,
       O_LIST, O_TOKEN, O_TYPE, O_RETRY, O_LATLOG, O_SEED };
/* -t has no number of its own: 't' */

static const struct option longopts[] = {
    { "socket", required_argument, 0, 's' },
    { "copies", required_argument, 0, 'n' },
    { "output", required_argument, 0, 'o' },
    { "rate", required_argument, 0, 'r' },
    { "frame-samples", required_argument, 0, 'f' },
    { "model", required_argument, 0, 'm' },
    { "quality", required_argument, 0, 'q' },
    { "stagger", required_argument, 0, O_STAGGER },
    { "loop", no_argument, 0, O_LOOP },
    { "duration", required_argument, 0, O_DURATION },
    { "rate-check", no_argument, 0, O_RATECHECK },
    { "latency", required_argument, 0, O_LATENCY },
    { "interval", required_argument, 0, O_INTERVAL },
    { "emit", required_argument, 0, O_EMIT },
    { "no-pace", no_argument, 0, O_NOPACE },
    { "play", no_argument, 0, O_PLAY },
    { "mic", no_argument, 0, O_MIC },
    { "device", required_argument, 0, O_DEVICE },
    { "jitter", required_argument, 0, O_JITTER },
    { "list-devices", no_argument, 0, O_LIST },
    { "token-file", required_argument, 0, O_TOKEN },
    { "type", required_argument, 0, O_TYPE },
    { "retry", required_argument, 0, O_RETRY },
    { "latency-log", required_argument, 0, O_LATLOG },
    { "transcript", required_argument, 0, 't' },
    { "seed", required_argument, 0, O_SEED },
    MT_OPT_COMMON,
    { 0, 0, 0, 0 },
};

static void app_default(app *a)
{
    memset(a, 0, sizeof *a);
    a->copies = 1;
    a->lat = LAT_INTERVAL;
    a->rate = 24000;
    a->frame_samples = 1920;
    a->quality = mt_audio_quality_parse("medium");
    a->interval_s = 1;
    a->jitter_ms = 160;
}

/* The options with a value to check. 0, or -1 (said). */
static int value_option(app *a, int c, const char *arg)
{
    static const char *const lat[] = { "none", "interval", "frames", NULL };
    switch (c) {
    case 'n': return mt_opt_int(arg, 1, 4096, &a->copies);
    case 'r': return mt_opt_int(arg, 1000, 768000, &a->rate);
    case 'f': return mt_opt_int(arg, 1, MT_FRAME_MAX_PAYLOAD / 2, &a->frame_samples);
    case 'q':
        a->quality = mt_audio_quality_parse(arg);
        return a->quality < 0
            ? mt_opt_bad(arg, "is not one of best, medium, fastest, zoh, linear") : 0;
    case O_STAGGER: return mt_opt_ms(arg, 0, INFINITY, &a->stagger_ms);
    /* at most a year: the frame count must fit a frame sequence number */
    case O_DURATION: return mt_opt_seconds(arg, 0.001, 31536000, &a->duration_s);
    case O_LATENCY: return mt_opt_choice(arg, lat, &a->lat);
    case O_INTERVAL: return mt_opt_seconds(arg, 0.01, INFINITY, &a->interval_s);
    case O_JITTER: return mt_opt_ms(arg, 0, INFINITY, &a->jitter_ms);
    case O_RETRY: return mt_opt_int(arg, 0, 100, &a->retry);
    case O_SEED: {
        long v;
        if (mt_opt_long(arg, 1, 4294967295L, &v))
            return -1;
        a->seed = (uint32_t)v;
        return 0;
    }
    case O_TYPE:
        a->type = arg;
        return mt_audio_type_parse(arg, &a->type_fmt)
            ? mt_opt_bad(arg, "is not a type: au, ogg or raw (through a pipe); "
                         "wav, flac, aiff, caf, w64 (standard output redirected "
                         "to a file)") : 0;
    }
    return -1;
}

/* The command line into a: -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, app *a)
{
    int c;
    while ((c = mt_opt_next(&cli, argc, argv, "s:n:o:r:f:m:q:t:h", longopts)) >= 0) {
        switch (c) {
        case 's': a->sock = optarg; break;
        case 'o': a->out_pattern = optarg; break;
        case 'm': a->model = optarg; break;
        case O_LOOP: a->loop = 1; break;
        case O_RATECHECK: a->rate_check = 1; break;
        case O_EMIT: a->emit = optarg; break;
        case O_NOPACE: a->no_pace = 1; break;
        case O_PLAY: a->play = 1; break;
        case O_MIC: a->mic = 1; break;
        case O_DEVICE: a->device = optarg; break;
        case O_LIST: a->list = 1; break;
        case O_TOKEN: a->token_file = optarg; break;
        case O_LATLOG: a->latency_log = optarg; break;
        case 't': a->transcript_path = optarg; break;
        default:
            if (value_option(a, c, optarg))
                return 2;
        }
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (a->list + !!a->emit + a->play + a->mic > 1)
        return mt_opt_usage_error("--emit, --play, --mic and --list-devices "
                                  "exclude each other");
    if (a->retry > 0 && (a->emit || a->play || a->list))
        return mt_opt_usage_error("--retry is for sessions with a server (-s)");
    return -1;
}

/* Output to stdout takes --type, au by default (it streams, and sox and
 * ffmpeg read it from a pipe), checked before any connection: not a
 * terminal, and a pipe only for a format that streams. 0, or -1 (said). */
static int check_stdout_audio(app *a)
{
    if (!a->type)
        mt_audio_type_parse("au", &a->type_fmt);
    if (isatty(1)) {
        fprintf(stderr, "mt-replay: -o -: standard output is a terminal; "
                "send the audio into a pipe or a file\n");
        return -1;
    }
    if (lseek(1, 0, SEEK_CUR) < 0 && !mt_audio_type_streams(a->type_fmt)) {
        fprintf(stderr, "mt-replay: -o -: --type %s cannot be written to a "
                "pipe (its header is completed last); use --type au, ogg or "
                "raw, or redirect standard output to a file\n", a->type);
        return -1;
    }
    return 0;
}

/* An output file's checks before any connection is made: a known
 * extension, and a directory that exists and can be written, so that a
 * typo fails at once instead of after the server admitted the session.
 * 0, or -1 (said). */
static int check_output_file(const char *path)
{
    char err[1024];
    int fmt;
    if (mt_audio_format_for_path(path, &fmt, err, sizeof err)) {
        fprintf(stderr, "mt-replay: -o: %s\n", err);
        return -1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    struct stat st;
    if (stat(d, &st) != 0) {
        fprintf(stderr, "mt-replay: -o %s: directory %s: %s\n", path, d,
                strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mt-replay: -o %s: %s is not a directory\n", path, d);
        return -1;
    }
    if (access(d, W_OK | X_OK) != 0) {
        fprintf(stderr, "mt-replay: -o %s: cannot write in directory %s: %s\n",
                path, d, strerror(errno));
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mt-replay: -o %s: is a directory\n", path);
        return -1;
    }
    return 0;
}

/* Where the machine lines go (see g_lines). 0, or -1 (said). */
static int open_lines(app *a)
{
    int audio_on_stdout = a->out_pattern && !strcmp(a->out_pattern, "-") && !a->emit;
    a->live = a->mic && isatty(1);
    if (a->latency_log) {
        g_lines = fopen(a->latency_log, "a");
        if (!g_lines) {
            fprintf(stderr, "mt-replay: --latency-log %s: %s\n", a->latency_log,
                    strerror(errno));
            return -1;
        }
        setvbuf(g_lines, NULL, _IOLBF, 0);
    } else if (audio_on_stdout) {
        g_lines = stderr;
    } else if (a->live) {
        g_lines = NULL;
    } else {
        g_lines = stdout;
    }
    return 0;
}

/* --play's checks: operands and the output format. -1, or the status. */
static int check_play(const app *a, int nargs)
{
    if (nargs > 0)
        return mt_opt_usage_error("--play reads stdin; no files");
    if (a->out_pattern && strcmp(a->out_pattern, "-") && check_output_file(a->out_pattern))
        return 2;
    if (a->type && (!a->out_pattern || strcmp(a->out_pattern, "-")))
        return mt_opt_usage_error("--type is the format of '-': with --play, "
                                  "of -o -");
    return -1;
}

/* The inputs of the file modes (one with --emit), read and resampled, or
 * none for --mic. -1 to go on, else the exit status. */
static int load_inputs(app *a, char **files, int nargs)
{
    char err[1024];
    if (a->mic) {
        if (!a->sock)
            return mt_opt_usage_error("--mic needs -s SOCK");
        if (nargs > 0)
            return mt_opt_usage_error("--mic takes no files");
        a->ns = 1;
        return -1;
    }
    if (a->emit && nargs > 0)
        return mt_opt_usage_error("--emit takes one file");
    int nfiles = a->emit ? 1 : nargs;
    if (nfiles < 1)
        return mt_opt_usage_error("no input files");
    if (!a->emit && !a->sock)
        return mt_opt_usage_error("-s SOCK is needed to replay files");
    int stdin_inputs = 0;
    for (int i = 0; i < nfiles; i++)
        stdin_inputs += !strcmp(a->emit ? a->emit : files[i], "-");
    if (stdin_inputs > 1)
        return mt_opt_usage_error("'-' (standard input) can be read once; "
                                  "use -n for copies");
    int stdout_out = a->out_pattern && !a->emit && !strcmp(a->out_pattern, "-");
    if (a->type && !stdin_inputs && !stdout_out)
        return mt_opt_usage_error("--type is the format of '-' (standard "
                                  "input or -o -); files go by their name");
    if (a->type && stdin_inputs && !stdout_out &&
        (a->type_fmt & SF_FORMAT_TYPEMASK) != SF_FORMAT_RAW)
        fprintf(stderr, "mt-replay: --type %s: standard input's format is read "
                "from its header; only raw needs saying\n", a->type);
    a->inputs = calloc((size_t)nfiles, sizeof *a->inputs);
    if (!a->inputs)
        return 1;
    a->ninputs = nfiles;
    for (int i = 0; i < nfiles; i++) {
        a->inputs[i].path = a->emit ? a->emit : files[i];
        if (load_input(a, &a->inputs[i], err, sizeof err) != 0) {
            fprintf(stderr, "mt-replay: %s\n", err);
            return 1;
        }
    }
    a->ns = a->emit ? 1 : nfiles * a->copies;
    return -1;
}

/* The sessions: their input, their --duration bound and their output
 * file (checked for a known format now, before any connection). -1 to go
 * on, else the exit status. */
static int make_sessions(app *a)
{
    a->s = calloc((size_t)a->ns, sizeof *a->s);
    if (!a->s)
        return 1;
    uint64_t dur_frames = UINT64_MAX;
    if (a->duration_s > 0)
        dur_frames = (uint64_t)(a->duration_s * a->rate / a->frame_samples + 0.5);
    for (int i = 0; i < a->ns; i++) {
        sess *s = &a->s[i];
        s->in = a->ninputs > 0 ? &a->inputs[i / a->copies] : NULL;
        s->frames_left = dur_frames;
        if (!a->out_pattern || a->emit)
            continue;
        if (!strcmp(a->out_pattern, "-")) {
            if (a->ns > 1)
                return mt_opt_usage_error("-o - (standard output) takes one "
                                          "session, not %d", a->ns);
            strcpy(s->out_path, "-");
            continue;
        }
        int k = expand_pattern(a->out_pattern, i, s->out_path, sizeof s->out_path);
        if (k < 0 || (k == 0 && a->ns > 1)) {
            fprintf(stderr, "mt-replay: -o %s: %s\n", a->out_pattern,
                    k < 0 ? "too long" : "needs %d with more than one session");
            return 2;
        }
        if (check_output_file(s->out_path))
            return 2;
    }
    return -1;
}

static void catch_signals(void)
{
    /* The default 50 us timer slack is pure jitter for a pacer. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* --mic: the capture and playback device. 0, or -1 (said). */
static int open_mic(app *a)
{
    char err[1024];
    int jf = (int)(a->jitter_ms * a->rate / 1000.0 / a->frame_samples + 0.999);
    if (mt_duplex_open(a->device, a->rate, a->frame_samples, jf, &a->dx, err,
                       sizeof err) != 0) {
        fprintf(stderr, "mt-replay: %s\n", err);
        return -1;
    }
    fprintf(stderr, "mt-replay: live on \"%s\"; Ctrl-C ends the session\n",
            mt_duplex_device_name(a->dx));
    return 0;
}

/* The file, emit and mic modes, after the options. The exit status. */
static int run_sessions(app *a, char **files, int nargs)
{
    int rc = load_inputs(a, files, nargs);
    if (rc < 0)
        rc = make_sessions(a);
    if (rc < 0) {
        if (a->emit)
            rc = run_emit(a);
        else if (a->mic && open_mic(a) != 0)
            rc = 1;
        else
            rc = run_client(a, a->mic);
    }
    app_free(a);
    return rc;
}

int main(int argc, char **argv)
{
    app a;
    app_default(&a);
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    if (a.list)
        return list_devices();
    if (a.out_pattern && !strcmp(a.out_pattern, "-") && !a.emit && !a.mic &&
        check_stdout_audio(&a) != 0)
        return 2;
    if (open_lines(&a) != 0)
        return 1;
    catch_signals();
    if (a.play) {
        rc = check_play(&a, argc - optind);
        return rc >= 0 ? rc : run_play(&a);
    }
    if (a.loop && a.duration_s <= 0)
        return mt_opt_usage_error("--loop needs --duration");
    return run_sessions(&a, argv + optind, argc - optind);
}
