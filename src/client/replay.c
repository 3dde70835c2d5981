/* replay.c: audio inputs (or a microphone) as real-time sessions of
 * mt-serve, with their records: the paced client of client.c, fed from
 * replay_input.c, its returned audio written by audio_write.c. See replay.h.
 */
#define _GNU_SOURCE
#include "client/replay.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/audio_write.h"
#include "client/client.h"
#include "client/replay_transcript.h"
#include "wire/latline.h"
#include "util/clock.h"
#include "util/errmsg.h"

typedef struct sess {
    mt_input        *in;            /* NULL: the microphone */
    mt_source       *src;
    int              attempts;      /* connections made (1 + retries) */
    int              waits;         /* of the retries: after "warming up:" */
    int              final_state;   /* MT_CS_*: the last attempt's end */
    char             reason[MT_REASON_MAX + 1];
    uint64_t         frames_left;   /* --duration bound, or UINT64_MAX */
    mt_audio_writer *w;
    uint32_t         next_out;      /* next seq expected back */
    char             out_path[4096];
} sess;

typedef struct app {
    const mt_replay_cfg *c;
    int          rate, frame_samples;
    sess        *s;           /* [ns] */
    int          ns;
    int         *sess_of;     /* [client sessions] client index -> s index */
    int          retries;     /* made so far */
    mt_client   *cl;
    int          write_failed;
    int          failures_said;   /* sessions whose failure went to say() */
    long         pid_said;        /* the server pid last said (0: none) */
    FILE        *lines;       /* where records go now (c->lines, or stdout) */
    /* interval records */
    uint64_t     t_begin, t_next_line;
    long         line_no;
    mt_pctl      iv_rtt, iv_server;
    /* mic */
    uint64_t     t_status;
    int          not_realtime;   /* the capture device outruns the clock */
    mt_transcript *tr;        /* -t FILE */
} app;

static int stopped(const app *a)
{
    return a->c->stop && *a->c->stop;
}

static void say(const app *a, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (a->c->say)
        a->c->say(a->c->ctx, msg);
}

int mt_replay_expand(const char *pat, int idx, char *out, size_t cap)
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

/* ---- records ------------------------------------------------------------- */

static void put_line(app *a, long n, const char *buf)
{
    if (a->lines && n >= 0) {
        fputs(buf, a->lines);
        fputc('\n', a->lines);
    }
}

static void flush_lines(app *a)
{
    if (a->lines)
        fflush(a->lines);
}

#define EMIT(a, T, rec) do {                                                 \
        char buf_[2048];                                                     \
        put_line(a, mt_##T##_format(rec, buf_, sizeof buf_), buf_);          \
    } while (0)

static double q_ms(const mt_pctl *p, double q)
{
    return (double)mt_pctl_quantile(p, q) / 1e6;
}

static void interval_line(app *a, uint64_t now)
{
    mt_client_totals t;
    mt_client_totals_get(a->cl, &t);
    mt_replay_tick r = {
        .replay_tick = a->line_no++, .t = (double)(now - a->t_begin) / 1e9,
        .active = t.active, .sent = t.sent, .received = t.received,
        .filled = t.filled, .late = t.late,
        .p50_ms = q_ms(&a->iv_rtt, 0.5), .p99_ms = q_ms(&a->iv_rtt, 0.99),
        .max_ms = (double)a->iv_rtt.max_ns / 1e6,
        .server_p50_ms = q_ms(&a->iv_server, 0.5),
        .server_p99_ms = q_ms(&a->iv_server, 0.99),
    };
    EMIT(a, replay_tick, &r);
    flush_lines(a);
}

/* ---- the live status of --mic ------------------------------------------- */

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
    mt_duplex_get_status(a->c->dx, &st);
    double elapsed = (double)(now - a->t_begin) / 1e9;
    if (device_outruns_clock(&st, elapsed))
        a->not_realtime = 1;
    FILE *f = a->c->status;
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
            q_ms(&a->iv_rtt, 0.5), q_ms(&a->iv_rtt, 0.99),
            (unsigned long long)t.late, (unsigned long long)t.filled,
            (unsigned long long)st.spk_under,
            a->not_realtime ? "  DEVICE NOT REAL-TIME" : "");
    fflush(f);
}

/* ---- a session's input ---------------------------------------------------- */

static uint64_t duration_frames(const app *a)
{
    return a->c->duration_s > 0
        ? (uint64_t)(a->c->duration_s * a->rate / a->frame_samples + 0.5)
        : UINT64_MAX;
}

/* The session's input from its start again. 0, or -1 (said). */
static int source_restart(app *a, sess *s)
{
    char err[512];
    s->frames_left = duration_frames(a);
    if (!s->in)
        return 0;
    int rc = s->src ? mt_source_rewind(s->src, err, sizeof err)
                    : mt_source_open(s->in, &s->src, err, sizeof err);
    if (rc != 0)
        say(a, "%s", err);
    return rc;
}

/* The next frame of a session's input (replay_input.c's frame order, padding
 * and --loop), bounded by --duration. 1 = frame, 0 = end, -1 = a read
 * error (said). */
static int source_next(app *a, sess *s, int16_t *pcm, size_t n)
{
    char err[512];
    if (s->frames_left == 0)
        return 0;
    int r = mt_source_frame(s->src, pcm, n, a->c->loop, err, sizeof err);
    if (r < 0)
        say(a, "%s", err);
    if (r > 0 && s->frames_left != UINT64_MAX)
        s->frames_left--;
    return r;
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
            ? mt_audio_writer_open_fd(1, "stdout", a->c->type_fmt, a->rate,
                                      &s->w, err, sizeof err)
            : mt_audio_writer_open(s->out_path, a->rate, &s->w, err, sizeof err);
        if (rc != 0) {
            snprintf(reason, rlen, "%s", err);
            a->write_failed = 1;
            return -1;
        }
    }
    /* which server answered: said with the first ACCEPT, and again if a
     * later one comes from another (a restarted server) */
    const mt_client_stats *st = mt_client_session_stats(a->cl, idx);
    if (st && st->server_pid > 0 && st->server_pid != a->pid_said) {
        say(a, "%s: mt-serve pid %ld answered", a->c->sock, st->server_pid);
        a->pid_said = st->server_pid;
    }
    if (a->c->dx)
        say(a, "live on \"%s\"; Ctrl-C ends the session",
            mt_duplex_device_name(a->c->dx));
    return 0;
}

static int cb_next(void *user, int idx, uint32_t seq, int16_t *pcm, size_t n)
{
    app *a = user;
    if (a->c->dx) {
        mt_duplex_read(a->c->dx, pcm, n);
        if (a->c->duration_s > 0 &&
            seq >= (uint32_t)(a->c->duration_s * a->rate / a->frame_samples))
            return MT_NEXT_END;
        return MT_NEXT_FRAME;
    }
    int r = source_next(a, &a->s[a->sess_of[idx]], pcm, n);
    if (r < 0)
        a->write_failed = 1;   /* the input failed: the run did too */
    return r > 0 ? MT_NEXT_FRAME : MT_NEXT_END;
}

static void write_out(app *a, sess *s, const int16_t *pcm, size_t n)
{
    char err[512];
    if (s->w && mt_audio_writer_write(s->w, pcm, n, err, sizeof err) != 0) {
        say(a, "%s", err);
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
    static const int16_t zero[MT_FRAME_MAX_PAYLOAD / 2];
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
    }
    if (a->c->lat == MT_REPLAY_LAT_FRAMES) {
        mt_replay_frame f = {
            .replay_frame = r->seq, .session = si, .fill = r->fill,
            .late = r->late, .rtt_ms = r->rtt_ms, .server_ms = r->server_ms,
            .queue_ms = r->queue_ms, .send_late_ms = r->send_late_ms,
        };
        EMIT(a, replay_frame, &f);
    }
    if (a->c->dx) {
        mt_duplex_write(a->c->dx, pcm, n);
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

/* The wait before a session refused by a warming controller asks again:
 * 250 ms doubling to 2 s, jittered; the controller admits one session at
 * a time and measures each for about a second. */
static uint64_t warm_delay_ns(int k)
{
    double base = 0.25 * (double)(1u << (k < 3 ? k : 3));
    double u = (double)random() / ((double)RAND_MAX + 1.0);
    return (uint64_t)(base * (0.5 + 0.5 * u) * 1e9);
}

/* A refusal that says the controller is still measuring, not full. */
static int warming(const mt_client_stats *st)
{
    return !st->final && !strncmp(st->reason, "warming up:", 11);
}

/* A fresh connection for session si after a refusal, in delay ns. 0, or
 * -1 (said). */
static int retry_session(app *a, int si, const char *why, uint64_t delay)
{
    sess *s = &a->s[si];
    char err[256];
    int idx = mt_client_add_unix(a->cl, a->c->sock, mt_clock_ns() + delay,
                                 err, sizeof err);
    if (idx < 0) {
        say(a, "retry: %s", err);
        return -1;
    }
    a->sess_of[idx] = si;
    s->attempts++;
    a->retries++;
    s->next_out = 0;
    if (source_restart(a, s) != 0)
        return -1;
    mt_replay_retry r = { .replay_retry = si, .attempt = s->attempts,
                          .in_s = (double)delay / 1e9 };
    snprintf(r.reason, sizeof r.reason, "%s", why);
    EMIT(a, replay_retry, &r);
    flush_lines(a);
    return 0;
}

/* One replay_text record: the frame's text as KEY (tokens or words), and
 * with a tokenizer the ids' text as text= too (text NULL: none). */
static void put_text_record(app *a, uint32_t seq, int si, const char *key, const char *value,
                            const char *text)
{
    char buf[1024];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_u64(&w, "replay_text", seq);
    mt_ll_int(&w, "session", si);
    mt_ll_str(&w, key, value);
    if (text)
        mt_ll_str(&w, "text", text);
    put_line(a, mt_ll_end(&w), buf);
}

/* The ids' pieces joined (as the transcript joins them) into out. */
static const char *ids_text(const mt_tokenizer *tok, const int32_t *ids, int n, char *out,
                            size_t cap)
{
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *p = mt_tokenizer_kyutai_silent(ids[i]) ? NULL
                        : mt_tokenizer_piece(tok, (int)ids[i]);
        size_t len = p ? strlen(p) : 0;
        if (k + len >= cap)
            break;
        memcpy(out + k, p ? p : "", len);
        k += len;
        out[k] = 0;
    }
    return out;
}

/* A transcript write failed: said once per failure, and the run's exit
 * status says an output was not written. */
static void transcript_failed(app *a, const char *err)
{
    say(a, "-t: %s", err);
    a->write_failed = 1;
}

/* A TEXT frame: a replay_text record (live; tokens empty for a text-only
 * answer before the model has text), and the transcript line. */
static void cb_text(void *user, int idx, uint32_t seq, const int32_t *tok, int n)
{
    app *a = user;
    int si = a->sess_of[idx];
    char ids[800];
    size_t k = 0;
    for (int i = 0; i < n && k + 12 < sizeof ids; i++)
        k += (size_t)snprintf(ids + k, sizeof ids - k, "%s%d", i ? "," : "", (int)tok[i]);
    ids[k] = 0;
    char text[400];
    put_text_record(a, seq, si, "tokens", ids,
                    a->c->tokenizer ? ids_text(a->c->tokenizer, tok, n, text, sizeof text) : NULL);
    char err[512];
    if (a->tr && n > 0 && mt_transcript_add(a->tr, si, seq, tok, n, err, sizeof err))
        transcript_failed(a, err);
}

/* A WORDS frame (a ws:// server's Text message): a replay_text record
 * with the words, and the transcript line. */
static void cb_words(void *user, int idx, uint32_t seq, const char *utf8, size_t n)
{
    app *a = user;
    int si = a->sess_of[idx];
    char words[MT_REASON_MAX + 1];
    size_t k = n < MT_REASON_MAX ? n : MT_REASON_MAX;
    memcpy(words, utf8, k);
    words[k] = 0;
    put_text_record(a, seq, si, "words", words, NULL);
    char err[512];
    if (a->tr && mt_transcript_add_words(a->tr, si, seq, utf8, n, err, sizeof err))
        transcript_failed(a, err);
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
            static const int16_t zero[MT_FRAME_MAX_PAYLOAD / 2];
            while (s->w && s->next_out < st->sent) {
                write_out(a, s, zero, (size_t)a->frame_samples);
                s->next_out++;
            }
            if (s->w && mt_audio_writer_commit(s->w, err, sizeof err) != 0) {
                say(a, "%s", err);
                a->write_failed = 1;
            }
        } else {
            mt_audio_writer_abort(s->w);
        }
        s->w = NULL;
    }
    mt_replay_session r = {
        .replay_session = si, .server_session = st->server_session,
        .sent = st->sent, .received = st->received, .filled = st->filled,
        .late = st->late, .missing = st->missing,
        .rtt_max_ms = st->rtt_max_ms, .server_max_ms = st->server_max_ms,
    };
    snprintf(r.state, sizeof r.state, "%s", mt_client_state_name(st->state));
    snprintf(r.file, sizeof r.file, "%s", s->in ? mt_input_path(s->in) : "mic");
    snprintf(r.reason, sizeof r.reason, "%s", st->reason);
    EMIT(a, replay_session, &r);
    flush_lines(a);
    s->final_state = st->state;
    snprintf(s->reason, sizeof s->reason, "%s", st->reason);
    if (st->state == MT_CS_SHED)
        say(a, "session %d: shed by the server: %s", si, st->reason);
    if (st->state == MT_CS_FAILED && a->failures_said++ == 0)
        say(a, "session %d failed: %s", si, st->reason);
    if (st->state != MT_CS_REJECTED || stopped(a))
        return;
    int counted = s->attempts - 1 - s->waits;   /* --retry's retries made */
    if (warming(st) && s->waits < a->c->retry_warming) {
        s->waits++;
        retry_session(a, si, st->reason, warm_delay_ns(s->waits - 1));
    } else if (st->final && counted < a->c->retry) {
        say(a, "session %d: not retried: the server says the same request "
            "would be refused again", si);
    } else if (counted < a->c->retry) {
        retry_session(a, si, st->reason, retry_delay_ns(counted));
    }
}

static void summary_lines(app *a)
{
    mt_client_totals t;
    mt_client_totals_get(a->cl, &t);
    mt_replay_summary r = {
        .replay_summary = a->ns, .sent = t.sent, .received = t.received,
        .filled = t.filled, .late = t.late, .missing = t.missing,
        .p50_ms = q_ms(&t.rtt, 0.5), .p99_ms = q_ms(&t.rtt, 0.99),
        .max_ms = (double)t.rtt.max_ns / 1e6,
        .server_p50_ms = q_ms(&t.server, 0.5),
        .server_p99_ms = q_ms(&t.server, 0.99),
        .server_max_ms = (double)t.server.max_ns / 1e6,
        .retries = a->retries,
    };
    for (int i = 0; i < a->ns; i++) {
        int fs = a->s[i].final_state;
        r.done += fs == MT_CS_DONE;
        r.rejected += fs == MT_CS_REJECTED;
        r.shed += fs == MT_CS_SHED;
        r.failed += fs != MT_CS_DONE && fs != MT_CS_REJECTED && fs != MT_CS_SHED;
    }
    EMIT(a, replay_summary, &r);
    /* sessions that did not finish, with their last reason, one line each */
    for (int i = 0; i < a->ns; i++) {
        const sess *s = &a->s[i];
        if (s->final_state == MT_CS_DONE)
            continue;
        mt_replay_rejected j = { .session = i };
        snprintf(j.replay_rejected, sizeof j.replay_rejected, "%s",
                 s->final_state == MT_CS_REJECTED ? "rejected" :
                 s->final_state == MT_CS_SHED ? "shed" : "failed");
        snprintf(j.reason, sizeof j.reason, "%s",
                 s->reason[0] ? s->reason : "interrupted before it ended");
        EMIT(a, replay_rejected, &j);
    }
    if (a->c->rate_check) {
        mt_replay_rate j = {
            .replay_rate = t.sessions, .frames = t.send_late.count,
            .jitter_p50_ms = q_ms(&t.send_late, 0.5),
            .jitter_p99_ms = q_ms(&t.send_late, 0.99),
            .jitter_max_ms = (double)t.send_late.max_ns / 1e6,
            .jitter_mean_ms = mt_pctl_mean(&t.send_late) / 1e6,
        };
        EMIT(a, replay_rate, &j);
    }
    flush_lines(a);
}

/* ---- the run ------------------------------------------------------------- */

/* The sessions: their input, their --duration bound and their output
 * file. 0, or -1 with err. */
static int make_sessions(app *a, char *err, size_t errlen)
{
    const mt_replay_cfg *c = a->c;
    a->ns = c->dx ? 1 : c->ninputs * c->copies;
    if (a->ns < 1) {
        mt_set_err(err, errlen, "no sessions to run");
        return -1;
    }
    a->s = mt_calloc_or_err((size_t)a->ns, sizeof *a->s, err, errlen, NULL);
    if (!a->s)
        return -1;
    for (int i = 0; i < a->ns; i++) {
        sess *s = &a->s[i];
        s->in = c->dx ? NULL : c->inputs[i / c->copies];
        if (s->in && mt_source_open(s->in, &s->src, err, errlen) != 0)
            return -1;
        s->frames_left = duration_frames(a);
        if (!c->out_pattern)
            continue;
        if (!strcmp(c->out_pattern, "-")) {
            strcpy(s->out_path, "-");
            continue;
        }
        if (mt_replay_expand(c->out_pattern, i, s->out_path, sizeof s->out_path) < 0) {
            mt_set_err(err, errlen, "-o %s: too long", c->out_pattern);
            return -1;
        }
    }
    return 0;
}

/* The client and its sessions, paced from now. 0, or -1 with err. */
static int client_start(app *a, char *err, size_t errlen)
{
    static const mt_client_callbacks cb = { cb_accept, cb_next, cb_frame, cb_end, cb_text,
                                             cb_words };
    const mt_replay_cfg *c = a->c;
    mt_client_config cc;
    memset(&cc, 0, sizeof cc);
    cc.hello = c->hello;
    cc.cb = &cb;
    cc.user = a;
    cc.seed = c->seed;
    if ((c->transcript || c->text) &&
        mt_transcript_open(c->transcript, c->tokenizer, &a->tr, err, errlen) != 0)
        return -1;
    if (c->text && mt_transcript_text(a->tr, c->text, err, errlen) != 0)
        return -1;
    /* every session, and a fresh connection for each retry */
    long cap = (long)a->ns * (c->retry + c->retry_warming + 1) + 1;
    cc.max_sessions = (int)cap;
    a->sess_of = mt_calloc_or_err((size_t)cap, sizeof *a->sess_of, err, errlen, NULL);
    if (!a->sess_of)
        return -1;
    /* A microphone frame is read when due: read early it would be short. */
    cc.prepare_ns = c->dx ? -1 : 0;
    if (mt_client_new(&cc, &a->cl, err, errlen) != 0)
        return -1;
    uint64_t t0 = mt_clock_ns();
    srandom((unsigned)(t0 ^ (uint64_t)getpid()));
    for (int i = 0; i < a->ns; i++) {
        uint64_t start = t0 + (uint64_t)(i * c->stagger_ms * 1e6);
        int idx = mt_client_add_unix(a->cl, c->sock, start, err, errlen);
        if (idx < 0)
            return -1;
        a->sess_of[idx] = i;
        a->s[i].attempts = 1;
    }
    a->t_begin = t0;
    return 0;
}

/* Runs the sessions to their end, with the interval records: 0, or -1
 * with err. A stop request ends them (each sends END). */
static int client_loop(app *a, char *err, size_t errlen)
{
    uint64_t step = (uint64_t)(a->c->interval_s * 1e9);
    a->t_next_line = a->t_begin + step;
    for (;;) {
        if (stopped(a))
            mt_client_stop(a->cl);
        /* at most 100 ms between looks at the stop flag */
        uint64_t until = a->t_next_line;
        if (until > mt_clock_ns() + 100000000ull)
            until = mt_clock_ns() + 100000000ull;
        int left = mt_client_run(a->cl, until, err, errlen);
        if (left < 0)
            return -1;
        uint64_t now = mt_clock_ns();
        if (now >= a->t_next_line) {
            if (a->c->lat == MT_REPLAY_LAT_INTERVAL)
                interval_line(a, now);
            /* the interval's percentiles, for the records and the status */
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

/* The summary (and the microphone's) records, on a live terminal there
 * too, and the warning for a capture device that is not real-time. */
static void closing_lines(app *a)
{
    mt_duplex *dx = a->c->dx;
    if (dx) {
        mt_duplex_status st;
        mt_duplex_get_status(dx, &st);
        if (device_outruns_clock(&st, (double)(mt_clock_ns() - a->t_begin) / 1e9))
            a->not_realtime = 1;
        if (a->c->status)
            fputc('\n', a->c->status);
    }
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            if (!a->c->summary_copy || a->lines == a->c->summary_copy)
                break;
            a->lines = a->c->summary_copy;
        }
        summary_lines(a);
        if (dx) {
            mt_duplex_status st;
            mt_duplex_get_status(dx, &st);
            mt_replay_mic m = {
                .device_rate = st.device_rate, .mic_frames = st.mic_frames,
                .mic_short = st.mic_short, .mic_dropped = st.mic_dropped,
                .mic_dropped_s = st.device_rate > 0
                                 ? (double)st.mic_dropped / st.device_rate : 0,
                .spk_underruns = st.spk_under, .spk_dropped = st.spk_dropped,
                .real_time = !a->not_realtime,
            };
            snprintf(m.device, sizeof m.device, "%s", mt_duplex_device_name(dx));
            EMIT(a, replay_mic, &m);
            flush_lines(a);
        }
    }
    a->lines = a->c->lines;
    int failed = 0;
    for (int i = 0; i < a->ns; i++)
        failed += a->s[i].final_state != MT_CS_DONE &&
                  a->s[i].final_state != MT_CS_REJECTED &&
                  a->s[i].final_state != MT_CS_SHED;
    if (failed > 1 || (failed == 1 && a->failures_said == 0))
        say(a, "%d session%s failed in all (the reasons: the replay_rejected "
            "records)", failed, failed == 1 ? "" : "s");
    if (dx && a->not_realtime) {
        mt_duplex_status st;
        mt_duplex_get_status(dx, &st);
        say(a, "the capture device \"%s\" is not real-time: it delivers "
            "samples faster than its rate (the excess, %.0f s of its audio, "
            "was dropped), so what was sent is not live audio; pick a "
            "microphone with --device (see --list-devices)",
            mt_duplex_device_name(dx),
            st.device_rate > 0 ? (double)st.mic_dropped / st.device_rate : 0.0);
    }
}

/* The exit status of the run (EXIT STATUS in mt-replay(1)): a failure
 * first, then a shed session, then a refusal. */
static int exit_status(const app *a)
{
    int done = 0, rejected = 0, shed = 0;
    for (int i = 0; i < a->ns; i++) {
        done += a->s[i].final_state == MT_CS_DONE;
        rejected += a->s[i].final_state == MT_CS_REJECTED;
        shed += a->s[i].final_state == MT_CS_SHED;
    }
    if (done + rejected + shed != a->ns || a->write_failed)
        return MT_REPLAY_FAILED;
    return shed > 0 ? MT_REPLAY_SHED : rejected > 0 ? MT_REPLAY_REFUSED : MT_REPLAY_OK;
}

static void app_free(app *a)
{
    mt_client_free(a->cl);
    for (int i = 0; i < a->ns && a->s; i++) {
        mt_audio_writer_abort(a->s[i].w);
        mt_source_close(a->s[i].src);
    }
    free(a->s);
    free(a->sess_of);
}

int mt_replay_run(const mt_replay_cfg *c, char *err, size_t errlen)
{
    app a;
    memset(&a, 0, sizeof a);
    a.c = c;
    a.lines = c->lines;
    a.rate = (int)c->hello.sample_rate;
    a.frame_samples = (int)c->hello.frame_samples;
    mt_pctl_reset(&a.iv_rtt);
    mt_pctl_reset(&a.iv_server);
    int rc = -1;
    if (make_sessions(&a, err, errlen) == 0 && client_start(&a, err, errlen) == 0) {
        int lrc = client_loop(&a, err, errlen);
        closing_lines(&a);
        rc = lrc != 0 ? MT_REPLAY_FAILED : exit_status(&a);
        if (lrc != 0)
            say(&a, "%s", err);
    }
    char terr[512];
    if (mt_transcript_close(a.tr, terr, sizeof terr) != 0) {
        say(&a, "-t: %s", terr);
        if (rc == 0)
            rc = MT_REPLAY_FAILED;
    }
    app_free(&a);
    return rc;
}
