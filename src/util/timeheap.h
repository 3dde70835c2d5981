/* timeheap.h: a min-heap of timers, each embedded in its owner (an
 * intrusive heap): arming, re-arming to any time, disarming and taking the
 * earliest due are O(log n), so that an owner's deadline is watched
 * without walking every owner. mt-serve's connections keep their HELLO,
 * admission, input, stuck-output and closing deadlines here.
 *
 * Not thread-safe: one thread owns a heap.
 */
#ifndef MT_TIMEHEAP_H
#define MT_TIMEHEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_timer {
    uint64_t due;     /* when it fires (armed) */
    int      idx;     /* its place in the heap; -1: not armed */
} mt_timer;

typedef struct mt_timeheap {
    mt_timer **t;     /* [cap] the armed timers, heap-ordered by due */
    int        n, cap;
} mt_timeheap;

/* A timer not armed (before its first mt_timeheap_arm). */
void mt_timer_init(mt_timer *t);
/* An empty heap (a zeroed one is too); mt_timeheap_free releases its
 * array and touches no timer (their owners may be gone already). */
void mt_timeheap_init(mt_timeheap *h);
void mt_timeheap_free(mt_timeheap *h);

/* Arms t to fire at due, or moves it there when armed. 0, or -1 out of
 * memory (t then stays as it was). */
int  mt_timeheap_arm(mt_timeheap *h, mt_timer *t, uint64_t due);
/* Disarms t (nothing when it is not armed). */
void mt_timeheap_disarm(mt_timeheap *h, mt_timer *t);
/* The earliest timer due at now (due <= now), disarmed; NULL: none. */
mt_timer *mt_timeheap_pop_due(mt_timeheap *h, uint64_t now);
/* When the earliest fires; 0: nothing armed. */
uint64_t mt_timeheap_next(const mt_timeheap *h);

#endif
