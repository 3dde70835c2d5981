/* server.c: mt-serve's event loop, the heart of its I/O side (see
 * server.h).
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
 * proto.c's: server_conn.c reads the socket and hands it the bytes.
 *
 * The pieces around the loop live beside it: server_setup.c opens and
 * closes (server_int.h lists the four files), server_conn.c accepts,
 * reads, writes and closes connections, server_ctl.c takes the control
 * input, the agent port and the signals; net.c opens the listening socket
 * and the control input, ticker.c runs the tick thread, lineout.c writes
 * the machine stream from its own thread, and wire/admission.c reads and
 * writes the request, verdict and control lines.
 */
#define _GNU_SOURCE
#include "serve/server_int.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
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

#include "serve/ticker.h"
#include "wire/endpoint.h"

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
        conn *c = mt_srv_conn_new(s, 0, 1, 0);
        if (!c) {
            mt_set_err(err, errlen, "out of memory");
            return -1;
        }
        c->p.uid = getuid();
        c->p.pid = getpid();
    }
    return 0;
}

#define MAX_EVENTS  256           /* one epoll_wait's batch */
#define RECHECK_NS  100000000ull   /* a due deadline that was not acted on */
#define MAX_SLEEP_NS 1000000000ull  /* the reports' lines go out at least
                                       this often */

/* When the loop must wake next, CLOCK_MONOTONIC ns: the earliest of a
 * FILL deadline, a connection's next deadline (s->timers: admission,
 * HELLO, delayed REJECT, input, stuck output, closing), the listener's
 * pause, or, draining, 100 ms (the drain walks every connection), else at
 * most a second (the reports); `now` when a regular file on stdin has
 * input to take. */
static uint64_t wake_at(mt_server *s, uint64_t now, uint64_t next_fill)
{
    uint64_t wake = now + (s->pr.draining || s->o.stdio ? RECHECK_NS : MAX_SLEEP_NS);
#define EARLIEST(t) do { uint64_t t_ = (t); if (t_ && (!wake || t_ < wake)) wake = t_; } while (0)
    EARLIEST(next_fill);
    EARLIEST(mt_timeheap_next(&s->timers));
    EARLIEST(s->accept_paused_until);
    EARLIEST(s->agent_paused_until);
#undef EARLIEST
    if (s->o.stdio)     /* the one connection: a regular file on stdin */
        for (conn *c = s->conns; c; c = c->next)
            if (c->p.reading && !c->r_epoll &&
                (!c->p.id || (!c->p.pending && mt_engine_in_space(s->eng, c->p.id) > 0)))
                return now;   /* with room */
    return wake;
}

/* epoll_wait's timeout for a wake at `wake`: whole ms, rounded up */
static int timeout_ms(uint64_t now, uint64_t wake)
{
    return wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
}

/* Client input in batches (--io-batch-us, issue 40). On a busy server
 * nearly every frame's arrival wakes the loop on its own: a context
 * switch and an epoll_wait for an event or two, the largest share of the
 * server's CPU a frame after the sockets' own (bench/RESULTS.md). So when
 * events come faster than one a period (the last wake took two or more,
 * or came within half a period of the one before), the loop waits out the
 * rest of the period from its last wake for the ticker, a signal or the
 * control input alone (ppoll on those three), and only then takes, in one
 * epoll_wait, every client event that came meanwhile. A tick's output
 * still goes out at once (the ticker's eventfd ends the wait), and so do
 * FILL answers and timeouts (the wait ends at `wake`); a client's bytes
 * are read at most one period later, and the latency lines count a
 * frame's wait from its read. Slower events wait as before: there a batch
 * wait would be a second sleep for the same one event. So do a full last
 * batch (more is waiting) and --stdio. */
static void wait_for_batch(mt_server *s, uint64_t now, uint64_t woke,
                           uint64_t woke_before, int nlast, uint64_t wake)
{
    uint64_t q = s->o.io_batch_ns;
    if (!q || s->o.stdio || nlast == MAX_EVENTS ||
        (nlast < 2 && woke - woke_before >= q / 2))
        return;
    uint64_t until = woke + q < wake ? woke + q : wake;
    if (until <= now)
        return;
    struct pollfd pf[3];
    nfds_t k = 0;
    pf[k++] = (struct pollfd){.fd = s->evfd, .events = POLLIN};
    pf[k++] = (struct pollfd){.fd = s->sigfd, .events = POLLIN};
    if (s->ctl.fd >= 0)
        pf[k++] = (struct pollfd){.fd = s->ctl.fd, .events = POLLIN};
    struct timespec ts = {.tv_sec = (time_t)((until - now) / 1000000000ull),
                          .tv_nsec = (long)((until - now) % 1000000000ull)};
    /* an error (EINTR: a signal, whose pipe epoll_wait reads next) only
     * ends the wait early */
    (void)ppoll(pf, k, &ts, NULL);
}

/* The eventfd's value for a round's output within a tick (round_out),
 * above any count of tick wakes (the ticker writes 1 a tick): a read whose
 * low half is 0 held no tick, and counts none down. */
#define ROUND_WAKE (1ull << 32)

/* A catch-up round follows in this tick: the outputs of the round before
 * it go out now (mt_engine_set_round_out), not after the later rounds'
 * steps. Tick thread. */
static void round_out(void *ctx)
{
    mt_server *s = ctx;
    uint64_t v = ROUND_WAKE;
    if (write(s->evfd, &v, sizeof v) < 0 && errno != EAGAIN)
        slog(s, "eventfd: %s", strerror(errno));
}

/* Events on the server's own fds (listeners, agent, signals, the ticker's
 * eventfd, control). Each ticker wake counts down *final_ticks; the last
 * one sets *stdio_done. */
/* Whether an event's pointer is one of the server's own descriptors
 * (by address); any other is a connection's. A connection's event may
 * name a connection freed by an earlier event of the same batch (evicted
 * by an accept): its memory is kept until the batch is over
 * (mt_srv_conn_free puts it on s->zombies), so its `dead` flag is read,
 * never freed memory. */
static int own_tag(const mt_server *s, const void *t)
{
    return t == &s->t_listen || t == &s->t_signal || t == &s->t_event ||
           t == &s->t_control || t == &s->t_listen_tcp || t == &s->t_agent;
}

static void dispatch_server_events(mt_server *s, const struct epoll_event *evs,
                                   int n, int *final_ticks, int *stdio_done)
{
    for (int i = 0; i < n; i++) {
        tagged *t = evs[i].data.ptr;
        if (!own_tag(s, t))
            continue;
        if (t->tag == TAG_LISTEN) {
            mt_srv_on_accept(s, s->lis.fd, 0);
        } else if (t->tag == TAG_LISTEN_TCP) {
            mt_srv_on_accept(s, s->tcp_fd, 1);
        } else if (t->tag == TAG_AGENT) {
            mt_srv_on_agent(s);
        } else if (t->tag == TAG_SIGNAL) {
            mt_srv_on_signal(s);
        } else if (t->tag == TAG_EVENT) {
            uint64_t v = 0;      /* a tick: its output is on the ready list */
            if (read(s->evfd, &v, sizeof v) < 0 && errno != EAGAIN)
                slog(s, "eventfd: %s", strerror(errno));
            else if ((v & (ROUND_WAKE - 1)) == 0)
                ;                /* a round's output only, no tick ended */
            else if (*final_ticks && --*final_ticks == 0)
                *stdio_done = 1;
        } else if (t->tag == TAG_CONTROL) {
            mt_srv_on_control(s);   /* its verdicts queue output: ready list */
        }
        if (t->tag == TAG_SIGNAL)
            s->walk_all = 1;     /* a drain may have begun: every connection */
    }
}

/* Client events, each straight to its connection (skipped when an
 * earlier event of the batch freed it); each one read is then written to
 * (its direct frames, its output) and its timer armed. Then the conns
 * epoll cannot watch (a regular file on stdin) are read. */
/* An admitted session's socket in its steady state: reading, nothing of
 * its own to send or stuck, no deadline but the input timeout's. A read
 * that leaves it so only queued input, and writing to it would find
 * nothing to do: the engine's output for it comes on the ready list. */
static int streaming(const conn *c)
{
    return c->is_socket && c->p.id && !c->p.pending && c->p.reading &&
           !c->p.closing && !c->p.auth_reject_at && conn_unsent(c) == 0 &&
           c->ev_w == 0 && !c->stuck_since;
}

static void dispatch_conn_events(mt_server *s, const struct epoll_event *evs,
                                 int n)
{
    for (int i = 0; i < n; i++) {
        tagged *t = evs[i].data.ptr;
        if (own_tag(s, t))
            continue;
        conn *c = (conn *)t;
        if (c->dead)
            continue;
        int r = 0;
        if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && c->p.reading)
            r = mt_srv_conn_read(s, c, evs[i].events);
        else if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
                 c->p.auth_reject_at && c->is_socket)
            r = mt_srv_conn_discard(s, c);
        else if ((evs[i].events & (EPOLLHUP | EPOLLERR)) && !c->p.reading &&
                 !(evs[i].events & EPOLLOUT) && c->is_socket) {
            /* peer gone while we no longer read (after END) */
            mt_srv_conn_free(s, c, "disconnected");
            r = -1;
        }
        if (r < 0 || c->dead || s->walk_all)
            continue;   /* freed, or the walk below writes to it */
        if (!(evs[i].events & EPOLLOUT) && streaming(c))
            continue;   /* input queued, nothing else: its output comes on
                           the ready list, its input deadline only moved
                           later (its timer fires early and re-arms) */
        /* the clock now: the read may have stamped c after the batch's
         * clock, and the timeouts subtract those stamps from it */
        mt_srv_conn_write(s, c, mt_clock_ns());
    }
    if (!s->o.stdio)
        return;
    for (conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (c->p.reading && !c->r_epoll)
            if (mt_srv_conn_read(s, c, 0) < 0)
                continue;
    }
}

/* The checks of one connection that nothing else makes: the admission
 * deadline, the input timeout, and the write (which checks the HELLO,
 * delayed-REJECT, stuck-output and closing deadlines, and arms its timer
 * for the next). */
static void check_conn(mt_server *s, conn *c, uint64_t now)
{
    if (c->p.pending && now >= c->p.admit_deadline) {
        mt_proto_reject(&s->pr, &c->p, "no answer from the admission controller in "
                        "time; retry later", 0, now);
    }
    if (s->o.input_timeout_ns && c->is_socket && c->p.id && !c->p.pending &&
        c->p.reading && now - c->p.last_input > s->o.input_timeout_ns) {
        char why[128];
        snprintf(why, sizeof why, "no input for %.1f s (--input-timeout): "
                 "the client is silent or gone",
                 (double)(now - c->p.last_input) / 1e9);
        mt_srv_end_session(s, c, "ended (END)", why);
    }
    /* a deadline whose check changed nothing (none should) is looked at
     * again later, never at once: the loop must not spin on it */
    if (mt_srv_conn_write(s, c, now) == 0 && c->tm.idx >= 0 && c->tm.due <= now)
        mt_timeheap_arm(&s->timers, &c->tm, now + RECHECK_NS);
}

/* The connections whose session has new output (a tick, FILL, a verdict):
 * written to, and no others. */
static void write_ready(mt_server *s, uint64_t now)
{
    void *u[256];
    int n;
    do {
        n = mt_engine_take_ready(s->eng, u, 256);
        for (int i = 0; i < n; i++) {
            conn *c = (conn *)((char *)u[i] - offsetof(conn, p));
            if (!c->dead)
                mt_srv_conn_write(s, c, now);
        }
    } while (n == 256);
}

/* Per-iteration housekeeping: reports, resuming a paused listener; the
 * connections whose timer is due, each checked (check_conn); and, after
 * a signal, while draining, and in stdio mode (one connection), a walk of
 * every connection instead. Neither a frame nor a tick walks them: the
 * cost of a frame does not grow with the connections. */
static void housekeeping(mt_server *s, uint64_t now)
{
    mt_srv_report_dropped_lines(s, now, DROP_REPORT_NS);
    mt_srv_report_conns(s, now, 0);
    mt_proto_report(&s->pr, now, 0);
    if (s->agent_paused_until && now >= s->agent_paused_until) {
        s->agent_paused_until = 0;
        if (s->agent_fd >= 0 && ep_add(s, s->agent_fd, EPOLLIN, &s->t_agent) != 0)
            slog(s, "epoll_ctl (agent port): %s", strerror(errno));
    }
    if (s->accept_paused_until && now >= s->accept_paused_until) {
        s->accept_paused_until = 0;
        if (s->lis.fd >= 0 && ep_add(s, s->lis.fd, EPOLLIN, &s->t_listen) != 0)
            slog(s, "epoll_ctl (listener): %s", strerror(errno));
        if (s->tcp_fd >= 0 && ep_add(s, s->tcp_fd, EPOLLIN, &s->t_listen_tcp) != 0)
            slog(s, "epoll_ctl (tcp listener): %s", strerror(errno));
    }
    if (s->walk_all || s->o.stdio || s->pr.draining) {
        s->walk_all = 0;
        for (conn *c = s->conns, *nx; c; c = nx) {
            nx = c->next;
            check_conn(s, c, now);
        }
        return;
    }
    mt_timer *tm;
    while ((tm = mt_timeheap_pop_due(&s->timers, now)))
        check_conn(s, (conn *)((char *)tm - offsetof(conn, tm)), now);
}

/* Whether a drain still has something to wait for: a session, or a last
 * frame on its way out. A connection without a session (an idle one, one
 * that arrived during the drain, one held for a delayed REJECT) is not. */
static int drain_busy(const mt_server *s)
{
    for (const conn *c = s->conns; c; c = c->next)
        if (c->p.id || (c->p.closing && conn_unsent(c) > 0))
            return 1;
    return 0;
}

/* The drain timeout passed with sessions still running: each one ends now
 * with END and a reason (log and machine stream), and the loop runs a
 * moment longer to send it. */
static void cut_at_drain_timeout(mt_server *s, uint64_t now)
{
    char why[160];
    snprintf(why, sizeof why, "drain timeout (--drain-timeout %.1f s): the "
             "server is stopping", (double)s->o.drain_timeout_ns / 1e9);
    int n = 0;
    for (conn *c = s->conns; c; c = c->next)
        if (mt_srv_end_session(s, c, "ended (END)", why) == 0)
            n++;
    slog(s, "drain timeout: %d session(s) ended with END", n);
    s->drain_cut = 1;
    s->drain_deadline = now + DRAIN_CUT_GRACE_NS;
}

/* Whether the loop is over: the stdio session ended and its final tick
 * records went out, or a drain finished (or timed out, and what it cut
 * was told). Starts the stdio drain when its one session is over. */
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
    if (!s->pr.draining || *final_ticks)
        return 0;
    if (!drain_busy(s))
        return 1;
    if (now <= s->drain_deadline)
        return 0;
    if (!s->drain_cut) {
        cut_at_drain_timeout(s, now);
        return 0;
    }
    slog(s, "drain timeout: closing %d connection(s)", s->nconns);
    return 1;
}

int mt_server_run(mt_server *s, mt_engine *e, char *err, size_t errlen)
{
    if (server_setup(s, e, err, errlen) != 0)
        return -1;
    mt_engine_set_round_out(e, round_out, s);
    mt_ticker *ticker = NULL;
    mt_ticker_opts to = {.eng = e, .t0 = s->o.t0, .period_ns = s->o.frame_ns,
                         .wake_fd = s->evfd, .log = s->o.log, .log_ctx = s->o.log_ctx};
    if (mt_ticker_start(&to, &ticker, err, errlen) != 0)
        return -1;
    int rc = 0;
    struct epoll_event evs[MAX_EVENTS];
    uint64_t next_fill = 0, woke = 0, woke_before = 0;
    int final_ticks = 0, stdio_done = 0, n = 0;
    for (;;) {
        uint64_t t = mt_clock_ns(), wake = wake_at(s, t, next_fill);
        wait_for_batch(s, t, woke, woke_before, n, wake);
        n = epoll_wait(s->epfd, evs, MAX_EVENTS, timeout_ms(mt_clock_ns(), wake));
        if (n < 0 && errno != EINTR) {
            mt_set_err(err, errlen, "epoll_wait: %s", strerror(errno));
            rc = -1;
            break;
        }
        woke_before = woke;
        woke = mt_clock_ns();
        dispatch_server_events(s, evs, n, &final_ticks, &stdio_done);
        dispatch_conn_events(s, evs, n);
        uint64_t now = mt_clock_ns();
        next_fill = mt_engine_fill_due(e, now);
        housekeeping(s, now);
        write_ready(s, now);
        mt_srv_conn_reap(s);
        if (loop_done(s, now, &final_ticks, stdio_done))
            break;
    }
    mt_ticker_stop(ticker);
    mt_srv_report_conns(s, mt_clock_ns(), 1);
    mt_proto_report(&s->pr, mt_clock_ns(), 1);
    while (s->conns)
        mt_srv_conn_free(s, s->conns, s->pr.draining ? NULL : "server stopping");
    mt_srv_conn_reap(s);
    if (rc == 0 && s->stdio_unclean) {
        mt_set_err(err, errlen, "%s", s->stdio_msg);
        rc = 1;
    }
    return rc;
}
