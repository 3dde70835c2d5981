/* mimi_impl.h: Mimi's layers, weights and session-state layout, shared by
 * the model builder/loader (mimi_model.c) and the compute (mimi.c).
 * Internal to src/codec/. */
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

/* ELU with alpha 1, dst may be src (mimi.c). */
void mimi_elu(float *dst, const float *src, size_t n);
/* GELU (the erf form) in place (mimi.c). */
void mimi_gelu(float *x, size_t n);

#endif
