/* engine_queue.c: a session's bounded input queue: mt_engine_input checks
 * a frame and puts it at the tail of its session's ring (with its FILL
 * deadline when opts.fill), growing the ring on demand up to in_queue;
 * mt_engine_in_space tells the I/O thread how much room is left. Calls
 * engine_fill.c and engine_table.c.
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void grow_queue(mt_engine *e, sess *s);

int mt_engine_input(mt_engine *e, uint32_t id, const mt_frame *f,
                    uint64_t t_arrive, char *why, size_t whylen)
{
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    if (!s || s->state != S_ACTIVE || s->input_ended) {
        snprintf(why, whylen, "%s", !s ? "no such session" :
                 s->state == S_PENDING ? "AUDIO before ACCEPT" :
                 "AUDIO after END");
        rc = -1;
        goto out;
    }
    if (f->type != MT_FRAME_AUDIO) {
        snprintf(why, whylen, "%s frames are not served here (PCM AUDIO only)",
                 mt_frame_type_name(f->type));
        rc = -1;
        goto out;
    }
    if (f->length != (uint32_t)e->fs * 2) {
        snprintf(why, whylen, "AUDIO payload of %u bytes; this format needs %d "
                 "(%d mono s16le samples)", f->length, e->fs * 2, e->fs);
        rc = -1;
        goto out;
    }
    e->c.in++;
    if (s->qlen >= s->qcap && s->qcap < e->o.in_queue)
        grow_queue(e, s);
    if (s->qlen >= s->qcap || (e->o.fill && eng_fill_room(e) != 0)) {
        e->c.miss++;          /* dropped: a counted miss, never silent */
        rc = 1;
        goto out;
    }
    if (e->o.fill)
        eng_fill_push(e, s->id, s->n_in, t_arrive + e->o.deadline_ns);
    s->n_in++;
    int idx = (s->qhead + s->qlen) % s->qcap;
    in_entry *q = &s->q[idx];
    q->seq = f->seq;
    q->t_send = f->t_send;
    q->t_arrive = t_arrive;
    q->deadline = t_arrive + e->o.deadline_ns;
    q->answered = 0;
    memcpy(s->qpcm + (size_t)idx * (size_t)e->fs, f->payload, (size_t)e->fs * 2);
    s->qlen++;
out:
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* Doubles s's input ring (up to in_queue), oldest entry first at 0, under
 * e->mu. A session's ring starts at QUEUE_START entries: a client keeping
 * pace needs one or two, and a ring of in_queue (256 by default, 1 MB of
 * PCM) cycled through costs a page fault per 4 KB on its first pass and
 * the whole megabyte for good: at hundreds of sessions that was most of
 * the I/O thread's time and memory. Keeps the old ring when out of memory
 * (the frame is then a counted miss). */
static void grow_queue(mt_engine *e, sess *s)
{
    int nc = s->qcap * 2 < e->o.in_queue ? s->qcap * 2 : e->o.in_queue;
    size_t fs = (size_t)e->fs;
    in_entry *q = calloc((size_t)nc, sizeof *q);
    int16_t *pcm = malloc((size_t)nc * fs * sizeof(int16_t));
    if (!q || !pcm) {
        free(q);
        free(pcm);
        return;
    }
    for (int j = 0; j < s->qlen; j++) {
        int idx = (s->qhead + j) % s->qcap;
        q[j] = s->q[idx];
        memcpy(pcm + (size_t)j * fs, s->qpcm + (size_t)idx * fs, fs * sizeof(int16_t));
    }
    free(s->q);
    free(s->qpcm);
    s->q = q;
    s->qpcm = pcm;
    s->qhead = 0;
    s->qcap = nc;
}

int mt_engine_in_space(mt_engine *e, uint32_t id)
{
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    int n = 0;
    if (s && s->state == S_ACTIVE)
        n = e->o.in_queue - s->qlen;
    pthread_mutex_unlock(&e->mu);
    return n;
}

