/* endpoint.c: TCP endpoints, peer addresses and the access token (see
 * endpoint.h). Unix socket paths keep their old behaviour: everything
 * that is not "tcp:..." is a path.
 */
#define _GNU_SOURCE
#include "wire/endpoint.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/errmsg.h"
#include "util/units.h"

int mt_endpoint_is_tcp(const char *spec)
{
    return spec && strncmp(spec, MT_TCP_PREFIX, strlen(MT_TCP_PREFIX)) == 0;
}

int mt_hostport_split(const char *hp, char *host, size_t hostcap,
                      char *port, size_t portcap, char *err, size_t errlen)
{
    const char *colon, *h = hp;
    size_t hl;
    if (!hp || !*hp) {
        mt_set_err(err, errlen, "empty address (want HOST:PORT)");
        return -1;
    }
    if (hp[0] == '[') {
        const char *rb = strchr(hp, ']');
        if (!rb || rb[1] != ':') {
            mt_set_err(err, errlen, "%s: want [IPV6]:PORT", hp);
            return -1;
        }
        h = hp + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(hp, ':');
        if (!colon) {
            mt_set_err(err, errlen, "%s: no port (want HOST:PORT)", hp);
            return -1;
        }
        hl = (size_t)(colon - hp);
        if (memchr(hp, ':', hl)) {
            mt_set_err(err, errlen, "%s: an IPv6 address goes in brackets: "
                       "[ADDR]:PORT", hp);
            return -1;
        }
    }
    const char *p = colon + 1;
    size_t pl = strlen(p);
    long port_no;
    if (pl == 0 || pl >= portcap || strspn(p, "0123456789") != pl) {
        mt_set_err(err, errlen, "%s: bad port", hp);
        return -1;
    }
    char why[96];
    if (mt_parse_int(p, 0, 65535, "port", &port_no, why, sizeof why) != 0) {
        mt_set_err(err, errlen, "%s: bad %s", hp, why);
        return -1;
    }
    if (hl >= hostcap) {
        mt_set_err(err, errlen, "%s: host name too long", hp);
        return -1;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    memcpy(port, p, pl + 1);
    return 0;
}

void mt_sockaddr_str(const struct sockaddr *sa, socklen_t len, char *buf,
                     size_t cap)
{
    char a[INET6_ADDRSTRLEN];
    if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
        snprintf(buf, cap, "%s:%u", a, (unsigned)ntohs(in->sin_port));
    } else if (sa && sa->sa_family == AF_INET6 &&
               len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof a);
        snprintf(buf, cap, "[%s]:%u", a, (unsigned)ntohs(in6->sin6_port));
    } else if (sa && sa->sa_family == AF_UNIX) {
        snprintf(buf, cap, "unix");
    } else {
        snprintf(buf, cap, "?");
    }
}

static int is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr)
                >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        if (IN6_IS_ADDR_V4MAPPED(a))
            return a->s6_addr[12] == 127;
    }
    return 0;
}

static int resolve(const char *host, const char *port, int passive,
                   struct addrinfo **res, char *err, size_t errlen)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    const char *h = host && *host && strcmp(host, "*") ? host : NULL;
    int r = getaddrinfo(h, port, &hints, res);
    if (r != 0) {
        mt_set_err(err, errlen, "%s:%s: %s", h ? h : "*", port, gai_strerror(r));
        return -1;
    }
    return 0;
}

/* Each address of hp in turn (resolved passive for a listener): a
 * non-blocking socket for it handed to use(), until one returns 0; that
 * socket is returned, the others closed. -1 with err when hp does not
 * resolve; -2 when no address would do, *last then the last one's errno
 * (left as given when there was none). */
typedef int (*addr_use_fn)(int fd, const struct addrinfo *ai, void *ctx);

static int first_address(const char *hp, int passive, addr_use_fn use, void *ctx,
                         int *last, char *err, size_t errlen)
{
    char host[256], port[16];
    struct addrinfo *res = NULL;
    if (mt_hostport_split(hp, host, sizeof host, port, sizeof port, err, errlen) != 0 ||
        resolve(host, port, passive, &res, err, errlen) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd >= 0 && use(fd, ai, ctx) != 0) {
            int e = errno;
            close(fd);
            fd = -1;
            errno = e;
        }
        if (fd < 0)
            *last = errno;
    }
    freeaddrinfo(res);
    return fd < 0 ? -2 : fd;
}

/* A non-blocking connect finished within timeout_ms (5 s when 0): 0, or
 * -1 with errno. */
static int connect_addr(int fd, const struct addrinfo *ai, void *ctx)
{
    int timeout_ms = *(const int *)ctx;
    int c = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (c != 0 && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int pr;
        do
            pr = poll(&p, 1, timeout_ms > 0 ? timeout_ms : 5000);
        while (pr < 0 && errno == EINTR);
        int soerr = ETIMEDOUT;
        socklen_t sl = sizeof soerr;
        if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        c = soerr == 0 ? 0 : -1;
        errno = soerr;
    }
    return c;
}

static int connect_tcp(const char *hp, int timeout_ms, char *err, size_t errlen)
{
    int last = ECONNREFUSED;
    int fd = first_address(hp, 0, connect_addr, &timeout_ms, &last, err, errlen);
    if (fd == -2)
        mt_set_err(err, errlen, "connect tcp:%s: %s", hp, strerror(last));
    if (fd < 0)
        return -1;
    /* one small frame per period: Nagle would hold each behind the last */
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        mt_set_err(err, errlen, "tcp:%s: TCP_NODELAY: %s", hp, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int mt_endpoint_connect(const char *spec, int timeout_ms, char *err, size_t errlen)
{
    if (!spec) {
        mt_set_err(err, errlen, "no server address");
        return -1;
    }
    if (mt_endpoint_is_tcp(spec))
        return connect_tcp(spec + strlen(MT_TCP_PREFIX), timeout_ms, err, errlen);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(spec) >= sizeof sa.sun_path) {
        mt_set_err(err, errlen, "socket path too long: %s", spec);
        return -1;
    }
    memcpy(sa.sun_path, spec, strlen(spec) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mt_set_err(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        if (e == EAGAIN || e == EINTR)
            return -2;
        mt_set_err(err, errlen, "connect %s: %s", spec, strerror(e));
        return -1;
    }
    return fd;
}

/* Binds and listens on one address; *ctx (int *) set to whether it is
 * loopback. */
static int listen_addr(int fd, const struct addrinfo *ai, void *ctx)
{
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    /* The kernel's whole backlog (SOMAXCONN, capped by net.core.somaxconn):
     * with 128, a flood of 140 connections from one address overflowed
     * the accept queue before the I/O thread's turn, and an honest
     * client's SYN dropped there came back a second later (tcp_hostile:
     * a probe admitted in 1004 ms under make test's load). */
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0)
        return -1;
    *(int *)ctx = is_loopback(ai->ai_addr);
    return 0;
}

int mt_tcp_listen(const char *hostport, int *loopback, char *bound,
                  size_t boundcap, char *err, size_t errlen)
{
    int last = EADDRNOTAVAIL;
    int fd = first_address(hostport, 1, listen_addr, loopback, &last, err, errlen);
    if (fd == -2)
        mt_set_err(err, errlen, "listen %s: %s", hostport, strerror(last));
    if (fd < 0)
        return -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        mt_sockaddr_str((struct sockaddr *)&ss, sl, bound, boundcap);
    else
        snprintf(bound, boundcap, "%s", hostport);
    return fd;
}

int mt_token_read(const char *path, char *tok, size_t cap, size_t *len,
                  char *err, size_t errlen)
{
    char buf[MT_TOKEN_MAX + 64];
    /* O_NONBLOCK: opening a FIFO nobody writes would wait for ever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        mt_set_err(err, errlen, "--token-file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        if (S_ISREG(st.st_mode))
            mt_set_err(err, errlen, "--token-file %s: %s", path, strerror(e));
        else
            mt_set_err(err, errlen, "--token-file %s: not a regular file (a FIFO "
                       "or a device is refused: it could block for ever)", path);
        return -1;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n < 0) {
        mt_set_err(err, errlen, "--token-file %s: %s", path, strerror(e));
        return -1;
    }
    buf[n] = '\0';
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
    else if (n == (ssize_t)sizeof buf - 1) {
        mt_set_err(err, errlen, "--token-file %s: first line over %d bytes",
                   path, MT_TOKEN_MAX);
        return -1;
    }
    char *b = buf;
    while (*b && isspace((unsigned char)*b))
        b++;
    size_t l = strlen(b);
    while (l && isspace((unsigned char)b[l - 1]))
        b[--l] = '\0';
    for (size_t i = 0; i < l; i++)
        if (b[i] < 0x21 || b[i] > 0x7e) {
            mt_set_err(err, errlen, "--token-file %s: the token must be printable "
                       "ASCII without spaces", path);
            return -1;
        }
    if (l < 16 || l > MT_TOKEN_MAX || l >= cap) {
        mt_set_err(err, errlen, "--token-file %s: the token must be 16 to %d "
                   "bytes (it is %zu); e.g. head -c 32 /dev/urandom | base64",
                   path, MT_TOKEN_MAX, l);
        return -1;
    }
    memcpy(tok, b, l + 1);
    *len = l;
    return 0;
}

int mt_token_mode_warning(const char *path, char *warn, size_t cap)
{
    struct stat st;
    if (stat(path, &st) != 0 || !(st.st_mode & 077))
        return 0;
    snprintf(warn, cap, "WARNING: --token-file %s is readable by others than "
             "its owner (mode %04o): anyone who can read it can connect; "
             "chmod 600 it", path, (unsigned)(st.st_mode & 07777));
    return 1;
}

int mt_token_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* every byte of a fixed span is compared, whatever the lengths */
    unsigned diff = (unsigned)(alen ^ blen);
    if (alen > MT_TOKEN_MAX || blen > MT_TOKEN_MAX)
        return 0;
    for (size_t i = 0; i < MT_TOKEN_MAX; i++) {
        unsigned char x = i < alen ? (unsigned char)a[i] : 0;
        unsigned char y = i < blen ? (unsigned char)b[i] : 0;
        diff |= (unsigned)(x ^ y);
    }
    return diff == 0;
}
