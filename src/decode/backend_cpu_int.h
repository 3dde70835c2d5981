/* backend_cpu_int.h: what the CPU backend's files share (internal; not
 * part of the decode API): the backend's state, a row and a run of a call,
 * the per-thread attention scratch, and the functions one file calls in
 * another, with a cpu_ prefix.
 *
 *   backend_cpu.c        the step: phases, attention, the transformer over a call
 *   backend_cpu_setup.c  creation: geometry, activations, the kv pool, the
 *                        f16 weight copies, destruction
 */
#ifndef MT_DECODE_BACKEND_CPU_INT_H
#define MT_DECODE_BACKEND_CPU_INT_H

#include "decode/backend.h"
#include "decode/cpu_pool.h"
#include "decode/cpu_q8.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One row of a call: a session at one position. */
typedef struct row {
    mt_kv_seq *seq;
    int64_t    pos;    /* absolute position this row appends */
    int64_t    base;   /* seq->len when the call began: positions >= base
                          are read from this call's qkv buffer */
    int        first;  /* row index holding position base of this seq */
    int64_t    rpos;   /* rotary position of its key (and, absolute, its query):
                          pos, or its input's (mt_step_io.positions) */
} row;

/* A run of visible positions attended together: len consecutive slots of
 * one cache block with one rotary offset (up to MT_KV_BLOCK), or one
 * position written by this call (read from the qkv buffer). */
typedef struct kv_run {
    int     j;         /* its first visible entry */
    int     len;
    int32_t block;     /* cache block, or -1: qkv row `at` */
    int     at;        /* first slot within the block, or the qkv row */
    int64_t d;         /* rotary offset abs - rope of its positions */
} kv_run;

/* Per-thread attention scratch; cap grows with the longest visible list. */
typedef struct scratch {
    int      cap;
    int64_t *slot;     /* [cap]  cache slot of each visible position */
    int64_t *rope;     /* [cap]  its rotary position */
    int64_t *abs;      /* [cap]  its absolute position */
    kv_run  *run;      /* [cap]  the visible list in runs */
    float   *score;    /* [heads, cap] attention weights of the item's q heads */
    float   *qd;       /* [heads, head_dim] the item's queries rotated by a
                          further d (window/cache mode) */
    float   *ml;       /* [2, heads] running maximum and sum of each q head */
    float   *dcs, *dsn;/* [half] rotary of a d that is not the row's own */
    /* the visible list and runs above are those of row vis_row in call
     * vis_call: a thread that takes items of the same row again (every
     * item at B = 1, one per kv head and layer) reuses them; a row's list
     * is the same in every layer of a call. Making it (a 64-bit division
     * per position) and its runs took 1.4% of a B = 1 f16 step's samples
     * in a perf profile, made 64 times a step. */
    uint64_t vis_call;
    int      vis_row, vis_n, vis_nr;
    int64_t  vis_q_rope;
} scratch;

/* Half copies of the weights (--weights f16), same layouts as the model's. */
typedef struct layer16 {
    uint16_t *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
} layer16;

/* The 8-bit copy of one matrix [N, K] (--weights q8, cpu_q8.h's
 * mt_q8_mat); q NULL where the matrix stays fp32 (K not a multiple of the
 * block, or a value not finite). */
typedef mt_q8_mat q8mat;
typedef struct layer8 {
    q8mat wq, wk, wv, wo, w_gate, w_up, w_down;
} layer8;

typedef struct cpu_backend {
    mt_backend          base;
    const mt_model     *m;
    const mt_config    *c;
    mt_kv_pool         *pool;
    const mt_kv_params *kvp;
    int   cache_rope;    /* window policy with MT_ROPE_CACHE */
    int   R;             /* rows per call: mt_backend_rows(o) */
    int   hd, half, q_dim, kv_dim, qkv_dim, group;

    char  *kv;           /* [layers][blocks][kv_heads][2][16][head_dim] */
    size_t block_elems;  /* one block, every layer: layers * layer_block_elems */
    size_t layer_block_elems; /* one block, one layer: kv_heads * 2 * 16 * head_dim */
    size_t layer_elems;  /* one layer of the pool: blocks * layer_block_elems */
    int    kv_f16;       /* elements are IEEE half (else fp32) */
    size_t kv_elem;      /* 2 or 4 */

    /* --weights f16: half copies used for calls of up to f16_rows rows */
    layer16  *w16;       /* [layers] or NULL */
    uint16_t *lm_head16, *audio_in16, *audio_out16;
    uint16_t *w16_store; /* one allocation behind all of them */
    int       f16_rows;  /* rows up to which the f16 or q8 copy serves */

    /* --weights q8: 8-bit copies used for calls of up to f16_rows rows */
    layer8   *w8;        /* [layers] or NULL */
    q8mat     lm_head8, audio_in8, audio_out8;
    int8_t   *w8_store;  /* the bytes of all of them */
    float    *w8_scales; /* their scales */
    int       all_q8;    /* every matrix has its q8 copy (none kept in fp32) */
    /* steps by rows (cpu_row_split, backend_cpu.c): 1 where the layers'
     * products are small enough; MT_CPU_ROW_SPLIT=0 or 1 forces it off
     * or on (where legal) for benchmarks and tests */
    int       row_split;
    const mt_step_io *split_io; /* the step by rows' inputs and outputs */

    /* activations, R rows; row r of a matrix [R, n] starts at r*n */
    float *x;            /* [R, hidden]   residual stream */
    float *xn;           /* [R, hidden]   normed input of a sublayer */
    float *qkv;          /* [R, q_dim + 2*kv_dim]  q | k | v per row */
    float *att;          /* [R, q_dim]    attention output, heads concatenated */
    float *gate;         /* [R, ffn]      silu(gate) * up after the MLP phase */
    float *up;           /* [R, ffn] */
    float *pcmf;         /* [R, frame_samples]  pcm as float, in and out */
    float *rcos, *rsin;  /* [R, half]     rotary of each row's absolute position */
    float *qcos, *qsin;  /* [R, half]     rotary of each row's query position */
    float *dcos, *dsin;  /* [R, half]     rotary of pos - query index (cache mode) */
    float *ccos, *csin;  /* [S+W, half]   rotary by cache index (cache mode) */
    double *inv_freq;    /* [half] */

    row    *rows;        /* [R] */
    int     nrows;
    uint64_t call;       /* run_rows calls so far (keys the scratch's visible lists) */
    int     layer;       /* layer the running phase works on */
    uint64_t att_ns;     /* this call's attention phases, wall time (attention_ms) */
    /* [threads] each thread's counter into its share of a phase's items
     * (backend_cpu.c's share_walk: the attention's, the rows'), a cache
     * line each */
    struct att_counter { _Alignas(64) atomic_int n; } *att_next;
    int     att_chunks;  /* attention items per row (kv heads split in as many) */

    /* the running GEMM phase: up to 3 weight segments */
    struct gemm_job {
        int          nseg;
        int          paired;  /* segments share one column range (gate|up) */
        const float *X;       /* [rows, K] */
        int          K;
        float        beta;
        struct {
            const float *W; const uint16_t *W16; const q8mat *W8; int N; float *Y; int ldy;
        } seg[3];
    } job;

    /* mt_decoder_parallel's work while its phase runs (phase_par) */
    mt_par_fn par_fn;
    void    *par_ctx;

    mt_tpool tp;         /* tp.n threads, the caller's included */
    scratch *scr;        /* [threads] */
    char    note[400];   /* the backend's note: what OpenBLAS chose, when it matters;
                            weights kept in fp32 (beyond f16's range) */
} cpu_backend;

/* Elements (fp32 or f16) of (layer l, k or v, kv head g) of block b,
 * slot row 0. The pool is layer-major, and within a layer's block each
 * head's K rows are followed by its V rows: a window session's blocks are
 * taken together when it opens (kv.c, ascending ids), so one layer of one
 * session is a single stretch, read in order (K and V of each head in
 * turn) but for a jump at the sinks and one where the ring wraps, as
 * attend() walks it. Block-major order (a block's every layer together,
 * each layer's K of all heads before their V) would cut that read into
 * pieces of 16 KiB of K and 16 KiB of V (f16, synthetic:small), each
 * block's 256 KiB from the next: a slower attention phase, fp32 and f16
 * alike (bench/RESULTS.md). */
static inline void *kv_at(const cpu_backend *be, int32_t block, int l, int kv, int g)
{
    size_t off = (size_t)l * be->layer_elems + (size_t)block * be->layer_block_elems +
                 ((size_t)g * 2 + kv) * MT_KV_BLOCK * be->hd;
    return be->kv + off * be->kv_elem;
}

/* backend_cpu.c: the vtable's step functions, and the rotary table of one
 * position (cs, sn: [half]) that creation fills its cache table with. */
int  cpu_step(mt_backend *b, int B, mt_kv_seq *const *seqs, const mt_step_io *io,
              char *err, size_t errlen);
int  cpu_prefill(mt_backend *b, mt_kv_seq *seq, int n, const mt_step_io *io,
                 char *err, size_t errlen);
void cpu_wake(mt_backend *b);
void cpu_parallel(mt_backend *b, mt_par_fn fn, void *ctx);
/* Sets row_split from the layers' size and MT_CPU_ROW_SPLIT (backend_cpu.c). */
void cpu_row_split_init(cpu_backend *be);
void cpu_rope_table(const cpu_backend *be, int64_t pos, float *cs, float *sn);

#endif
