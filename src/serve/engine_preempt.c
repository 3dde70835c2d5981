/* engine_preempt.c: room in the KV pool for a session's next position
 * (the full policy, engine.c's top comment): reserve, preempt the newest
 * session holding blocks (vLLM's recompute preemption) or wait; and the
 * history of consumed inputs a preempted session is recomputed from.
 * Tick thread, under e->mu; calls none of the engine's other files.
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- room in the KV pool (tick thread, under the lock) -------------------- */

/* The newest session holding KV blocks and not in this round's batch: the
 * preemption victim (may be s itself). */
static sess *victim(mt_engine *e)
{
    sess *v = NULL;
    for (int i = 0; i < e->ns; i++) {
        sess *c = e->s[i];
        if (c->state == S_GONE || !c->kv || c->kv->nblocks == 0 || c->in_batch)
            continue;
        if (!v || c->order > v->order)
            v = c;
    }
    return v;
}

/* Makes room for s's next position. 0 ready (*recompute says whether its
 * history must be recomputed first), -1 waits this tick. */
int eng_make_room(mt_engine *e, sess *s, int *recompute)
{
    const mt_kv_params *p = mt_kv_pool_params(e->pool);
    *recompute = 0;
    if (s->kv->released) {
        /* preempted earlier: the whole history plus this position */
        if (mt_kv_reserve(e->pool, s->kv, s->hist_n + 1) != 0)
            return -1;
        *recompute = s->hist_n > 0;
        return 0;
    }
    for (;;) {
        int r = mt_kv_reserve(e->pool, s->kv, 1);
        if (r == 0)
            return 0;
        if (r != MT_KV_EXHAUSTED || p->policy != MT_KV_FULL ||
            e->o.on_full != MT_ONFULL_PREEMPT)
            return -1;
        sess *v = victim(e);
        if (!v || v->order <= s->order) {
            /* s is the newest contender: it yields (its own blocks go
             * back if it holds any) and waits, as a waiting request does */
            if (s->kv->nblocks > 0) {
                mt_kv_release(e->pool, s->kv);
                e->c.preempted++;
            }
            return -1;
        }
        mt_kv_release(e->pool, v->kv);
        e->c.preempted++;
    }
}

int eng_append_hist(mt_engine *e, sess *s, const int16_t *pcm)
{
    if (s->hist_n == s->hist_cap) {
        int64_t nc = s->hist_cap ? s->hist_cap * 2 : 64;
        int16_t *h = realloc(s->hist, (size_t)nc * (size_t)e->fs * sizeof(int16_t));
        if (!h)
            return -1;
        s->hist = h;
        s->hist_cap = nc;
    }
    memcpy(s->hist + (size_t)s->hist_n * (size_t)e->fs, pcm, (size_t)e->fs * 2);
    s->hist_n++;
    return 0;
}

