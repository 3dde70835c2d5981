/* decoder.c: the backend-neutral decoder: picks the backend (CPU, or CUDA
 * when built with it and a GPU is there), sizes and creates the KV pool,
 * checks every step's inputs (batch, room in the cache, token ids), then
 * dispatches to the backend and advances the sessions' lengths.
 */
#include "util/errmsg.h"
#include "decode/decoder.h"
#include "decode/backend.h"
#include "decode/backend_sim.h"

#include <cblas.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct mt_decoder {
    const mt_model *m;
    mt_decoder_opts o;
    mt_kv_pool     *pool;
    mt_backend     *be;
    mt_sim         *sim;       /* MT_DEV_SIM: the cost model the backend
                                  waits on (freed after the backend) */
    char            note[1024];
};

size_t mt_decoder_position_bytes(const mt_config *c, size_t elem_bytes)
{
    return (size_t)c->layers * 2 * c->kv_heads * c->head_dim * elem_bytes;
}

size_t mt_num_format_bytes(mt_num_format f)
{
    return f == MT_FMT_F16 ? 2 : sizeof(float);
}

const char *mt_num_format_name(mt_num_format f)
{
    return f == MT_FMT_F16 ? "f16" : "f32";
}

int mt_num_format_parse(const char *s, mt_num_format *out)
{
    if (!strcmp(s, "f32"))
        *out = MT_FMT_F32;
    else if (!strcmp(s, "f16"))
        *out = MT_FMT_F16;
    else
        return -1;
    return 0;
}

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

/* The backend first, then the pool in its K/V dtype (backend.h). create:
 * the backend's constructor, NULL for the one called name. */
static int make_backend(mt_decoder *d, const char *name,
                        mt_backend_create_fn create, char *err, size_t errlen)
{
    if (!create) {
        create = mt_cpu_backend_create;
#ifdef MT_HAVE_CUDA
        if (strcmp(name, "cuda") == 0)
            create = mt_cuda_backend_create;
#endif
    }
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
    return 0;
}

/* OpenBLAS picks its kernels from cpuid at load time; in some virtual
 * machines it fails to recognise the CPU and falls back to its SSE3
 * (Prescott) kernels, several times slower than the AVX2/AVX-512 ones the
 * CPU has. It can only be told before it loads (OPENBLAS_CORETYPE), so say
 * so where the caller can print it. */
static void blas_note(mt_decoder *d)
{
#if defined(__x86_64__)
    const char *core = openblas_get_corename();
    if (!core || strcasecmp(core, "prescott") != 0)
        return;
    const char *want = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell" : NULL;
    if (!want)
        return;
    add_note(d, "OpenBLAS chose its %s kernels on a CPU with %s: set OPENBLAS_CORETYPE=%s for the fast ones",
             core, want[0] == 'S' ? "AVX-512" : "AVX2", want);
#else
    (void)d;
#endif
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
    if ((unsigned)o->kv_dtype > MT_FMT_F16 || (unsigned)o->weights > MT_FMT_F16) {
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

/* The simulated device: its profile sets the K/V element size and, unless
 * the caller gave one, the pool's budget; the pool only keeps books, so a
 * 141 GB device costs the host a few hundred KB of block ids. */
static int make_sim(mt_decoder *d, char *err, size_t errlen)
{
    mt_sim_profile prof;
    if (mt_sim_profile_load(d->o.sim_profile, &prof, err, errlen) != 0)
        return -1;
    if (mt_sim_create(&prof, &d->m->cfg, NULL, &d->sim, err, errlen) != 0)
        return -1;
    mt_sim_set_time_scale(d->sim, d->o.sim_time_scale);
    mt_kv_params kp = d->o.kv;
    kp.position_bytes = mt_sim_position_bytes(d->sim);
    if (kp.budget_bytes == 0)
        kp.budget_bytes = mt_sim_kv_budget(d->sim);
    if (kp.budget_bytes > mt_sim_kv_budget(d->sim)) {
        mt_set_err(err, errlen, "sim: a K/V budget of %zu bytes is over the %zu the simulated device has (profile %s)",
                 kp.budget_bytes, mt_sim_kv_budget(d->sim), prof.name);
        mt_sim_free(d->sim);
        d->sim = NULL;
        return -1;
    }
    d->o.kv = kp;
    int rc = mt_kv_pool_create(&kp, &d->pool, err, errlen);
    if (rc == 0)
        rc = mt_sim_backend_create(d->sim, d->m, d->pool, d->o.max_batch,
                                   &d->be, err, errlen);
    if (rc) {
        mt_kv_pool_free(d->pool);
        d->pool = NULL;
        mt_sim_free(d->sim);
        d->sim = NULL;
        return -1;
    }
    snprintf(d->note, sizeof d->note,
             "SIMULATED device %s (profile %s: %.4g B memory, %.4g B/s, %.4g flop/s, "
             "%.4g B of weights, K/V pool %zu B%s%s): no figure from this server is a measurement",
             mt_sim_label(d->sim), prof.path, prof.memory_bytes, prof.bandwidth,
             prof.matrix_rate, mt_sim_weight_bytes(d->sim), kp.budget_bytes,
             kp.budget_bytes == mt_sim_kv_budget(d->sim) ? "" : ", set by the caller",
             mt_sim_time_scale(d->sim) != 1 ? ", time-scaled: steps wait 1/K of the model's time" : "");
    return 0;
}

int mt_decoder_create(const mt_model *m, const mt_decoder_opts *o,
                      mt_decoder **out, char *err, size_t errlen)
{
    *out = NULL;
    mt_decoder *d = decoder_new(m, o, err, errlen);
    if (!d)
        return -1;
    int rc;
    if (o->device == MT_DEV_SIM) {
        if (make_sim(d, err, errlen) != 0) {
            free(d);
            return -1;
        }
        *out = d;
        return 0;
    }
#ifdef MT_HAVE_CUDA
    if (o->device == MT_DEV_CUDA || o->device == MT_DEV_AUTO) {
        char why[200] = "";
        /* auto: no device node, no probe (the probe maps ~150 MB of CUDA
         * libraries); an explicit cuda asks the runtime whatever /dev holds */
        int present = o->device == MT_DEV_CUDA || mt_cuda_device_present(why, sizeof why);
        if (present && mt_cuda_available(why, sizeof why)) {
            rc = make_backend(d, "cuda", NULL, err, errlen);
            if (rc == 0 || o->device == MT_DEV_CUDA)
                goto done;
            snprintf(d->note, sizeof d->note, "CUDA backend failed (%s): using CPU", err);
        } else if (o->device == MT_DEV_CUDA) {
            mt_set_err(err, errlen, "decoder: CUDA requested but unavailable: %s", why);
            free(d);
            return -1;
        } else {
            snprintf(d->note, sizeof d->note, "CUDA unavailable (%s): using CPU", why);
        }
    }
#else
    if (o->device == MT_DEV_CUDA) {
        mt_set_err(err, errlen, "decoder: CUDA requested but this build is built without CUDA (no nvcc at build time)");
        free(d);
        return -1;
    }
    if (o->device == MT_DEV_AUTO)
        snprintf(d->note, sizeof d->note, "built without CUDA: using CPU");
#endif
    rc = make_backend(d, "cpu", NULL, err, errlen);
    if (rc == 0)
        blas_note(d);
#ifdef MT_HAVE_CUDA
done:
#endif
    if (rc) {
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
    if (make_backend(d, "cpu", create, err, errlen) != 0) {
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
    if (d->be)
        d->be->destroy(d->be);
    mt_sim_free(d->sim);
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
}
const char *mt_decoder_note(const mt_decoder *d) { return d->note; }

const char *mt_decoder_sim_label(const mt_decoder *d)
{
    return d && d->sim ? mt_sim_label(d->sim) : NULL;
}

int mt_decoder_sim_take(mt_decoder *d, double *pred_ms, double *noise_ms)
{
    *pred_ms = *noise_ms = 0;
    if (!d || !d->sim)
        return 0;
    mt_sim_take(d->sim, pred_ms, noise_ms);
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
    if (d->be->prefill(d->be, seq, n, io, err, errlen))
        return -1;
    seq->len += n;
    return 0;
}
