/* kv.c: the KV block pool and the two cache policies of kv.h.
 *
 * Bookkeeping only: block ids, block tables, slots, the visible list. The
 * memory behind a block id belongs to the backend. The pool is a stack of
 * free block ids; a sequence's block table maps slot s to block
 * blocks[s / MT_KV_BLOCK], row s % MT_KV_BLOCK inside it.
 *
 * Not thread-safe: the engine opens, reserves and closes from one thread;
 * during a step the backend only reads (mt_kv_slot, mt_kv_visible), which
 * any number of threads may do at once.
 */
#include "util/errmsg.h"
#include "decode/kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_kv_pool {
    mt_kv_params p;
    size_t       block_bytes;  /* MT_KV_BLOCK * position_bytes */
    int          nblocks;      /* total */
    int32_t     *free_ids;     /* [nblocks] stack of free block ids */
    int          nfree;
    int          next_seq_id;
};

static int64_t blocks_for(int64_t positions)
{
    return (positions + MT_KV_BLOCK - 1) / MT_KV_BLOCK;
}

size_t mt_kv_bound_bytes(const mt_kv_params *p)
{
    if (p->policy != MT_KV_WINDOW)
        return 0;
    return (size_t)blocks_for((int64_t)p->sink + p->window) * MT_KV_BLOCK *
           p->position_bytes;
}

int mt_kv_pool_create(const mt_kv_params *p, mt_kv_pool **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (p->policy != MT_KV_WINDOW && p->policy != MT_KV_FULL) {
        mt_set_err(err, errlen, "kv: unknown policy %d", (int)p->policy);
        return -1;
    }
    if (p->rope != MT_ROPE_CACHE && p->rope != MT_ROPE_ABSOLUTE) {
        mt_set_err(err, errlen, "kv: unknown rope mode %d", (int)p->rope);
        return -1;
    }
    if (p->policy == MT_KV_WINDOW &&
        (p->sink < 0 || p->window < 1 || p->sink > MT_KV_SINK_MAX ||
         p->window > MT_KV_WINDOW_MAX)) {
        mt_set_err(err, errlen,
                 "kv: window policy needs sink >= 0 and window >= 1 (got S=%d W=%d)",
                 p->sink, p->window);
        return -1;
    }
    if (p->position_bytes == 0) {
        mt_set_err(err, errlen, "kv: position_bytes is 0 (set by the backend)");
        return -1;
    }
    size_t block_bytes = p->position_bytes * MT_KV_BLOCK;
    size_t n = p->budget_bytes / block_bytes;
    if (n > (size_t)1 << 30)
        n = (size_t)1 << 30;
    if (n == 0) {
        mt_set_err(err, errlen,
                 "kv: budget of %zu bytes holds no block of %zu bytes",
                 p->budget_bytes, block_bytes);
        return -1;
    }
    mt_kv_pool *pool = calloc(1, sizeof *pool);
    if (!pool || !(pool->free_ids = malloc(n * sizeof *pool->free_ids))) {
        free(pool);
        mt_set_err(err, errlen, "kv: out of memory for %zu block ids", n);
        return -1;
    }
    pool->p = *p;
    pool->block_bytes = block_bytes;
    pool->nblocks = (int)n;
    /* Stack with block 0 on top, so ids are handed out in ascending order. */
    for (int i = 0; i < pool->nblocks; i++)
        pool->free_ids[i] = pool->nblocks - 1 - i;
    pool->nfree = pool->nblocks;
    *out = pool;
    return 0;
}

void mt_kv_pool_free(mt_kv_pool *pool)
{
    if (!pool)
        return;
    free(pool->free_ids);
    free(pool);
}

const mt_kv_params *mt_kv_pool_params(const mt_kv_pool *pool)
{
    return &pool->p;
}

int mt_kv_pool_blocks(const mt_kv_pool *pool)
{
    return pool->nblocks;
}

/* Takes n more blocks onto s's table, all or nothing. */
static int take_blocks(mt_kv_pool *pool, mt_kv_seq *s, int64_t n)
{
    if (n <= 0)
        return 0;
    if (n > pool->nfree)
        return MT_KV_EXHAUSTED;
    if (s->nblocks + n > s->cap) {
        int64_t cap = s->cap ? s->cap : 4;
        while (cap < s->nblocks + n)
            cap *= 2;
        int32_t *b = realloc(s->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return MT_KV_EXHAUSTED; /* no host memory for the table */
        s->blocks = b;
        s->cap = (int)cap;
    }
    for (int64_t i = 0; i < n; i++)
        s->blocks[s->nblocks++] = pool->free_ids[--pool->nfree];
    return 0;
}

static void drop_blocks(mt_kv_pool *pool, mt_kv_seq *s)
{
    /* Back in reverse, so a release then reopen gets the same ids. */
    while (s->nblocks > 0)
        pool->free_ids[pool->nfree++] = s->blocks[--s->nblocks];
}

static int64_t window_blocks(const mt_kv_pool *pool)
{
    return blocks_for((int64_t)pool->p.sink + pool->p.window);
}

int mt_kv_seq_open(mt_kv_pool *pool, mt_kv_seq **out)
{
    *out = NULL;
    mt_kv_seq *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    if (pool->p.policy == MT_KV_WINDOW) {
        int rc = take_blocks(pool, s, window_blocks(pool));
        if (rc) {
            free(s->blocks);
            free(s);
            return rc;
        }
    }
    s->id = pool->next_seq_id++;
    *out = s;
    return 0;
}

void mt_kv_seq_close(mt_kv_pool *pool, mt_kv_seq *s)
{
    if (!s)
        return;
    drop_blocks(pool, s);
    free(s->blocks);
    free(s);
}

void mt_kv_seq_close_all(mt_kv_pool *pool, mt_kv_seq **s, size_t n)
{
    for (size_t i = 0; s && i < n; i++) {
        mt_kv_seq_close(pool, s[i]);
        s[i] = NULL;
    }
}

int mt_kv_reserve(mt_kv_pool *pool, mt_kv_seq *s, int64_t n)
{
    if (n < 0)
        return -1;
    int64_t need;
    if (pool->p.policy == MT_KV_WINDOW)
        need = window_blocks(pool) - s->nblocks; /* 0 unless released */
    else
        need = blocks_for(s->len + n) - s->nblocks;
    int rc = take_blocks(pool, s, need);
    if (rc == 0 && s->nblocks > 0)
        s->released = 0;
    return rc;
}

void mt_kv_release(mt_kv_pool *pool, mt_kv_seq *s)
{
    drop_blocks(pool, s);
    s->len = 0;
    s->released = 1;
}

int64_t mt_kv_slot(const mt_kv_pool *pool, const mt_kv_seq *s, int64_t pos)
{
    (void)s;
    if (pool->p.policy == MT_KV_FULL || pos < pool->p.sink)
        return pos;
    return pool->p.sink + (pos - pool->p.sink) % pool->p.window;
}

int mt_kv_visible_ex(const mt_kv_pool *pool, const mt_kv_seq *s, int64_t q,
                     int64_t *slot, int64_t *rope_pos, int64_t *abs_pos,
                     int cap, int64_t *q_rope)
{
    (void)s;
    int n = 0;
    if (pool->p.policy == MT_KV_FULL) {
        /* Ordinary causal attention: every position 0..q, rotary = position. */
        for (int64_t p = 0; p <= q && n < cap; p++, n++) {
            slot[n] = p;
            rope_pos[n] = p;
            if (abs_pos)
                abs_pos[n] = p;
        }
        *q_rope = q;
        return n;
    }
    const int64_t S = pool->p.sink, W = pool->p.window;
    const int absolute = pool->p.rope == MT_ROPE_ABSOLUTE;
    /* Sinks 0..min(S, q+1)-1, then the ring's kept positions oldest first. */
    int64_t sink_end = q + 1 < S ? q + 1 : S;
    for (int64_t p = 0; p < sink_end && n < cap; p++, n++) {
        slot[n] = p;
        rope_pos[n] = absolute ? p : n;
        if (abs_pos)
            abs_pos[n] = p;
    }
    int64_t ring_start = q + 1 - W > S ? q + 1 - W : S;
    for (int64_t p = ring_start; p <= q && n < cap; p++, n++) {
        slot[n] = S + (p - S) % W;
        rope_pos[n] = absolute ? p : n;
        if (abs_pos)
            abs_pos[n] = p;
    }
    *q_rope = absolute ? q : (n > 0 ? n - 1 : 0);
    return n;
}

int mt_kv_visible(const mt_kv_pool *pool, const mt_kv_seq *s, int64_t q,
                  int64_t *slot, int64_t *rope_pos, int cap, int64_t *q_rope)
{
    return mt_kv_visible_ex(pool, s, q, slot, rope_pos, NULL, cap, q_rope);
}

size_t mt_kv_seq_bytes(const mt_kv_pool *pool, const mt_kv_seq *s)
{
    return (size_t)s->nblocks * pool->block_bytes;
}

size_t mt_kv_used_bytes(const mt_kv_pool *pool)
{
    return (size_t)(pool->nblocks - pool->nfree) * pool->block_bytes;
}

size_t mt_kv_free_bytes(const mt_kv_pool *pool)
{
    return (size_t)pool->nfree * pool->block_bytes;
}

int64_t mt_kv_visible_count(const mt_kv_pool *pool, int64_t q)
{
    if (q < 0)
        return 0;
    if (pool->p.policy == MT_KV_FULL)
        return q + 1;
    int64_t S = pool->p.sink, W = pool->p.window;
    int64_t sinks = q + 1 < S ? q + 1 : S;
    int64_t ring = q + 1 - S;
    if (ring < 0)
        ring = 0;
    if (ring > W)
        ring = W;
    return sinks + ring;
}

int mt_kv_has_room(const mt_kv_pool *pool, const mt_kv_seq *s)
{
    if (pool->p.policy == MT_KV_WINDOW)
        return s->nblocks == window_blocks(pool);
    return (int64_t)s->nblocks * MT_KV_BLOCK > s->len;
}
