/* test_timeheap.c: the intrusive timer heap (src/util/timeheap.c) against
 * a brute-force model: random arms, re-arms (earlier and later), disarms
 * and pops; every pop must return the earliest due timer, never one not
 * yet due, and every timer's idx must say whether it is armed. */
#include "util/timeheap.h"
#include "tap.h"

#include <stdint.h>
#include <string.h>

#define NT 300

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(void)
{
    mt_timeheap h;
    mt_timer t[NT];
    int armed[NT];
    mt_timeheap_init(&h);
    for (int i = 0; i < NT; i++) {
        mt_timer_init(&t[i]);
        armed[i] = 0;
    }
    ok(mt_timeheap_next(&h) == 0 && !mt_timeheap_pop_due(&h, UINT64_MAX),
       "empty: nothing next, nothing due");

    int bad_pop = 0, bad_idx = 0, bad_next = 0, pops = 0, rearms = 0;
    uint64_t now = 1000;
    for (int step = 0; step < 20000; step++) {
        int i = (int)(next_rand() % NT);
        int op = (int)(next_rand() % 4);
        if (op <= 1) {
            rearms += armed[i];
            if (mt_timeheap_arm(&h, &t[i], now + 1 + next_rand() % 500) != 0)
                bad_idx++;
            armed[i] = 1;
        } else if (op == 2) {
            mt_timeheap_disarm(&h, &t[i]);
            armed[i] = 0;
        } else {
            now += next_rand() % 40;
            /* the model's earliest among the armed */
            uint64_t best = 0;
            for (int j = 0; j < NT; j++)
                if (armed[j] && (!best || t[j].due < best))
                    best = t[j].due;
            if (mt_timeheap_next(&h) != best)
                bad_next++;
            mt_timer *p = mt_timeheap_pop_due(&h, now);
            if (best && best <= now) {
                if (!p || p->due != best || p->idx != -1)
                    bad_pop++;
                else
                    armed[p - t] = 0;
                pops++;
            } else if (p) {
                bad_pop++;
            }
        }
        for (int j = 0; j < NT; j++)
            if ((t[j].idx >= 0) != armed[j] ||
                (t[j].idx >= 0 && h.t[t[j].idx] != &t[j]))
                bad_idx++;
    }
    ok(pops > 1000 && rearms > 1000, "the run exercised it: %d pops, %d re-arms",
       pops, rearms);
    is_int(bad_next, 0, "next is always the earliest armed");
    is_int(bad_pop, 0, "a pop returns the earliest due, and only a due one");
    is_int(bad_idx, 0, "each timer's idx says where it is, -1 when not armed");

    /* drain it: the pops come out in order */
    int ordered = 1, n = 0;
    uint64_t last = 0;
    mt_timer *p;
    while ((p = mt_timeheap_pop_due(&h, UINT64_MAX))) {
        ordered &= p->due >= last;
        last = p->due;
        n++;
    }
    ok(ordered && h.n == 0, "the rest comes out in due order (%d)", n);
    mt_timeheap_free(&h);
    return tap_done();
}
