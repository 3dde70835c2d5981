/* timeheap.c: the intrusive min-heap of timers (see timeheap.h). */
#include "util/timeheap.h"

#include <stdlib.h>

void mt_timer_init(mt_timer *t)
{
    t->due = 0;
    t->idx = -1;
}

void mt_timeheap_init(mt_timeheap *h)
{
    h->t = NULL;
    h->n = h->cap = 0;
}

void mt_timeheap_free(mt_timeheap *h)
{
    free(h->t);
    mt_timeheap_init(h);
}

static void place(mt_timeheap *h, int i, mt_timer *t)
{
    h->t[i] = t;
    t->idx = i;
}

static void sift_up(mt_timeheap *h, int i)
{
    mt_timer *t = h->t[i];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h->t[p]->due <= t->due)
            break;
        place(h, i, h->t[p]);
        i = p;
    }
    place(h, i, t);
}

static void sift_down(mt_timeheap *h, int i)
{
    mt_timer *t = h->t[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->t[c + 1]->due < h->t[c]->due)
            c++;
        if (t->due <= h->t[c]->due)
            break;
        place(h, i, h->t[c]);
        i = c;
    }
    place(h, i, t);
}

int mt_timeheap_arm(mt_timeheap *h, mt_timer *t, uint64_t due)
{
    if (t->idx >= 0) {
        uint64_t old = t->due;
        t->due = due;
        if (due < old)
            sift_up(h, t->idx);
        else if (due > old)
            sift_down(h, t->idx);
        return 0;
    }
    if (h->n == h->cap) {
        int nc = h->cap ? h->cap * 2 : 64;
        mt_timer **p = realloc(h->t, (size_t)nc * sizeof *p);
        if (!p)
            return -1;
        h->t = p;
        h->cap = nc;
    }
    t->due = due;
    place(h, h->n++, t);
    sift_up(h, t->idx);
    return 0;
}

void mt_timeheap_disarm(mt_timeheap *h, mt_timer *t)
{
    int i = t->idx;
    if (i < 0)
        return;
    t->idx = -1;
    mt_timer *last = h->t[--h->n];
    if (i == h->n)
        return;
    place(h, i, last);
    /* the one moved into the hole may belong above it or below it */
    sift_up(h, i);
    sift_down(h, last->idx);
}

mt_timer *mt_timeheap_pop_due(mt_timeheap *h, uint64_t now)
{
    if (h->n == 0 || h->t[0]->due > now)
        return NULL;
    mt_timer *t = h->t[0];
    mt_timeheap_disarm(h, t);
    return t;
}

uint64_t mt_timeheap_next(const mt_timeheap *h)
{
    return h->n ? h->t[0]->due : 0;
}
