/* grow.c: see grow.h. */
#include "util/grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int mt_grow(void *bufp, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : (first ? first : 1);
    while (nc < need) {
        if (nc > SIZE_MAX / 2)
            return -1;
        nc *= 2;
    }
    if (elem && nc > SIZE_MAX / elem)
        return -1;
    /* bufp is a T **: read and write the pointer through memcpy, which
     * is defined whatever T is */
    void *old;
    memcpy(&old, bufp, sizeof old);
    void *p = realloc(old, nc * elem);
    if (!p)
        return -1;
    memcpy(bufp, &p, sizeof p);
    *cap = nc;
    return 0;
}

void *mt_alloc_lines(size_t n)
{
    void *p = NULL;
    if (n > SIZE_MAX - 63)
        return NULL;
    size_t lines = (n + 63) / 64 * 64;
    return posix_memalign(&p, 64, lines ? lines : 64) == 0 ? p : NULL;
}
