/* net.h: mt-serve's descriptors to the outside: the listening Unix socket
 * (with the check that a socket file left by a dead server is stale before
 * it is replaced, and the unlink at exit that never removes a successor's
 * socket), the control input (a FIFO or a Unix socket), and non-blocking
 * mode. No epoll, no protocol: the server*.c files own those.
 */
#ifndef MT_NET_H
#define MT_NET_H

#include <stddef.h>
#include <sys/types.h>

typedef struct mt_listener {
    int   fd;              /* listening, non-blocking, close-on-exec; -1 */
    char  path[108];       /* sizeof sockaddr_un.sun_path */
    dev_t dev;             /* the socket file we created, so that unlink */
    ino_t ino;             /* never removes another server's */
    int   created;         /* we bound path (and may unlink it) */
    int   stale_removed;   /* a stale socket file was removed first */
} mt_listener;

/* Listens on a new Unix socket at path, created with mode (never
 * world-accessible, even for an instant). An existing socket file is
 * replaced only when nothing listens there (connect refused); anything
 * else at path is an error. 0, or -1 with err. */
int  mt_net_listen(const char *path, mode_t mode, mt_listener *l,
                   char *err, size_t errlen);
/* Closes the socket and removes its file if it is still the one we made. */
void mt_net_listener_close(mt_listener *l);

typedef struct mt_control_in {
    int fd;                /* read end, non-blocking; -1 */
    int keep_wfd;          /* FIFO: our own write end (see net.c); -1 */
    int is_socket;
} mt_control_in;

/* Opens --control PATH: a FIFO (read end plus a write end of our own, so
 * a controller that closes does not leave the FIFO at EOF forever) or a
 * listening Unix socket (connected to). 0, or -1 with err. */
int  mt_net_open_control(const char *path, mt_control_in *c,
                         char *err, size_t errlen);
void mt_net_control_close(mt_control_in *c);

/* O_NONBLOCK on fd. 0, or -1 with errno. */
int  mt_net_set_nonblock(int fd);

/* Whether a server may start at path (asked before the model is loaded):
 * 1 when nothing or only a stale socket is there, 0 when what is there
 * must be kept (err says what: a live or a stopped server, not a socket),
 * -1 on an error (err). Never blocks, whatever the server there does. */
int  mt_net_socket_free(const char *path, char *err, size_t errlen);

#endif
