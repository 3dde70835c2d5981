/* mapfile.c: a regular file mapped read-only whole (mapfile.h). */
#include "util/mapfile.h"
#include "util/errmsg.h"
#include "util/io.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int mt_mapfile_open(const char *path, mt_mapfile *f, char *err, size_t errlen)
{
    static const uint8_t empty[1];
    *f = (mt_mapfile){ .data = empty };
    size_t len;
    int fd = mt_open_regular(path, &len, err, errlen);
    if (fd < 0)
        return -1;
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
