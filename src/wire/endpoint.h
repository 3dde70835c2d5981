/* endpoint.h: where a frame stream goes over the network: "tcp:HOST:PORT"
 * beside a Unix socket path (clients), "HOST:PORT" for a listener (mt-serve
 * --listen, --agent), peer addresses for log lines, and the access token
 * (read from a file, compared in constant time).
 *
 * HOST is a name, an IPv4 address or an IPv6 address in brackets
 * ([::1]:7000); "*" or an empty HOST listens on every address.
 */
#ifndef MT_ENDPOINT_H
#define MT_ENDPOINT_H

#include <stddef.h>
#include <sys/socket.h>

#include "wire/frame.h"

#define MT_TCP_PREFIX "tcp:"

/* 1 when spec names a TCP endpoint ("tcp:HOST:PORT"). */
int mt_endpoint_is_tcp(const char *spec);

/* Splits "HOST:PORT" (or "[V6]:PORT") into host (NULL for "*" or empty)
 * and port. 0, or -1 with err. */
int mt_hostport_split(const char *hp, char *host, size_t hostcap,
                      char *port, size_t portcap, char *err, size_t errlen);

/* Connects to spec: a Unix socket path or "tcp:HOST:PORT". The descriptor
 * is non-blocking and close-on-exec (TCP: TCP_NODELAY, the connect waited
 * for up to timeout_ms). Returns the fd; -2 when a Unix server's backlog is
 * full (try again later); -1 with err. */
int mt_endpoint_connect(const char *spec, int timeout_ms, char *err, size_t errlen);

/* Listens on "HOST:PORT" (TCP, non-blocking, close-on-exec, SO_REUSEADDR,
 * IPv6 sockets v6-only so that [::]:P and 0.0.0.0:P can both be bound).
 * *loopback tells whether every address bound is a loopback one. bound
 * gets the address as bound (the port filled in when PORT was 0). Returns
 * the fd, or -1 with err. */
int mt_tcp_listen(const char *hostport, int *loopback, char *bound,
                  size_t boundcap, char *err, size_t errlen);

/* "1.2.3.4:5" or "[::1]:5" for a log line; "?" when unknown. */
void mt_sockaddr_str(const struct sockaddr *sa, socklen_t len, char *buf,
                     size_t cap);

/* Reads a token file: its first line, surrounding white space removed,
 * 16..MT_TOKEN_MAX printable ASCII bytes. A regular file only (a FIFO
 * would block the open or the read for ever). 0, or -1 with err. */
int mt_token_read(const char *path, char *tok, size_t cap, size_t *len,
                  char *err, size_t errlen);
/* 1 with a warning in warn when the token file can be read by others
 * than its owner (group or other bits, as ssh warns of a key file); 0
 * when it cannot (or cannot be looked at: mt_token_read says why). */
int mt_token_mode_warning(const char *path, char *warn, size_t cap);

/* 1 when a[0..alen) equals b[0..blen), in a time that depends on neither
 * content nor where they differ (both at most MT_TOKEN_MAX bytes). */
int mt_token_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
