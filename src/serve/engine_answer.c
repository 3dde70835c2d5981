/* engine_answer.c: the answer to one input: the model's output (AUDIO or
 * TEXT), a FILL of silence past the deadline, the TEXT token beside the
 * audio, and the per-frame line of each (opts.frame_lines). Counts every
 * answer in the tick's figures. Under e->mu; calls only engine_outq.c.
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"

#include <stdio.h>
#include <string.h>

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
        eng_sb_add(b, buf);
}

/* Answers q with FILL (silence) at time t: the one place a FILL frame is
 * built, for the I/O thread's deadlines and for a step that ended past one.
 * Under the lock. */
void eng_send_fill(mt_engine *e, sess *s, in_entry *q, uint64_t t,
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
    if (eng_push_frame(e, s, &f))
        e->c.fill++;
    else
        e->c.miss++;
    e->c.answered++;
    if (e->o.frame_lines)
        frame_line(e, lines, s, q, 1, t, t, 0);
}

/* Answers q with the model's output pcm, computed from t_start to t_ready.
 * Under the lock. */
void eng_send_output(mt_engine *e, sess *s, in_entry *q, const int16_t *pcm,
                        int32_t text, uint64_t t_start, uint64_t t_ready, strbuf *lines)
{
    int met = t_ready <= q->deadline;
    uint8_t tok[4] = { (uint8_t)text, (uint8_t)(text >> 8), (uint8_t)(text >> 16),
                       (uint8_t)(text >> 24) };
    mt_frame f = {0};
    f.type = MT_FRAME_AUDIO;
    f.session = s->id;
    f.seq = q->seq;
    f.t_send = eng_now(e);
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
    if (eng_push_frame(e, s, &f)) {
        e->c.out++;
        e->c.met_real += met;
    } else {
        e->c.miss++;
    }
    e->c.answered++;
    if (e->o.frame_lines)
        frame_line(e, lines, s, q, 0, t_start, t_ready, met);
}

/* A frame beside q's answer (its text, its extra heads' prs): not an
 * answer, so not counted. Under the lock. */
static void send_beside(mt_engine *e, sess *s, const in_entry *q, uint8_t type,
                        const uint8_t *payload, uint32_t length)
{
    mt_frame f = {0};
    f.type = type;
    f.session = s->id;
    f.seq = q->seq;
    f.t_send = eng_now(e);
    f.t_arrive = q->t_arrive;
    f.length = length;
    f.payload = payload;
    eng_push_frame(e, s, &f);
}

/* The text token that goes with q's output (opts.speech), beside it; the
 * transcript has every token the model made, FILL or not. Under the lock. */
void eng_send_text(mt_engine *e, sess *s, const in_entry *q, int32_t tok)
{
    uint8_t pl[4] = { (uint8_t)tok, (uint8_t)(tok >> 8), (uint8_t)(tok >> 16),
                      (uint8_t)(tok >> 24) };
    send_beside(e, s, q, MT_FRAME_TEXT, pl, 4);
}

/* The extra heads' probabilities of q's step (Kyutai's Step prs), just
 * before its answer, to a session that asked (MT_FLAG_PRS). Under the
 * lock. */
void eng_send_prs(mt_engine *e, sess *s, const in_entry *q, const float *prs, int n)
{
    uint8_t pl[4 * MT_PRS_MAX];   /* [n] f32 LE */
    if (n < 1 || n > MT_PRS_MAX)
        return;
    for (int j = 0; j < n; j++)
        mt_frame_put_f32(pl + 4 * j, prs[j]);
    send_beside(e, s, q, MT_FRAME_PRS, pl, 4 * (uint32_t)n);
}
