/* mimi_engine.c: the codec's backend switch (mimi_engine.h): the CPU
 * engine holds a mimi_state per slot and a mimi_batch; the CUDA one
 * forwards to mimi_cuda_ops, found in the CUDA module on first use. The
 * arguments are checked here, the same for both. */
#include "codec/mimi_engine.h"
#include "codec/mimi_cuda.h"
#include "codec/mimi_impl.h"
#include "gpu/cuda_module.h"
#include "util/errmsg.h"

#include <stdlib.h>
#include <string.h>

struct mimi_engine {
    const mimi_model *m;
    mimi_backend be;
    int max_batch, max_sessions;
    int64_t *enc_frames, *dec_frames;   /* [max_sessions] */
    int *seen;                           /* [max_sessions]: distinct-slot check */
    /* CPU */
    mimi_state **st;                     /* [max_sessions] */
    mimi_state **call;                   /* [max_batch]: this call's states */
    mimi_batch *w;
    size_t cpu_bytes;
    /* CUDA */
    const mimi_cuda_ops *ops;
    mimi_cuda *g;
};

int mimi_backend_parse(const char *s, mimi_backend *out, char *err, size_t errlen)
{
    if (s && strcmp(s, "cpu") == 0) {
        *out = MIMI_BACKEND_CPU;
        return 0;
    }
    if (s && strcmp(s, "cuda") == 0) {
        *out = MIMI_BACKEND_CUDA;
        return 0;
    }
    mt_set_err(err, errlen, "codec backend '%s': want cpu or cuda", s ? s : "(null)");
    return -1;
}

const char *mimi_backend_name(mimi_backend b) { return b == MIMI_BACKEND_CUDA ? "cuda" : "cpu"; }

void mimi_engine_free(mimi_engine *e)
{
    if (!e)
        return;
    if (e->st)
        for (int i = 0; i < e->max_sessions; i++)
            mimi_state_free(e->st[i]);
    free(e->st);
    free(e->call);
    mimi_batch_free(e->w);
    if (e->g)
        e->ops->destroy(e->g);
    free(e->enc_frames);
    free(e->dec_frames);
    free(e->seen);
    free(e);
}

static int open_cuda(mimi_engine *e, char *err, size_t errlen)
{
#ifdef MT_HAVE_CUDA
    mimi_cuda_ops_get_fn get = (mimi_cuda_ops_get_fn)mt_cuda_module_sym(MIMI_CUDA_OPS_SYM, err, errlen);
    if (!get)
        return -1;
    const mimi_cuda_ops *ops = get();
    if (!ops || ops->abi != MIMI_CUDA_ABI || ops->model_size != sizeof(struct mimi_model)) {
        mt_set_err(err, errlen, "mimi: the CUDA module's codec is not of this build (abi %d, want %d)",
                   ops ? ops->abi : -1, MIMI_CUDA_ABI);
        return -1;
    }
    e->ops = ops;
    return ops->create(e->m, e->max_batch, e->max_sessions, &e->g, err, errlen);
#else
    (void)e;
    mt_set_err(err, errlen, "mimi: built without CUDA (no nvcc at build time): no cuda codec backend");
    return -1;
#endif
}

int mimi_engine_new(const mimi_model *m, mimi_backend be, int max_batch, int max_sessions,
                    mimi_engine **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!m || max_batch < 1 || max_batch > 4096 || max_sessions < 1 || max_sessions > 65536) {
        mt_set_err(err, errlen, "mimi engine: batch %d / sessions %d out of range (1..4096 / 1..65536)",
                   max_batch, max_sessions);
        return -1;
    }
    mimi_engine *e = mt_calloc_or_err(1, sizeof *e, err, errlen, "mimi engine");
    if (!e)
        return -1;
    e->m = m;
    e->be = be;
    e->max_batch = max_batch;
    e->max_sessions = max_sessions;
    e->enc_frames = calloc((size_t)max_sessions, sizeof *e->enc_frames);
    e->dec_frames = calloc((size_t)max_sessions, sizeof *e->dec_frames);
    e->seen = calloc((size_t)max_sessions, sizeof *e->seen);
    if (!e->enc_frames || !e->dec_frames || !e->seen) {
        mt_set_err(err, errlen, "mimi engine: out of memory");
        mimi_engine_free(e);
        return -1;
    }
    if (be == MIMI_BACKEND_CUDA) {
        if (open_cuda(e, err, errlen) != 0) {
            mimi_engine_free(e);
            return -1;
        }
        *out = e;
        return 0;
    }
    e->st = calloc((size_t)max_sessions, sizeof *e->st);
    e->call = calloc((size_t)max_batch, sizeof *e->call);
    if (!e->st || !e->call) {
        mt_set_err(err, errlen, "mimi engine: out of memory");
        mimi_engine_free(e);
        return -1;
    }
    for (int i = 0; i < max_sessions; i++)
        if (!(e->st[i] = mimi_state_new(m, err, errlen))) {
            mimi_engine_free(e);
            return -1;
        }
    if (!(e->w = mimi_batch_new(m, max_batch, err, errlen))) {
        mimi_engine_free(e);
        return -1;
    }
    e->cpu_bytes = (size_t)max_sessions * mimi_state_bytes(m) + mimi_batch_bytes(e->w);
    *out = e;
    return 0;
}

mimi_backend mimi_engine_backend(const mimi_engine *e) { return e->be; }

static int bad_slot(const mimi_engine *e, int slot, char *err, size_t errlen)
{
    if (slot < 0 || slot >= e->max_sessions) {
        mt_set_err(err, errlen, "mimi engine: slot %d outside 0..%d", slot, e->max_sessions - 1);
        return 1;
    }
    return 0;
}

int mimi_engine_reset(mimi_engine *e, int slot, char *err, size_t errlen)
{
    if (bad_slot(e, slot, err, errlen))
        return -1;
    if (e->g) {
        if (e->ops->reset(e->g, slot, err, errlen) != 0)
            return -1;
    } else {
        mimi_state_reset(e->m, e->st[slot]);
    }
    e->enc_frames[slot] = e->dec_frames[slot] = 0;
    return 0;
}

/* B in range, slots in range and distinct. */
static int check_slots(mimi_engine *e, const int *slot, int B, const void *in, const void *out,
                       char *err, size_t errlen)
{
    if (!slot || !in || !out) {
        mt_set_err(err, errlen, "mimi engine: NULL argument");
        return -1;
    }
    if (B < 1 || B > e->max_batch) {
        mt_set_err(err, errlen, "mimi engine: batch of %d sessions (1..%d)", B, e->max_batch);
        return -1;
    }
    int rc = 0;
    for (int b = 0; b < B && rc == 0; b++) {
        if (bad_slot(e, slot[b], err, errlen))
            rc = -1;
        else if (e->seen[slot[b]]++) {
            mt_set_err(err, errlen, "mimi engine: slot %d twice in one batch", slot[b]);
            rc = -1;
        }
    }
    for (int b = 0; b < B; b++)
        if (slot[b] >= 0 && slot[b] < e->max_sessions)
            e->seen[slot[b]] = 0;
    return rc;
}

int mimi_engine_encode(mimi_engine *e, const int *slot, int B, const float *pcm, int32_t *codes,
                       char *err, size_t errlen)
{
    if (check_slots(e, slot, B, pcm, codes, err, errlen) != 0)
        return -1;
    int rc;
    if (e->g) {
        rc = e->ops->encode(e->g, slot, B, pcm, codes, err, errlen);
    } else {
        for (int b = 0; b < B; b++)
            e->call[b] = e->st[slot[b]];
        rc = mimi_encode(e->m, e->w, e->call, B, pcm, codes, err, errlen);
    }
    if (rc == 0)
        for (int b = 0; b < B; b++)
            e->enc_frames[slot[b]]++;
    return rc;
}

int mimi_engine_decode(mimi_engine *e, const int *slot, int B, const int32_t *codes, float *pcm,
                       char *err, size_t errlen)
{
    if (check_slots(e, slot, B, codes, pcm, err, errlen) != 0)
        return -1;
    const mimi_config *c = &e->m->c;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < c->n_q_used; i++) {
            int32_t v = codes[(size_t)b * c->n_q_used + i];
            if (v < 0 || v >= c->bins) {
                mt_set_err(err, errlen, "mimi: session %d codebook %d: code %d outside 0..%d", b, i,
                           (int)v, c->bins - 1);
                return -1;
            }
        }
    int rc;
    if (e->g) {
        rc = e->ops->decode(e->g, slot, B, codes, pcm, err, errlen);
    } else {
        for (int b = 0; b < B; b++)
            e->call[b] = e->st[slot[b]];
        rc = mimi_decode(e->m, e->w, e->call, B, codes, pcm, err, errlen);
    }
    if (rc == 0)
        for (int b = 0; b < B; b++)
            e->dec_frames[slot[b]]++;
    return rc;
}

int64_t mimi_engine_frames_encoded(const mimi_engine *e, int slot)
{
    return slot >= 0 && slot < e->max_sessions ? e->enc_frames[slot] : -1;
}

int64_t mimi_engine_frames_decoded(const mimi_engine *e, int slot)
{
    return slot >= 0 && slot < e->max_sessions ? e->dec_frames[slot] : -1;
}

size_t mimi_engine_bytes(const mimi_engine *e) { return e->g ? e->ops->device_bytes(e->g) : e->cpu_bytes; }
