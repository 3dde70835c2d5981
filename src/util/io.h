/* io.h: the one loop that writes a whole buffer to a file descriptor. */
#ifndef MT_IO_H
#define MT_IO_H

#include <stddef.h>

/* write(2) the n bytes at p to fd, again after a short write or EINTR.
 * 0, or -1 with errno set by the write that failed. */
int mt_write_all(int fd, const void *p, size_t n);

#endif
