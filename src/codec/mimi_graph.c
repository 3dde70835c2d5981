/* mimi_graph.c: builds Mimi's encode and decode graphs (mimi_impl.h), the
 * one description of the layer sequence that the CPU (mimi.c) and CUDA
 * (mimi_cuda.c) backends both walk, costs them (mimi_stage_flops) and
 * names an op for the benchmark (mimi_op_describe).
 * mimi_model.c's walk calls the builders in the order the layers apply;
 * here the ops get their buffers: the running activation moves through
 * four ping-pong buffers (mod 4), a residual unit using the three after
 * it as scratch. */
#include "codec/mimi_impl.h"
#include "decode/cpu_q8.h"

#include <stdio.h>
#include <string.h>

static mimi_op *push(mimi_graph *g, mimi_op_kind kind, int stage)
{
    /* mimi_model_build bounds the convolutions, hence the ops */
    mimi_op *o = &g->op[g->n++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->stage = stage;
    return o;
}

static int next_buf(int b) { return b == MIMI_BUF_IO ? 0 : (b + 1) % 4; }

static void elu_op(mimi_graph *g, int src, int dst, size_t n)
{
    mimi_op *o = push(g, MIMI_OP_ELU, MIMI_ST_SEANET);
    o->src = src;
    o->dst = dst;
    o->n = n;
}

static void conv_op(mimi_graph *g, const mimi_conv *cv, int stage, int src, int dst)
{
    mimi_op *o = push(g, cv->tr ? MIMI_OP_CONVTR : MIMI_OP_CONV, stage);
    o->cv = cv;
    o->src = src;
    o->dst = dst;
}

void mimi_graph_begin(mimi_graph *g, int cur)
{
    g->n = 0;
    g->cur = cur;
}

void mimi_graph_conv(mimi_graph *g, const mimi_conv *cv, int stage, int elu_first, int to_io)
{
    int src = g->cur;
    if (elu_first) {
        elu_op(g, src, next_buf(src), (size_t)cv->cin * cv->tin);
        src = next_buf(src);
    }
    int dst = to_io ? MIMI_BUF_IO : next_buf(src);
    conv_op(g, cv, stage, src, dst);
    g->cur = dst;
}

void mimi_graph_residual(mimi_graph *g, const mimi_conv *c1, const mimi_conv *c2)
{
    const int x = g->cur, a = (x + 1) % 4, b = (x + 2) % 4, c = (x + 3) % 4;
    elu_op(g, x, a, (size_t)c1->cin * c1->tin);
    conv_op(g, c1, MIMI_ST_SEANET, a, b);
    elu_op(g, b, b, (size_t)c1->cout * c1->tout);
    conv_op(g, c2, MIMI_ST_SEANET, b, c);
    mimi_op *o = push(g, MIMI_OP_ADD, MIMI_ST_SEANET);
    o->src = c;
    o->dst = x;
    o->n = (size_t)c2->cout * c2->tout;
}

void mimi_graph_transformer(mimi_graph *g, int which)
{
    mimi_op *o = push(g, MIMI_OP_TRANSFORMER, MIMI_ST_TRANSFORMER);
    o->src = o->dst = g->cur;
    o->which = which;
}

void mimi_graph_quantize(mimi_graph *g)
{
    for (int r = 0; r < 2; r++) {
        mimi_op *o = push(g, MIMI_OP_QUANTIZE, MIMI_ST_RVQ);
        o->src = g->cur;
        o->which = r;
    }
}

void mimi_graph_dequantize(mimi_graph *g)
{
    for (int r = 0; r < 2; r++) {
        mimi_op *o = push(g, MIMI_OP_DEQUANTIZE, MIMI_ST_RVQ);
        o->dst = 0;
        o->which = r;
    }
    g->cur = 0;
}

/* ---- cost -------------------------------------------------------------------- */

static double conv_flops(const mimi_conv *cv)
{
    if (cv->grouped)
        return 2.0 * cv->cin * cv->k * cv->tin;
    if (cv->tr)
        return 2.0 * cv->cin * cv->cout * cv->k * cv->tin;
    return 2.0 * cv->cout * cv->cin * cv->k * cv->tout;
}

static double transformer_weight_flops(const mimi_model *m);

void mimi_stage_flops(const mimi_model *m, int dir, double out[MIMI_NSTAGES])
{
    const mimi_config *c = &m->c;
    for (int i = 0; i < MIMI_NSTAGES; i++)
        out[i] = 0;
    const mimi_graph *g = dir ? &m->gdec : &m->genc;
    for (int i = 0; i < g->n; i++)
        if (g->op[i].kind == MIMI_OP_CONV || g->op[i].kind == MIMI_OP_CONVTR)
            out[g->op[i].stage] += conv_flops(g->op[i].cv);
    double d = c->d_model, T = m->enc_steps;
    /* projections and MLP, then attention over a full ring */
    out[MIMI_ST_TRANSFORMER] = transformer_weight_flops(m) +
                               c->num_layers * T * 4.0 * c->context * d;
    double qd = c->q_dimension;
    out[MIMI_ST_RVQ] = dir ? 2.0 * 2 * qd * c->dimension
                           : 2.0 * 2 * qd * c->dimension + 2.0 * c->n_q_used * c->bins * qd;
}

/* Of the transformer's FLOPs per session-frame (either direction), those
 * of its weight products (projections and MLP; attention's are the rest). */
static double transformer_weight_flops(const mimi_model *m)
{
    const mimi_config *c = &m->c;
    double d = c->d_model;
    return c->num_layers * (double)m->enc_steps * 2.0 * (4 * d * d + 2 * d * c->dim_feedforward);
}

int mimi_q8_conv_eligible(const mimi_conv *cv)
{
    const int K = cv->tr ? cv->cin : cv->cin * cv->k;
    /* a transposed layer of 16 input steps too: on the 8-bit copy at B = 1
     * 0.29 ms where mimi_convtr.c's phases took 0.49 (the decoder's
     * 512 -> 256 k12); a convolution of 16 steps was slower on it (0.34
     * against 0.30 ms, 512 -> 256 k3 0.11 against 0.08) */
    return !cv->grouped && cv->cout > 1 && K % MT_Q8_BLOCK == 0 &&
           (cv->tr ? cv->tin <= 16 : cv->tout < 16);
}

double mimi_q8_flops(const mimi_model *m, int dir)
{
    const mimi_graph *g = dir ? &m->gdec : &m->genc;
    double f = transformer_weight_flops(m);
    for (int i = 0; i < g->n; i++)
        if ((g->op[i].kind == MIMI_OP_CONV || g->op[i].kind == MIMI_OP_CONVTR) &&
            mimi_q8_conv_eligible(g->op[i].cv))
            f += conv_flops(g->op[i].cv);
    return f;
}

static double total_flops(const mimi_model *m, int dir)
{
    double s[MIMI_NSTAGES], t = 0;
    mimi_stage_flops(m, dir, s);
    for (int i = 0; i < MIMI_NSTAGES; i++)
        t += s[i];
    return t;
}

double mimi_encode_flops(const mimi_model *m) { return total_flops(m, 0); }
double mimi_decode_flops(const mimi_model *m) { return total_flops(m, 1); }

/* ---- naming an op (the benchmark's per-layer lines) ---------------------------- */

int mimi_op_describe(const mimi_model *m, int dir, int i, char *buf, size_t len)
{
    static const char *kinds[] = { "conv", "convtr", "elu", "add", "transformer", "quantize",
                                   "dequantize" };
    const mimi_graph *g = dir ? &m->gdec : &m->genc;
    if (i < 0 || i >= g->n)
        return -1;
    const mimi_op *o = &g->op[i];
    const mimi_conv *cv = o->cv;
    if (cv)
        snprintf(buf, len, "%s:%d->%d:k%d:s%d:t%d", kinds[o->kind], cv->cin, cv->cout, cv->k,
                 cv->stride, cv->tr ? cv->tin : cv->tout);
    else if (o->kind == MIMI_OP_ELU || o->kind == MIMI_OP_ADD)
        snprintf(buf, len, "%s:%zu", kinds[o->kind], o->n);
    else
        snprintf(buf, len, "%s:%d", kinds[o->kind], o->which);
    return 0;
}
