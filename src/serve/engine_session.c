/* engine_session.c: a session's life (engine.c's drawing): created
 * (mt_engine_session_new), admitted with its KV sequence and input ring
 * (mt_engine_admit), rejected, failed, shed, ended once its input ended and
 * every input was answered (maybe_end), closed; and the counts the server
 * reads. Each public call takes e->mu once (the one-mutex rule).
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void drop_queue(mt_engine *e, sess *s);

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
    while (e->next_id == 0 || eng_ht_get(e, e->next_id))
        e->next_id++;
    s->id = e->next_id++;
    s->state = S_PENDING;          /* counted once it is in e->s */
    if (eng_ht_put(e, s) != 0) {
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
    sess *s = eng_find(e, id);
    if (s && s->state == S_PENDING)
        s->seed = seed;
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_set_prs(mt_engine *e, uint32_t id)
{
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    if (s && s->state == S_PENDING)
        s->want_prs = 1;
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_set_sampling(mt_engine *e, uint32_t id, const mt_hello *h)
{
    if (!e->o.speech || !h->smp_mask)
        return;
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
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
    sess *s = eng_find(e, id);
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
    sess *s = eng_find(e, id);
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
    size_t obmax = (size_t)e->o.out_queue * eng_frame_bytes(e) + 4 * (MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 64);
    /* four frames to start with (push_frame grows it) */
    size_t obcap = 4 * eng_frame_bytes(e) + 4 * (MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 64);
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
    eng_set_state(e, s, S_ACTIVE);
    e->admitted++;
    mt_hello h;
    mt_engine_format(e, &h);
    uint8_t pl[12 + MT_MODEL_NAME_MAX];
    long n = mt_hello_encode(&h, pl, sizeof pl);
    eng_push_ctl(e, s, MT_FRAME_ACCEPT, e->text_only ? MT_FLAG_TEXT_ONLY : 0, pl,
             n > 0 ? (size_t)n : 0);
    rc = 0;
out:
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void mt_engine_reject(mt_engine *e, uint32_t id, const char *reason, int final)
{
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    if (s && s->state == S_PENDING) {
        eng_push_reason(e, s, MT_FRAME_REJECT, final ? MT_FLAG_FINAL : 0, reason);
        eng_set_state(e, s, S_ENDED);
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

void mt_engine_input_end(mt_engine *e, uint32_t id)
{
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    if (s) {
        s->input_ended = 1;
        eng_maybe_end(e, s);
    }
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_fail(mt_engine *e, uint32_t id, const char *reason)
{
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    if (s && s->state != S_ENDED) {
        if (s->q)
            drop_queue(e, s);
        if (s->state == S_PENDING)
            e->rejected++;
        eng_push_reason(e, s, MT_FRAME_ERROR, 0, reason);
        eng_set_state(e, s, S_ENDED);
    }
    pthread_mutex_unlock(&e->mu);
}

int mt_engine_shed(mt_engine *e, uint32_t id, const char *reason)
{
    int rc = -1;
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    if (s && s->state == S_ACTIVE) {
        /* a row in the batch being stepped: deliver_row sees the state is
         * no longer S_ACTIVE and delivers nothing (its input is one of the
         * misses counted here) */
        drop_queue(e, s);
        eng_push_reason(e, s, MT_FRAME_END, 0, reason);
        eng_set_state(e, s, S_ENDED);
        e->shed++;
        rc = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void mt_engine_close(mt_engine *e, uint32_t id)
{
    pthread_mutex_lock(&e->mu);
    sess *s = eng_find(e, id);
    if (s) {
        if (s->q)
            drop_queue(e, s);
        if (s->state == S_PENDING)
            e->rejected++;    /* left before a decision: not admitted */
        eng_set_state(e, s, S_ENDED);
        if (s->in_batch)
            eng_set_state(e, s, S_GONE);    /* the tick thread frees it */
        else
            eng_remove_sess(e, s);
    }
    pthread_mutex_unlock(&e->mu);
}

void mt_engine_drain(mt_engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->state == S_GONE)
            continue;
        s->input_ended = 1;
        eng_maybe_end(e, s);
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
void eng_maybe_end(mt_engine *e, sess *s)
{
    if (s->state != S_ACTIVE || !s->input_ended || s->in_batch)
        return;
    for (int i = 0; i < s->qlen; i++)
        if (!s->q[(s->qhead + i) % s->qcap].answered)
            return;
    /* what is left was answered by FILL: the model need not consume it */
    s->qlen = 0;
    eng_push_ctl(e, s, MT_FRAME_END, 0, NULL, 0);
    eng_set_state(e, s, S_ENDED);
}

/* Ends s with ERROR (reason): its unanswered inputs become misses. */
void eng_end_with_error(mt_engine *e, sess *s, const char *reason)
{
    drop_queue(e, s);
    eng_push_reason(e, s, MT_FRAME_ERROR, 0, reason);
    eng_set_state(e, s, S_ENDED);
}

