/* engine_int.h: what the engine's files (src/serve/engine*.c) share and
 * nothing outside them includes: the session, the batch, the engine struct,
 * and the functions one file calls in another. The calls between the files
 * go one way (engine.c's top comment has the map); every function declared
 * here expects e->mu held unless its comment says otherwise (the one-mutex
 * rule, engine.c's top comment).
 */
#ifndef MT_SERVE_ENGINE_INT_H
#define MT_SERVE_ENGINE_INT_H

#include "serve/engine.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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
    int        want_prs;      /* PRS frames wanted (mt_engine_set_prs) */
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

    void          (*round_out)(void *ctx);  /* mt_engine_set_round_out */
    void           *round_out_ctx;
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

/* The engine's time: every timestamp and deadline comes from here. */
static inline uint64_t eng_now(mt_engine *e)
{
    return e->clock(e->clock_ctx);
}

/* engine_table.c: sessions by id */
sess *eng_ht_get(const mt_engine *e, uint32_t id);   /* S_GONE ones too */
int   eng_ht_put(mt_engine *e, sess *s);
sess *eng_find(mt_engine *e, uint32_t id);           /* never S_GONE */
void  eng_set_state(mt_engine *e, sess *s, int st);
void  eng_free_sess(mt_engine *e, sess *s);
void  eng_remove_sess(mt_engine *e, sess *s);

/* engine_outq.c: output frames and log lines */
void   eng_sb_add(strbuf *b, const char *line);
void   eng_sb_flush(mt_engine *e, strbuf *b);        /* without the lock */
size_t eng_frame_bytes(const mt_engine *e);
int    eng_push_frame(mt_engine *e, sess *s, const mt_frame *f);
void   eng_push_ctl(mt_engine *e, sess *s, int type, uint16_t flags,
                    const void *payload, size_t len);
void   eng_push_reason(mt_engine *e, sess *s, int type, uint16_t flags,
                       const char *reason);

/* engine_session.c: ending a session */
void eng_maybe_end(mt_engine *e, sess *s);
void eng_end_with_error(mt_engine *e, sess *s, const char *reason);

/* engine_answer.c: the answer to one input */
void eng_send_fill(mt_engine *e, sess *s, in_entry *q, uint64_t t, strbuf *lines);
void eng_send_output(mt_engine *e, sess *s, in_entry *q, const int16_t *pcm,
                     int32_t text, uint64_t t_start, uint64_t t_ready, strbuf *lines);
void eng_send_text(mt_engine *e, sess *s, const in_entry *q, int32_t tok);
void eng_send_prs(mt_engine *e, sess *s, const in_entry *q, const float *prs, int n);

/* engine_fill.c: the FILL FIFO */
int  eng_fill_room(mt_engine *e);
void eng_fill_push(mt_engine *e, uint32_t id, uint64_t n, uint64_t deadline);

/* engine_preempt.c: room in the KV pool */
int eng_make_room(mt_engine *e, sess *s, int *recompute);
int eng_append_hist(mt_engine *e, sess *s, const int16_t *pcm);

/* engine_batch.c: one round (takes e->mu itself: called without it) */
int eng_run_round(mt_engine *e, int round, int max_rows, uint64_t t_tick,
                  double *comp_ms, double *step_only_ms, char *err, size_t errlen);

#endif
