/* byteq.c: see byteq.h. */
#include "serve/byteq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int mt_byteq_put(mt_byteq *b, const void *p, size_t n, size_t max)
{
    if (b->len - b->off + n > max)
        return -1;
    if (b->off > 0 && b->len + n > b->cap) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np)
            return -1;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

size_t mt_byteq_size(const mt_byteq *b)
{
    return b->len - b->off;
}

int mt_byteq_flush(mt_byteq *b, int fd)
{
    while (b->off < b->len) {
        ssize_t n = send(fd, b->p + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        b->off += (size_t)n;
    }
    b->off = b->len = 0;
    return 0;
}

