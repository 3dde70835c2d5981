/* server_ctl.c: what steers a running mt-serve from outside
 * (server_int.h): the control input's lines (accept, reject, shed, limit),
 * HAProxy's agent-check port, and the signals (TERM/INT drain, HUP
 * reopens the machine stream).
 */
#define _GNU_SOURCE
#include "serve/server_int.h"

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

#include "serve/ticker.h"
#include "wire/endpoint.h"

/* HAProxy's agent-check: one line, then close. maxconn is what this
 * instance will hold now; drain while SIGTERM's sessions finish (the agent
 * stays up, so HAProxy shows DRAIN, not a failure); down when a tick
 * failed. */
void mt_srv_on_agent(mt_server *s)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        int fd = accept4(s->agent_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                       errno == ENOMEM)) {
            /* out of descriptors: the spare one takes the check, which is
             * still answered; without a spare the port waits a moment.
             * Either way the pending check no longer wakes the loop at
             * once, and the count goes to report_conns, not a line each. */
            s->n_nofd++;
            s->nofd_errno = errno;
            if (s->spare_fd >= 0) {
                close(s->spare_fd);
                s->spare_fd = -1;
                fd = accept4(s->agent_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            }
            if (fd < 0) {
                if (!s->agent_paused_until) {
                    epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->agent_fd, NULL);
                    s->agent_paused_until = mt_clock_ns() + ACCEPT_PAUSE_NS;
                }
                if (s->spare_fd < 0)
                    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                return;
            }
        }
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
        if (s->spare_fd < 0)
            s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
}

static conn *find_pending(mt_server *s, uint32_t id)
{
    for (conn *c = s->conns; c; c = c->next)
        if (c->p.id == id)
            return c;
    return NULL;
}

/* Ends the admitted session of c now with END (its queued inputs
 * answered or counted as misses by the engine) for a reason that END
 * carries to the client (mt-frame(5)) and that goes to the log and to a
 * `shed session=ID t=S reason=...` line on the machine stream: a
 * controller's `shed`, the input timeout, the drain timeout. what names
 * it in the log line ("shed", "ended (END)"). 0, or -1 when c has no
 * admitted session still running. */
int mt_srv_end_session(mt_server *s, conn *c, const char *what, const char *why)
{
    uint32_t id = c->p.id;
    char reason[MT_REASON_MAX + 1];
    snprintf(reason, sizeof reason, "%s", why);
    mt_utf8_sanitize(reason);
    if (!id || c->p.pending || mt_engine_shed(s->eng, id, reason) != 0)
        return -1;
    slog(s, "session %u: %s: %s", id, what, reason);
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
    return 0;
}

/* A controller's `shed ID reason` (issue 24). */
static void do_shed(mt_server *s, uint32_t id, const char *why)
{
    conn *c = find_pending(s, id);
    if (!c || mt_srv_end_session(s, c, "shed", why[0] ? why : "shed by the "
                                 "admission controller") != 0)
        slog(s, "control: shed %u: no such admitted session", id);
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

void mt_srv_on_control(mt_server *s)
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

static void mt_srv_begin_drain(mt_server *s, const char *why)
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
    for (conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (!c->p.id && !c->p.closing && c->is_socket && conn_unsent(c) == 0) {
            /* no session: nothing to finish, and waiting for its HELLO
             * (or its delayed REJECT) would hold the exit */
            mt_proto_direct(&c->p, MT_FRAME_REJECT, 0, "server shutting down; "
                            "not taking new sessions", mt_clock_ns());
            continue;
        }
        if (c->p.pending)
            mt_proto_reject(&s->pr, &c->p, "server shutting down; not taking new sessions", 0, mt_clock_ns());
        else if (s->o.drain_sessions && c->p.id && c->p.reading)
            continue;   /* --drain sessions: it ends when its client ends it */
        c->p.reading = 0;
    }
    if (!s->o.drain_sessions)
        mt_engine_drain(s->eng);
}

void mt_srv_on_signal(mt_server *s)
{
    unsigned char b[64];
    ssize_t n;
    while ((n = read(s->sigfd, b, sizeof b)) > 0)
        for (ssize_t i = 0; i < n; i++) {
            if (b[i] == SIGHUP)
                mt_srv_reopen_latency(s);
            else
                mt_srv_begin_drain(s, b[i] == SIGTERM ? "SIGTERM" : "SIGINT");
        }
}
