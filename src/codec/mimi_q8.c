/* mimi_q8.c: 8-bit copies of Mimi's transformer matrices, for a batch
 * whose caller asked for them (mimi_batch_weights_q8; mt-serve's
 * --weights q8 asks for the codec too).
 *
 * Why: at small batch a transformer step multiplies a few vectors (a
 * session's two steps a frame) by every matrix of its 8 layers, so the
 * fp32 weights, 100 MB in each direction in the published shape, are
 * read every frame: half of Mimi's time at B = 1 (mt-benchcodec, one
 * thread: encoder transformer 4.4 of 8.7 ms, decoder 4.0 of 8.3). In 8
 * bits they are 28 MB. The copies are decode/cpu_q8.h's format (a scale
 * per block of 32 weights, max|w| / 127) and its product; the model's
 * fp32 matrices stay (the other batches, the CUDA codec and the tests
 * read them).
 *
 * The deepest SEANet layers too (mimi_q8_conv_eligible: a few steps a
 * frame, so a product of a few columns by the whole matrix): at B = 1 the
 * encoder's 512 -> 1024 k16 and 1024 -> 512 k3 and the downsample, the
 * decoder's 512 -> 1024 k7 and 1024 -> 512 k16 transposed read 92 MB of
 * fp32 a frame, 2.5 of Mimi's 9.4 ms (mt-benchcodec --layers, q8
 * transformers); in 8 bits 26 MB. And the decoder's 512 -> 256 k12
 * transposed, 16 steps in a frame (6.3 MB). A convolution's copy is its im2col
 * product's matrix, [cout][cin * k] (its weights as stored); a
 * transposed one's is [cout * k][cin], row (co, kk) the weights that
 * output tap takes from every input channel.
 *
 * And the encoder's RVQ codebooks (2 MB of fp32 each, 8 read a frame):
 * the nearest centroid by the 8-bit dots, then, among the centroids
 * whose 8-bit distance lies within the product's error bound of the
 * smallest, by double (mimi_q8_nearest), so the search loses nothing to
 * the 8 bits; 0.38 of the fp32 search's time at B = 1 (mt-benchcodec
 * --layers, quantize:1).
 */
#include "codec/mimi_impl.h"
#include "decode/cpu_q8.h"
#include "util/errmsg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_Q8_CONVS = 16 };

struct mimi_q8 {
    int layers;
    mimi_q8mat *mat;   /* [2][layers][MIMI_Q8_MATS] */
    int nconv;
    const mimi_conv *conv[MAX_Q8_CONVS];   /* the layers with a copy */
    mimi_q8mat convmat[MAX_Q8_CONVS];
    size_t max_k, max_n;   /* the largest conv or codebook copy's K and rows */
    int ncb[2];            /* the encoder's codebooks with a copy, each group */
    mimi_q8cb cb[2][64];   /* [group][codebook] */
    int8_t *bytes;     /* every matrix's, one after the other */
    float *scales;
    size_t nbytes;
};

/* Matrix `which` of layer l: its fp32 weights and shape [rows][cols]. */
static const float *layer_mat(const mimi_model *m, const mimi_tlayer *l, int which, int *rows,
                              int *cols)
{
    const int d = m->c.d_model, ff = m->c.dim_feedforward;
    switch (which) {
    case MIMI_Q8_IN: *rows = 3 * d; *cols = d; return l->in_proj;
    case MIMI_Q8_OUT: *rows = d; *cols = d; return l->out_proj;
    case MIMI_Q8_L1: *rows = ff; *cols = d; return l->l1;
    default: *rows = d; *cols = ff; return l->l2;
    }
}

/* The layers that get a copy, in the order of mimi_model's arrays: the
 * encoder's convolutions, the downsample, the upsample, the decoder's. */
static int q8_convs(const mimi_model *m, const mimi_conv **cv)
{
    int n = 0;
    for (int i = 0; i < m->n_enc + 2 + m->n_dec; i++) {
        const mimi_conv *c = i < m->n_enc ? &m->enc[i] : i == m->n_enc ? &m->down
                           : i == m->n_enc + 1 ? &m->up : &m->dec[i - m->n_enc - 2];
        if (mimi_q8_conv_eligible(c) && n < MAX_Q8_CONVS)
            cv[n++] = c;
    }
    return n;
}

/* A layer's product matrix: rows x K */
static void conv_shape(const mimi_conv *cv, size_t *rows, size_t *K)
{
    *rows = cv->tr ? (size_t)cv->cout * cv->k : (size_t)cv->cout;
    *K = cv->tr ? (size_t)cv->cin : (size_t)cv->cin * cv->k;
}

/* Packs layer cv's matrix at q, s in layout L; -1 on no memory (a
 * transposed layer's rows are made first) or a weight not finite */
static int pack_conv(const mimi_conv *cv, int L, int8_t *q, float *s)
{
    size_t rows, K;
    conv_shape(cv, &rows, &K);
    if (!cv->tr)
        return mt_q8_pack(L, q, s, cv->w, rows, (int)K);
    float *t = malloc(rows * K * sizeof *t);   /* [cout * k][cin] */
    if (!t)
        return -1;
    for (size_t ci = 0; ci < K; ci++)
        for (size_t r = 0; r < rows; r++)   /* w [cin][cout][k]: row (co, kk) = co * k + kk */
            t[r * K + ci] = cv->w[ci * rows + r];
    int rc = mt_q8_pack(L, q, s, t, rows, (int)K);
    free(t);
    return rc;
}

int mimi_q8cb_pack(mimi_q8cb *c, int8_t *q, float *s, const float *cb, int bins, int qd)
{
    const int nb = qd / MT_Q8_BLOCK;
    memset(c, 0, sizeof *c);
    const int L = mt_q8_layout_for(qd, MT_Q8_GROUPS);
    if (qd % MT_Q8_BLOCK || nb > MIMI_Q8_CB_BLOCKS || mt_q8_pack(L, q, s, cb, (size_t)bins, qd))
        return -1;
    c->mat = (mimi_q8mat){ q, s, L };
    for (int e = 0; e < bins; e++)
        for (int b = 0; b < nb; b++) {
            size_t off = mt_q8_offset(L, (size_t)bins, qd, (size_t)e, b);
            int a = 0;   /* the block's bytes, wherever the layout keeps them */
            for (int k = b * MT_Q8_BLOCK; k < (b + 1) * MT_Q8_BLOCK; k++)
                a += abs(mt_q8_weight(L, q, (size_t)bins, qd, (size_t)e, k));
            float sw = s[off / MT_Q8_BLOCK];
            c->swmax[b] = sw > c->swmax[b] ? sw : c->swmax[b];
            c->swamax[b] = sw * (float)a > c->swamax[b] ? sw * (float)a : c->swamax[b];
        }
    return 0;
}

/* The encoder's codebooks, packed from byte o on (none where their
 * width is not one mimi_q8cb_pack takes: the fp32 search then). */
static int make_codebooks(const mimi_model *m, mimi_q8 *q, size_t o, char *err, size_t errlen)
{
    const int qd = m->c.q_dimension, bins = m->c.bins;
    if (qd / MT_Q8_BLOCK > MIMI_Q8_CB_BLOCKS)
        return 0;
    for (int g = 0; g < 2; g++) {
        mimi_rvq_span sp = mimi_rvq_group(m, g);
        for (int i = 0; i < sp.n; i++) {
            if (mimi_q8cb_pack(&q->cb[g][i], q->bytes + o, q->scales + o / MT_Q8_BLOCK,
                               sp.q->cb[i], bins, qd)) {
                mt_set_err(err, errlen, "mimi: a codebook's centroid is not finite");
                return -1;
            }
            o += (size_t)bins * qd;
            q->ncb[g] = i + 1;
        }
    }
    q->max_k = (size_t)qd > q->max_k ? (size_t)qd : q->max_k;
    q->max_n = (size_t)bins > q->max_n ? (size_t)bins : q->max_n;
    return 0;
}

int mimi_q8_make(const mimi_model *m, mimi_q8 **out, char *err, size_t errlen)
{
    *out = NULL;
    const int L = m->c.num_layers;
    size_t total = 0;
    int rows, cols;
    for (int which = 0; which < MIMI_Q8_MATS; which++) {
        layer_mat(m, &m->etr[0], which, &rows, &cols);
        if (cols % MT_Q8_BLOCK != 0) {
            mt_set_err(err, errlen, "mimi: 8-bit weights need widths in multiples of %d (a "
                       "transformer matrix is %d x %d)", MT_Q8_BLOCK, rows, cols);
            return -1;
        }
        total += (size_t)rows * cols;
    }
    total *= 2 * (size_t)L;
    const mimi_conv *convs[MAX_Q8_CONVS];
    const int nconv = q8_convs(m, convs);
    for (int i = 0; i < nconv; i++) {
        size_t r, K;
        conv_shape(convs[i], &r, &K);
        total += r * K;
    }
    const int qd = m->c.q_dimension, bins = m->c.bins;
    const int cbs = qd % MT_Q8_BLOCK == 0 && qd / MT_Q8_BLOCK <= MIMI_Q8_CB_BLOCKS
                        ? m->c.n_q_used : 0;   /* codebooks copied */
    total += (size_t)cbs * bins * qd;
    mimi_q8 *q = mt_calloc_or_err(1, sizeof *q, err, errlen, "mimi q8");
    if (!q)
        return -1;
    q->layers = L;
    q->mat = calloc((size_t)2 * L * MIMI_Q8_MATS, sizeof *q->mat);
    q->bytes = mimi_alloc_streamed(total);
    q->scales = mimi_alloc_streamed(total / MT_Q8_BLOCK * sizeof(float));
    q->nbytes = total + total / MT_Q8_BLOCK * sizeof(float);
    if (!q->mat || !q->bytes || !q->scales) {
        mt_set_err(err, errlen, "mimi: cannot allocate the 8-bit weights (%zu bytes)", q->nbytes);
        mimi_q8_free(q);
        return -1;
    }
    size_t o = 0;
    for (int dec = 0; dec < 2; dec++)
        for (int li = 0; li < L; li++)
            for (int which = 0; which < MIMI_Q8_MATS; which++) {
                const float *W = layer_mat(m, dec ? &m->dtr[li] : &m->etr[li], which, &rows, &cols);
                const int lay = mt_q8_layout_for(cols, MT_Q8_LANES);
                if (mt_q8_pack(lay, q->bytes + o, q->scales + o / MT_Q8_BLOCK, W, (size_t)rows,
                               cols)) {
                    mimi_q8_free(q);
                    mt_set_err(err, errlen, "mimi: a %s transformer weight (layer %d) is not finite",
                               dec ? "decoder" : "encoder", li);
                    return -1;
                }
                mimi_q8mat *mq = &q->mat[((size_t)dec * L + li) * MIMI_Q8_MATS + which];
                mq->q = q->bytes + o;
                mq->s = q->scales + o / MT_Q8_BLOCK;
                mq->layout = lay;
                o += (size_t)rows * cols;
            }
    for (int i = 0; i < nconv; i++) {
        size_t r, K;
        conv_shape(convs[i], &r, &K);
        const int lay = mt_q8_layout_for((int)K, MT_Q8_LANES);
        if (pack_conv(convs[i], lay, q->bytes + o, q->scales + o / MT_Q8_BLOCK)) {
            mimi_q8_free(q);
            mt_set_err(err, errlen, "mimi: a convolution's weight (%d -> %d, k %d) is not finite, "
                       "or no memory to pack it", convs[i]->cin, convs[i]->cout, convs[i]->k);
            return -1;
        }
        q->conv[i] = convs[i];
        q->convmat[i] = (mimi_q8mat){ q->bytes + o, q->scales + o / MT_Q8_BLOCK, lay };
        q->max_k = K > q->max_k ? K : q->max_k;
        q->max_n = r > q->max_n ? r : q->max_n;
        o += r * K;
    }
    q->nconv = nconv;
    if (cbs && make_codebooks(m, q, o, err, errlen)) {
        mimi_q8_free(q);
        return -1;
    }
    *out = q;
    return 0;
}

const mimi_q8mat *mimi_q8_mat(const mimi_q8 *q, int dec, int li, int which)
{
    return &q->mat[((size_t)(dec != 0) * q->layers + li) * MIMI_Q8_MATS + which];
}

const mimi_q8mat *mimi_q8_conv(const mimi_q8 *q, const mimi_conv *cv)
{
    for (int i = 0; q && i < q->nconv; i++)
        if (q->conv[i] == cv)
            return &q->convmat[i];
    return NULL;
}

const mimi_q8cb *mimi_q8_codebook(const mimi_q8 *q, int group, int i)
{
    return q && i < q->ncb[group != 0] ? &q->cb[group != 0][i] : NULL;
}

/* The nearest centroid to x: the 8-bit dots first, each within a bound
 * of the true dot, then the few centroids those cannot tell apart
 * compared in double. The bound (cpu_q8_vnni.c's rounding: x_k read
 * back within sx/2, sx = max|x| / 127; w_k within sw/2): |x.w - dot8| <=
 * sum_b sw (sum_{k in b}|x_k| / 2 + sum_{k in b}|q_k| sx / 2), plus the
 * fp32 sums' rounding, which a 2e-6 max|x| sw sum|q| term covers (each
 * block's term is at most max|x| sw sum|q|, summed in at most 32 float
 * additions: 2e-6 > 32 * 2^-24); taken with each block's largest sw and
 * sw sum|q| over the rows, so one margin serves every centroid (and
 * 1e-6 of the largest distance term for the distances' own rounding). A
 * distance n2 - 2 dot8 is then within the margin of the true one, and a
 * centroid whose distance is more than twice the margin above the
 * smallest cannot be the nearest. */
int mimi_q8_nearest(const mimi_q8cb *cb, const float *cbf, const float *n2, int bins, int qd,
                    const float *x, const float *dots, float *work, int *ncand)
{
    const int nb = qd / MT_Q8_BLOCK;
    float E = 0;
    for (int b = 0; b < nb && b < MIMI_Q8_CB_BLOCKS; b++) {
        float s1 = 0, mx = 0;
        for (int k = b * MT_Q8_BLOCK; k < (b + 1) * MT_Q8_BLOCK; k++) {
            s1 += fabsf(x[k]);
            mx = fabsf(x[k]) > mx ? fabsf(x[k]) : mx;
        }
        E += cb->swmax[b] * s1 * 0.5f + cb->swamax[b] * (mx / 127.0f * 0.5f + 2e-6f * mx);
    }
    float dmin = INFINITY, big = 0;
    for (int e = 0; e < bins; e++) {   /* work[e]: centroid e's 8-bit distance */
        work[e] = n2[e] - 2.0f * dots[e];
        dmin = work[e] < dmin ? work[e] : dmin;
        float t = fabsf(n2[e]) + 2.0f * fabsf(dots[e]);
        big = t > big ? t : big;
    }
    const float margin = (2.0f * E + 1e-6f * big) * 1.001f, cut = dmin + 2.0f * margin;
    int best = 0, n = 0;
    double bd = INFINITY;
    for (int e = 0; e < bins; e++) {
        if (work[e] > cut)
            continue;
        double dot = 0;
        for (int k = 0; k < qd; k++)
            dot += (double)cbf[(size_t)e * qd + k] * x[k];
        double dist = (double)n2[e] - 2.0 * dot;
        n++;
        if (dist < bd) {
            bd = dist;
            best = e;
        }
    }
    if (ncand)
        *ncand = n;
    return best;
}

void mimi_q8_conv_max(const mimi_q8 *q, size_t *max_k, size_t *max_n)
{
    *max_k = q ? q->max_k : 0;
    *max_n = q ? q->max_n : 0;
}

size_t mimi_q8_bytes(const mimi_q8 *q) { return q ? q->nbytes : 0; }

void mimi_q8_free(mimi_q8 *q)
{
    if (!q)
        return;
    free(q->mat);
    free(q->bytes);
    free(q->scales);
    free(q);
}
