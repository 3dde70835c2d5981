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
 */
#include "codec/mimi_impl.h"
#include "decode/cpu_q8.h"
#include "util/errmsg.h"

#include <stdlib.h>

struct mimi_q8 {
    int layers;
    mimi_q8mat *mat;   /* [2][layers][MIMI_Q8_MATS] */
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
                if (mt_q8_pack(q->bytes + o, q->scales + o / MT_Q8_BLOCK, W, (size_t)rows, cols)) {
                    mimi_q8_free(q);
                    mt_set_err(err, errlen, "mimi: a %s transformer weight (layer %d) is not finite",
                               dec ? "decoder" : "encoder", li);
                    return -1;
                }
                mimi_q8mat *mq = &q->mat[((size_t)dec * L + li) * MIMI_Q8_MATS + which];
                mq->q = q->bytes + o;
                mq->s = q->scales + o / MT_Q8_BLOCK;
                o += (size_t)rows * cols;
            }
    *out = q;
    return 0;
}

const mimi_q8mat *mimi_q8_mat(const mimi_q8 *q, int dec, int li, int which)
{
    return &q->mat[((size_t)(dec != 0) * q->layers + li) * MIMI_Q8_MATS + which];
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
