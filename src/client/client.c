/* client.c: the multi-session client engine behind mt-replay and mt-probe.
 * See client.h for the contract.
 *
 * One thread, one epoll set. Sends are paced on an absolute schedule: the
 * loop waits in epoll until a few milliseconds before the next frame is
 * due (reading returned frames meanwhile), then clock_nanosleep with
 * TIMER_ABSTIME to half a millisecond before it and spins on the clock for
 * the rest (a sleeper's wake-up is late by up to milliseconds on a virtual
 * machine), so send jitter stays far below the frame period even with many
 * sessions. The frames due at an instant are
 * produced (next_frame, s16le encoding) a few milliseconds before it, so
 * that when it comes only the writes are left: with 64 sessions due at
 * once the last one leaves 64 writes late, not 64 audio reads late.
 */
#define _GNU_SOURCE
#include "util/errmsg.h"
#include "client/client.h"
#include "util/stats.h"
#include "client/ws_client.h"
#include "wire/endpoint.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A virtual machine's timer wakes a sleeper 0.1-2 ms late (the hypervisor's
 * tick, not timer slack), which alone would break a 2 ms jitter bound: sleep
 * to SPIN_NS before the instant and spin the rest on the clock. The spin
 * costs at most SPIN_NS of CPU per wake-up. */
#define SPIN_NS 500000ull

int mt_client_sleep_until(uint64_t t)
{
    uint64_t now = mt_clock_ns();
    if (t > now + SPIN_NS) {
        uint64_t wake = t - SPIN_NS;
        struct timespec ts = { (time_t)(wake / 1000000000ull),
                               (long)(wake % 1000000000ull) };
        int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        if (r == EINTR)
            return -1;
    }
    while (mt_clock_ns() < t)
        ;
    return 0;
}

/* ---- engine ------------------------------------------------------------- */

#define SEND_RING 1024          /* send times remembered per session */
#define OUT_CAP   (64 * 4096)   /* bytes queued to a peer before we give up */

typedef struct sent_rec { uint32_t seq; uint64_t t_sched, t_send; } sent_rec;

enum { READY_NONE, READY_FRAME, READY_END };

typedef struct session {
    mt_client_stats st;
    char     *path;           /* Unix socket, or NULL for fds */
    int       rfd, wfd, own_fds;
    uint64_t  t_start;        /* when to connect */
    uint64_t  t_state;        /* when the current state began */
    uint64_t  t0;             /* pacing origin */
    uint64_t  period;
    uint32_t  next_seq;
    int       end_requested;
    int       input_ended;    /* END queued */
    int       wr_registered;
    mt_frame_decoder *dec;
    uint8_t  *out;
    size_t    out_len;
    sent_rec *ring;
    int16_t  *pcm;            /* one frame scratch */
    size_t    samples;
    uint8_t  *ready;          /* [samples * 2] s16le payload of next_seq */
    int       ready_state;    /* READY_* */
    struct { int idx; int dir; } tag[2];
} session;

struct mt_client {
    mt_client_config cfg;
    mt_client_callbacks cb;
    session **s;              /* [cap]: sessions 0..n-1, each allocated
                                 when added, so that a pointer to one
                                 stays valid while more are added */
    int      n, cap;
    int      ep;
    volatile sig_atomic_t stop;
    uint64_t prepare_ns;      /* how early next_frame runs */
    mt_client_totals tot;
    uint8_t  frame_buf[MT_FRAME_MAX_SIZE];
};

int mt_client_new(const mt_client_config *cfg, mt_client **out,
                  char *err, size_t errlen)
{
    *out = NULL;
    mt_client *c = mt_calloc_or_err(1, sizeof *c, err, errlen, NULL);
    if (!c)
        return -1;
    c->cfg = *cfg;
    if (cfg->cb)
        c->cb = *cfg->cb;
    if (!c->cfg.connect_timeout_ns)
        c->cfg.connect_timeout_ns = 5000000000ll;
    if (!c->cfg.accept_timeout_ns)
        c->cfg.accept_timeout_ns = 30000000000ll;
    if (!c->cfg.drain_timeout_ns)
        c->cfg.drain_timeout_ns = 10000000000ll;
    c->prepare_ns = c->cfg.prepare_ns == 0 ? 3000000u
                  : c->cfg.prepare_ns < 0 ? 0 : (uint64_t)c->cfg.prepare_ns;
    c->cap = cfg->max_sessions > 0 ? cfg->max_sessions : 4096;
    if (c->cfg.hello.channels == 0)
        c->cfg.hello.channels = 1;
    if (c->cfg.hello.encoding == 0)
        c->cfg.hello.encoding = MT_ENC_PCM_S16LE;
    c->s = calloc((size_t)c->cap, sizeof *c->s);
    c->ep = epoll_create1(EPOLL_CLOEXEC);
    if (!c->s || c->ep < 0) {
        mt_set_err(err, errlen, "client: %s", c->s ? strerror(errno) : "out of memory");
        if (c->ep >= 0)
            close(c->ep);
        free(c->s);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

static void close_fds(mt_client *c, session *s)
{
    if (s->rfd >= 0) {
        epoll_ctl(c->ep, EPOLL_CTL_DEL, s->rfd, NULL);
        if (s->path || s->own_fds)
            close(s->rfd);
    }
    if (s->wfd >= 0 && s->wfd != s->rfd) {
        epoll_ctl(c->ep, EPOLL_CTL_DEL, s->wfd, NULL);
        if (s->path || s->own_fds)
            close(s->wfd);
    }
    s->rfd = s->wfd = -1;
}

static void free_bufs(session *s)
{
    free(s->dec);
    free(s->out);
    free(s->ring);
    free(s->pcm);
    free(s->ready);
    s->ready = NULL;
    s->dec = NULL;
    s->out = NULL;
    s->ring = NULL;
    s->pcm = NULL;
}

void mt_client_free(mt_client *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        close_fds(c, c->s[i]);
        free_bufs(c->s[i]);
        free(c->s[i]->path);
        free(c->s[i]);
    }
    close(c->ep);
    free(c->s);
    free(c);
}

static int add_common(mt_client *c, uint64_t t_start, char *err, size_t errlen)
{
    if (c->n >= c->cap) {
        mt_set_err(err, errlen, "client: engine full (%d sessions)", c->cap);
        return -1;
    }
    int idx = c->n;
    session *s = calloc(1, sizeof *s);
    if (!s) {
        mt_set_err(err, errlen, "client: out of memory");
        return -1;
    }
    c->s[idx] = s;
    s->rfd = s->wfd = -1;
    s->st.state = MT_CS_WAITING;
    s->st.t_added = mt_clock_ns();
    s->t_start = t_start ? t_start : s->st.t_added;
    s->t_state = s->st.t_added;
    s->tag[0].idx = s->tag[1].idx = idx;
    s->tag[0].dir = 0;
    s->tag[1].dir = 1;
    return idx;
}

int mt_client_add_unix(mt_client *c, const char *path, uint64_t t_start,
                       char *err, size_t errlen)
{
    int idx = add_common(c, t_start, err, errlen);
    if (idx < 0)
        return -1;
    c->s[idx]->path = strdup(path);
    if (!c->s[idx]->path) {
        mt_set_err(err, errlen, "out of memory");
        free(c->s[idx]);
        c->s[idx] = NULL;
        return -1;
    }
    c->n++;
    c->tot.sessions++;
    return idx;
}

int mt_client_add_fds(mt_client *c, int rfd, int wfd, int own_fds,
                      uint64_t t_start, char *err, size_t errlen)
{
    int idx = add_common(c, t_start, err, errlen);
    if (idx < 0)
        return -1;
    session *s = c->s[idx];
    s->rfd = rfd;
    s->wfd = wfd;
    s->own_fds = own_fds;
    c->n++;
    c->tot.sessions++;
    return idx;
}

static void finish(mt_client *c, session *s, int state, const char *fmt, ...)
{
    if (s->st.state >= MT_CS_DONE)
        return;
    s->st.state = state;
    s->st.t_end = mt_clock_ns();
    if (fmt && !s->st.reason[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->st.reason, sizeof s->st.reason, fmt, ap);
        va_end(ap);
    }
    s->st.missing = s->st.sent > s->st.received ? s->st.sent - s->st.received : 0;
    close_fds(c, s);
    free_bufs(s);
    if (state == MT_CS_DONE)
        c->tot.done++;
    else if (state == MT_CS_REJECTED)
        c->tot.rejected++;
    else if (state == MT_CS_SHED)
        c->tot.shed++;
    else
        c->tot.failed++;
    c->tot.missing += s->st.missing;
    if (c->cb.on_end)
        c->cb.on_end(c->cfg.user, s->tag[0].idx, &s->st);
}

static void want_write(mt_client *c, session *s, int on)
{
    if (s->wfd < 0 || s->wr_registered == on)
        return;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    if (s->wfd == s->rfd) {
        ev.events = EPOLLIN | (on ? EPOLLOUT : 0);
        ev.data.ptr = &s->tag[0];
        epoll_ctl(c->ep, EPOLL_CTL_MOD, s->wfd, &ev);
    } else {
        ev.events = EPOLLOUT;
        ev.data.ptr = &s->tag[1];
        epoll_ctl(c->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->wfd, &ev);
    }
    s->wr_registered = on;
}

static void handle_read(mt_client *c, session *s);

/* Writes what is queued; 0, or -1 after finishing the session. */
static int flush_out(mt_client *c, session *s)
{
    size_t off = 0;
    while (off < s->out_len) {
        ssize_t w;
        if (s->path)
            w = send(s->wfd, s->out + off, s->out_len - off, MSG_NOSIGNAL);
        else
            w = write(s->wfd, s->out + off, s->out_len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            /* The server may have answered (REJECT: full, draining) and
             * closed before our bytes arrived: its frame is still there
             * to read, and says more than "Broken pipe". */
            int werr = errno;
            if (s->path && (werr == EPIPE || werr == ECONNRESET)) {
                handle_read(c, s);
                if (s->st.state >= MT_CS_DONE)
                    return -1;
            }
            finish(c, s, MT_CS_FAILED, "write to server: %s", strerror(werr));
            return -1;
        }
        off += (size_t)w;
    }
    memmove(s->out, s->out + off, s->out_len - off);
    s->out_len -= off;
    want_write(c, s, s->out_len > 0);
    return 0;
}

static int queue_frame(mt_client *c, session *s, const mt_frame *f)
{
    long n = mt_frame_encode(f, c->frame_buf, sizeof c->frame_buf);
    if (n < 0) {
        finish(c, s, MT_CS_FAILED, "encode: %s", mt_frame_strerror((int)n));
        return -1;
    }
    if (s->out_len + (size_t)n > OUT_CAP) {
        finish(c, s, MT_CS_FAILED, "server is not reading (%zu bytes queued)",
               s->out_len);
        return -1;
    }
    memcpy(s->out + s->out_len, c->frame_buf, (size_t)n);
    s->out_len += (size_t)n;
    return flush_out(c, s);
}

static int setup_io(mt_client *c, session *s)
{
    s->dec = malloc(sizeof *s->dec);
    s->out = malloc(OUT_CAP);
    s->ring = calloc(SEND_RING, sizeof *s->ring);
    if (!s->dec || !s->out || !s->ring) {
        finish(c, s, MT_CS_FAILED, "out of memory");
        return -1;
    }
    mt_frame_decoder_init(s->dec);
    fcntl(s->rfd, F_SETFL, fcntl(s->rfd, F_GETFL) | O_NONBLOCK);
    if (s->wfd != s->rfd)
        fcntl(s->wfd, F_SETFL, fcntl(s->wfd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.ptr = &s->tag[0];
    if (epoll_ctl(c->ep, EPOLL_CTL_ADD, s->rfd, &ev) != 0) {
        finish(c, s, MT_CS_FAILED, "epoll: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void send_hello(mt_client *c, session *s)
{
    uint8_t p[MT_HELLO_MAX];
    long n = mt_hello_encode(&c->cfg.hello, p, sizeof p);
    if (n < 0) {
        finish(c, s, MT_CS_FAILED, "HELLO: %s", mt_frame_strerror((int)n));
        return;
    }
    mt_frame f;
    memset(&f, 0, sizeof f);
    f.version = MT_FRAME_VERSION;
    f.type = MT_FRAME_HELLO;
    mt_frame_set_hello_seed(&f, c->cfg.seed);
    f.t_send = mt_clock_ns();
    f.length = (uint32_t)n;
    f.payload = p;
    s->st.state = MT_CS_HELLO;
    s->t_state = mt_clock_ns();
    queue_frame(c, s, &f);
}

static void start_session(mt_client *c, session *s, uint64_t now)
{
    if (!s->path) {
        if (setup_io(c, s) == 0)
            send_hello(c, s);
        return;
    }
    if (s->st.state == MT_CS_WAITING) {
        s->st.state = MT_CS_CONNECTING;
        s->t_state = now;
    }
    char cerr[256];
    int fd = mt_ws_client_is_url(s->path)
                 ? mt_ws_client_connect(s->path,
                                        (int)(c->cfg.connect_timeout_ns / 1000000),
                                        cerr, sizeof cerr)
                 : mt_endpoint_connect(s->path,
                                       (int)(c->cfg.connect_timeout_ns / 1000000),
                                       cerr, sizeof cerr);
    if (fd == -2) {   /* Unix backlog full: retry later */
        if (now - s->t_state > (uint64_t)c->cfg.connect_timeout_ns)
            finish(c, s, MT_CS_FAILED, "connect %s: timed out", s->path);
        return;
    }
    if (fd < 0) {
        finish(c, s, MT_CS_FAILED, "%s", cerr);
        return;
    }
    s->rfd = s->wfd = fd;
    /* which server this is (a stale socket's old server is not the one
     * just started): its pid, said by mt-replay with the first ACCEPT */
    struct ucred cr;
    socklen_t crl = sizeof cr;
    if (!mt_ws_client_is_url(s->path) && !mt_endpoint_is_tcp(s->path) &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0)
        s->st.server_pid = (long)cr.pid;
    if (setup_io(c, s) == 0)
        send_hello(c, s);
}

static void send_end(mt_client *c, session *s)
{
    mt_frame f;
    memset(&f, 0, sizeof f);
    f.version = MT_FRAME_VERSION;
    f.type = MT_FRAME_END;
    f.session = s->st.server_session;
    f.t_send = mt_clock_ns();
    s->input_ended = 1;
    s->st.state = MT_CS_DRAINING;
    s->t_state = mt_clock_ns();
    queue_frame(c, s, &f);
}

/* Produce frame next_seq into s->ready (or learn that input ended). */
static void prepare_audio(mt_client *c, session *s)
{
    if (s->ready_state != READY_NONE)
        return;
    int r = MT_NEXT_FRAME;
    if (c->cb.next_frame)
        r = c->cb.next_frame(c->cfg.user, s->tag[0].idx, s->next_seq,
                             s->pcm, s->samples);
    else
        memset(s->pcm, 0, s->samples * sizeof *s->pcm);
    if (s->st.state != MT_CS_STREAMING)
        return;
    if (r != MT_NEXT_FRAME) {
        s->ready_state = READY_END;
        return;
    }
    /* s16le on the wire, written byte by byte rather than assumed. */
    for (size_t i = 0; i < s->samples; i++) {
        uint16_t v = (uint16_t)s->pcm[i];
        s->ready[2 * i] = (uint8_t)v;
        s->ready[2 * i + 1] = (uint8_t)(v >> 8);
    }
    s->ready_state = READY_FRAME;
}

static void send_audio(mt_client *c, session *s, uint64_t t_sched)
{
    prepare_audio(c, s);
    if (s->st.state != MT_CS_STREAMING)
        return;
    int state = s->ready_state;
    s->ready_state = READY_NONE;
    if (state != READY_FRAME || s->end_requested || c->stop) {
        send_end(c, s);
        return;
    }
    uint8_t *payload = s->ready;
    mt_frame f;
    memset(&f, 0, sizeof f);
    f.version = MT_FRAME_VERSION;
    f.type = MT_FRAME_AUDIO;
    f.session = s->st.server_session;
    f.seq = s->next_seq;
    f.t_send = mt_clock_ns();
    f.length = (uint32_t)(s->samples * 2);
    f.payload = payload;
    sent_rec *rec = &s->ring[s->next_seq % SEND_RING];
    rec->seq = s->next_seq;
    rec->t_sched = t_sched;
    rec->t_send = f.t_send;
    uint64_t late = f.t_send > t_sched ? f.t_send - t_sched : 0;
    mt_pctl_add(&c->tot.send_late, late);
    s->next_seq++;
    s->st.sent++;
    c->tot.sent++;
    queue_frame(c, s, &f);
}

static void on_accept(mt_client *c, session *s, const mt_frame *f)
{
    mt_hello h;
    if (mt_hello_decode(f->payload, f->length, &h) != 0) {
        finish(c, s, MT_CS_FAILED, "malformed ACCEPT from server");
        return;
    }
    if (h.frame_samples < 1 || h.frame_samples * (size_t)(h.channels ? h.channels : 1) * 2 >
            MT_FRAME_MAX_PAYLOAD || h.sample_rate < 1) {
        finish(c, s, MT_CS_FAILED, "ACCEPT with unusable format (%u Hz, %u samples)",
               h.sample_rate, h.frame_samples);
        return;
    }
    s->st.fmt = h;
    s->st.text_only = (f->flags & MT_FLAG_TEXT_ONLY) != 0;
    s->st.server_session = f->session;
    s->st.t_accept = mt_clock_ns();
    s->samples = (size_t)h.frame_samples * (h.channels ? h.channels : 1);
    s->pcm = calloc(s->samples, sizeof *s->pcm);
    s->ready = malloc(s->samples * 2);
    s->ready_state = READY_NONE;
    if (!s->pcm || !s->ready) {
        finish(c, s, MT_CS_FAILED, "out of memory");
        return;
    }
    s->period = c->cfg.period_ns > 0 ? (uint64_t)c->cfg.period_ns
              : (uint64_t)h.frame_samples * 1000000000ull / h.sample_rate;
    s->st.state = MT_CS_STREAMING;
    s->t_state = s->st.t_accept;
    c->tot.active++;
    if (c->cb.on_accept) {
        char reason[MT_REASON_MAX + 1] = "";
        if (c->cb.on_accept(c->cfg.user, s->tag[0].idx, &h, reason,
                            sizeof reason) != 0) {
            finish(c, s, MT_CS_FAILED, "%s", reason[0] ? reason : "refused by caller");
            return;
        }
    }
    /* The schedule starts once the caller has prepared the audio (the
     * callback may resample a whole file) plus the prepare lead, so that
     * frame 0 is not late by construction, and keeps the phase the
     * caller chose with t_start (a stagger): frame 0 leaves at the first
     * t_start + k * period not before that, so sessions admitted in one
     * server tick do not all send at once. */
    s->t0 = mt_clock_ns() + c->prepare_ns;
    if (s->t_start < s->t0 && s->period) {
        uint64_t k = (s->t0 - s->t_start + s->period - 1) / s->period;
        s->t0 = s->t_start + k * s->period;
    }
    if (s->end_requested || c->stop)
        send_end(c, s);
}

static void on_audio(mt_client *c, session *s, const mt_frame *f, uint64_t now)
{
    if (!s->pcm) {
        finish(c, s, MT_CS_FAILED, "AUDIO before ACCEPT");
        return;
    }
    int fill = (f->flags & MT_FLAG_FILL) != 0;
    /* a text-only answer (TEXT) carries no audio: silence for on_frame */
    int silent = fill || f->type == MT_FRAME_TEXT;
    if (!silent && f->length != s->samples * 2) {
        finish(c, s, MT_CS_FAILED, "AUDIO payload %u bytes, expected %zu",
               f->length, s->samples * 2);
        return;
    }
    if (silent)
        memset(s->pcm, 0, s->samples * sizeof *s->pcm);
    else
        for (size_t i = 0; i < s->samples; i++)
            s->pcm[i] = (int16_t)(f->payload[2 * i] | (f->payload[2 * i + 1] << 8));
    mt_client_result r;
    memset(&r, 0, sizeof r);
    r.idx = s->tag[0].idx;
    r.seq = f->seq;
    r.fill = fill;
    r.t_recv = now;
    r.t_arrive = f->t_arrive;
    r.t_start = f->t_start;
    r.t_ready = f->t_ready;
    const sent_rec *rec = &s->ring[f->seq % SEND_RING];
    if (rec->seq == f->seq && rec->t_send) {
        r.t_sched = rec->t_sched;
        r.t_send = rec->t_send;
        r.rtt_ms = (double)(int64_t)(now - rec->t_send) / 1e6;
        r.send_late_ms = (double)(int64_t)(rec->t_send - rec->t_sched) / 1e6;
    }
    if (f->t_ready >= f->t_arrive && f->t_arrive)
        r.server_ms = (double)(f->t_ready - f->t_arrive) / 1e6;
    if (f->t_start >= f->t_arrive && f->t_arrive)
        r.queue_ms = (double)(f->t_start - f->t_arrive) / 1e6;
    uint64_t deadline = c->cfg.deadline_ns > 0 ? (uint64_t)c->cfg.deadline_ns : 2 * s->period;
    s->st.received++;
    c->tot.received++;
    if (fill) {
        s->st.filled++;
        c->tot.filled++;
    } else {
        if (r.t_send) {
            uint64_t rtt = now - r.t_send;
            mt_pctl_add(&c->tot.rtt, rtt);
            if (rtt > deadline) {
                r.late = 1;
                s->st.late++;
                c->tot.late++;
            }
            if (r.rtt_ms > s->st.rtt_max_ms)
                s->st.rtt_max_ms = r.rtt_ms;
        }
        if (f->t_arrive && f->t_ready >= f->t_arrive) {
            mt_pctl_add(&c->tot.server, f->t_ready - f->t_arrive);
            if (r.server_ms > s->st.server_max_ms)
                s->st.server_max_ms = r.server_ms;
        }
    }
    if (c->cb.on_frame)
        c->cb.on_frame(c->cfg.user, &r, s->pcm, s->samples);
}

/* A TEXT frame: its ids (the decoder checked them: 0..MT_TEXT_MAX_TOKENS,
 * each at most INT32_MAX) to the caller. */
static void on_text(mt_client *c, session *s, const mt_frame *f)
{
    int32_t tok[MT_TEXT_MAX_TOKENS];
    int n = (int)(f->length / 4);
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)((uint32_t)f->payload[4 * i] | (uint32_t)f->payload[4 * i + 1] << 8 |
                           (uint32_t)f->payload[4 * i + 2] << 16 |
                           (uint32_t)f->payload[4 * i + 3] << 24);
    s->st.text++;
    if (c->cb.on_text)
        c->cb.on_text(c->cfg.user, s->tag[0].idx, f->seq, tok, n);
}

/* A REJECT, ERROR or END frame's reason, control bytes shown as '?'. */
static void frame_reason(const mt_frame *f, char reason[MT_REASON_MAX + 1])
{
    size_t n = f->length < MT_REASON_MAX ? f->length : MT_REASON_MAX;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = f->payload[i];
        reason[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    reason[n] = 0;
}

static void handle_frame(mt_client *c, session *s, const mt_frame *f, uint64_t now)
{
    char reason[MT_REASON_MAX + 1];
    switch (f->type) {
    case MT_FRAME_ACCEPT:
        if (s->st.state != MT_CS_HELLO) {
            finish(c, s, MT_CS_FAILED, "unexpected ACCEPT");
            return;
        }
        on_accept(c, s, f);
        return;
    case MT_FRAME_REJECT:
    case MT_FRAME_ERROR: {
        frame_reason(f, reason);
        if (!reason[0])
            snprintf(reason, sizeof reason, "(no reason given)");
        if (f->type == MT_FRAME_REJECT) {
            s->st.final = (f->flags & MT_FLAG_FINAL) != 0;
            finish(c, s, MT_CS_REJECTED, "%s", reason);
        }
        else
            finish(c, s, MT_CS_FAILED, "server error: %s", reason);
        return;
    }
    case MT_FRAME_AUDIO:
        if (s->st.state != MT_CS_STREAMING && s->st.state != MT_CS_DRAINING) {
            finish(c, s, MT_CS_FAILED, "AUDIO before ACCEPT");
            return;
        }
        if (s->st.text_only) {
            finish(c, s, MT_CS_FAILED, "AUDIO in a text-only session");
            return;
        }
        on_audio(c, s, f, now);
        return;
    case MT_FRAME_TEXT:
        if (s->st.state != MT_CS_STREAMING && s->st.state != MT_CS_DRAINING) {
            finish(c, s, MT_CS_FAILED, "TEXT before ACCEPT");
            return;
        }
        on_text(c, s, f);
        if (s->st.text_only)
            on_audio(c, s, f, now);   /* the answer itself */
        return;
    case MT_FRAME_WORDS:
        if (s->st.state != MT_CS_STREAMING && s->st.state != MT_CS_DRAINING) {
            finish(c, s, MT_CS_FAILED, "WORDS before ACCEPT");
            return;
        }
        s->st.text++;
        if (c->cb.on_words)   /* the decoder checked it: UTF-8, no NUL, <= 255 bytes */
            c->cb.on_words(c->cfg.user, s->tag[0].idx, f->seq, (const char *)f->payload,
                           f->length);
        return;
    case MT_FRAME_END:
        if (s->st.state == MT_CS_HELLO) {
            finish(c, s, MT_CS_FAILED, "server ended the session before ACCEPT");
            return;
        }
        c->tot.active--;
        if (f->length > 0) {
            /* a reason: the server ended the session early (shed) */
            frame_reason(f, reason);
            finish(c, s, MT_CS_SHED, "%s", reason);
            return;
        }
        if (s->st.state == MT_CS_STREAMING) {
            s->st.state = MT_CS_DRAINING;   /* the server ended it (drain) */
            snprintf(s->st.reason, sizeof s->st.reason, "ended by the server");
        }
        finish(c, s, MT_CS_DONE, NULL);
        return;
    default:
        finish(c, s, MT_CS_FAILED, "unexpected %s frame from server",
               mt_frame_type_name(f->type));
        return;
    }
}

static void handle_read(mt_client *c, session *s)
{
    uint8_t buf[65536];
    for (int rounds = 0; rounds < 16 && s->st.state < MT_CS_DONE; rounds++) {
        ssize_t n = read(s->rfd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == ECONNRESET && s->st.state == MT_CS_HELLO &&
                mt_endpoint_is_tcp(s->path)) {
                finish(c, s, MT_CS_REJECTED, "no capacity (closed by the proxy)");
                return;
            }
            finish(c, s, MT_CS_FAILED, "read from server: %s", strerror(errno));
            return;
        }
        if (n == 0 && s->st.state == MT_CS_HELLO && mt_endpoint_is_tcp(s->path)) {
            /* A proxy (HAProxy with every server at its maxconn, queue
             * timed out) closes without a word: that is a refusal for want
             * of capacity, not a failure of the server. */
            finish(c, s, MT_CS_REJECTED, "no capacity (closed by the proxy)");
            return;
        }
        if (n == 0) {
            if (s->st.state == MT_CS_STREAMING || s->st.state == MT_CS_DRAINING)
                c->tot.active--;
            finish(c, s, MT_CS_FAILED, "server closed the connection%s",
                   mt_frame_decoder_finish(s->dec) ? " inside a frame" : " without END");
            return;
        }
        uint64_t now = mt_clock_ns();
        size_t off = 0;
        while (off < (size_t)n && s->st.state < MT_CS_DONE) {
            size_t used = 0;
            mt_frame f;
            int rc = mt_frame_decode(s->dec, buf + off, (size_t)n - off, &used, &f);
            off += used;
            if (rc == MT_FRAME_OK) {
                int was_active = s->st.state == MT_CS_STREAMING || s->st.state == MT_CS_DRAINING;
                handle_frame(c, s, &f, now);
                if (was_active && s->st.state >= MT_CS_DONE && f.type != MT_FRAME_END)
                    c->tot.active--;
            } else if (rc == MT_FRAME_NEED_MORE) {
                break;
            } else {
                if (s->st.state == MT_CS_STREAMING || s->st.state == MT_CS_DRAINING)
                    c->tot.active--;
                finish(c, s, MT_CS_FAILED, "bad frame from server: %s",
                       mt_frame_strerror(rc));
                return;
            }
        }
    }
}

/* Work due at now; returns the next instant anything is due. */
static uint64_t do_due(mt_client *c, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (int i = 0; i < c->n; i++) {
        session *s = c->s[i];
        switch (s->st.state) {
        case MT_CS_WAITING:
            if (c->stop) {
                finish(c, s, MT_CS_FAILED, "stopped before it started");
                break;
            }
            if (now >= s->t_start)
                start_session(c, s, now);
            else if (s->t_start < next)
                next = s->t_start;
            if (s->st.state == MT_CS_CONNECTING && now + 2000000 < next)
                next = now + 2000000;     /* retry a full backlog */
            break;
        case MT_CS_CONNECTING:
            start_session(c, s, now);
            if (s->st.state == MT_CS_CONNECTING && now + 2000000 < next)
                next = now + 2000000;
            break;
        case MT_CS_HELLO:
            if (now - s->t_state > (uint64_t)c->cfg.accept_timeout_ns) {
                finish(c, s, MT_CS_FAILED, "no ACCEPT or REJECT within %.1f s",
                       c->cfg.accept_timeout_ns / 1e9);
                break;
            }
            if (c->stop)
                s->end_requested = 1;
            if (s->t_state + (uint64_t)c->cfg.accept_timeout_ns < next)
                next = s->t_state + (uint64_t)c->cfg.accept_timeout_ns;
            break;
        case MT_CS_STREAMING: {
            uint64_t due = s->t0 + (uint64_t)s->next_seq * s->period;
            int guard = 0;
            while (s->st.state == MT_CS_STREAMING && due <= now && guard++ < 64) {
                send_audio(c, s, due);
                due = s->t0 + (uint64_t)s->next_seq * s->period;
            }
            if (s->st.state == MT_CS_STREAMING && (c->stop || s->end_requested))
                send_end(c, s);
            if (s->st.state == MT_CS_STREAMING && s->ready_state == READY_NONE) {
                uint64_t prep_at = due > c->prepare_ns ? due - c->prepare_ns : 0;
                if (prep_at <= now)
                    prepare_audio(c, s);
                else if (prep_at < next)
                    next = prep_at;
            }
            if (s->st.state == MT_CS_STREAMING && due < next)
                next = due;
            if (s->st.state == MT_CS_DRAINING) {
                uint64_t t = s->t_state + (uint64_t)c->cfg.drain_timeout_ns;
                if (t < next)
                    next = t;
            }
            break;
        }
        case MT_CS_DRAINING: {
            uint64_t t = s->t_state + (uint64_t)c->cfg.drain_timeout_ns;
            if (now >= t) {
                c->tot.active--;
                finish(c, s, MT_CS_FAILED, "no END from server within %.1f s "
                       "of ours", c->cfg.drain_timeout_ns / 1e9);
            } else if (t < next)
                next = t;
            break;
        }
        default:
            break;
        }
    }
    return next;
}

#define EPOLL_EARLY_NS 4000000ull

int mt_client_run(mt_client *c, uint64_t until_ns, char *err, size_t errlen)
{
    struct epoll_event ev[64];
    for (;;) {
        uint64_t now = mt_clock_ns();
        uint64_t next = do_due(c, now);
        int left = mt_client_unfinished(c);
        if (left == 0)
            return 0;
        if (until_ns && now >= until_ns)
            return left;
        if (until_ns && until_ns < next)
            next = until_ns;
        now = mt_clock_ns();
        /* epoll's millisecond timeout overshoots by up to ~4 ms on a
         * virtual machine: wake EPOLL_EARLY_NS early and finish the wait on
         * the absolute clock. */
        int timeout = 0;
        if (next > now + EPOLL_EARLY_NS + 500000) {
            uint64_t ms = (next - now - EPOLL_EARLY_NS) / 1000000;
            timeout = ms > 1000 ? 1000 : (int)ms;
        }
        int ne = epoll_wait(c->ep, ev, 64, timeout);
        if (ne < 0) {
            if (errno == EINTR)
                continue;
            mt_set_err(err, errlen, "epoll_wait: %s", strerror(errno));
            return -1;
        }
        for (int i = 0; i < ne; i++) {
            /* Sends come first: a burst of returned frames (all sessions
             * answered in one tick) must not delay a frame that is due. */
            if (next != UINT64_MAX && mt_clock_ns() >= next)
                next = do_due(c, mt_clock_ns());
            struct { int idx; int dir; } *tag = ev[i].data.ptr;
            session *s = c->s[tag->idx];
            if (s->st.state >= MT_CS_DONE)
                continue;
            if (ev[i].events & (EPOLLOUT)) {
                if (flush_out(c, s) != 0)
                    continue;
            }
            if (tag->dir == 0 && (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                handle_read(c, s);
            else if (tag->dir == 1 && (ev[i].events & (EPOLLHUP | EPOLLERR)))
                finish(c, s, MT_CS_FAILED, "server closed its input");
        }
        if (ne == 0) {
            now = mt_clock_ns();
            /* A signal cutting the wait short is handled by the loop. */
            if (next != UINT64_MAX && next > now &&
                next - now <= EPOLL_EARLY_NS + 500000 &&
                mt_client_sleep_until(next) != 0)
                continue;
        }
    }
}

void mt_client_end_session(mt_client *c, int idx)
{
    if (idx >= 0 && idx < c->n)
        c->s[idx]->end_requested = 1;
}

void mt_client_stop(mt_client *c) { c->stop = 1; }

int mt_client_sessions(const mt_client *c) { return c->n; }

int mt_client_unfinished(const mt_client *c)
{
    int n = 0;
    for (int i = 0; i < c->n; i++)
        if (c->s[i]->st.state < MT_CS_DONE)
            n++;
    return n;
}

const mt_client_stats *mt_client_session_stats(const mt_client *c, int idx)
{
    if (idx < 0 || idx >= c->n)
        return NULL;
    return &c->s[idx]->st;
}

void mt_client_totals_get(const mt_client *c, mt_client_totals *t)
{
    *t = c->tot;
    int active = 0;
    for (int i = 0; i < c->n; i++)
        if (c->s[i]->st.state == MT_CS_STREAMING || c->s[i]->st.state == MT_CS_DRAINING)
            active++;
    t->active = active;
}

const char *mt_client_state_name(int state)
{
    static const char *names[] = { "waiting", "connecting", "hello",
        "streaming", "draining", "done", "rejected", "failed", "shed" };
    if (state < 0 || state > MT_CS_SHED)
        return "?";
    return names[state];
}
