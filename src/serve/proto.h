/* proto.h: one connection's side of mt-serve's protocol, without the
 * socket: the bytes a client sent go in (mt_proto_input), and what they
 * mean happens on the engine (sessions, admission, inputs, END, ERROR) or
 * in the connection's small direct-output buffer (a frame for a
 * connection the engine does not know yet). server_conn.c reads the
 * socket and calls this; tests and the fuzz harness call it on a buffer,
 * with a clock of their own.
 *
 * Internal to src/serve: a header for the server*.c files and the tests,
 * not an API.
 */
#ifndef MT_PROTO_H
#define MT_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "serve/engine.h"
#include "serve/guard.h"
#include "wire/frame.h"

#define MT_PROTO_WBUF_CAP (16 * 1024) /* a connection's output buffer: four
                                         frames of 1920 samples a take (the
                                         engine's queue is a byte stream, so
                                         any size works); a connection is
                                         about 49 KB with its decoder */
/* the authentication waits and the crowd summaries are guard.h's, shared
 * with --ws and --metrics */
#define MT_PROTO_AUTH_DELAY_NS     MT_GUARD_DELAY_NS
#define MT_PROTO_AUTH_DELAY_MAX_NS MT_GUARD_DELAY_MAX_NS
#define MT_PROTO_REPORT_NS         MT_GUARD_REPORT_NS

/* What the protocol needs from the server: its engine, its admission
 * rule, where its log and machine-stream lines go. */
typedef struct mt_proto {
    mt_engine *eng;
    int        controlled;       /* --control: the controller decides */
    int        max_sessions;     /* the static rule otherwise */
    uint64_t   admit_timeout_ns; /* a controlled request waits this long */
    int        draining;         /* new sessions are rejected */
    uint64_t   t0;               /* origin of the lines' t= (ns) */
    void     (*log)(void *ctx, const char *msg);   /* human log */
    void      *log_ctx;
    void     (*line)(void *ctx, const char *line); /* machine stream */
    void      *line_ctx;
    const char *token;           /* --token-file: a TCP HELLO must carry it */
    size_t     token_len;
    mt_guard_fails auth;         /* failures per address, held REJECTs */
    mt_guard_agg agg;            /* crowd-prone log lines */
    mt_guard_rate session_lines; /* a session's admitted/closed lines */
    uint64_t   quiet_since;      /* start of session_lines' interval */
} mt_proto;

/* One connection's protocol state. */
typedef struct mt_proto_conn {
    uint32_t id;                 /* engine session, 0 before HELLO */
    int      reading;            /* still accepting input */
    int      closing;            /* close once wbuf is flushed */
    int      pending;            /* waiting for the controller */
    uint64_t admit_deadline;
    uint64_t close_deadline;     /* closing: give up on wbuf after this */
    uid_t    uid;
    pid_t    pid;
    int      warned_drop;
    int      is_tcp;             /* from --listen: no uid; HELLO needs the
                                    token when one is set */
    char     peer[64];           /* TCP: "ADDR:PORT" for log lines */
    uint64_t auth_reject_at;     /* wrong token: REJECT at this time (the
                                    connection is held, not pending) */
    uint64_t last_input;         /* admitted: when input last came (or the
                                    admission), for --input-timeout */
    uint64_t bytes_in;           /* a health check sends nothing */
    int      quiet;              /* its lines past the log's rate: counted */
    mt_frame_decoder dec;
    uint8_t  wbuf[MT_PROTO_WBUF_CAP]; /* direct frames; then engine output */
    size_t   woff, wlen;
} mt_proto_conn;

/* A fresh connection (reading, no session). */
void mt_proto_conn_init(mt_proto_conn *c);

/* n bytes the client sent, arriving at now: decodes every whole frame and
 * acts on it while c is reading (a partial frame stays in c->dec). A
 * malformed frame fails the session (ERROR). */
void mt_proto_input(mt_proto *p, mt_proto_conn *c, const uint8_t *buf,
                    size_t n, uint64_t now);

/* Admission decided outside the input (controller, timeout, drain). */
void mt_proto_admit(mt_proto *p, mt_proto_conn *c, uint64_t now);
/* final: MT_FLAG_FINAL on the REJECT, the same HELLO would be refused
 * again (see frame.h); 0 where a later try may pass. */
void mt_proto_reject(mt_proto *p, mt_proto_conn *c, const char *why, int final,
                     uint64_t now);

/* A connection refused for its token gets its REJECT late (see
 * auth_reject_at): sends it when now has reached that time. */
void mt_proto_auth_due(mt_proto *p, mt_proto_conn *c, uint64_t now);

/* c is being closed by the server: a delayed REJECT it was held for is
 * given up (the held counts fall). */
void mt_proto_conn_release(mt_proto *p, mt_proto_conn *c);

/* The interval's summary of the aggregated log lines, when one is due
 * (force: now, if anything was counted). */
void mt_proto_report(mt_proto *p, uint64_t now, int force);

/* c's peer address without its port (TCP), for per-address counts. */
void mt_proto_peer_host(const mt_proto_conn *c, char *buf, size_t cap);

/* A frame of type (REJECT or ERROR) with flags and reason, written
 * straight into c's buffer for a connection without a session; c closes
 * once it is sent (or a second after now). */
void mt_proto_direct(mt_proto_conn *c, int type, uint16_t flags, const char *reason,
                     uint64_t now);

#endif
