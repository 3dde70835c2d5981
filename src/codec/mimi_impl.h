/* mimi_impl.h: Mimi's layers, weights and session-state layout, and the
 * layer sequence (the graph) both backends walk, shared by the model
 * builder/loader (mimi_model.c, mimi_graph.c) and the compute (mimi.c on
 * the CPU, mimi_cuda.c on CUDA). Internal to src/codec/. */
#ifndef MT_MIMI_IMPL_H
#define MT_MIMI_IMPL_H

#include "codec/mimi.h"

/* A streaming 1-d convolution (or transposed one) of one layer. */
typedef struct mimi_conv {
    int cin, cout, k, stride, dil;
    int tr;          /* transposed: output tin*stride, overlap kept */
    int grouped;     /* channel-wise (groups = cin = cout) */
    int replicate;   /* left context starts as the first sample (downsample) */
    int tin, tout;   /* steps per frame at input and output */
    int ctx;         /* conv: steps of left context ((k-1)*dil + 1 - stride);
                        transposed: pending overlap steps (k - stride) */
    float *w;        /* conv [cout][cin][k]; transposed [cin][cout][k];
                        grouped transposed [cin][1][k] */
    float *b;        /* [cout] or NULL */
    size_t st;       /* offset (floats) of its state in a session:
                        conv [cin][ctx], transposed [cout][ctx] */
} mimi_conv;

typedef struct mimi_tlayer {
    float *in_proj;   /* [3 d][d]: q, k, v rows, head-major within each */
    float *out_proj;  /* [d][d] */
    float *n1w, *n1b, *n2w, *n2b;   /* [d] */
    float *l1;        /* [ff][d] */
    float *l2;        /* [d][ff] */
    float *ls1, *ls2; /* [d] or NULL */
    size_t st_k, st_v;   /* session state: rings [context][d] */
} mimi_tlayer;

typedef struct mimi_rvq {
    int    nq;
    float *in_proj;   /* [qd][dim] */
    float *out_proj;  /* [dim][qd] */
    float *cb[64];    /* [bins][qd]: embedding_sum, then the centroids */
    float *usage[64]; /* [bins] cluster_usage */
    float *norm2[64]; /* [bins]: |centroid|^2 (derived) */
} mimi_rvq;

/* One entry of the checkpoint table: Kyutai's state-dict name, the shape,
 * and where the values go. */
typedef struct mimi_tensor {
    char     name[112];
    char     alt[112];     /* a second accepted spelling, or "" */
    int      ndim;
    int64_t  shape[3];
    float   *dst;          /* NULL: not allocated yet, or not stored */
    int      stored;       /* 0: accepted and ignored (_initialized) */
    int      optional;
} mimi_tensor;

#define MIMI_MAX_CONVS 96

/* The graph: encode and decode each as one sequence of ops, written once
 * (mimi_model.c's walk emits it beside the layers' geometry, through
 * mimi_graph.c) and walked by both backends, each with its own kernels
 * (the way ggml describes a model once for many backends). An op reads
 * one of four ping-pong activation buffers ([channels][session][steps],
 * max_act floats a session each) or the call's PCM, and writes another. */
typedef enum mimi_op_kind {
    MIMI_OP_CONV,         /* dst = conv(src), the layer's context kept */
    MIMI_OP_CONVTR,       /* dst = transposed conv(src), its overlap kept */
    MIMI_OP_ELU,          /* dst = elu(src), n floats a session; dst may be src */
    MIMI_OP_ADD,          /* dst += src, n floats a session (the residual) */
    MIMI_OP_TRANSFORMER,  /* dst (= src) through the encoder's (which 0) or decoder's layers */
    MIMI_OP_QUANTIZE,     /* codebook group `which` of src [dim][B] -> the call's codes */
    MIMI_OP_DEQUANTIZE,   /* the call's codes of group `which` -> dst [dim][B] (added from group 1 on) */
} mimi_op_kind;

enum { MIMI_BUF_IO = 4 };   /* the call's PCM: encode's input, decode's output */
#define MIMI_MAX_OPS (3 * MIMI_MAX_CONVS + 8)

typedef struct mimi_op {
    mimi_op_kind kind;
    int stage;              /* MIMI_ST_*: what the benchmark's timings file it under */
    int src, dst;           /* 0..3: activation buffer; MIMI_BUF_IO */
    int which;              /* transformer: 0 encoder, 1 decoder; (de)quantize: group 0 or 1 */
    size_t n;               /* ELU, ADD: floats a session */
    const mimi_conv *cv;    /* CONV, CONVTR: the layer (inside the model) */
} mimi_op;

typedef struct mimi_graph {
    int     n;
    int     cur;            /* while building: the buffer holding the running activation */
    mimi_op op[MIMI_MAX_OPS];
} mimi_graph;

struct mimi_model {
    mimi_config c;
    int frame;            /* samples per frame */
    int enc_steps;        /* transformer steps per frame (downsample stride) */
    int n_enc, n_dec;
    mimi_conv enc[MIMI_MAX_CONVS];   /* in order of application */
    mimi_conv dec[MIMI_MAX_CONVS];
    mimi_conv down, up;
    mimi_tlayer *etr, *dtr;          /* [num_layers] each */
    mimi_rvq first, rest;
    mimi_graph genc, gdec;           /* the op sequences (mimi_graph.c) */
    mimi_tensor *tab;
    int ntab;
    float *arena;         /* every weight, fp32 */
    size_t arena_floats;
    size_t params;
    size_t state_floats;  /* per session */
    int    max_rows;      /* largest im2col / transposed-GEMM row count */
    size_t max_act;       /* largest activation, floats per session */
};

struct mimi_state {
    int64_t enc_frames, dec_frames;
    int64_t enc_pos, dec_pos;   /* transformer positions */
    int     down_first;         /* the downsample's context not yet set */
    int     pad_;
    float   x[];                /* [state_floats] */
};

/* Builds the layer table for c, and with with_weights the arena (weights
 * zero); without, the table's dst pointers are NULL until
 * mimi_model_alloc. */
int  mimi_model_build(const mimi_config *c, int with_weights, mimi_model **out, char *err, size_t errlen);
int  mimi_model_alloc(mimi_model *m, char *err, size_t errlen);
/* Centroids from embedding_sum / max(cluster_usage, 1e-5) and their norms;
 * called once after the weights are in. */
void mimi_model_finish(mimi_model *m);

/* Building a graph (mimi_graph.c), called by mimi_model.c's walk in
 * the order of application. begin: the running activation is `cur` (the
 * call's PCM for encode). conv: cv from the running activation into the
 * next buffer, or with elu_first through an ELU first, or with to_io
 * into the call's PCM (a transposed cv is a CONVTR). residual: SEANet's
 * unit x += c2(elu(c1(elu(x)))) in place. */
void mimi_graph_begin(mimi_graph *g, int cur);
void mimi_graph_conv(mimi_graph *g, const mimi_conv *cv, int stage, int elu_first, int to_io);
void mimi_graph_residual(mimi_graph *g, const mimi_conv *c1, const mimi_conv *c2);
void mimi_graph_transformer(mimi_graph *g, int which);
/* the split RVQ: group 0 (semantic) and 1 (acoustic); quantize reads the
 * running activation, dequantize writes buffer 0 */
void mimi_graph_quantize(mimi_graph *g);
void mimi_graph_dequantize(mimi_graph *g);

/* Codebook group `which` of the split RVQ: its quantizer, its first code
 * in a session's row of n_q_used codes, and how many it has (0: none). */
typedef struct mimi_rvq_span {
    const mimi_rvq *q;
    int code0, n;
} mimi_rvq_span;

static inline mimi_rvq_span mimi_rvq_group(const mimi_model *m, int which)
{
    mimi_rvq_span s = { which ? &m->rest : &m->first, which ? m->c.n_q_semantic : 0,
                        which ? m->c.n_q_used - m->c.n_q_semantic : m->c.n_q_semantic };
    return s;
}

/* The few-vector product (mimi_skinny.c): C at row n, vector v
 * (C + n ldc_row + v ldc_vec) = W_n . V_v (+ beta C), rows n0..n1-1 of
 * W [rows][ldw], nv <= MIMI_SKINNY_MAX vectors V [nv][ldv], K floats
 * each. mimi_skinny_ok: this CPU runs it (AVX-512F). */
enum { MIMI_SKINNY_MAX = 8 };
int  mimi_skinny_ok(void);
void mimi_skinny_rows(const float *W, size_t ldw, int n0, int n1, const float *V, size_t ldv, int nv,
                      int K, float *C, size_t ldc_row, size_t ldc_vec, float beta);

/* The direct convolution (mimi_conv.c) of the layers with a long time
 * axis: eligible (an ordinary conv, at least 16 output steps, cout a
 * multiple of the tile's mimi_direct_co channels, AVX-512F); a tile is
 * mimi_direct_co channels x mimi_direct_t steps; a session's padded input is
 * mimi_direct_pad_floats, cin channels of equal length, built by
 * mimi_direct_pad from the channel's context [ctx] and input [tin] (elu:
 * the input through ELU as it is copied, mimi_elu's bits); the
 * weights reordered by mimi_direct_weights into weight_floats; tile cb,
 * t0 is output channels cb*co.. and steps t0.. of one session, written
 * to Y [cout][ldy] (the session's first step at Y), or added to it (add:
 * Y + the sum, the bits of the sum stored and then added). */
int    mimi_direct_eligible(const mimi_conv *cv);
int    mimi_direct_co(const mimi_conv *cv);
int    mimi_direct_t(const mimi_conv *cv);
size_t mimi_direct_pad_floats(const mimi_conv *cv);
size_t mimi_direct_weight_floats(const mimi_conv *cv);
void   mimi_direct_weights(const mimi_conv *cv, float *wt);
void   mimi_direct_pad(const mimi_conv *cv, const float *ctx, const float *x, float *P, int elu);
void   mimi_direct_tile(const mimi_conv *cv, const float *wt, const float *P, int cb, int t0, float *Y,
                        size_t ldy, int add);

/* The transposed convolutions without sgemm (mimi_convtr.c).
 * Long time axes (trd): a phase is an ordinary conv (mimi_trd_phase) on
 * the direct tile; a session's input padded once (trd_pad_floats), its
 * phases' outputs O [stride][cout][tin] (trd_out_floats) from item i <
 * trd_phase_tiles of phase p (the last ones the steps past the frame,
 * into the session's new overlap part [cout][ctx]), then trd_scatter
 * interleaves channel co into y [tout] with the bias.
 * Short ones (trs): Z [cout*k][ldz] = W^T X for nc <= trs_max_cols
 * columns of X [cin][ldx], row block rb < trs_blocks at a time. Both on
 * weights reordered once (trd_weights, trs_weights: cin*cout*k floats).
 * tr_overlap_add, tr_grouped: the sgemm path's (see there). */
int    mimi_trd_eligible(const mimi_conv *cv);
void   mimi_trd_phase(const mimi_conv *cv, mimi_conv *pc);
size_t mimi_trd_pad_floats(const mimi_conv *cv);
size_t mimi_trd_out_floats(const mimi_conv *cv);
void   mimi_trd_weights(const mimi_conv *cv, float *wt);
void   mimi_trd_pad(const mimi_conv *cv, const float *x, float *P, int elu);
int    mimi_trd_phase_tiles(const mimi_conv *cv);
void   mimi_trd_tile(const mimi_conv *cv, const float *wt, const float *P, int p, int i, float *O,
                     float *part);
void   mimi_trd_scatter(const mimi_conv *cv, const float *O, int co, float *y);
int    mimi_trs_eligible(const mimi_conv *cv);
int    mimi_trs_max_cols(void);
int    mimi_trs_blocks(const mimi_conv *cv);
size_t mimi_trs_weight_floats(const mimi_conv *cv);
void   mimi_trs_weights(const mimi_conv *cv, float *wr);
void   mimi_trs_block(const mimi_conv *cv, const float *wr, const float *X, size_t ldx, int nc, int rb,
                      float *Z, size_t ldz);
void   mimi_tr_overlap_add(const mimi_conv *cv, int B, const float *Z, size_t n0, size_t nc, int co,
                           float *Y, float *part);
void   mimi_tr_grouped(const mimi_conv *cv, int B, const float *X, float *Y, float *part);

/* n bytes, zeroed, 64-byte aligned, from 2 MiB up on 2 MiB pages where
 * the kernel gives them (mimi_model.c); freed with free(). */
void *mimi_alloc_streamed(size_t n);

/* 8-bit copies of the transformers' matrices (mimi_q8.c): matrix `which`
 * (MIMI_Q8_IN in_proj, _OUT out_proj, _L1, _L2) of layer li of the
 * encoder's (dec 0) or decoder's (1) transformer, packed by
 * decode/cpu_q8.h's mt_q8_pack for its mt_q8_gemm_rows. Each in the
 * layout its products measured fastest on (bench/RESULTS.md,
 * 2026-12-07): the convolutions' and the transformers' in lane groups
 * (the convolutions 0.7-0.8 of their time on groups at B = 1 to 32; the
 * transformers as fast at B = 1 and 0.75-0.9 at B = 8, once the one-tile-
 * a-thread split and the vector LayerNorm were in: the 5-15% they lost at
 * B = 1 before was gone), the codebooks' in groups (K 32: lane groups
 * twice as slow). */
enum { MIMI_Q8_IN, MIMI_Q8_OUT, MIMI_Q8_L1, MIMI_Q8_L2, MIMI_Q8_MATS };
typedef struct mimi_q8mat {
    const int8_t *q;   /* [rows * cols] in cpu_q8.h's layout `layout` */
    const float  *s;   /* [rows * cols / 32]: a scale a block */
    int layout;        /* mt_q8_layout_for's (above) */
} mimi_q8mat;
typedef struct mimi_q8 mimi_q8;
int  mimi_q8_make(const mimi_model *m, mimi_q8 **out, char *err, size_t errlen);
const mimi_q8mat *mimi_q8_mat(const mimi_q8 *q, int dec, int li, int which);
/* The deepest SEANet layers' copies (mimi_q8.c says which and why; the
 * test, mimi_q8_conv_eligible, is mimi_graph.c's, beside the costs):
 * whether cv gets one (a few steps a frame, not grouped, K a multiple
 * of 32), its copy or NULL, and the largest K and rows among them and
 * the codebooks' (a convolution's rows cout and K cin * k, a transposed
 * one's cout * k and cin, a codebook's bins and q_dimension): the sizes
 * of a batch's column buffers. */
int mimi_q8_conv_eligible(const mimi_conv *cv);
const mimi_q8mat *mimi_q8_conv(const mimi_q8 *q, const mimi_conv *cv);
void mimi_q8_conv_max(const mimi_q8 *q, size_t *max_k, size_t *max_n);
/* The encoder's RVQ codebooks on 8-bit copies: codebook i of group
 * `group` (mimi_rvq_group) [bins][qd], with each block's largest scale
 * sw and sw * sum|q| over its rows; NULL where it has none (or q_dimension
 * is over MIMI_Q8_CB_BLOCKS blocks). */
enum { MIMI_Q8_CB_BLOCKS = 64 };
typedef struct mimi_q8cb {
    mimi_q8mat mat;
    float swmax[MIMI_Q8_CB_BLOCKS], swamax[MIMI_Q8_CB_BLOCKS];
} mimi_q8cb;
const mimi_q8cb *mimi_q8_codebook(const mimi_q8 *q, int group, int i);
/* Packs the codebook cb [bins][qd] into q [bins * qd] and s [bins * qd /
 * 32] (decode/cpu_q8.h) and c; -1 where qd is not a multiple of 32 of at
 * most MIMI_Q8_CB_BLOCKS blocks, or a value is not finite. */
int mimi_q8cb_pack(mimi_q8cb *c, int8_t *q, float *s, const float *cb, int bins, int qd);
/* The index of the centroid nearest x [qd] (the smallest |c|^2 - 2 x.c,
 * in double; the first of equals), given dots [bins], the 8-bit product
 * of x by cb (decode/cpu_q8.h's integer one): only the centroids its
 * error bound cannot rule out are compared exactly (*ncand of them, when
 * not NULL). cbf [bins][qd] the fp32 codebook, n2 [bins] its |c|^2;
 * work [bins] scratch. */
int mimi_q8_nearest(const mimi_q8cb *cb, const float *cbf, const float *n2, int bins, int qd,
                    const float *x, const float *dots, float *work, int *ncand);
size_t mimi_q8_bytes(const mimi_q8 *q);
void mimi_q8_free(mimi_q8 *q);

/* ELU with alpha 1, dst may be src (mimi.c). */
void mimi_elu(float *dst, const float *src, size_t n);
/* The transformer's rows (mimi_elt.c): h [N][d] = LayerNorm(x [N][d]),
 * gain g, bias, eps 1e-5; the rotary angles of one position cs, sn
 * [hd/2] (frequency i max_period^(-2i/hd)); a row of d rotated by them,
 * the (2i, 2i+1) pairs of every head. */
void mimi_layer_norm(float *h, const float *x, const float *g, const float *bias, int d, size_t N);
/* x [N][d] += ls * h [N][d] (ls NULL: 1): a transformer layer's residual. */
void mimi_residual(float *x, const float *h, const float *ls, int d, size_t N);
void mimi_rope_table(float *cs, float *sn, int hd, int64_t pos, double max_period);
void mimi_rope_row(float *q, const float *cs, const float *sn, int d, int hd);
/* GELU (the erf form) in place (mimi.c). */
void mimi_gelu(float *x, size_t n);

#endif
