/* asr_session.c: one speech-to-text client's state (see asr_session.h):
 * audio cut into frames and paced to the model, Kyutai's word assembly on
 * the answers, markers, and the word-level latency. */
#include "serve/asr_session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"
#include "util/stats.h"
#include "wire/asr_msg.h"
#include "wire/frame.h"

#define ARRIVAL_RING 1024            /* frames whose arrival time is kept */
#define WORD_TEXT_MAX 1024           /* bytes of one word's text */
#define OUT_MAX (WORD_TEXT_MAX + 64) /* bytes of one message out */

typedef struct marker { uint64_t due; int64_t id; } marker;

struct mt_asr_sess {
    mt_asr_sess_opts o;
    double    frame_rate;           /* frames per second */
    float    *in;                   /* [MT_ASR_MSG_PCM] an Audio message's samples */
    int16_t  *part;                 /* [frame_samples] the frame being filled */
    int       npart;
    int16_t  *backlog;              /* [bcap, frame_samples] ring of whole frames */
    int       bcap, bhead, blen;
    uint64_t  formed;               /* whole frames made so far */
    uint64_t  sent;                 /* frames handed to the model */
    uint64_t  answered;             /* 1 + the last answered frame's index */
    uint64_t  arrival[ARRIVAL_RING];/* arrival time of frame k at [k % RING] */
    int       ready;
    /* word assembly (Kyutai's ItemState) */
    int32_t   word[MT_ASR_WORD_TOKENS];
    int       nword;
    int       unended;
    double    last_stop;
    marker    mk[MT_ASR_MARKERS];   /* ring, due times non-decreasing */
    int       mhead, mlen;
    /* the PRS frame waiting for its answer */
    float     prs[MT_PRS_MAX];
    int       nprs;
    uint32_t  prs_seq;
    /* figures */
    uint64_t  n_words, n_fill, n_lost;
    mt_pctl   word_lat, end_lat;
    uint8_t   out[OUT_MAX];
};

mt_asr_sess *mt_asr_sess_new(const mt_asr_sess_opts *o)
{
    mt_asr_sess *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->o = *o;
    s->frame_rate = (double)o->rate / o->frame_samples;
    s->bcap = (int)ceil(MT_ASR_BACKLOG_S * s->frame_rate);
    s->in = malloc(MT_ASR_MSG_PCM * sizeof *s->in);
    s->part = malloc((size_t)o->frame_samples * sizeof *s->part);
    s->backlog = malloc((size_t)s->bcap * (size_t)o->frame_samples * sizeof *s->backlog);
    if (!s->in || !s->part || !s->backlog) {
        mt_asr_sess_free(s);
        return NULL;
    }
    mt_pctl_reset(&s->word_lat);
    mt_pctl_reset(&s->end_lat);
    return s;
}

void mt_asr_sess_free(mt_asr_sess *s)
{
    if (!s)
        return;
    if (s->o.log && s->ready)
        mt_logf(s->o.log, s->o.log_ctx, "asr: %s: %llu frames, %llu answered, %llu FILL, "
                "%llu not answered; %llu words, word latency p50 %.0f ms p99 %.0f ms, "
                "end-of-word latency p50 %.0f ms p99 %.0f ms", s->o.who ? s->o.who : "client",
                (unsigned long long)s->formed, (unsigned long long)s->answered,
                (unsigned long long)s->n_fill, (unsigned long long)s->n_lost,
                (unsigned long long)s->n_words,
                (double)mt_pctl_quantile(&s->word_lat, 0.5) / 1e6,
                (double)mt_pctl_quantile(&s->word_lat, 0.99) / 1e6,
                (double)mt_pctl_quantile(&s->end_lat, 0.5) / 1e6,
                (double)mt_pctl_quantile(&s->end_lat, 0.99) / 1e6);
    free(s->in);
    free(s->part);
    free(s->backlog);
    free(s);
}

static void emit(mt_asr_sess *s, const mt_asr_out *o)
{
    if (!o->over)
        s->o.send(s->o.ctx, o->p, o->len);
}

static mt_asr_out out_buf(mt_asr_sess *s)
{
    mt_asr_out o = { .p = s->out, .cap = sizeof s->out };
    return o;
}

void mt_asr_sess_error(mt_asr_sess *s, const char *why)
{
    mt_asr_out o = out_buf(s);
    mt_asr_out_error(&o, why);
    emit(s, &o);
}

/* ---- audio in ------------------------------------------------------------- */

/* Frames to the model while it has room (admitted, under MT_ASR_INFLIGHT). */
static void pump(mt_asr_sess *s)
{
    while (s->ready && s->blen > 0 && s->sent - s->answered < MT_ASR_INFLIGHT) {
        s->o.frame(s->o.ctx, s->backlog + (size_t)s->bhead * (size_t)s->o.frame_samples);
        s->bhead = (s->bhead + 1) % s->bcap;
        s->blen--;
        s->sent++;
    }
}

static int16_t to_s16(float x)
{
    if (x >= 1.0f)
        return 32767;
    if (x <= -1.0f)
        return -32768;
    long v = lrintf(x * 32768.0f);
    return (int16_t)(v > 32767 ? 32767 : v);
}

/* n samples into the frame being filled; each whole frame to the backlog.
 * 0, or -1 when the backlog is full. */
static int add_pcm(mt_asr_sess *s, const float *pcm, size_t n, uint64_t now)
{
    for (size_t i = 0; i < n; i++) {
        s->part[s->npart++] = to_s16(pcm[i]);
        if (s->npart < s->o.frame_samples)
            continue;
        if (s->blen >= s->bcap)
            return -1;
        int at = (s->bhead + s->blen) % s->bcap;
        memcpy(s->backlog + (size_t)at * (size_t)s->o.frame_samples, s->part,
               (size_t)s->o.frame_samples * sizeof *s->part);
        s->blen++;
        s->arrival[s->formed % ARRIVAL_RING] = now;
        s->formed++;
        s->npart = 0;
    }
    return 0;
}

int mt_asr_sess_client(mt_asr_sess *s, const uint8_t *p, size_t n, uint64_t now, char *why,
                       size_t whylen)
{
    mt_asr_in m;
    if (mt_asr_in_decode(p, n, &m, s->in, MT_ASR_MSG_PCM, why, whylen) != 0)
        return -1;
    if (m.type == MT_ASR_IN_MARKER) {
        if (s->mlen >= MT_ASR_MARKERS) {
            mt_set_err(why, whylen, "more than %d markers waiting", MT_ASR_MARKERS);
            return -1;
        }
        marker *k = &s->mk[(s->mhead + s->mlen++) % MT_ASR_MARKERS];
        k->due = s->formed + (uint64_t)s->o.delay;
        k->id = m.marker_id;
    } else if (m.type == MT_ASR_IN_AUDIO) {
        if (add_pcm(s, s->in, m.n_pcm, now) != 0) {
            mt_set_err(why, whylen, "audio more than %d s ahead of the model: send it no "
                       "faster than it is transcribed", MT_ASR_BACKLOG_S);
            return -1;
        }
        pump(s);
    }
    return 0;   /* Init: nothing (their batched mode's) */
}

void mt_asr_sess_ready(mt_asr_sess *s)
{
    mt_asr_out o = out_buf(s);
    mt_asr_out_ready(&o);
    emit(s, &o);
    s->ready = 1;
    pump(s);
}

/* ---- answers: words, markers ---------------------------------------------- */

/* The word's text: the pieces joined (the tokenizer gives U+2581 as a
 * space already; a raw one is turned into one here too), leading spaces
 * dropped, as their tokenizer's decode does. */
static size_t word_text(mt_asr_sess *s, char *t, size_t cap)
{
    size_t len = 0;
    for (int i = 0; i < s->nword; i++) {
        char idbuf[16];
        const char *pc = s->o.piece ? s->o.piece(s->o.piece_ctx, s->word[i]) : NULL;
        if (!pc) {
            snprintf(idbuf, sizeof idbuf, "<%d>", (int)s->word[i]);
            pc = idbuf;
        }
        for (const char *c = pc; *c && len + 1 < cap; c++) {
            if ((uint8_t)c[0] == 0xe2 && (uint8_t)c[1] == 0x96 && (uint8_t)c[2] == 0x81) {
                if (len > 0)
                    t[len++] = ' ';
                c += 2;
            } else if (*c != ' ' || len > 0) {
                t[len++] = *c;
            }
        }
    }
    t[len] = '\0';
    mt_utf8_sanitize(t);    /* a piece cut at the cap, or a byte piece */
    return len;
}

/* The latency from the arrival of the frame holding audio time sec. */
static void latency(mt_asr_sess *s, mt_pctl *p, double sec, uint64_t now)
{
    uint64_t k = (uint64_t)(sec * s->frame_rate);
    if (k < s->formed && s->formed - k <= ARRIVAL_RING) {
        uint64_t a = s->arrival[k % ARRIVAL_RING];
        mt_pctl_add(p, now > a ? now - a : 0);
    }
}

/* Kyutai's word assembly for one step's token. */
static void assemble(mt_asr_sess *s, uint64_t step, int32_t tok, uint64_t now)
{
    if (step < (uint64_t)s->o.delay)
        return;
    mt_asr_out o = out_buf(s);
    if (tok == 0 || tok == 3) {
        if (s->nword > 0) {
            char t[WORD_TEXT_MAX];
            size_t len = word_text(s, t, sizeof t);
            mt_asr_out_word(&o, t, len, s->last_stop);
            emit(s, &o);
            latency(s, &s->word_lat, s->last_stop, now);
            s->n_words++;
            s->nword = 0;
            s->unended = 1;
        }
    } else if (s->nword < MT_ASR_WORD_TOKENS) {
        s->word[s->nword++] = tok;
    }
    if (tok == 0) {
        double stop = (double)(step - (uint64_t)s->o.delay) / s->frame_rate;
        if (s->unended) {
            s->unended = 0;
            mt_asr_out_end_word(&o, stop);
            emit(s, &o);
            latency(s, &s->end_lat, stop, now);
        }
        s->last_stop = stop;
    }
}

void mt_asr_sess_prs(mt_asr_sess *s, uint32_t seq, const float *prs, int n)
{
    s->nprs = n < 0 ? 0 : n > MT_PRS_MAX ? MT_PRS_MAX : n;
    memcpy(s->prs, prs, (size_t)s->nprs * sizeof *prs);
    s->prs_seq = seq;
}

/* Step {step_idx, prs, buffered_pcm} before the words of the step that
 * answers frame seq, when its PRS frame came. */
static void send_step(mt_asr_sess *s, uint32_t seq, uint64_t step)
{
    if (s->nprs == 0 || s->prs_seq != seq)
        return;
    uint64_t fs = (uint64_t)s->o.frame_samples;
    uint64_t have = s->formed * fs + (uint64_t)s->npart, done = step * fs;
    mt_asr_out o = out_buf(s);
    mt_asr_out_step(&o, step, s->prs, (size_t)s->nprs, have > done ? have - done : 0);
    emit(s, &o);
}

void mt_asr_sess_answer(mt_asr_sess *s, uint32_t seq, int fill, const int32_t *ids, int n,
                        uint64_t now)
{
    uint64_t step = (uint64_t)seq + 1;
    if (step <= s->answered || seq >= s->sent)
        return;                       /* not an answer to a frame of ours */
    s->n_lost += step - 1 - s->answered;  /* frames the server dropped */
    s->answered = step;
    if (!fill)
        send_step(s, seq, step);
    s->nprs = 0;
    if (fill)
        s->n_fill++;
    else if (n > 0)
        assemble(s, step, ids[0], now);
    while (s->mlen > 0 && s->mk[s->mhead].due <= step) {
        mt_asr_out o = out_buf(s);
        mt_asr_out_marker(&o, s->mk[s->mhead].id);
        emit(s, &o);
        s->mhead = (s->mhead + 1) % MT_ASR_MARKERS;
        s->mlen--;
    }
    pump(s);
}
