/* engine_outq.c: what leaves the engine: a session's queue of encoded
 * output frames (ACCEPT, AUDIO, TEXT, END, REJECT, ERROR), the ready list
 * that tells the I/O thread which sessions have output, the public calls
 * that hand the bytes over (mt_engine_take, mt_engine_take_swap,
 * mt_engine_take_ready, mt_engine_status), and the collected log lines.
 * Calls only engine_table.c (engine.c's top comment: the file map).
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"
#include "util/grow.h"

#include <stdlib.h>
#include <string.h>

/* ---- log lines, output frames -------------------------------------------- */

void eng_sb_add(strbuf *b, const char *line)
{
    size_t n = strlen(line);
    if (mt_grow(&b->p, &b->cap, b->len + n + 1, 1, 4096) != 0)
        return;                 /* a lost log line, never a crash */
    memcpy(b->p + b->len, line, n + 1);
    b->len += n + 1;            /* lines kept NUL-separated */
}

/* Emits collected lines (without the lock) and empties the buffer. */
void eng_sb_flush(mt_engine *e, strbuf *b)
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

/* An output's bytes: its AUDIO frame, and the TEXT frame beside it. */
size_t eng_frame_bytes(const mt_engine *e)
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

int eng_push_frame(mt_engine *e, sess *s, const mt_frame *f)
{
    size_t n = MT_FRAME_HEADER_SIZE + (size_t)f->length;
    mark_ready(e, s);     /* output, or an overflow: the caller looks */
    if (s->ob_len + n > s->ob_max) {
        s->overflow = 1;
        return 0;
    }
    if (s->ob_len + n > s->ob_cap) {
        size_t nc = s->ob_cap ? s->ob_cap * 2 : 4 * eng_frame_bytes(e);
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

void eng_push_ctl(mt_engine *e, sess *s, int type, uint16_t flags, const void *payload,
                     size_t len)
{
    mt_frame f = {0};
    f.type = (uint8_t)type;
    f.flags = flags;
    f.session = s->id;
    f.t_send = eng_now(e);
    f.length = (uint32_t)len;
    f.payload = payload;
    eng_push_frame(e, s, &f);
}

void eng_push_reason(mt_engine *e, sess *s, int type, uint16_t flags, const char *reason)
{
    size_t n = strlen(reason);
    if (n > MT_REASON_MAX)
        n = MT_REASON_MAX;
    /* cut at a UTF-8 boundary */
    while (n > 0 && n < strlen(reason) && ((unsigned char)reason[n] & 0xC0) == 0x80)
        n--;
    eng_push_ctl(e, s, type, flags, reason, n);
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
    sess *s = eng_find(e, id);
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
    sess *s = eng_find(e, id);
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
    sess *s = eng_find(e, id);
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

int mt_engine_take_ready(mt_engine *e, void **users, int cap)
{
    int n = 0;
    pthread_mutex_lock(&e->mu);
    while (n < cap && e->nready > 0) {
        sess *s = eng_ht_get(e, e->ready[--e->nready]);
        if (!s)
            continue;
        s->ready = 0;
        if (s->state != S_GONE && s->user)
            users[n++] = s->user;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

