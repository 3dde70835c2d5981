/* byteq.h: a growing byte queue with a bound, for a non-blocking socket's
 * pending output (the --ws gate's queues to each client and to the
 * server): bytes appended at the end, sent from the front. */
#ifndef MT_BYTEQ_H
#define MT_BYTEQ_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_byteq {
    uint8_t *p;
    size_t   off, len, cap;    /* bytes [off, len) waiting */
} mt_byteq;

/* Appends n bytes unless the queue would pass max. 0, or -1 (over max,
 * or out of memory; nothing appended). */
int    mt_byteq_put(mt_byteq *b, const void *p, size_t n, size_t max);
/* Bytes queued. */
size_t mt_byteq_size(const mt_byteq *b);
/* Writes what fd takes. 0, or -1 (the peer is gone). */
int    mt_byteq_flush(mt_byteq *b, int fd);

#endif
