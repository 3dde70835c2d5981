/* server_int.h: what the four files of mt-serve's I/O side share: the
 * server's state, one connection's state, and the calls between them.
 *
 *   server_setup.c  opening and closing: signals, the machine stream, the
 *                   listeners, the descriptor limit (calls nothing here)
 *   server_conn.c   connections: accept, caps and eviction, read, write,
 *                   close (calls nothing here)
 *   server_ctl.c    the control input (accept/reject/shed/limit), the
 *                   agent-check port, signals and the drain (calls setup)
 *   server.c        the epoll loop (calls the three others)
 *
 * Calls go one way, down that list, never back.
 *
 * Internal to src/serve: not an API.
 */
#ifndef MT_SERVER_INT_H
#define MT_SERVER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "serve/lineout.h"
#include "serve/net.h"
#include "serve/proto.h"
#include "serve/server.h"
#include "util/clock.h"
#include "util/errmsg.h"
#include "util/timeheap.h"
#include "wire/admission.h"

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
#define DRAIN_CUT_GRACE_NS 1000000000ull /* to send the END of what the
                                             drain timeout cut */
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
    mt_timer tm;                 /* on s->timers at its next deadline
                                    (mt_srv_conn_arm): HELLO, admission,
                                    delayed REJECT, input, stuck output,
                                    closing */
    int      dead;               /* freed in this epoll batch: its
                                    memory waits on s->zombies until the
                                    batch is over, so a later event of the
                                    batch that names it reads this flag,
                                    never freed memory */
    mt_outbuf out;               /* the session's output, taken from the
                                    engine by trading buffers
                                    (mt_engine_take_swap): sent from
                                    there, never copied; after p.wbuf's
                                    direct frames. Ours: freed with c */
    mt_proto_conn p;             /* the protocol's side (proto.h) */
    struct conn *next, *prev;    /* s->conns, doubly linked: O(1) unlink */
} conn;

typedef struct tagged { int tag; } tagged;

/* Bytes c still has to send: direct frames and the engine's output. */
static inline size_t conn_unsent(const conn *c)
{
    return c->p.wlen + c->out.len;
}

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
    conn          *zombies;          /* freed this batch (conn.dead), on
                                        ->next; released after it */
    mt_timeheap    timers;           /* each connection's next deadline
                                        (conn.tm): checked when due, never
                                        by walking them all */
    int            walk_all;         /* a signal (a drain may begin): walk
                                        every connection once */
    uint64_t       drain_deadline;
    int            drain_cut;        /* the drain timeout ended the sessions */
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
    uint64_t       agent_paused_until;  /* the agent port, the same */
    uint64_t       n_refused, n_refused_owner, n_evicted, n_nofd, n_timeout;
    uint64_t       last_conn_report;
    int            nofd_errno;
    /* --stdio: how the input ended */
    int            stdio_unclean;
    char           stdio_msg[256];
    uint8_t        rbuf[RBUF_CAP];
};

/* the human log, when the caller gave one */
#define slog(s, ...) mt_logf((s)->o.log, (s)->o.log_ctx, __VA_ARGS__)

static inline int ep_add(mt_server *s, int fd, uint32_t ev, void *ptr)
{
    struct epoll_event e = {.events = ev, .data.ptr = ptr};
    return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e);
}

/* server_setup.c: SIGHUP's reopening of --latency-log; drops on the
 * machine stream told to the log at most once per `every` ns */
void mt_srv_reopen_latency(mt_server *s);
void mt_srv_report_dropped_lines(mt_server *s, uint64_t now, uint64_t every);

/* server_conn.c: a connection made (registered with epoll), freed (why:
 * the log line, NULL for none), read (events: the epoll event that
 * called for it, 0 for none; -1: it was freed), written and
 * checked for timeouts (-1: freed; else its timer armed for its next
 * deadline), its timer armed (after a change that no write follows);
 * refusals reported; a listener's backlog accepted */
conn *mt_srv_conn_new(mt_server *s, int rfd, int wfd, int is_socket);
void mt_srv_conn_free(mt_server *s, conn *c, const char *why);
void mt_srv_conn_reap(mt_server *s);
int mt_srv_conn_read(mt_server *s, conn *c, uint32_t events);
int mt_srv_conn_discard(mt_server *s, conn *c);
int mt_srv_conn_write(mt_server *s, conn *c, uint64_t now);
void mt_srv_conn_arm(mt_server *s, conn *c);
void mt_srv_report_conns(mt_server *s, uint64_t now, int force);
void mt_srv_on_accept(mt_server *s, int lfd, int is_tcp);

/* server_ctl.c: the agent port, the control input and the signal pipe,
 * each when epoll says it is readable */
void mt_srv_on_agent(mt_server *s);
void mt_srv_on_control(mt_server *s);
void mt_srv_on_signal(mt_server *s);
int  mt_srv_end_session(mt_server *s, conn *c, const char *what,
                        const char *why);

#endif
