/* mt-holdconns: a crowd of connections that never send a frame, for the
 * hostile-condition tests (issue 19): idle connections against the
 * connection cap, a server's backlog filled to the brim, and hundreds of
 * clients connecting while the server is short of descriptors.
 *
 *   mt-holdconns -s PATH [-n N] [--hold SEC] [--reconnect-ms MS]
 *                [--until-full]
 *
 * Opens up to N non-blocking connections (with --until-full, stops at the
 * first one the backlog refuses), prints "connected=C" once they are open,
 * then keeps them for --hold seconds, reading whatever the server sends
 * (REJECT frames are counted) and, with --reconnect-ms, reconnecting a
 * closed one after MS. Prints a summary line and exits 0 (1 on usage or
 * setup errors).
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

#include "wire/frame.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 0 connected, 1 refused for now (EAGAIN: backlog full), -1 error */
static int open_one(const struct sockaddr_un *sa, int *fd_out)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) != 0) {
        int e = errno;
        close(fd);
        return e == EAGAIN || e == EWOULDBLOCK ? 1 : -1;
    }
    *fd_out = fd;
    return 0;
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
        {0, 0, 0, 0},
    };
    const char *path = NULL;
    int n = 30, until_full = 0;
    double hold = 10, reconnect_ms = -1;
    int c;
    while ((c = getopt_long(argc, argv, "s:n:", lo, NULL)) != -1) {
        switch (c) {
        case 's': path = optarg; break;
        case 'n': n = atoi(optarg); break;
        case 'H': hold = atof(optarg); break;
        case 'R': reconnect_ms = atof(optarg); break;
        case 'U': until_full = 1; break;
        default:
            fprintf(stderr, "usage: mt-holdconns -s PATH [-n N] [--hold SEC] "
                    "[--reconnect-ms MS] [--until-full]\n");
            return 1;
        }
    }
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (!path || strlen(path) >= sizeof sa.sun_path || n < 1 || n > 100000) {
        fprintf(stderr, "mt-holdconns: need -s PATH (short) and 1 <= N\n");
        return 1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
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
        int r = open_one(&sa, &sl[i].fd);
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
    uint8_t buf[4096];
    while (now_ns() < end) {
        int np = 0;
        uint64_t t = now_ns();
        for (int i = 0; i < n; i++) {
            if (sl[i].fd < 0 && reconnect_ms >= 0 && sl[i].reopen_at &&
                t >= sl[i].reopen_at) {
                sl[i].reopen_at = 0;
                if (open_one(&sa, &sl[i].fd) == 0)
                    connected++;
                else
                    sl[i].reopen_at = t + (uint64_t)(reconnect_ms * 1e6);
            }
            pf[i].fd = sl[i].fd;     /* negative fds are ignored by poll */
            pf[i].events = POLLIN;
            pf[i].revents = 0;
            np++;
        }
        int pr = poll(pf, (nfds_t)np, 50);
        if (pr < 0 && errno != EINTR) {
            perror("mt-holdconns: poll");
            return 1;
        }
        for (int i = 0; pr > 0 && i < n; i++) {
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
