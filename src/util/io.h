/* io.h: the one loop that writes a whole buffer to a file descriptor, the
 * one opener of a regular file that a FIFO cannot hold, and the reader of
 * a small file whole on it. */
#ifndef MT_IO_H
#define MT_IO_H

#include <stddef.h>

/* write(2) the n bytes at p to fd, again after a short write or EINTR.
 * 0, or -1 with errno set by the write that failed. */
int mt_write_all(int fd, const void *p, size_t n);

/* Opens the regular file at path for reading: opened without blocking, so
 * a FIFO (or a device) in its place is refused ("not a regular file (a
 * FIFO)") instead of holding the caller, a server at start, for ever. The
 * descriptor (O_CLOEXEC) and the file's size in *size, or -1 with the
 * reason in err. */
int mt_open_regular(const char *path, size_t *size, char *err, size_t errlen);

/* Reads the regular file at path whole, at most limit bytes, into a
 * malloc'd buffer with a NUL after its *len bytes. Opened without
 * blocking: a FIFO (or a device) in place of the file is refused ("not a
 * regular file") instead of holding the caller, a server at start, for
 * ever. NULL with the reason in err. */
char *mt_read_regular(const char *path, size_t limit, size_t *len, char *err, size_t errlen);

#endif
