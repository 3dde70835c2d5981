/* metrics_http.c: the --metrics HTTP endpoint of mt-serve (see
 * metrics_http.h): a listener, a stop pipe and a few connections in one
 * poll loop on a thread of its own.
 *
 * A connection reads one request head (wire/http.c), then writes one
 * answer, then half-closes and discards what the client still sends until
 * it closes too (so an answer to a request sent with extra bytes is not
 * lost to a reset), all within one deadline from its accept.
 */
#define _GNU_SOURCE
#include "serve/metrics_http.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/guard.h"
#include "util/errmsg.h"
#include "util/clock.h"
#include "wire/endpoint.h"
#include "wire/http.h"

#define DEFAULT_TIMEOUT_NS 5000000000ull
#define DEFAULT_MAX_CONNS  16
#define LINGER_NS          1000000000ull  /* after the answer, at most */
#define BAD_REPORT_NS      10000000000ull /* one log line per 10 s at most */

enum { C_READ = 0, C_WRITE, C_LINGER, C_HELD };   /* C_HELD: a wrong
    token's 401, written at send_at (the doubling wait of guard.h) */

typedef struct hconn {
    int      fd;
    int      state;
    uint64_t t_accept;
    uint64_t deadline;               /* the whole exchange */
    char     rbuf[MT_HTTP_MAX_HEAD]; /* the request head so far */
    size_t   rlen;
    char    *wbuf;                   /* the answer: head + body */
    size_t   wlen, woff;
    char     host[64];               /* the peer address, without its port */
    uint64_t send_at;                /* C_HELD: when its 401 goes */
} hconn;

struct mt_metrics_http {
    mt_metrics_http_opts o;
    int         lfd;
    int         stop_r, stop_w;      /* a byte on stop_w ends the thread */
    pthread_t   th;
    int         started;
    hconn     **c;                   /* [max_conns], NULL where free */
    mt_http_req req;                 /* the head being parsed */
    char        body[MT_METRICS_TEXT_MAX]; /* the exposition being rendered */
    uint64_t    n_bad, n_evicted, n_timeout, last_report;
    char        last_bad[160];
    mt_guard_fails auth;             /* wrong tokens per address */
};

#define hlog(h, ...) mt_logf((h)->o.log, (h)->o.log_ctx, __VA_ARGS__)

static void conn_close(mt_metrics_http *h, int i)
{
    hconn *c = h->c[i];
    if (c->state == C_HELD)
        mt_guard_fail_unhold(&h->auth, c->host);
    close(c->fd);
    free(c->wbuf);
    free(c);
    h->c[i] = NULL;
}

/* The answer into c->wbuf: the status line, the fields, the body (none for
 * HEAD). 0, or -1 (out of memory: the connection is dropped). */
static int answer(hconn *c, int status, const char *ctype, const char *extra,
                  const char *body, size_t blen, int head_only)
{
    char hd[512];
    int n = snprintf(hd, sizeof hd,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                     status, mt_http_reason(status), ctype, blen, extra ? extra : "");
    if (n < 0 || (size_t)n >= sizeof hd)
        return -1;
    size_t total = (size_t)n + (head_only ? 0 : blen);
    c->wbuf = malloc(total);
    if (!c->wbuf)
        return -1;
    memcpy(c->wbuf, hd, (size_t)n);
    if (!head_only)
        memcpy(c->wbuf + n, body, blen);
    c->wlen = total;
    c->woff = 0;
    c->state = C_WRITE;
    return 0;
}

static int answer_text(hconn *c, int status, const char *extra, const char *text,
                       int head_only)
{
    return answer(c, status, "text/plain; charset=utf-8", extra, text,
                  strlen(text), head_only);
}

static void note_bad(mt_metrics_http *h, const char *why)
{
    h->n_bad++;
    snprintf(h->last_bad, sizeof h->last_bad, "%s", why);
}

/* The bearer token of an Authorization field, checked in constant time. */
static int authorized(const mt_metrics_http *h, const mt_http_req *r)
{
    if (!h->o.token)
        return 1;
    const char *a = mt_http_field_get(r, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7) != 0)
        return 0;
    a += 7;
    while (*a == ' ')
        a++;
    size_t n = strlen(a);
    return n <= MT_TOKEN_MAX && mt_token_equal(a, n, h->o.token, h->o.token_len);
}

/* A complete head: what to answer. 0, or -1 (drop the connection). */
static int respond(mt_metrics_http *h, hconn *c, const mt_http_req *r)
{
    int get = strcmp(r->method, "GET") == 0, head = strcmp(r->method, "HEAD") == 0;
    int is_metrics = strcmp(r->path, "/metrics") == 0;
    int is_health = strcmp(r->path, "/health") == 0;
    if (!is_metrics && !is_health)
        return answer_text(c, 404, NULL, "not found: try /metrics or /health\n", head);
    if (!get && !head)
        return answer_text(c, 405, "Allow: GET, HEAD\r\n", "only GET and HEAD\n", 0);
    if (is_health) {
        char why[256], text[300];
        why[0] = '\0';
        if (h->o.health && h->o.health(h->o.health_ctx, why, sizeof why) != 0) {
            snprintf(text, sizeof text, "down: %s\n", why[0] ? why : "unhealthy");
            return answer_text(c, 503, NULL, text, head);
        }
        return answer_text(c, 200, NULL, "ok\n", head);
    }
    if (!authorized(h, r)) {
        /* as the TCP listener: a wait that doubles with each failure of
         * the address before the 401 (a guesser's rate falls), or at once
         * past the held budgets */
        uint64_t now = mt_clock_ns();
        mt_guard_fail *a = mt_guard_fail_entry(&h->auth, c->host, now);
        uint64_t delay = mt_guard_fail_note(&h->auth, a, now);
        note_bad(h, "metrics request without the right bearer token");
        if (answer_text(c, 401, "WWW-Authenticate: Bearer realm=\"metronome\"\r\n",
                        "unauthorized: send Authorization: Bearer TOKEN\n", head) != 0) {
            if (delay)
                mt_guard_fail_unhold(&h->auth, c->host);
            return -1;
        }
        if (delay) {
            c->state = C_HELD;
            c->send_at = now + delay;
            c->deadline = c->send_at + h->o.timeout_ns;
        }
        return 0;
    }
    if (h->o.token) {   /* the right token clears its address's count */
        mt_guard_fail *a = mt_guard_fail_find(&h->auth, c->host);
        if (a && !a->held)
            a->count = 0;
    }
    char err[160];
    long n = mt_metrics_render(h->o.metrics, h->body, sizeof h->body, err, sizeof err);
    if (n < 0) {
        note_bad(h, err);
        return answer_text(c, 500, NULL, "metrics do not fit the buffer\n", head);
    }
    return answer(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, h->body,
                  (size_t)n, head);
}

/* Reads what is there; answers once the head is complete or malformed.
 * 0 to go on, -1 to close. */
static int conn_read(mt_metrics_http *h, hconn *c)
{
    for (;;) {
        char discard[4096];
        char *dst = c->state == C_READ ? c->rbuf + c->rlen : discard;
        size_t room = c->state == C_READ ? sizeof c->rbuf - c->rlen : sizeof discard;
        if (room == 0)
            break;   /* full head: parsed below (431) */
        ssize_t n = recv(c->fd, dst, room, 0);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (n == 0)
            return -1;   /* closed: before a whole request, or lingering done */
        if (c->state != C_READ)
            continue;    /* after the request: discarded */
        c->rlen += (size_t)n;
        if ((size_t)n < room)
            break;
    }
    if (c->state != C_READ)
        return 0;
    int status = 0;
    char err[160];
    long rc = mt_http_parse(c->rbuf, c->rlen, &h->req, &status, err, sizeof err);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        note_bad(h, err);
        char text[200];
        snprintf(text, sizeof text, "%s\n", err);
        return answer_text(c, status, NULL, text, 0);
    }
    return respond(h, c, &h->req);
}

/* Writes what the socket takes; at the end, half-closes and lingers.
 * 0 to go on, -1 to close. */
static int conn_write(hconn *c, uint64_t now)
{
    while (c->woff < c->wlen) {
        ssize_t n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->woff += (size_t)n;
    }
    if (shutdown(c->fd, SHUT_WR) != 0)
        return -1;
    c->state = C_LINGER;
    if (c->deadline > now + LINGER_NS)
        c->deadline = now + LINGER_NS;
    return 0;
}

/* A free slot, making one when every slot is taken: the oldest connection
 * still sending its request goes (a client holding slots without asking
 * anything cannot keep a scraper out). -1 when all are answering. */
static int free_slot(mt_metrics_http *h)
{
    int oldest = -1;
    for (int i = 0; i < h->o.max_conns; i++) {
        if (!h->c[i])
            return i;
        if (h->c[i]->state == C_READ &&
            (oldest < 0 || h->c[i]->t_accept < h->c[oldest]->t_accept))
            oldest = i;
    }
    if (oldest >= 0) {
        h->n_evicted++;
        conn_close(h, oldest);
    }
    return oldest;
}

static void on_accept(mt_metrics_http *h, uint64_t now)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(h->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                note_bad(h, strerror(errno));
            return;
        }
        int i = free_slot(h);
        hconn *c = i >= 0 ? calloc(1, sizeof *c) : NULL;
        if (!c) {
            close(fd);   /* every slot is answering, or out of memory */
            continue;
        }
        c->fd = fd;
        char peer[80];
        mt_sockaddr_str((struct sockaddr *)&sa, sl, peer, sizeof peer);
        mt_guard_host(peer, c->host, sizeof c->host);
        c->t_accept = now;
        c->deadline = now + h->o.timeout_ns;
        h->c[i] = c;
    }
}

static void report(mt_metrics_http *h, uint64_t now, int final)
{
    if (!h->n_bad && !h->n_evicted && !h->n_timeout)
        return;
    if (!final && now - h->last_report < BAD_REPORT_NS)
        return;
    hlog(h, "metrics: %llu bad request(s) (last: %s), %llu timed out, %llu evicted "
         "for newer connections", (unsigned long long)h->n_bad,
         h->last_bad[0] ? h->last_bad : "none", (unsigned long long)h->n_timeout,
         (unsigned long long)h->n_evicted);
    h->n_bad = h->n_evicted = h->n_timeout = 0;
    h->last_bad[0] = '\0';
    h->last_report = now;
}

static void *http_main(void *arg)
{
    mt_metrics_http *h = arg;
    /* never under mt-serve's SCHED_FIFO (--rt-priority): a flood of
     * scrapers must not compete with the tick at its priority */
    struct sched_param sp = {.sched_priority = 0};
    int e = pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
    if (e != 0)
        hlog(h, "metrics: leaving SCHED_FIFO: %s", strerror(e));
    int max = h->o.max_conns;
    struct pollfd *pf = calloc((size_t)max + 2, sizeof *pf);
    int *slot = calloc((size_t)max + 2, sizeof *slot);
    if (!pf || !slot) {
        hlog(h, "metrics: out of memory: the endpoint is stopped");
        free(pf);
        free(slot);
        return NULL;
    }
    for (;;) {
        uint64_t now = mt_clock_ns(), wake = 0;
        int n = 0;
        pf[n++] = (struct pollfd){.fd = h->stop_r, .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = h->lfd, .events = POLLIN};
        for (int i = 0; i < max; i++) {
            hconn *c = h->c[i];
            if (!c)
                continue;
            slot[n] = i;
            /* a held one is not read: only its hang-up is watched */
            pf[n++] = (struct pollfd){.fd = c->fd,
                                      .events = c->state == C_WRITE ? POLLOUT
                                              : c->state == C_HELD ? POLLRDHUP : POLLIN};
            if (!wake || c->deadline < wake)
                wake = c->deadline;
            if (c->state == C_HELD && c->send_at < wake)
                wake = c->send_at;
        }
        int timeout = wake ? (wake > now ? (int)((wake - now + 999999) / 1000000) : 0)
                           : (int)(BAD_REPORT_NS / 1000000);
        int r = poll(pf, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR) {
            hlog(h, "metrics: poll: %s: the endpoint is stopped", strerror(errno));
            break;
        }
        now = mt_clock_ns();
        if (r > 0 && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
            break;
        for (int k = 2; r > 0 && k < n; k++) {
            hconn *c = h->c[slot[k]];
            if (!c || !pf[k].revents)
                continue;
            int rc = 0;
            if (c->state == C_HELD)
                rc = -1;   /* it hung up before its 401 */
            else if (c->state != C_WRITE)
                rc = conn_read(h, c);
            if (rc == 0 && c->state == C_WRITE)
                rc = conn_write(c, now);
            if (rc != 0)
                conn_close(h, slot[k]);
        }
        for (int i = 0; i < max; i++) {
            hconn *c = h->c[i];
            if (c && c->state == C_HELD && now >= c->send_at) {   /* its 401, now */
                mt_guard_fail_unhold(&h->auth, c->host);
                c->state = C_WRITE;
                if (conn_write(c, now) != 0)
                    conn_close(h, i);
            }
        }
        for (int i = 0; i < max; i++)
            if (h->c[i] && now >= h->c[i]->deadline) {
                h->n_timeout += h->c[i]->state != C_LINGER;
                conn_close(h, i);
            }
        if (r > 0 && (pf[1].revents & POLLIN))
            on_accept(h, now);
        report(h, now, 0);
    }
    report(h, mt_clock_ns(), 1);
    free(pf);
    free(slot);
    return NULL;
}

int mt_metrics_http_start(const mt_metrics_http_opts *o, mt_metrics_http **out,
                          char *bound, size_t boundcap, char *err, size_t errlen)
{
    *out = NULL;
    if (!o->metrics || !o->addr) {
        mt_set_err(err, errlen, "metrics: no registry or no address");
        return -1;
    }
    mt_metrics_http *h = mt_calloc_or_err(1, sizeof *h, err, errlen, "metrics");
    if (!h)
        return -1;
    h->o = *o;
    h->lfd = h->stop_r = h->stop_w = -1;
    if (!h->o.timeout_ns)
        h->o.timeout_ns = DEFAULT_TIMEOUT_NS;
    if (h->o.max_conns <= 0)
        h->o.max_conns = DEFAULT_MAX_CONNS;
    h->c = mt_calloc_or_err((size_t)h->o.max_conns, sizeof *h->c, err, errlen, "metrics");
    if (!h->c)
        goto fail;
    int loop = 0;
    h->lfd = mt_tcp_listen(o->addr, &loop, bound, boundcap, err, errlen);
    if (h->lfd < 0)
        goto fail;
    if (!loop && !o->token && !o->insecure) {
        mt_set_err(err, errlen, "--metrics %s is not a loopback address: anyone who "
                   "can reach it could read the server's figures; give --token-file "
                   "FILE (scrapers then send it as a bearer token), or --insecure "
                   "to allow it unauthenticated", o->addr);
        goto fail;
    }
    int sp[2];
    if (pipe2(sp, O_NONBLOCK | O_CLOEXEC) != 0) {
        mt_set_err(err, errlen, "metrics: pipe: %s", strerror(errno));
        goto fail;
    }
    h->stop_r = sp[0];
    h->stop_w = sp[1];
    int e = pthread_create(&h->th, NULL, http_main, h);
    if (e != 0) {
        mt_set_err(err, errlen, "metrics: pthread_create: %s", strerror(e));
        goto fail;
    }
    h->started = 1;
    if (!loop && !o->token)
        hlog(h, "WARNING: --insecure: metrics on %s without a token: anyone who "
             "can reach it may read them", bound);
    *out = h;
    return 0;
fail:
    mt_metrics_http_stop(h);
    return -1;
}

void mt_metrics_http_stop(mt_metrics_http *h)
{
    if (!h)
        return;
    if (h->started) {
        char b = 1;
        if (write(h->stop_w, &b, 1) < 0) {
            /* a full pipe already holds a stop byte */
        }
        pthread_join(h->th, NULL);
    }
    for (int i = 0; h->c && i < h->o.max_conns; i++)
        if (h->c[i])
            conn_close(h, i);
    free(h->c);
    if (h->lfd >= 0)
        close(h->lfd);
    if (h->stop_r >= 0)
        close(h->stop_r);
    if (h->stop_w >= 0)
        close(h->stop_w);
    free(h);
}
