/* engine_table.c: the engine's sessions by id (an open-addressing hash
 * table), their state counts, and removing a session for good. The lowest
 * of the engine's files: it calls none of the others. Every function here
 * runs under e->mu (engine.c's top comment: the one-mutex rule).
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"

#include <stdlib.h>
#include <string.h>

static size_t ht_home(const mt_engine *e, uint32_t id)
{
    return (size_t)(id * 2654435761u) & (e->htcap - 1);
}

/* The session of id (S_GONE ones too: the table holds every session of
 * e->s), or NULL. */
sess *eng_ht_get(const mt_engine *e, uint32_t id)
{
    if (!e->htcap || !id)
        return NULL;
    for (size_t i = ht_home(e, id);; i = (i + 1) & (e->htcap - 1)) {
        if (e->ht[i].id == id)
            return e->ht[i].s;
        if (e->ht[i].id == 0)
            return NULL;
    }
}

static void ht_put_slot(struct ht_slot *ht, size_t cap, uint32_t id, sess *s)
{
    size_t i = (size_t)(id * 2654435761u) & (cap - 1);
    while (ht[i].id)
        i = (i + 1) & (cap - 1);
    ht[i].id = id;
    ht[i].s = s;
}

/* Adds s under its id, growing the table to keep it at most half full.
 * 0, or -1 out of memory (nothing changed). */
int eng_ht_put(mt_engine *e, sess *s)
{
    if (2 * ((size_t)e->ns + 1) > e->htcap) {
        size_t nc = e->htcap ? e->htcap * 2 : 64;
        while (2 * ((size_t)e->ns + 1) > nc)
            nc *= 2;
        struct ht_slot *n = calloc(nc, sizeof *n);
        if (!n)
            return -1;
        for (size_t i = 0; i < e->htcap; i++)
            if (e->ht[i].id)
                ht_put_slot(n, nc, e->ht[i].id, e->ht[i].s);
        free(e->ht);
        e->ht = n;
        e->htcap = nc;
    }
    ht_put_slot(e->ht, e->htcap, s->id, s);
    return 0;
}

/* Removes id; the slots after it in its run move back (no tombstones). */
static void ht_del(mt_engine *e, uint32_t id)
{
    if (!e->htcap)
        return;
    size_t m = e->htcap - 1, i = ht_home(e, id);
    while (e->ht[i].id != id) {
        if (e->ht[i].id == 0)
            return;
        i = (i + 1) & m;
    }
    for (size_t j = (i + 1) & m; e->ht[j].id; j = (j + 1) & m) {
        size_t h = ht_home(e, e->ht[j].id);
        /* j's entry may fill the hole at i unless its home lies in (i, j] */
        if (((j - h) & m) >= ((j - i) & m)) {
            e->ht[i] = e->ht[j];
            i = j;
        }
    }
    e->ht[i].id = 0;
    e->ht[i].s = NULL;
}

/* A live session (never S_GONE) by id, in O(1). */
sess *eng_find(mt_engine *e, uint32_t id)
{
    sess *s = eng_ht_get(e, id);
    return s && s->state != S_GONE ? s : NULL;
}

/* Moves s to state st, keeping e->nstate (the counts the tick line, the
 * published limit and admission read without walking the sessions). */
void eng_set_state(mt_engine *e, sess *s, int st)
{
    e->nstate[s->state]--;
    e->nstate[st]++;
    s->state = st;
}

void eng_free_sess(mt_engine *e, sess *s)
{
    if (s->kv)
        mt_kv_seq_close(e->pool, s->kv);
    free(s->q);
    free(s->qpcm);
    free(s->hist);
    free(s->ob);
    mt_speech_sess_close(s->sp);
    free(s);
}

void eng_remove_sess(mt_engine *e, sess *s)
{
    e->nstate[s->state]--;
    ht_del(e, s->id);
    if (s->ready)
        for (int i = 0; i < e->nready; i++)
            if (e->ready[i] == s->id) {
                e->ready[i] = e->ready[--e->nready];
                break;
            }
    for (int i = 0; i < e->ns; i++)
        if (e->s[i] == s) {
            memmove(e->s + i, e->s + i + 1, (size_t)(e->ns - i - 1) * sizeof *e->s);
            e->ns--;
            break;
        }
    eng_free_sess(e, s);
}

