/* server.c: the I/O side of mt-serve (see server.h).
 *
 * One epoll loop watches: the listening socket, a signal pipe (TERM/INT
 * drain, HUP reopens the latency log), an eventfd the tick thread writes
 * after every tick, the control input, and every client. Clients are
 * non-blocking; each has a small write buffer refilled from its session's
 * bounded output queue in the engine. A client whose output makes no
 * progress for write_timeout, or whose queue overflows, is disconnected
 * with a log line: it cannot hold back the tick or anyone else.
 *
 * Admission: HELLO is checked against the model's format (a mismatch gets
 * REJECT with the reason); a `request session=ID ...` line goes to the
 * machine stream; then either the static rule (--max-sessions) decides at
 * once, or the control input's `accept ID` / `reject ID reason` line does
 * (and a `shed ID reason` line ends an admitted session: do_shed),
 * within admit_timeout. The engine refuses, whatever was decided, a window
 * session the KV pool cannot hold for its whole bound.
 *
 * What a connection's bytes mean (HELLO, admission, AUDIO, END, ERROR) is
 * proto.c's: this file reads the socket and hands it the bytes.
 *
 * The pieces around the loop live beside it: net.c opens the listening
 * socket and the control input, ticker.c runs the tick thread, lineout.c
 * writes the machine stream from its own thread, and wire/admission.c
 * reads and writes the request, verdict and control lines.
 */
#define _GNU_SOURCE
#include "util/errmsg.h"
#include "serve/server.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/lineout.h"
#include "serve/net.h"
#include "serve/proto.h"
#include "serve/ticker.h"
#include "wire/admission.h"
#include "wire/endpoint.h"
#include "util/clock.h"

#define RBUF_CAP   (64 * 1024)
#define LINE_QUEUE_BYTES (128 * 1024)     /* machine-stream lines in flight */
#define LINE_FLUSH_NS    2000000000ull    /* at exit, for a slow reader */
#define DROP_REPORT_NS   10000000000ull   /* at most one drop message per 10 s */
#define MAX_CONNS_PER_SESSION 4            /* default cap: 4 x --max-sessions + 16 */
#define FD_RESERVE       32               /* descriptors besides the clients:
                                             listener, epoll, pipes, logs,
                                             control, the spare, libraries */
#define CONN_REPORT_NS   10000000000ull   /* refused/evicted: one line per 10 s */
#define ACCEPT_PAUSE_NS  100000000ull     /* out of descriptors, no spare */
#define EVICT_MIN_IDLE_NS 250000000ull    /* a connection this young may still
                                             be about to send its HELLO */

enum { TAG_LISTEN = 1, TAG_SIGNAL, TAG_EVENT, TAG_CONTROL, TAG_CONN,
       TAG_LISTEN_TCP, TAG_AGENT };

typedef struct conn {
    int      tag;                /* TAG_CONN: first, for epoll dispatch */
    int      rfd, wfd;           /* the same socket, or stdin/stdout */
    int      r_epoll, w_epoll;   /* registered with epoll (regular files
                                    cannot be) */
    uint32_t ev_r, ev_w;         /* events currently registered */
    int      is_socket;
    uint64_t t_created;
    uint64_t stuck_since;        /* output waiting, no progress since */
    mt_proto_conn p;             /* the protocol's side (proto.h) */
    struct conn *next;
} conn;

typedef struct tagged { int tag; } tagged;

struct mt_server {
    mt_server_opts o;
    int            sigfd, sig_wfd, evfd, epfd;
    mt_listener    lis;
    int            tcp_fd, agent_fd; /* --listen, --agent; -1 */
    char           tcp_name[80], agent_name[80];
    mt_control_in  ctl;
    tagged         t_listen, t_signal, t_event, t_control, t_listen_tcp, t_agent;
    char           ctlbuf[MT_CONTROL_MAX_LINE + 1];
    size_t         ctllen;
    int            ctl_overlong;
    mt_lineout    *out;              /* machine stream */
    conn          *conns;
    int            nconns;
    uint64_t       drain_deadline;
    mt_engine     *eng;
    mt_proto       pr;               /* the protocol's view of us: the
                                        engine, admission, draining */
    int            frame_payload;    /* bytes of one AUDIO payload */
    int            fatal;
    char           fatal_msg[256];
    /* descriptor exhaustion and the connection cap (issue 19) */
    int            spare_fd;         /* /dev/null, given up to accept one
                                        connection when out of descriptors */
    uint64_t       accept_paused_until; /* listener out of epoll until then */
    uint64_t       n_refused, n_evicted, n_nofd, n_timeout;
    uint64_t       last_conn_report;
    int            nofd_errno;
    /* --stdio: how the input ended */
    int            stdio_unclean;
    char           stdio_msg[256];
    uint8_t        rbuf[RBUF_CAP];
};

static volatile int sig_pipe_w = -1;

static void on_signal_handler(int signo)
{
    int saved = errno;
    unsigned char b = (unsigned char)signo;
    if (sig_pipe_w >= 0 && write(sig_pipe_w, &b, 1) < 0) {
        /* pipe full: the signal is already pending there */
    }
    errno = saved;
}

void mt_server_opts_default(mt_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->socket_mode = 0600;
    o->admit_timeout_ns = 2000000000ull;
    o->max_sessions = 64;
    o->frame_ns = 80000000ull;
    o->write_timeout_ns = 2000000000ull;
    o->sndbuf = 64 * 1024;
    o->drain_timeout_ns = 10000000000ull;
    o->hello_timeout_ns = 10000000000ull;
}

/* the human log, when the caller gave one */
#define slog(s, ...) mt_logf((s)->o.log, (s)->o.log_ctx, __VA_ARGS__)

/* Never waits for the reader: a line that finds the queue full is dropped
 * and counted (lineout.h). */
void mt_server_line(void *ctx, const char *line)
{
    mt_server *s = ctx;
    if (s->out)
        mt_lineout_put(s->out, line);
}

/* ---- setup ---------------------------------------------------------------- */

static int open_log_fd(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
}

static int open_latency(mt_server *s, char *err, size_t errlen)
{
    int fd = s->o.stdio ? 2 : 1, owned = 0;
    if (s->o.latency_log) {
        fd = open_log_fd(s->o.latency_log);
        if (fd < 0) {
            mt_set_err(err, errlen, "--latency-log %s: %s", s->o.latency_log, strerror(errno));
            return -1;
        }
        owned = 1;
    }
    if (mt_lineout_create(fd, owned, LINE_QUEUE_BYTES, &s->out, err, errlen) != 0) {
        if (owned)
            close(fd);
        return -1;
    }
    mt_lineout_set_json(s->out, s->o.latency_json);
    return 0;
}

static void reopen_latency(mt_server *s)
{
    if (!s->o.latency_log)
        return;
    int fd = open_log_fd(s->o.latency_log);
    if (fd < 0) {
        slog(s, "SIGHUP: reopen %s: %s (keeping the old one)", s->o.latency_log, strerror(errno));
        return;
    }
    mt_lineout_set_fd(s->out, fd, 1);
    slog(s, "SIGHUP: reopened %s", s->o.latency_log);
}

/* Drops on the machine stream, told to the log by this thread, never by
 * the tick thread (the log may be the stream that is stalled). */
static void report_dropped_lines(mt_server *s, uint64_t now, uint64_t every)
{
    char msg[256];
    if (s->out && mt_lineout_report(s->out, now, every, msg, sizeof msg))
        slog(s, "%s", msg);
}

/* The connection cap must fit the descriptor limit, or accept fails with
 * EMFILE while the cap still lets connections in: raise the soft limit
 * toward the hard one and, where that is not enough, lower the cap. */
static void fit_fd_limit(mt_server *s)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    rlim_t need = (rlim_t)s->o.max_conns + FD_RESERVE;
    if (rl.rlim_cur >= need)
        return;
    rlim_t want = need;
    if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max)
        want = rl.rlim_max;
    if (want > rl.rlim_cur) {
        struct rlimit nr = {.rlim_cur = want, .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &nr) == 0) {
            slog(s, "descriptor limit raised from %llu to %llu",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)want);
            rl.rlim_cur = want;
        }
    }
    if (rl.rlim_cur >= need)
        return;
    int fit = rl.rlim_cur > FD_RESERVE + 2 ? (int)(rl.rlim_cur - FD_RESERVE) : 2;
    slog(s, "descriptor limit %llu (hard %llu) cannot hold %d connections: "
         "the connection cap is %d (raise ulimit -n for more)",
         (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
         s->o.max_conns, fit);
    s->o.max_conns = fit;
}

static int ep_add(mt_server *s, int fd, uint32_t ev, void *ptr)
{
    struct epoll_event e = {.events = ev, .data.ptr = ptr};
    return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e);
}

/* --listen and --agent. A TCP port is reachable from wherever its address
 * is: off loopback, nobody may connect without the token unless the
 * operator said --insecure, and then the log says so. */
static int open_tcp(mt_server *s, char *err, size_t errlen)
{
    int loop = 0;
    s->tcp_fd = mt_tcp_listen(s->o.listen_addr, &loop, s->tcp_name,
                              sizeof s->tcp_name, err, errlen);
    if (s->tcp_fd < 0)
        return -1;
    if (!loop && !s->o.token && !s->o.insecure) {
        mt_set_err(err, errlen, "--listen %s is not a loopback address: anyone who "
                 "can reach it could send audio; give --token-file FILE (clients "
                 "then need the same token), or --insecure to allow it "
                 "unauthenticated", s->o.listen_addr);
        return -1;
    }
    if (!loop && !s->o.token)
        slog(s, "WARNING: --insecure: listening on %s without a token: anyone "
             "who can reach it may connect", s->tcp_name);
    slog(s, "listening on tcp %s%s", s->tcp_name,
         s->o.token ? " (token required)" : "");
    return 0;
}

static int open_agent(mt_server *s, char *err, size_t errlen)
{
    int loop = 0;
    s->agent_fd = mt_tcp_listen(s->o.agent_addr, &loop, s->agent_name,
                                sizeof s->agent_name, err, errlen);
    if (s->agent_fd < 0)
        return -1;
    slog(s, "agent-check on tcp %s", s->agent_name);
    return 0;
}

int mt_server_create(const mt_server_opts *o, mt_server **out, char *err, size_t errlen)
{
    *out = NULL;
    mt_server *s = mt_calloc_or_err(1, sizeof *s, err, errlen, NULL);
    if (!s)
        return -1;
    s->o = *o;
    s->spare_fd = -1;
    if (s->o.max_conns <= 0)
        s->o.max_conns = MAX_CONNS_PER_SESSION * s->o.max_sessions + 16;
    if (s->o.hello_timeout_ns == 0)
        s->o.hello_timeout_ns = 10000000000ull;
    s->sig_wfd = -1;
    s->sigfd = s->evfd = s->epfd = -1;
    s->lis.fd = s->ctl.fd = s->ctl.keep_wfd = -1;
    s->tcp_fd = s->agent_fd = -1;
    s->t_listen_tcp.tag = TAG_LISTEN_TCP;
    s->t_agent.tag = TAG_AGENT;
    s->t_listen.tag = TAG_LISTEN;
    s->t_signal.tag = TAG_SIGNAL;
    s->t_event.tag = TAG_EVENT;
    s->t_control.tag = TAG_CONTROL;

    /* Signals: SIGPIPE ignored (a peer gone is a write error); TERM, INT
     * and HUP run a handler that writes the signal number to a pipe the
     * event loop watches. A handler, not a signalfd: threads started
     * before us (OpenBLAS starts its pool when it loads) do not block
     * signals, and one of them may be the thread that receives it. */
    signal(SIGPIPE, SIG_IGN);
    int sp[2];
    if (pipe2(sp, O_NONBLOCK | O_CLOEXEC) != 0) {
        mt_set_err(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    s->sigfd = sp[0];
    s->sig_wfd = sp[1];
    sig_pipe_w = sp[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->sigfd < 0 || s->evfd < 0 || s->epfd < 0) {
        mt_set_err(err, errlen, "eventfd/epoll: %s", strerror(errno));
        goto fail;
    }
    if (open_latency(s, err, errlen) != 0)
        goto fail;
    if (!o->stdio) {
        if (!o->socket_path && !o->listen_addr) {
            mt_set_err(err, errlen, "no socket path (-s PATH), no --listen and not --stdio");
            goto fail;
        }
        if (o->listen_addr && open_tcp(s, err, errlen) != 0)
            goto fail;
        if (o->socket_path &&
            mt_net_listen(o->socket_path, o->socket_mode, &s->lis, err, errlen) != 0)
            goto fail;
        if (s->lis.stale_removed)
            slog(s, "removed stale socket %s", o->socket_path);
        fit_fd_limit(s);
        if (s->o.max_pending_per_uid <= 0)
            s->o.max_pending_per_uid = s->o.max_conns / 2 > 0 ? s->o.max_conns / 2 : 1;
        /* Held in reserve: when accept fails for want of a descriptor, this
         * one is given up to accept the connection, tell it why and close
         * it; otherwise the pending connection keeps the listener readable
         * and the loop spins. */
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (o->control_path && mt_net_open_control(o->control_path, &s->ctl, err, errlen) != 0)
        goto fail;
    if (o->agent_addr && open_agent(s, err, errlen) != 0)
        goto fail;
    if (ep_add(s, s->sigfd, EPOLLIN, &s->t_signal) != 0 ||
        ep_add(s, s->evfd, EPOLLIN, &s->t_event) != 0 ||
        (s->lis.fd >= 0 && ep_add(s, s->lis.fd, EPOLLIN, &s->t_listen) != 0) ||
        (s->tcp_fd >= 0 && ep_add(s, s->tcp_fd, EPOLLIN, &s->t_listen_tcp) != 0) ||
        (s->agent_fd >= 0 && ep_add(s, s->agent_fd, EPOLLIN, &s->t_agent) != 0) ||
        (s->ctl.fd >= 0 && ep_add(s, s->ctl.fd, EPOLLIN, &s->t_control) != 0)) {
        mt_set_err(err, errlen, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    *out = s;
    return 0;
fail:
    mt_server_free(s);
    return -1;
}

void mt_server_free(mt_server *s)
{
    if (!s)
        return;
    while (s->conns) {
        conn *c = s->conns;
        s->conns = c->next;
        if (c->rfd > 2)
            close(c->rfd);
        if (c->wfd != c->rfd && c->wfd > 2)
            close(c->wfd);
        free(c);
    }
    mt_net_listener_close(&s->lis);
    if (s->tcp_fd >= 0) close(s->tcp_fd);
    if (s->agent_fd >= 0) close(s->agent_fd);
    if (s->sigfd >= 0) {
        sig_pipe_w = -1;
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        close(s->sigfd);
    }
    if (s->sig_wfd >= 0) close(s->sig_wfd);
    if (s->spare_fd >= 0) close(s->spare_fd);
    if (s->evfd >= 0) close(s->evfd);
    mt_net_control_close(&s->ctl);
    if (s->epfd >= 0) close(s->epfd);
    if (s->out) {
        char msg[256];
        report_dropped_lines(s, mt_clock_ns(), 0);
        mt_lineout_close(s->out, LINE_FLUSH_NS, msg, sizeof msg);
        if (msg[0])
            slog(s, "%s", msg);
    }
    free(s);
}

/* ---- connections ---------------------------------------------------------- */

static conn *conn_new(mt_server *s, int rfd, int wfd, int is_socket)
{
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->tag = TAG_CONN;
    c->rfd = rfd;
    c->wfd = wfd;
    c->is_socket = is_socket;
    c->t_created = mt_clock_ns();
    mt_proto_conn_init(&c->p);
    c->next = s->conns;
    s->conns = c;
    s->nconns++;
    if (rfd == wfd) {
        c->ev_r = EPOLLIN;
        if (ep_add(s, rfd, EPOLLIN, c) == 0)
            c->r_epoll = c->w_epoll = 1;
    } else {
        c->ev_r = EPOLLIN;
        c->r_epoll = ep_add(s, rfd, EPOLLIN, c) == 0;
        c->ev_w = 0;
        struct epoll_event e = {.events = 0, .data.ptr = c};
        c->w_epoll = epoll_ctl(s->epfd, EPOLL_CTL_ADD, wfd, &e) == 0;
    }
    return c;
}

/* Registers what c wants now: input while reading (and, in stdio mode,
 * while its queue has room), output while bytes wait. */
static void conn_update_events(mt_server *s, conn *c, int want_r, int want_w)
{
    uint32_t r = want_r ? EPOLLIN : 0, w = want_w ? EPOLLOUT : 0;
    if (c->rfd == c->wfd) {
        if (c->r_epoll && (c->ev_r | c->ev_w) != (r | w)) {
            struct epoll_event e = {.events = r | w, .data.ptr = c};
            epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->rfd, &e);
        }
        c->ev_r = r;
        c->ev_w = w;
        return;
    }
    if (c->r_epoll && c->ev_r != r) {
        struct epoll_event e = {.events = r, .data.ptr = c};
        epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->rfd, &e);
    }
    if (c->w_epoll && c->ev_w != w) {
        struct epoll_event e = {.events = w, .data.ptr = c};
        epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->wfd, &e);
    }
    c->ev_r = r;
    c->ev_w = w;
}

static void conn_free(mt_server *s, conn *c, const char *why)
{
    if (c->p.id) {
        mt_engine_close(s->eng, c->p.id);
        if (why)
            slog(s, "session %u: closed: %s", c->p.id, why);
    } else if (why && c->p.is_tcp && c->p.bytes_in == 0 &&
               !strcmp(why, "disconnected")) {
        /* a health check (HAProxy's connect-and-close): not news */
    } else if (why && c->p.is_tcp) {
        slog(s, "connection from %s: closed: %s", c->p.peer, why);
    } else if (why) {
        slog(s, "connection (uid %d): closed: %s", (int)c->p.uid, why);
    }
    if (c->r_epoll)
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
    if (c->w_epoll && c->wfd != c->rfd)
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->wfd, NULL);
    if (c->is_socket) {
        close(c->rfd);
    }
    for (conn **p = &s->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    s->nconns--;
    free(c);
}

/* --stdio input ended. EOF is an implicit END: what was queued is still
 * answered, then END follows. A frame cut short by the EOF is a counted
 * miss and a log line, and a stream without its END (or cut inside a
 * frame) makes the exit status 1. Returns -1 when c was freed. */
static int stdio_eof(mt_server *s, conn *c, int truncated)
{
    if (c->r_epoll && c->rfd != c->wfd) {
        /* a pipe at EOF stays readable (HUP): off the list, or it spins */
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
        c->r_epoll = 0;
    }
    c->p.reading = 0;
    if (!c->p.id) {
        if (!truncated) {      /* nothing at all: an empty session */
            conn_free(s, c, NULL);
            return -1;
        }
        s->stdio_unclean = 1;
        snprintf(s->stdio_msg, sizeof s->stdio_msg, "stdin ended inside the HELLO frame");
        conn_free(s, c, "stdin ended inside the HELLO frame");
        return -1;
    }
    if (truncated) {
        if (!c->p.pending)
            mt_engine_count_lost_input(s->eng);
        slog(s, "session %u: stdin ended inside a frame: that frame is a "
             "counted miss", c->p.id);
    }
    s->stdio_unclean = 1;
    snprintf(s->stdio_msg, sizeof s->stdio_msg, "session %u: stdin ended without "
             "END%s (taken as END: queued inputs answered)", c->p.id,
             truncated ? ", inside a frame" : "");
    if (c->p.pending) {
        mt_proto_reject(&s->pr, &c->p, "input ended before the admission decision", 0, mt_clock_ns());
        return 0;
    }
    slog(s, "session %u: stdin ended without END: taken as END", c->p.id);
    mt_engine_input_end(s->eng, c->p.id);
    return 0;
}

/* Reads what is there; returns -1 when c was freed. */
static int conn_read(mt_server *s, conn *c)
{
    for (int rounds = 0; rounds < 16 && c->p.reading; rounds++) {
        size_t cap = RBUF_CAP;
        if (s->o.stdio) {
            /* backpressure: read no more whole frames than the input queue
             * takes (one at a time before admission) */
            int space = 1;
            if (c->p.pending)
                return 0;   /* nothing past HELLO until the decision */
            if (c->p.id) {
                space = mt_engine_in_space(s->eng, c->p.id);
                if (space <= 0)
                    return 0;
            }
            size_t fb = MT_FRAME_HEADER_SIZE + (size_t)s->frame_payload;
            size_t want = mt_frame_decoder_need(&c->p.dec) + (size_t)(space - 1) * fb;
            if (!c->p.id)
                want = mt_frame_decoder_need(&c->p.dec);
            if (want < cap)
                cap = want;
        }
        ssize_t n = read(c->rfd, s->rbuf, cap);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            char why[128];
            snprintf(why, sizeof why, "read: %s", strerror(errno));
            conn_free(s, c, why);
            return -1;
        }
        if (n == 0) {
            int fr = mt_frame_decoder_finish(&c->p.dec);
            if (!c->is_socket)
                return stdio_eof(s, c, fr == MT_FERR_TRUNCATED);
            conn_free(s, c, fr == MT_FERR_TRUNCATED ? "disconnected mid-frame"
                                                    : "disconnected");
            return -1;
        }
        mt_proto_input(&s->pr, &c->p, s->rbuf, (size_t)n, mt_clock_ns());
        if (!c->p.reading && !c->is_socket && c->r_epoll && c->rfd != c->wfd) {
            /* input over (END, or a failure): a pipe at EOF would stay
             * readable (HUP) and spin the loop */
            epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
            c->r_epoll = 0;
        }
        if ((size_t)n < cap)
            return 0;
    }
    return 0;
}

/* Moves output from the engine to the client; closes what is finished or
 * stuck. Returns -1 when c was freed. */
static int conn_write(mt_server *s, conn *c, uint64_t now)
{
    for (;;) {
        if (c->p.wlen == 0) {
            c->p.woff = 0;
            if (c->p.id)
                c->p.wlen = mt_engine_take(s->eng, c->p.id, c->p.wbuf, MT_PROTO_WBUF_CAP);
            if (c->p.wlen == 0)
                break;
        }
        ssize_t n = c->is_socket
            ? send(c->wfd, c->p.wbuf + c->p.woff, c->p.wlen, MSG_NOSIGNAL | MSG_DONTWAIT)
            : write(c->wfd, c->p.wbuf + c->p.woff, c->p.wlen);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            char why[128];
            snprintf(why, sizeof why, "write: %s", strerror(errno));
            conn_free(s, c, why);
            return -1;
        }
        c->p.woff += (size_t)n;
        c->p.wlen -= (size_t)n;
        c->stuck_since = 0;
    }
    mt_proto_auth_due(&c->p, now);
    if (!c->p.id && !c->p.closing && c->is_socket && !c->p.auth_reject_at &&
        now - c->t_created > s->o.hello_timeout_ns) {
        /* counted, not logged one by one: idle connections come in crowds */
        char why[96];
        snprintf(why, sizeof why, "no HELLO within %.1f s",
                 (double)s->o.hello_timeout_ns / 1e9);
        s->n_timeout++;
        mt_proto_direct(&c->p, MT_FRAME_ERROR, 0, why, now);
        return 0;
    }
    mt_sess_status st = {0};
    if (c->p.id)
        mt_engine_status(s->eng, c->p.id, &st);
    int waiting = c->p.wlen > 0 || st.out_bytes > 0;
    if (st.overflow) {
        conn_free(s, c, "output queue overflowed: the client does not read");
        return -1;
    }
    if (waiting) {
        if (!c->stuck_since)
            c->stuck_since = now;
        else if (now - c->stuck_since > s->o.write_timeout_ns) {
            char why[128];
            snprintf(why, sizeof why, "no output accepted for %.1f s: the client "
                     "does not read", (double)(now - c->stuck_since) / 1e9);
            conn_free(s, c, why);
            return -1;
        }
    } else {
        c->stuck_since = 0;
        if ((c->p.id && st.ended) || (c->p.closing && !c->p.id)) {
            conn_free(s, c, NULL);
            return -1;
        }
        if (c->p.closing && c->p.id && !st.known) {
            conn_free(s, c, NULL);
            return -1;
        }
    }
    if (c->p.closing && c->p.close_deadline && now > c->p.close_deadline) {
        conn_free(s, c, "closing: output not taken in time");
        return -1;
    }
    int want_r = c->p.reading;
    if (want_r && s->o.stdio && c->p.id &&
        (c->p.pending || mt_engine_in_space(s->eng, c->p.id) <= 0))
        want_r = 0;
    conn_update_events(s, c, want_r, c->p.wlen > 0);
    return 0;
}

/* A REJECT frame straight onto a socket the server is about to close;
 * a fresh socket's buffer takes it without waiting. */
static void reject_and_close(int fd, const char *reason)
{
    uint8_t buf[MT_FRAME_HEADER_SIZE + MT_REASON_MAX];
    mt_frame f = {0};
    f.type = MT_FRAME_REJECT;
    f.t_send = mt_clock_ns();
    f.length = (uint32_t)strlen(reason);
    f.payload = (const uint8_t *)reason;
    long n = mt_frame_encode(&f, buf, sizeof buf);
    if (n > 0 && send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the peer is gone or not reading: closing is all that is left */
    }
    close(fd);
}

/* Connections that have not been admitted yet (before HELLO, or waiting
 * for the controller), of one uid. */
static int pending_of_uid(const mt_server *s, uid_t uid)
{
    int n = 0;
    for (const conn *c = s->conns; c; c = c->next)
        if (c->is_socket && !c->p.is_tcp && !c->p.closing && c->p.uid == uid &&
            (!c->p.id || c->p.pending))
            n++;
    return n;
}

/* TCP has no uid: the peer address (without the port) takes its place. */
static int pending_of_host(const mt_server *s, const char *host)
{
    int n = 0;
    char h[64];
    for (const conn *c = s->conns; c; c = c->next) {
        if (!c->p.is_tcp || c->p.closing || (c->p.id && !c->p.pending))
            continue;
        mt_proto_peer_host(&c->p, h, sizeof h);
        if (!strcmp(h, host))
            n++;
    }
    return n;
}

/* The oldest connection that has sent nothing (no HELLO), of uid or of
 * anyone (uid_any): the first to go when a place is needed. One connected
 * a moment ago is spared: a crowd of clients connecting together would
 * otherwise evict each other before any of them could say HELLO. */
static conn *oldest_idle(mt_server *s, int uid_any, uid_t uid)
{
    conn *best = NULL;
    uint64_t now = mt_clock_ns();
    uint64_t min_idle = EVICT_MIN_IDLE_NS < s->o.hello_timeout_ns
                        ? EVICT_MIN_IDLE_NS : s->o.hello_timeout_ns;
    for (conn *c = s->conns; c; c = c->next)
        if (c->is_socket && !c->p.id && !c->p.closing && c->p.wlen == 0 &&
            now - c->t_created >= min_idle &&
            (uid_any || c->p.uid == uid) &&
            (!best || c->t_created < best->t_created))
            best = c;
    return best;
}

static void evict(mt_server *s, conn *c, const char *reason)
{
    s->n_evicted++;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
    c->r_epoll = c->w_epoll = 0;
    int fd = c->rfd;
    c->is_socket = 0;        /* conn_free must not close it: we do */
    conn_free(s, c, NULL);
    reject_and_close(fd, reason);
}

/* Connections that are closing still hold a descriptor, but only for a
 * moment (their last frame is small); the cap counts the others. */
static int live_conns(const mt_server *s)
{
    int n = 0;
    for (const conn *c = s->conns; c; c = c->next)
        if (!c->p.closing)
            n++;
    return n;
}

/* Out of descriptors: accept the connection on the spare descriptor, say
 * why, close it, and take the spare back. Without a spare (it could not
 * be reopened), stop accepting for a moment instead. Either way the
 * pending connection no longer wakes the loop at once. */
static void accept_without_fd(mt_server *s, int lfd, int err, uint64_t now)
{
    s->n_nofd++;
    s->nofd_errno = err;
    if (s->spare_fd >= 0) {
        close(s->spare_fd);
        s->spare_fd = -1;
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            reject_and_close(fd, "server out of file descriptors; try again later");
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && s->spare_fd >= 0)
            return;
    }
    if (!s->accept_paused_until) {
        if (s->lis.fd >= 0)
            epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lis.fd, NULL);
        if (s->tcp_fd >= 0)
            epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->tcp_fd, NULL);
        s->accept_paused_until = now + ACCEPT_PAUSE_NS;
    }
}

/* Refusals and evictions come in crowds under attack: one line per
 * CONN_REPORT_NS with the counts, never one per connection. */
static void report_conns(mt_server *s, uint64_t now, int force)
{
    if (!s->n_refused && !s->n_evicted && !s->n_nofd && !s->n_timeout)
        return;
    if (!force && s->last_conn_report && now - s->last_conn_report < CONN_REPORT_NS)
        return;
    char nofd[96] = "";
    if (s->n_nofd)
        snprintf(nofd, sizeof nofd, ", %llu accepted only to be closed (%s)",
                 (unsigned long long)s->n_nofd, strerror(s->nofd_errno));
    slog(s, "connections: %llu refused over the cap (%d), %llu idle ones "
         "evicted for newer ones, %llu closed without HELLO%s",
         (unsigned long long)s->n_refused, s->o.max_conns,
         (unsigned long long)s->n_evicted, (unsigned long long)s->n_timeout, nofd);
    s->n_refused = s->n_evicted = s->n_nofd = s->n_timeout = 0;
    s->last_conn_report = now;
}

static void on_accept(mt_server *s, int lfd, int is_tcp)
{
    for (int rounds = 0; rounds < 256 && !s->accept_paused_until; rounds++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                accept_without_fd(s, lfd, errno, mt_clock_ns());
                continue;
            }
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                slog(s, "accept: %s", strerror(errno));
            return;
        }
        struct ucred cr;
        socklen_t cl = sizeof cr;
        memset(&cr, 0, sizeof cr);
        char peer[64] = "", host[64] = "";
        if (is_tcp) {
            cr.uid = (uid_t)-1;
            cr.pid = 0;
            mt_sockaddr_str((struct sockaddr *)&ss, sl, peer, sizeof peer);
            snprintf(host, sizeof host, "%s", peer);
            char *colon = strrchr(host, ':');
            if (colon)
                *colon = '\0';
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        } else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) {
            cr.uid = (uid_t)-1;
        }
        if (s->o.sndbuf > 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &s->o.sndbuf, sizeof s->o.sndbuf);
        if (is_tcp && pending_of_host(s, host) >= s->o.max_pending_per_uid) {
            char why[160];
            snprintf(why, sizeof why, "too many connections waiting for "
                     "admission from %s (--max-pending-per-uid %d)", host,
                     s->o.max_pending_per_uid);
            s->n_refused++;
            reject_and_close(fd, why);
            continue;
        }
        /* One uid's connections not yet admitted are capped: past that, its
         * own oldest idle one makes room (never another user's). */
        if (!is_tcp && pending_of_uid(s, cr.uid) >= s->o.max_pending_per_uid) {
            conn *v = oldest_idle(s, 0, cr.uid);
            if (!v) {
                char why[128];
                snprintf(why, sizeof why, "too many connections waiting for "
                         "admission from uid %d (--max-pending-per-uid %d)",
                         (int)cr.uid, s->o.max_pending_per_uid);
                s->n_refused++;
                reject_and_close(fd, why);
                continue;
            }
            evict(s, v, "closed: no HELLO, and a newer connection of the same "
                  "uid needed the place");
        }
        /* At the cap, the oldest connection that never sent HELLO makes
         * room, so that a client which sends HELLO promptly is answered. */
        if (live_conns(s) >= s->o.max_conns) {
            conn *v = oldest_idle(s, 1, 0);
            if (!v) {
                char why[128];
                snprintf(why, sizeof why, "server full: %d connections "
                         "(--max-conns)", s->o.max_conns);
                s->n_refused++;
                reject_and_close(fd, why);
                continue;
            }
            evict(s, v, "closed: no HELLO, and the server is at its "
                  "connection cap");
        }
        conn *c = conn_new(s, fd, fd, 1);
        if (!c) {
            s->n_refused++;
            reject_and_close(fd, "server out of memory");
            continue;
        }
        c->p.uid = cr.uid;
        c->p.pid = cr.pid;
        c->p.is_tcp = is_tcp;
        snprintf(c->p.peer, sizeof c->p.peer, "%s", peer);
    }
}

/* HAProxy's agent-check: one line, then close. maxconn is what this
 * instance will hold now; drain while SIGTERM's sessions finish (the agent
 * stays up, so HAProxy shows DRAIN, not a failure); down when a tick
 * failed. */
static void on_agent(mt_server *s)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        int fd = accept4(s->agent_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                slog(s, "agent: accept: %s", strerror(errno));
            return;
        }
        char failed[160], line[256];
        int n = mt_engine_published_limit(s->eng, failed, sizeof failed);
        if (failed[0]) {
            for (char *p = failed; *p; p++)   /* one line, no separators */
                if (*p == '\n' || *p == '\r' || *p == ',')
                    *p = ' ';
            snprintf(line, sizeof line, "down#decoder failed: %s\n", failed);
        } else if (s->pr.draining) {
            snprintf(line, sizeof line, "drain\n");
        } else if (n == 0) {
            /* maxconn:0 would mean "no limit" to HAProxy */
            snprintf(line, sizeof line, "up drain\n");
        } else {
            snprintf(line, sizeof line, "up ready maxconn:%d\n", n);
        }
        if (send(fd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            /* HAProxy gone already: nothing to tell */
        }
        close(fd);
    }
}

static conn *find_pending(mt_server *s, uint32_t id)
{
    for (conn *c = s->conns; c; c = c->next)
        if (c->p.id == id)
            return c;
    return NULL;
}

/* A controller's `shed ID reason` (issue 24): the admitted session ends
 * now with END (its queued inputs answered or counted as misses by the
 * engine), and the reason goes to the log and to a `shed session=ID t=S
 * reason=...` line on the machine stream, since END carries no payload. */
static void do_shed(mt_server *s, uint32_t id, const char *why)
{
    conn *c = find_pending(s, id);
    if (!c || c->p.pending || mt_engine_shed(s->eng, id) != 0) {
        slog(s, "control: shed %u: no such admitted session", id);
        return;
    }
    char reason[MT_REASON_MAX + 1];
    snprintf(reason, sizeof reason, "%s", why[0] ? why : "shed by the admission controller");
    mt_utf8_sanitize(reason);
    slog(s, "session %u: shed: %s", id, reason);
    c->p.reading = 0;   /* what the client sends after END is not an input */
    char buf[1024];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_flag(&w, "shed");
    mt_ll_u64(&w, "session", id);
    uint64_t now = mt_clock_ns();
    mt_ll_f(&w, "t", now >= s->o.t0 ? (double)(now - s->o.t0) / 1e9 : 0, 3);
    mt_ll_str(&w, "reason", reason);
    if (mt_ll_end(&w) > 0)
        mt_server_line(s, buf);
}

static void control_line(mt_server *s, const char *line, size_t len)
{
    mt_control ctl;
    char err[160];
    if (mt_control_parse(line, len, &ctl, err, sizeof err) != 0) {
        slog(s, "control: ignoring malformed line: %s (want 'accept ID', "
             "'reject ID reason', 'shed ID reason' or 'limit N')", err);
        return;
    }
    if (ctl.kind == MT_CONTROL_SHED) {
        do_shed(s, ctl.session, ctl.reason);
        return;
    }
    /* mt-admit also publishes its estimate as "limit N": not a decision
     * on any request, but a bound on what this instance publishes (the
     * agent-check's maxconn, the tick line's limit=). */
    if (ctl.kind == MT_CONTROL_LIMIT) {
        mt_engine_set_limit(s->eng, ctl.limit > INT32_MAX ? INT32_MAX : (int)ctl.limit);
        return;
    }
    if (ctl.kind == MT_CONTROL_NONE)
        return;
    const char *verb = ctl.kind == MT_CONTROL_ACCEPT ? "accept" : "reject";
    conn *c = find_pending(s, ctl.session);
    if (!c || !c->p.pending) {
        slog(s, "control: %s %u: no such pending session", verb, ctl.session);
        return;
    }
    if (ctl.kind == MT_CONTROL_ACCEPT) {
        mt_proto_admit(&s->pr, &c->p, mt_clock_ns());
        return;
    }
    mt_proto_reject(&s->pr, &c->p, ctl.reason[0] ? ctl.reason
                    : "refused by the admission controller; retry later", 0, mt_clock_ns());
}

static void on_control(mt_server *s)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(s->ctl.fd, buf, sizeof buf);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                slog(s, "control: read: %s", strerror(errno));
            return;
        }
        if (n == 0) {
            slog(s, "control: %s closed; pending requests will time out",
                 s->o.control_path);
            epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->ctl.fd, NULL);
            close(s->ctl.fd);
            s->ctl.fd = -1;   /* admission stays controlled: requests time out */
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            char ch = buf[i];
            if (ch == '\n') {
                if (!s->ctl_overlong)
                    control_line(s, s->ctlbuf, s->ctllen);
                else
                    slog(s, "control: ignoring a line longer than %d bytes",
                         MT_CONTROL_MAX_LINE);
                s->ctllen = 0;
                s->ctl_overlong = 0;
            } else if (s->ctllen < MT_CONTROL_MAX_LINE) {
                s->ctlbuf[s->ctllen++] = ch;
            } else {
                s->ctl_overlong = 1;
            }
        }
    }
}

static void begin_drain(mt_server *s, const char *why)
{
    if (s->pr.draining)
        return;
    s->pr.draining = 1;
    s->drain_deadline = mt_clock_ns() + s->o.drain_timeout_ns;
    slog(s, "%s: draining (no new sessions; finishing in-flight frames)", why);
    if (s->lis.fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lis.fd, NULL);
        mt_net_listener_close(&s->lis);
    }
    /* The TCP listener stays open: HAProxy's health check keeps passing
     * (the agent says drain, so it shows DRAIN, not DOWN), and a client
     * routed here before it noticed gets REJECT "server shutting down; ...", a
     * reason, rather than a refused connection. */
    for (conn *c = s->conns; c; c = c->next) {
        if (c->p.pending)
            mt_proto_reject(&s->pr, &c->p, "server shutting down; not taking new sessions", 0, mt_clock_ns());
        else if (s->o.drain_sessions && c->p.id && c->p.reading)
            continue;   /* --drain sessions: it ends when its client ends it */
        c->p.reading = 0;
    }
    if (!s->o.drain_sessions)
        mt_engine_drain(s->eng);
}

static void on_signal(mt_server *s)
{
    unsigned char b[64];
    ssize_t n;
    while ((n = read(s->sigfd, b, sizeof b)) > 0)
        for (ssize_t i = 0; i < n; i++) {
            if (b[i] == SIGHUP)
                reopen_latency(s);
            else
                begin_drain(s, b[i] == SIGTERM ? "SIGTERM" : "SIGINT");
        }
}

/* Wires the protocol state to the engine and the options; in stdio mode,
 * the one connection on fds 0 and 1. */
static int server_setup(mt_server *s, mt_engine *e, char *err, size_t errlen)
{
    s->eng = e;
    s->pr.eng = e;
    s->pr.controlled = s->o.control_path != NULL;
    s->pr.max_sessions = s->o.max_sessions;
    s->pr.admit_timeout_ns = s->o.admit_timeout_ns;
    s->pr.t0 = s->o.t0;
    s->pr.log = s->o.log;
    s->pr.log_ctx = s->o.log_ctx;
    s->pr.line = mt_server_line;
    s->pr.line_ctx = s;
    s->pr.token = s->o.token;
    s->pr.token_len = s->o.token_len;
    mt_hello fmt;
    mt_engine_format(e, &fmt);
    s->frame_payload = (int)fmt.frame_samples * 2;
    if (s->o.stdio) {
        if (mt_net_set_nonblock(0) != 0 || mt_net_set_nonblock(1) != 0) {
            mt_set_err(err, errlen, "stdio: O_NONBLOCK: %s", strerror(errno));
            return -1;
        }
        conn *c = conn_new(s, 0, 1, 0);
        if (!c) {
            mt_set_err(err, errlen, "out of memory");
            return -1;
        }
        c->p.uid = getuid();
        c->p.pid = getpid();
    }
    return 0;
}

/* The epoll timeout in ms: the loop wakes for the earliest of a FILL
 * deadline, an admission deadline, an auth REJECT, the listener's pause,
 * or in 100 ms at the latest (stuck-output and drain checks); 0 when a
 * regular file on stdin has input to take. */
static int wait_timeout_ms(mt_server *s, uint64_t now, uint64_t next_fill)
{
    uint64_t wake = now + 100000000ull;
    if (next_fill && next_fill < wake)
        wake = next_fill;
    if (s->accept_paused_until && s->accept_paused_until < wake)
        wake = s->accept_paused_until;
    int poll_now = 0;
    for (conn *c = s->conns; c; c = c->next) {
        if (c->p.pending && c->p.admit_deadline < wake)
            wake = c->p.admit_deadline;
        if (c->p.auth_reject_at && c->p.auth_reject_at < wake)
            wake = c->p.auth_reject_at;
        if (c->p.reading && !c->r_epoll &&
            (!c->p.id || (!c->p.pending && mt_engine_in_space(s->eng, c->p.id) > 0)))
            poll_now = 1;   /* a regular file on stdin, with room */
    }
    return poll_now ? 0 : wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
}

/* Events on the server's own fds (listeners, agent, signals, the ticker's
 * eventfd, control). Each ticker wake counts down *final_ticks; the last
 * one sets *stdio_done. */
static void dispatch_server_events(mt_server *s, const struct epoll_event *evs,
                                   int n, int *final_ticks, int *stdio_done)
{
    for (int i = 0; i < n; i++) {
        tagged *t = evs[i].data.ptr;
        if (t->tag == TAG_LISTEN) {
            on_accept(s, s->lis.fd, 0);
        } else if (t->tag == TAG_LISTEN_TCP) {
            on_accept(s, s->tcp_fd, 1);
        } else if (t->tag == TAG_AGENT) {
            on_agent(s);
        } else if (t->tag == TAG_SIGNAL) {
            on_signal(s);
        } else if (t->tag == TAG_EVENT) {
            uint64_t v;
            if (read(s->evfd, &v, sizeof v) < 0 && errno != EAGAIN)
                slog(s, "eventfd: %s", strerror(errno));
            else if (*final_ticks && --*final_ticks == 0)
                *stdio_done = 1;
        } else if (t->tag == TAG_CONTROL) {
            on_control(s);
        }
    }
}

/* Client input: the events refer to conns that may be freed while
 * handling others, so walk the list and read those flagged; then read
 * the conns epoll cannot watch (a regular file on stdin). */
static void dispatch_conn_events(mt_server *s, const struct epoll_event *evs,
                                 int n)
{
    for (int i = 0; i < n; i++) {
        tagged *t = evs[i].data.ptr;
        if (t->tag != TAG_CONN)
            continue;
        for (conn *c = s->conns; c; c = c->next)
            if ((tagged *)c == t) {
                if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && c->p.reading)
                    conn_read(s, c);
                else if ((evs[i].events & (EPOLLHUP | EPOLLERR)) && !c->p.reading &&
                         !(evs[i].events & EPOLLOUT) && c->is_socket) {
                    /* peer gone while we no longer read (after END) */
                    conn_free(s, c, "disconnected");
                }
                break;
            }
    }
    for (conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (c->p.reading && !c->r_epoll)
            if (conn_read(s, c) < 0)
                continue;
    }
}

/* Per-iteration housekeeping: reports, resuming a paused listener,
 * admission deadlines, and the writes to every connection. */
static void housekeeping(mt_server *s, uint64_t now)
{
    report_dropped_lines(s, now, DROP_REPORT_NS);
    report_conns(s, now, 0);
    if (s->accept_paused_until && now >= s->accept_paused_until) {
        s->accept_paused_until = 0;
        if (s->lis.fd >= 0 && ep_add(s, s->lis.fd, EPOLLIN, &s->t_listen) != 0)
            slog(s, "epoll_ctl (listener): %s", strerror(errno));
        if (s->tcp_fd >= 0 && ep_add(s, s->tcp_fd, EPOLLIN, &s->t_listen_tcp) != 0)
            slog(s, "epoll_ctl (tcp listener): %s", strerror(errno));
    }
    for (conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (c->p.pending && now >= c->p.admit_deadline) {
            mt_proto_reject(&s->pr, &c->p, "no answer from the admission controller in "
                            "time; retry later", 0, now);
        }
        conn_write(s, c, now);
    }
}

/* Whether the loop is over: the stdio session ended and its final tick
 * records went out, or a drain finished (or timed out). Starts the stdio
 * drain when its one session is over. */
static int loop_done(mt_server *s, uint64_t now, int *final_ticks,
                     int stdio_done)
{
    if (s->o.stdio && !s->conns && !s->pr.draining) {
        /* the one session is over; one more tick record carries its
         * last counts (misses included) before we stop */
        s->pr.draining = 1;
        s->drain_deadline = now + 2 * s->o.frame_ns + 100000000ull;
        *final_ticks = 2;
        return 0;
    }
    if (*final_ticks && now > s->drain_deadline)
        return 1;
    if (stdio_done)
        return 1;
    if (s->pr.draining && !*final_ticks && (!s->conns || now > s->drain_deadline)) {
        if (s->conns)
            slog(s, "drain timeout: closing %d connection(s)", s->nconns);
        return 1;
    }
    return 0;
}

int mt_server_run(mt_server *s, mt_engine *e, char *err, size_t errlen)
{
    if (server_setup(s, e, err, errlen) != 0)
        return -1;
    mt_ticker *ticker = NULL;
    mt_ticker_opts to = {.eng = e, .t0 = s->o.t0, .period_ns = s->o.frame_ns,
                         .wake_fd = s->evfd, .log = s->o.log, .log_ctx = s->o.log_ctx};
    if (mt_ticker_start(&to, &ticker, err, errlen) != 0)
        return -1;
    int rc = 0;
    struct epoll_event evs[64];
    uint64_t next_fill = 0;
    int final_ticks = 0, stdio_done = 0;
    for (;;) {
        int timeout = wait_timeout_ms(s, mt_clock_ns(), next_fill);
        int n = epoll_wait(s->epfd, evs, 64, timeout);
        if (n < 0 && errno != EINTR) {
            mt_set_err(err, errlen, "epoll_wait: %s", strerror(errno));
            rc = -1;
            break;
        }
        dispatch_server_events(s, evs, n, &final_ticks, &stdio_done);
        dispatch_conn_events(s, evs, n);
        uint64_t now = mt_clock_ns();
        next_fill = mt_engine_fill_due(e, now);
        housekeeping(s, now);
        if (loop_done(s, now, &final_ticks, stdio_done))
            break;
    }
    mt_ticker_stop(ticker);
    report_conns(s, mt_clock_ns(), 1);
    while (s->conns)
        conn_free(s, s->conns, s->pr.draining ? NULL : "server stopping");
    if (rc == 0 && s->stdio_unclean) {
        mt_set_err(err, errlen, "%s", s->stdio_msg);
        rc = 1;
    }
    return rc;
}
