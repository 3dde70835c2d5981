/* engine_batch.c: one round of the tick: gather the head input of every
 * ready session into the batch (under e->mu), step it (without the lock),
 * deliver the answers and pop the inputs (under e->mu again). Calls
 * engine_preempt.c, engine_answer.c, engine_session.c, engine_table.c.
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"

#include <string.h>

/* ---- one round: gather, step, deliver (tick thread) ----------------------- */

/* Takes the head input of every active session into the batch (under the
 * lock): round 0 every session with an input waiting, later rounds only
 * sessions whose head arrived by t_tick; at most max_rows; a session that
 * gets no room in the KV pool waits. Returns the rows. */
static int batch_gather(mt_engine *e, mt_batch *b, int round, int max_rows,
                        uint64_t t_tick)
{
    b->n = 0;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns && b->n < max_rows; i++) {
        sess *s = e->s[i];
        if (s->state != S_ACTIVE || s->qlen == 0)
            continue;
        if (round > 0 && s->q[s->qhead].t_arrive > t_tick)
            continue;
        int recompute;
        if (eng_make_room(e, s, &recompute) != 0)
            continue;
        s->in_batch = 1;
        b->sess[b->n] = s;
        b->recompute[b->n] = recompute;
        b->seqs[b->n] = s->kv;
        b->sp[b->n] = s->sp;
        memcpy(b->pcm_in + (size_t)b->n * (size_t)e->fs,
               s->qpcm + (size_t)s->qhead * (size_t)e->fs, (size_t)e->fs * 2);
        b->n++;
    }
    pthread_mutex_unlock(&e->mu);
    return b->n;
}

/* Computes the batch without the lock: the recompute prefills of preempted
 * rows first, then one step of every row. Stamps t_start, t_step, t_ready.
 * 0, or -1 with err. */
static int batch_step(mt_engine *e, mt_batch *b, char *err, size_t errlen)
{
    int rc = 0;
    b->t_start = eng_now(e);
    for (int r = 0; r < b->n && rc == 0; r++) {
        if (!b->recompute[r])
            continue;
        sess *s = b->sess[r];
        mt_step_io io = {0};
        io.pcm_in = s->hist;
        if (mt_decoder_prefill(e->dec, s->kv, (int)s->hist_n, &io, err, errlen) != 0)
            rc = -1;
    }
    b->t_step = eng_now(e);
    if (rc == 0 && e->o.speech) {
        rc = mt_speech_step(e->o.speech, b->n, b->seqs, b->sp, b->pcm_in, b->pcm_out,
                            b->text, err, errlen);
    } else if (rc == 0) {
        mt_step_io io = {0};
        io.pcm_in = b->pcm_in;
        io.pcm_out = b->pcm_out;
        rc = mt_decoder_step(e->dec, b->n, b->seqs, &io, err, errlen);
    }
    b->t_ready = eng_now(e);
    return rc;
}

/* Delivers row r of a stepped batch (under the lock): the answer to the
 * session's head input (a real output; FILL if it came past the deadline
 * in FILL mode; nothing if a FILL already answered it), then pops it. */
static void deliver_row(mt_engine *e, mt_batch *b, int r, int step_rc)
{
    sess *s = b->sess[r];
    s->in_batch = 0;
    if (s->state == S_GONE) {
        eng_remove_sess(e, s);
        return;
    }
    if (s->state != S_ACTIVE)
        return;                 /* failed or closed meanwhile: queue gone */
    if (step_rc != 0) {
        eng_end_with_error(e, s, "server: decoder step failed");
        return;
    }
    const mt_kv_params *kp = mt_kv_pool_params(e->pool);
    int keep_hist = kp->policy == MT_KV_FULL && e->o.on_full == MT_ONFULL_PREEMPT;
    const int16_t *in = s->qpcm + (size_t)s->qhead * (size_t)e->fs;
    if (keep_hist && eng_append_hist(e, s, in) != 0) {
        /* cannot keep history: preemption would lose it; end cleanly */
        eng_end_with_error(e, s, "server out of memory");
        return;
    }
    in_entry *q = &s->q[s->qhead];
    if (e->nlat < e->latcap)
        e->lat[e->nlat++] = (double)(b->t_ready - q->t_arrive) / 1e6;
    /* FILL mode: a real output not ready by the deadline is never sent; the
     * FILL goes now (the I/O thread was about to) */
    if (!q->answered && e->o.fill && b->t_ready > q->deadline)
        eng_send_fill(e, s, q, eng_now(e), &e->tick_lines);
    int32_t text = e->o.speech ? b->text[r] : -1;
    const float *prs = NULL;
    int nprs = s->want_prs && e->o.speech && !q->answered ? mt_speech_prs(e->o.speech, &prs)
                                                          : 0;
    if (nprs > 0)             /* Kyutai's Step prs, before the answer */
        eng_send_prs(e, s, q, prs + (size_t)r * (size_t)nprs, nprs);
    if (!q->answered)
        eng_send_output(e, s, q, b->pcm_out + (size_t)r * (size_t)e->fs, text,
                    b->t_start, b->t_ready, &e->tick_lines);
    /* beside the audio; a text-only answer a FILL made is not sent twice */
    if (e->o.speech && !e->text_only && text >= 0)
        eng_send_text(e, s, q, b->text[r]);
    s->qhead = (s->qhead + 1) % s->qcap;
    /* an empty ring starts again at its first slot: a session that keeps
     * up (a frame in, a frame out each tick) touches one slot, not the
     * whole ring in turn, and 2,000 sessions' input stays in cache */
    if (--s->qlen == 0)
        s->qhead = 0;
    eng_maybe_end(e, s);
}

static void batch_deliver(mt_engine *e, mt_batch *b, int step_rc)
{
    pthread_mutex_lock(&e->mu);
    for (int r = 0; r < b->n; r++)
        deliver_row(e, b, r, step_rc);
    pthread_mutex_unlock(&e->mu);
}

/* One round: gather, step, deliver. Adds the compute time (and that of the
 * step alone) in ms. Returns the rows stepped, or -1 on a decoder error
 * (the rows' sessions are failed). */
int eng_run_round(mt_engine *e, int round, int max_rows, uint64_t t_tick,
                     double *comp_ms, double *step_only_ms, char *err,
                     size_t errlen)
{
    mt_batch *b = &e->batch;
    if (batch_gather(e, b, round, max_rows, t_tick) == 0)
        return 0;
    int rc = batch_step(e, b, err, errlen);
    *comp_ms += (double)(b->t_ready - b->t_start) / 1e6;
    *step_only_ms += (double)(b->t_ready - b->t_step) / 1e6;
    batch_deliver(e, b, rc);
    return rc == 0 ? b->n : -1;
}

