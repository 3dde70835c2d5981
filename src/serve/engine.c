/* engine.c: the tick engine behind mt-serve (see engine.h).
 *
 * Life of an input frame: mt_engine_input puts it at the tail of its
 * session's bounded input queue (arrival time, deadline = arrival +
 * deadline_ns). The tick thread steps the head of every session's queue as
 * one batch, then pops it: its real output is queued unless a FILL already
 * answered it. The I/O thread's mt_engine_fill_due sends FILL (silence) for
 * every queued frame past its deadline that no output answered yet, even
 * while a step is computing, exactly as servers that "keep the audio
 * flowing" do; the frame stays queued until the model has consumed it, so
 * `late_ms` keeps telling how far behind the model really is.
 *
 * Full policy: before the batch each session needs mt_kv_reserve(seq, 1).
 * On MT_KV_EXHAUSTED, `preempt` releases the newest session holding blocks
 * (vLLM's recompute preemption) and retries; the released session keeps
 * every input it consumed (its history) and, once blocks are free again,
 * is recomputed with one mt_decoder_prefill of its whole history before it
 * steps. `stall` leaves the session waiting for a later tick.
 *
 * The clock: every time the engine uses comes from eng_now(e) (the options'
 * clock, CLOCK_MONOTONIC by default), so a test drives deadlines, FILL and
 * catch-up with a clock of its own (tests/unit/test_engine.c).
 *
 * A session's life. The state (sess.state) and the function that moves it:
 *
 *     mt_engine_session_new
 *              |
 *              v
 *         S_PENDING --------- mt_engine_reject, mt_engine_fail ---------+
 *              |                                                         |
 *              | mt_engine_admit (KV sequence opened, ACCEPT queued)     |
 *              v                                                         v
 *         S_ACTIVE ---------- maybe_end (input ended and every ------> S_ENDED
 *              |              queued input answered: END queued)         |
 *              |  ----------- mt_engine_fail, deliver_row (step failed, |
 *              |              no memory for history: ERROR queued) ---->|
 *              |  ----------- mt_engine_shed (inputs left: misses, ---->|
 *              |              END queued)                                |
 *              |                                                         |
 *              +--- mt_engine_close ----------+--------------------------+
 *                                             |
 *                     not in a batch: freed at once (remove_sess)
 *                     in a batch (in_batch):  S_GONE, freed by batch_deliver
 *
 * S_ENDED sends what is queued (END, REJECT or ERROR last); the server
 * closes the connection once it is out and calls mt_engine_close. S_GONE is
 * invisible to every call (find() skips it): only the tick thread, which is
 * stepping it, still holds it.
 *
 * Flags beside the state, each orthogonal to it:
 *   in_batch     set by batch_gather, cleared by batch_deliver. The step
 *                runs without the lock and reads the session's KV sequence
 *                and history, so mt_engine_close makes it S_GONE instead of
 *                freeing it, maybe_end waits for it, and make_room never
 *                preempts it.
 *   input_ended  set by mt_engine_input_end and mt_engine_drain, in
 *                S_PENDING too (a drained server still admits what it had
 *                promised), so a flag, not a state: S_ACTIVE with it set is
 *                "ending".
 *   kv->released set by make_room (mt_kv_release: preempted), cleared by
 *                kv.c when mt_kv_reserve gives the blocks back; that round
 *                the batch row recomputes the history (mt_batch.recompute).
 *   overflow     set by push_frame when the output queue is full: the
 *                client does not read; the server disconnects it.
 * Folded into the state or the batch (they were flags): `dead` is S_GONE;
 * `inflight` and `in_round` were the same fact, in_batch; the per-round
 * `prefill` belongs to the batch row; the queue `epoch` is gone, because
 * every throw-away of the queue (drop_queue, maybe_end) leaves S_ACTIVE for
 * good, so batch_deliver's state check says what the epoch said.
 *
 * The one-mutex rule. The engine has one mutex, e->mu, taken by the I/O
 * thread (every mt_engine_* call but the tick) and the tick thread (around
 * a round's gather and deliver, and the tick record). It guards every field
 * of the engine and of its sessions, except what the tick thread alone
 * owns (e->batch, e->lat and nlat, e->round_fixed_ns, e->tick_lines) and
 * what the I/O thread alone owns (e->fill_lines). Each public call takes it
 * once on entry and lets it go before returning; it is not recursive, so no
 * function that runs under it calls a public mt_engine_* function. It is
 * never held while the decoder computes (batch_step: a session in the
 * batch, in_batch, keeps its KV sequence, history and speech state for the
 * step, which is why nothing frees or preempts it meanwhile), nor around a
 * callback (opts.line, opts.tick_rec: the lines are collected under the
 * lock and written after). The functions in engine_int.h expect it held,
 * but for eng_run_round and eng_sb_flush; a second lock (per session, per
 * queue) would buy nothing at one tick thread and one I/O thread and would
 * bring lock order into every call.
 *
 * The files, one job each; calls go down this list, never up (tools/
 * layering.sh rejects two objects of a folder that call each other):
 *   engine_tick.c     the tick: first round, catch-up rounds, tick record
 *   engine_batch.c    one round: gather, step (no lock), deliver
 *   engine_queue.c    a session's input ring (mt_engine_input)
 *   engine_fill.c     the FILL deadlines (mt_engine_fill_due)
 *   engine_preempt.c  room in the KV pool: reserve, preempt, history
 *   engine_answer.c   the answer to an input: output, FILL, TEXT, lines
 *   engine_session.c  a session's life: new, admit, reject, fail, shed,
 *                     end, close; drain and the counts
 *   engine.c          this file: the engine (create, free, format, the
 *                     session bound) and the published capacity
 *   engine_outq.c     output frames, the ready list, mt_engine_take*
 *   engine_table.c    sessions by id, their states, removal
 * engine_int.h declares what they share, with an eng_ prefix (the drawing
 * above names them without it: maybe_end is eng_maybe_end).
 */
#define _GNU_SOURCE
#include "util/errmsg.h"
#include "serve/engine_int.h"
#include "util/clock.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t monotonic_clock(void *ctx)
{
    (void)ctx;
    return mt_clock_ns();
}

/* The engine's time: every timestamp and deadline comes from here. */

void mt_engine_opts_default(mt_engine_opts *o)
{
    memset(o, 0, sizeof *o);
    o->frame_ns = 80000000ull;
    o->deadline_ns = 2 * o->frame_ns;
    o->fill = 0;
    o->on_full = MT_ONFULL_PREEMPT;
    o->max_sessions = 64;
    o->in_queue = 256;
    o->out_queue = 64;
    o->drop_when_full = 1;
    o->catch_up = 1;
}

/* ---- create / free -------------------------------------------------------- */

int mt_engine_create(const mt_engine_opts *o, mt_decoder *dec, uint64_t t0,
                     mt_engine **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o || !dec || o->frame_ns == 0 || o->max_sessions < 1 ||
        o->in_queue < 1 || o->out_queue < 1) {
        mt_set_err(err, errlen, "engine: bad options");
        return -1;
    }
    const mt_model *m = mt_decoder_model(dec);
    if (o->speech && mt_kv_pool_params(mt_decoder_pool(dec))->policy == MT_KV_FULL &&
        o->on_full == MT_ONFULL_PREEMPT) {
        mt_set_err(err, errlen, "engine: a speech model cannot be preempted (its codec "
                 "state cannot be recomputed): use the window policy or on-full stall");
        return -1;
    }
    if (!m || (!o->speech && (!m->cfg.has_audio || m->cfg.frame_samples < 1))) {
        mt_set_err(err, errlen, "engine: the model has no audio adapter "
                 "(mt-serve serves PCM frame streams)");
        return -1;
    }
    mt_engine *e = mt_calloc_or_err(1, sizeof *e, err, errlen, "engine");
    if (!e)
        return -1;
    e->o = *o;
    e->dec = dec;
    e->pool = mt_decoder_pool(dec);
    e->cfg = m->cfg;
    if (o->speech) {
        e->cfg.sample_rate = mt_speech_sample_rate(o->speech);
        e->cfg.frame_samples = mt_speech_frame_samples(o->speech);
    }
    e->fs = e->cfg.frame_samples;
    e->text_only = o->speech && !mt_speech_audio_out(o->speech);
    e->t0 = t0;
    e->clock = o->clock ? o->clock : monotonic_clock;
    e->clock_ctx = o->clock ? o->clock_ctx : NULL;
    e->next_id = 1;
    e->ctl_limit = -1;
    pthread_mutex_init(&e->mu, NULL);
    size_t B = (size_t)o->max_sessions;
    mt_batch *b = &e->batch;
    b->sess = calloc(B, sizeof *b->sess);
    b->recompute = calloc(B, sizeof *b->recompute);
    b->seqs = calloc(B, sizeof *b->seqs);
    b->pcm_in = calloc(B * (size_t)e->fs, sizeof(int16_t));
    b->pcm_out = calloc(B * (size_t)e->fs, sizeof(int16_t));
    b->sp = calloc(B, sizeof *b->sp);
    b->text = calloc(B, sizeof *b->text);
    e->latcap = (int)B * MAX_ROUNDS;
    e->lat = calloc((size_t)e->latcap, sizeof(double));
    e->silence = calloc((size_t)e->fs, sizeof(int16_t));
    if (!b->sess || !b->recompute || !b->seqs || !b->pcm_in || !b->pcm_out ||
        !b->sp || !b->text || !e->lat || !e->silence) {
        mt_engine_free(e);
        mt_set_err(err, errlen, "engine: out of memory");
        return -1;
    }
    *out = e;
    return 0;
}

void mt_engine_free(mt_engine *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->ns; i++)
        eng_free_sess(e, e->s[i]);
    free(e->s);
    free(e->ht);
    free(e->ready);
    free(e->fq);
    free(e->batch.sess);
    free(e->batch.recompute);
    free(e->batch.seqs);
    free(e->batch.pcm_in);
    free(e->batch.pcm_out);
    free(e->batch.sp);
    free(e->batch.text);
    free(e->lat);
    free(e->silence);
    free(e->tick_lines.p);
    free(e->fill_lines.p);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

void mt_engine_format(const mt_engine *e, mt_hello *h)
{
    memset(h, 0, sizeof *h);
    h->sample_rate = (uint32_t)e->cfg.sample_rate;
    h->frame_samples = (uint32_t)e->cfg.frame_samples;
    h->channels = 1;
    h->encoding = MT_ENC_PCM_S16LE;
    snprintf(h->model, sizeof h->model, "%s", e->cfg.name);
}

size_t mt_engine_session_bound(const mt_engine *e)
{
    const mt_kv_params *p = mt_kv_pool_params(e->pool);
    return p->policy == MT_KV_WINDOW ? mt_kv_bound_bytes(p) : 0;
}

/* ---- the published capacity (issue 23) ------------------------------------ */

void mt_engine_set_limit(mt_engine *e, int limit)
{
    pthread_mutex_lock(&e->mu);
    e->ctl_limit = limit;
    pthread_mutex_unlock(&e->mu);
}

/* Sessions held now plus those the pool can still hold for their whole
 * bound: what --kv window lets this instance take. Unbounded (full)
 * sessions have no such figure: INT_MAX. Under the lock. */
static int kv_capacity(const mt_engine *e, int active)
{
    size_t bound = mt_engine_session_bound(e);
    if (bound == 0)
        return INT_MAX;
    size_t room = mt_kv_free_bytes(e->pool) / bound;
    return room > (size_t)(INT_MAX - active) ? INT_MAX : active + (int)room;
}

int mt_engine_published_limit(mt_engine *e, char *failed, size_t failedlen)
{
    pthread_mutex_lock(&e->mu);
    int active = e->nstate[S_ACTIVE];
    int n = e->o.max_sessions;
    int kv = kv_capacity(e, active);
    if (kv < n)
        n = kv;
    if (e->ctl_limit >= 0 && e->ctl_limit < n)
        n = e->ctl_limit;
    if (failed && failedlen)
        snprintf(failed, failedlen, "%s", e->fail_msg);
    pthread_mutex_unlock(&e->mu);
    return n < 0 ? 0 : n;
}
