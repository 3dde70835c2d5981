/* server.h: mt-serve's I/O: the Unix socket and/or a TCP listener (or one
 * stdio session), HAProxy's agent-check port, the
 * epoll event loop, the control input, admission, signals, and the tick
 * thread that drives the engine on an absolute clock.
 *
 * Threads: the I/O thread (mt_server_run's caller) owns every client and
 * control descriptor; the tick thread (ticker.h) sleeps with
 * clock_nanosleep(TIMER_ABSTIME) to tick k's start t0 + k*period, runs
 * mt_engine_tick, and wakes the I/O thread through an eventfd to send what
 * the tick produced; the line writer (lineout.h) alone writes the machine
 * stream, blocking, from a bounded queue the other two fill without
 * waiting. No other descriptor is ever read or written blocking, so
 * neither a slow or dead client nor a stalled reader of the machine stream
 * can stall the tick or the other sessions.
 */
#ifndef MT_SERVER_H
#define MT_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "serve/engine.h"

typedef struct mt_server_opts {
    const char *socket_path;     /* -s PATH (NULL with stdio) */
    mode_t      socket_mode;     /* 0600 by default */
    int         stdio;           /* one session on stdin/stdout */
    const char *latency_log;     /* --latency-log PATH, or NULL */
    int         latency_json;    /* --latency-format json: JSON lines */
    const char *control_path;    /* --control PATH (FIFO or socket), or NULL */
    uint64_t    admit_timeout_ns;/* unanswered requests are rejected */
    int         max_sessions;    /* static admission without --control */
    uint64_t    frame_ns;        /* tick period */
    uint64_t    write_timeout_ns;/* output stuck this long: disconnect */
    int         sndbuf;          /* SO_SNDBUF for client sockets (0: keep) */
    uint64_t    drain_timeout_ns;/* SIGTERM: longest wait for sessions */
    int         drain_sessions;  /* --drain sessions: SIGTERM lets admitted
                                    sessions run to their own END (within
                                    drain_timeout) instead of ending their
                                    input at once */
    int         max_conns;       /* connections at once (0: 4 x
                                    max_sessions + 16); lowered at start
                                    to fit RLIMIT_NOFILE */
    uint64_t    hello_timeout_ns;/* a connection without HELLO is closed */
    uint64_t    input_timeout_ns;/* an admitted session without input this
                                    long ends with END (0: never) */
    int         max_pending_per_uid; /* connections of one uid not yet
                                    admitted (0: half of max_conns) */
    uint64_t    io_batch_ns;     /* --io-batch-us: on a busy server, client
                                    input is taken at most this often
                                    (server.c, wait_for_batch; 0: at once) */
    /* TCP (issue 23) */
    const char *listen_addr;     /* --listen HOST:PORT, or NULL */
    const char *agent_addr;      /* --agent HOST:PORT (HAProxy agent-check) */
    const char *token;           /* --token-file's token: TCP HELLOs must
                                    carry it (NULL: none asked) */
    size_t      token_len;
    int         insecure;        /* --insecure: a non-loopback --listen
                                    without a token, warned about */
    uint64_t    t0;              /* server start (CLOCK_MONOTONIC ns) */
    /* human log lines (stderr in mt-serve) */
    void      (*log)(void *ctx, const char *msg);
    void       *log_ctx;
} mt_server_opts;

void mt_server_opts_default(mt_server_opts *o);

typedef struct mt_server mt_server;

/* Opens the machine stream (latency lines), the socket and the control
 * input. 0, or -1 with err, or MT_SERVER_STOPPED with err when a signal
 * (SIGTERM, SIGINT, SIGHUP) came while it waited for the reader of a
 * --latency-log FIFO: nothing was served, and nothing is left to drain. */
#define MT_SERVER_STOPPED (-2)
int  mt_server_create(const mt_server_opts *o, mt_server **out,
                      char *err, size_t errlen);
/* The engine's line callback: ctx is the mt_server. Thread-safe; never
 * waits for the reader (a line that finds the queue full is dropped and
 * counted in the next one's lines_dropped). */
void mt_server_line(void *ctx, const char *line);
/* Runs until drained (SIGTERM/SIGINT) or, in stdio mode, until the session
 * ends. Returns 0, 1 in stdio mode when the input did not end cleanly (EOF
 * without END, or inside a frame: err says what was lost; every input was
 * still answered or counted), or -1 with err on a fatal error. */
int  mt_server_run(mt_server *s, mt_engine *e, char *err, size_t errlen);
void mt_server_free(mt_server *s);

#endif
