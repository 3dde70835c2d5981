/* engine_fill.c: the FILL deadlines (opts.fill): the FIFO of every queued
 * input's deadline in arrival order, and mt_engine_fill_due, the I/O
 * thread's check that answers the inputs past their deadline with FILL
 * while the tick thread may be stepping. Calls engine_answer.c,
 * engine_session.c (maybe_end), engine_table.c and engine_outq.c.
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"

#include <stdlib.h>

/* Room for one more entry in the FILL FIFO (doubling its ring). 0, or -1
 * out of memory. Under the lock. */
int eng_fill_room(mt_engine *e)
{
    if (e->flen < e->fcap)
        return 0;
    size_t nc = e->fcap ? e->fcap * 2 : 256;
    fill_ent *n = malloc(nc * sizeof *n);
    if (!n)
        return -1;
    for (size_t i = 0; i < e->flen; i++)
        n[i] = e->fq[(e->fhead + i) % e->fcap];
    free(e->fq);
    e->fq = n;
    e->fhead = 0;
    e->fcap = nc;
    return 0;
}

/* Appends input n of session id with its deadline (room made by
 * eng_fill_room). Under the lock. */
void eng_fill_push(mt_engine *e, uint32_t id, uint64_t n, uint64_t deadline)
{
    fill_ent *fe = &e->fq[(e->fhead + e->flen) % e->fcap];
    fe->id = id;
    fe->n = n;
    fe->deadline = deadline;
    e->flen++;
}

/* ---- FILL deadlines (I/O thread) ------------------------------------------ */

uint64_t mt_engine_fill_due(mt_engine *e, uint64_t t)
{
    uint64_t next = 0;
    if (!e->o.fill)
        return 0;
    pthread_mutex_lock(&e->mu);
    /* the FIFO's head first: an entry whose input the model consumed, a
     * FILL answered, or whose session ended is dropped whatever its
     * deadline, so the head left is the earliest deadline still open */
    while (e->flen > 0) {
        const fill_ent *fe = &e->fq[e->fhead];
        sess *s = eng_find(e, fe->id);
        in_entry *q = NULL;
        if (s && s->state == S_ACTIVE && fe->n >= s->n_in - (uint64_t)s->qlen) {
            uint64_t k = fe->n - (s->n_in - (uint64_t)s->qlen);   /* from the head */
            q = &s->q[(s->qhead + (int)k) % s->qcap];
            if (q->answered)
                q = NULL;
        }
        if (q && fe->deadline > t) {
            next = fe->deadline;
            break;
        }
        e->fhead = (e->fhead + 1) % e->fcap;
        e->flen--;
        if (q) {
            eng_send_fill(e, s, q, t, &e->fill_lines);
            eng_maybe_end(e, s);
        }
    }
    pthread_mutex_unlock(&e->mu);
    eng_sb_flush(e, &e->fill_lines);
    return next;
}

