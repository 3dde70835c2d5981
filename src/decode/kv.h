/* kv.h: KV cache bookkeeping over one block pool with a fixed byte budget.
 *
 * The pool is a set of equal blocks, each holding MT_KV_BLOCK positions of
 * K and V for every layer. This module only hands out block ids and maps a
 * sequence's positions to slots; the backend owns the memory behind the
 * ids (host or device) and its layout.
 *
 * Policies:
 *   window (Metronome): S sink positions + a ring of W positions. All
 *     ceil((S+W)/MT_KV_BLOCK) blocks are taken when the sequence opens, so a
 *     session's bytes are fixed for its whole life and opening fails when
 *     the pool cannot hold the whole bound.
 *       position p < S        -> slot p              (never evicted)
 *       position p >= S       -> slot S + (p-S) % W  (the ring)
 *   full (the baseline): slot = position; blocks are appended one at a
 *     time as the sequence grows; when none is free the caller is told
 *     (MT_KV_EXHAUSTED) and decides: preempt (release a sequence's blocks
 *     and recompute its history later) or stall.
 *
 * Rotary positions (window policy):
 *   cache:    a key's rotary position is its index in the kept cache in
 *             age order (sinks 0..S-1, then the ring oldest to newest), as
 *             in StreamingLLM; the query takes the newest index.
 *   absolute: rotary position = the absolute position.
 */
#ifndef MT_KV_H
#define MT_KV_H

#include <stddef.h>
#include <stdint.h>

#define MT_KV_BLOCK 16
/* The pool's budget when none is given (mt-serve --kv-mem; the probes that
 * predict a server's pool from its arguments): 512 MiB. */
#define MT_KV_DEFAULT_MIB 512
#define MT_KV_DEFAULT_BUDGET ((size_t)MT_KV_DEFAULT_MIB << 20)
#define MT_KV_EXHAUSTED (-2)
/* The largest sink count and window a window policy takes: every program's
 * --sink and --window are checked against these, and mt_kv_pool_* too. */
#define MT_KV_SINK_MAX   (1 << 20)
#define MT_KV_WINDOW_MAX (1 << 24)

typedef enum mt_kv_policy { MT_KV_WINDOW = 0, MT_KV_FULL = 1 } mt_kv_policy;
typedef enum mt_rope_mode { MT_ROPE_CACHE = 0, MT_ROPE_ABSOLUTE = 1 } mt_rope_mode;

typedef struct mt_kv_params {
    mt_kv_policy policy;
    int          sink;           /* S (window policy) */
    int          window;         /* W (window policy) */
    mt_rope_mode rope;
    size_t       budget_bytes;   /* whole pool */
    size_t       position_bytes; /* K+V bytes of one position, all layers
                                    (set by the backend: depends on dtype) */
} mt_kv_params;

typedef struct mt_kv_seq {
    int      id;
    int64_t  len;          /* positions appended so far (absolute count) */
    int32_t *blocks;       /* block table */
    int      nblocks;      /* blocks held */
    int      cap;          /* capacity of the blocks array */
    int      released;     /* 1 after mt_kv_release (blocks dropped,
                              history to recompute) until the next
                              mt_kv_reserve that takes blocks again */
} mt_kv_seq;

/* Who moves len: a step (decoder.h) writes position len of each sequence
 * and mt_decoder_step advances len by one after it; a prefill of n writes
 * len .. len+n-1 and advances len by n. Backends never change len. */

typedef struct mt_kv_pool mt_kv_pool;

int  mt_kv_pool_create(const mt_kv_params *p, mt_kv_pool **out,
                       char *err, size_t errlen);
void mt_kv_pool_free(mt_kv_pool *pool);
const mt_kv_params *mt_kv_pool_params(const mt_kv_pool *pool);
int  mt_kv_pool_blocks(const mt_kv_pool *pool);   /* total blocks */

/* Opens a sequence. Window: takes the whole bound or MT_KV_EXHAUSTED. */
int  mt_kv_seq_open(mt_kv_pool *pool, mt_kv_seq **out);
void mt_kv_seq_close(mt_kv_pool *pool, mt_kv_seq *s);
/* Closes s[0..n) (NULL entries skipped) and sets each to NULL: the batch
 * of sequences a runner or benchmark holds. s may be NULL (nothing). */
void mt_kv_seq_close_all(mt_kv_pool *pool, mt_kv_seq **s, size_t n);
/* Makes room for positions len .. len+n-1 (full: may take blocks).
 * 0, or MT_KV_EXHAUSTED with nothing taken. */
int  mt_kv_reserve(mt_kv_pool *pool, mt_kv_seq *s, int64_t n);
/* Full policy: drops all blocks, len back to 0 (history to recompute). */
void mt_kv_release(mt_kv_pool *pool, mt_kv_seq *s);

/* Slot of absolute position pos (the caller guarantees it is kept). */
int64_t mt_kv_slot(const mt_kv_pool *pool, const mt_kv_seq *s, int64_t pos);
/* The positions a query at position q attends to (q itself included; q may
 * be the position being appended by the running step), in
 * age order, with their rotary positions; also the query's rotary
 * position. Returns the count n (<= cap). */
int  mt_kv_visible(const mt_kv_pool *pool, const mt_kv_seq *s, int64_t q,
                   int64_t *slot, int64_t *rope_pos, int cap,
                   int64_t *q_rope);

/* As mt_kv_visible, also giving each visible entry's absolute position
 * (abs_pos may be NULL). */
int  mt_kv_visible_ex(const mt_kv_pool *pool, const mt_kv_seq *s, int64_t q,
                      int64_t *slot, int64_t *rope_pos, int64_t *abs_pos,
                      int cap, int64_t *q_rope);
/* How many positions mt_kv_visible returns for a query at q (to size its
 * arrays): window min(q+1, S) + min(q+1-S, W) ; full q+1. */
int64_t mt_kv_visible_count(const mt_kv_pool *pool, int64_t q);
/* 1 when s holds the slot position s->len will take (reserve was done). */
int  mt_kv_has_room(const mt_kv_pool *pool, const mt_kv_seq *s);

size_t mt_kv_seq_bytes(const mt_kv_pool *pool, const mt_kv_seq *s);
size_t mt_kv_used_bytes(const mt_kv_pool *pool);
size_t mt_kv_free_bytes(const mt_kv_pool *pool);
/* Window policy: bytes one sequence takes for its whole life. */
size_t mt_kv_bound_bytes(const mt_kv_params *p);

#endif
