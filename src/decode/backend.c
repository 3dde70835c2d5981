/* backend.c: what the decode backends share (see backend.h): the model
 * checks of their constructors, the pool's creation from the backend's
 * K/V element size and limit, and the slicing of a prefill into chunks.
 */
#include "util/errmsg.h"
#include "decode/backend.h"

#include <stdio.h>
#include <stdlib.h>

int mt_backend_check_model(const mt_model *m, const mt_decoder_opts *o, const char *who,
                           char *err, size_t errlen)
{
    const mt_config *c = &m->cfg;
    if (c->heads <= 0 || c->kv_heads <= 0 || c->heads % c->kv_heads || c->head_dim <= 0 ||
        c->head_dim % 2 || c->layers <= 0 || c->hidden <= 0 || c->ffn <= 0) {
        mt_set_err(err, errlen, "%s: model %s has an unusable shape (heads %d, kv_heads %d, head_dim %d)",
                 who, c->name, c->heads, c->kv_heads, c->head_dim);
        return -1;
    }
    /* the decoder's limit; CUDA grids tile their rows past 65,535 (attention.cu) */
    if (o->max_batch < 1 || o->max_batch > 65536) {
        mt_set_err(err, errlen, "%s: max_batch %d outside 1..65536", who, o->max_batch);
        return -1;
    }
    return 0;
}

mt_backend *mt_backend_alloc(size_t impl_size, const char *oom, char *err, size_t errlen)
{
    mt_backend *b = calloc(1, sizeof *b);
    void *impl = calloc(1, impl_size);
    if (!b || !impl) {
        free(b);
        free(impl);
        mt_set_err(err, errlen, "%s", oom);
        return NULL;
    }
    b->impl = impl;
    return b;
}

int mt_backend_rows(const mt_decoder_opts *o)
{
    return o->max_batch > MT_BACKEND_PREFILL_CHUNK ? o->max_batch : MT_BACKEND_PREFILL_CHUNK;
}

int mt_backend_pool_create(mt_backend *be, const mt_config *c, const mt_kv_params *kv,
                           mt_kv_pool **out, char *err, size_t errlen)
{
    *out = NULL;
    if (be->kv_elem_bytes == 0) {
        mt_set_err(err, errlen, "%s: backend reports no K/V element size", be->name);
        return -1;
    }
    mt_kv_params kp = *kv;
    if (be->kv_max_bytes && kp.budget_bytes == 0)
        kp.budget_bytes = be->kv_max_bytes;
    if (be->kv_max_bytes && kp.budget_bytes > be->kv_max_bytes) {
        mt_set_err(err, errlen, "%s: a K/V budget of %zu bytes is over the %zu the device has",
                   be->name, kp.budget_bytes, be->kv_max_bytes);
        return -1;
    }
    kp.position_bytes = mt_decoder_position_bytes(c, be->kv_elem_bytes);
    mt_kv_pool *pool = NULL;
    if (mt_kv_pool_create(&kp, &pool, err, errlen))
        return -1;
    be->position_bytes = kp.position_bytes;
    if (be->attach_pool(be, pool, err, errlen)) {
        mt_kv_pool_free(pool);
        return -1;
    }
    *out = pool;
    return 0;
}

int mt_backend_prefill_chunks(mt_backend *be, const mt_config *c, mt_kv_seq *seq, int n,
                              const mt_step_io *io, int max_rows, int64_t cap,
                              mt_prefill_chunk_fn run, char *err, size_t errlen)
{
    for (int done = 0; done < n;) {
        int64_t base = seq->len + done;
        int R = n - done < max_rows ? n - done : max_rows;
        if (base + R > cap)
            R = base < cap ? (int)(cap - base) : 1;
        mt_step_io sub = { 0 };
        if (io->pcm_in)
            sub.pcm_in = io->pcm_in + (size_t)done * c->frame_samples;
        if (io->pcm_out)
            sub.pcm_out = io->pcm_out + (size_t)done * c->frame_samples;
        if (io->tokens_in)
            sub.tokens_in = io->tokens_in + done;
        if (io->logits)
            sub.logits = io->logits + (size_t)done * c->vocab;
        if (io->x_in)
            sub.x_in = io->x_in + (size_t)done * c->hidden;
        if (io->h_out)
            sub.h_out = io->h_out + (size_t)done * c->hidden;
        if (run(be, seq, base, R, &sub, err, errlen))
            return -1;
        done += R;
    }
    return 0;
}
