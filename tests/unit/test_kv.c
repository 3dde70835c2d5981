/* test_kv.c: the block pool and both cache policies (kv.h): bounded bytes
 * for the window policy over 20,000 frames, one position per step for the
 * full policy, exhaustion, release and reopen, ring order across the wrap,
 * and the visible list's rotary positions in both rope modes. */
#include "tap.h"
#include "decode/kv.h"

#include <stdint.h>

enum { PB = 96 }; /* position_bytes: any value; block = 16 * PB */

static mt_kv_pool *pool_of(mt_kv_policy pol, int S, int W, mt_rope_mode rope,
                           size_t budget)
{
    mt_kv_params p = { .policy = pol, .sink = S, .window = W, .rope = rope,
                       .budget_bytes = budget, .position_bytes = PB };
    char err[256] = "";
    mt_kv_pool *pool = NULL;
    if (mt_kv_pool_create(&p, &pool, err, sizeof err) != 0)
        tap_diag("pool_create: %s", err);
    return pool;
}

static void test_window_bytes_constant(void)
{
    mt_kv_pool *pool = pool_of(MT_KV_WINDOW, 4, 250, MT_ROPE_CACHE, 1 << 22);
    mt_kv_seq *s = NULL;
    is_int(mt_kv_seq_open(pool, &s), 0, "window: open");
    size_t bound = mt_kv_bound_bytes(mt_kv_pool_params(pool));
    is_int(bound, (size_t)16 * 16 * PB, "window: bound is ceil(254/16)=16 blocks");
    size_t used0 = mt_kv_used_bytes(pool);
    int bad = 0, bad_room = 0;
    for (int f = 1; f <= 20000; f++) {
        if (mt_kv_reserve(pool, s, 1) != 0 || !mt_kv_has_room(pool, s))
            bad_room++;
        s->len++;
        if (mt_kv_seq_bytes(pool, s) != bound || mt_kv_used_bytes(pool) != used0)
            bad++;
    }
    is_int(bad, 0, "window: bytes per session constant, frames 1..20000");
    is_int(bad_room, 0, "window: reserve(1) always succeeds without taking blocks");
    is_int(mt_kv_seq_bytes(pool, s), bound, "window: bytes at frame 20000 == bound");
    mt_kv_seq_close(pool, s);
    is_int(mt_kv_used_bytes(pool), 0, "window: close returns every block");
    mt_kv_pool_free(pool);
}

static void test_full_growth(void)
{
    mt_kv_pool *pool = pool_of(MT_KV_FULL, 0, 0, MT_ROPE_ABSOLUTE, (size_t)1 << 24);
    mt_kv_seq *s = NULL;
    is_int(mt_kv_seq_open(pool, &s), 0, "full: open");
    is_int(mt_kv_seq_bytes(pool, s), 0, "full: an open sequence holds nothing");
    int bad = 0;
    for (int step = 1; step <= 1000; step++) {
        int64_t before = s->len;
        if (mt_kv_reserve(pool, s, 1) != 0)
            bad++;
        s->len++;
        size_t want = (size_t)((s->len + 15) / 16) * 16 * PB;
        if (s->len != before + 1 || mt_kv_seq_bytes(pool, s) != want ||
            mt_kv_used_bytes(pool) != want)
            bad++;
    }
    is_int(bad, 0, "full: one position per step, one block per 16 positions");
    is_int(s->nblocks, 63, "full: 1000 positions in 63 blocks");
    is_int(mt_kv_visible_count(pool, 999), 1000, "full: query 999 sees 1000 positions");
    mt_kv_seq_close(pool, s);
    mt_kv_pool_free(pool);
}

static void test_exhaustion(void)
{
    /* 3 windows of ceil((4+28)/16)=2 blocks fit in 7 blocks, not 4. */
    mt_kv_pool *pool = pool_of(MT_KV_WINDOW, 4, 28, MT_ROPE_CACHE, 7 * 16 * PB);
    is_int(mt_kv_pool_blocks(pool), 7, "exhaustion: pool of 7 blocks");
    mt_kv_seq *s[4] = { 0 };
    int opened = 0;
    for (int i = 0; i < 3; i++)
        opened += mt_kv_seq_open(pool, &s[i]) == 0;
    is_int(opened, 3, "exhaustion: three windows open");
    is_int(mt_kv_seq_open(pool, &s[3]), MT_KV_EXHAUSTED,
           "exhaustion: the fourth window is refused (MT_KV_EXHAUSTED)");
    ok(s[3] == NULL, "exhaustion: refused open returns no sequence");
    is_int(mt_kv_free_bytes(pool), 16 * PB, "exhaustion: refused open took nothing");
    mt_kv_seq_close(pool, s[1]);
    s[1] = NULL;
    is_int(mt_kv_seq_open(pool, &s[3]), 0, "exhaustion: opens again after a close");
    for (int i = 0; i < 4; i++)
        mt_kv_seq_close(pool, s[i]);
    is_int(mt_kv_used_bytes(pool), 0, "exhaustion: all returned");
    mt_kv_pool_free(pool);

    /* Full policy: reserve fails with nothing taken. */
    pool = pool_of(MT_KV_FULL, 0, 0, MT_ROPE_ABSOLUTE, 3 * 16 * PB);
    mt_kv_seq *a = NULL, *b = NULL;
    mt_kv_seq_open(pool, &a);
    mt_kv_seq_open(pool, &b);
    is_int(mt_kv_reserve(pool, a, 40), 0, "full: reserve 40 positions (3 blocks)");
    a->len = 40;
    is_int(mt_kv_reserve(pool, b, 1), MT_KV_EXHAUSTED, "full: next reserve exhausted");
    is_int(b->nblocks, 0, "full: exhausted reserve took nothing");
    is_int(mt_kv_reserve(pool, a, 8), 0, "full: room left in a's last block needs no block");
    is_int(mt_kv_reserve(pool, a, 9), MT_KV_EXHAUSTED, "full: 9 more needs a block: exhausted");
    is_int(a->nblocks, 3, "full: a still holds 3 blocks");

    /* Release (preempt) and recompute. */
    size_t used = mt_kv_used_bytes(pool);
    mt_kv_release(pool, a);
    is_int(a->len, 0, "release: len back to 0");
    is_int(a->released, 1, "release: marked released");
    is_int(mt_kv_used_bytes(pool), used - 3 * 16 * PB, "release: blocks back in the pool");
    is_int(mt_kv_reserve(pool, b, 1), 0, "release: another sequence can now grow");
    is_int(mt_kv_reserve(pool, a, 32), 0, "reopen: released sequence reserves its history");
    is_int(a->released, 0, "reopen: released flag cleared once it holds blocks");
    is_int(mt_kv_reserve(pool, a, 33), MT_KV_EXHAUSTED, "reopen: pool bound still holds");
    mt_kv_seq_close(pool, a);
    mt_kv_seq_close(pool, b);
    is_int(mt_kv_used_bytes(pool), 0, "full: all returned");
    mt_kv_pool_free(pool);

    /* Window release gives the whole bound back; reserve takes it again. */
    pool = pool_of(MT_KV_WINDOW, 0, 16, MT_ROPE_CACHE, 1 * 16 * PB);
    mt_kv_seq_open(pool, &a);
    a->len = 100;
    mt_kv_release(pool, a);
    is_int(mt_kv_free_bytes(pool), 16 * PB, "window release: bound returned");
    ok(!mt_kv_has_room(pool, a), "window release: no room until reserved");
    is_int(mt_kv_reserve(pool, a, 1), 0, "window release: reserve retakes the bound");
    ok(mt_kv_has_room(pool, a), "window release: room again");
    mt_kv_seq_close(pool, a);
    mt_kv_pool_free(pool);
}

/* Checks a visible list: age order (positions increasing), each slot the
 * slot of its position, and the expected positions. */
static int check_visible(mt_kv_pool *pool, mt_kv_seq *s, int64_t q,
                         const int64_t *want_pos, int nwant, int cache_rope,
                         const char *name)
{
    int64_t slot[512], rope[512], qr = -1;
    int n = mt_kv_visible(pool, s, q, slot, rope, 512, &qr);
    int good = n == nwant && mt_kv_visible_count(pool, q) == n;
    for (int i = 0; good && i < n; i++) {
        if (slot[i] != mt_kv_slot(pool, s, want_pos[i]))
            good = 0;
        if (rope[i] != (cache_rope ? i : want_pos[i]))
            good = 0;
    }
    if (good && qr != (cache_rope ? n - 1 : q))
        good = 0;
    if (!ok(good, "%s", name)) {
        tap_diag("  n=%d want %d, q_rope=%lld", n, nwant, (long long)qr);
        for (int i = 0; i < n; i++)
            tap_diag("  [%d] slot %lld rope %lld", i, (long long)slot[i],
                     (long long)rope[i]);
    }
    return good;
}

static void test_ring_order(void)
{
    for (int absolute = 0; absolute <= 1; absolute++) {
        mt_rope_mode rope = absolute ? MT_ROPE_ABSOLUTE : MT_ROPE_CACHE;
        const char *mode = absolute ? "absolute" : "cache";
        char name[128];
        mt_kv_pool *pool = pool_of(MT_KV_WINDOW, 4, 8, rope, 1 << 20);
        mt_kv_seq *s = NULL;
        mt_kv_seq_open(pool, &s);

        /* Explicit slots across the wrap point (S=4, W=8, q=15). */
        int64_t slot[16], rp[16], qr;
        int n = mt_kv_visible(pool, s, 15, slot, rp, 16, &qr);
        int64_t want_slot[12] = { 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7 };
        int same = n == 12;
        for (int i = 0; same && i < 12; i++)
            same = slot[i] == want_slot[i];
        snprintf(name, sizeof name, "%s: slots across the wrap 0-3,8-11,4-7", mode);
        ok(same, "%s", name);

        int64_t p_early[3] = { 0, 1, 2 };
        snprintf(name, sizeof name, "%s: S=4, q=2: positions 0..2", mode);
        check_visible(pool, s, 2, p_early, 3, !absolute, name);

        int64_t p_full[12] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
        snprintf(name, sizeof name, "%s: S=4, q=11: exactly full, no eviction", mode);
        check_visible(pool, s, 11, p_full, 12, !absolute, name);

        int64_t p_wrap[12] = { 0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15 };
        snprintf(name, sizeof name, "%s: S=4, q=15: sinks then ring oldest..newest", mode);
        check_visible(pool, s, 15, p_wrap, 12, !absolute, name);

        int64_t p_far[12] = { 0, 1, 2, 3, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007 };
        snprintf(name, sizeof name, "%s: S=4, q=1007: far past the wrap", mode);
        check_visible(pool, s, 1007, p_far, 12, !absolute, name);
        mt_kv_seq_close(pool, s);
        mt_kv_pool_free(pool);

        /* S = 0: ring only. */
        pool = pool_of(MT_KV_WINDOW, 0, 8, rope, 1 << 20);
        mt_kv_seq_open(pool, &s);
        int64_t p0[8] = { 13, 14, 15, 16, 17, 18, 19, 20 };
        snprintf(name, sizeof name, "%s: S=0, q=20: last 8 positions", mode);
        check_visible(pool, s, 20, p0, 8, !absolute, name);
        int64_t p1[1] = { 0 };
        snprintf(name, sizeof name, "%s: S=0, q=0: itself only", mode);
        check_visible(pool, s, 0, p1, 1, !absolute, name);
        is_int(mt_kv_slot(pool, s, 20), 4, "S=0: slot of 20 is 20 % 8");
        mt_kv_seq_close(pool, s);
        mt_kv_pool_free(pool);
    }
}

static void test_bad_params(void)
{
    mt_kv_params p = { .policy = MT_KV_WINDOW, .sink = 4, .window = 0,
                       .budget_bytes = 1 << 20, .position_bytes = PB };
    char err[256] = "";
    mt_kv_pool *pool = NULL;
    ok(mt_kv_pool_create(&p, &pool, err, sizeof err) != 0 && !pool,
       "window W=0 refused");
    like(err, "window", "message names the window");
    p.window = 8;
    p.budget_bytes = 10;
    ok(mt_kv_pool_create(&p, &pool, err, sizeof err) != 0, "budget below one block refused");
    like(err, "budget", "message names the budget");
    p.budget_bytes = 1 << 20;
    p.position_bytes = 0;
    ok(mt_kv_pool_create(&p, &pool, err, sizeof err) != 0, "position_bytes 0 refused");
}

int main(void)
{
    test_window_bytes_constant();
    test_full_growth();
    test_exhaustion();
    test_ring_order();
    test_bad_params();
    return tap_done();
}
