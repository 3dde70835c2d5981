/* asr_session.h: one client of Kyutai's streaming speech-to-text protocol
 * (/api/asr-streaming on --ws), the state between its MessagePack messages
 * (wire/asr_msg.h) and the server's frame stream: no I/O of its own, the
 * gate (ws_gate.c) hands it bytes and answers and it calls back.
 *
 * Audio: the f32 samples of Audio messages are cut into the engine's
 * frames (s16, clipped to [-1, 1]) and queued; a frame goes to the model
 * (the `frame` callback) once the session is admitted and while fewer than
 * MT_ASR_INFLIGHT frames are unanswered, so the server steps it like any
 * session, in the tick's batch, and its catch-up rounds take a backlog
 * faster than real time as far as the tick has room. Audio sent faster
 * than that waits here (Kyutai's server buffers it too, unbounded): up to
 * MT_ASR_BACKLOG_S seconds ahead of the model, past which the session is
 * refused with an Error (a bound Kyutai's server does not have).
 *
 * Words: Kyutai's word assembly (moshi-core's asr.rs), on the text token of
 * each answered frame, step = the frame's index + 1: from step `delay`
 * (asr_delay_in_tokens) on, a token other than 0 (end of text padding,
 * a word boundary) and 3 (padding) joins the word being spelt; a 0 or a 3
 * ends it: Word {text, start_time = the last boundary's time}; a 0 is a
 * boundary at (step - delay) / frame rate: EndWord {stop_time} for a word
 * not yet ended. A frame answered by FILL, or dropped, has no token. A word
 * holds at most MT_ASR_WORD_TOKENS tokens (the rest are not spelt).
 *
 * Markers: a Marker is echoed once the model has stepped every whole frame
 * received before it plus `delay` more (their server's rule: the words of
 * the audio before it have then been said); at most MT_ASR_MARKERS wait.
 *
 * Steps: for a model with extra heads (voice activity) whose probabilities
 * the server gives (a PRS frame before the answer: mt_asr_sess_prs), each
 * answered frame's words are preceded by Step {step_idx, prs,
 * buffered_pcm}, as their server sends it (moshi-core's asr.rs: before
 * the step's words; none without extra heads): step_idx the frame's
 * index + 1 (their per-connection server's model step count), prs each
 * head's output 0, buffered_pcm the samples received and not yet stepped
 * (their batched server's, which counts its channel's buffer; their
 * per-connection one sends 0). A FILL answer has none.
 *
 * Latency: each Word's latency is the time from the arrival of the frame
 * holding the word's start to the Word's emission; each EndWord's from the
 * arrival of the frame at its stop time; both kept as percentiles and
 * logged when the session ends.
 */
#ifndef MT_ASR_SESSION_H
#define MT_ASR_SESSION_H

#include <stddef.h>
#include <stdint.h>

#define MT_ASR_INFLIGHT      4      /* frames unanswered at once */
#define MT_ASR_BACKLOG_S     30     /* seconds of audio queued here, at most */
#define MT_ASR_MARKERS       256    /* markers waiting, at most */
#define MT_ASR_WORD_TOKENS   64     /* tokens spelt into one word */
#define MT_ASR_MSG_PCM       65536  /* samples in one Audio message, at most */

typedef struct mt_asr_sess_opts {
    int    rate, frame_samples;     /* the engine's format */
    int    delay;                   /* asr_delay_in_tokens */
    /* the text of a token id, NULL when unknown (no tokenizer: "<id>") */
    const char *(*piece)(void *ctx, int id);
    void  *piece_ctx;
    void (*send)(void *ctx, const uint8_t *msg, size_t n);  /* one message out */
    void (*frame)(void *ctx, const int16_t *pcm);           /* one frame in */
    void (*log)(void *ctx, const char *msg);
    void  *ctx, *log_ctx;
    const char *who;                /* the peer, for the log */
} mt_asr_sess_opts;

typedef struct mt_asr_sess mt_asr_sess;

mt_asr_sess *mt_asr_sess_new(const mt_asr_sess_opts *o);
/* Logs the session's figures, then frees it. */
void mt_asr_sess_free(mt_asr_sess *s);

/* One client message (the payload of a binary WebSocket message) at time
 * now. 0, or -1 with the reason (then send it as an Error and close). */
int  mt_asr_sess_client(mt_asr_sess *s, const uint8_t *p, size_t n, uint64_t now,
                        char *why, size_t whylen);
/* The session is admitted: Ready, then the audio that waited. */
void mt_asr_sess_ready(mt_asr_sess *s);
/* The answer to frame seq: its text token ids (n 0 or 1; fill: a FILL,
 * no token), at time now. */
void mt_asr_sess_answer(mt_asr_sess *s, uint32_t seq, int fill, const int32_t *ids, int n,
                        uint64_t now);
/* The extra heads' probabilities prs[0..n) (n 1..MT_PRS_MAX) of the step
 * that answers frame seq: its Step message goes out with that answer. */
void mt_asr_sess_prs(mt_asr_sess *s, uint32_t seq, const float *prs, int n);
/* An Error message. */
void mt_asr_sess_error(mt_asr_sess *s, const char *why);

#endif
