/* io.c: see io.h. */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "util/io.h"

int mt_write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}
