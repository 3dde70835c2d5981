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
 * The clock: every time this file uses comes from e->now() (the options'
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
 */
#define _GNU_SOURCE
#include "util/errmsg.h"
#include "util/grow.h"
#include "serve/engine.h"
#include "util/stats.h"
#include "util/clock.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROUNDS 4      /* batch + catch-up rounds in one tick */
#define QUEUE_START 8     /* a session's first input ring (grow_queue) */

enum { S_PENDING = 0, S_ACTIVE = 1, S_ENDED = 2, S_GONE = 3 };

typedef struct in_entry {
    uint32_t seq;
    uint64_t t_send, t_arrive, deadline;
    int      answered;        /* a FILL was sent for it */
} in_entry;

typedef struct sess {
    uint32_t   id;
    int        state;         /* S_*: see the drawing above */
    int        in_batch;      /* a row of the batch being stepped */
    int        input_ended;
    uint64_t   order;         /* admission order: larger is newer */
    mt_kv_seq *kv;
    /* input queue: ring of qcap entries, pcm [qcap, frame_samples]; qcap
     * grows on demand up to in_queue (grow_queue) */
    in_entry  *q;
    int16_t   *qpcm;
    int        qhead, qlen, qcap;
    /* consumed inputs, for recompute after preemption [hist_n, fs] */
    int16_t   *hist;
    int64_t    hist_n, hist_cap;
    /* encoded output bytes: ob[ob_head .. ob_head+ob_len) of ob_cap
     * allocated; ob_cap grows on demand up to ob_max (push_frame), past
     * which the client counts as not reading. ob may be NULL (ob_cap 0)
     * after mt_engine_take_swap gave it away for an empty one */
    uint8_t   *ob;
    size_t     ob_head, ob_len, ob_cap, ob_max;
    int        overflow;
    mt_speech_sess *sp;       /* codec state and LM streams (opts.speech) */
    uint64_t   seed;          /* its sampling seed; 0: opts.speech_seed */
    int        has_smp;       /* smp set by HELLO (mt_engine_set_sampling) */
    mt_kyutai_sampling smp;   /* its sampling; else the speech stage's */
    void      *user;          /* the caller's (mt_engine_session_new_for) */
    int        ready;         /* on e->ready: output came since the caller
                                 last took the list */
    uint64_t   n_in;          /* inputs queued over its life; the queue
                                 head is input n_in - qlen (the FILL FIFO) */
} sess;

/* An input waiting for its FILL deadline: the FIFO holds every input of
 * every session in arrival order, which is deadline order (each deadline
 * is its arrival plus the same deadline_ns), so the I/O thread looks at
 * the inputs due and no others. */
typedef struct fill_ent {
    uint32_t id;              /* the session */
    uint64_t n;               /* its input number (sess.n_in at queueing) */
    uint64_t deadline;
} fill_ent;

/* One round's batch: what the tick thread steps at once, as llama.cpp's
 * llama_batch is what one decode call takes. Gathered under the lock
 * (batch_gather), stepped without it (batch_step), delivered under it
 * (batch_deliver). Buffers sized for max_sessions rows at creation. */
typedef struct mt_batch {
    int         n;           /* rows this round */
    sess      **sess;        /* [max_sessions] the row's session */
    int        *recompute;   /* [max_sessions] 1: prefill its history first
                                (preempted earlier; the vLLM recompute) */
    mt_kv_seq **seqs;        /* [max_sessions] what the decoder steps */
    int16_t    *pcm_in;      /* [max_sessions, fs] each row's queue head */
    int16_t    *pcm_out;     /* [max_sessions, fs] the step's outputs */
    mt_speech_sess **sp;     /* [max_sessions] opts.speech: the rows' state */
    int32_t    *text;        /* [max_sessions] opts.speech: text token, -1 none */
    uint64_t    t_start;     /* clock before the recompute prefills */
    uint64_t    t_step;      /* clock before the batch step */
    uint64_t    t_ready;     /* clock after it: the outputs are ready */
} mt_batch;

/* Figures of one tick record, counted as they happen and reset when the
 * record is written. */
typedef struct tick_counts {
    int64_t in, out, fill, miss, preempted;
    int64_t met_real;    /* real outputs by their deadline */
    int64_t answered;    /* inputs answered (real, FILL, or lost output) */
} tick_counts;

typedef struct strbuf {
    char  *p;
    size_t len, cap;
} strbuf;

struct mt_engine {
    mt_engine_opts  o;
    mt_decoder     *dec;
    mt_kv_pool     *pool;
    mt_config       cfg;
    int             fs;          /* samples per frame */
    uint64_t        t0;
    pthread_mutex_t mu;

    sess          **s;           /* [scap] the sessions, ns of them, in
                                    creation order (the batch's order) */
    int             ns, scap;
    /* id -> session: open addressing, linear probing, [htcap] slots (a
     * power of two, at least twice ns); id 0 marks a free slot. The I/O
     * thread looks a session up once or twice a frame: a look-up that grew
     * with the sessions would make every frame cost more at a thousand */
    struct ht_slot { uint32_t id; sess *s; } *ht;
    size_t          htcap;
    /* ids of the sessions with new output (sess.ready), [scap]: what the
     * caller's next mt_engine_take_ready hands over, so the I/O thread
     * writes to those and never walks every connection after a tick */
    uint32_t       *ready;
    int             nready;
    /* the FILL deadlines (opts.fill): a ring of fcap entries, fhead the
     * oldest, flen of them */
    fill_ent       *fq;
    size_t          fhead, flen, fcap;
    int             nstate[4];    /* sessions of e->s in each S_* state */
    uint32_t        next_id;
    uint64_t        next_order;

    uint64_t      (*clock)(void *ctx);  /* never NULL: see now() */
    void           *clock_ctx;

    mt_batch        batch;              /* tick thread only */
    double         *lat;                /* per-frame latencies of a tick */
    int             nlat, latcap;
    int16_t        *silence;            /* [fs] zeros */
    int             text_only;          /* opts.speech without audio out:
                                           every answer is a TEXT frame */
    strbuf          tick_lines, fill_lines;

    tick_counts     c;                  /* this tick's, under the lock */
    uint64_t        round_fixed_ns;     /* what a round costs whatever its
                                           rows, learnt from the last catch-up
                                           round (tick thread only) */
    /* totals */
    int64_t admitted, rejected, shed;
    /* the published capacity (issue 23), under the lock */
    int     ctl_limit;                  /* last "limit N"; -1: none */
    char    fail_msg[160];              /* a tick failed: "" until then */
};

static uint64_t monotonic_clock(void *ctx)
{
    (void)ctx;
    return mt_clock_ns();
}

/* The engine's time: every timestamp and deadline comes from here. */
static uint64_t now(mt_engine *e)
{
    return e->clock(e->clock_ctx);
}

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

/* ---- small helpers -------------------------------------------------------- */

static void sb_add(strbuf *b, const char *line)
{
    size_t n = strlen(line);
    if (mt_grow(&b->p, &b->cap, b->len + n + 1, 1, 4096) != 0)
        return;                 /* a lost log line, never a crash */
    memcpy(b->p + b->len, line, n + 1);
    b->len += n + 1;            /* lines kept NUL-separated */
}

/* Emits collected lines (without the lock) and empties the buffer. */
static void sb_flush(mt_engine *e, strbuf *b)
{
    size_t off = 0;
    while (off < b->len) {
        const char *l = b->p + off;
        if (e->o.line)
            e->o.line(e->o.line_ctx, l);
        off += strlen(l) + 1;
    }
    b->len = 0;
}

static size_t ht_home(const mt_engine *e, uint32_t id)
{
    return (size_t)(id * 2654435761u) & (e->htcap - 1);
}

/* The session of id (S_GONE ones too: the table holds every session of
 * e->s), or NULL. */
static sess *ht_get(const mt_engine *e, uint32_t id)
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
static int ht_put(mt_engine *e, sess *s)
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
static sess *find(mt_engine *e, uint32_t id)
{
    sess *s = ht_get(e, id);
    return s && s->state != S_GONE ? s : NULL;
}

/* Moves s to state st, keeping e->nstate (the counts the tick line, the
 * published limit and admission read without walking the sessions). */
static void set_state(mt_engine *e, sess *s, int st)
{
    e->nstate[s->state]--;
    e->nstate[st]++;
    s->state = st;
}

/* An output's bytes: its AUDIO frame, and the TEXT frame beside it. */
static size_t frame_bytes(const mt_engine *e)
{
    return MT_FRAME_HEADER_SIZE + (size_t)e->fs * 2 +
           (e->o.speech ? MT_FRAME_HEADER_SIZE + 4 : 0);
}

/* Appends one encoded frame to s's output queue, encoded in place; on
 * overflow the session is marked (the server disconnects it) and 0
 * returned. The queue grows by doubling up to ob_max: a client that keeps
 * up needs a frame or two of it, and a full-size queue per session (a
 * quarter of a megabyte) would cost a mapping, its page faults and an
 * munmap per session. */
static void mark_ready(mt_engine *e, sess *s)
{
    if (!s->ready) {
        s->ready = 1;
        e->ready[e->nready++] = s->id;   /* room: nready <= ns <= scap */
    }
}

static int push_frame(mt_engine *e, sess *s, const mt_frame *f)
{
    size_t n = MT_FRAME_HEADER_SIZE + (size_t)f->length;
    mark_ready(e, s);     /* output, or an overflow: the caller looks */
    if (s->ob_len + n > s->ob_max) {
        s->overflow = 1;
        return 0;
    }
    if (s->ob_len + n > s->ob_cap) {
        size_t nc = s->ob_cap ? s->ob_cap * 2 : 4 * frame_bytes(e);
        while (nc < s->ob_len + n)
            nc *= 2;
        if (nc > s->ob_max)
            nc = s->ob_max;
        uint8_t *ob = malloc(nc);
        if (!ob)
            return 0;          /* out of memory: a counted miss */
        if (s->ob_len)
            memcpy(ob, s->ob + s->ob_head, s->ob_len);
        free(s->ob);
        s->ob = ob;
        s->ob_head = 0;
        s->ob_cap = nc;
    } else if (s->ob_head + s->ob_len + n > s->ob_cap) {
        memmove(s->ob, s->ob + s->ob_head, s->ob_len);
        s->ob_head = 0;
    }
    long k = mt_frame_encode(f, s->ob + s->ob_head + s->ob_len, n);
    if (k < 0)
        return 0;
    s->ob_len += (size_t)k;
    return 1;
}

static void push_ctl(mt_engine *e, sess *s, int type, uint16_t flags, const void *payload,
                     size_t len)
{
    mt_frame f = {0};
    f.type = (uint8_t)type;
    f.flags = flags;
    f.session = s->id;
    f.t_send = now(e);
    f.length = (uint32_t)len;
    f.payload = payload;
    push_frame(e, s, &f);
}

static void push_reason(mt_engine *e, sess *s, int type, uint16_t flags, const char *reason)
{
    size_t n = strlen(reason);
    if (n > MT_REASON_MAX)
        n = MT_REASON_MAX;
    /* cut at a UTF-8 boundary */
    while (n > 0 && n < strlen(reason) && ((unsigned char)reason[n] & 0xC0) == 0x80)
        n--;
    push_ctl(e, s, type, flags, reason, n);
}

static void free_sess(mt_engine *e, sess *s)
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

static void remove_sess(mt_engine *e, sess *s)
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
    free_sess(e, s);
}

/* Throws the input queue away: unanswered frames become misses. */
static void drop_queue(mt_engine *e, sess *s)
{
    for (int i = 0; i < s->qlen; i++)
        if (!s->q[(s->qhead + i) % s->qcap].answered)
            e->c.miss++;
    s->qlen = 0;
    s->qhead = 0;
}

/* Queues END once the client's input ended and every input is answered. */
static void maybe_end(mt_engine *e, sess *s)
{
    if (s->state != S_ACTIVE || !s->input_ended || s->in_batch)
        return;
    for (int i = 0; i < s->qlen; i++)
        if (!s->q[(s->qhead + i) % s->qcap].answered)
            return;
    /* what is left was answered by FILL: the model need not consume it */
    s->qlen = 0;
    push_ctl(e, s, MT_FRAME_END, 0, NULL, 0);
    set_state(e, s, S_ENDED);
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
        free_sess(e, e->s[i]);
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

/* ---- sessions (I/O thread) ------------------------------------------------ */

uint32_t mt_engine_session_new(mt_engine *e)
{
    return mt_engine_session_new_for(e, NULL);
}

uint32_t mt_engine_session_new_for(mt_engine *e, void *user)
{
    sess *s = calloc(1, sizeof *s);
    if (!s)
        return 0;
    s->user = user;
    pthread_mutex_lock(&e->mu);
    if (e->ns == e->scap) {
        int nc = e->scap ? e->scap * 2 : 16;
        uint32_t *r = realloc(e->ready, (size_t)nc * sizeof *r);
        if (r)
            e->ready = r;
        sess **p = r ? realloc(e->s, (size_t)nc * sizeof *p) : NULL;
        if (!p) {
            pthread_mutex_unlock(&e->mu);
            free(s);
            return 0;
        }
        e->s = p;
        e->scap = nc;
    }
    /* room for a REJECT now; the full output queue comes with admission */
    s->ob_cap = s->ob_max = MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 64;
    s->ob = malloc(s->ob_cap);
    if (!s->ob) {
        pthread_mutex_unlock(&e->mu);
        free(s);
        return 0;
    }
    /* past 2^32-1 the ids start again at 1, skipping those still held */
    while (e->next_id == 0 || ht_get(e, e->next_id))
        e->next_id++;
    s->id = e->next_id++;
    s->state = S_PENDING;          /* counted once it is in e->s */
    if (ht_put(e, s) != 0) {
        pthread_mutex_unlock(&e->mu);
        free(s->ob);
        free(s);
        return 0;
    }
    e->s[e->ns++] = s;
    e->nstate[S_PENDING]++;
    uint32_t id = s->id;
    pthread_mutex_unlock(&e->mu);
    return id;
}

void mt_engine_set_seed(mt_engine *e, uint32_t id, uint64_t seed)
{
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s && s->state == S_PENDING)
        s->seed = seed;
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_set_sampling(mt_engine *e, uint32_t id, const mt_hello *h)
{
    if (!e->o.speech || !h->smp_mask)
        return;
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s && s->state == S_PENDING) {
        s->smp = *mt_speech_sampling(e->o.speech);
        if (h->smp_mask & MT_SMP_TEMP) s->smp.temp = h->temp;
        if (h->smp_mask & MT_SMP_TOPK) s->smp.top_k = (int)h->top_k;
        if (h->smp_mask & MT_SMP_TEMP_TEXT) s->smp.temp_text = h->temp_text;
        if (h->smp_mask & MT_SMP_TOPK_TEXT) s->smp.top_k_text = (int)h->top_k_text;
        s->has_smp = 1;
    }
    pthread_mutex_unlock(&e->mu);
}

int mt_engine_sampling_desc(mt_engine *e, uint32_t id, char *out, size_t cap)
{
    out[0] = '\0';
    if (!e->o.speech)
        return -1;
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    int rc = -1;
    if (s) {
        const mt_kyutai_sampling *m = s->has_smp ? &s->smp : mt_speech_sampling(e->o.speech);
        snprintf(out, cap, "sampling text temperature %g top-k %d, audio temperature %g "
                 "top-k %d%s, seed %llu", (double)m->temp_text, m->top_k_text,
                 (double)m->temp, m->top_k, s->has_smp ? " (HELLO)" : "",
                 (unsigned long long)(s->seed ? s->seed : e->o.speech_seed));
        rc = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int mt_engine_admit(mt_engine *e, uint32_t id, char *why, size_t whylen)
{
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    int rc = -1;
    if (!s || s->state != S_PENDING) {
        snprintf(why, whylen, "no such pending session");
        goto out;
    }
    if (e->nstate[S_ACTIVE] >= e->o.max_sessions) {
        snprintf(why, whylen, "server at its session limit (%d session%s); "
                 "retry later", e->o.max_sessions, e->o.max_sessions == 1 ? "" : "s");
        goto out;
    }
    size_t obmax = (size_t)e->o.out_queue * frame_bytes(e) + 4 * (MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 64);
    /* four frames to start with (push_frame grows it) */
    size_t obcap = 4 * frame_bytes(e) + 4 * (MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 64);
    if (obcap > obmax)
        obcap = obmax;
    if (obcap < s->ob_len)
        obcap = s->ob_len;
    uint8_t *ob = malloc(obcap);
    int qcap0 = e->o.in_queue < QUEUE_START ? e->o.in_queue : QUEUE_START;
    in_entry *q = calloc((size_t)qcap0, sizeof *q);
    int16_t *qpcm = malloc((size_t)qcap0 * (size_t)e->fs * sizeof(int16_t));
    if (!ob || !q || !qpcm) {
        free(ob); free(q); free(qpcm);
        snprintf(why, whylen, "server out of memory");
        goto out;
    }
    mt_speech_sess *sp = NULL;
    char sperr[160];
    if (e->o.speech && mt_speech_sess_open_smp(e->o.speech, s->seed ? s->seed : e->o.speech_seed,
                                               s->has_smp ? &s->smp : NULL, &sp, sperr,
                                               sizeof sperr) != 0) {
        free(ob); free(q); free(qpcm);
        snprintf(why, whylen, "server: %s", sperr);
        goto out;
    }
    mt_kv_seq *kv = NULL;
    int k = mt_kv_seq_open(e->pool, &kv);
    if (k != 0) {
        free(ob); free(q); free(qpcm);
        mt_speech_sess_close(sp);
        size_t bound = mt_engine_session_bound(e);
        size_t total = mt_kv_used_bytes(e->pool) + mt_kv_free_bytes(e->pool);
        /* Two different things for an operator: full now, or never. */
        if (k == MT_KV_EXHAUSTED && bound > total) {
            snprintf(why, whylen, "KV pool cannot hold this session's bound: "
                     "one session needs %zu bytes, the whole pool is %zu "
                     "(raise mt-serve's --kv-mem)", bound, total);
            rc = MT_ENGINE_REFUSED_FINAL;
        } else if (k == MT_KV_EXHAUSTED)
            snprintf(why, whylen, "KV pool cannot hold this session's bound "
                     "now: it needs %zu bytes, %zu are free while other "
                     "sessions run; retry later", bound, mt_kv_free_bytes(e->pool));
        else
            snprintf(why, whylen, "KV sequence open failed");
        goto out;
    }
    if (s->ob_len)
        memcpy(ob, s->ob + s->ob_head, s->ob_len);
    free(s->ob);
    s->ob = ob;
    s->ob_head = 0;
    s->ob_cap = obcap;
    s->ob_max = obmax > obcap ? obmax : obcap;
    s->q = q;
    s->qpcm = qpcm;
    s->qcap = qcap0;
    s->kv = kv;
    s->sp = sp;
    s->order = e->next_order++;
    set_state(e, s, S_ACTIVE);
    e->admitted++;
    mt_hello h;
    mt_engine_format(e, &h);
    uint8_t pl[12 + MT_MODEL_NAME_MAX];
    long n = mt_hello_encode(&h, pl, sizeof pl);
    push_ctl(e, s, MT_FRAME_ACCEPT, e->text_only ? MT_FLAG_TEXT_ONLY : 0, pl,
             n > 0 ? (size_t)n : 0);
    rc = 0;
out:
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void mt_engine_reject(mt_engine *e, uint32_t id, const char *reason, int final)
{
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s && s->state == S_PENDING) {
        push_reason(e, s, MT_FRAME_REJECT, final ? MT_FLAG_FINAL : 0, reason);
        set_state(e, s, S_ENDED);
        e->rejected++;
    }
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_count_rejected(mt_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->rejected++;
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_count_lost_input(mt_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->c.in++;
    e->c.miss++;
    pthread_mutex_unlock(&e->mu);
}

static void grow_queue(mt_engine *e, sess *s);

/* Room for one more entry in the FILL FIFO (doubling its ring). 0, or -1
 * out of memory. Under the lock. */
static int fill_room(mt_engine *e)
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

int mt_engine_input(mt_engine *e, uint32_t id, const mt_frame *f,
                    uint64_t t_arrive, char *why, size_t whylen)
{
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
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
    if (s->qlen >= s->qcap || (e->o.fill && fill_room(e) != 0)) {
        e->c.miss++;          /* dropped: a counted miss, never silent */
        rc = 1;
        goto out;
    }
    if (e->o.fill) {
        fill_ent *fe = &e->fq[(e->fhead + e->flen) % e->fcap];
        fe->id = s->id;
        fe->n = s->n_in;
        fe->deadline = t_arrive + e->o.deadline_ns;
        e->flen++;
    }
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
    sess *s = find(e, id);
    int n = 0;
    if (s && s->state == S_ACTIVE)
        n = e->o.in_queue - s->qlen;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void mt_engine_input_end(mt_engine *e, uint32_t id)
{
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s) {
        s->input_ended = 1;
        maybe_end(e, s);
    }
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_fail(mt_engine *e, uint32_t id, const char *reason)
{
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s && s->state != S_ENDED) {
        if (s->q)
            drop_queue(e, s);
        if (s->state == S_PENDING)
            e->rejected++;
        push_reason(e, s, MT_FRAME_ERROR, 0, reason);
        set_state(e, s, S_ENDED);
    }
    pthread_mutex_unlock(&e->mu);
}

int mt_engine_shed(mt_engine *e, uint32_t id, const char *reason)
{
    int rc = -1;
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s && s->state == S_ACTIVE) {
        /* a row in the batch being stepped: deliver_row sees the state is
         * no longer S_ACTIVE and delivers nothing (its input is one of the
         * misses counted here) */
        drop_queue(e, s);
        push_reason(e, s, MT_FRAME_END, 0, reason);
        set_state(e, s, S_ENDED);
        e->shed++;
        rc = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void mt_engine_close(mt_engine *e, uint32_t id)
{
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s) {
        if (s->q)
            drop_queue(e, s);
        if (s->state == S_PENDING)
            e->rejected++;    /* left before a decision: not admitted */
        set_state(e, s, S_ENDED);
        if (s->in_batch)
            set_state(e, s, S_GONE);    /* the tick thread frees it */
        else
            remove_sess(e, s);
    }
    pthread_mutex_unlock(&e->mu);
}

static void status_locked(const sess *s, mt_sess_status *st)
{
    st->known = 1;
    st->out_bytes = s->ob_len;
    st->ended = s->state == S_ENDED;
    st->overflow = s->overflow;
    st->admitted = s->kv != NULL;
}

int mt_engine_status(mt_engine *e, uint32_t id, mt_sess_status *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s)
        status_locked(s, st);
    pthread_mutex_unlock(&e->mu);
    return s ? 0 : -1;
}

/* Under the lock: up to cap of s's queued bytes into buf. */
static size_t take_locked(sess *s, uint8_t *buf, size_t cap)
{
    size_t n = s->ob_len < cap ? s->ob_len : cap;
    if (n)
        memcpy(buf, s->ob + s->ob_head, n);
    s->ob_head += n;
    s->ob_len -= n;
    if (s->ob_len == 0)
        s->ob_head = 0;
    return n;
}

size_t mt_engine_take(mt_engine *e, uint32_t id, uint8_t *buf, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s)
        n = take_locked(s, buf, cap);
    pthread_mutex_unlock(&e->mu);
    return n;
}

size_t mt_engine_take_swap(mt_engine *e, uint32_t id, mt_outbuf *b, size_t limit,
                           mt_sess_status *st)
{
    size_t n = 0;
    memset(st, 0, sizeof *st);
    b->off = b->len = 0;
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s && s->ob_len > 0 && s->ob_len <= limit) {
        /* the usual case, a tick's frame or two: the session's buffer
         * changes hands, the caller's empty one takes its place */
        uint8_t *p = s->ob;
        size_t cap = s->ob_cap;
        b->off = s->ob_head;
        n = b->len = s->ob_len;
        s->ob = b->p;
        s->ob_cap = b->cap;
        s->ob_head = s->ob_len = 0;
        b->p = p;
        b->cap = cap;
    } else if (s && s->ob_len > 0) {
        /* a backlog (a slow reader): limit bytes of it copied, so that
         * what waits outside the engine stays as bounded as before */
        if (b->cap < limit) {
            uint8_t *p = malloc(limit);
            if (p) {
                free(b->p);
                b->p = p;
                b->cap = limit;
            }
        }
        n = b->len = take_locked(s, b->p, b->cap < limit ? b->cap : limit);
    }
    if (s)
        status_locked(s, st);
    pthread_mutex_unlock(&e->mu);
    return n;
}

void mt_engine_drain(mt_engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->state == S_GONE)
            continue;
        s->input_ended = 1;
        maybe_end(e, s);
    }
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_wake(mt_engine *e)
{
    int active = 0;
    mt_engine_counts(e, &active, NULL);
    if (active > 0)
        mt_decoder_wake(e->dec);
}

void mt_engine_counts(mt_engine *e, int *active, int *pending)
{
    pthread_mutex_lock(&e->mu);
    int a = e->nstate[S_ACTIVE], p = e->nstate[S_PENDING];
    pthread_mutex_unlock(&e->mu);
    if (active)
        *active = a;
    if (pending)
        *pending = p;
}

/* ---- answers: real outputs, FILL, per-frame lines ------------------------- */

static void frame_line(mt_engine *e, strbuf *b, const sess *s,
                       const in_entry *q, int fill, uint64_t t_start,
                       uint64_t t_ready, int met)
{
    mt_frame_rec r = {
        .frame = q->seq,
        .session = s->id,
        .t = (double)(t_ready - e->t0) / 1e9,
        .fill = fill,
        .latency_ms = (double)(t_ready - q->t_arrive) / 1e6,
        .wait_ms = (double)(t_start - q->t_arrive) / 1e6,
        .compute_ms = (double)(t_ready - t_start) / 1e6,
        .met = met,
    };
    char buf[512];
    if (mt_frame_rec_format(&r, buf, sizeof buf) > 0)
        sb_add(b, buf);
}

/* Answers q with FILL (silence) at time t: the one place a FILL frame is
 * built, for the I/O thread's deadlines and for a step that ended past one.
 * Under the lock. */
static void send_fill(mt_engine *e, sess *s, in_entry *q, uint64_t t,
                      strbuf *lines)
{
    mt_frame f = {0};
    f.type = MT_FRAME_AUDIO;
    f.flags = MT_FLAG_FILL;
    f.session = s->id;
    f.seq = q->seq;
    f.t_send = t;
    f.t_arrive = q->t_arrive;
    f.t_ready = t;
    f.length = (uint32_t)e->fs * 2;
    f.payload = (const uint8_t *)e->silence;
    if (e->text_only) {       /* a FILL answer of a text-only session */
        f.type = MT_FRAME_TEXT;
        f.length = 0;
    }
    q->answered = 1;
    if (push_frame(e, s, &f))
        e->c.fill++;
    else
        e->c.miss++;
    e->c.answered++;
    if (e->o.frame_lines)
        frame_line(e, lines, s, q, 1, t, t, 0);
}

/* Answers q with the model's output pcm, computed from t_start to t_ready.
 * Under the lock. */
static void send_output(mt_engine *e, sess *s, in_entry *q, const int16_t *pcm,
                        int32_t text, uint64_t t_start, uint64_t t_ready, strbuf *lines)
{
    int met = t_ready <= q->deadline;
    uint8_t tok[4] = { (uint8_t)text, (uint8_t)(text >> 8), (uint8_t)(text >> 16),
                       (uint8_t)(text >> 24) };
    mt_frame f = {0};
    f.type = MT_FRAME_AUDIO;
    f.session = s->id;
    f.seq = q->seq;
    f.t_send = now(e);
    f.t_arrive = q->t_arrive;
    f.t_start = t_start;
    f.t_ready = t_ready;
    f.length = (uint32_t)e->fs * 2;
    f.payload = (const uint8_t *)pcm;
    if (e->text_only) {       /* the answer is the text (none before the delays) */
        f.type = MT_FRAME_TEXT;
        f.length = text >= 0 ? 4 : 0;
        f.payload = tok;
    }
    if (push_frame(e, s, &f)) {
        e->c.out++;
        e->c.met_real += met;
    } else {
        e->c.miss++;
    }
    e->c.answered++;
    if (e->o.frame_lines)
        frame_line(e, lines, s, q, 0, t_start, t_ready, met);
}

/* The text token that goes with q's output (opts.speech), beside it: not
 * an answer, so not counted; the transcript has every token the model
 * made, FILL or not. Under the lock. */
static void send_text(mt_engine *e, sess *s, const in_entry *q, int32_t tok)
{
    uint8_t pl[4] = { (uint8_t)tok, (uint8_t)(tok >> 8), (uint8_t)(tok >> 16),
                      (uint8_t)(tok >> 24) };
    mt_frame f = {0};
    f.type = MT_FRAME_TEXT;
    f.session = s->id;
    f.seq = q->seq;
    f.t_send = now(e);
    f.t_arrive = q->t_arrive;
    f.length = 4;
    f.payload = pl;
    push_frame(e, s, &f);
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
        sess *s = find(e, fe->id);
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
            send_fill(e, s, q, t, &e->fill_lines);
            maybe_end(e, s);
        }
    }
    pthread_mutex_unlock(&e->mu);
    sb_flush(e, &e->fill_lines);
    return next;
}

int mt_engine_take_ready(mt_engine *e, void **users, int cap)
{
    int n = 0;
    pthread_mutex_lock(&e->mu);
    while (n < cap && e->nready > 0) {
        sess *s = ht_get(e, e->ready[--e->nready]);
        if (!s)
            continue;
        s->ready = 0;
        if (s->state != S_GONE && s->user)
            users[n++] = s->user;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

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
static int make_room(mt_engine *e, sess *s, int *recompute)
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

static int append_hist(mt_engine *e, sess *s, const int16_t *pcm)
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
        if (make_room(e, s, &recompute) != 0)
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
    b->t_start = now(e);
    for (int r = 0; r < b->n && rc == 0; r++) {
        if (!b->recompute[r])
            continue;
        sess *s = b->sess[r];
        mt_step_io io = {0};
        io.pcm_in = s->hist;
        if (mt_decoder_prefill(e->dec, s->kv, (int)s->hist_n, &io, err, errlen) != 0)
            rc = -1;
    }
    b->t_step = now(e);
    if (rc == 0 && e->o.speech) {
        rc = mt_speech_step(e->o.speech, b->n, b->seqs, b->sp, b->pcm_in, b->pcm_out,
                            b->text, err, errlen);
    } else if (rc == 0) {
        mt_step_io io = {0};
        io.pcm_in = b->pcm_in;
        io.pcm_out = b->pcm_out;
        rc = mt_decoder_step(e->dec, b->n, b->seqs, &io, err, errlen);
    }
    b->t_ready = now(e);
    return rc;
}

/* Ends s with ERROR (reason): its unanswered inputs become misses. */
static void end_with_error(mt_engine *e, sess *s, const char *reason)
{
    drop_queue(e, s);
    push_reason(e, s, MT_FRAME_ERROR, 0, reason);
    set_state(e, s, S_ENDED);
}

/* Delivers row r of a stepped batch (under the lock): the answer to the
 * session's head input (a real output; FILL if it came past the deadline
 * in FILL mode; nothing if a FILL already answered it), then pops it. */
static void deliver_row(mt_engine *e, mt_batch *b, int r, int step_rc)
{
    sess *s = b->sess[r];
    s->in_batch = 0;
    if (s->state == S_GONE) {
        remove_sess(e, s);
        return;
    }
    if (s->state != S_ACTIVE)
        return;                 /* failed or closed meanwhile: queue gone */
    if (step_rc != 0) {
        end_with_error(e, s, "server: decoder step failed");
        return;
    }
    const mt_kv_params *kp = mt_kv_pool_params(e->pool);
    int keep_hist = kp->policy == MT_KV_FULL && e->o.on_full == MT_ONFULL_PREEMPT;
    const int16_t *in = s->qpcm + (size_t)s->qhead * (size_t)e->fs;
    if (keep_hist && append_hist(e, s, in) != 0) {
        /* cannot keep history: preemption would lose it; end cleanly */
        end_with_error(e, s, "server out of memory");
        return;
    }
    in_entry *q = &s->q[s->qhead];
    if (e->nlat < e->latcap)
        e->lat[e->nlat++] = (double)(b->t_ready - q->t_arrive) / 1e6;
    /* FILL mode: a real output not ready by the deadline is never sent; the
     * FILL goes now (the I/O thread was about to) */
    if (!q->answered && e->o.fill && b->t_ready > q->deadline)
        send_fill(e, s, q, now(e), &e->tick_lines);
    int32_t text = e->o.speech ? b->text[r] : -1;
    if (!q->answered)
        send_output(e, s, q, b->pcm_out + (size_t)r * (size_t)e->fs, text,
                    b->t_start, b->t_ready, &e->tick_lines);
    /* beside the audio; a text-only answer a FILL made is not sent twice */
    if (e->o.speech && !e->text_only && text >= 0)
        send_text(e, s, q, b->text[r]);
    s->qhead = (s->qhead + 1) % s->qcap;
    /* an empty ring starts again at its first slot: a session that keeps
     * up (a frame in, a frame out each tick) touches one slot, not the
     * whole ring in turn, and 2,000 sessions' input stays in cache */
    if (--s->qlen == 0)
        s->qhead = 0;
    maybe_end(e, s);
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
static int run_round(mt_engine *e, int round, int max_rows, uint64_t t_tick,
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

/* ---- the tick (tick thread) ----------------------------------------------- */

/* Sessions with a frame that arrived before this tick still queued: what
 * a catch-up round would step. */
static int count_behind(mt_engine *e, uint64_t t_tick)
{
    int n = 0;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->state == S_ACTIVE && s->qlen > 0 &&
            s->q[s->qhead].t_arrive <= t_tick)
            n++;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* Rows of the next catch-up round after a round of n rows that began at r0,
 * or 0 for none. round0_ns: what the tick's first round (every session)
 * cost; borrow: no catch-up round has run in this tick yet.
 *
 * A catch-up round steps sessions still behind (a frame that arrived before
 * this tick still queued: a client phase-shifted against the ticks, or every
 * session after an overrun tick), as many as fit before 15/16 of the
 * period, costed from the last round: per row, plus a fixed part for the
 * weights every round reads whatever its batch (an eighth of the round, or
 * what the last catch-up round showed it to be, whichever is more). The
 * rest catch up in later ticks. Without it a single overrun leaves every
 * session one frame behind (late by a period) for good, near capacity where
 * a full second round never fits.
 *
 * Near capacity no catch-up round fits before 15/16 of the period at all,
 * and a session behind stays behind (late by a period at every tick) until
 * the lag drains by chance. So the first catch-up round of a tick may
 * borrow the next tick's slack: it may end as late as the next tick can
 * start and still, with a first round costing what this one did, end within
 * its period (t_tick + 2 P - round0). The next tick then starts late by at
 * most its own slack and ends on time: a lag drains by a round each tick
 * instead of never. Never more than one borrowed round a tick, and only
 * while the first round leaves slack (round0 < P). */
static int catch_up_rows(mt_engine *e, uint64_t t_tick, uint64_t r0, int n,
                         uint64_t round0_ns, int borrow)
{
    int behind = count_behind(e, t_tick);
    if (behind == 0)
        return 0;
    uint64_t t = now(e), dur = t - r0, P = e->o.frame_ns;
    uint64_t per_row = dur / (uint64_t)n, fixed = dur / 8;
    if (e->round_fixed_ns > fixed)
        fixed = e->round_fixed_ns;
    uint64_t end = t_tick + P * 15 / 16;
    if (t + fixed + per_row > end) {
        if (!borrow || round0_ns >= P)
            return 0;
        end = t_tick + 2 * P - round0_ns;
        if (t + fixed + per_row > end)
            return 0;
    }
    uint64_t fit = (end - t - fixed) / (per_row ? per_row : 1);
    return fit < (uint64_t)behind ? (int)fit : behind;
}

/* Fills the tick record from the sessions and this tick's counters, and
 * resets the counters. Under the lock. */
static void tick_figures(mt_engine *e, mt_tick *t, uint64_t t_end)
{
    uint64_t oldest = 0;
    t->active = e->nstate[S_ACTIVE];
    t->pending = e->nstate[S_PENDING];
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->state == S_ACTIVE && s->qlen > 0) {
            uint64_t a = s->q[s->qhead].t_arrive;
            if (!oldest || a < oldest)
                oldest = a;
        }
    }
    t->late_ms = oldest && t_end > oldest ? (double)(t_end - oldest) / 1e6 : 0;
    size_t n = (size_t)e->nlat;
    t->p50_ms = n ? mt_stats_percentile(e->lat, n, 0.50) : 0;   /* sorts */
    t->p99_ms = n ? e->lat[mt_stats_rank(n, 0.99)] : 0;
    t->in = e->c.in;
    t->out = e->c.out;
    t->fill = e->c.fill;
    t->miss = e->c.miss;
    t->kv_used = (int64_t)mt_kv_used_bytes(e->pool);
    t->kv_free = (int64_t)mt_kv_free_bytes(e->pool);
    t->admitted = e->admitted;
    t->rejected = e->rejected;
    t->shed = e->shed;
    t->preempted = e->c.preempted;
    if (e->c.answered > 0) {
        double answered = (double)e->c.answered;
        t->naive_met = 100.0 * (double)(e->c.met_real + e->c.fill) / answered;
        t->met = 100.0 * (double)e->c.met_real / answered;
    } else {
        t->naive_met = 100.0;
        t->met = 100.0;
    }
    /* every tick names its device; a simulated one also gives the
     * profile's prediction for the steps this tick ran */
    const char *sim_label = mt_decoder_sim_label(e->dec);
    snprintf(t->device, sizeof t->device, "%s",
             sim_label ? sim_label : mt_decoder_backend_name(e->dec));
    if (sim_label)
        mt_decoder_sim_take(e->dec, &t->sim_pred_ms, &t->sim_noise_ms);
    memset(&e->c, 0, sizeof e->c);
}

int mt_engine_tick(mt_engine *e, int64_t tick, uint64_t t_tick,
                   char *err, size_t errlen)
{
    uint64_t t_begin = now(e);
    double comp_ms = 0, step_only_ms = 0;
    int stepped = 0, rc = 0;
    e->nlat = 0;
    int max_rows = e->o.max_sessions;
    uint64_t round0_ns = 0, per_row0 = 0;
    int caught_up = 0;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        uint64_t r0 = now(e);
        int n = run_round(e, round, max_rows, t_tick, &comp_ms, &step_only_ms,
                          err, errlen);
        if (n < 0) {
            rc = -1;
            break;
        }
        stepped += n;
        uint64_t dur = now(e) - r0;
        if (round == 0 && n > 0) {
            round0_ns = dur;
            per_row0 = dur / (uint64_t)n;
        } else if (round > 0 && n > 0) {
            /* a small round against the full one: what is not per row is
             * the fixed cost (on a GPU, the weights read whatever the batch) */
            uint64_t rows = (uint64_t)n * per_row0;
            e->round_fixed_ns = dur > rows ? dur - rows : 0;
        }
        if (n == 0 || !e->o.catch_up)
            break;
        max_rows = catch_up_rows(e, t_tick, r0, n, round0_ns, round == 0);
        if (max_rows == 0)
            break;
        caught_up = 1;
    }
    /* the fixed cost learnt from a catch-up round fades over ticks without
     * one (a round slowed by a hiccup must not block catch-up for good) */
    if (!caught_up)
        e->round_fixed_ns -= e->round_fixed_ns / 16;

    mt_tick t;
    memset(&t, 0, sizeof t);
    t.tick = tick;
    t.t = (double)(t_begin - e->t0) / 1e9;
    t.stepped = stepped;
    t.step_ms = comp_ms;
    t.naive_ms = step_only_ms;
    uint64_t t_end = now(e);
    pthread_mutex_lock(&e->mu);
    tick_figures(e, &t, t_end);
    if (rc != 0 && !e->fail_msg[0])
        snprintf(e->fail_msg, sizeof e->fail_msg, "%s", err && *err ? err : "tick failed");
    pthread_mutex_unlock(&e->mu);
    t.has_limit = 1;
    t.limit = mt_engine_published_limit(e, NULL, 0);

    sb_flush(e, &e->tick_lines);
    char line[MT_LL_MAX_LINE];
    if (mt_tick_format(&t, line, sizeof line) > 0 && e->o.line)
        e->o.line(e->o.line_ctx, line);
    if (e->o.tick_rec)
        e->o.tick_rec(e->o.tick_rec_ctx, &t);
    return rc;
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
