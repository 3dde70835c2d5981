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
 */
#define _GNU_SOURCE
#include "serve/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROUNDS 4      /* batch + catch-up rounds in one tick */
#define QUEUE_START 8     /* a session's first input ring (grow_queue) */

enum { S_PENDING = 0, S_ACTIVE = 1, S_ENDED = 2 };

typedef struct in_entry {
    uint32_t seq;
    uint64_t t_send, t_arrive, deadline;
    int      answered;        /* a FILL was sent for it */
} in_entry;

typedef struct sess {
    uint32_t   id;
    int        state;
    int        dead;          /* connection gone; freed when not in flight */
    int        inflight;      /* rows of the running batch */
    unsigned   epoch;         /* bumped when the queue is thrown away */
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
    int        prefill;       /* this round: recompute hist_n first */
    int        in_round;
    /* encoded output bytes: ob[ob_head .. ob_head+ob_len) */
    uint8_t   *ob;
    size_t     ob_head, ob_len, ob_cap;
    int        overflow;
} sess;

typedef struct row {
    sess    *s;
    int      qidx;
    unsigned epoch;
} row;

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

    sess          **s;
    int             ns, scap;
    uint32_t        next_id;
    int             id_wrapped;   /* next_id went past 2^32-1 (find) */
    uint64_t        next_order;

    /* batch buffers (tick thread only) */
    row            *rows;
    int16_t        *pcm_in, *pcm_out;   /* [max_sessions, fs] */
    double         *lat;                /* per-frame latencies of a tick */
    int             nlat, latcap;
    uint8_t        *enc;                /* one encoded frame */
    int16_t        *silence;            /* [fs] zeros */
    strbuf          tick_lines, fill_lines;

    /* per-tick counters (reset when a tick record is written) */
    int64_t c_in, c_out, c_fill, c_miss, c_preempted;
    int64_t c_met_real, c_answered;
    /* totals */
    int64_t admitted, rejected;
};

uint64_t mt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p)
            return;             /* a lost log line, never a crash */
        b->p = p;
        b->cap = nc;
    }
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

/* e->s is in ascending id order (ids are handed out increasing and
 * remove_sess keeps the order), so a lookup is a binary search: the I/O
 * thread looks sessions up several times per frame, and a linear scan made
 * that quadratic in the sessions (most of its time at 1000 simulated
 * sessions). After the 32-bit id wraps the order is lost: linear then. */
static sess *find(mt_engine *e, uint32_t id)
{
    if (!e->id_wrapped) {
        int lo = 0, hi = e->ns - 1;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2;
            uint32_t m = e->s[mid]->id;
            if (m == id)
                return e->s[mid]->dead ? NULL : e->s[mid];
            if (m < id)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        return NULL;
    }
    for (int i = 0; i < e->ns; i++)
        if (e->s[i]->id == id && !e->s[i]->dead)
            return e->s[i];
    return NULL;
}

static size_t frame_bytes(const mt_engine *e)
{
    return MT_FRAME_HEADER_SIZE + (size_t)e->fs * 2;
}

/* Appends one encoded frame to s's output queue; on overflow the session
 * is marked (the server disconnects it) and 0 returned. */
static int push_frame(mt_engine *e, sess *s, const mt_frame *f)
{
    long n = mt_frame_encode(f, e->enc, frame_bytes(e) + MT_REASON_MAX + 128);
    if (n < 0)
        return 0;
    if (s->ob_len + (size_t)n > s->ob_cap) {
        s->overflow = 1;
        return 0;
    }
    if (s->ob_head + s->ob_len + (size_t)n > s->ob_cap) {
        memmove(s->ob, s->ob + s->ob_head, s->ob_len);
        s->ob_head = 0;
    }
    memcpy(s->ob + s->ob_head + s->ob_len, e->enc, (size_t)n);
    s->ob_len += (size_t)n;
    return 1;
}

static void push_ctl(mt_engine *e, sess *s, int type, const void *payload,
                     size_t len)
{
    mt_frame f = {0};
    f.type = (uint8_t)type;
    f.session = s->id;
    f.t_send = mt_now_ns();
    f.length = (uint32_t)len;
    f.payload = payload;
    push_frame(e, s, &f);
}

static void push_reason(mt_engine *e, sess *s, int type, const char *reason)
{
    size_t n = strlen(reason);
    if (n > MT_REASON_MAX)
        n = MT_REASON_MAX;
    /* cut at a UTF-8 boundary */
    while (n > 0 && n < strlen(reason) && ((unsigned char)reason[n] & 0xC0) == 0x80)
        n--;
    push_ctl(e, s, type, reason, n);
}

static void free_sess(mt_engine *e, sess *s)
{
    if (s->kv)
        mt_kv_seq_close(e->pool, s->kv);
    free(s->q);
    free(s->qpcm);
    free(s->hist);
    free(s->ob);
    free(s);
}

static void remove_sess(mt_engine *e, sess *s)
{
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
            e->c_miss++;
    s->qlen = 0;
    s->qhead = 0;
    s->epoch++;
}

/* Queues END once the client's input ended and every input is answered. */
static void maybe_end(mt_engine *e, sess *s)
{
    if (s->state != S_ACTIVE || !s->input_ended || s->inflight)
        return;
    for (int i = 0; i < s->qlen; i++)
        if (!s->q[(s->qhead + i) % s->qcap].answered)
            return;
    /* what is left was answered by FILL: the model need not consume it */
    s->qlen = 0;
    s->epoch++;
    push_ctl(e, s, MT_FRAME_END, NULL, 0);
    s->state = S_ENDED;
}

/* ---- create / free -------------------------------------------------------- */

int mt_engine_create(const mt_engine_opts *o, mt_decoder *dec, uint64_t t0,
                     mt_engine **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o || !dec || o->frame_ns == 0 || o->max_sessions < 1 ||
        o->in_queue < 1 || o->out_queue < 1) {
        snprintf(err, errlen, "engine: bad options");
        return -1;
    }
    const mt_model *m = mt_decoder_model(dec);
    if (!m || !m->cfg.has_audio || m->cfg.frame_samples < 1) {
        snprintf(err, errlen, "engine: the model has no audio adapter "
                 "(mt-serve serves PCM frame streams)");
        return -1;
    }
    mt_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "engine: out of memory");
        return -1;
    }
    e->o = *o;
    e->dec = dec;
    e->pool = mt_decoder_pool(dec);
    e->cfg = m->cfg;
    e->fs = m->cfg.frame_samples;
    e->t0 = t0;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    size_t B = (size_t)o->max_sessions;
    e->rows = calloc(B, sizeof *e->rows);
    e->pcm_in = calloc(B * (size_t)e->fs, sizeof(int16_t));
    e->pcm_out = calloc(B * (size_t)e->fs, sizeof(int16_t));
    e->latcap = (int)B * MAX_ROUNDS;
    e->lat = calloc((size_t)e->latcap, sizeof(double));
    e->enc = malloc(frame_bytes(e) + MT_REASON_MAX + 128);
    e->silence = calloc((size_t)e->fs, sizeof(int16_t));
    if (!e->rows || !e->pcm_in || !e->pcm_out || !e->lat || !e->enc || !e->silence) {
        mt_engine_free(e);
        snprintf(err, errlen, "engine: out of memory");
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
    free(e->rows);
    free(e->pcm_in);
    free(e->pcm_out);
    free(e->lat);
    free(e->enc);
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
    sess *s = calloc(1, sizeof *s);
    if (!s)
        return 0;
    pthread_mutex_lock(&e->mu);
    if (e->ns == e->scap) {
        int nc = e->scap ? e->scap * 2 : 16;
        sess **p = realloc(e->s, (size_t)nc * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&e->mu);
            free(s);
            return 0;
        }
        e->s = p;
        e->scap = nc;
    }
    /* room for a REJECT now; the full output queue comes with admission */
    s->ob_cap = MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 64;
    s->ob = malloc(s->ob_cap);
    if (!s->ob) {
        pthread_mutex_unlock(&e->mu);
        free(s);
        return 0;
    }
    s->id = e->next_id++;
    if (e->next_id == 0) {
        e->next_id = 1;
        e->id_wrapped = 1;   /* find() can no longer bisect */
    }
    s->state = S_PENDING;
    e->s[e->ns++] = s;
    uint32_t id = s->id;
    pthread_mutex_unlock(&e->mu);
    return id;
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
    int active = 0;
    for (int i = 0; i < e->ns; i++)
        if (e->s[i]->state == S_ACTIVE && !e->s[i]->dead)
            active++;
    if (active >= e->o.max_sessions) {
        snprintf(why, whylen, "server full (%d sessions)", e->o.max_sessions);
        goto out;
    }
    size_t obcap = (size_t)e->o.out_queue * frame_bytes(e) + 4 * (MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 64);
    uint8_t *ob = malloc(obcap);
    int qcap0 = e->o.in_queue < QUEUE_START ? e->o.in_queue : QUEUE_START;
    in_entry *q = calloc((size_t)qcap0, sizeof *q);
    int16_t *qpcm = malloc((size_t)qcap0 * (size_t)e->fs * sizeof(int16_t));
    if (!ob || !q || !qpcm) {
        free(ob); free(q); free(qpcm);
        snprintf(why, whylen, "server out of memory");
        goto out;
    }
    mt_kv_seq *kv = NULL;
    int k = mt_kv_seq_open(e->pool, &kv);
    if (k != 0) {
        free(ob); free(q); free(qpcm);
        if (k == MT_KV_EXHAUSTED)
            snprintf(why, whylen, "KV pool cannot hold this session's bound "
                     "(%zu bytes; %zu free)", mt_engine_session_bound(e),
                     mt_kv_free_bytes(e->pool));
        else
            snprintf(why, whylen, "KV sequence open failed");
        goto out;
    }
    memcpy(ob, s->ob + s->ob_head, s->ob_len);
    free(s->ob);
    s->ob = ob;
    s->ob_head = 0;
    s->ob_cap = obcap;
    s->q = q;
    s->qpcm = qpcm;
    s->qcap = qcap0;
    s->kv = kv;
    s->order = e->next_order++;
    s->state = S_ACTIVE;
    e->admitted++;
    mt_hello h;
    mt_engine_format(e, &h);
    uint8_t pl[12 + MT_MODEL_NAME_MAX];
    long n = mt_hello_encode(&h, pl, sizeof pl);
    push_ctl(e, s, MT_FRAME_ACCEPT, pl, n > 0 ? (size_t)n : 0);
    rc = 0;
out:
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void mt_engine_reject(mt_engine *e, uint32_t id, const char *reason)
{
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s && s->state == S_PENDING) {
        push_reason(e, s, MT_FRAME_REJECT, reason);
        s->state = S_ENDED;
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

static void grow_queue(mt_engine *e, sess *s);

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
    e->c_in++;
    if (s->qlen >= s->qcap && s->qcap < e->o.in_queue)
        grow_queue(e, s);
    if (s->qlen >= s->qcap) {
        e->c_miss++;          /* dropped: a counted miss, never silent */
        rc = 1;
        goto out;
    }
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
        push_reason(e, s, MT_FRAME_ERROR, reason);
        s->state = S_ENDED;
    }
    pthread_mutex_unlock(&e->mu);
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
        s->state = S_ENDED;
        if (s->inflight)
            s->dead = 1;      /* the tick thread frees it */
        else
            remove_sess(e, s);
    }
    pthread_mutex_unlock(&e->mu);
}

int mt_engine_status(mt_engine *e, uint32_t id, mt_sess_status *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s) {
        st->known = 1;
        st->out_bytes = s->ob_len;
        st->ended = s->state == S_ENDED;
        st->overflow = s->overflow;
        st->admitted = s->kv != NULL;
    }
    pthread_mutex_unlock(&e->mu);
    return s ? 0 : -1;
}

size_t mt_engine_take(mt_engine *e, uint32_t id, uint8_t *buf, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&e->mu);
    sess *s = find(e, id);
    if (s) {
        n = s->ob_len < cap ? s->ob_len : cap;
        memcpy(buf, s->ob + s->ob_head, n);
        s->ob_head += n;
        s->ob_len -= n;
        if (s->ob_len == 0)
            s->ob_head = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

void mt_engine_drain(mt_engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->dead)
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
    int a = 0, p = 0;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        if (e->s[i]->dead)
            continue;
        a += e->s[i]->state == S_ACTIVE;
        p += e->s[i]->state == S_PENDING;
    }
    pthread_mutex_unlock(&e->mu);
    if (active)
        *active = a;
    if (pending)
        *pending = p;
}

/* ---- per-frame lines ------------------------------------------------------ */

static void frame_line(mt_engine *e, strbuf *b, const sess *s,
                       const in_entry *q, int fill, uint64_t t_start,
                       uint64_t t_ready, int met)
{
    char buf[512];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_u64(&w, "frame", q->seq);
    mt_ll_u64(&w, "session", s->id);
    mt_ll_f(&w, "t", (double)(t_ready - e->t0) / 1e9, 3);
    mt_ll_int(&w, "fill", fill);
    mt_ll_f(&w, "latency_ms", (double)(t_ready - q->t_arrive) / 1e6, 3);
    if (!fill) {
        mt_ll_f(&w, "wait_ms", (double)(t_start - q->t_arrive) / 1e6, 3);
        mt_ll_f(&w, "compute_ms", (double)(t_ready - t_start) / 1e6, 3);
    }
    mt_ll_int(&w, "met", met);
    if (mt_ll_end(&w) > 0)
        sb_add(b, buf);
}

/* ---- FILL deadlines (I/O thread) ------------------------------------------ */

uint64_t mt_engine_fill_due(mt_engine *e, uint64_t now)
{
    uint64_t next = 0;
    if (!e->o.fill)
        return 0;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->dead || s->state != S_ACTIVE)
            continue;
        for (int j = 0; j < s->qlen; j++) {
            int idx = (s->qhead + j) % s->qcap;
            in_entry *q = &s->q[idx];
            if (q->answered)
                continue;
            if (q->deadline <= now) {
                mt_frame f = {0};
                f.type = MT_FRAME_AUDIO;
                f.flags = MT_FLAG_FILL;
                f.session = s->id;
                f.seq = q->seq;
                f.t_send = now;
                f.t_arrive = q->t_arrive;
                f.t_ready = now;
                f.length = (uint32_t)e->fs * 2;
                f.payload = (const uint8_t *)e->silence;
                q->answered = 1;
                if (push_frame(e, s, &f))
                    e->c_fill++;
                else
                    e->c_miss++;
                e->c_answered++;
                if (e->o.frame_lines)
                    frame_line(e, &e->fill_lines, s, q, 1, now, now, 0);
            } else {
                if (!next || q->deadline < next)
                    next = q->deadline;
                break;        /* deadlines grow along the queue */
            }
        }
        maybe_end(e, s);
    }
    pthread_mutex_unlock(&e->mu);
    sb_flush(e, &e->fill_lines);
    return next;
}

/* ---- the tick (tick thread) ----------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pctl(const double *v, int n, double q)
{
    if (n <= 0)
        return 0;
    int k = (int)(q * n + 0.999999) - 1;
    if (k < 0)
        k = 0;
    if (k >= n)
        k = n - 1;
    return v[k];
}

/* The newest session holding KV blocks and not in this round: the
 * preemption victim (may be s itself). */
static sess *victim(mt_engine *e)
{
    sess *v = NULL;
    for (int i = 0; i < e->ns; i++) {
        sess *c = e->s[i];
        if (c->dead || !c->kv || c->kv->nblocks == 0 || c->in_round)
            continue;
        if (!v || c->order > v->order)
            v = c;
    }
    return v;
}

/* Makes room for s's next position. 0 ready (s->prefill says whether its
 * history must be recomputed first), -1 waits this tick. */
static int make_room(mt_engine *e, sess *s)
{
    const mt_kv_params *p = mt_kv_pool_params(e->pool);
    s->prefill = 0;
    if (s->kv->released) {
        /* preempted earlier: the whole history plus this position */
        if (mt_kv_reserve(e->pool, s->kv, s->hist_n + 1) != 0)
            return -1;
        s->prefill = s->hist_n > 0;
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
                e->c_preempted++;
            }
            return -1;
        }
        mt_kv_release(e->pool, v->kv);
        e->c_preempted++;
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

/* Sessions with a frame that arrived before this tick still queued: what
 * a catch-up round would step. */
static int count_behind(mt_engine *e, uint64_t t_tick)
{
    int n = 0;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (!s->dead && s->state == S_ACTIVE && s->qlen > 0 &&
            s->q[s->qhead].t_arrive <= t_tick)
            n++;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* One round: builds the batch (under the lock), computes (without it),
 * delivers (under it). round 0 takes every session with an input waiting;
 * later rounds only sessions whose next input arrived before t_tick; at
 * most max_rows sessions.
 * Returns sessions stepped, or -1 on a decoder error. */
static int run_round(mt_engine *e, int round, int max_rows, uint64_t t_tick,
                     double *comp_ms, double *step_only_ms, char *err,
                     size_t errlen)
{
    const mt_kv_params *kp = mt_kv_pool_params(e->pool);
    int keep_hist = kp->policy == MT_KV_FULL && e->o.on_full == MT_ONFULL_PREEMPT;
    int B = 0;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++)
        e->s[i]->in_round = 0;
    for (int i = 0; i < e->ns && B < max_rows; i++) {
        sess *s = e->s[i];
        if (s->dead || s->state != S_ACTIVE || s->qlen == 0)
            continue;
        in_entry *q = &s->q[s->qhead];
        if (round > 0 && q->t_arrive > t_tick)
            continue;
        if (make_room(e, s) != 0)
            continue;
        s->in_round = 1;
        s->inflight = 1;
        e->rows[B].s = s;
        e->rows[B].qidx = s->qhead;
        e->rows[B].epoch = s->epoch;
        memcpy(e->pcm_in + (size_t)B * (size_t)e->fs,
               s->qpcm + (size_t)s->qhead * (size_t)e->fs, (size_t)e->fs * 2);
        B++;
    }
    pthread_mutex_unlock(&e->mu);
    if (B == 0)
        return 0;

    int rc = 0;
    uint64_t t_start = mt_now_ns();
    /* recompute preempted histories first (the vLLM recompute path) */
    for (int b = 0; b < B && rc == 0; b++) {
        sess *s = e->rows[b].s;
        if (!s->prefill)
            continue;
        mt_step_io io = {0};
        io.pcm_in = s->hist;
        if (mt_decoder_prefill(e->dec, s->kv, (int)s->hist_n, &io, err, errlen) != 0)
            rc = -1;
        s->prefill = 0;
    }
    uint64_t t_step = mt_now_ns();
    mt_kv_seq *seqs[e->o.max_sessions];
    for (int b = 0; b < B; b++)
        seqs[b] = e->rows[b].s->kv;
    if (rc == 0) {
        mt_step_io io = {0};
        io.pcm_in = e->pcm_in;
        io.pcm_out = e->pcm_out;
        rc = mt_decoder_step(e->dec, B, seqs, &io, err, errlen);
    }
    uint64_t t_ready = mt_now_ns();
    *comp_ms += (double)(t_ready - t_start) / 1e6;
    *step_only_ms += (double)(t_ready - t_step) / 1e6;

    pthread_mutex_lock(&e->mu);
    for (int b = 0; b < B; b++) {
        sess *s = e->rows[b].s;
        s->inflight = 0;
        s->in_round = 0;
        if (s->dead) {
            remove_sess(e, s);
            continue;
        }
        if (e->rows[b].epoch != s->epoch || s->state != S_ACTIVE)
            continue;           /* queue thrown away meanwhile */
        if (rc != 0) {
            drop_queue(e, s);
            push_reason(e, s, MT_FRAME_ERROR, "server: decoder step failed");
            s->state = S_ENDED;
            continue;
        }
        in_entry *q = &s->q[s->qhead];
        const int16_t *out = e->pcm_out + (size_t)b * (size_t)e->fs;
        if (keep_hist && append_hist(e, s, s->qpcm + (size_t)s->qhead * (size_t)e->fs) != 0) {
            /* cannot keep history: preemption would lose it; end cleanly */
            drop_queue(e, s);
            push_reason(e, s, MT_FRAME_ERROR, "server out of memory");
            s->state = S_ENDED;
            continue;
        }
        if (e->nlat < e->latcap)
            e->lat[e->nlat++] = (double)(t_ready - q->t_arrive) / 1e6;
        if (!q->answered && e->o.fill && t_ready > q->deadline) {
            /* FILL mode: a real output not ready by the deadline is never
             * sent; the FILL goes now (the I/O thread was about to) */
            mt_frame f = {0};
            f.type = MT_FRAME_AUDIO;
            f.flags = MT_FLAG_FILL;
            f.session = s->id;
            f.seq = q->seq;
            f.t_send = f.t_ready = mt_now_ns();
            f.t_arrive = q->t_arrive;
            f.length = (uint32_t)e->fs * 2;
            f.payload = (const uint8_t *)e->silence;
            q->answered = 1;
            if (push_frame(e, s, &f))
                e->c_fill++;
            else
                e->c_miss++;
            e->c_answered++;
            if (e->o.frame_lines)
                frame_line(e, &e->tick_lines, s, q, 1, f.t_ready, f.t_ready, 0);
        }
        if (!q->answered) {
            int met = t_ready <= q->deadline;
            mt_frame f = {0};
            f.type = MT_FRAME_AUDIO;
            f.session = s->id;
            f.seq = q->seq;
            f.t_send = mt_now_ns();
            f.t_arrive = q->t_arrive;
            f.t_start = t_start;
            f.t_ready = t_ready;
            f.length = (uint32_t)e->fs * 2;
            f.payload = (const uint8_t *)out;
            if (push_frame(e, s, &f)) {
                e->c_out++;
                e->c_met_real += met;
            } else {
                e->c_miss++;
            }
            e->c_answered++;
            if (e->o.frame_lines)
                frame_line(e, &e->tick_lines, s, q, 0, t_start, t_ready, met);
        }
        s->qhead = (s->qhead + 1) % s->qcap;
        s->qlen--;
        maybe_end(e, s);
    }
    pthread_mutex_unlock(&e->mu);
    return rc == 0 ? B : -1;
}

int mt_engine_tick(mt_engine *e, int64_t tick, uint64_t t_tick,
                   char *err, size_t errlen)
{
    uint64_t t_begin = mt_now_ns();
    double comp_ms = 0, step_ms_only = 0;
    int stepped = 0, rc = 0;
    e->nlat = 0;
    int max_rows = e->o.max_sessions;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        uint64_t r0 = mt_now_ns();
        int n = run_round(e, round, max_rows, t_tick, &comp_ms, &step_ms_only,
                          err, errlen);
        if (n < 0) {
            rc = -1;
            break;
        }
        stepped += n;
        if (n == 0 || !e->o.catch_up)
            break;
        /* A catch-up round steps sessions still behind (a frame that
         * arrived before this tick still queued: a client phase-shifted
         * against the ticks, or every session after an overrun tick), as
         * many as fit before 15/16 of the period, costed from this round:
         * per row, plus a fixed eighth of it for the weights every round
         * reads whatever its batch. The rest catch up in later
         * ticks. Without it a single overrun leaves every session one
         * frame behind (late by a period) for good, near capacity where a
         * full second round never fits. */
        int behind = count_behind(e, t_tick);
        if (behind == 0)
            break;
        uint64_t now = mt_now_ns(), dur = now - r0;
        uint64_t per_row = dur / (uint64_t)n, fixed = dur / 8;
        uint64_t end = t_tick + e->o.frame_ns * 15 / 16;
        if (now + fixed + per_row > end)
            break;
        uint64_t fit = (end - now - fixed) / (per_row ? per_row : 1);
        max_rows = fit < (uint64_t)behind ? (int)fit : behind;
    }

    uint64_t now = mt_now_ns();
    mt_tick t;
    memset(&t, 0, sizeof t);
    pthread_mutex_lock(&e->mu);
    uint64_t oldest = 0;
    int active = 0, pending = 0;
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->dead)
            continue;
        active += s->state == S_ACTIVE;
        pending += s->state == S_PENDING;
        if (s->state == S_ACTIVE && s->qlen > 0) {
            uint64_t a = s->q[s->qhead].t_arrive;
            if (!oldest || a < oldest)
                oldest = a;
        }
    }
    qsort(e->lat, (size_t)e->nlat, sizeof(double), cmp_double);
    t.tick = tick;
    t.t = (double)(t_begin - e->t0) / 1e9;
    t.active = active;
    t.stepped = stepped;
    t.step_ms = comp_ms;
    t.late_ms = oldest && now > oldest ? (double)(now - oldest) / 1e6 : 0;
    t.p50_ms = pctl(e->lat, e->nlat, 0.50);
    t.p99_ms = pctl(e->lat, e->nlat, 0.99);
    t.in = e->c_in;
    t.out = e->c_out;
    t.fill = e->c_fill;
    t.kv_used = (int64_t)mt_kv_used_bytes(e->pool);
    t.kv_free = (int64_t)mt_kv_free_bytes(e->pool);
    t.pending = pending;
    t.admitted = e->admitted;
    t.rejected = e->rejected;
    t.preempted = e->c_preempted;
    t.naive_ms = step_ms_only;
    if (e->c_answered > 0) {
        t.naive_met = 100.0 * (double)(e->c_met_real + e->c_fill) / (double)e->c_answered;
        t.met = 100.0 * (double)e->c_met_real / (double)e->c_answered;
    } else {
        t.naive_met = 100.0;
        t.met = 100.0;
    }
    /* issue 22: every tick names its device; a simulated one also gives
     * the profile's prediction for the steps this tick ran */
    const char *sim_label = mt_decoder_sim_label(e->dec);
    snprintf(t.device, sizeof t.device, "%s",
             sim_label ? sim_label : mt_decoder_backend_name(e->dec));
    if (sim_label)
        mt_decoder_sim_take(e->dec, &t.sim_pred_ms, &t.sim_noise_ms);
    int64_t miss = e->c_miss;
    e->c_in = e->c_out = e->c_fill = e->c_miss = e->c_preempted = 0;
    e->c_met_real = e->c_answered = 0;
    pthread_mutex_unlock(&e->mu);

    sb_flush(e, &e->tick_lines);
    char line[MT_LL_MAX_LINE];
    long n = mt_tick_format(&t, line, sizeof line);
    if (n > 0 && (size_t)n + 32 < sizeof line) {
        /* extension key (parsers keep unknown keys): input frames that
         * ended as counted misses this tick */
        snprintf(line + n, sizeof line - (size_t)n, " miss=%lld", (long long)miss);
        if (e->o.line)
            e->o.line(e->o.line_ctx, line);
    }
    return rc;
}
