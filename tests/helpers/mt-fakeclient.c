/* mt-fakeclient: a scripted mt-serve client for the integration tests.
 *
 * Socket mode: N concurrent sessions over one Unix socket path, one thread,
 * one epoll loop. Each session sends HELLO, waits for ACCEPT, then sends
 * one AUDIO frame per period on an absolute clock (frame k at base + k*P,
 * base staggered by session), reads every output without blocking, checks
 * that each input gets exactly one output (real or FILL) in order (the
 * TEXT or WORDS frame a Kyutai model's server sends beside it is passed
 * by), ends with END and waits for the server's END. On request the first
 * K sessions misbehave (--bad MODE): garbage, truncated, oversized, wrong-format,
 * wrong-length, mid-frame, stop-reading. Results are logfmt lines on
 * stdout: one per session and a `total` line; exit 0 when every well
 * behaved session was served completely and in order and every bad one
 * ended the way it should, 1 otherwise, 2 on usage errors.
 *
 * Stdio helpers for pipes: --emit writes HELLO, N paced frames and END to
 * stdout; --read reads a server's frames from stdin and counts them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/io.h"
#include "wire/endpoint.h"
#include "wire/frame.h"

enum { B_NONE = 0, B_GARBAGE, B_TRUNCATED, B_OVERSIZED, B_WRONGFMT,
       B_WRONGLEN, B_MIDFRAME, B_STOPREAD };
static const char *bad_names[] = {"none", "garbage", "truncated", "oversized",
    "wrong-format", "wrong-length", "mid-frame", "stop-reading", NULL};

enum { ST_CONNECT = 0, ST_HELLO, ST_STREAM, ST_ENDING, ST_DONE, ST_REJECTED,
       ST_ERROR, ST_CLOSED, ST_DISCONNECTED, ST_FAILED };
static const char *st_names[] = {"connecting", "hello", "streaming", "ending",
    "done", "rejected", "error", "closed", "disconnected", "failed"};

typedef struct fsess {
    int      idx, fd, state, bad;
    uint32_t id;
    uint64_t base, next_send;
    uint32_t sent, real, fill, order_err, missing;
    uint32_t echo_err;        /* --echo: real outputs unlike their input */
    uint32_t next_expect;
    double   lat_sum_ms, lat_max_ms;
    uint64_t t_misbehave, t_end;
    uint64_t t_connect;       /* when it connects (--arrive-ms) */
    char     reason[160];
    int      final;           /* REJECT with MT_FLAG_FINAL: asking again cannot help */
    mt_frame_decoder dec;
    uint8_t  out[MT_FRAME_MAX_SIZE];
    size_t   outlen, outoff;
} fsess;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int rate = 24000, fsamples = 1920, nframes = 0, bad_at = 10;
static double period_ms = 80;
static double arrive_ms = 0;       /* --arrive-ms: gap between connects */
static int16_t *pcm;
static int check_echo;             /* --echo: outputs must equal inputs */
static int16_t *pcm_want;

static void pcm_of(uint32_t seq, int16_t *dst)
{
    for (int j = 0; j < fsamples; j++)
        dst[j] = (int16_t)(((seq * 131u + (unsigned)j * 7u) % 2000u) - 1000);
}

static void make_pcm(uint32_t seq)
{
    pcm_of(seq, pcm);
}

static long enc(uint8_t *out, size_t cap, int type, uint32_t seq, const void *p, size_t len)
{
    mt_frame f = {0};
    f.type = (uint8_t)type;
    f.seq = seq;
    f.t_send = now_ns();
    f.length = (uint32_t)len;
    f.payload = p;
    return mt_frame_encode(&f, out, cap);
}

static char   token[MT_TOKEN_MAX + 1];   /* --token-file */
static size_t token_len;

static long enc_hello(uint8_t *out, size_t cap, int wrong)
{
    mt_hello h = {0};
    h.sample_rate = (uint32_t)(wrong ? 16000 : rate);
    h.frame_samples = (uint32_t)fsamples;
    h.channels = 1;
    h.encoding = MT_ENC_PCM_S16LE;
    snprintf(h.model, sizeof h.model, "fakeclient");
    if (token_len) {
        memcpy(h.token, token, token_len);
        h.token_len = (uint8_t)token_len;
    }
    uint8_t pl[MT_HELLO_MAX];
    long n = mt_hello_encode(&h, pl, sizeof pl);
    return n < 0 ? n : enc(out, cap, MT_FRAME_HELLO, 0, pl, (size_t)n);
}

/* Blocking-ish full write for small control frames on a non-blocking fd:
 * a few retries, then give up (the test will see it). */
static int put(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t until = now_ns() + 2000000000ull;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                if (now_ns() > until)
                    return -1;
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
                continue;
            }
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void finish(fsess *s, int state, const char *why)
{
    if (s->state >= ST_DONE)
        return;
    s->state = state;
    s->t_end = now_ns();
    if (why)
        snprintf(s->reason, sizeof s->reason, "%s", why);
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
}

static void on_frame(fsess *s, const mt_frame *f, uint64_t now)
{
    switch (f->type) {
    case MT_FRAME_ACCEPT:
        if (s->state == ST_HELLO) {
            s->id = f->session;
            s->state = ST_STREAM;
            s->next_send = s->base = now + s->base; /* base held the phase */
        }
        return;
    case MT_FRAME_REJECT:
        s->final = (f->flags & MT_FLAG_FINAL) != 0;
        finish(s, ST_REJECTED, NULL);
        snprintf(s->reason, sizeof s->reason, "%.*s", (int)(f->length > 150 ? 150 : f->length),
                 (const char *)f->payload);
        return;
    case MT_FRAME_ERROR: {
        char r[160];
        snprintf(r, sizeof r, "%.*s", (int)(f->length > 150 ? 150 : f->length),
                 (const char *)f->payload);
        finish(s, ST_ERROR, r);
        return;
    }
    case MT_FRAME_END:
        finish(s, s->state == ST_ENDING ? ST_DONE : ST_FAILED,
               s->state == ST_ENDING ? NULL : "END before our END");
        return;
    case MT_FRAME_AUDIO:
        if (f->flags & MT_FLAG_FILL)
            s->fill++;
        else
            s->real++;
        if (check_echo && !(f->flags & MT_FLAG_FILL)) {
            /* a server that echoes (the simulated device, synthetic:echo)
             * must give back exactly the frame that was sent */
            pcm_of(f->seq, pcm_want);
            if (f->length != (uint32_t)fsamples * 2 ||
                memcmp(f->payload, pcm_want, (size_t)fsamples * 2) != 0)
                s->echo_err++;
        }
        if (f->seq != s->next_expect) {
            s->order_err++;
            if (f->seq > s->next_expect)
                s->missing += f->seq - s->next_expect;
        }
        s->next_expect = f->seq + 1;
        if (f->t_send) {
            double l = (double)(now - f->t_arrive) / 1e6;
            s->lat_sum_ms += l;
            if (l > s->lat_max_ms)
                s->lat_max_ms = l;
        }
        return;
    case MT_FRAME_TEXT:
    case MT_FRAME_WORDS:
        /* the text beside an output (a Kyutai model's server): not an
         * answer of its own, counted with the AUDIO it goes with */
        return;
    default:
        finish(s, ST_FAILED, "unexpected frame type");
    }
}

static void do_read(fsess *s)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(s->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            finish(s, s->bad == B_STOPREAD ? ST_DISCONNECTED : ST_FAILED, strerror(errno));
            return;
        }
        if (n == 0) {
            finish(s, s->bad == B_STOPREAD ? ST_DISCONNECTED : ST_FAILED,
                   "server closed the connection");
            return;
        }
        uint64_t now = now_ns();
        size_t off = 0;
        while (off < (size_t)n && s->fd >= 0) {
            size_t used = 0;
            mt_frame f;
            int r = mt_frame_decode(&s->dec, buf + off, (size_t)n - off, &used, &f);
            off += used;
            if (r == MT_FRAME_OK)
                on_frame(s, &f, now);
            else if (r == MT_FRAME_NEED_MORE)
                break;
            else {
                finish(s, ST_FAILED, mt_frame_strerror(r));
                return;
            }
        }
        if (s->fd < 0)
            return;
    }
}

/* The misbehaviour of a bad session, at its frame bad_at. */
static void misbehave(fsess *s, int epfd)
{
    uint8_t b[MT_FRAME_MAX_SIZE];
    s->t_misbehave = now_ns();
    make_pcm(s->sent);
    long n = enc(b, sizeof b, MT_FRAME_AUDIO, s->sent, pcm, (size_t)fsamples * 2);
    switch (s->bad) {
    case B_GARBAGE:
        for (int i = 0; i < 200; i++)
            b[i] = (uint8_t)(i * 37 + 11);
        memcpy(b, "JUNK", 4);
        put(s->fd, b, 200);
        s->state = ST_ENDING;         /* wait for ERROR */
        break;
    case B_TRUNCATED:
        put(s->fd, b, 30);
        finish(s, ST_CLOSED, "closed after a truncated header");
        break;
    case B_OVERSIZED: {
        uint32_t big = 1u << 20;
        memcpy(b + 48, &big, 4);      /* little-endian host */
        put(s->fd, b, MT_FRAME_HEADER_SIZE);
        s->state = ST_ENDING;
        break;
    }
    case B_WRONGLEN:
        n = enc(b, sizeof b, MT_FRAME_AUDIO, s->sent, pcm, 100);
        put(s->fd, b, (size_t)n);
        s->state = ST_ENDING;
        break;
    case B_MIDFRAME:
        put(s->fd, b, (size_t)n / 2);
        finish(s, ST_CLOSED, "closed mid-frame");
        break;
    case B_STOPREAD: {
        struct epoll_event e = {.events = 0, .data.ptr = s};
        epoll_ctl(epfd, EPOLL_CTL_MOD, s->fd, &e);
        break;                         /* keep sending, never read */
    }
    default:
        break;
    }
}

static int expected_state(int bad)
{
    switch (bad) {
    case B_NONE: return ST_DONE;
    case B_GARBAGE: case B_OVERSIZED: case B_WRONGLEN: return ST_ERROR;
    case B_WRONGFMT: return ST_REJECTED;
    case B_TRUNCATED: case B_MIDFRAME: return ST_CLOSED;
    case B_STOPREAD: return ST_DISCONNECTED;
    }
    return ST_FAILED;
}

/* Connect session s and send its HELLO. */
static void start_one(fsess *s, int epfd, const char *path)
{
    uint8_t b[MT_FRAME_MAX_SIZE];
    char cerr[256];
    s->t_connect = now_ns();
    /* a Unix socket path or tcp:HOST:PORT; a full Unix backlog (-2) is
     * waited out, as the blocking connect of before did */
    uint64_t until = now_ns() + 5000000000ull;
    do {
        s->fd = mt_endpoint_connect(path, 5000, cerr, sizeof cerr);
        if (s->fd == -2) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    } while (s->fd == -2 && now_ns() < until);
    if (s->fd < 0) {
        int timed_out = s->fd == -2;
        s->fd = -1;
        finish(s, ST_FAILED, timed_out ? "connect: timed out" : cerr);
        return;
    }
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = s};
    epoll_ctl(epfd, EPOLL_CTL_ADD, s->fd, &e);
    long m = enc_hello(b, sizeof b, s->bad == B_WRONGFMT);
    if (m < 0 || put(s->fd, b, (size_t)m) != 0)
        finish(s, ST_FAILED, "HELLO not sent");
    else
        s->state = ST_HELLO;
}

static int run_sockets(const char *path, int n, int nbad, int bad, double end_timeout_s)
{
    fsess *ss = calloc((size_t)n, sizeof *ss);
    int epfd = epoll_create1(0);
    if (!ss || epfd < 0)
        return 1;
    uint64_t P = (uint64_t)(period_ms * 1e6);
    uint8_t b[MT_FRAME_MAX_SIZE];
    uint64_t t_first = now_ns();
    for (int i = 0; i < n; i++) {
        fsess *s = &ss[i];
        s->idx = i;
        s->fd = -1;
        s->bad = i < nbad ? bad : B_NONE;
        s->base = (uint64_t)i * P / (uint64_t)n;   /* phase, until ACCEPT */
        s->t_connect = t_first + (uint64_t)(i * arrive_ms * 1e6);
        mt_frame_decoder_init(&s->dec);
        if (arrive_ms <= 0)
            start_one(s, epfd, path);
    }
    uint64_t t_start = now_ns(), hard_end = t_start + (uint64_t)((nframes * period_ms / 1000.0 + n * arrive_ms / 1000.0 + end_timeout_s + 30) * 1e9);
    for (;;) {
        uint64_t now = now_ns();
        int live = 0;
        uint64_t wake = now + 50000000ull;
        for (int i = 0; i < n; i++) {
            fsess *s = &ss[i];
            if (s->state >= ST_DONE)
                continue;
            live++;
            if (s->state == ST_CONNECT && s->fd < 0) {
                if (s->t_connect > now) {
                    if (s->t_connect < wake)
                        wake = s->t_connect;
                    continue;
                }
                start_one(s, epfd, path);
            }
            if (s->state == ST_HELLO && now > s->t_connect && now - s->t_connect > 30000000000ull)
                finish(s, ST_FAILED, "no ACCEPT/REJECT within 30 s");
            if (s->state == ST_STREAM) {
                while (s->state == ST_STREAM && s->next_send <= now) {
                    if (s->bad && s->bad != B_STOPREAD && (int)s->sent == bad_at) {
                        misbehave(s, epfd);
                        break;
                    }
                    if (s->bad == B_STOPREAD && (int)s->sent == bad_at && !s->t_misbehave)
                        misbehave(s, epfd);
                    if ((int)s->sent >= nframes) {
                        long m = enc(b, sizeof b, MT_FRAME_END, 0, NULL, 0);
                        if (put(s->fd, b, (size_t)m) != 0)
                            finish(s, ST_FAILED, "END not sent");
                        else {
                            s->state = ST_ENDING;
                            s->t_end = now;
                        }
                        break;
                    }
                    make_pcm(s->sent);
                    long m = enc(b, sizeof b, MT_FRAME_AUDIO, s->sent, pcm, (size_t)fsamples * 2);
                    ssize_t w = send(s->fd, b, (size_t)m, MSG_NOSIGNAL | MSG_DONTWAIT);
                    if (w == m) {
                        s->sent++;
                    } else if (w < 0 && errno == EAGAIN) {
                        /* the socket is full: for a well-behaved session a
                         * failure (the server must read); finish the frame */
                        if (put(s->fd, b, (size_t)m) != 0) {
                            finish(s, s->bad == B_STOPREAD ? ST_DISCONNECTED : ST_FAILED,
                                   "send blocked");
                            break;
                        }
                        s->sent++;
                    } else if (w >= 0) {
                        if (put(s->fd, b + w, (size_t)(m - w)) != 0) {
                            finish(s, ST_FAILED, "send blocked");
                            break;
                        }
                        s->sent++;
                    } else {
                        /* The server may have ended the session (END
                         * after a shed, REJECT) and closed before this
                         * frame went out: its frame is still there to
                         * read and is the session's true end, as
                         * mt-replay's client reads it (client.c). */
                        int werr = errno;
                        if (werr == EPIPE || werr == ECONNRESET) {
                            do_read(s);
                            if (s->state >= ST_DONE)
                                break;
                        }
                        finish(s, s->bad == B_STOPREAD ? ST_DISCONNECTED : ST_FAILED,
                               strerror(werr));
                        break;
                    }
                    s->next_send = s->base + (uint64_t)s->sent * P;
                }
                if (s->state == ST_STREAM && s->next_send < wake)
                    wake = s->next_send;
            }
            if (s->state == ST_ENDING && s->t_end && now - s->t_end > (uint64_t)(end_timeout_s * 1e9))
                finish(s, ST_FAILED, "no END from the server in time");
            if (s->state == ST_ENDING && !s->t_end)
                s->t_end = now;
        }
        if (!live || now > hard_end)
            break;
        /* a nanosecond timeout: epoll_wait's milliseconds, rounded
         * down, busy-polled the last millisecond before every send (one
         * per session and period: 14% of a core at 64 sessions, taken
         * from the server it loads) */
        uint64_t dt = wake > now ? wake - now : 0;
        struct timespec timeout = { (time_t)(dt / 1000000000ull), (long)(dt % 1000000000ull) };
        struct epoll_event evs[64];
        int k = epoll_pwait2(epfd, evs, 64, &timeout, NULL);
        for (int i = 0; i < k; i++) {
            fsess *s = evs[i].data.ptr;
            if (s->fd >= 0)
                do_read(s);
        }
    }
    /* report */
    int ok = 1;
    uint64_t tot_sent = 0, tot_real = 0, tot_fill = 0, tot_oe = 0, tot_miss = 0;
    uint64_t tot_echo = 0;
    int cnt[ST_FAILED + 1] = {0};
    for (int i = 0; i < n; i++) {
        fsess *s = &ss[i];
        if (s->state < ST_DONE)
            finish(s, ST_FAILED, "still running at the hard end");
        cnt[s->state]++;
        int good = s->state == expected_state(s->bad);
        if (s->bad == B_NONE)
            good = good && s->real + s->fill == s->sent && s->order_err == 0 &&
                   s->echo_err == 0;
        ok &= good;
        tot_sent += s->sent;
        tot_real += s->real;
        tot_fill += s->fill;
        tot_oe += s->order_err;
        tot_miss += s->missing;
        tot_echo += s->echo_err;
        printf("session=%d id=%u bad=%s state=%s ok=%d sent=%u real=%u fill=%u "
               "order_err=%u missing=%u echo_err=%u lat_mean_ms=%.2f lat_max_ms=%.2f "
               "end_after_ms=%.1f final=%d reason=\"%s\"\n", i, s->id, bad_names[s->bad],
               st_names[s->state], good, s->sent, s->real, s->fill, s->order_err,
               s->missing, s->echo_err, s->real + s->fill ? s->lat_sum_ms / (s->real + s->fill) : 0,
               s->lat_max_ms,
               s->t_misbehave && s->t_end > s->t_misbehave
                   ? (double)(s->t_end - s->t_misbehave) / 1e6 : 0.0,
               s->final, s->reason);
    }
    printf("total sessions=%d ok=%d done=%d rejected=%d error=%d closed=%d "
           "disconnected=%d failed=%d sent=%llu real=%llu fill=%llu order_err=%llu "
           "missing=%llu echo_err=%llu\n", n, ok, cnt[ST_DONE], cnt[ST_REJECTED], cnt[ST_ERROR],
           cnt[ST_CLOSED], cnt[ST_DISCONNECTED], cnt[ST_FAILED],
           (unsigned long long)tot_sent, (unsigned long long)tot_real,
           (unsigned long long)tot_fill, (unsigned long long)tot_oe,
           (unsigned long long)tot_miss, (unsigned long long)tot_echo);
    fflush(stdout);
    free(ss);
    close(epfd);
    return ok ? 0 : 1;
}

static int run_emit(int pace)
{
    uint8_t b[MT_FRAME_MAX_SIZE];
    long m = enc_hello(b, sizeof b, 0);
    if (mt_write_all(1, b, (size_t)m))
        return 1;
    uint64_t P = (uint64_t)(period_ms * 1e6), t0 = now_ns();
    for (int k = 0; k < nframes; k++) {
        if (pace) {
            uint64_t at = t0 + (uint64_t)k * P;
            struct timespec ts = {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
        }
        make_pcm((uint32_t)k);
        m = enc(b, sizeof b, MT_FRAME_AUDIO, (uint32_t)k, pcm, (size_t)fsamples * 2);
        if (mt_write_all(1, b, (size_t)m))
            return 1;
    }
    m = enc(b, sizeof b, MT_FRAME_END, 0, NULL, 0);
    return mt_write_all(1, b, (size_t)m) ? 1 : 0;
}

static int run_read(int expect)
{
    fsess s;
    memset(&s, 0, sizeof s);
    s.state = ST_HELLO;
    s.base = 0;
    mt_frame_decoder_init(&s.dec);
    uint8_t buf[65536];
    int accepted = 0, ended = 0;
    for (;;) {
        ssize_t n = read(0, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t off = 0;
        while (off < (size_t)n) {
            size_t used = 0;
            mt_frame f;
            int r = mt_frame_decode(&s.dec, buf + off, (size_t)n - off, &used, &f);
            off += used;
            if (r == MT_FRAME_NEED_MORE)
                break;
            if (r < 0) {
                printf("read error=\"%s\"\n", mt_frame_strerror(r));
                return 1;
            }
            if (f.type == MT_FRAME_ACCEPT) {
                accepted = 1;
                s.state = ST_STREAM;
            } else if (f.type == MT_FRAME_END) {
                ended = 1;
                s.state = ST_ENDING;
                on_frame(&s, &f, now_ns());
            } else {
                on_frame(&s, &f, now_ns());
            }
        }
    }
    int trunc = mt_frame_decoder_finish(&s.dec) != 0;
    int ok = accepted && ended && !trunc && s.order_err == 0 &&
             (expect < 0 || (int)(s.real + s.fill) == expect);
    printf("read ok=%d accepted=%d ended=%d real=%u fill=%u order_err=%u "
           "truncated=%d reason=\"%s\"\n", ok, accepted, ended, s.real, s.fill,
           s.order_err, trunc, s.reason);
    return ok ? 0 : 1;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-fakeclient -s PATH [-n N] [-f FRAMES] [options]\n"
"       mt-fakeclient --emit -f FRAMES [--no-pace] > frames\n"
"       mt-fakeclient --read [--expect N] < frames\n"
"  -s PATH             server socket, or tcp:HOST:PORT\n"
"  --token-file FILE   access token for a TCP server\n"
"  -n N                concurrent sessions (default 1)\n"
"  -f FRAMES           frames per session (default 25)\n"
"  --period-ms MS      frame period (default 80)\n"
"  --rate HZ           HELLO sample rate (default 24000)\n"
"  --frame-samples N   HELLO frame size (default 1920)\n"
"  --bad MODE          the first --bad-count sessions misbehave: garbage,\n"
"                      truncated, oversized, wrong-format, wrong-length,\n"
"                      mid-frame, stop-reading\n"
"  --bad-count K       (default 1)\n"
"  --bad-at FRAME      misbehave at this frame (default 10)\n"
"  --end-timeout S     wait for the server's END (default 10)\n"
"  --arrive-ms MS      session i connects at i * MS, not all at once\n"
"  --echo              every real output must equal its input frame (a\n"
"                      server that echoes: --device sim, synthetic:echo)\n");
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"period-ms", required_argument, 0, 'P'},
        {"rate", required_argument, 0, 'R'},
        {"frame-samples", required_argument, 0, 'F'},
        {"bad", required_argument, 0, 'B'},
        {"bad-count", required_argument, 0, 'K'},
        {"bad-at", required_argument, 0, 'A'},
        {"end-timeout", required_argument, 0, 'E'},
        {"arrive-ms", required_argument, 0, 'V'},
        {"emit", no_argument, 0, 'e'},
        {"read", no_argument, 0, 'r'},
        {"no-pace", no_argument, 0, 'N'},
        {"expect", required_argument, 0, 'X'},
        {"echo", no_argument, 0, 'C'},
        {"token-file", required_argument, 0, 'T'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *path = NULL;
    int n = 1, nbad = 1, bad = B_NONE, emit = 0, rd = 0, pace = 1, expect = -1;
    double end_timeout = 10;
    nframes = 25;
    int c;
    while ((c = getopt_long(argc, argv, "s:n:f:h", lo, NULL)) != -1) {
        switch (c) {
        case 's': path = optarg; break;
        case 'n': n = atoi(optarg); break;
        case 'f': nframes = atoi(optarg); break;
        case 'P': period_ms = atof(optarg); break;
        case 'R': rate = atoi(optarg); break;
        case 'F': fsamples = atoi(optarg); break;
        case 'K': nbad = atoi(optarg); break;
        case 'A': bad_at = atoi(optarg); break;
        case 'E': end_timeout = atof(optarg); break;
        case 'V': arrive_ms = atof(optarg); break;
        case 'e': emit = 1; break;
        case 'r': rd = 1; break;
        case 'N': pace = 0; break;
        case 'X': expect = atoi(optarg); break;
        case 'C': check_echo = 1; break;
        case 'T': {
            char err[256];
            if (mt_token_read(optarg, token, sizeof token, &token_len, err,
                              sizeof err) != 0) {
                fprintf(stderr, "mt-fakeclient: %s\n", err);
                return 2;
            }
            break;
        }
        case 'B':
            bad = -1;
            for (int i = 1; bad_names[i]; i++)
                if (!strcmp(optarg, bad_names[i]))
                    bad = i;
            if (bad < 0) {
                fprintf(stderr, "mt-fakeclient: unknown --bad mode '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (n < 1 || n > 4096 || nframes < 0 || fsamples < 1 || fsamples > MT_FRAME_MAX_PAYLOAD / 2 ||
        period_ms <= 0 || arrive_ms < 0 || arrive_ms > 60000) {
        fprintf(stderr, "mt-fakeclient: bad arguments\n");
        return 2;
    }
    pcm = calloc((size_t)fsamples, sizeof *pcm);
    pcm_want = calloc((size_t)fsamples, sizeof *pcm_want);
    if (!pcm || !pcm_want)
        return 1;
    if (emit)
        return run_emit(pace);
    if (rd)
        return run_read(expect);
    if (!path) {
        usage(stderr);
        return 2;
    }
    if (bad == B_NONE)
        nbad = 0;
    return run_sockets(path, n, nbad, bad, end_timeout);
}
