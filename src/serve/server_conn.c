/* server_conn.c: mt-serve's connections (server_int.h): accepting them
 * (the caps per uid, per address and in all, eviction of the oldest idle
 * one, running out of descriptors), reading a client's bytes into its
 * protocol state (proto.c), writing the engine's output back, the stuck
 * and HELLO timeouts, and closing. Refusals are counted and reported in
 * one line per interval, never one per connection.
 */
#define _GNU_SOURCE
#include "serve/server_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/ticker.h"
#include "wire/endpoint.h"

/* A socket is watched edge-triggered: epoll reports it when bytes come,
 * not again at every wait while some are left, which spares a poll of
 * the socket per frame; so a read takes everything there (a short read,
 * or EAGAIN; to the end of stream once the peer shut its side, which
 * EPOLLRDHUP says), or, cut short on purpose, re-arms (conn_rearm). Pipes and
 * files (--stdio) stay level-triggered: their reads are paced by the
 * input queue's room. */
static uint32_t conn_et(const conn *c)
{
    return c->is_socket && c->rfd == c->wfd ? EPOLLET | EPOLLRDHUP : 0;
}

/* Input left in c's socket after a read that stopped early: registered
 * again, which reports it again at once (edge-triggered, a registration
 * reports what is already there). */
static void conn_rearm(mt_server *s, conn *c)
{
    if (!c->r_epoll)
        return;
    struct epoll_event e = {.events = c->ev_r | c->ev_w | conn_et(c), .data.ptr = c};
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->rfd, &e) != 0)
        slog(s, "epoll_ctl: %s", strerror(errno));
}

conn *mt_srv_conn_new(mt_server *s, int rfd, int wfd, int is_socket)
{
    /* not calloc: the protocol state's buffers stay untouched
     * (mt_proto_conn_init) */
    conn *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    memset(c, 0, offsetof(conn, p));
    c->next = c->prev = NULL;
    c->tag = TAG_CONN;
    c->rfd = rfd;
    c->wfd = wfd;
    c->is_socket = is_socket;
    c->t_created = mt_clock_ns();
    mt_timer_init(&c->tm);
    mt_proto_conn_init(&c->p);
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (rfd == wfd) {
        c->ev_r = EPOLLIN;
        if (ep_add(s, rfd, EPOLLIN | conn_et(c), c) == 0)
            c->r_epoll = c->w_epoll = 1;
    } else {
        c->ev_r = EPOLLIN;
        c->r_epoll = ep_add(s, rfd, EPOLLIN, c) == 0;
        c->ev_w = 0;
        struct epoll_event e = {.events = 0, .data.ptr = c};
        c->w_epoll = epoll_ctl(s->epfd, EPOLL_CTL_ADD, wfd, &e) == 0;
    }
    mt_srv_conn_arm(s, c);      /* its HELLO deadline */
    return c;
}

/* c's next deadline (0: none): what the checks of mt_srv_conn_write and
 * the loop's check_conn would act on, each a nanosecond past its time
 * (they test `>`). Without one, only c's own events and its output
 * (mt_engine_take_ready) call for it. */
static uint64_t conn_next_deadline(const mt_server *s, const conn *c)
{
    uint64_t d = 0;
#define EARLIEST(t) do { uint64_t t_ = (t); if (t_ && (!d || t_ < d)) d = t_; } while (0)
    if (c->p.pending)
        EARLIEST(c->p.admit_deadline);
    if (c->p.auth_reject_at)
        EARLIEST(c->p.auth_reject_at);
    if (!c->p.id && !c->p.closing && c->is_socket && !c->p.auth_reject_at)
        EARLIEST(c->t_created + s->o.hello_timeout_ns + 1);
    if (s->o.input_timeout_ns && c->is_socket && c->p.id && !c->p.pending &&
        c->p.reading)
        EARLIEST(c->p.last_input + s->o.input_timeout_ns + 1);
    if (c->stuck_since)
        EARLIEST(c->stuck_since + s->o.write_timeout_ns + 1);
    if (c->p.closing && c->p.close_deadline)
        EARLIEST(c->p.close_deadline + 1);
#undef EARLIEST
    return d;
}

/* Arms c's timer for its next deadline when that is earlier than the
 * one armed (or none is): a deadline that moved later (the input
 * timeout, after every frame) leaves the timer where it is, to fire
 * early, find nothing due, and be armed again; so a frame costs no heap
 * operation. Out of memory for the heap: the connection's timeouts are
 * then checked at its next event. */
void mt_srv_conn_arm(mt_server *s, conn *c)
{
    uint64_t d = conn_next_deadline(s, c);
    if (d && (c->tm.idx < 0 || d < c->tm.due) &&
        mt_timeheap_arm(&s->timers, &c->tm, d) != 0)
        slog(s, "out of memory for a connection's timer");
}

/* Registers what c wants now: input while reading (and, in stdio mode,
 * while its queue has room), output while bytes wait. */
static void conn_update_events(mt_server *s, conn *c, int want_r, int want_w)
{
    uint32_t r = want_r ? EPOLLIN : 0, w = want_w ? EPOLLOUT : 0;
    if (c->rfd == c->wfd) {
        if (c->r_epoll && (c->ev_r | c->ev_w) != (r | w)) {
            struct epoll_event e = {.events = r | w | conn_et(c), .data.ptr = c};
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

/* A socket error that means the client hung up (a closed socket, a reset):
 * logged in the one wording of a client that left, "disconnected", as
 * its end of input is, not as a fault. */
static int client_left(int e)
{
    return e == EPIPE || e == ECONNRESET;
}

void mt_srv_conn_free(mt_server *s, conn *c, const char *why)
{
    if (c->p.id) {
        mt_engine_close(s->eng, c->p.id);
        if (why && !c->p.quiet)
            slog(s, "session %u: closed: %s", c->p.id, why);
    } else if (why && c->p.is_tcp && c->p.bytes_in == 0 &&
               !strcmp(why, "disconnected")) {
        /* a health check (HAProxy's connect-and-close): not news */
    } else if (why && c->p.is_tcp) {
        slog(s, "connection from %s: closed: %s", c->p.peer, why);
    } else if (why) {
        slog(s, "connection (uid %d): closed: %s", (int)c->p.uid, why);
    }
    mt_proto_conn_release(&s->pr, &c->p);
    free(c->out.p);
    c->out.p = NULL;
    c->out.cap = c->out.off = c->out.len = 0;
    mt_timeheap_disarm(&s->timers, &c->tm);
    if (c->r_epoll)
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
    if (c->w_epoll && c->wfd != c->rfd)
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->wfd, NULL);
    if (c->is_socket) {
        close(c->rfd);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    c->dead = 1;
    c->prev = NULL;
    c->next = s->zombies;
    s->zombies = c;
}

/* Releases the connections freed during the batch just handled. */
void mt_srv_conn_reap(mt_server *s)
{
    while (s->zombies) {
        conn *c = s->zombies;
        s->zombies = c->next;
        free(c);
    }
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
            mt_srv_conn_free(s, c, NULL);
            return -1;
        }
        s->stdio_unclean = 1;
        snprintf(s->stdio_msg, sizeof s->stdio_msg, "stdin ended inside the HELLO frame");
        mt_srv_conn_free(s, c, "stdin ended inside the HELLO frame");
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

/* Reads what is there; returns -1 when c was freed. A short read took
 * all there was, but for a peer that has shut its side (events has
 * EPOLLRDHUP or EPOLLHUP): edge-triggered, its end of stream would not be
 * reported again, so it is read to the end now. */
int mt_srv_conn_read(mt_server *s, conn *c, uint32_t events)
{
    int to_end = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
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
        /* recv on a socket: read() would go through the file layer
         * (vfs_read, its position lock) for every frame */
        ssize_t n = c->is_socket ? recv(c->rfd, s->rbuf, cap, MSG_DONTWAIT)
                                 : read(c->rfd, s->rbuf, cap);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            char why[128];
            snprintf(why, sizeof why, "read: %s", strerror(errno));
            mt_srv_conn_free(s, c, client_left(errno) ? "disconnected" : why);
            return -1;
        }
        if (n == 0) {
            int fr = mt_frame_decoder_finish(&c->p.dec);
            if (!c->is_socket)
                return stdio_eof(s, c, fr == MT_FERR_TRUNCATED);
            mt_srv_conn_free(s, c, fr == MT_FERR_TRUNCATED ? "disconnected mid-frame"
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
        if ((size_t)n < cap && !to_end)
            return 0;
    }
    if (c->p.reading && c->is_socket)
        conn_rearm(s, c);      /* a flood: the rest at the next wake */
    return 0;
}

/* A connection held for a delayed REJECT (proto.c): what it sends is not
 * read as input, only drained, so that a peer that goes away is closed now
 * and holds nothing until its REJECT was due. Returns -1 when c was
 * freed. */
int mt_srv_conn_discard(mt_server *s, conn *c)
{
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = recv(c->rfd, s->rbuf, RBUF_CAP, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (n <= 0) {
            mt_srv_conn_free(s, c, NULL);   /* gone: not news */
            return -1;
        }
    }
    conn_rearm(s, c);
    return 0;
}

/* Moves output from the engine to the client; closes what is finished or
 * stuck. The direct frames go first (c->p.wbuf: a connection without a
 * session), then the engine's output, which one locked engine call hands
 * over with the session's status by trading buffers (no copy: a tick's
 * frame is sent from where the tick encoded it); a second call only when
 * more than MT_PROTO_WBUF_CAP bytes were queued, or when nothing could be
 * taken (the client not reading). Returns -1 when c was freed. */
static int conn_write(mt_server *s, conn *c, uint64_t now)
{
    mt_sess_status st = {0};
    int have_st = 0;
    for (;;) {
        uint8_t *p;
        size_t *off, *len;
        if (c->p.wlen > 0) {
            p = c->p.wbuf;
            off = &c->p.woff;
            len = &c->p.wlen;
        } else {
            c->p.woff = 0;
            if (c->out.len == 0) {
                if (!c->p.id || (have_st && st.out_bytes == 0))
                    break;
                mt_engine_take_swap(s->eng, c->p.id, &c->out, MT_PROTO_WBUF_CAP, &st);
                have_st = 1;
                if (c->out.len == 0)
                    break;
            }
            p = c->out.p;
            off = &c->out.off;
            len = &c->out.len;
        }
        ssize_t n = c->is_socket
            ? send(c->wfd, p + *off, *len, MSG_NOSIGNAL | MSG_DONTWAIT)
            : write(c->wfd, p + *off, *len);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            char why[128];
            snprintf(why, sizeof why, "write: %s", strerror(errno));
            mt_srv_conn_free(s, c, client_left(errno) ? "disconnected" : why);
            return -1;
        }
        *off += (size_t)n;
        *len -= (size_t)n;
        c->stuck_since = 0;
    }
    mt_proto_auth_due(&s->pr, &c->p, now);
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
    if (c->p.id && !have_st)
        mt_engine_status(s->eng, c->p.id, &st);
    int waiting = conn_unsent(c) > 0 || st.out_bytes > 0;
    if (st.overflow) {
        mt_srv_conn_free(s, c, "output queue overflowed: the client does not read");
        return -1;
    }
    if (waiting) {
        if (!c->stuck_since)
            c->stuck_since = now;
        else if (now - c->stuck_since > s->o.write_timeout_ns) {
            char why[128];
            snprintf(why, sizeof why, "no output accepted for %.1f s: the client "
                     "does not read", (double)(now - c->stuck_since) / 1e9);
            mt_srv_conn_free(s, c, why);
            return -1;
        }
    } else {
        c->stuck_since = 0;
        if ((c->p.id && st.ended) || (c->p.closing && !c->p.id)) {
            mt_srv_conn_free(s, c, NULL);
            return -1;
        }
        if (c->p.closing && c->p.id && !st.known) {
            mt_srv_conn_free(s, c, NULL);
            return -1;
        }
    }
    if (c->p.closing && c->p.close_deadline && now > c->p.close_deadline) {
        mt_srv_conn_free(s, c, "closing: output not taken in time");
        return -1;
    }
    /* held for a delayed REJECT: watched, so that a peer that goes away
     * is closed at once rather than at the REJECT */
    int want_r = c->p.reading || (c->p.auth_reject_at && c->is_socket);
    if (want_r && s->o.stdio && c->p.id &&
        (c->p.pending || mt_engine_in_space(s->eng, c->p.id) <= 0))
        want_r = 0;
    conn_update_events(s, c, want_r, conn_unsent(c) > 0);
    return 0;
}

int mt_srv_conn_write(mt_server *s, conn *c, uint64_t now)
{
    if (conn_write(s, c, now) != 0)
        return -1;
    mt_srv_conn_arm(s, c);
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
            !c->p.auth_reject_at && (!c->p.id || c->p.pending))
            n++;
    return n;
}

/* TCP has no uid: the peer address (without the port) takes its place. */
static int pending_of_host(const mt_server *s, const char *host)
{
    int n = 0;
    char h[64];
    for (const conn *c = s->conns; c; c = c->next) {
        if (!c->p.is_tcp || c->p.closing || c->p.auth_reject_at ||
            (c->p.id && !c->p.pending))
            continue;
        mt_proto_peer_host(&c->p, h, sizeof h);
        if (!strcmp(h, host))
            n++;
    }
    return n;
}

/* Whether c is an eviction candidate of the owner: no session, nothing
 * being sent, of that uid (Unix socket) or peer address (TCP), or of
 * anyone (any). */
static int idle_of(const conn *c, int any, int is_tcp, uid_t uid, const char *host)
{
    if (!c->is_socket || c->p.id || c->p.closing || conn_unsent(c) != 0)
        return 0;
    if (any)
        return 1;
    if (c->p.is_tcp != is_tcp || (!is_tcp && c->p.uid != uid))
        return 0;
    if (is_tcp) {
        char h[64];
        mt_proto_peer_host(&c->p, h, sizeof h);
        return !strcmp(h, host);
    }
    return 1;
}

/* The oldest connection without a session (no HELLO yet, or held for a
 * delayed REJECT) of one owner, or of anyone (any): the first to go when
 * a place is needed. One connected a moment ago is spared while an older
 * one is there: a crowd of clients connecting together would otherwise
 * evict each other before any of them could say HELLO. At the owner's
 * cap (young), the youngest are not spared: a crowd that reconnects
 * faster than that moment would otherwise keep every place, and a client
 * among it that says HELLO at once could never get in. A candidate whose
 * HELLO is already waiting in its socket is read, not evicted. */
static conn *oldest_idle(mt_server *s, int any, int young, int is_tcp,
                         uid_t uid, const char *host)
{
    uint64_t min_idle = EVICT_MIN_IDLE_NS < s->o.hello_timeout_ns
                        ? EVICT_MIN_IDLE_NS : s->o.hello_timeout_ns;
    for (int tries = 0; tries < 8; tries++) {
        uint64_t now = mt_clock_ns();
        conn *best = NULL, *best_young = NULL;
        for (conn *c = s->conns; c; c = c->next) {
            if (!idle_of(c, any, is_tcp, uid, host))
                continue;
            if (now - c->t_created >= min_idle) {
                if (!best || c->t_created < best->t_created)
                    best = c;
            } else if (!best_young || c->t_created < best_young->t_created) {
                best_young = c;
            }
        }
        if (!best && young)
            best = best_young;
        if (!best)
            return NULL;
        char b;
        if (!best->p.reading || recv(best->rfd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
            return best;
        if (mt_srv_conn_read(s, best, 0) == 0)   /* its HELLO came: no longer idle */
            mt_srv_conn_arm(s, best);         /* an admission deadline, maybe */
    }
    return NULL;
}

static void evict(mt_server *s, conn *c, const char *reason)
{
    s->n_evicted++;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
    c->r_epoll = c->w_epoll = 0;
    int fd = c->rfd;
    c->is_socket = 0;        /* mt_srv_conn_free must not close it: we do */
    mt_srv_conn_free(s, c, NULL);
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
void mt_srv_report_conns(mt_server *s, uint64_t now, int force)
{
    if (!s->n_refused && !s->n_refused_owner && !s->n_evicted && !s->n_nofd &&
        !s->n_timeout)
        return;
    if (!force && s->last_conn_report && now - s->last_conn_report < CONN_REPORT_NS)
        return;
    char nofd[96] = "";
    if (s->n_nofd)
        snprintf(nofd, sizeof nofd, ", %llu accepted only to be closed (%s)",
                 (unsigned long long)s->n_nofd, strerror(s->nofd_errno));
    slog(s, "connections: %llu refused at the connection cap (--max-conns %d), "
         "%llu at the cap of one uid or address (--max-pending-per-uid %d), "
         "%llu idle ones evicted for newer ones, %llu closed without HELLO%s",
         (unsigned long long)s->n_refused, s->o.max_conns,
         (unsigned long long)s->n_refused_owner, s->o.max_pending_per_uid,
         (unsigned long long)s->n_evicted, (unsigned long long)s->n_timeout, nofd);
    s->n_refused = s->n_refused_owner = s->n_evicted = s->n_nofd = s->n_timeout = 0;
    s->last_conn_report = now;
}

void mt_srv_on_accept(mt_server *s, int lfd, int is_tcp)
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
            /* keepalive: a peer that vanished (no FIN) is found within
             * about a minute even on a session --input-timeout spares */
            int one = 1, idle = 30, intvl = 10, cnt = 3;
            if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
                setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0 ||
                setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) != 0 ||
                setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) != 0 ||
                setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) != 0) {
                /* options only: the connection works without them */
            }
        } else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) {
            cr.uid = (uid_t)-1;
        }
        if (s->o.sndbuf > 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &s->o.sndbuf, sizeof s->o.sndbuf);
        /* One uid's (TCP: one address's) connections not yet admitted are
         * capped: past that, its own oldest idle one makes room (never
         * another's), so that a crowd of idle connections cannot keep a
         * client that says HELLO at once out. */
        if (is_tcp ? pending_of_host(s, host) >= s->o.max_pending_per_uid
                   : pending_of_uid(s, cr.uid) >= s->o.max_pending_per_uid) {
            conn *v = oldest_idle(s, 0, 1, is_tcp, cr.uid, host);
            if (!v) {
                char why[160];
                if (is_tcp)
                    snprintf(why, sizeof why, "too many connections waiting for "
                             "admission from %s (--max-pending-per-uid %d)", host,
                             s->o.max_pending_per_uid);
                else
                    snprintf(why, sizeof why, "too many connections waiting for "
                             "admission from uid %d (--max-pending-per-uid %d)",
                             (int)cr.uid, s->o.max_pending_per_uid);
                s->n_refused_owner++;
                reject_and_close(fd, why);
                continue;
            }
            evict(s, v, is_tcp ? "closed: no session, and a newer connection from "
                  "the same address needed the place"
                  : "closed: no HELLO, and a newer connection of the same "
                  "uid needed the place");
        }
        /* At the cap, the oldest connection that never sent HELLO makes
         * room, so that a client which sends HELLO promptly is answered. */
        if (live_conns(s) >= s->o.max_conns) {
            conn *v = oldest_idle(s, 1, 0, 0, 0, NULL);
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
        conn *c = mt_srv_conn_new(s, fd, fd, 1);
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
