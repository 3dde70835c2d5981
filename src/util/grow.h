/* grow.h: the one growable-array step (capacity doubling from a first
 * size) behind the project's append helpers: the sweep's and the
 * summary's sample lists, the shedder's admitted ids, the engine's log
 * buffer; and buffers on whole cache lines. */
#ifndef MT_GROW_H
#define MT_GROW_H

#include <stddef.h>

/* Makes room for `need` elements of elem bytes in the array *bufp points
 * to (bufp is the address of a T *), doubling its capacity *cap, from
 * `first` when it is 0, until it holds them. 0, or -1 (out of memory or
 * overflow) with *bufp and *cap untouched: the caller still owns the old
 * array. */
int mt_grow(void *bufp, size_t *cap, size_t need, size_t elem, size_t first);

/* n bytes starting on a 64-byte line, rounded up to whole lines (NULL
 * when out of memory), freed with free(): for buffers two threads write
 * in parts (the depformer's rows in column halves), so that no line is
 * written by both. */
void *mt_alloc_lines(size_t n);

#endif
