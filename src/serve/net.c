/* net.c: the listening socket, the control input and non-blocking mode
 * for mt-serve (see net.h).
 *
 * The listening socket's path is the part most likely to go wrong in
 * operation: a server killed hard leaves its socket file behind, and a
 * second server started on the same path must neither refuse forever nor
 * steal a live server's path. A connect() tells the two apart.
 */
#define _GNU_SOURCE
#include "serve/net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/errmsg.h"

#define STALE_CHECK_MS 1000   /* longest wait to tell a live server from a dead one */

_Static_assert(sizeof ((struct sockaddr_un *)0)->sun_path <=
               sizeof ((mt_listener *)0)->path, "mt_listener.path holds a sun_path");

int mt_net_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int unix_addr(const char *path, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (!path || strlen(path) >= sizeof sa->sun_path)
        return -1;
    memcpy(sa->sun_path, path, strlen(path) + 1);
    return 0;
}

/* Something exists at path: 1 when it is a socket nobody listens on (so
 * it may be replaced), 0 when it must be kept (err says why), -1 on an
 * error (err). */
static int socket_is_stale(const char *path, const struct sockaddr_un *sa,
                           char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        mt_set_err(err, errlen, "%s: exists and is not a socket; not replacing it",
                   path);
        return 0;
    }
    /* Non-blocking: a server that is stopped (SIGSTOP) or swamped with a
     * full backlog would keep a blocking connect waiting for ever, and
     * with SA_RESTART not even SIGTERM would end the wait. On a Unix
     * socket a full backlog answers EAGAIN at once: someone is there. */
    int t = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (t < 0) {
        mt_set_err(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int c = connect(t, (const struct sockaddr *)sa, sizeof *sa);
    int cerr = errno;
    if (c != 0 && cerr == EINPROGRESS) {
        /* not seen on Unix sockets, but bounded all the same */
        struct pollfd p = {.fd = t, .events = POLLOUT};
        int pr = poll(&p, 1, STALE_CHECK_MS);
        socklen_t sl = sizeof cerr;
        if (pr == 1 && getsockopt(t, SOL_SOCKET, SO_ERROR, &cerr, &sl) == 0)
            c = cerr == 0 ? 0 : -1;
        else
            cerr = EAGAIN;
    }
    close(t);
    if (c == 0) {
        mt_set_err(err, errlen, "%s: another server is listening there", path);
        return 0;
    }
    if (cerr == EAGAIN || cerr == EWOULDBLOCK) {
        mt_set_err(err, errlen, "%s: a server holds this socket but does not "
                   "accept connections (stopped, or its backlog is full); "
                   "not replacing it", path);
        return 0;
    }
    if (cerr != ECONNREFUSED) {
        mt_set_err(err, errlen, "%s: cannot tell whether it is stale (%s); "
                   "not replacing it", path, strerror(cerr));
        return 0;
    }
    return 1;
}

/* Whether a server may start at path, asked before anything is loaded:
 * 1 when nothing is there or only a stale socket, 0 when something must be
 * kept (a live or stopped server, a file that is not a socket: err says
 * what), -1 on an error (err). Never blocks (see socket_is_stale). */
int mt_net_socket_free(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 1;
    struct sockaddr_un sa;
    if (unix_addr(path, &sa) != 0) {
        mt_set_err(err, errlen, "%s: too long for a Unix socket", path);
        return -1;
    }
    return socket_is_stale(path, &sa, err, errlen);
}

int mt_net_listen(const char *path, mode_t mode, mt_listener *l,
                  char *err, size_t errlen)
{
    struct sockaddr_un sa;
    memset(l, 0, sizeof *l);
    l->fd = -1;
    if (!path) {
        mt_set_err(err, errlen, "no socket path");
        return -1;
    }
    if (unix_addr(path, &sa) != 0) {
        mt_set_err(err, errlen, "%s: socket path too long (max %zu bytes)",
                   path, sizeof sa.sun_path - 1);
        return -1;
    }
    memcpy(l->path, sa.sun_path, sizeof l->path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        int stale = socket_is_stale(path, &sa, err, errlen);
        if (stale <= 0)
            return -1;
        if (unlink(path) != 0) {
            mt_set_err(err, errlen, "%s: stale socket, unlink: %s", path,
                       strerror(errno));
            return -1;
        }
        l->stale_removed = 1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mt_set_err(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    mode_t old = umask(0177);   /* never world-accessible, even briefly */
    int b = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int berr = errno;
    umask(old);
    if (b != 0) {
        mt_set_err(err, errlen, "%s: bind: %s", path, strerror(berr));
        close(fd);
        return -1;
    }
    if (chmod(path, mode) != 0 || listen(fd, 128) != 0) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    if (stat(path, &st) == 0) {
        l->dev = st.st_dev;
        l->ino = st.st_ino;
    }
    l->created = 1;
    l->fd = fd;
    return 0;
}

void mt_net_listener_close(mt_listener *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    struct stat st;
    if (l->created && stat(l->path, &st) == 0 && st.st_dev == l->dev &&
        st.st_ino == l->ino)
        unlink(l->path);
    l->created = 0;
}

int mt_net_open_control(const char *path, mt_control_in *c, char *err,
                        size_t errlen)
{
    c->fd = c->keep_wfd = -1;
    c->is_socket = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        mt_set_err(err, errlen, "--control %s: %s (create a FIFO with mkfifo, "
                   "or give a listening Unix socket)", path, strerror(errno));
        return -1;
    }
    if (S_ISFIFO(st.st_mode)) {
        c->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (c->fd < 0) {
            mt_set_err(err, errlen, "--control %s: %s", path, strerror(errno));
            return -1;
        }
        /* Our own write end keeps the FIFO from reporting EOF/HUP forever
         * once a controller closes; a new controller can reopen it. */
        c->keep_wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        return 0;
    }
    if (S_ISSOCK(st.st_mode)) {
        struct sockaddr_un sa;
        if (unix_addr(path, &sa) != 0) {
            mt_set_err(err, errlen, "--control %s: path too long", path);
            return -1;
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            mt_set_err(err, errlen, "--control %s: connect: %s", path,
                       strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        if (mt_net_set_nonblock(fd) != 0) {
            mt_set_err(err, errlen, "--control %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        c->fd = fd;
        c->is_socket = 1;
        return 0;
    }
    mt_set_err(err, errlen, "--control %s: neither a FIFO nor a Unix socket",
               path);
    return -1;
}

void mt_net_control_close(mt_control_in *c)
{
    if (c->fd >= 0)
        close(c->fd);
    if (c->keep_wfd >= 0)
        close(c->keep_wfd);
    c->fd = c->keep_wfd = -1;
}
