/* ws_client.c: the bridge from mt_client's mt-frame sessions to a server
 * speaking Kyutai's WebSocket chat protocol (see ws_client.h). One
 * detached thread per session carries client -> server (HELLO, AUDIO,
 * END) and a second, started after the handshake, server -> client.
 */
#define _GNU_SOURCE
#include "client/ws_client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nettle/base64.h>

#include "util/clock.h"
#include "wire/asr_msg.h"
#include "wire/endpoint.h"
#include "wire/frame.h"
#include "wire/oggopus.h"
#include "wire/ws.h"

#define K_RATE     24000
#define K_FRAME    1920
#define MSG_MAX    (1 << 20)        /* the largest server message taken */
#define PCM_RING   64               /* decoded frames waiting for a page */
#define ASR_PATH   "/api/asr-streaming"
#define ASR_FLUSH  32               /* frames of silence after the END: 2.56 s,
                                       more than the text's delay of Kyutai's
                                       models (0.5 and 2.5 s) */
#define ASR_MSG    (32 + 5 * K_FRAME) /* bytes of one Audio message */
enum { K_HANDSHAKE = 0, K_AUDIO = 1, K_TEXT = 2, K_ERROR = 5 };

int mt_ws_client_is_url(const char *spec)
{
    return spec && strncmp(spec, MT_WS_URL_PREFIX, strlen(MT_WS_URL_PREFIX)) == 0;
}

int mt_ws_client_is_asr_url(const char *spec)
{
    if (!mt_ws_client_is_url(spec))
        return 0;
    const char *path = strchr(spec + strlen(MT_WS_URL_PREFIX), '/');
    return path && strncmp(path, ASR_PATH, strlen(ASR_PATH)) == 0 &&
           (path[strlen(ASR_PATH)] == '\0' || path[strlen(ASR_PATH)] == '?');
}

long mt_ws_client_frame(int op, const uint8_t *p, size_t n,
                        const uint8_t mask[4], uint8_t *out, size_t cap)
{
    size_t h;
    if (cap < n + 14)
        return -1;
    out[0] = (uint8_t)(0x80 | (op & 0x0f));
    if (n < 126) {
        out[1] = (uint8_t)(0x80 | n);
        h = 2;
    } else if (n < 65536) {
        out[1] = 0x80 | 126;
        out[2] = (uint8_t)(n >> 8);
        out[3] = (uint8_t)n;
        h = 4;
    } else {
        out[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++)
            out[2 + i] = (uint8_t)((uint64_t)n >> (8 * (7 - i)));
        h = 10;
    }
    memcpy(out + h, mask, 4);
    h += 4;
    for (size_t i = 0; i < n; i++)
        out[h + i] = p[i] ^ mask[i & 3];
    return (long)(h + n);
}

typedef struct bridge {
    char     url[512];
    int      lfd;              /* our end of the pair (mt-frame) */
    int      tfd;              /* the TCP connection (blocking) */
    const uint8_t *mem;        /* [memlen]: server bytes from memory
                                  (mt_ws_client_scan), not the socket */
    size_t   memlen;
    uint8_t  rbuf[4096];       /* [rlen - roff]: server bytes read ahead */
    size_t   roff, rlen;
    uint8_t *msg;              /* [MSG_MAX]: one server message */
    pthread_mutex_t mu;
    uint64_t sent, answered;   /* AUDIO frames sent up, pages back */
    int      up_done;          /* the client's END came */
    int      down_done;        /* the server's side ended */
    int      going_away;       /* close 1001: the server drained the
                                  session: done (END), as over mt-frame */
    pthread_cond_t cv;
    int16_t  ring[PCM_RING][K_FRAME]; /* decoded frames not yet handed out */
    unsigned rhead, rcount;
    uint32_t session;
    int      asr;              /* the speech-to-text protocol (ASR_PATH) */
} bridge;

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One mt-frame to the client; type with payload p[0..n). */
static int to_client(bridge *b, int type, uint16_t flags, uint32_t seq,
                     const void *p, size_t n)
{
    static __thread uint8_t out[MT_FRAME_MAX_SIZE];
    mt_frame f = {0};
    f.type = (uint8_t)type;
    f.flags = flags;
    f.session = b->session;
    f.seq = seq;
    f.t_send = mt_clock_ns();
    f.length = (uint32_t)n;
    f.payload = p;
    long len = mt_frame_encode(&f, out, sizeof out);
    return len < 0 ? -1 : write_all(b->lfd, out, (size_t)len);
}

static void reason(bridge *b, int type, const char *fmt, ...)
{
    char r[MT_REASON_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r, sizeof r, fmt, ap);
    va_end(ap);
    mt_utf8_sanitize(r);
    (void)to_client(b, type, 0, 0, r, strlen(r));
}

static int to_server(bridge *b, int op, const uint8_t *t, const uint8_t *p, size_t n)
{
    static __thread uint8_t out[MT_OGGOPUS_PAGE_MAX + 32];
    static __thread uint8_t pl[MT_OGGOPUS_PAGE_MAX + 8];
    uint8_t mask[4];
    if (n + 1 > sizeof pl || getrandom(mask, 4, 0) != 4)
        return -1;
    size_t k = 0;
    if (t)
        pl[k++] = *t;
    if (n)
        memcpy(pl + k, p, n);
    long len = mt_ws_client_frame(op, pl, k + n, mask, out, sizeof out);
    return len < 0 ? -1 : write_all(b->tfd, out, (size_t)len);
}

/* n bytes from the server, through the read-ahead. 0 or -1. */
static int srv_read(bridge *b, uint8_t *p, size_t n)
{
    while (n) {
        if (b->roff == b->rlen && b->mem) {
            if (!b->memlen)
                return -1;
            b->rlen = b->memlen < sizeof b->rbuf ? b->memlen : sizeof b->rbuf;
            memcpy(b->rbuf, b->mem, b->rlen);
            b->roff = 0;
            b->mem += b->rlen;
            b->memlen -= b->rlen;
        }
        if (b->roff == b->rlen) {
            ssize_t r = recv(b->tfd, b->rbuf, sizeof b->rbuf, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return -1;
            b->roff = 0;
            b->rlen = (size_t)r;
        }
        size_t k = b->rlen - b->roff < n ? b->rlen - b->roff : n;
        memcpy(p, b->rbuf + b->roff, k);
        b->roff += k;
        p += k;
        n -= k;
    }
    return 0;
}

/* One whole server message (fragments joined; pings answered) into
 * b->msg: its opcode and *len, or -1 with why. */
static int srv_message(bridge *b, size_t *len, char *why, size_t whylen)
{
    int op = -1;
    *len = 0;
    for (;;) {
        uint8_t h[2], ext[8], ctl[125];
        if (srv_read(b, h, 2) < 0)
            return snprintf(why, whylen, "the server closed the connection"), -1;
        int fop = h[0] & 0x0f, fin = h[0] >> 7;
        uint64_t n = h[1] & 0x7f;
        if ((h[0] & 0x70) || (h[1] & 0x80))
            return snprintf(why, whylen, "a server frame with RSV or mask bits"), -1;
        if (n >= 126) {
            size_t e = n == 126 ? 2 : 8;
            if (srv_read(b, ext, e) < 0)
                return snprintf(why, whylen, "the server closed the connection"), -1;
            n = 0;
            for (size_t i = 0; i < e; i++)
                n = n << 8 | ext[i];
        }
        if (fop >= 8) {
            if (!fin || n > sizeof ctl || srv_read(b, ctl, (size_t)n) < 0)
                return snprintf(why, whylen, "a bad control frame"), -1;
            if (fop == MT_WS_CLOSE) {
                *len = (size_t)n;
                memcpy(b->msg, ctl, (size_t)n);
                return MT_WS_CLOSE;
            }
            if (fop == MT_WS_PING && to_server(b, MT_WS_PONG, NULL, ctl, (size_t)n) < 0)
                return snprintf(why, whylen, "write to the server failed"), -1;
            continue;
        }
        if ((fop == MT_WS_CONT) != (op >= 0))
            return snprintf(why, whylen, "a bad continuation frame"), -1;
        if (op < 0)
            op = fop;
        if (n > MSG_MAX - *len)
            return snprintf(why, whylen, "a server message over %d bytes", MSG_MAX), -1;
        if (srv_read(b, b->msg + *len, (size_t)n) < 0)
            return snprintf(why, whylen, "the server closed the connection"), -1;
        *len += (size_t)n;
        if (fin)
            return op;
    }
}

int mt_ws_client_scan(const uint8_t *p, size_t n,
                      void (*on_msg)(void *ctx, int op, const uint8_t *m, size_t len),
                      void *ctx, char *why, size_t whylen)
{
    bridge *b = calloc(1, sizeof *b);
    uint8_t *msg = malloc(MSG_MAX);
    int rc = -1;
    if (!b || !msg) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    b->msg = msg;
    b->tfd = -1;   /* a ping's pong goes nowhere: the scan ends there */
    b->mem = p;
    b->memlen = n;
    for (;;) {
        size_t len;
        int op = srv_message(b, &len, why, whylen);
        if (op < 0)
            break;
        on_msg(ctx, op, b->msg, len);
        if (op == MT_WS_CLOSE) {
            rc = 0;
            break;
        }
    }
out:
    free(msg);
    free(b);
    return rc;
}

static void on_pcm(void *ctx, const int16_t *pcm)
{
    bridge *b = ctx;
    if (b->rcount == PCM_RING)   /* never: one frame per page */
        return;
    memcpy(b->ring[(b->rhead + b->rcount) % PCM_RING], pcm, sizeof b->ring[0]);
    b->rcount++;
}

/* The server's side is over: END when every frame was answered after the
 * client's END, else ERROR with why. */
static void down_end(bridge *b, const char *why)
{
    pthread_mutex_lock(&b->mu);
    b->down_done = 1;
    int clean = b->going_away || (b->up_done && b->answered >= b->sent);
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (clean)
        (void)to_client(b, MT_FRAME_END, 0, 0, NULL, 0);
    else
        reason(b, MT_FRAME_ERROR, "%s", why[0] ? why : "the server ended the session");
    shutdown(b->lfd, SHUT_RDWR);
}

/* A close frame from the server: why is left empty when it came where a
 * close belongs (after the END, everything answered), or with 1001, going
 * away: the server ended the session (a drain): done, as an END without a
 * reason over mt-frame; frames sent after the server stopped reading are
 * the client's missing ones, counted as over mt-frame. */
static void closed_why(bridge *b, size_t len, char *why, size_t whylen)
{
    why[0] = '\0';
    unsigned code = len >= 2 ? (unsigned)(b->msg[0] << 8 | b->msg[1]) : 1005;
    pthread_mutex_lock(&b->mu);
    b->going_away = code == 1001;
    if (!b->going_away && (!b->up_done || b->answered < b->sent))
        snprintf(why, whylen, "the server closed the WebSocket (%u)%s%.*s", code,
                 len > 2 ? ": " : "", len > 2 ? (int)len - 2 : 0, (const char *)b->msg + 2);
    pthread_mutex_unlock(&b->mu);
}

/* One server message's handler, of either protocol: 0 for the next, -1
 * to end the session (with why, or why left empty where to_client failed
 * or the end is clean). */
typedef int (*on_message_fn)(bridge *b, void *st, size_t len, char *why, size_t whylen);

/* The reader of both protocols: every binary message of the server to
 * on_msg(b, st, ...) until it stops, the server closes (closed_why) or
 * the socket fails. */
static void read_messages(bridge *b, on_message_fn on_msg, void *st, char *why, size_t whylen)
{
    for (;;) {
        size_t len;
        int op = srv_message(b, &len, why, whylen);
        if (op < 0)
            break;
        if (op == MT_WS_CLOSE) {
            closed_why(b, len, why, whylen);
            break;
        }
        if (op == MT_WS_BINARY && on_msg(b, st, len, why, whylen) < 0)
            break;
    }
}

/* The chat reader's state: the Opus decoder of the server's audio. */
typedef struct chat_down {
    mt_oggopus_dec *dec;
    int             headers;   /* the first audio message (headers) came */
} chat_down;

/* A WORDS frame beside the last answer (Kyutai's server sends a step's
 * text after its audio); what mt-frame cannot carry (over 255 bytes, not
 * UTF-8, a NUL) is cut or marked '?'. */
static int chat_text(bridge *b, size_t len)
{
    char words[MT_REASON_MAX + 1];
    size_t n = len - 1 < MT_REASON_MAX ? len - 1 : MT_REASON_MAX;
    memcpy(words, b->msg + 1, n);
    words[n] = '\0';
    mt_utf8_sanitize(words);
    pthread_mutex_lock(&b->mu);
    uint32_t at = b->answered ? (uint32_t)b->answered - 1 : 0;
    pthread_mutex_unlock(&b->mu);
    if (words[0] && to_client(b, MT_FRAME_WORDS, 0, at, words, strlen(words)) < 0)
        return -1;
    return 0;
}

/* One message of the chat protocol: every audio page after the headers
 * answers the next input frame, in order. */
static int chat_message(bridge *b, void *st, size_t len, char *why, size_t whylen)
{
    chat_down *c = st;
    char err[256];
    static const int16_t zero[K_FRAME];
    if (len < 1)
        return 0;
    if (b->msg[0] == K_TEXT)
        return chat_text(b, len);
    if (b->msg[0] == K_ERROR) {
        snprintf(why, whylen, "%.*s", (int)len - 1, (const char *)b->msg + 1);
        return -1;
    }
    if (b->msg[0] != K_AUDIO)
        return 0;   /* unknown types are discarded, as the protocol says */
    if (mt_oggopus_dec_feed(c->dec, b->msg + 1, len - 1, err, sizeof err) < 0) {
        snprintf(why, whylen, "bad audio from the server: %.200s", err);
        return -1;
    }
    if (!c->headers) {   /* the first audio message: OpusHead, OpusTags */
        c->headers = 1;
        return 0;
    }
    pthread_mutex_lock(&b->mu);
    uint32_t seq = (uint32_t)b->answered;
    int extra = b->answered >= b->sent, flush = extra && b->up_done;
    if (!extra)
        b->answered++;
    pthread_mutex_unlock(&b->mu);
    if (flush)
        return 0;   /* the answer to the silence after the END */
    if (extra) {
        snprintf(why, whylen, "the server sent more audio than it was sent");
        return -1;
    }
    const int16_t *pcm = zero;   /* the codec's lead-in: the first page
                                    decodes to less than a frame */
    if (b->rcount) {
        pcm = b->ring[b->rhead];
        b->rhead = (b->rhead + 1) % PCM_RING;
        b->rcount--;
    }
    int16_t le[K_FRAME];
    for (int i = 0; i < K_FRAME; i++)
        le[i] = (int16_t)htole16((uint16_t)pcm[i]);
    if (to_client(b, MT_FRAME_AUDIO, 0, seq, le, sizeof le) < 0)
        return -1;
    pthread_cond_broadcast(&b->cv);
    return 0;
}

/* Server -> client, the chat protocol. */
static void *down(void *arg)
{
    bridge *b = arg;
    char err[256], why[256] = "";
    chat_down c = { 0 };
    if (mt_oggopus_dec_create(K_RATE, K_FRAME, on_pcm, b, &c.dec, err, sizeof err) < 0)
        snprintf(why, sizeof why, "%s", err);
    else
        read_messages(b, chat_message, &c, why, sizeof why);
    mt_oggopus_dec_free(c.dec);
    down_end(b, why);
    return NULL;
}

/* ---- Kyutai's speech-to-text protocol (ASR_PATH, wire/asr_msg.h) --------
 * Each input frame goes up as an Audio message then a Marker with its seq;
 * the server echoes the Marker once the frame and the text's delay are
 * stepped, and that echo is the frame's answer (a TEXT frame without ids:
 * the session is ACCEPTed text-only). A Word is a WORDS frame "[START]
 * TEXT" beside the last answer. After the END, ASR_FLUSH frames of
 * silence (not counted) bring the last markers back. */

static int read_frame(bridge *b, mt_frame_decoder *d, mt_frame *f);

/* An AUDIO frame's payload (one frame of little-endian s16) as samples;
 * -1 for any other frame, which ends the stream up. */
static int frame_pcm(const mt_frame *f, int16_t pcm[K_FRAME])
{
    if (f->type != MT_FRAME_AUDIO || f->length != 2 * K_FRAME)
        return -1;
    for (int i = 0; i < K_FRAME; i++)
        pcm[i] = (int16_t)(uint16_t)(f->payload[2 * i] | f->payload[2 * i + 1] << 8);
    return 0;
}

static int asr_send(bridge *b, const mt_asr_out *o)
{
    static __thread uint8_t out[ASR_MSG + 16];
    uint8_t mask[4];
    if (o->over || getrandom(mask, 4, 0) != 4)
        return -1;
    long len = mt_ws_client_frame(MT_WS_BINARY, o->p, o->len, mask, out, sizeof out);
    return len < 0 ? -1 : write_all(b->tfd, out, (size_t)len);
}

/* One frame of s16 samples (NULL: silence) up, and its marker (id < 0:
 * none). */
static int asr_frame(bridge *b, const int16_t *pcm, int64_t id)
{
    static __thread uint8_t buf[ASR_MSG];
    float x[K_FRAME];
    for (int i = 0; i < K_FRAME; i++)
        x[i] = pcm ? (float)pcm[i] / 32768.0f : 0.0f;
    mt_asr_out o = { .p = buf, .cap = sizeof buf };
    mt_asr_out_audio(&o, x, K_FRAME);
    if (asr_send(b, &o) < 0)
        return -1;
    if (id < 0)
        return 0;
    mt_asr_out_marker(&o, id);
    return asr_send(b, &o);
}

/* One message of the speech-to-text protocol: a Marker echoed in order
 * answers its frame, a Word goes beside the last answer. */
static int asr_message(bridge *b, void *st, size_t len, char *why, size_t whylen)
{
    (void)st;
    char err[200];
    mt_asr_srv m;
    if (mt_asr_srv_decode(b->msg, len, &m, err, sizeof err) != 0) {
        snprintf(why, whylen, "a bad message from the server: %s", err);
        return -1;
    }
    if (m.type == MT_ASR_SRV_ERROR) {
        snprintf(why, whylen, "%s", m.text);
        return -1;
    }
    pthread_mutex_lock(&b->mu);
    uint64_t seq = b->answered;
    int in_order = m.type != MT_ASR_SRV_MARKER ||
                   ((uint64_t)m.id == seq && seq < b->sent);
    if (m.type == MT_ASR_SRV_MARKER && in_order)
        b->answered++;
    pthread_mutex_unlock(&b->mu);
    if (!in_order) {
        snprintf(why, whylen, "Marker %lld back where %llu was due", (long long)m.id,
                 (unsigned long long)seq);
        return -1;
    }
    if (m.type == MT_ASR_SRV_MARKER) {
        if (to_client(b, MT_FRAME_TEXT, 0, (uint32_t)seq, NULL, 0) < 0)
            return -1;
        pthread_cond_broadcast(&b->cv);
    } else if (m.type == MT_ASR_SRV_WORD) {
        char words[MT_REASON_MAX + 1];
        snprintf(words, sizeof words, "[%.2f] %.240s", m.time, m.text);
        mt_utf8_sanitize(words);
        if (to_client(b, MT_FRAME_WORDS, 0, seq ? (uint32_t)seq - 1 : 0, words,
                      strlen(words)) < 0)
            return -1;
    }
    return 0;
}

static void *asr_down(void *arg)
{
    bridge *b = arg;
    char why[300] = "";
    read_messages(b, asr_message, NULL, why, sizeof why);
    down_end(b, why);
    return NULL;
}

/* After the upgrade: Ready (or the Error refusing it), the ACCEPT, then
 * every frame up until the END and the flush. 0 once the reader runs
 * (*dt), -1 when it never started. */
static int asr_stream(bridge *b, mt_frame_decoder *dec, const mt_hello *h, pthread_t *dt)
{
    char why[300], err[200];
    size_t len;
    mt_asr_srv m;
    int op = srv_message(b, &len, why, sizeof why);
    if (op != MT_WS_BINARY || mt_asr_srv_decode(b->msg, len, &m, err, sizeof err) != 0) {
        reason(b, MT_FRAME_REJECT, "no Ready from the server%s%s", op < 0 ? ": " : "",
               op < 0 ? why : "");
        return -1;
    }
    if (m.type != MT_ASR_SRV_READY) {
        reason(b, MT_FRAME_REJECT, "%s", m.type == MT_ASR_SRV_ERROR ? m.text
                                                                   : "no Ready from the server");
        return -1;
    }
    mt_hello acc = { .sample_rate = K_RATE, .frame_samples = K_FRAME, .channels = 1,
                     .encoding = MT_ENC_PCM_S16LE };
    snprintf(acc.model, sizeof acc.model, "%s", h->model);
    uint8_t ap[MT_HELLO_MAX];
    long al = mt_hello_encode(&acc, ap, sizeof ap);
    b->session = 1;
    if (al < 0 || to_client(b, MT_FRAME_ACCEPT, MT_FLAG_TEXT_ONLY, 0, ap, (size_t)al) < 0)
        return -1;
    if (pthread_create(dt, NULL, asr_down, b) != 0) {
        reason(b, MT_FRAME_ERROR, "pthread_create failed");
        return -1;
    }
    mt_frame f;
    while (read_frame(b, dec, &f) == 0) {
        if (f.type == MT_FRAME_END) {
            pthread_mutex_lock(&b->mu);
            b->up_done = 1;
            pthread_mutex_unlock(&b->mu);
            for (int k = 0; k < ASR_FLUSH; k++)
                if (asr_frame(b, NULL, -1) < 0)
                    break;
            break;
        }
        int16_t pcm[K_FRAME];
        if (frame_pcm(&f, pcm) < 0)
            break;
        pthread_mutex_lock(&b->mu);
        int64_t seq = (int64_t)b->sent++;
        pthread_mutex_unlock(&b->mu);
        if (asr_frame(b, pcm, seq) < 0)
            break;
    }
    return 0;
}

/* ws://HOST:PORT/PATH into "tcp:HOST:PORT", host header, and the path. */
static int split_url(const char *url, char *tcp, size_t tcpcap, char *host,
                     size_t hostcap, char *path, size_t pathcap)
{
    const char *hp = url + strlen(MT_WS_URL_PREFIX);
    const char *sl = strchr(hp, '/');
    size_t hl = sl ? (size_t)(sl - hp) : strlen(hp);
    if (hl == 0 || hl + 5 > tcpcap || hl + 1 > hostcap || !memchr(hp, ':', hl))
        return -1;
    snprintf(tcp, tcpcap, "tcp:%.*s", (int)hl, hp);
    snprintf(host, hostcap, "%.*s", (int)hl, hp);
    int n = snprintf(path, pathcap, "%s", sl ? sl : "/api/chat");
    if (n < 0 || (size_t)n >= pathcap)
        return -1;
    for (const char *c = path; *c; c++)
        if (*c <= ' ' || *c == 0x7f)
            return -1;
    return 0;
}

/* The upgrade: 0, or -1 with why. */
static int upgrade(bridge *b, const mt_hello *h, char *why, size_t whylen)
{
    char tcp[300], host[300], path[512], err[256];
    if (split_url(b->url, tcp, sizeof tcp, host, sizeof host, path, sizeof path) < 0)
        return snprintf(why, whylen, "%.200s: not ws://HOST:PORT/PATH", b->url), -1;
    b->tfd = mt_endpoint_connect(tcp, 5000, err, sizeof err);
    if (b->tfd < 0)
        return snprintf(why, whylen, "%s", err), -1;
    int fl = fcntl(b->tfd, F_GETFL);
    if (fl < 0 || fcntl(b->tfd, F_SETFL, fl & ~O_NONBLOCK) < 0)
        return snprintf(why, whylen, "fcntl: %s", strerror(errno)), -1;
    /* a server silent this long is gone (a live one sends a page every
     * frame): the bridge's threads never wait on it for ever */
    struct timeval tv = { .tv_sec = 30 };
    if (setsockopt(b->tfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
        return snprintf(why, whylen, "SO_RCVTIMEO: %s", strerror(errno)), -1;
    uint8_t raw[16];
    char key[25], want[29];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return snprintf(why, whylen, "getrandom: %s", strerror(errno)), -1;
    base64_encode_raw(key, sizeof raw, raw);
    key[24] = '\0';
    if (mt_ws_accept_key(key, want) < 0)
        return snprintf(why, whylen, "the accept key"), -1;
    char req[1400];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\n%s%s%s\r\n",
                     path, host, key, h->token_len ? "kyutai-api-key: " : "",
                     h->token_len ? h->token : "", h->token_len ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof req || write_all(b->tfd, req, (size_t)n) < 0)
        return snprintf(why, whylen, "the upgrade request could not be sent"), -1;
    /* the response head, bounded; what follows it stays in rbuf */
    char head[4096];
    size_t hl = 0;
    while (hl < sizeof head - 1) {
        if (srv_read(b, (uint8_t *)head + hl, 1) < 0)
            return snprintf(why, whylen, "the server closed during the upgrade"), -1;
        hl++;
        if (hl >= 4 && memcmp(head + hl - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    head[hl] = '\0';
    if (strncmp(head, "HTTP/1.1 101", 12) != 0) {
        char *e = strstr(head, "\r\n");
        if (e)
            *e = '\0';
        return snprintf(why, whylen, "upgrade refused: %.200s", head), -1;
    }
    const char *a = strcasestr(head, "\r\nSec-WebSocket-Accept:");
    if (!a)
        return snprintf(why, whylen, "upgrade without Sec-WebSocket-Accept"), -1;
    a += strlen("\r\nSec-WebSocket-Accept:");
    while (*a == ' ' || *a == '\t')
        a++;
    if (strncmp(a, want, 28) != 0 || (a[28] != '\r' && a[28] != ' '))
        return snprintf(why, whylen, "Sec-WebSocket-Accept does not match the key"), -1;
    return 0;
}

static int read_frame(bridge *b, mt_frame_decoder *d, mt_frame *f)
{
    for (;;) {
        uint8_t buf[MT_FRAME_MAX_SIZE];
        size_t need = mt_frame_decoder_need(d), used;
        ssize_t r = recv(b->lfd, buf, need, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        int st = mt_frame_decode(d, buf, (size_t)r, &used, f);
        if (st < 0)
            return -1;
        if (st == MT_FRAME_OK)
            return 0;
    }
}

/* /api/chat after the upgrade: the server's handshake (a refusal is a
 * Text message, for Kyutai's clients, which show only text, and then the
 * Error with the same reason: the Error is read), the Opus encoder and
 * its Ogg headers, our ACCEPT to the client. 0, or -1 (the client told). */
static int chat_start(bridge *b, const mt_hello *h, mt_oggopus_enc **enc, uint8_t *page,
                      size_t page_cap)
{
    const uint8_t ta = K_AUDIO;
    char why[300], err[256];
    size_t len;
    int op, texts = 0;
    do
        op = srv_message(b, &len, why, sizeof why);
    while (op == MT_WS_BINARY && len >= 1 && b->msg[0] == K_TEXT && ++texts <= 4);
    if (op == MT_WS_BINARY && len >= 1 && b->msg[0] == K_ERROR) {
        reason(b, MT_FRAME_REJECT, "%.*s", (int)len - 1, (const char *)b->msg + 1);
        return -1;
    }
    if (op != MT_WS_BINARY || len < 1 || b->msg[0] != K_HANDSHAKE) {
        reason(b, MT_FRAME_REJECT, "no handshake from the server%s%s",
               op < 0 ? ": " : "", op < 0 ? why : "");
        return -1;
    }
    uint32_t serial;
    if (getrandom(&serial, sizeof serial, 0) != (ssize_t)sizeof serial ||
        mt_oggopus_enc_create(K_RATE, K_FRAME, serial, enc, err, sizeof err) < 0) {
        reason(b, MT_FRAME_REJECT, "Opus encoder: %s", err);
        return -1;
    }
    long n = mt_oggopus_enc_headers(*enc, page, page_cap, err, sizeof err);
    if (n < 0 || to_server(b, MT_WS_BINARY, &ta, page, (size_t)n) < 0) {
        reason(b, MT_FRAME_REJECT, "the Ogg headers could not be sent");
        return -1;
    }
    mt_hello acc = {0};
    acc.sample_rate = K_RATE;
    acc.frame_samples = K_FRAME;
    acc.channels = 1;
    acc.encoding = MT_ENC_PCM_S16LE;
    snprintf(acc.model, sizeof acc.model, "%s", h->model);
    uint8_t ap[MT_HELLO_MAX];
    long al = mt_hello_encode(&acc, ap, sizeof ap);
    b->session = 1;
    if (al < 0 || to_client(b, MT_FRAME_ACCEPT, 0, 0, ap, (size_t)al) < 0)
        return -1;
    return 0;
}

/* The client's AUDIO frames, each an Ogg Opus page to the server, until
 * its END (or it is gone). */
static void chat_stream(bridge *b, mt_frame_decoder *dec, mt_oggopus_enc *enc, uint8_t *page,
                        size_t page_cap)
{
    const uint8_t ta = K_AUDIO;
    char err[256];
    mt_frame f;
    for (;;) {
        if (read_frame(b, dec, &f) < 0)
            break;
        long n;
        if (f.type == MT_FRAME_END) {
            /* one frame of silence, not counted: the server's decoder
             * holds back the codec's pre-skip, so the last real frame
             * comes out of it only when more audio follows */
            static const int16_t hush[K_FRAME];
            pthread_mutex_lock(&b->mu);
            b->up_done = 1;   /* before its answer can come */
            pthread_mutex_unlock(&b->mu);
            n = mt_oggopus_enc_frame(enc, hush, page, page_cap, err, sizeof err);
            if (n > 0)
                (void)to_server(b, MT_WS_BINARY, &ta, page, (size_t)n);
            break;
        }
        int16_t pcm[K_FRAME];
        if (frame_pcm(&f, pcm) < 0)
            break;
        n = mt_oggopus_enc_frame(enc, pcm, page, page_cap, err, sizeof err);
        pthread_mutex_lock(&b->mu);
        b->sent++;
        pthread_mutex_unlock(&b->mu);
        if (n < 0 || to_server(b, MT_WS_BINARY, &ta, page, (size_t)n) < 0)
            break;
    }
}

/* The END (or the client gone): wait for the answers, bounded, then
 * close our side toward the server. */
static void await_answers(bridge *b)
{
    pthread_mutex_lock(&b->mu);
    b->up_done = 1;
    uint64_t until = mt_clock_ns() + 10000000000ull;
    while (!b->down_done && b->answered < b->sent && mt_clock_ns() < until) {
        uint64_t at = mt_clock_ns() + 100000000ull;
        (void)mt_cond_wait_until_ns(&b->cv, &b->mu, at < until ? at : until);
    }
    pthread_mutex_unlock(&b->mu);
    static const uint8_t bye[2] = { 0x03, 0xe8 };   /* 1000 */
    (void)to_server(b, MT_WS_CLOSE, NULL, bye, sizeof bye);
    shutdown(b->tfd, SHUT_WR);
}

/* Client -> server, the bridge's first thread: HELLO, the upgrade, then
 * the chat's or the speech-to-text protocol's stream, and the bridge's
 * end. */
static void *up(void *arg)
{
    bridge *b = arg;
    static __thread mt_frame_decoder dec;
    static __thread uint8_t page[MT_OGGOPUS_PAGE_MAX];
    mt_frame f;
    mt_hello h;
    char why[300];
    mt_oggopus_enc *enc = NULL;
    pthread_t dt;
    int down_started = 0;
    mt_frame_decoder_init(&dec);
    if (read_frame(b, &dec, &f) < 0 || f.type != MT_FRAME_HELLO ||
        mt_hello_decode(f.payload, f.length, &h) != 0) {
        reason(b, MT_FRAME_ERROR, "expected HELLO");
        goto out;
    }
    if (upgrade(b, &h, why, sizeof why) < 0) {
        reason(b, MT_FRAME_REJECT, "%s", why);
        goto out;
    }
    if (b->asr) {
        if (asr_stream(b, &dec, &h, &dt) < 0)
            goto out;
        down_started = 1;
    } else {
        if (chat_start(b, &h, &enc, page, sizeof page) < 0)
            goto out;
        if (pthread_create(&dt, NULL, down, b) != 0) {
            reason(b, MT_FRAME_ERROR, "pthread_create failed");
            goto out;
        }
        down_started = 1;
        chat_stream(b, &dec, enc, page, sizeof page);
    }
    await_answers(b);
out:
    if (down_started)
        pthread_join(dt, NULL);
    else
        shutdown(b->lfd, SHUT_RDWR);
    mt_oggopus_enc_free(enc);
    if (b->tfd >= 0)
        close(b->tfd);
    close(b->lfd);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b->msg);
    free(b);
    return NULL;
}

int mt_ws_client_connect(const char *url, int timeout_ms, char *err, size_t errlen)
{
    (void)timeout_ms;   /* the upgrade's connect has its own bound */
    int sv[2];
    if (strlen(url) >= sizeof ((bridge *)0)->url) {
        snprintf(err, errlen, "%s: URL too long", url);
        return -1;
    }
    bridge *b = calloc(1, sizeof *b);
    uint8_t *msg = malloc(MSG_MAX);
    if (!b || !msg) {
        free(b);
        free(msg);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        free(b);
        free(msg);
        return -1;
    }
    int fl = fcntl(sv[0], F_GETFL);
    if (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        free(b);
        free(msg);
        return -1;
    }
    snprintf(b->url, sizeof b->url, "%s", url);
    b->asr = mt_ws_client_is_asr_url(url);
    b->lfd = sv[1];
    b->tfd = -1;
    b->msg = msg;
    pthread_mutex_init(&b->mu, NULL);
    if (mt_cond_init(&b->cv) != 0) {
        snprintf(err, errlen, "pthread_cond_init failed");
        close(sv[0]);
        close(sv[1]);
        pthread_mutex_destroy(&b->mu);
        free(b);
        free(msg);
        return -1;
    }
    pthread_t t;
    pthread_attr_t at;
    if (pthread_attr_init(&at) != 0 ||
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) != 0 ||
        pthread_create(&t, &at, up, b) != 0) {
        snprintf(err, errlen, "pthread_create failed");
        close(sv[0]);
        close(sv[1]);
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
        free(b);
        free(msg);
        return -1;
    }
    pthread_attr_destroy(&at);
    return sv[0];
}
