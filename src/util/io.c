/* io.c: see io.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/errmsg.h"
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

int mt_open_regular(const char *path, size_t *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        mt_set_err(err, errlen, "%s: not a regular file (%s)", path,
                   S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO" :
                   S_ISSOCK(sb.st_mode) ? "a socket" : "a device");
        close(fd);
        return -1;
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        mt_set_err(err, errlen, "%s: too large to address", path);
        close(fd);
        return -1;
    }
    *size = (size_t)sb.st_size;
    return fd;
}

char *mt_read_regular(const char *path, size_t limit, size_t *len, char *err, size_t errlen)
{
    size_t size, got = 0;
    int fd = mt_open_regular(path, &size, err, errlen);
    if (fd < 0)
        return NULL;
    if (size > limit) {
        mt_set_err(err, errlen, "%s: %zu bytes, more than the %zu allowed", path, size, limit);
        close(fd);
        return NULL;
    }
    char *buf = malloc(size + 1);
    int rerr = 0;
    while (buf && got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rerr = r < 0 ? errno : 0;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (!buf) {
        mt_set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (got != size) {
        mt_set_err(err, errlen, "%s: %s", path, rerr ? strerror(rerr) : "shorter than its size");
        free(buf);
        return NULL;
    }
    buf[size] = '\0';
    *len = size;
    return buf;
}
