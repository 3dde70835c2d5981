/* mapfile.c: a regular file mapped read-only whole (mapfile.h). */
#include "util/mapfile.h"
#include "util/errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mt_mapfile_open(const char *path, mt_mapfile *f, char *err, size_t errlen)
{
    static const uint8_t empty[1];
    *f = (mt_mapfile){ .data = empty };
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
                   S_ISDIR(sb.st_mode) ? "a directory" :
                   S_ISFIFO(sb.st_mode) ? "a FIFO" :
                   S_ISSOCK(sb.st_mode) ? "a socket" : "a device");
        close(fd);
        return -1;
    }
    size_t len = (size_t)sb.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int map_errno = errno;
    close(fd);                          /* the mapping holds the file */
    if (map == MAP_FAILED) {
        mt_set_err(err, errlen, "%s: mmap: %s", path, strerror(map_errno));
        return -1;
    }
    if (map) {
        f->map = map;
        f->data = map;
    }
    f->len = len;
    return 0;
}

void mt_mapfile_close(mt_mapfile *f)
{
    if (f->map)
        munmap(f->map, f->len);
    f->map = NULL;
    f->len = 0;
}
