/* server_setup.c: opening and closing mt-serve's I/O side (server_int.h):
 * the signal pipe, the eventfd and epoll, the machine stream (and its
 * reopening on SIGHUP), the Unix and TCP listeners and the agent port,
 * the descriptor limit fitted to the connection cap, and the teardown.
 */
#define _GNU_SOURCE
#include "serve/server_int.h"

#include <errno.h>
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serve/ticker.h"
#include "wire/endpoint.h"

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
    o->input_timeout_ns = 10000000000ull;
    o->io_batch_ns = 1000000ull;
}

/* Never waits for the reader: a line that finds the queue full is dropped
 * and counted (lineout.h). */
void mt_server_line(void *ctx, const char *line)
{
    mt_server *s = ctx;
    if (s->out)
        mt_lineout_put(s->out, line);
}

static int open_log_fd(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
}

/* The --latency-log at start. A FIFO waits for its reader (a controller
 * started after the server), but not past a signal: a plain open() would
 * block there, restarted after each signal (SA_RESTART), and the server
 * would ignore SIGTERM until someone read. So a FIFO is opened without
 * blocking, tried again every 100 ms while the signal pipe stays empty.
 * -1 with errno; *signo the signal that stopped the wait, 0 if none. */
static int open_latency_fd(mt_server *s, const char *path, int *signo)
{
    struct stat st;
    *signo = 0;
    if (stat(path, &st) != 0 || !S_ISFIFO(st.st_mode))
        return open_log_fd(path);
    for (;;) {
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            int fl = fcntl(fd, F_GETFL);
            if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
            }
            return fd;
        }
        if (errno != ENXIO)   /* ENXIO: no reader yet */
            return -1;
        struct pollfd p = {.fd = s->sigfd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            unsigned char b = 0;
            *signo = read(s->sigfd, &b, 1) == 1 ? b : SIGTERM;
            errno = EINTR;
            return -1;
        }
    }
}

static int open_latency(mt_server *s, char *err, size_t errlen)
{
    int fd = s->o.stdio ? 2 : 1, owned = 0;
    if (s->o.latency_log) {
        int signo;
        fd = open_latency_fd(s, s->o.latency_log, &signo);
        if (fd < 0 && signo) {
            mt_set_err(err, errlen, "%s while waiting for a reader of --latency-log %s: "
                       "stopped before serving", strsignal(signo), s->o.latency_log);
            return MT_SERVER_STOPPED;
        }
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

void mt_srv_reopen_latency(mt_server *s)
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
void mt_srv_report_dropped_lines(mt_server *s, uint64_t now, uint64_t every)
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
    else if (!s->o.token)
        slog(s, "WARNING: listening on %s without a token: every user of this "
             "machine may connect (a TCP port has no file mode, unlike the "
             "Unix socket); give --token-file FILE to require one", s->tcp_name);
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
    int lrc = open_latency(s, err, errlen);
    if (lrc != 0) {
        mt_server_free(s);
        return lrc;
    }
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
    while (s->zombies) {       /* closed already: memory only */
        conn *c = s->zombies;
        s->zombies = c->next;
        free(c);
    }
    mt_timeheap_free(&s->timers);
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
        mt_srv_report_dropped_lines(s, mt_clock_ns(), 0);
        mt_lineout_close(s->out, LINE_FLUSH_NS, msg, sizeof msg);
        if (msg[0])
            slog(s, "%s", msg);
    }
    free(s);
}
