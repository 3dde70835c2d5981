/* ws_gate.c: the --ws endpoint (see ws_gate.h): one poll loop over the
 * listener, a stop pipe, and two descriptors per client (the WebSocket and
 * its frame-stream connection to the server).
 *
 * A client goes through: UPGRADE (reading the HTTP request), WAIT (HELLO
 * sent, no verdict yet), OPEN (admitted: audio both ways), CLOSING (a
 * close frame queued: what is queued is written, then the socket closed).
 *
 * Why our own framing (wire/ws.c) and not libwebsockets: libwebsockets
 * owns its event loop (or needs its foreign-loop glue) and its own buffer
 * policy; the gate's whole job is a bounded translation inside one poll
 * loop, and RFC 6455's server side is a small strict reader, fuzzed
 * (tests/fuzz/fuzz_ws.c).
 */
#define _GNU_SOURCE
#include "serve/ws_gate.h"

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
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>

#include "serve/asr_session.h"
#include "serve/byteq.h"
#include "serve/guard.h"
#include "util/errmsg.h"
#include "util/clock.h"
#include "wire/endpoint.h"
#include "wire/frame.h"
#include "wire/http.h"
#include "wire/oggopus.h"
#include "wire/ws.h"
#include "serve/ws_params.h"
#include "serve/static_http.h"

/* ---- the listener's limits (mt-serve(1), --ws, states each one) ---------- */
#define DEFAULT_MAX_CONNS   64                 /* --ws-max-conns */
#define DEFAULT_UPGRADE_NS  10000000000ull     /* the upgrade request, at most */
#define DEFAULT_OUT_MAX     (1024 * 1024)      /* bytes queued to one client */
#define DEFAULT_WRITE_NS    2000000000ull      /* a client taking none of them */
#define DEFAULT_SNDBUF      (16 * 1024)
#define IOUT_MAX            (4 * 1024 * 1024)  /* frames queued to the server */
#define CLOSING_NS          2000000000ull      /* a closing client, at most */
#define PRE_ADMIT_FRAMES    64                 /* audio held until the verdict */
#define AHEAD_NS            10000000000ull     /* audio a session may send ahead
                                                  of real time (from its first
                                                  Audio message): past it, it
                                                  is refused undecoded */
#define SILENT_NS           2000000000ull      /* an upgraded client without
                                                  audio this long is silent: it
                                                  makes room when one is needed */
#define YOUNG_NS            1000000000ull      /* a connection this young is
                                                  spared by its own address's
                                                  cap (a burst of clients
                                                  behind one address would
                                                  evict each other) */
#define REPORT_NS           10000000000ull     /* counts: one line per 10 s */
#define TEXT_MAX      255                /* bytes of one Text message */
/* A packet (MT_OGGOPUS_PACKET_MAX), a page (Ogg's 65,307 bytes), a message
 * (MT_WS_GATE_MSG_MAX) and what a decoder holds (256 KiB without a page)
 * are bounded in wire/; a session's buffered input is its message, its
 * decoder, PRE_ADMIT_FRAMES and IOUT_MAX. */

enum { W_UPGRADE = 0, W_WAIT, W_OPEN, W_CLOSING, W_HELD };   /* W_HELD: a
    wrong token, its 401 held back (the doubling wait, guard.h) */
enum { FAIL_NONE = 0, FAIL_OUT, FAIL_IOUT };   /* which queue overflowed */
enum { MSG_HANDSHAKE = 0, MSG_AUDIO = 1, MSG_TEXT = 2, MSG_ERROR = 5 };


typedef struct wsc {
    int              fd, ifd;          /* the client; the server (-1) */
    int              state;
    uint64_t         deadline;         /* upgrade, or closing */
    char             peer[80];
    char             host[64];         /* peer without its port */
    uint64_t         t_created, t_audio0, t_audio; /* accept; first and
                                          last Audio message (0: none) */
    uint8_t          hbuf[MT_HTTP_MAX_HEAD]; /* the upgrade request so far */
    size_t           hlen;
    mt_ws_reader     rd;
    uint8_t         *msg;              /* [MT_WS_GATE_MSG_MAX] */
    mt_frame_decoder *fdec;            /* the server's frames */
    mt_byteq             out, iout;        /* to the client; to the server */
    mt_byteq             pre;              /* PCM s16le frames decoded before
                                          the verdict, sent once admitted */
    mt_oggopus_dec  *dec;
    mt_oggopus_enc  *enc;
    uint32_t         session, seq;
    uint64_t         hello_seed;       /* from the URL's seeds; 0: the server's */
    int              admitted;
    int              failed;           /* FAIL_*: a queue overflowed: drop it */
    uint64_t         stuck_since;      /* output queued, none taken since */
    mt_asr_sess     *asr;              /* /api/asr-streaming's client */
    int              shut;             /* closing: our side is shut */
    struct mt_ws_gate *g;
} wsc;

struct mt_ws_gate {
    mt_ws_gate_opts o;
    char        model[MT_MODEL_NAME_MAX + 1];
    char        server[108];
    int         lfd, stop_r, stop_w;
    pthread_t   th;
    int         started;
    wsc       **c;                     /* [max_conns] */
    mt_http_req req;
    uint8_t     page[MT_OGGOPUS_PAGE_MAX + 16];
    uint64_t    n_refused, n_dropped, n_evicted, last_report;
    mt_guard_fails auth;               /* wrong tokens per address */
    mt_guard_agg   agg;                /* crowd-prone log lines */
};

#define glog(g, ...) mt_logf((g)->o.log, (g)->o.log_ctx, __VA_ARGS__)

/* ---- to the client ------------------------------------------------------------ */

static void ws_send(wsc *c, int op, const void *a, size_t alen, const void *b, size_t blen)
{
    uint8_t h[10];
    size_t hl = mt_ws_header(op, alen + blen, h);
    if (mt_byteq_put(&c->out, h, hl, c->g->o.out_max) != 0 ||
        (alen && mt_byteq_put(&c->out, a, alen, c->g->o.out_max) != 0) ||
        (blen && mt_byteq_put(&c->out, b, blen, c->g->o.out_max) != 0))
        c->failed = FAIL_OUT;   /* the client does not read */
}

/* A Kyutai message: the type byte, then the payload. */
static void kmsg(wsc *c, int type, const void *p, size_t n)
{
    uint8_t t = (uint8_t)type;
    ws_send(c, MT_WS_BINARY, &t, 1, p, n);
}

static void ws_close(wsc *c, int code, const char *reason)
{
    uint8_t b[2 + 123];
    size_t rl = strlen(reason);
    if (rl > 123)
        rl = 123;
    while (rl > 0 && rl < strlen(reason) && ((uint8_t)reason[rl] & 0xc0) == 0x80)
        rl--;   /* not inside a character: the client checks it is UTF-8 */
    b[0] = (uint8_t)(code >> 8);
    b[1] = (uint8_t)code;
    memcpy(b + 2, reason, rl);
    ws_send(c, MT_WS_CLOSE, b, 2 + rl, NULL, 0);
    c->state = W_CLOSING;
    c->deadline = mt_clock_ns() + CLOSING_NS;
    if (c->ifd >= 0) {
        close(c->ifd);   /* the server counts what was unanswered */
        c->ifd = -1;
    }
}

/* The reason as a Text message (Kyutai's clients show text, not Error
 * messages), as an Error message, then a clean close. */
static void refuse(wsc *c, const char *why)
{
    if (c->asr) {
        mt_asr_sess_error(c->asr, why);   /* the ASR protocol's Error */
    } else {
        char text[TEXT_MAX + 1];
        snprintf(text, sizeof text, " [mt-serve: %s] ", why);
        mt_utf8_sanitize(text);   /* a cut in a character: a '?' */
        kmsg(c, MSG_TEXT, text, strlen(text));
        kmsg(c, MSG_ERROR, why, strlen(why));
    }
    ws_close(c, 1000, "");
}

static void http_answer(wsc *c, int status, const char *extra, const char *text)
{
    char buf[600];
    int n = snprintf(buf, sizeof buf, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; "
                     "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n%s",
                     status, mt_http_reason(status), strlen(text), extra ? extra : "", text);
    if (n > 0 && (size_t)n < sizeof buf && mt_byteq_put(&c->out, buf, (size_t)n, c->g->o.out_max) == 0) {
        c->state = W_CLOSING;
        c->deadline = mt_clock_ns() + CLOSING_NS;
        return;
    }
    c->failed = FAIL_OUT;
}

/* ---- to the server ----------------------------------------------------------- */

static void send_frame(wsc *c, int type, const void *payload, uint32_t len)
{
    static uint8_t buf[MT_FRAME_MAX_SIZE];   /* the gate's thread only */
    mt_frame f;
    memset(&f, 0, sizeof f);
    f.type = (uint8_t)type;
    f.session = c->session;
    f.seq = type == MT_FRAME_AUDIO ? c->seq++ : 0;
    if (type == MT_FRAME_HELLO)
        mt_frame_set_hello_seed(&f, c->hello_seed);
    if (type == MT_FRAME_HELLO && c->asr)
        f.flags = MT_FLAG_PRS;    /* Step messages: the extra heads' PRS frames */
    f.t_send = mt_clock_ns();
    f.length = len;
    f.payload = payload;
    long n = mt_frame_encode(&f, buf, sizeof buf);
    if (n < 0 || mt_byteq_put(&c->iout, buf, (size_t)n, IOUT_MAX) != 0)
        c->failed = FAIL_IOUT;   /* the server does not take it */
}

/* A whole decoded frame of the client's audio: an AUDIO frame once
 * admitted; before the verdict it waits (a client may speak before the
 * Handshake), up to PRE_ADMIT_FRAMES, past which it is refused rather
 * than have frames lost without a count. */
static void on_pcm(void *ctx, const int16_t *pcm)
{
    wsc *c = ctx;
    if (c->state == W_CLOSING)
        return;
    static uint8_t le[MT_FRAME_MAX_PAYLOAD];
    int n = c->g->o.frame_samples;
    for (int i = 0; i < n; i++) {
        le[2 * i] = (uint8_t)((uint16_t)pcm[i] & 0xff);
        le[2 * i + 1] = (uint8_t)((uint16_t)pcm[i] >> 8);
    }
    if (!c->admitted) {
        if (mt_byteq_put(&c->pre, le, (size_t)(2 * n), (size_t)(2 * n) * PRE_ADMIT_FRAMES) != 0)
            refuse(c, "too much audio before admission");
        return;
    }
    send_frame(c, MT_FRAME_AUDIO, le, (uint32_t)(2 * n));
}

/* ---- /api/asr-streaming (serve/asr_session.h does the protocol) ------------ */

static void asr_send(void *ctx, const uint8_t *msg, size_t n)
{
    ws_send(ctx, MT_WS_BINARY, msg, n, NULL, 0);
}

/* A client message refused: the Error, then a close with the reason. */
static void asr_refuse(wsc *c, const char *why)
{
    mt_asr_sess_error(c->asr, why);
    ws_close(c, 1008, why);
}

static int asr_open(mt_ws_gate *g, wsc *c)
{
    mt_asr_sess_opts ao = {
        .rate = g->o.rate, .frame_samples = g->o.frame_samples, .delay = g->o.asr_delay,
        .piece = g->o.text_piece, .piece_ctx = g->o.text_ctx, .send = asr_send,
        .frame = on_pcm, .ctx = c, .log = g->o.log, .log_ctx = g->o.log_ctx, .who = c->peer,
    };
    c->asr = mt_asr_sess_new(&ao);
    return c->asr ? 0 : -1;
}

/* A TEXT frame: the answer to one frame of the client's audio. */
static void asr_answer(wsc *c, const mt_frame *f)
{
    int32_t id = 0;
    int n = f->length >= 4 && !(f->flags & MT_FLAG_FILL);
    if (n)
        id = (int32_t)((uint32_t)f->payload[0] | (uint32_t)f->payload[1] << 8 |
                       (uint32_t)f->payload[2] << 16 | (uint32_t)f->payload[3] << 24);
    mt_asr_sess_answer(c->asr, f->seq, (f->flags & MT_FLAG_FILL) != 0, &id, n, mt_clock_ns());
}

/* ---- the upgrade ---------------------------------------------------------------- */

/* 1 when the comma-separated list has the token (any case). */
static int has_token(const char *list, const char *tok)
{
    size_t tl = strlen(tok);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - p) == tl && strncasecmp(p, tok, tl) == 0)
            return 1;
        p = e;
    }
    return 0;
}

/* The value of a query parameter into out (percent-decoded); 0, or -1. */
static int query_param(const char *q, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = q; *p;) {
        const char *e = strchr(p, '&');
        if (!e)
            e = p + strlen(p);
        if ((size_t)(e - p) > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t o = 0;
            for (const char *v = p + nl + 1; v < e; v++) {
                int ch = (unsigned char)*v;
                if (ch == '%' && e - v >= 3) {
                    char hex[3] = {v[1], v[2], 0};
                    char *end;
                    long x = strtol(hex, &end, 16);
                    if (*end)
                        return -1;
                    ch = (int)x;
                    v += 2;
                } else if (ch == '+') {
                    ch = ' ';
                }
                if (o + 1 >= cap)
                    return -1;
                out[o++] = (char)ch;
            }
            out[o] = '\0';
            return 0;
        }
        p = *e ? e + 1 : e;
    }
    return -1;
}

static int authorized(const mt_ws_gate *g, const mt_http_req *r)
{
    if (!g->o.token)
        return 1;
    char q[MT_TOKEN_MAX + 2];
    const char *h = mt_http_field_get(r, "kyutai-api-key");
    if (h && strlen(h) <= MT_TOKEN_MAX &&
        mt_token_equal(h, strlen(h), g->o.token, g->o.token_len))
        return 1;
    /* the query parameter of Kyutai's servers (auth_id) and the one their
     * web client sends (worker_auth_id, client/'s Conversation.tsx) */
    static const char *const names[] = { "auth_id", "worker_auth_id" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (query_param(r->query, names[i], q, sizeof q) == 0 &&
            mt_token_equal(q, strlen(q), g->o.token, g->o.token_len))
            return 1;
    return 0;
}

/* --static: the file's answer (static_http.h), then the connection
 * closes; a large file gets the time it needs while the client reads. */
static void static_answer(mt_ws_gate *g, wsc *c, const mt_http_req *r)
{
    uint8_t *resp = NULL;
    size_t len = 0;
    int status = 0;
    char why[120];
    if (mt_static_answer(g->o.static_files, r->method, r->path, &resp, &len, &status, why,
                         sizeof why) != 0 ||
        mt_byteq_put(&c->out, resp, len, len > g->o.out_max ? len : g->o.out_max) != 0) {
        free(resp);
        c->failed = 1;
        return;
    }
    free(resp);
    if (status != 200)
        glog(g, "static %s: %.8s %.200s: %d (%s)", c->peer, r->method, r->path, status, why);
    c->state = W_CLOSING;
    c->deadline = mt_clock_ns() + CLOSING_NS + (uint64_t)(len >> 10) * 1000000ull;  /* +1 ms a KiB */
}

#define UNAUTHORIZED "unauthorized: send the token as kyutai-api-key, auth_id or worker_auth_id\n"

/* A wrong or missing token: 401 after the wait that doubles with each
 * failure of the address (the TCP listener's, guard.h), or at once past
 * the held budgets; the first of an interval logged, the rest counted. */
static void unauthorized(mt_ws_gate *g, wsc *c)
{
    uint64_t now = mt_clock_ns();
    g->n_refused++;
    mt_guard_fail *a = mt_guard_fail_entry(&g->auth, c->host, now);
    uint64_t delay = mt_guard_fail_note(&g->auth, a, now);
    if (mt_guard_agg_note(&g->agg, "ws: wrong or missing token", now))
        glog(g, "ws: %s: wrong or missing token: 401 %s%.2f s (failure %u from this "
             "address)", c->peer, delay ? "in " : "now, not held: the held ones at "
             "their budget; ", (double)delay / 1e9, a->count);
    if (!delay) {
        http_answer(c, 401, NULL, UNAUTHORIZED);
        return;
    }
    c->state = W_HELD;
    c->deadline = now + delay;
}

/* A held connection's wait is over (answered) or it is gone. */
static void unhold(mt_ws_gate *g, wsc *c)
{
    if (c->state != W_HELD)
        return;
    mt_guard_fail_unhold(&g->auth, c->host);
    c->state = W_UPGRADE;
}

/* A whole upgrade request: 101 and HELLO to the server, or an HTTP
 * refusal. */
static void upgrade(mt_ws_gate *g, wsc *c, const mt_http_req *r)
{
    if (strncmp(r->path, "/api/", 5) != 0 && g->o.static_files) {   /* /api/: never files */
        static_answer(g, c, r);
        return;
    }
    int asr = strcmp(r->path, "/api/asr-streaming") == 0;
    if (asr && !g->o.asr) {
        http_answer(c, 404, NULL, "not found: this model is not speech-to-text; the chat "
                    "is at /api/chat\n");
        return;
    }
    if (strcmp(r->path, "/api/chat") != 0 && !asr) {
        http_answer(c, 404, NULL, "not found: the chat is at /api/chat\n");
        return;
    }
    if (strcmp(r->method, "GET") != 0) {
        http_answer(c, 405, "Allow: GET\r\n", "GET only\n");
        return;
    }
    const char *up = mt_http_field_get(r, "Upgrade");
    const char *conn = mt_http_field_get(r, "Connection");
    const char *ver = mt_http_field_get(r, "Sec-WebSocket-Version");
    const char *key = mt_http_field_get(r, "Sec-WebSocket-Key");
    if (!up || !has_token(up, "websocket") || !conn || !has_token(conn, "upgrade")) {
        http_answer(c, 426, "Upgrade: websocket\r\n", "a WebSocket upgrade is needed\n");
        return;
    }
    if (!ver || strcmp(ver, "13") != 0) {
        http_answer(c, 426, "Sec-WebSocket-Version: 13\r\n", "WebSocket version 13 only\n");
        return;
    }
    char accept[29];
    if (!key || mt_ws_accept_key(key, accept) != 0) {
        http_answer(c, 400, NULL, "bad Sec-WebSocket-Key\n");
        return;
    }
    if (!authorized(g, r)) {
        unauthorized(g, c);
        return;
    }
    if (g->o.token) {   /* a right token clears its address's count */
        mt_guard_fail *a = mt_guard_fail_find(&g->auth, c->host);
        if (a && !a->held)
            a->count = 0;
    }
    char resp[256];
    int n = snprintf(resp, sizeof resp, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: "
                     "websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                     accept);
    if (mt_byteq_put(&c->out, resp, (size_t)n, g->o.out_max) != 0) {
        c->failed = FAIL_OUT;
        return;
    }
    c->state = W_WAIT;
    c->deadline = 0;
    if (asr && asr_open(g, c) != 0) {
        c->failed = 1;
        return;
    }
    /* Kyutai's sampling parameters (ws_params.h): refused by name when out
     * of range, the ones not implemented named in the log */
    mt_hello h;
    memset(&h, 0, sizeof h);
    char said[256], ign[256], why[160];
    if (mt_ws_chat_params(r->query, &h, &c->hello_seed, said, sizeof said, ign, sizeof ign,
                          why, sizeof why) != 0) {
        glog(g, "websocket %s: refused: %s", c->peer, why);
        refuse(c, why);
        return;
    }
    if (said[0] || ign[0])
        glog(g, "websocket %s: chat parameters: %s%s%s", c->peer, said[0] ? said : "none",
             ign[0] ? "; ignored (not implemented): " : "", ign);
    char err[256];
    int fd = mt_endpoint_connect(g->server, 1000, err, sizeof err);
    if (fd < 0) {
        refuse(c, fd == -2 ? "server busy; retry later" : "server unavailable");
        return;
    }
    c->ifd = fd;
    h.sample_rate = (uint32_t)g->o.rate;
    h.frame_samples = (uint32_t)g->o.frame_samples;
    h.channels = 1;
    h.encoding = MT_ENC_PCM_S16LE;
    snprintf(h.model, sizeof h.model, "%s", g->model);
    uint8_t hb[MT_HELLO_MAX];
    long hl = mt_hello_encode(&h, hb, sizeof hb);
    if (hl < 0) {
        refuse(c, "server error: HELLO");
        return;
    }
    send_frame(c, MT_FRAME_HELLO, hb, (uint32_t)hl);
}

/* ---- reading ------------------------------------------------------------------ */

/* The audio this message may bring: real time since the first Audio
 * message and AHEAD_NS more, in samples; what passes it is refused
 * undecoded (an Ogg bomb costs no more than that, however small its
 * packets). */
static void allow_audio(wsc *c)
{
    uint64_t now = mt_clock_ns();
    if (!c->t_audio0)
        c->t_audio0 = now;
    c->t_audio = now;
    uint64_t ns = now - c->t_audio0 + AHEAD_NS;
    mt_oggopus_dec_limit(c->dec, (int64_t)(ns / 1000000) * c->g->o.rate / 1000);
}

/* One whole client message. */
static void client_message(wsc *c, const mt_ws_msg *m)
{
    char err[200];
    switch (m->op) {
    case MT_WS_CLOSE:
        /* the client is done: END (what it sent is answered or counted by
         * the server), and the close answered */
        if (c->admitted && c->ifd >= 0)
            send_frame(c, MT_FRAME_END, NULL, 0);
        if (c->ifd >= 0 && mt_byteq_size(&c->iout) && mt_byteq_flush(&c->iout, c->ifd) != 0)
            c->failed = FAIL_IOUT;
        ws_close(c, 1000, "");
        return;
    case MT_WS_PING:
        ws_send(c, MT_WS_PONG, m->data, m->len, NULL, 0);
        return;
    case MT_WS_BINARY:
        if (c->asr) {
            if (mt_asr_sess_client(c->asr, m->data, m->len, mt_clock_ns(), err, sizeof err) != 0)
                asr_refuse(c, err);
            return;
        }
        if (m->len == 0 || m->data[0] != MSG_AUDIO)
            return;   /* unknown types discarded; no use for the others here */
        allow_audio(c);
        if (mt_oggopus_dec_feed(c->dec, m->data + 1, m->len - 1, err, sizeof err) != 0) {
            char why[256];
            snprintf(why, sizeof why, "bad audio: %s", err);
            refuse(c, why);
        }
        return;
    default:
        return;       /* pong, text: nothing to do */
    }
}

static void client_bytes(wsc *c, const uint8_t *p, size_t n)
{
    while (n > 0 && c->state != W_CLOSING && !c->failed) {
        size_t used = 0;
        mt_ws_msg m;
        int rc = mt_ws_read(&c->rd, p, n, &used, &m);
        p += used;
        n -= used;
        if (rc == MT_WS_MESSAGE) {
            client_message(c, &m);
        } else if (rc < 0) {
            ws_close(c, rc == MT_WS_ETOOBIG ? 1009 : rc == MT_WS_EDATA ? 1007 : 1002,
                     c->rd.why);
            return;
        }
    }
}

/* 0 to go on, -1 to drop the client. */
static int client_read(mt_ws_gate *g, wsc *c)
{
    uint8_t buf[16384];
    for (int rounds = 0; rounds < 16; rounds++) {
        if (c->state == W_HELD)   /* its 401 is due later: it hung up */
            return -1;
        if (c->state == W_UPGRADE) {
            size_t room = sizeof c->hbuf - c->hlen;
            ssize_t n = room ? recv(c->fd, c->hbuf + c->hlen, room, 0) : 0;
            if (room && n <= 0)
                return n < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
            c->hlen += (size_t)n;
            int status = 0;
            char err[160];
            long hl = mt_http_parse((char *)c->hbuf, c->hlen, &g->req, &status, err, sizeof err);
            if (hl == 0)
                continue;
            if (hl < 0) {
                char text[200];
                snprintf(text, sizeof text, "%s\n", err);
                http_answer(c, status, NULL, text);
                return 0;
            }
            upgrade(g, c, &g->req);
            if (c->state == W_HELD)
                return 0;   /* read no more: its 401 comes after the wait */
            if (c->state != W_UPGRADE && c->state != W_CLOSING && (size_t)hl < c->hlen)
                client_bytes(c, c->hbuf + hl, c->hlen - (size_t)hl);
            continue;
        }
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (n == 0) {   /* the client is gone: what can still go, goes */
            if (mt_byteq_size(&c->out) && mt_byteq_flush(&c->out, c->fd) != 0)
                return -1;
            return -1;
        }
        if (c->state != W_CLOSING)
            client_bytes(c, buf, (size_t)n);
    }
    return 0;
}

/* A TEXT frame: a Text message for each id with text, in order (the
 * frame follows the audio it goes with); a FILL has none. */
static void text_frame(mt_ws_gate *g, wsc *c, const mt_frame *f)
{
    if (!g->o.text_piece || (f->flags & MT_FLAG_FILL))
        return;
    char piece[TEXT_MAX + 1];
    for (uint32_t i = 0; i + 4 <= f->length; i += 4) {
        const uint8_t *q = f->payload + i;
        int id = (int)((uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                       (uint32_t)q[3] << 24);
        const char *s = g->o.text_piece(g->o.text_ctx, id);
        if (!s || !*s)
            continue;
        snprintf(piece, sizeof piece, "%s", s);
        mt_utf8_sanitize(piece);   /* valid UTF-8 whatever the file said */
        kmsg(c, MSG_TEXT, piece, strlen(piece));
    }
}

/* One frame from the server. */
static void server_frame(mt_ws_gate *g, wsc *c, const mt_frame *f)
{
    char err[200], why[MT_REASON_MAX + 1];
    switch (f->type) {
    case MT_FRAME_ACCEPT: {
        c->admitted = 1;
        c->session = f->session;
        c->state = W_OPEN;
        if (c->asr) {
            if (!(f->flags & MT_FLAG_TEXT_ONLY))
                refuse(c, "this server's model is not speech-to-text");
            else
                mt_asr_sess_ready(c->asr);
            return;
        }
        uint8_t hs[8] = {0};
        uint32_t pv = MT_WS_PROTOCOL_VERSION, mv = MT_WS_MODEL_VERSION;
        for (int i = 0; i < 4; i++) {
            hs[i] = (uint8_t)(pv >> (8 * i));
            hs[4 + i] = (uint8_t)(mv >> (8 * i));
        }
        kmsg(c, MSG_HANDSHAKE, hs, sizeof hs);
        long n = mt_oggopus_enc_headers(c->enc, g->page, sizeof g->page, err, sizeof err);
        if (n < 0) {
            refuse(c, "server error: Ogg headers");
            return;
        }
        kmsg(c, MSG_AUDIO, g->page, (size_t)n);
        /* what the client said before the verdict, in order */
        size_t fb = (size_t)(2 * g->o.frame_samples);
        for (size_t at = c->pre.off; at + fb <= c->pre.len; at += fb)
            send_frame(c, MT_FRAME_AUDIO, c->pre.p + at, (uint32_t)fb);
        c->pre.off = c->pre.len = 0;
        return;
    }
    case MT_FRAME_REJECT:
    case MT_FRAME_ERROR: {
        size_t n = f->length < MT_REASON_MAX ? f->length : MT_REASON_MAX;
        memcpy(why, f->payload, n);
        why[n] = '\0';
        mt_utf8_sanitize(why);
        refuse(c, why[0] ? why : "refused");
        return;
    }
    case MT_FRAME_AUDIO: {
        if (!c->admitted || f->length != (uint32_t)(2 * g->o.frame_samples)) {
            refuse(c, "server error: unexpected audio frame");
            return;
        }
        static int16_t pcm[MT_FRAME_MAX_PAYLOAD / 2];
        for (int i = 0; i < g->o.frame_samples; i++)
            pcm[i] = (int16_t)(uint16_t)(f->payload[2 * i] | f->payload[2 * i + 1] << 8);
        long n = mt_oggopus_enc_frame(c->enc, pcm, g->page, sizeof g->page, err, sizeof err);
        if (n < 0) {
            refuse(c, "server error: Opus encoding");
            return;
        }
        kmsg(c, MSG_AUDIO, g->page, (size_t)n);
        return;
    }
    case MT_FRAME_PRS: {          /* before the TEXT answer it goes with */
        float prs[MT_PRS_MAX];
        int n = (int)(f->length / 4);
        for (int j = 0; j < n && j < MT_PRS_MAX; j++)
            prs[j] = mt_frame_f32(f->payload + 4 * j);
        if (c->admitted && c->asr)
            mt_asr_sess_prs(c->asr, f->seq, prs, n);
        return;
    }
    case MT_FRAME_TEXT:
        if (c->admitted && c->asr)
            asr_answer(c, f);
        else if (c->admitted)
            text_frame(g, c, f);
        return;
    case MT_FRAME_END: {
        /* the client's own end closes this side first (client_message):
         * an END that comes is the server's (a drain, its timeout, the
         * controller): going away, with the reason */
        size_t n = f->length < MT_REASON_MAX ? f->length : MT_REASON_MAX;
        memcpy(why, f->payload, n);
        why[n] = '\0';
        mt_utf8_sanitize(why);
        ws_close(c, 1001, why[0] ? why : "server going away: the session was ended "
                 "by the server (draining)");
        return;
    }
    default:
        return;
    }
}

/* 0 to go on, -1 when the server's side is gone (the client is told). */
static int server_read(mt_ws_gate *g, wsc *c)
{
    uint8_t buf[16384];
    for (int rounds = 0; rounds < 16 && c->ifd >= 0; rounds++) {
        ssize_t n = recv(c->ifd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (n <= 0) {
            refuse(c, "the server closed the session");
            return 0;
        }
        const uint8_t *p = buf;
        size_t left = (size_t)n;
        while (left > 0 && c->ifd >= 0 && !c->failed) {
            size_t used = 0;
            mt_frame f;
            int rc = mt_frame_decode(c->fdec, p, left, &used, &f);
            p += used;
            left -= used;
            if (rc == MT_FRAME_OK)
                server_frame(g, c, &f);
            else if (rc < 0) {
                refuse(c, "server error: malformed frame stream");
                break;
            }
        }
    }
    return 0;
}

/* ---- connections ------------------------------------------------------------ */

static void conn_free(mt_ws_gate *g, int i)
{
    wsc *c = g->c[i];
    unhold(g, c);
    close(c->fd);
    if (c->ifd >= 0)
        close(c->ifd);
    mt_oggopus_dec_free(c->dec);
    mt_oggopus_enc_free(c->enc);
    mt_asr_sess_free(c->asr);
    free(c->msg);
    free(c->fdec);
    free(c->out.p);
    free(c->iout.p);
    free(c->pre.p);
    free(c);
    g->c[i] = NULL;
}

static wsc *conn_new(mt_ws_gate *g, int fd, uint64_t now)
{
    wsc *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->ifd = -1;
    c->g = g;
    c->deadline = now + g->o.upgrade_timeout_ns;
    c->t_created = now;
    c->msg = malloc(MT_WS_GATE_MSG_MAX);
    c->fdec = malloc(sizeof *c->fdec);
    char err[160];
    if (!c->msg || !c->fdec ||
        mt_oggopus_dec_create(g->o.rate, g->o.frame_samples, on_pcm, c, &c->dec, err,
                              sizeof err) != 0 ||
        mt_oggopus_enc_create(g->o.rate, g->o.frame_samples, (uint32_t)fd * 2654435761u,
                              &c->enc, err, sizeof err) != 0) {
        mt_oggopus_dec_free(c->dec);
        free(c->msg);
        free(c->fdec);
        free(c);
        return NULL;
    }
    /* a frame's page answered when it arrives, not one period later */
    mt_oggopus_dec_keep_preskip(c->dec);
    mt_ws_reader_init(&c->rd, c->msg, MT_WS_GATE_MSG_MAX);
    mt_frame_decoder_init(c->fdec);
    return c;
}

/* Whether c holds a place without using it: still upgrading, held for
 * its 401, waiting for the verdict, or upgraded and silent (no audio for
 * SILENT_NS). Such a connection makes room when one is needed. */
static int idle(const wsc *c, uint64_t now)
{
    if (c->state == W_CLOSING)
        return 0;
    if (c->state == W_UPGRADE || c->state == W_HELD || c->state == W_WAIT)
        return 1;
    uint64_t last = c->t_audio ? c->t_audio : c->t_created;
    return now - last >= SILENT_NS;
}

/* The oldest idle connection (of host, none younger than YOUNG_NS; or
 * of anyone: NULL), those still upgrading first: -1 when none. */
static int oldest_idle(const mt_ws_gate *g, const char *host, uint64_t now, int *count)
{
    int best = -1, n = 0;
    for (int i = 0; i < g->o.max_conns; i++) {
        const wsc *c = g->c[i];
        if (!c || !idle(c, now) ||
            (host && (strcmp(c->host, host) != 0 || now - c->t_created < YOUNG_NS)))
            continue;
        n++;
        if (best < 0) {
            best = i;
            continue;
        }
        const wsc *b = g->c[best];
        int cu = c->state == W_UPGRADE, bu = b->state == W_UPGRADE;
        if (cu > bu || (cu == bu && c->t_created < b->t_created))
            best = i;
    }
    if (count)
        *count = n;
    return best;
}

/* An idle connection makes room: told why (an upgraded one gets close
 * 1008 with the reason), then freed at once. */
static void evict(mt_ws_gate *g, int i, const char *why)
{
    wsc *c = g->c[i];
    if (c->state == W_OPEN || c->state == W_WAIT) {
        if (c->admitted && c->ifd >= 0)
            send_frame(c, MT_FRAME_END, NULL, 0);   /* the server counts the rest */
        if (c->ifd >= 0 && mt_byteq_size(&c->iout))
            (void)mt_byteq_flush(&c->iout, c->ifd);
        ws_close(c, 1008, why);
        (void)mt_byteq_flush(&c->out, c->fd);
    }
    g->n_evicted++;
    conn_free(g, i);
}

/* The place for a new connection of host: a free slot, or one an idle
 * connection makes (of host when host is at its cap, else anyone's):
 * -1 when none (the endpoint is full of connections in use). */
static int make_room(mt_ws_gate *g, const char *host, uint64_t now)
{
    int mine = 0, v = oldest_idle(g, host, now, &mine);
    if (v >= 0 && mine >= g->o.max_per_addr) {
        evict(g, v, "evicted: a newer connection from the same address needed the "
              "place (--ws-max-per-addr)");
        return v;
    }
    for (int i = 0; i < g->o.max_conns; i++)
        if (!g->c[i])
            return i;
    v = oldest_idle(g, NULL, now, NULL);
    if (v < 0)
        return -1;
    evict(g, v, "evicted: idle (no audio) while the endpoint was full (--ws-max-conns)");
    return v;
}

static void on_accept(mt_ws_gate *g, uint64_t now)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(g->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        char peer[80], host[64];
        mt_sockaddr_str((struct sockaddr *)&sa, sl, peer, sizeof peer);
        mt_guard_host(peer, host, sizeof host);
        int slot = make_room(g, host, now);
        /* one small page every frame period: Nagle would hold each one for
         * the client's delayed ACK */
        int one = 1;
        if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &g->o.sndbuf, sizeof g->o.sndbuf) != 0)
            glog(g, "ws: socket options: %s", strerror(errno));
        wsc *c = slot >= 0 ? conn_new(g, fd, now) : NULL;
        if (!c) {
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                       "Connection: close\r\n\r\n";
            if (send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                /* gone already */
            }
            close(fd);
            g->n_refused++;
            continue;
        }
        snprintf(c->peer, sizeof c->peer, "%s", peer);
        snprintf(c->host, sizeof c->host, "%s", host);
        g->c[slot] = c;
    }
}

static void report(mt_ws_gate *g, uint64_t now, int final)
{
    char msg[1024];
    double secs;
    if (mt_guard_agg_summary(&g->agg, now, final, msg, sizeof msg, &secs))
        glog(g, "ws: besides the lines logged, in the last %.1f s: %s", secs, msg);
    if (!g->n_refused && !g->n_dropped && !g->n_evicted)
        return;
    if (!final && now - g->last_report < REPORT_NS)
        return;
    glog(g, "ws: %llu connection(s) refused (full: --ws-max-conns %d, or unauthorized), "
         "%llu idle ones evicted for newer ones, %llu dropped (not reading, or out "
         "of time)", (unsigned long long)g->n_refused, g->o.max_conns,
         (unsigned long long)g->n_evicted, (unsigned long long)g->n_dropped);
    g->n_refused = g->n_dropped = g->n_evicted = 0;
    g->last_report = now;
}

/* After events: flushes, and the verdict on each connection. 0 keeps it. */
static int settle(mt_ws_gate *g, wsc *c, uint64_t now)
{
    if (c->ifd >= 0 && mt_byteq_size(&c->iout) && mt_byteq_flush(&c->iout, c->ifd) != 0)
        refuse(c, "the server closed the session");
    if (mt_byteq_size(&c->out) && mt_byteq_flush(&c->out, c->fd) != 0)
        return -1;
    if (c->failed) {
        const char *why = c->failed == FAIL_IOUT ? "its queue to the server passed "
                          "the bound (4 MiB): the server does not take its audio"
                          : "its output queue passed the bound (--ws out_max): the "
                          "client does not read";
        if (mt_guard_agg_note(&g->agg, why, now))
            glog(g, "ws: %s dropped: %s (%zu bytes)", c->peer, why,
                 c->failed == FAIL_IOUT ? (size_t)IOUT_MAX : g->o.out_max);
        g->n_dropped++;
        return -1;
    }
    /* as the frame socket's slow reader: output waiting with none taken
     * for write_timeout (its session's frames are counted unanswered by
     * the server when the gate's connection to it closes) */
    if (!mt_byteq_size(&c->out)) {
        c->stuck_since = 0;
    } else if (!c->stuck_since) {
        c->stuck_since = now;
    } else if (now - c->stuck_since > g->o.write_timeout_ns) {
        if (mt_guard_agg_note(&g->agg, "ws: dropped: no output accepted (the client "
                              "does not read)", now))
            glog(g, "ws: %s dropped: no output accepted for %.1f s (%zu bytes waiting): "
                 "the client does not read", c->peer,
                 (double)(now - c->stuck_since) / 1e9, mt_byteq_size(&c->out));
        g->n_dropped++;
        return -1;
    }
    if (c->state == W_HELD && now >= c->deadline) {   /* its wait is over */
        unhold(g, c);
        http_answer(c, 401, NULL, UNAUTHORIZED);
        return 0;
    }
    /* all written: our side shut, then what the client still sends is read
     * and dropped until it closes (or the closing deadline): closing with
     * its bytes unread would send a reset, and a reset can destroy the
     * Error and the close frame before the client reads them */
    if (c->state == W_CLOSING && !mt_byteq_size(&c->out) && !c->shut) {
        c->shut = 1;
        if (shutdown(c->fd, SHUT_WR) != 0)
            return -1;
    }
    if (c->deadline && now >= c->deadline) {
        g->n_dropped += c->state != W_CLOSING;
        return -1;
    }
    return 0;
}

/* The endpoint stops (the server has drained, or failed): what the
 * server still sent goes out, then a close 1001 with the reason, each as
 * far as the client's socket takes it now. */
static void stopping(mt_ws_gate *g)
{
    for (int i = 0; i < g->o.max_conns; i++) {
        wsc *c = g->c[i];
        if (!c)
            continue;
        if (c->ifd >= 0)
            server_read(g, c);
        if (c->state == W_OPEN || c->state == W_WAIT)
            ws_close(c, 1001, "server going away: it is stopping");
        (void)mt_byteq_flush(&c->out, c->fd);
    }
}

static void *gate_main(void *arg)
{
    mt_ws_gate *g = arg;
    struct sched_param sp = {.sched_priority = 0};
    int e = pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
    if (e != 0)
        glog(g, "ws: leaving SCHED_FIFO: %s", strerror(e));
    int max = g->o.max_conns;
    struct pollfd *pf = calloc((size_t)(2 * max + 2), sizeof *pf);
    int *who = calloc((size_t)(2 * max + 2), sizeof *who);
    if (!pf || !who) {
        glog(g, "ws: out of memory: the endpoint is stopped");
        free(pf);
        free(who);
        return NULL;
    }
    for (;;) {
        uint64_t now = mt_clock_ns(), wake = 0;
        int n = 0;
        pf[n++] = (struct pollfd){.fd = g->stop_r, .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
        for (int i = 0; i < max; i++) {
            wsc *c = g->c[i];
            if (!c)
                continue;
            who[n] = i;
            /* a held one is not read (its 401 comes later): only its hang-up */
            short in = c->state == W_HELD ? POLLRDHUP : POLLIN;
            pf[n++] = (struct pollfd){.fd = c->fd,
                                      .events = (short)(in | (mt_byteq_size(&c->out) ? POLLOUT : 0))};
            if (c->ifd >= 0) {
                who[n] = -1 - i;
                pf[n++] = (struct pollfd){.fd = c->ifd,
                                          .events = (short)(POLLIN | (mt_byteq_size(&c->iout) ? POLLOUT : 0))};
            }
            if (c->deadline && (!wake || c->deadline < wake))
                wake = c->deadline;
            uint64_t stuck = c->stuck_since ? c->stuck_since + g->o.write_timeout_ns + 1 : 0;
            if (stuck && (!wake || stuck < wake))
                wake = stuck;
        }
        int timeout = wake ? (wake > now ? (int)((wake - now + 999999) / 1000000) : 0)
                           : (int)(REPORT_NS / 1000000);
        int r = poll(pf, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR) {
            glog(g, "ws: poll: %s: the endpoint is stopped", strerror(errno));
            break;
        }
        if (r > 0 && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
            break;
        for (int k = 2; r > 0 && k < n; k++) {
            if (!pf[k].revents)
                continue;
            int i = who[k] >= 0 ? who[k] : -1 - who[k];
            wsc *c = g->c[i];
            if (!c)
                continue;
            if (who[k] >= 0) {
                if ((pf[k].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) &&
                    client_read(g, c) != 0) {
                    conn_free(g, i);
                    continue;
                }
            } else if (c->ifd == pf[k].fd && (pf[k].revents & (POLLIN | POLLHUP | POLLERR))) {
                server_read(g, c);
            }
        }
        now = mt_clock_ns();
        for (int i = 0; i < max; i++)
            if (g->c[i] && settle(g, g->c[i], now) != 0)
                conn_free(g, i);
        if (r > 0 && (pf[1].revents & POLLIN))
            on_accept(g, now);
        report(g, now, 0);
    }
    stopping(g);
    report(g, mt_clock_ns(), 1);
    free(pf);
    free(who);
    return NULL;
}

int mt_ws_gate_start(const mt_ws_gate_opts *o, mt_ws_gate **out, char *bound,
                     size_t boundcap, char *err, size_t errlen)
{
    *out = NULL;
    if (!o->addr || !o->server || o->rate <= 0 || o->frame_samples <= 0 ||
        2 * (size_t)o->frame_samples > MT_FRAME_MAX_PAYLOAD) {
        mt_set_err(err, errlen, "ws: no address, no server socket or no format");
        return -1;
    }
    mt_ws_gate *g = mt_calloc_or_err(1, sizeof *g, err, errlen, "ws");
    if (!g)
        return -1;
    g->o = *o;
    g->lfd = g->stop_r = g->stop_w = -1;
    snprintf(g->model, sizeof g->model, "%s", o->model ? o->model : "");
    snprintf(g->server, sizeof g->server, "%s", o->server);
    g->o.model = g->model;
    g->o.server = g->server;
    if (g->o.max_conns <= 0)
        g->o.max_conns = DEFAULT_MAX_CONNS;
    if (g->o.max_per_addr <= 0)
        g->o.max_per_addr = g->o.max_conns / 2 > 0 ? g->o.max_conns / 2 : 1;
    if (!g->o.upgrade_timeout_ns)
        g->o.upgrade_timeout_ns = DEFAULT_UPGRADE_NS;
    if (!g->o.out_max)
        g->o.out_max = DEFAULT_OUT_MAX;
    if (!g->o.write_timeout_ns)
        g->o.write_timeout_ns = DEFAULT_WRITE_NS;
    if (g->o.sndbuf <= 0)
        g->o.sndbuf = DEFAULT_SNDBUF;
    /* a frame the encoder cannot split into packets fails here, not per client */
    mt_oggopus_enc *probe = NULL;
    if (mt_oggopus_enc_create(o->rate, o->frame_samples, 1, &probe, err, errlen) != 0)
        goto fail;
    mt_oggopus_enc_free(probe);
    g->c = mt_calloc_or_err((size_t)g->o.max_conns, sizeof *g->c, err, errlen, "ws");
    if (!g->c)
        goto fail;
    int loop = 0;
    g->lfd = mt_tcp_listen(o->addr, &loop, bound, boundcap, err, errlen);
    if (g->lfd < 0)
        goto fail;
    if (!loop && !o->token && !o->insecure) {
        mt_set_err(err, errlen, "--ws %s is not a loopback address: anyone who can "
                   "reach it could send audio; give --token-file FILE (clients then "
                   "send it as kyutai-api-key, auth_id or worker_auth_id), or --insecure to allow it "
                   "unauthenticated", o->addr);
        goto fail;
    }
    int sp[2];
    if (pipe2(sp, O_NONBLOCK | O_CLOEXEC) != 0) {
        mt_set_err(err, errlen, "ws: pipe: %s", strerror(errno));
        goto fail;
    }
    g->stop_r = sp[0];
    g->stop_w = sp[1];
    int e = pthread_create(&g->th, NULL, gate_main, g);
    if (e != 0) {
        mt_set_err(err, errlen, "ws: pthread_create: %s", strerror(e));
        goto fail;
    }
    g->started = 1;
    if (!loop && !o->token)
        glog(g, "WARNING: --insecure: WebSocket on %s without a token: anyone who "
             "can reach it may connect", bound);
    else if (!o->token)
        glog(g, "WARNING: WebSocket on %s without a token: every user of this "
             "machine may connect (a TCP port has no file mode, unlike the Unix "
             "socket); give --token-file FILE to require one", bound);
    *out = g;
    return 0;
fail:
    mt_ws_gate_stop(g);
    return -1;
}

void mt_ws_gate_stop(mt_ws_gate *g)
{
    if (!g)
        return;
    if (g->started) {
        char b = 1;
        if (write(g->stop_w, &b, 1) < 0) {
            /* a full pipe already holds a stop byte */
        }
        pthread_join(g->th, NULL);
    }
    for (int i = 0; g->c && i < g->o.max_conns; i++)
        if (g->c[i])
            conn_free(g, i);
    free(g->c);
    if (g->lfd >= 0)
        close(g->lfd);
    if (g->stop_r >= 0)
        close(g->stop_r);
    if (g->stop_w >= 0)
        close(g->stop_w);
    free(g);
}
