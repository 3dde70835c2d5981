/* test_grow.c: mt_grow (util/grow.c), the capacity doubling behind the
 * append helpers of the sweep, the summary, the shedder and the engine. */
#include "tap.h"
#include "util/grow.h"

#include <stdint.h>
#include <stdlib.h>

int main(void)
{
    int *v = NULL;
    size_t cap = 0;
    ok(mt_grow(&v, &cap, 1, sizeof *v, 4) == 0 && v && cap == 4,
       "first growth takes the first size (cap %zu)", cap);
    int *before = v;
    ok(mt_grow(&v, &cap, 4, sizeof *v, 4) == 0 && v == before && cap == 4,
       "room already there: nothing moves");
    for (int i = 0; i < 4; i++)
        v[i] = i + 1;
    ok(mt_grow(&v, &cap, 5, sizeof *v, 4) == 0 && cap == 8,
       "one past the end doubles (cap %zu)", cap);
    ok(v[0] == 1 && v[3] == 4, "the elements are kept");
    ok(mt_grow(&v, &cap, 33, sizeof *v, 4) == 0 && cap == 64,
       "a larger need doubles until it fits (cap %zu)", cap);
    int *keep = v;
    size_t keepcap = cap;
    ok(mt_grow(&v, &cap, SIZE_MAX / 2 + 2, sizeof *v, 4) == -1 && v == keep &&
       cap == keepcap, "overflow refused, array and capacity untouched");
    free(v);

    char *s = NULL;
    size_t scap = 0;
    ok(mt_grow(&s, &scap, 5000, 1, 4096) == 0 && scap == 8192,
       "bytes: a need above the first size doubles it (cap %zu)", scap);
    free(s);
    size_t zcap = 0;
    double *d = NULL;
    ok(mt_grow(&d, &zcap, 3, sizeof *d, 0) == 0 && zcap == 4,
       "first size 0 starts from 1 (cap %zu)", zcap);
    free(d);
    return tap_done();
}
