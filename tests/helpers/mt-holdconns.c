/* mt-holdconns: a crowd of connections that never send a frame (or send
 * one HELLO with a wrong token), for the hostile-condition tests (issues
 * 19, 37): idle connections against the connection caps, a server's
 * backlog filled to the brim, hundreds of clients connecting while the
 * server is short of descriptors, a flood of wrong tokens; and a real
 * client among them (--probe-token) that says how long it waited.
 *
 *   mt-holdconns -s PATH|tcp:HOST:PORT [-n N] [--hold SEC]
 *                [--reconnect-ms MS] [--until-full]
 *                [--hello-token FILE [--close-after-hello]]
 *                [--probe-token FILE [--probes K] [--probe-every MS]
 *                 [--probe-stay] [--rate HZ] [--frame-samples N]]
 *
 * Opens up to N non-blocking connections (with --until-full, stops at the
 * first one the backlog refuses), prints "connected=C" once they are open,
 * then keeps them for --hold seconds, reading whatever the server sends
 * (REJECT frames are counted) and, with --reconnect-ms, reconnecting a
 * closed one after MS. With --hello-token each connection sends a HELLO
 * carrying that file's token as it opens (and closes at once with
 * --close-after-hello). With --probe-token, K probes (one at a time,
 * MS apart, the first MS after the crowd is open) connect and send a HELLO
 * with the right token, each printing "probe verdict=accept|reject|closed
 * ms=T" (T from its connect to the verdict); then "probe_max_ms=T".
 * With --probe-stay an accepted probe stays, silent, until the server
 * ends it ("probe after_accept=END ms=T", T from the ACCEPT), or until
 * --hold has passed and the server still has not (no line). The crowd
 * is held until --hold has passed and every probe has run.
 * Prints a summary line and exits 0 (1 on usage or setup errors).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "wire/endpoint.h"
#include "wire/frame.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static char spec[256];
static uint8_t hello_buf[MT_FRAME_HEADER_SIZE + 512];
static long hello_len;          /* 0: the crowd sends nothing */
static int close_after_hello;

/* A HELLO frame with the token of file (NULL: none) into buf. */
static long make_hello(const char *file, int rate, int fs, uint8_t *buf, size_t cap)
{
    mt_hello h;
    memset(&h, 0, sizeof h);
    h.sample_rate = (uint32_t)rate;
    h.frame_samples = (uint32_t)fs;
    h.channels = 1;
    h.encoding = MT_ENC_PCM_S16LE;
    char err[256];
    if (file) {
        size_t tl = 0;
        if (mt_token_read(file, h.token, sizeof h.token, &tl, err, sizeof err) != 0) {
            fprintf(stderr, "mt-holdconns: %s\n", err);
            return -1;
        }
        h.token_len = (uint8_t)tl;
    }
    uint8_t pl[512];
    long pn = mt_hello_encode(&h, pl, sizeof pl);
    if (pn < 0)
        return -1;
    mt_frame f = {0};
    f.type = MT_FRAME_HELLO;
    f.length = (uint32_t)pn;
    f.payload = pl;
    return mt_frame_encode(&f, buf, cap);
}

/* 0 connected, 1 refused for now (EAGAIN: backlog full), -1 error */
static int open_one(int *fd_out)
{
    char err[256];
    int fd = mt_endpoint_connect(spec, 1000, err, sizeof err);
    if (fd == -2)
        return 1;
    if (fd < 0) {
        static int told;
        if (!told++)
            fprintf(stderr, "mt-holdconns: %s\n", err);
        return -1;
    }
    if (hello_len > 0) {
        if (send(fd, hello_buf, (size_t)hello_len, MSG_NOSIGNAL) != hello_len) {
            close(fd);
            return -1;
        }
        if (close_after_hello) {
            close(fd);
            *fd_out = -1;
            return 0;
        }
    }
    *fd_out = fd;
    return 0;
}

/* The real client: HELLO with the right token, then the verdict (ACCEPT,
 * REJECT, or a close). */
typedef struct probe {
    int      fd;                /* -1: none running */
    int      stay;              /* --probe-stay: silent after ACCEPT */
    int      accepted;
    uint64_t t0, t_acc;
    mt_frame_decoder dec;
} probe;

static void probe_start(probe *pr, const uint8_t *hello, long n)
{
    char err[256];
    pr->t0 = now_ns();
    pr->accepted = 0;
    mt_frame_decoder_init(&pr->dec);
    pr->fd = mt_endpoint_connect(spec, 2000, err, sizeof err);
    if (pr->fd >= 0 && send(pr->fd, hello, (size_t)n, MSG_NOSIGNAL) != n) {
        close(pr->fd);
        pr->fd = -1;
    }
    if (pr->fd < 0)
        printf("probe verdict=refused ms=%.0f\n", (double)(now_ns() - pr->t0) / 1e6);
}

/* Reads the probe's socket: 1 when it is over (printed; *ms: connect to
 * verdict). With stay, an accepted probe goes on, silent, until the
 * server ends it: "probe after_accept=END|ERROR|closed ms=T" (T from the
 * ACCEPT). */
static int probe_read(probe *pr, double *ms)
{
    uint8_t buf[4096];
    ssize_t r = read(pr->fd, buf, sizeof buf);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    const char *v = "closed";
    size_t off = 0;
    int over = r <= 0;          /* the server closed (or failed) */
    while (r > 0 && off < (size_t)r) {
        mt_frame f;
        size_t used = 0;
        int d = mt_frame_decode(&pr->dec, buf + off, (size_t)r - off, &used, &f);
        off += used;
        if (d == MT_FRAME_NEED_MORE)
            return 0;
        if (d != MT_FRAME_OK)
            break;
        if (!pr->accepted && (f.type == MT_FRAME_ACCEPT || f.type == MT_FRAME_REJECT)) {
            v = f.type == MT_FRAME_ACCEPT ? "accept" : "reject";
            *ms = (double)(now_ns() - pr->t0) / 1e6;
            printf("probe verdict=%s ms=%.0f\n", v, *ms);
            fflush(stdout);
            if (f.type == MT_FRAME_ACCEPT && pr->stay) {
                pr->accepted = 1;
                pr->t_acc = now_ns();
                continue;
            }
            close(pr->fd);
            pr->fd = -1;
            return 1;
        }
        if (pr->accepted && (f.type == MT_FRAME_END || f.type == MT_FRAME_ERROR)) {
            v = f.type == MT_FRAME_END ? "END" : "ERROR";
            over = 1;
            break;
        }
    }
    if (pr->accepted && !over)
        return 0;
    if (pr->accepted) {
        printf("probe after_accept=%s ms=%.0f\n", v,
               (double)(now_ns() - pr->t_acc) / 1e6);
    } else {
        *ms = (double)(now_ns() - pr->t0) / 1e6;
        printf("probe verdict=%s ms=%.0f\n", v, *ms);
    }
    fflush(stdout);
    close(pr->fd);
    pr->fd = -1;
    return 1;
}

typedef struct slot {
    int      fd;              /* -1: closed */
    uint64_t reopen_at;
    size_t   got;             /* bytes of the current frame header */
    uint8_t  hdr[MT_FRAME_HEADER_SIZE];
} slot;

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"hold", required_argument, 0, 'H'},
        {"reconnect-ms", required_argument, 0, 'R'},
        {"until-full", no_argument, 0, 'U'},
        {"hello-token", required_argument, 0, 'T'},
        {"close-after-hello", no_argument, 0, 'C'},
        {"probe-token", required_argument, 0, 'P'},
        {"probes", required_argument, 0, 'K'},
        {"probe-every", required_argument, 0, 'E'},
        {"probe-stay", no_argument, 0, 'S'},
        {"rate", required_argument, 0, 'r'},
        {"frame-samples", required_argument, 0, 'f'},
        {0, 0, 0, 0},
    };
    const char *path = NULL, *hello_tok = NULL, *probe_tok = NULL;
    int n = 30, until_full = 0, probes = 1, rate = 24000, fs = 1920;
    double hold = 10, reconnect_ms = -1, probe_every = 500;
    int stay = 0;
    int c;
    while ((c = getopt_long(argc, argv, "s:n:", lo, NULL)) != -1) {
        switch (c) {
        case 's': path = optarg; break;
        case 'n': n = atoi(optarg); break;
        case 'H': hold = atof(optarg); break;
        case 'R': reconnect_ms = atof(optarg); break;
        case 'U': until_full = 1; break;
        case 'T': hello_tok = optarg; break;
        case 'C': close_after_hello = 1; break;
        case 'P': probe_tok = optarg; break;
        case 'K': probes = atoi(optarg); break;
        case 'E': probe_every = atof(optarg); break;
        case 'S': stay = 1; break;
        case 'r': rate = atoi(optarg); break;
        case 'f': fs = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: mt-holdconns -s PATH|tcp:HOST:PORT [-n N] "
                    "[--hold SEC] [--reconnect-ms MS] [--until-full] "
                    "[--hello-token FILE [--close-after-hello]] "
                    "[--probe-token FILE [--probes K] [--probe-every MS]]\n");
            return 1;
        }
    }
    if (!path || strlen(path) >= sizeof spec || n < 1 || n > 100000) {
        fprintf(stderr, "mt-holdconns: need -s PATH (short) and 1 <= N\n");
        return 1;
    }
    memcpy(spec, path, strlen(path) + 1);
    if (hello_tok && (hello_len = make_hello(hello_tok, rate, fs, hello_buf,
                                             sizeof hello_buf)) <= 0)
        return 1;
    uint8_t probe_hello[sizeof hello_buf];
    long probe_len = 0;
    if (probe_tok && (probe_len = make_hello(probe_tok, rate, fs, probe_hello,
                                             sizeof probe_hello)) <= 0)
        return 1;
    probe pr = {.fd = -1, .stay = stay};
    int probes_left = probe_tok ? probes : 0;
    double probe_max = 0;
    slot *sl = calloc((size_t)n, sizeof *sl);
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    if (!sl || !pf) {
        fprintf(stderr, "mt-holdconns: out of memory\n");
        return 1;
    }
    long connected = 0, refused = 0, errors = 0, closed = 0, rejects = 0;
    int opened = 0;
    for (int i = 0; i < n; i++) {
        sl[i].fd = -1;
        int r = open_one(&sl[i].fd);
        if (r == 0) {
            connected++;
            opened++;
        } else if (r == 1) {
            refused++;
            if (until_full)
                break;
        } else {
            errors++;
        }
    }
    printf("connected=%ld refused=%ld errors=%ld\n", connected, refused, errors);
    fflush(stdout);
    uint64_t end = now_ns() + (uint64_t)(hold * 1e9);
    uint64_t next_probe = now_ns() + (uint64_t)(probe_every * 1e6);
    uint8_t buf[4096];
    while (now_ns() < end || (pr.fd >= 0 && !pr.accepted) || probes_left > 0) {
        if (pr.fd < 0 && probes_left > 0 && now_ns() >= next_probe) {
            probes_left--;
            probe_start(&pr, probe_hello, probe_len);
            next_probe = now_ns() + (uint64_t)(probe_every * 1e6);
        }
        if (pr.fd >= 0) {
            struct pollfd pp = {.fd = pr.fd, .events = POLLIN};
            double ms = 0;
            if (poll(&pp, 1, 0) > 0 && probe_read(&pr, &ms) && ms > probe_max)
                probe_max = ms;
        }
        if (pr.fd >= 0 && !pr.accepted && now_ns() - pr.t0 > 10000000000ull) {
            printf("probe verdict=none ms=10000\n");   /* a bound of our own */
            close(pr.fd);
            pr.fd = -1;
            probe_max = 10000;
        }
        int np = 0;
        uint64_t t = now_ns();
        for (int i = 0; i < n; i++) {
            if (sl[i].fd < 0 && reconnect_ms >= 0 && sl[i].reopen_at &&
                t >= sl[i].reopen_at) {
                sl[i].reopen_at = 0;
                if (open_one(&sl[i].fd) == 0 && sl[i].fd >= 0)
                    connected++;
                else
                    sl[i].reopen_at = t + (uint64_t)(reconnect_ms * 1e6);
            }
            pf[i].fd = sl[i].fd;     /* negative fds are ignored by poll */
            pf[i].events = POLLIN;
            pf[i].revents = 0;
            np++;
        }
        int pn = poll(pf, (nfds_t)np, pr.fd >= 0 ? 2 : 20);
        if (pn < 0 && errno != EINTR) {
            perror("mt-holdconns: poll");
            return 1;
        }
        for (int i = 0; pn > 0 && i < n; i++) {
            if (!pf[i].revents || sl[i].fd < 0)
                continue;
            ssize_t r = read(sl[i].fd, buf, sizeof buf);
            if (r > 0) {
                /* count REJECT frames by their headers' type byte; the
                 * frames are small and come one per connection */
                for (ssize_t k = 0; k < r; k++) {
                    if (sl[i].got < sizeof sl[i].hdr)
                        sl[i].hdr[sl[i].got++] = buf[k];
                }
                if (sl[i].got >= sizeof sl[i].hdr) {
                    mt_frame_decoder d;
                    mt_frame f;
                    size_t used = 0;
                    mt_frame_decoder_init(&d);
                    /* decode from the header and whatever followed it */
                    if (mt_frame_decode(&d, buf, (size_t)r, &used, &f) == MT_FRAME_OK &&
                        f.type == MT_FRAME_REJECT)
                        rejects++;
                    sl[i].got = 0;
                }
                continue;
            }
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            close(sl[i].fd);
            sl[i].fd = -1;
            sl[i].got = 0;
            closed++;
            if (reconnect_ms >= 0)
                sl[i].reopen_at = now_ns() + (uint64_t)(reconnect_ms * 1e6);
        }
    }
    if (probe_tok)
        printf("probe_max_ms=%.0f probes_left=%d\n", probe_max, probes_left);
    long still = 0;
    for (int i = 0; i < n; i++)
        if (sl[i].fd >= 0) {
            still++;
            close(sl[i].fd);
        }
    printf("total connected=%ld refused=%ld errors=%ld closed_by_server=%ld "
           "reject_frames=%ld still_open=%ld\n", connected, refused, errors,
           closed, rejects, still);
    free(sl);
    free(pf);
    return 0;
}
