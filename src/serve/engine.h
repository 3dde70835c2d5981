/* engine.h: mt-serve's tick engine: sessions, their bounded input and
 * output queues, deadlines, the batched step once per tick, FILL frames,
 * full-mode preemption and recompute, and the figures of the latency lines.
 *
 * No sockets here: the server (server*.c) feeds decoded input frames in and
 * copies encoded output bytes out. Two threads use one engine: the I/O
 * thread (input, output, FILL deadlines) and the tick thread
 * (mt_engine_tick). Every call takes the engine's one mutex, which is never
 * held while the decoder computes, so I/O and FILL frames go on during a
 * long step.
 *
 * Every input frame that enters a session ends as exactly one output frame
 * (real, or FILL) or one counted miss (dropped on a full input queue, or
 * lost with its session): the counters in the tick records add up.
 *
 * Library code: it prints nothing; lines go to the caller's callback.
 */
#ifndef MT_ENGINE_H
#define MT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "decode/decoder.h"
#include "speech/speech.h"
#include "wire/frame.h"
#include "wire/latline.h"

typedef enum mt_on_full { MT_ONFULL_PREEMPT = 0, MT_ONFULL_STALL = 1 } mt_on_full;

typedef struct mt_engine_opts {
    uint64_t   frame_ns;      /* tick period */
    uint64_t   deadline_ns;   /* an input's output is due this long after
                                 the input arrived (FILL and met figures) */
    int        fill;          /* send FILL for frames past their deadline */
    mt_on_full on_full;       /* full policy: what MT_KV_EXHAUSTED does */
    int        max_sessions;  /* admitted at once (hard cap) */
    int        in_queue;      /* input frames kept per session */
    int        out_queue;     /* output frames buffered per session before
                                 the client counts as not reading */
    int        drop_when_full;/* 1: a frame over in_queue is dropped (a
                                 counted miss); 0: the caller applies
                                 backpressure with mt_engine_in_space */
    int        frame_lines;   /* --latency=frames: one line per frame */
    int        catch_up;      /* extra rounds in a tick for sessions with
                                 more than one input waiting, while the
                                 tick has headroom (half a period) */
    /* Where latency lines go (tick, frame records). Called from either
     * thread, never with the engine lock held. */
    void     (*line)(void *ctx, const char *line);
    void      *line_ctx;
    /* Each tick record as a struct too (the metrics, serve/metrics.h), just
     * after its line; NULL: none. Tick thread, engine lock not held. */
    void     (*tick_rec)(void *ctx, const mt_tick *t);
    void      *tick_rec_ctx;
    /* The engine's clock in ns (every timestamp, deadline and duration it
     * records comes from it); NULL: CLOCK_MONOTONIC (mt_clock_ns). Tests pass
     * one they advance themselves. Called from either thread, with the
     * engine lock held or not. */
    uint64_t (*clock)(void *ctx);
    void      *clock_ctx;
    /* Kyutai's models (speech/speech.h): when set, every batch goes
     * through this stage (Mimi encode, the LM frame on the decoder, Mimi
     * decode) instead of the model's own audio adapter, the format is the
     * codec's, each output AUDIO frame has a TEXT frame beside it once the
     * model has text (a speech-to-text model, without audio out: the
     * answer is the TEXT frame itself, ACCEPT says MT_FLAG_TEXT_ONLY),
     * and each session's generator is seeded with speech_seed. Needs a window policy or --on-full stall (a preempted
     * session cannot be recomputed through the codec). Not owned. */
    mt_speech *speech;
    uint64_t   speech_seed;
} mt_engine_opts;

void mt_engine_opts_default(mt_engine_opts *o);

typedef struct mt_engine mt_engine;

/* t0: the server's start (on the engine's clock), the origin of `t`. */
int  mt_engine_create(const mt_engine_opts *o, mt_decoder *dec, uint64_t t0,
                      mt_engine **out, char *err, size_t errlen);
void mt_engine_free(mt_engine *e);

/* The format this engine serves (model rate and frame, mono PCM s16le). */
void mt_engine_format(const mt_engine *e, mt_hello *h);
/* Window policy: KV bytes one session holds for its life; full: 0. */
size_t mt_engine_session_bound(const mt_engine *e);

/* A new session, waiting for admission. Returns its id (> 0), or 0 out
 * of memory. _for: with the caller's pointer for it (its connection),
 * which mt_engine_take_ready hands back. */
uint32_t mt_engine_session_new(mt_engine *e);
uint32_t mt_engine_session_new_for(mt_engine *e, void *user);
/* The session's sampling seed (HELLO's 64-bit seed, when not 0), in place of
 * opts.speech_seed; before mt_engine_admit. Unknown ids: nothing. */
void mt_engine_set_seed(mt_engine *e, uint32_t id, uint64_t seed);
/* The session takes PRS frames (HELLO's MT_FLAG_PRS): with each answer a
 * speech-to-text model's extra heads give (mt_speech_prs), a PRS frame
 * just before it; before mt_engine_admit. Unknown ids: nothing. */
void mt_engine_set_prs(mt_engine *e, uint32_t id);
/* The session's sampling from HELLO's sampling block (h->smp_mask's
 * fields over the speech stage's defaults; nothing without opts.speech
 * or a block); before mt_engine_admit. Unknown ids: nothing. */
void mt_engine_set_sampling(mt_engine *e, uint32_t id, const mt_hello *h);
/* "sampling text temperature T top-k K, audio temperature T top-k K,
 * seed N" of the session, for its start line: 0, or -1 (no speech stage,
 * no such session; out then empty). */
int  mt_engine_sampling_desc(mt_engine *e, uint32_t id, char *out, size_t cap);
/* Admits: opens the KV sequence (window: the whole bound, or refused) and
 * queues ACCEPT. 0; or, with why (the caller then rejects), -1 where a
 * later try may pass (the server full now) and MT_ENGINE_REFUSED_FINAL
 * where it cannot (one session's bound larger than the whole pool). */
#define MT_ENGINE_REFUSED_FINAL (-2)
int  mt_engine_admit(mt_engine *e, uint32_t id, char *why, size_t whylen);
/* Queues REJECT (reason; final: MT_FLAG_FINAL, retrying cannot help) and
 * ends the session. */
void mt_engine_reject(mt_engine *e, uint32_t id, const char *reason, int final);
/* An AUDIO input frame (already decoded, length checked by the caller or
 * here). Returns 0 queued, 1 dropped (input queue full: a counted miss),
 * -1 not acceptable (why filled: the caller fails the session). */
int  mt_engine_input(mt_engine *e, uint32_t id, const mt_frame *f,
                     uint64_t t_arrive, char *why, size_t whylen);
/* Free input slots (for backpressure); 0 for unknown sessions. */
int  mt_engine_in_space(mt_engine *e, uint32_t id);
/* The client sent END: once its queued inputs are answered, END is queued. */
void mt_engine_input_end(mt_engine *e, uint32_t id);
/* Malformed input or a server failure: unanswered inputs become misses,
 * ERROR (reason) is queued, the session ends. */
void mt_engine_fail(mt_engine *e, uint32_t id, const char *reason);
/* Load shedding (a controller's `shed ID reason`, issue 24): an admitted
 * session is ended now because capacity fell under the admitted load.
 * Its unanswered inputs become counted misses (inputs a FILL already
 * answered are not counted twice), END is queued with the reason as its
 * payload (mt-frame(5): the client tells a shed session from one it
 * ended), and the shed total of the tick lines grows by one. 0 shed, or
 * -1 (unknown, not yet admitted, or already ended: nothing changes). */
int  mt_engine_shed(mt_engine *e, uint32_t id, const char *reason);
/* The connection is gone: the session is dropped (unanswered inputs are
 * misses); its id becomes unknown. */
void mt_engine_close(mt_engine *e, uint32_t id);

typedef struct mt_sess_status {
    int    known;       /* the id names a session */
    size_t out_bytes;   /* encoded bytes waiting to be sent */
    int    ended;       /* nothing more will be queued (END/REJECT/ERROR
                           queued): close once out_bytes is 0 */
    int    overflow;    /* the output queue overflowed: the client does
                           not read */
    int    admitted;
} mt_sess_status;

int    mt_engine_status(mt_engine *e, uint32_t id, mt_sess_status *st);
/* Copies up to cap queued output bytes and removes them from the queue. */
size_t mt_engine_take(mt_engine *e, uint32_t id, uint8_t *buf, size_t cap);
/* A caller's output buffer that mt_engine_take_swap may trade for the
 * session's own: p[off .. off+len) of cap bytes (p may be NULL, cap 0).
 * The caller owns whatever p holds and frees it. */
typedef struct mt_outbuf {
    uint8_t *p;
    size_t   cap, off, len;
} mt_outbuf;

/* The output and the session's status under one lock, without a copy,
 * for a caller whose buffer *b is empty (its len is set to 0 first).
 * When at most limit bytes are queued, the session's buffer becomes *b
 * and *b's old one the session's (empty); when more are, limit bytes are
 * copied into *b (grown to limit when it is smaller; out of memory: as
 * many as it holds). Returns the bytes now in *b (b->p + b->off); st is
 * the status after the take (zeroed for unknown ids). */
size_t mt_engine_take_swap(mt_engine *e, uint32_t id, mt_outbuf *b, size_t limit,
                           mt_sess_status *st);

/* Sends FILL for every input past its deadline (if fill is on). Returns
 * the next deadline in ns (0: none). The inputs wait in one FIFO in
 * arrival order, which is their deadline order: a call costs the inputs
 * that are due (or answered since), not the sessions. */
uint64_t mt_engine_fill_due(mt_engine *e, uint64_t now);

/* The sessions whose output queue took something (a frame, or an
 * overflow) since the last call, or was made ready: up to cap of their
 * user pointers (mt_engine_session_new_for; sessions without one are
 * skipped), each once, taken off the list. Returns how many; call again
 * while it returns cap. A closed session is never handed back. For the
 * I/O thread, after the ticker's wake and after its own calls (FILL,
 * admission): it writes to these and no other connection. */
int  mt_engine_take_ready(mt_engine *e, void **users, int cap);

/* One tick: the batch (and catch-up rounds), outputs, the tick record
 * (written through the line callback). tick: the tick's index; t_tick: its
 * scheduled start. 0, or -1 with err on a decoder failure (the sessions of
 * that batch are failed; the engine goes on). */
int  mt_engine_tick(mt_engine *e, int64_t tick, uint64_t t_tick,
                    char *err, size_t errlen);

/* fn(ctx) is called on the tick thread (engine lock not held) after a
 * round whose outputs are on the ready list when a catch-up round follows
 * in the same tick, so that the caller's I/O thread writes them then: they
 * do not wait out the later rounds' steps (the tick's end is the caller's
 * own wake). Set before the first tick; NULL: none. */
void mt_engine_set_round_out(mt_engine *e, void (*fn)(void *ctx), void *ctx);

/* The next tick is due in about MT_DECODER_WAKE_NS: wakes the decoder's
 * sleeping threads ahead of it when any session is active (an idle server
 * stays asleep). Called by the thread that calls mt_engine_tick. */
void mt_engine_wake(mt_engine *e);

/* Drain: every session's input is considered ended. */
void mt_engine_drain(mt_engine *e);
/* Admitted sessions not yet ended, and sessions waiting for admission. */
void mt_engine_counts(mt_engine *e, int *active, int *pending);
/* Counts admissions decided by the caller (rejections before a session
 * reaches the engine's admit, e.g. format mismatch or draining). */
void mt_engine_count_rejected(mt_engine *e);

/* An input frame that arrived only in part (the stream ended inside it):
 * counted as an input and a miss in the next tick record. */
void mt_engine_count_lost_input(mt_engine *e);

/* The capacity this instance publishes (HAProxy's agent-check maxconn,
 * the tick line's limit=): the least of --max-sessions, the sessions held
 * plus what the KV pool can still hold for bounded sessions, and the last
 * `limit N` of the admission controller (mt_engine_set_limit; -1: none).
 * failed (may be NULL) gets "" or why a tick failed (the decoder): a
 * failed instance publishes down. Thread-safe. */
void mt_engine_set_limit(mt_engine *e, int limit);
int  mt_engine_published_limit(mt_engine *e, char *failed, size_t failedlen);


#endif
