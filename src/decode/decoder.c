/* decoder.c: the backend-neutral decoder: picks the backend from the
 * device (CPU, CUDA when built with it and a GPU is there, the simulated
 * device), sizes and creates the KV pool, checks every step's inputs
 * (batch, room in the cache, token ids), then dispatches to the backend
 * and advances the sessions' lengths.
 */
#include "util/errmsg.h"
#include "decode/decoder.h"
#include "decode/backend.h"
#include "decode/cpu_q8.h"
#include "gpu/cuda_module.h"
#include "util/tpool.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mt_decoder {
    const mt_model *m;
    mt_decoder_opts o;
    mt_kv_pool     *pool;
    mt_backend     *be;
    /* host threads for host work beside the step (the depformer, the
     * sampling) where the backend has none of its own (sim, CUDA):
     * mt_decoder_host_threads; host.th NULL until started */
    mt_pool         host;
    char            note[1024];
};

size_t mt_decoder_kv_elem_bytes(const mt_decoder *d) { return d->be->kv_elem_bytes; }

static void add_note(mt_decoder *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_note(mt_decoder *d, const char *fmt, ...)
{
    size_t n = strlen(d->note);
    if (n && n + 2 < sizeof d->note) {
        memcpy(d->note + n, "; ", 3);
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->note + n, sizeof d->note - n, fmt, ap);
    va_end(ap);
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* A pool the caller left to the backend (kv_budget_auto) on a backend that
 * knows its room: that share of it, said in the note with what it holds. */
static void auto_budget(mt_decoder *d, mt_kv_params *kp)
{
    const mt_backend *be = d->be;
    if (!d->o.kv_budget_auto || be->kv_room_bytes == 0)
        return;
    kp->budget_bytes = be->kv_room_bytes / 100 * MT_DECODER_AUTO_POOL_PCT;
    mt_kv_params pb = *kp;
    pb.position_bytes = mt_decoder_position_bytes(&d->m->cfg, be->kv_elem_bytes);
    size_t bound = mt_kv_bound_bytes(&pb);
    if (kp->policy == MT_KV_WINDOW && bound > 0)
        add_note(d, "kv pool %.2f GiB (%d%% of the %.2f GiB free on %s after a %.2f GiB reserve): %zu bounded sessions of %.2f GiB (S=%d W=%d)",
                 gib(kp->budget_bytes), MT_DECODER_AUTO_POOL_PCT, gib(be->kv_room_bytes),
                 be->name, gib(be->kv_reserve_bytes), kp->budget_bytes / bound, gib(bound),
                 kp->sink, kp->window);
    else
        add_note(d, "kv pool %.2f GiB (%d%% of the %.2f GiB free on %s after a %.2f GiB reserve): %zu positions",
                 gib(kp->budget_bytes), MT_DECODER_AUTO_POOL_PCT, gib(be->kv_room_bytes),
                 be->name, gib(be->kv_reserve_bytes),
                 pb.position_bytes ? kp->budget_bytes / pb.position_bytes : 0);
}

/* The constructor of a device (backend.h) that needs no probing: the CPU
 * and the simulated device (CUDA and auto go through try_cuda first). */
static mt_backend_create_fn constructor(mt_device dev)
{
    return dev == MT_DEV_SIM ? mt_sim_backend_create : mt_cpu_backend_create;
}

/* The backend first, then the pool in its K/V dtype (backend.h), then what
 * the backend has to say in the note. */
static int make_backend(mt_decoder *d, mt_backend_create_fn create, char *err,
                        size_t errlen)
{
    if (create(d->m, &d->o, &d->be, err, errlen))
        return -1;
    mt_kv_params kp = d->o.kv;
    size_t note_len = strlen(d->note);
    auto_budget(d, &kp);
    if (mt_backend_pool_create(d->be, &d->m->cfg, &kp, &d->pool, err, errlen)) {
        d->note[note_len] = '\0';
        d->be->destroy(d->be);
        d->be = NULL;
        return -1;
    }
    d->o.kv = *mt_kv_pool_params(d->pool);
    if (d->be->note && d->be->note[0])
        add_note(d, "%s", d->be->note);
    return 0;
}

/* The checked options and an empty decoder, or NULL with err. */
static mt_decoder *decoder_new(const mt_model *m, const mt_decoder_opts *o,
                               char *err, size_t errlen)
{
    if (o->max_batch < 1 || o->max_batch > 1 << 16) {
        mt_set_err(err, errlen, "decoder: max_batch %d outside 1..65536", o->max_batch);
        return NULL;
    }
    if (o->device != MT_DEV_AUTO && o->device != MT_DEV_CPU && o->device != MT_DEV_CUDA &&
        o->device != MT_DEV_SIM) {
        mt_set_err(err, errlen, "decoder: unknown device %d", (int)o->device);
        return NULL;
    }
    if ((unsigned)o->kv_dtype > MT_FMT_F16 || (unsigned)o->weights > MT_FMT_Q8) {
        mt_set_err(err, errlen, "decoder: unknown number format (kv %d, weights %d)",
                 (int)o->kv_dtype, (int)o->weights);
        return NULL;
    }
    mt_decoder *d = mt_calloc_or_err(1, sizeof *d, err, errlen, "decoder");
    if (!d)
        return NULL;
    d->m = m;
    d->o = *o;
    return d;
}

/* --device cuda or auto: 1 with the CUDA backend made, 0 to go on with the
 * CPU (auto only; the note says why), -1 with err. */
static int try_cuda(mt_decoder *d, char *err, size_t errlen)
{
    int want = d->o.device == MT_DEV_CUDA;
#ifdef MT_HAVE_CUDA
    char why[200] = "";
    /* auto: no device node, no probe (the probe maps ~150 MB of CUDA
     * libraries); an explicit cuda asks the runtime whatever /dev holds */
    int present = want || mt_cuda_device_present(why, sizeof why);
    if (present && mt_cuda_available(why, sizeof why)) {
        if (make_backend(d, mt_cuda_backend_create, err, errlen) == 0)
            return 1;
        if (want)
            return -1;
        snprintf(d->note, sizeof d->note, "CUDA backend failed (%s): using CPU", err);
        return 0;
    }
    if (want) {
        mt_set_err(err, errlen, "decoder: CUDA requested but unavailable: %s", why);
        return -1;
    }
    snprintf(d->note, sizeof d->note, "CUDA unavailable (%s): using CPU", why);
#else
    if (want) {
        mt_set_err(err, errlen, "decoder: CUDA requested but this build is built without CUDA (no nvcc at build time)");
        return -1;
    }
    snprintf(d->note, sizeof d->note, "built without CUDA: using CPU");
#endif
    return 0;
}

int mt_decoder_create(const mt_model *m, const mt_decoder_opts *o,
                      mt_decoder **out, char *err, size_t errlen)
{
    *out = NULL;
    mt_decoder *d = decoder_new(m, o, err, errlen);
    if (!d)
        return -1;
    mt_device dev = o->device;
    if (dev == MT_DEV_AUTO || dev == MT_DEV_CUDA) {
        int rc = try_cuda(d, err, errlen);
        if (rc != 0) {
            if (rc < 0)
                free(d);
            else
                *out = d;
            return rc < 0 ? -1 : 0;
        }
        dev = MT_DEV_CPU;
    }
    if (make_backend(d, constructor(dev), err, errlen) != 0) {
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

int mt_decoder_create_with(const mt_model *m, const mt_decoder_opts *o,
                           mt_backend_create_fn create, mt_decoder **out,
                           char *err, size_t errlen)
{
    *out = NULL;
    mt_decoder *d = decoder_new(m, o, err, errlen);
    if (!d)
        return -1;
    if (make_backend(d, create ? create : mt_cpu_backend_create, err, errlen) != 0) {
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

void mt_decoder_free(mt_decoder *d)
{
    if (!d)
        return;
    mt_pool_stop(&d->host);
    if (d->be)
        d->be->destroy(d->be);
    mt_kv_pool_free(d->pool);
    free(d);
}

mt_kv_pool *mt_decoder_pool(mt_decoder *d) { return d->pool; }
const char *mt_decoder_backend_name(const mt_decoder *d) { return d->be->name; }
const mt_model *mt_decoder_model(const mt_decoder *d) { return d->m; }
double mt_decoder_attention_ms(const mt_decoder *d) { return d->be->attention_ms; }

void mt_decoder_wake(mt_decoder *d)
{
    if (d && d->be->wake)
        d->be->wake(d->be);
    if (d && d->host.th)
        mt_pool_wake(&d->host);
}
const char *mt_decoder_note(const mt_decoder *d) { return d->note; }

void mt_decoder_parallel(mt_decoder *d, mt_par_fn fn, void *ctx)
{
    if (d->be->parallel)
        d->be->parallel(d->be, fn, ctx);
    else if (d->host.th)
        mt_pool_run(&d->host, fn, ctx);
    else
        fn(ctx, 0, 1);
}

int mt_decoder_threads(const mt_decoder *d)
{
    return d->be->parallel ? d->be->par_threads : d->host.th ? d->host.n : 1;
}

int mt_decoder_host_threads(mt_decoder *d, char *err, size_t errlen)
{
    if (d->be->parallel || d->host.th)
        return 0;
    long T = d->o.threads > 0 ? d->o.threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (T > 256)
        T = 256;
    if (T < 2)
        return 0;
    if (mt_pool_start(&d->host, (int)T, MT_DECODER_SPIN_NS, err, errlen)) {
        memset(&d->host, 0, sizeof d->host);
        return -1;
    }
    return 0;
}

int mt_decoder_weights_f16_rows(const mt_decoder *d) { return d->be->weights_f16_rows; }
mt_num_format mt_decoder_weights_format(const mt_decoder *d) { return d->o.weights; }

int mt_decoder_host_weight_rows(const mt_decoder *d)
{
    if (d->be->weights_f16_rows > 0)
        return d->be->weights_f16_rows;
    if (d->o.device == MT_DEV_CPU || d->o.weights == MT_FMT_F32)
        return 0;
    if (d->o.weights_f16_rows > 0)
        return d->o.weights_f16_rows;
    return d->o.weights == MT_FMT_Q8 && mt_q8_every_row() ? MT_Q8_ALL_ROWS
                                                          : MT_WEIGHTS_ROWS_DEFAULT;
}

const char *mt_decoder_sim_label(const mt_decoder *d)
{
    return d ? d->be->sim_label : NULL;
}

int mt_decoder_sim_take(mt_decoder *d, double *pred_ms, double *noise_ms)
{
    *pred_ms = *noise_ms = 0;
    if (!d || !d->be->take_modeled)
        return 0;
    d->be->take_modeled(d->be, pred_ms, noise_ms);
    return 1;
}

/* Inputs for rows rows: the adapter exists and every token id is in range. */
static int check_io(const mt_decoder *d, int rows, const mt_step_io *io, char *err,
                    size_t errlen)
{
    const mt_config *c = &d->m->cfg;
    if (!io || (!!io->pcm_in) + (!!io->tokens_in) + (!!io->x_in) != 1) {
        mt_set_err(err, errlen, "decoder: a step takes exactly one of pcm_in, tokens_in, x_in");
        return -1;
    }
    if (io->pcm_in && !d->m->cfg.has_audio) {
        mt_set_err(err, errlen, "decoder: model %s has no audio adapter", c->name);
        return -1;
    }
    if (io->positions) {
        if (d->o.kv.policy == MT_KV_WINDOW && d->o.kv.rope == MT_ROPE_CACHE) {
            mt_set_err(err, errlen, "decoder: positions given with --rope cache (a window "
                       "session's rotary positions are its slots there): use --rope "
                       "absolute or the full policy");
            return -1;
        }
        for (int r = 0; r < rows; r++)
            if (io->positions[r] < 0 || io->positions[r] >= INT32_MAX - 1) {
                mt_set_err(err, errlen, "decoder: position %lld (row %d) outside 0..2^31-2",
                           (long long)io->positions[r], r);
                return -1;
            }
    }
    if (io->tokens_in) {
        if (!d->m->cfg.has_tokens) {
            mt_set_err(err, errlen, "decoder: model %s has no token adapter", c->name);
            return -1;
        }
        for (int r = 0; r < rows; r++)
            if (io->tokens_in[r] < 0 || io->tokens_in[r] >= c->vocab) {
                mt_set_err(err, errlen, "decoder: token id %d (row %d) outside 0..%d",
                         (int)io->tokens_in[r], r, c->vocab - 1);
                return -1;
            }
    }
    return 0;
}

int mt_decoder_step(mt_decoder *d, int B, mt_kv_seq *const *seqs,
                    const mt_step_io *io, char *err, size_t errlen)
{
    if (B < 1 || B > d->o.max_batch) {
        mt_set_err(err, errlen, "decoder: batch of %d outside 1..%d", B, d->o.max_batch);
        return -1;
    }
    for (int i = 0; i < B; i++) {
        if (!seqs[i]) {
            mt_set_err(err, errlen, "decoder: session %d of the batch is NULL", i);
            return -1;
        }
        if (!mt_kv_has_room(d->pool, seqs[i])) {
            mt_set_err(err, errlen, "decoder: session %d (kv seq %d) has no room for position %lld: mt_kv_reserve first",
                     i, seqs[i]->id, (long long)seqs[i]->len);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i]) {
                mt_set_err(err, errlen, "decoder: kv seq %d appears twice in one batch",
                         seqs[i]->id);
                return -1;
            }
    }
    if (check_io(d, B, io, err, errlen))
        return -1;
    if (d->be->step(d->be, B, seqs, io, err, errlen))
        return -1;
    for (int i = 0; i < B; i++)
        seqs[i]->len++;
    return 0;
}

int mt_decoder_prefill(mt_decoder *d, mt_kv_seq *seq, int n, const mt_step_io *io,
                       char *err, size_t errlen)
{
    if (n < 0 || !seq) {
        mt_set_err(err, errlen, "decoder: prefill of %d positions", n);
        return -1;
    }
    if (n == 0)
        return 0;
    const mt_kv_params *p = mt_kv_pool_params(d->pool);
    int room = p->policy == MT_KV_WINDOW
                   ? mt_kv_has_room(d->pool, seq)
                   : (int64_t)seq->nblocks * MT_KV_BLOCK >= seq->len + n;
    if (!room) {
        mt_set_err(err, errlen, "decoder: kv seq %d has no room for %d positions from %lld: mt_kv_reserve first",
                 seq->id, n, (long long)seq->len);
        return -1;
    }
    if (check_io(d, n, io, err, errlen))
        return -1;
    if (io->positions) {
        mt_set_err(err, errlen, "decoder: a prefill takes no positions (it recomputes "
                   "slot positions)");
        return -1;
    }
    if (d->be->prefill(d->be, seq, n, io, err, errlen))
        return -1;
    seq->len += n;
    return 0;
}
